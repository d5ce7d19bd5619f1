"""Provenance: every pinned version maps to an upstream commit, and code references
become permalinks at that commit (or stay text when the file is not certain)."""
from __future__ import annotations

import json
import re

import pytest

from ccdiff.build import recipe_digest
from ccdiff.provenance import ccdiff_version, link_code, pin, report_to, resolve_path, tree_url
from ccdiff.report.build import html_pieces, md_pieces
from ccdiff.stacks import load_recipes

Q26 = "0ed0918d1b68965fe210ec32ae2a55a4f377766a"
Q30 = "be47c5011215b9f13bad06bd7627d3ae49888a19"
NG = "f9e9ff01ad2c8116bc09de4f644b0028a61486a6"
PQ = "c9088724e02f8cab955107cd5b5cd726267c751b"
QN = "8192ed399a26a6e8f0aba43d10ec8badaa5b905e"   # quinn-proto-0.11.19 .cargo_vcs_info.json
S2N = "f857bddfc1ea7d43c6de253e98c109094a7e42c6"  # s2n-quic-core-0.91.0 .cargo_vcs_info.json
# The packaged trees' layout (relative to each pin's subdir), enough to resolve the references.
FAKE_TREES = {
    ("quiche", "0.26.0"): ["src/recovery/congestion/cubic.rs", "src/recovery/congestion/mod.rs",
                           "src/recovery/mod.rs", "src/lib.rs"],
    ("quiche", "0.30.0"): ["src/recovery/congestion/cubic.rs", "src/recovery/congestion/mod.rs",
                           "src/recovery/congestion/reno.rs", "src/recovery/mod.rs",
                           "src/recovery/gcongestion/mod.rs", "src/recovery/rtt.rs", "src/lib.rs"],
    ("ngtcp2", "1.25.0"): ["lib/ngtcp2_cc.c", "lib/ngtcp2_rtb.c", "lib/ngtcp2_conn.c", "lib/ngtcp2_rst.c"],
    ("picoquic", "1.1.53.0"): ["picoquic/cubic.c", "picoquic/cc_common.c", "picoquic/sender.c",
                               "picoquictest/cubic.c"],
    ("linux", "6.1"): ["net/ipv4/tcp_cubic.c", "net/ipv4/tcp_cong.c", "include/net/tcp.h"],
    ("aioquic", "1.7.2"): ["src/aioquic/quic/congestion/cubic.py", "src/aioquic/quic/congestion/reno.py",
                           "src/aioquic/quic/congestion/base.py", "src/aioquic/quic/recovery.py"],
}


@pytest.fixture
def recipes(tmp_path, monkeypatch):
    """The real recipes over a fake build folder holding only the trees above."""
    monkeypatch.setenv("CCDIFF_BUILD_DIR", str(tmp_path))
    found = load_recipes()
    for (stack, version), files in FAKE_TREES.items():
        root = tmp_path / stack / version / "src" / found[stack].versions[version]["subdir"]
        for name in files:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text("")
    return found


def test_every_pinned_version_has_provenance():
    """Every stack folder's provenance.toml (its own record: no list here to extend) names its
    upstream repository, how ccdiff drives it, and a commit or tag per pinned version."""
    for name, recipe in load_recipes().items():
        assert re.fullmatch(r"https://[\w.-]+(/[\w.~-]+)+", recipe.provenance.get("upstream_repo", "")), name
        assert recipe.provenance.get("driven"), name
        for version in recipe.versions:
            pin = recipe.provenance.get("versions", {}).get(version)
            assert pin, f"{name} {version} has no provenance"
            assert re.fullmatch(r"[0-9a-f]{40}", pin.get("upstream_commit", "")) or pin.get("upstream_tag")
            assert "path_in_repo" in pin and pin.get("package"), (name, version)


def test_pinned_commits_are_the_ones_established():
    recipes = load_recipes()
    pins = {n: r.provenance["versions"] for n, r in recipes.items()}
    assert pins["quiche"]["0.26.0"]["upstream_commit"] == Q26
    assert pins["quiche"]["0.30.0"]["upstream_commit"] == Q30
    assert pins["quiche"]["0.26.0"]["path_in_repo"] == "quiche"
    assert (pins["ngtcp2"]["1.25.0"]["upstream_tag"], pins["ngtcp2"]["1.25.0"]["upstream_commit"]) == ("v1.25.0", NG)
    assert pins["picoquic"]["1.1.53.0"]["upstream_commit"] == PQ
    assert (pins["quinn"]["0.11.19"]["upstream_commit"], pins["quinn"]["0.11.19"]["path_in_repo"]) == \
        (QN, "quinn-proto")
    # The sdist has no VCS record and no mirror had the tag's commit: the tag, at the root.
    assert (pins["aioquic"]["1.7.2"]["upstream_tag"], pins["aioquic"]["1.7.2"]["path_in_repo"]) == ("1.7.2", "")
    # Debian's trees are the stable releases (Makefile 6.1.176, 6.12.117) plus Debian's patches.
    assert (pins["linux"]["6.1"]["upstream_tag"], pins["linux"]["6.12"]["upstream_tag"]) == \
        ("v6.1.176", "v6.12.117")
    assert (pins["s2n-quic"]["0.91.0"]["upstream_commit"], pins["s2n-quic"]["0.91.0"]["path_in_repo"]) == \
        (S2N, "quic/s2n-quic-core")


@pytest.mark.parametrize("stack", ["quiche", "quinn", "s2n-quic"])
def test_crate_commit_is_the_crates_vcs_info(stack):
    """Where the crate is unpacked, its .cargo_vcs_info.json names the same commit and path."""
    recipe = load_recipes()[stack]
    checked = 0
    for version, spec in recipe.versions.items():
        info = recipe.build_folder(version) / "src" / spec["subdir"] / ".cargo_vcs_info.json"
        if info.exists():
            data = json.loads(info.read_text())
            pin = recipe.provenance["versions"][version]
            assert (data["git"]["sha1"], data["path_in_vcs"]) == (pin["upstream_commit"], pin["path_in_repo"])
            checked += 1
    if not checked:
        pytest.skip(f"no {stack} crate unpacked (ccdiff build {stack})")


def test_provenance_is_not_a_build_input(tmp_path, monkeypatch):
    """provenance.toml is metadata: editing it must not mark built libraries stale."""
    import shutil
    from ccdiff import build, paths
    shutil.copytree(paths.implementations_dir(), tmp_path / "implementations")
    monkeypatch.setattr(build, "implementations_dir", lambda: tmp_path / "implementations")
    recipe = load_recipes()["ngtcp2"]
    recipe.folder = tmp_path / "implementations" / "ngtcp2"
    before = recipe_digest(recipe)
    with open(recipe.folder / "provenance.toml", "a") as fh:
        fh.write("\n# touched\n")
    assert recipe_digest(recipe) == before
    with open(recipe.folder / "adapter.c", "a") as fh:      # while a build input does count
        fh.write("\n")
    assert recipe_digest(recipe) != before


def test_quiche_permalink(recipes):
    pieces = link_code("src/recovery/congestion/cubic.rs:151-176 (0.26.0); cubic.rs:157-198 (0.30.0, fix)",
                       recipes["quiche"])
    links = [(p["text"], p["url"]) for p in pieces if p["url"]]
    assert links == [
        ("src/recovery/congestion/cubic.rs:151-176",
         f"https://github.com/cloudflare/quiche/blob/{Q26}/quiche/src/recovery/congestion/cubic.rs#L151-L176"),
        ("cubic.rs:157-198",
         f"https://github.com/cloudflare/quiche/blob/{Q30}/quiche/src/recovery/congestion/cubic.rs#L157-L198")]
    assert "".join(p["text"] for p in pieces).startswith("src/recovery/congestion/cubic.rs:151-176 (0.26.0); ")


def test_note_links_at_its_own_version(recipes):
    """A stack note has no '(VERSION)': it is about the version it is attached to."""
    (link,) = [p for p in link_code("carries the idle-restart death spiral (cubic.rs:151-176)",
                                    recipes["quiche"], "0.26.0") if p["url"]]
    assert link["url"].endswith(f"/blob/{Q26}/quiche/src/recovery/congestion/cubic.rs#L151-L176")


def test_ngtcp2_permalinks_every_range(recipes):
    pieces = link_code("lib/ngtcp2_rtb.c:912-935 then 954-962; lib/ngtcp2_cc.c:119-172 (1.25.0)",
                       recipes["ngtcp2"])
    urls = [p["url"] for p in pieces if p["url"]]
    base = f"https://github.com/ngtcp2/ngtcp2/blob/{NG}/lib/"
    assert urls == [base + "ngtcp2_rtb.c#L912-L935", base + "ngtcp2_rtb.c#L954-L962",
                    base + "ngtcp2_cc.c#L119-L172"]


def test_aioquic_permalink_at_its_tag(recipes):
    """aioquic's sdist names no commit: its references link at the release tag, and a bare
    module name resolves inside src/aioquic/quic/congestion/."""
    pieces = link_code("src/aioquic/quic/congestion/cubic.py:149-155; reno.py:30 (1.7.2)", recipes["aioquic"])
    base = "https://github.com/aiortc/aioquic/blob/1.7.2/src/aioquic/quic/congestion"
    assert [p["url"] for p in pieces if p["url"]] == [f"{base}/cubic.py#L149-L155", f"{base}/reno.py#L30"]


KERNEL_STABLE = "https://git.kernel.org/pub/scm/linux/kernel/git/stable/linux.git"


def test_linux_links_git_kernel_org_cgit(recipes):
    """git.kernel.org is cgit: a file at a tag is tree/PATH?h=TAG and an anchor names one line
    (#n142); GitHub's /blob/ and #L142-L158 forms do not exist there."""
    pieces = link_code("net/ipv4/tcp_cubic.c:142-158, 214 (6.1)", recipes["linux"])
    assert [p["url"] for p in pieces if p["url"]] == [
        f"{KERNEL_STABLE}/tree/net/ipv4/tcp_cubic.c?h=v6.1.176#n142",
        f"{KERNEL_STABLE}/tree/net/ipv4/tcp_cubic.c?h=v6.1.176#n214"]
    assert tree_url(pin(recipes["linux"], "6.1")) == f"{KERNEL_STABLE}/tree/?h=v6.1.176"
    # A cgit pin with a commit links by id=, the GitHub form is unchanged.
    assert tree_url({"upstream_repo": "R", "web": "cgit", "upstream_commit": "c0ffee"}, "a.c") == "R/tree/a.c?id=c0ffee"
    assert tree_url(pin(recipes["quiche"], "0.26.0"), "quiche") == \
        f"https://github.com/cloudflare/quiche/tree/{Q26}/quiche"


def test_report_to_comes_from_each_stack():
    """Where to report is each stack's own data: a GitHub tracker where the project uses one,
    the netdev list for Linux, which takes no GitHub issues (its GitHub copies are mirrors)."""
    recipes = load_recipes()
    for name, recipe in recipes.items():
        where = report_to(recipe)
        assert where["text"] and where["url"], name
        upstream = recipe.provenance["upstream_repo"]
        if upstream.startswith("https://github.com/"):
            assert where == {"text": "GitHub issues", "url": f"{upstream}/issues"}, name
    linux = report_to(recipes["linux"])
    assert linux["url"] == "mailto:netdev@vger.kernel.org"
    assert "netdev@vger.kernel.org" in linux["text"] and "net/ipv4/tcp_cubic.c" in linux["text"]
    assert "github" not in (linux["url"] + recipes["linux"].provenance["upstream_repo"]).lower()
    assert report_to(None) == {}


def test_picoquic_permalink_single_line(recipes):
    pieces = link_code("picoquic/cubic.c:152, 274-285 (1.1.53.0)", recipes["picoquic"])
    assert [p["url"] for p in pieces if p["url"]] == [
        f"https://github.com/private-octopus/picoquic/blob/{PQ}/picoquic/cubic.c#L152",
        f"https://github.com/private-octopus/picoquic/blob/{PQ}/picoquic/cubic.c#L274-L285"]


@pytest.mark.parametrize("text, why", [
    ("cubic.c:152 (1.1.53.0)", "two files named cubic.c: ambiguous"),
    ("picoquic/nosuch.c:10 (1.1.53.0)", "not in the tree"),
    ("picoquic/cubic.c:10", "no version named"),
    ("picoquic/cubic.c:10 (1.1.52.0)", "a version that is not pinned"),
    ("picoquic/cubic.c (1.1.53.0)", "no lines"),
])
def test_uncertain_references_stay_text(recipes, text, why):
    assert link_code(text, recipes["picoquic"]) == [{"text": text, "url": None}], why


def test_unbuilt_source_stays_text(tmp_path, monkeypatch):
    monkeypatch.setenv("CCDIFF_BUILD_DIR", str(tmp_path))
    text = "lib/ngtcp2_cc.c:43-74 (1.25.0)"
    assert link_code(text, load_recipes()["ngtcp2"]) == [{"text": text, "url": None}]


def test_bare_name_resolves_to_the_sibling_first():
    files = ("src/recovery/mod.rs", "src/recovery/congestion/mod.rs", "src/recovery/congestion/cubic.rs")
    assert resolve_path("mod.rs", files, "src/recovery/congestion/cubic.rs") == "src/recovery/congestion/mod.rs"
    assert resolve_path("mod.rs", files) is None                       # ambiguous without context
    assert resolve_path("congestion/mod.rs", files) == "src/recovery/congestion/mod.rs"
    assert resolve_path("gestion/mod.rs", files) is None               # whole path parts only


def test_pieces_render_as_links():
    pieces = [{"text": "note (", "url": None}, {"text": "cubic.rs:1-2", "url": "https://x/y#L1-L2"},
              {"text": ") <b>*", "url": None}]
    assert md_pieces(pieces) == r"note ([`cubic.rs:1-2`](https://x/y#L1-L2)) \<b\>\*"
    assert str(html_pieces(pieces)) == 'note (<a href="https://x/y#L1-L2">cubic.rs:1-2</a>) &lt;b&gt;*'


def test_ccdiff_version_names_the_commit():
    version = ccdiff_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+( \([0-9a-f]{4,40}(\+dirty)?\))?", version), version
    assert ccdiff_version() == version                  # one answer per process


def test_real_profile_links_point_inside_their_files():
    """Against the unpacked pinned trees: every link the profiles and notes produce names
    a file of that version's tree and lines that exist in it.  Each stack whose pinned tree
    is unpacked and whose profile cites its code must produce links (whichever stacks are
    unpacked: no count over all of them)."""
    import tomllib

    from ccdiff.coverage import controller_files
    from ccdiff.provenance import source_root
    checked = 0
    for name, recipe in load_recipes().items():
        before = checked
        profile = tomllib.loads((recipe.folder / "profile.toml").read_text())
        texts = [(d["code"], None) for d in profile.get("deviation", []) if d.get("code")]
        texts += [(v["note"], version) for version, v in recipe.provenance["versions"].items() if v.get("note")]
        for text, default in texts:
            for piece in link_code(text, recipe, default):
                if not piece["url"]:
                    continue
                commit, rest = piece["url"].split("/blob/", 1)[1].split("/", 1)
                version = next(v for v, p in recipe.provenance["versions"].items()
                               if commit in (p.get("upstream_commit"), p.get("upstream_tag")))
                prefix = recipe.provenance["versions"][version]["path_in_repo"]
                path, anchor = rest.split("#", 1)
                path = path[len(prefix) + 1:] if prefix else path
                lines = (source_root(recipe, version) / path).read_text(errors="replace").count("\n") + 1
                last = int(anchor.split("-")[-1].lstrip("L"))
                assert last <= lines, (piece, lines)
                checked += 1
        # versions whose unpacked tree holds the controller files (coverage.toml; linux's
        # holds the kernel tarball only, and its references stay text)
        unpacked = [v for v in recipe.versions if source_root(recipe, v)
                    and all((source_root(recipe, v) / f).is_file() for f in controller_files(recipe))]
        cites = [t for t, _ in texts if any(f"({v})" in t for v in unpacked)]
        assert checked > before or not cites, f"{name}: {len(cites)} code references of unpacked {unpacked}, no link"
    if not checked:
        pytest.skip("no pinned source unpacked (ccdiff build all)")

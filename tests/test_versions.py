"""Releases by name: registry index parsing, digest verification, the lock file, support
ranges, features probed from the code, and checkout names.  Offline: a fake registry of
local files (file:// URLs) stands in for crates.io and PyPI."""
import gzip
import hashlib
import io
import json
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from ccdiff import registry
from ccdiff.errors import SetupError


# --- index parsing -------------------------------------------------------------------------------

def test_crates_index_path_follows_cargo_layout():
    assert registry.crates_index_path("a") == "1/a"
    assert registry.crates_index_path("ab") == "2/ab"
    assert registry.crates_index_path("abc") == "3/a/abc"
    assert registry.crates_index_path("quiche") == "qu/ic/quiche"
    assert registry.crates_index_path("ngtcp2-sys") == "ng/tc/ngtcp2-sys"
    assert registry.crates_index_path("Serde") == "se/rd/serde"


SHA_A = "a" * 64
SHA_B = "b" * 64


def test_parse_crates_index_reads_cksum_and_yanked():
    text = "\n".join(json.dumps(e) for e in [
        {"name": "quiche", "vers": "0.26.1", "cksum": SHA_A, "yanked": False, "rust_version": "1.85"},
        {"name": "quiche", "vers": "0.27.0", "cksum": SHA_B, "yanked": True},
    ]) + "\n"
    releases = registry.parse_crates_index(text, "quiche", "https://dl.example/crates")
    assert [(r.version, r.sha256, r.yanked) for r in releases] == [("0.26.1", SHA_A, False), ("0.27.0", SHA_B, True)]
    assert releases[0].url == "https://dl.example/crates/quiche/quiche-0.26.1.crate"
    assert releases[0].rust_version == "1.85"


@pytest.mark.parametrize("line", ['{"vers": "1.0.0"}', '{"vers": "1.0.0", "cksum": "abc"}', "not json"])
def test_parse_crates_index_refuses_bad_entries(line):
    with pytest.raises(SetupError, match="line 1"):
        registry.parse_crates_index(line, "x", "https://dl")


def test_parse_pypi_json_takes_the_sdist_digest_and_absolutizes_links():
    data = {"releases": {
        "0.6.1": [{"packagetype": "bdist_wheel", "digests": {"sha256": SHA_B}, "url": "https://w/x.whl"},
                  {"packagetype": "sdist", "digests": {"sha256": SHA_A}, "yanked": False,
                   "url": "../../packages/packages/98/78/aiopquic-0.6.1.tar.gz"}],
        "0.3.6.post1.dev0": [{"packagetype": "sdist", "digests": {"sha256": SHA_B}, "yanked": True,
                              "url": "https://files.pythonhosted.org/packages/6c/x.tar.gz"}],
        "0.0.1": [],
    }}
    releases = {r.version: r for r in registry.parse_pypi_json(data, "aiopquic", "https://pypi.org/pypi/aiopquic/json")}
    assert set(releases) == {"0.6.1", "0.3.6.post1.dev0"}
    assert releases["0.6.1"].sha256 == SHA_A
    assert releases["0.6.1"].url == "https://files.pythonhosted.org/packages/98/78/aiopquic-0.6.1.tar.gz"
    assert releases["0.3.6.post1.dev0"].yanked


def test_version_order_is_numeric():
    versions = ["0.30.0", "0.9.0", "0.26.1", "0.26.0", "0.5.0rc1", "0.5.0", "0.24.10"]
    assert sorted(versions, key=registry.version_key) == \
        ["0.5.0rc1", "0.5.0", "0.9.0", "0.24.10", "0.26.0", "0.26.1", "0.30.0"]


# --- the lock file -------------------------------------------------------------------------------

def test_lock_round_trip(tmp_path):
    path = tmp_path / "releases.lock"
    entries = {"0.27.0": {"url": "https://x/q-0.27.0.crate", "sha256": SHA_B, "yanked": True,
                          "subdir": "q-0.27.0", "package_version": "0.27.0"},
               "0.9.1": {"url": "https://x/q-0.9.1.crate", "sha256": SHA_A, "yanked": False,
                         "subdir": "q-0.9.1", "package_version": "0.9.1"}}
    registry.save_lock(path, "q", "crates.io:q", entries)
    assert registry.load_lock(path) == entries
    document = json.loads(path.read_text())
    assert list(document["releases"]) == ["0.9.1", "0.27.0"]          # release order, stable diffs
    text = path.read_text()
    registry.save_lock(path, "q", "crates.io:q", registry.load_lock(path))
    assert path.read_text() == text


def test_lock_without_a_digest_is_refused(tmp_path):
    path = tmp_path / "releases.lock"
    path.write_text(json.dumps({"releases": {"1.0": {"url": "https://x", "sha256": "nope"}}}))
    with pytest.raises(SetupError, match="needs url and a sha256"):
        registry.load_lock(path)


# --- a fake stack and registry, end to end -------------------------------------------------------

def _crate(name: str, version: str, payload: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, data in ((f"{name}-{version}/payload", payload),
                          (f"{name}-{version}/src/api.rs", b"pub fn needed_api() {}\n")):
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """CCDIFF_HOME with one stack 'fake' (crate 'fakecrate', supported >= 1.0.0) and a file:// registry."""
    home = tmp_path / "home"
    stack = home / "implementations" / "fake"
    stack.mkdir(parents=True)
    (home / "implementations" / "include").mkdir()
    (home / "implementations" / "include" / "ccdiff_adapter.h").write_text("/* abi */\n")
    (stack / "stack.toml").write_text('name = "fake"\nlanguage = "c"\ndefault_version = "1.0.0"\n')
    (stack / "build.sh").write_text('set -e\ncp "$1/payload" "$2/libccdiff_adapter.so"\n')
    (stack / "registry.toml").write_text(
        'kind = "crates"\npackage = "fakecrate"\nsubdir = "{package}-{version}"\n'
        '[supported]\nmin = "1.0.0"\nreason = "too old"\n'
        '[[supported.requires]]\nfile = "src/api.rs"\npattern = "fn needed_api"\nwhat = "needed_api()"\n')
    index = tmp_path / "index" / "fa" / "ke"
    index.mkdir(parents=True)
    dl = tmp_path / "dl" / "fakecrate"
    dl.mkdir(parents=True)
    monkeypatch.setenv("CCDIFF_HOME", str(home))
    monkeypatch.setenv("CCDIFF_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("CCDIFF_CRATES_INDEX", (tmp_path / "index").as_uri())
    monkeypatch.setenv("CCDIFF_CRATES_DL", (tmp_path / "dl").as_uri())
    monkeypatch.setattr(registry, "_CACHE", {})

    class Fake:
        root = tmp_path
        lock = stack / "releases.lock"

        def publish(self, version, payload=b"lib", yanked=False, cksum=None, served=None):
            data = _crate("fakecrate", version, payload)
            (dl / f"fakecrate-{version}.crate").write_bytes(served if served is not None else data)
            entry = {"name": "fakecrate", "vers": version, "cksum": cksum or hashlib.sha256(data).hexdigest(),
                     "yanked": yanked}
            with open(index / "fakecrate", "a") as f:
                f.write(json.dumps(entry) + "\n")
            registry._CACHE.clear()
            return data
    return Fake()


def test_a_published_release_builds_by_name_and_is_locked(fake, capsys):
    from ccdiff.build import build_spec
    data = fake.publish("1.2.0", payload=b"one-two")
    [library] = build_spec("fake@1.2.0")
    assert library.read_bytes() == b"one-two"
    lock = registry.load_lock(fake.lock)
    assert lock["1.2.0"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert lock["1.2.0"]["url"].endswith("/fakecrate/fakecrate-1.2.0.crate")
    info = json.loads((library.parent / "build-info.json").read_text())
    assert info["sha256"] == lock["1.2.0"]["sha256"] and info["version"] == "1.2.0"
    assert "recorded fake 1.2.0" in capsys.readouterr().err


def test_a_tampered_download_is_rejected_and_not_locked(fake):
    from ccdiff.build import build_spec
    good = fake.publish("1.3.0")
    (fake.root / "dl" / "fakecrate" / "fakecrate-1.3.0.crate").write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(SetupError, match="sha256 mismatch"):
        build_spec("fake@1.3.0")
    assert "1.3.0" not in registry.load_lock(fake.lock)
    assert not (fake.root / "build" / "fake" / "1.3.0" / "libccdiff_adapter.so").exists()


def test_the_lock_wins_over_a_republished_index(fake):
    """Once locked, a release must keep its bytes: an index that now says otherwise is not trusted."""
    from ccdiff.build import build_spec
    fake.publish("1.4.0", payload=b"first")
    build_spec("fake@1.4.0")
    locked = registry.load_lock(fake.lock)["1.4.0"]["sha256"]
    (fake.root / "index" / "fa" / "ke" / "fakecrate").write_text("")
    fake.publish("1.4.0", payload=b"second")       # same version, other bytes, index updated
    (fake.root / "build" / "downloads" / "fakecrate-1.4.0.crate").unlink()   # not the cached copy
    with pytest.raises(SetupError, match="sha256 mismatch"):
        build_spec("fake@1.4.0", force=True)
    assert registry.load_lock(fake.lock)["1.4.0"]["sha256"] == locked


def test_yanked_release_builds_with_a_warning(fake, capsys):
    from ccdiff.build import build_spec
    fake.publish("1.5.0", yanked=True)
    build_spec("fake@1.5.0")
    assert "yanked" in capsys.readouterr().err
    assert registry.load_lock(fake.lock)["1.5.0"]["yanked"] is True


def test_unpublished_and_unsupported_releases_fail_with_the_reason(fake):
    from ccdiff.build import build_spec
    fake.publish("1.0.0")
    with pytest.raises(SetupError, match="not published on crates.io.*newest: 1.0.0"):
        build_spec("fake@9.9.9")
    fake.publish("0.9.0")
    with pytest.raises(SetupError, match=r"older than the adapter's supported range 1\.0\.0.*too old"):
        build_spec("fake@0.9.0")


def test_a_release_lacking_what_the_adapter_needs_is_refused_before_compiling(fake):
    from ccdiff.build import build_spec
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:       # api.rs without needed_api
        for rel, payload in (("fakecrate-2.0.0/payload", b"x"), ("fakecrate-2.0.0/src/api.rs", b"fn other() {}\n")):
            info = tarfile.TarInfo(rel)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    fake.publish("2.0.0", served=buf.getvalue(), cksum=hashlib.sha256(buf.getvalue()).hexdigest())
    with pytest.raises(SetupError, match=r"cannot be driven by the adapter \(supported: 1\.0\.0 .*lacks needed_api\(\)"):
        build_spec("fake@2.0.0")


def test_versions_lists_published_built_and_supported(fake):
    from ccdiff.build import build_spec
    from ccdiff.versions_cli import version_rows
    fake.publish("0.9.0")
    fake.publish("1.0.0")
    fake.publish("1.1.0", yanked=True)
    build_spec("fake@1.0.0")
    rows, config, warning = version_rows("fake")
    table = {r["version"]: (r["published"], r["yanked"], r["built"], r["supported"], r["locked"]) for r in rows}
    assert table == {"0.9.0": (True, False, False, False, False), "1.0.0": (True, False, True, True, True),
                     "1.1.0": (True, True, False, True, False)}
    assert warning == ""


# --- features from the code ----------------------------------------------------------------------

def _quiche_tree(root: Path, cubic: str, recovery_mod: str = "", lib: str = "") -> Path:
    cc = root / "src/recovery/congestion"
    cc.mkdir(parents=True)
    (cc / "cubic.rs").write_text(cubic)
    (cc / "mod.rs").write_text("")
    (root / "src/recovery/mod.rs").write_text(recovery_mod)
    (root / "src/lib.rs").write_text(lib)
    return root


def test_quiche_idle_fix_is_probed_from_the_code(tmp_path):
    from ccdiff.probe import describe, probe
    old = _quiche_tree(tmp_path / "a", "let delta = now - last_sent_time;")
    fixed = _quiche_tree(tmp_path / "b", "last_ack_time: Option<Instant>,")
    flag = _quiche_tree(tmp_path / "c", "last_ack_time", "pub enable_cubic_idle_restart_fix: bool,",
                        "enable_cubic_idle_restart_fix: true,")
    assert probe("quiche", old)["idle_fix"]["state"] == "absent"
    assert describe({"idle_fix": probe("quiche", fixed)["idle_fix"]}) == "idle fix: always on"
    assert probe("quiche", flag)["idle_fix"] == {**probe("quiche", flag)["idle_fix"], "state": "flag", "default": "on"}


def test_options_are_checked_against_the_probed_code():
    from ccdiff.probe import filter_options
    always = {"idle_fix": {"state": "always on", "option": "idle_fix", "accepts": ["on"], "evidence": "e"}}
    flag = {"idle_fix": {"state": "flag", "default": "on", "option": "idle_fix", "accepts": ["on", "off"],
                         "evidence": "e"}}
    assert filter_options("q", "0.26.1", always, (("idle_fix", "on"), ("cc", "cubic"))) == (("cc", "cubic"),)
    with pytest.raises(SetupError, match="always on.*only run idle_fix=on"):
        filter_options("q", "0.26.1", always, (("idle_fix", "off"),))
    assert filter_options("q", "0.30.0", flag, (("idle_fix", "off"),)) == (("idle_fix", "off"),)


# --- checkout names ------------------------------------------------------------------------------

def _commit_all(repo: Path) -> str:
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    if not (repo / ".git").exists():
        subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "c"], check=True)
    return subprocess.run(git + ["rev-parse", "--short=10", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_git_checkout_is_named_by_its_commit_and_dirty_by_its_content(tmp_path):
    from ccdiff.build import _local_version
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "f").write_text("1")
    sha = _commit_all(repo)
    assert _local_version(repo) == f"git-{sha}"
    (repo / "f").write_text("2")
    first = _local_version(repo)
    assert re.fullmatch(f"git-{sha}-dirty-[0-9a-f]{{12}}", first)
    assert _local_version(repo) == first                  # the same tree: the same name
    (repo / "f").write_text("3")                          # another edit of the same commit
    second = _local_version(repo)
    assert second.startswith(f"git-{sha}-dirty-") and second != first
    (repo / "f").write_text("1")
    assert _local_version(repo) == f"git-{sha}"
    (repo / "new.c").write_text("int x;")                 # untracked: a build would read it
    assert _local_version(repo).startswith(f"git-{sha}-dirty-")


def test_a_folder_that_is_not_a_git_top_level_is_named_by_its_content(tmp_path):
    """Issue 32: folders inside an enclosing repository were named after its commit, so
    different trees shared one name and each build replaced the last."""
    from ccdiff.build import _local_version
    plain, twin, other = tmp_path / "plain", tmp_path / "twin", tmp_path / "other"
    for folder, text in ((plain, "a"), (twin, "a"), (other, "b")):
        (folder / "lib").mkdir(parents=True)
        (folder / "lib" / "cc.c").write_text(text)
    assert re.fullmatch(r"local-[0-9a-f]{12}", _local_version(plain))
    assert _local_version(plain) == _local_version(twin)      # by content, not by path
    assert _local_version(plain) != _local_version(other)
    enclosing = tmp_path / "enclosing"
    enclosing.mkdir()
    (enclosing / "README").write_text("x")
    for name in ("one", "two"):
        (enclosing / name / "lib").mkdir(parents=True)
        (enclosing / name / "lib" / "cc.c").write_text(name)
    sha = _commit_all(enclosing)
    one, two = _local_version(enclosing / "one"), _local_version(enclosing / "two")
    assert sha not in one and one.startswith("local-") and one != two
    assert _local_version(enclosing) == f"git-{sha}"          # its own top level: the commit


def test_registry_files_do_not_make_builds_stale(fake):
    """registry.toml and releases.lock are read by ccdiff, not by build.sh: recording a release
    must not invalidate every existing build."""
    from ccdiff.build import recipe_digest
    from ccdiff.stacks import load_recipes
    recipe = load_recipes()["fake"]
    before = recipe_digest(recipe)
    fake.lock.write_text(json.dumps({"releases": {}}))
    (recipe.folder / "registry.toml").write_text((recipe.folder / "registry.toml").read_text() + "\n# edited\n")
    assert recipe_digest(recipe) == before
    (recipe.folder / "build.sh").write_text("# changed\n")
    assert recipe_digest(recipe) != before


def _quiche_built(version):
    from ccdiff.build import is_stale
    from ccdiff.stacks import load_recipes
    recipe = load_recipes()["quiche"]
    return recipe.library(version).exists() and not is_stale(recipe, version)


def test_quiche_0_26_1_is_idle_fix_always_on(quiche_releases):
    """0.26.1 fixed the death spiral with no switch: the probe says so, idle_fix=off is refused
    (the code cannot run it) and idle_fix=on is the release itself."""
    from ccdiff.replay import replay
    from ccdiff.stacks import features_of, load_recipes
    from ccdiff.trace import load_trace
    quiche_releases("0.26.1")
    assert _quiche_built("0.26.1")
    assert features_of(load_recipes()["quiche"], "0.26.1")["idle_fix"]["state"] == "always on"
    trace = load_trace(str(Path(__file__).resolve().parent.parent / "examples" / "death-spiral.jsonl"))
    result = replay(trace, ["quiche@0.26.1", "quiche@0.26.1:idle_fix=on"])
    assert not result.violations
    assert {run.snapshots[-1].cwnd for run in result.runs.values()} == {13681}
    with pytest.raises(SetupError, match="always on"):
        replay(trace, ["quiche@0.26.1:idle_fix=off"])


def test_bisect_searches_published_supported_releases_without_yanked(fake):
    from ccdiff.bisect import candidate_releases
    from ccdiff.stacks import load_recipes
    for version, yanked in (("0.9.0", False), ("1.0.0", False), ("1.1.0", True), ("1.2.0rc1", False),
                            ("1.2.0", False), ("1.10.0", False)):
        fake.publish(version, yanked=yanked)
    recipe = load_recipes()["fake"]
    assert candidate_releases(recipe) == ["1.0.0", "1.2.0", "1.10.0"]
    assert candidate_releases(recipe, include_yanked=True) == ["1.0.0", "1.1.0", "1.2.0", "1.10.0"]


def test_releases_built_by_name_stay_out_of_the_default_run(tmp_path, monkeypatch):
    """`make run` conforms the reviewed pins; a release bisect built joins only when named."""
    from ccdiff.matrix import default_specs
    from ccdiff.stacks import LIBRARY_NAME, available
    for version in ("0.26.0", "0.24.7"):                 # a pin and a release built by name
        (tmp_path / "quiche" / version).mkdir(parents=True)
        (tmp_path / "quiche" / version / LIBRARY_NAME).write_bytes(b"")
    monkeypatch.setenv("CCDIFF_BUILD_DIR", str(tmp_path))
    rows = {(r["stack"], r["version"]): r for r in available()}
    assert rows[("quiche", "0.24.7")]["built"] and not rows[("quiche", "0.24.7")]["default"]
    assert rows[("quiche", "0.26.0")]["default"]
    specs = default_specs()
    assert "quiche@0.26.0" in specs and "quiche-reno@0.26.0" in specs
    assert not any("0.24.7" in spec for spec in specs)

"""Every stack folder's entry-points.md stays true to the pinned sources and to the adapters
(issue #21; the contract: docs/entry-points.md).

Every folder under implementations/ with a stack.toml is checked (tests/test_adding_a_stack.py
shows a new one is): its entry_points.py `members(src)` parses the controller interface from
the pinned source unpacked under build/<stack>/<version>/src/ (picoquic.h's notification enum
and algorithm struct, ngtcp2_cc.h's struct ngtcp2_cc, quiche's CongestionControlOps, quinn's
trait Controller, aioquic's class QuicCongestionControl, Linux's struct tcp_congestion_ops,
s2n-quic-core's trait CongestionController, msquic's QUIC_CONGESTION_CONTROL).
Linux's pinned source is the .deb's linux-source-<v>.tar.xz: its `source_tree` reads the
kernel files the table cites from that tarball into a temporary folder, once per run.
s2n-quic's pinned source is s2n-quic-core alone; its caller, the s2n-quic-transport crate,
is not pinned, so the table cites transport lines without backticks (unchecked, like any
file outside a pinned tree) and every backticked line it cites is checked.  Every member must have a row in that stack's table with a status; no row
may name a member upstream does not have; every `file:line` cited in the "connection"
column (upstream) and the "adapter" column (implementations/<stack>/) must show the
entry point's name, or the identifier the row names after "via".  A new upstream hook
fails here until someone classifies it.

The last test shows picoquic's restart_from_idle really reaches the controller: pinned
cubic and newreno ignore it (cubic.c:414-415, newreno.c:282-284), so it builds a copy of
the pinned cubic.c that reacts to it (`ccdiff build picoquic --source`, into a build
folder under tmp) and replays an idle period longer and shorter than picoquic's
max(RTO, 1 s) (sender.c:939-946).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccdiff.entry_points import parser
from ccdiff.paths import build_dir, implementations_dir, project_root
from ccdiff.stacks import load_recipes

STATUSES = ("delivered", "not delivered", "accessor")
REF = re.compile(r"`([\w./-]+\.(?:c|h|rs|py)):(\d+)(?:-(\d+))?`(?:\s*\((\d[\w.]*)\))?")


# ---- the interfaces, parsed from the pinned sources by each folder's entry_points.py -------

def members(stack: str):
    """The folder's parser, members(src) -> set of names (docs/entry-points.md, "The contract")."""
    module = parser(implementations_dir() / stack)
    assert module is not None and callable(getattr(module, "members", None)), \
        f"implementations/{stack}/entry_points.py defines no members(src) (docs/entry-points.md)"
    return module.members


# ---- the document --------------------------------------------------------------------

def tables() -> dict[str, tuple[list[str], list[dict]]]:
    """{stack: ([versions], [row as {column: cell}])}, one per `<!-- entry-points: ... -->` in
    any stack folder's entry-points.md."""
    out = {}
    lines = [line for path in sorted(implementations_dir().glob("*/entry-points.md"))
             for line in path.read_text().splitlines() + [""]]
    for i, line in enumerate(lines):
        m = re.fullmatch(r"<!-- entry-points: ([\w-]+) ([\d. ]+) -->", line.strip())
        if not m:
            continue
        cells = lambda row: [c.strip() for c in row.strip().strip("|").split("|")]
        header = cells(lines[i + 1])
        rows = []
        for row in lines[i + 3:]:
            if not row.startswith("|"):
                break
            rows.append(dict(zip(header, cells(row))))
        out[m.group(1)] = (m.group(2).split(), rows)
    return out


def entry(row: dict) -> str:
    return re.match(r"`(\w+)`", row["entry point"]).group(1)


def source_root(stack: str, version: str) -> Path:
    pin = load_recipes()[stack].versions[version]
    root = build_dir() / stack / version / "src" / pin["subdir"]
    if not root.is_dir():
        pytest.skip(f"{stack} {version} is not unpacked under {build_dir()} (ccdiff build {stack}@{version})")
    source_tree = getattr(parser(implementations_dir() / stack), "source_tree", None)
    return source_tree(root) if source_tree else root


def resolve(root: Path, rel: str) -> Path:
    """The one file under root whose path ends with rel (bare names are looked up)."""
    if (root / rel).is_file():
        return root / rel
    hits = [p for p in root.rglob(Path(rel).name) if p.as_posix().endswith("/" + rel)]
    assert len(hits) == 1, f"{rel}: {len(hits)} files under {root} end with it"
    return hits[0]


def shows(path: Path, lo: int, hi: int, names: list[str]) -> bool:
    lines = path.read_text(errors="replace").splitlines()
    assert 1 <= lo <= hi <= len(lines), f"{path}:{lo}-{hi} is outside the file ({len(lines)} lines)"
    text = "\n".join(lines[lo - 1:hi])
    return any(n in text for n in names)


def names_for(row: dict) -> list[str]:
    via = re.findall(r"via `(\w+)`", " ".join(row.values()))
    return [entry(row), *via]


# Every stack folder and its pinned versions: what the tables must cover.
STACKS = {name: list(recipe.versions) for name, recipe in load_recipes().items()}


def test_every_stack_has_a_table_for_its_pinned_versions():
    t = tables()
    assert {s: v for s, (v, _) in t.items()} == STACKS
    for stack in STACKS:
        members(stack)
        assert (implementations_dir() / stack / "entry-points.md").is_file()
    assert "entry-points.md" in (project_root() / "docs" / "adapters.md").read_text()


def classified(stack: str) -> list[str]:
    return [entry(r) for r in tables()[stack][1]]


@pytest.mark.parametrize("stack,version", [(s, v) for s, vs in STACKS.items() for v in vs])
def test_every_upstream_member_is_classified(stack, version):
    found = members(stack)(source_root(stack, version))
    assert len(found) >= 4, found  # the parser found the interface
    named = classified(stack)
    assert len(named) == len(set(named)), f"{stack}: a member has two rows"
    assert set(named) - found == set(), f"{stack} {version}: rows for members upstream does not have"
    assert found - set(named) == set(), f"{stack} {version}: unclassified entry points"


def test_a_new_upstream_hook_is_unclassified(tmp_path):
    """What a version bump that adds a hook looks like: an extra notification kind in
    picoquic.h and an extra callback in ngtcp2_cc.h are found and have no row."""
    pq = source_root("picoquic", "1.1.53.0")
    (tmp_path / "picoquic").mkdir()
    h = (pq / "picoquic" / "picoquic.h").read_text()
    anchor = "    picoquic_congestion_notification_restart_from_idle"
    assert h.count(anchor) == 1
    (tmp_path / "picoquic" / "picoquic.h").write_text(
        h.replace(anchor, "    picoquic_congestion_notification_path_idle,\n" + anchor))
    assert members("picoquic")(tmp_path) - set(classified("picoquic")) == {"path_idle"}

    ng = source_root("ngtcp2", "1.25.0")
    (tmp_path / "lib").mkdir()
    h = (ng / "lib" / "ngtcp2_cc.h").read_text()
    anchor = "  ngtcp2_cc_reset reset;"
    assert h.count(anchor) == 1
    (tmp_path / "lib" / "ngtcp2_cc.h").write_text(h.replace(anchor, anchor + "\n  ngtcp2_cc_event event;"))
    assert members("ngtcp2")(tmp_path) - set(classified("ngtcp2")) == {"event"}


def test_a_new_hook_in_aioquic_or_linux_is_unclassified(tmp_path):
    """The same for the two parsers that read Python and the kernel header: a new method
    of QuicCongestionControl and a new tcp_congestion_ops callback have no row."""
    aq = source_root("aioquic", "1.7.2")
    rel = Path("src", "aioquic", "quic", "congestion", "base.py")
    (tmp_path / rel.parent).mkdir(parents=True)
    py = (aq / rel).read_text()
    anchor = "    def get_log_data(self)"
    assert py.count(anchor) == 1
    (tmp_path / rel).write_text(py.replace(anchor, "    def on_packets_idle(self, *, now: float) -> None: ...\n\n" + anchor))
    assert members("aioquic")(tmp_path) - set(classified("aioquic")) == {"on_packets_idle"}

    lx = source_root("linux", "6.12")
    (tmp_path / "include" / "net").mkdir(parents=True)
    h = (lx / "include" / "net" / "tcp.h").read_text()
    anchor = "\t/* initialize private data (optional) */\n\tvoid (*init)(struct sock *sk);"
    assert h.count(anchor) == 1
    (tmp_path / "include" / "net" / "tcp.h").write_text(
        h.replace(anchor, "\tvoid (*on_idle)(struct sock *sk, u32 idle_us);\n" + anchor))
    assert members("linux")(tmp_path) - set(classified("linux")) == {"on_idle"}


def test_a_new_method_of_s2n_quics_trait_is_unclassified(tmp_path):
    """The same for s2n-quic-core's trait CongestionController: a new required method is
    found and has no row; the test module's impls further down the file are not read."""
    sq = source_root("s2n-quic", "0.91.0")
    rel = Path("src", "recovery", "congestion_controller.rs")
    (tmp_path / rel.parent).mkdir(parents=True)
    rs = (sq / rel).read_text()
    anchor = "    fn earliest_departure_time(&self) -> Option<Timestamp>;"
    assert rs.count(anchor) == 1
    (tmp_path / rel).write_text(rs.replace(anchor, anchor + "\n\n    fn on_app_idle(&mut self, now: Timestamp);"))
    assert members("s2n-quic")(tmp_path) - set(classified("s2n-quic")) == {"on_app_idle"}


@pytest.mark.parametrize("stack", STACKS)
def test_every_row_has_a_status_and_a_reason(stack):
    for row in tables()[stack][1]:
        status = row["status"]
        assert status in STATUSES, f"{stack} {entry(row)}: status {status!r}"
        says = row["ccdiff delivers it"]
        assert len(says) > 10, f"{stack} {entry(row)}: say when, or why not"
        if status == "delivered":
            assert REF.search(row["adapter"]), f"{stack} {entry(row)}: delivered where?"
        if status == "not delivered":
            assert row["adapter"] == "—", f"{stack} {entry(row)}: not delivered, yet cites the adapter"


@pytest.mark.parametrize("stack", STACKS)
def test_cited_lines_show_the_entry_point(stack):
    versions, rows = tables()[stack]
    checked = 0
    for row in rows:
        for column, base in (("connection calls it", None), ("adapter", implementations_dir() / stack)):
            for m in REF.finditer(row[column]):
                rel, lo, hi, version = m.group(1), int(m.group(2)), int(m.group(3) or m.group(2)), m.group(4)
                if base is None:
                    assert version or len(versions) == 1, f"{stack} {entry(row)}: {rel}: which version?"
                    root = source_root(stack, version or versions[0])
                else:
                    root = base
                path = resolve(root, rel)
                assert shows(path, lo, hi, names_for(row)), \
                    f"{stack} {entry(row)}: {rel}:{lo}-{hi} does not show {names_for(row)}"
                checked += 1
    assert checked >= len(rows)


def test_the_check_can_fail(tmp_path):
    """A cited line that shows something else is caught (the checker is not vacuous)."""
    f = tmp_path / "x.c"
    f.write_text("a();\nb();\n")
    assert shows(f, 2, 2, ["b"]) and not shows(f, 1, 1, ["b"])


# ---- picoquic: restart_from_idle reaches the controller ---------------------------------

REACTS = ("            default:\n                break;\n\n        }\n\n        /* Compute pacing data */",
          "            case picoquic_congestion_notification_restart_from_idle:\n"
          "                path_x->cwin = PICOQUIC_CWIN_MINIMUM; /* planted by ccdiff's test */\n"
          "                break;\n"
          "            default:\n                break;\n\n        }\n\n        /* Compute pacing data */")

REPLAY = """
import json, sys
from ccdiff.replay import replay
from ccdiff.trace import parse_trace_text
spec, text = sys.argv[1], sys.stdin.read()
run = replay(parse_trace_text(text), [spec]).runs[spec]
if run.error:
    raise SystemExit(run.error)
print(json.dumps([s.cwnd for s in run.snapshots]))
"""


def idle_trace(idle_us: int) -> str:
    """Four packets, the application idle, all acknowledged, then one packet after idle_us."""
    ev = [{"ccdiff_trace": 2, "max_datagram_size": 1200}]
    ev += [{"t": 0, "ev": "sent", "pn": pn, "bytes": 1200} for pn in range(4)]
    ev += [{"t": 0, "ev": "app_idle"}, {"t": 10000, "ev": "ack", "pns": [[0, 3]]},
           {"t": idle_us, "ev": "app_data"}, {"t": idle_us, "ev": "sent", "pn": 4, "bytes": 1200}]
    return "\n".join(json.dumps(e) for e in ev)


def cwnds(spec: str, trace: str, build: Path) -> list[int]:
    env = dict(os.environ, CCDIFF_BUILD_DIR=str(build))
    done = subprocess.run([sys.executable, "-c", REPLAY, spec], input=trace, cwd=project_root(), env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_picoquic_restart_from_idle_is_delivered(tmp_path):
    src = source_root("picoquic", "1.1.53.0")
    tree = tmp_path / "picoquic"
    shutil.copytree(src / "picoquic", tree / "picoquic")
    cubic = tree / "picoquic" / "cubic.c"
    text = cubic.read_bytes().decode()
    eol = "\r\n" if "\r\n" in text else "\n"
    old, new = (s.replace("\n", eol) for s in REACTS)
    assert text.count(old) == 1, "cubic_notify's default case moved: update REACTS"
    cubic.write_bytes(text.replace(old, new, 1).encode())

    build = tmp_path / "build"
    done = subprocess.run([sys.executable, "-m", "ccdiff", "build", "picoquic", "--source", str(tree)],
                          cwd=project_root(), env=dict(os.environ, CCDIFF_BUILD_DIR=str(build)),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    spec = "picoquic@" + Path(done.stdout.strip().splitlines()[-1]).parent.name

    # PICOQUIC_CWIN_INITIAL 10 * 1536 and PICOQUIC_CWIN_MINIMUM 2 * 1536 (picoquic_internal.h:92-93).
    initial, minimum = 15360, 3072
    long_idle = cwnds(spec, idle_trace(2_000_000), build)
    short_idle = cwnds(spec, idle_trace(500_000), build)
    # 2 s > last send (t=0) + max(RTO, 1 s): the send after idle notifies, the planted
    # handler collapses the window on that event and no earlier.
    assert long_idle[:-1] == short_idle[:-1]
    assert long_idle[-1] == minimum and long_idle[-2] != minimum
    # 0.5 s is not idle to picoquic: nothing is notified, the window is what the ACK left.
    assert short_idle[-1] == short_idle[-2] != minimum
    assert short_idle[4] == initial  # before the ACK

"""The impact of a closed-loop finding (issue 15 points 2 and 5; ccdiff/report/impact.py).

One tiny real conform run (quiche@0.26.0 on the death spiral, seed 1: the seed on which
0.26.0 misses the 10 s deadline; seed 0 completes in 3.29 s) is read the way a maintainer
reads its finding page: an Impact section first after the summary, the stack's "did not
complete" beside the oracle's and the Reno control's own completion times -- which must be
exactly what `ccdiff sim death-spiral --seed 1 --stack oracle` prints -- and the plots carry
those two runs' own cwnd (asserted on the plot jobs' data, not on pixels).  Open-loop
findings keep no table; a trace the rerun does not reproduce gets a note, no numbers.
"""
from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser

import pytest

from ccdiff.cli import main
from ccdiff.replay import replay
from ccdiff.report import build as build_module
from ccdiff.report import plots
from ccdiff.report.impact import closed_loop_of, cwnd_steps
from ccdiff.trace import load_trace
from ccdiff.units import duration

from .browser import load
from .conftest import DS_FINDING

STACK = "quiche@0.26.0"
SEED = 1
ARGS = ["conform", "--stack", STACK, "--scenarios", "death-spiral", "--seeds", "1", "--first-seed", str(SEED),
        "--jobs", "1", "--fresh"]
FINDING = f"death-spiral-seed-{SEED}--quiche-0.26.0--future-recovery-start"


class ImpactTable(HTMLParser):
    """<table id="impact-table">: run label -> its row's data attributes and cell texts;
    h2 ids in page order."""

    def __init__(self):
        super().__init__()
        self.rows, self.h2 = {}, []
        self._in_table = False
        self._row = None
        self._cell = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "h2":
            self.h2.append(a.get("id"))
        elif tag == "table" and a.get("id") == "impact-table":
            self._in_table = True
        elif tag == "tr" and self._in_table and "data-run" in a:
            self._row = dict(a, cells=[])
            self.rows[a["data-run"]] = self._row
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_table, self._row = False, None
        elif tag == "td" and self._row is not None and self._cell is not None:
            self._row["cells"].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _sim_json(capsys, spec: str) -> dict:
    """`ccdiff sim death-spiral --seed SEED --stack SPEC --no-controls --json`: the run."""
    capsys.readouterr()
    main(["sim", "death-spiral", "--seed", str(SEED), "--stack", spec, "--no-controls", "--json"])
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    return run


@pytest.fixture(scope="module")
def conform(tmp_path_factory):
    """The conform run, twice into the same OUT (pages name OUT's paths): the first report
    kept as "first", the plot jobs of the second recorded."""
    base = tmp_path_factory.mktemp("impact")
    out = base / "out"
    assert main(ARGS + ["--out", str(out)]) == 1
    shutil.copytree(out / "report", base / "first")
    jobs = []
    original = build_module.draw_all

    def record(batch):
        jobs.extend(batch)
        original(batch)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build_module, "draw_all", record)
        assert main(ARGS + ["--out", str(out)]) == 1
    report = out / "report" / STACK
    return {"out": out, "report": report, "first": base / "first" / STACK, "jobs": jobs,
            "summary": json.loads((out / "summary.json").read_text())}


def _page(conform, finding=FINDING) -> ImpactTable:
    parser = ImpactTable()
    parser.feed((conform["report"] / "findings" / finding / "index.html").read_text())
    return parser


def test_closed_loop_page_has_the_impact_table_first(conform, capsys):
    page = _page(conform)
    assert page.h2[0] == "impact", page.h2         # first section after the status and summary
    assert list(page.rows) == [STACK, "oracle", "oracle-reno"]
    mine = page.rows[STACK]
    assert mine["data-completion-us"] == "" and mine["data-status"] == "fail"
    assert mine["cells"][1] == "did not complete in 10 s (2.34 MB of 10 MB delivered)"
    for spec in ("oracle", "oracle-reno"):
        run = _sim_json(capsys, spec)                  # what `ccdiff sim` gives on the same seed
        row = page.rows[spec]
        assert run["metrics"]["completion_us"] is not None
        assert int(row["data-completion-us"]) == run["metrics"]["completion_us"]
        assert row["cells"][1] == duration(run["metrics"]["completion_us"])
        assert int(row["data-min-window-us"]) == run["metrics"]["min_window_us"]
        assert int(row["data-transitions"]) == run["metrics"]["recovery_transitions"]
    assert page.rows["oracle"]["cells"][1] == "3.38 s"


def test_the_stack_row_is_its_conform_case(conform):
    """The stack's own numbers are those conform recorded for that seed."""
    (case,) = [c for c in conform["summary"]["cases"] if c["stack"] == STACK]
    row = _page(conform).rows[STACK]
    m = case["metrics"]
    assert m["completion_us"] is None
    assert int(row["data-delivered-bytes"]) == m["delivered_bytes"] == 2_342_250
    assert int(row["data-min-window-us"]) == m["min_window_us"]
    assert int(row["data-transitions"]) == m["recovery_transitions"]


def test_every_finding_of_the_run_carries_it(conform):
    pages = sorted((conform["report"] / "findings").iterdir())
    assert len(pages) > 1
    for folder in pages:
        assert list(_page(conform, folder.name).rows) == [STACK, "oracle", "oracle-reno"], folder.name


def test_finding_md_has_the_impact_section_after_the_summary(conform, capsys):
    md = (conform["report"] / "findings" / FINDING / "finding.md").read_text()
    headings = re.findall(r"^## (.+)$", md, re.M)
    assert headings[0] == "Impact", headings
    section = md.split("## Impact", 1)[1].split("\n## ", 1)[0]
    oracle = _sim_json(capsys, "oracle")["metrics"]["completion_us"]
    reno = _sim_json(capsys, "oracle-reno")["metrics"]["completion_us"]
    assert f"| `{STACK}` (stack under test) | did not complete in 10 s (2.34 MB of 10 MB delivered) |" in section
    assert f"| `oracle` (CUBIC reference, RFC 9438) | {duration(oracle)} |" in section
    assert f"| `oracle-reno` (Reno control, RFC 9002 NewReno) | {duration(reno)} |" in section
    assert f"ccdiff sim death-spiral --seed {SEED} --stack {STACK}" in section


def test_plots_carry_the_oracles_own_closed_loop(conform, tmp_path):
    """The whole-run plot job of the stack holds the oracle's and the Reno control's own
    cwnd, as the oracle's own `ccdiff sim --trace` run, replayed, gives it."""
    whole = [j for j in conform["jobs"] if j.path.endswith("/plots/death-spiral-seed-1/quiche-0.26.0.png")]
    assert len(whole) == 1
    lines = {line["label"].split()[0]: line for line in plots.closed_loop_lines(whole[0])}
    assert list(lines) == ["oracle", "oracle-reno"]
    assert lines["oracle"]["label"] == "oracle own loop, 3.38 s"
    trace_file = tmp_path / "oracle.jsonl"
    assert main(["sim", "death-spiral", "--seed", str(SEED), "--stack", "oracle", "--no-controls",
                 "--trace", str(trace_file)]) == 0
    trace = load_trace(str(trace_file))
    assert closed_loop_of(trace.header) == ("death-spiral", SEED)
    snaps = replay(trace, ["oracle"], check=False).runs["oracle"].snapshots
    times, cwnd = cwnd_steps([ev.t for ev in trace.events], [s.cwnd for s in snaps])
    assert lines["oracle"]["x_ms"] == [t / 1000 for t in times]
    assert lines["oracle"]["y"] == cwnd
    assert lines["oracle"]["x_ms"][-1] == 3380.07          # the run ends where it completes
    assert max(lines["oracle"]["y"]) > 50 * min(whole[0].stack_snaps[-1].cwnd, 2700)


def test_zoom_plots_cut_the_closed_loops_to_their_window(conform):
    zooms = [j for j in conform["jobs"] if j.path.endswith("window.png") and j.closed_loop]
    assert zooms
    for job in zooms:
        t0, t1 = job.xlim_us or job.clip_us
        for line in plots.closed_loop_lines(job):
            assert line["x_ms"] and t0 / 1000 <= min(line["x_ms"]) and max(line["x_ms"]) <= t1 / 1000


def test_outputs_are_byte_identical_across_runs(conform):
    first, second = conform["first"], conform["report"]
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    for rel in files:
        assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel


def test_chromium_shows_the_impact_before_the_plots(conform, tmp_path):
    shot = tmp_path / "finding.png"
    dom, messages = load(conform["report"] / "findings" / FINDING / "index.html", tmp_path / "profile",
                         screenshot=shot)
    assert messages == []
    assert dom.index('id="impact-table"') < dom.index('id="plots"')
    assert "did not complete in 10 s (2.34 MB of 10 MB delivered)" in dom and "3.38 s" in dom
    assert 'src="../../plots/death-spiral-seed-1/quiche-0.26.0.png"' in dom
    print(f"screenshot: {shot}")


# ---------------------------------------------------------------- pure functions

def test_cwnd_steps_keeps_changes_and_the_last_point():
    assert cwnd_steps([0, 1, 2, 2, 3, 5], [10, 10, 12, 14, 14, 14]) == ([0, 2, 5], [10, 14, 14])
    assert cwnd_steps([], []) == ([], [])
    assert cwnd_steps([0, 4], [None, 7]) == ([4], [7])


def test_clip_steps_carries_the_value_in_effect_into_the_window():
    times, values = [0, 10, 20, 30], [1, 2, 3, 4]
    assert plots.clip_steps(times, values, 15, 25) == ([15, 20, 25], [2, 3, 3])
    assert plots.clip_steps(times, values, 25, 40) == ([25, 30], [3, 4])       # ended inside
    assert plots.clip_steps(times, values, -5, 5) == ([0, 5], [1, 1])
    assert plots.clip_steps(times, values, 40, 50) == ([40], [4])


def test_a_named_stack_is_rerun_under_its_spec(tmp_path):
    """NAME=SPEC: conform's trace header names NAME, the rerun SPEC; the events decide."""
    out = tmp_path / "out"
    assert main(["conform", "--stack", "mutant=oracle:idle=last-send", "--scenarios", "death-spiral",
                 "--seeds", "1", "--jobs", "1", "--out", str(out)]) == 1
    pages = sorted((out / "report" / "mutant" / "findings").iterdir())
    assert pages
    for page in pages:
        parser = ImpactTable()
        parser.feed((page / "index.html").read_text())
        assert list(parser.rows) == ["oracle:idle=last-send", "oracle", "oracle-reno"], page.name
        assert parser.rows["oracle:idle=last-send"]["cells"][1].startswith("did not complete in 10 s")
        md = (page / "finding.md").read_text()
        assert "ccdiff sim death-spiral --seed 0 --stack oracle:idle=last-send" in md
        assert "replayed on" not in md.split("## Impact", 1)[1].split("\n## ", 1)[0]   # no oracle beside it


# ---------------------------------------------------------------- open loop and the rest

def test_open_loop_finding_has_no_impact_table(death_report):
    folder = death_report["out"] / "findings" / DS_FINDING
    html = (folder / "index.html").read_text()
    md = (folder / "finding.md").read_text()
    assert 'id="impact-table"' not in html and "## Impact" not in md
    line = "ccdiff sim death-spiral --seed 0 --stack quiche@0.26.0"
    assert re.search(r'<p id="impact-open">Impact .*needs a closed-loop run.*' + re.escape(line), html)
    assert "needs a closed-loop run" in md and f"`{line}`" in md


def test_open_loop_trace_naming_no_scenario_says_nothing(tmp_path):
    from .conftest import DEATH_SPIRAL
    lines = DEATH_SPIRAL.read_text().splitlines()
    header = json.loads(lines[0])
    header["name"] = "not-a-scenario"
    trace = tmp_path / "renamed.jsonl"
    trace.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    out = tmp_path / "report"
    assert main(["replay", str(trace), "--stack", STACK, "--report", str(out)]) == 1
    pages = list((out / "findings").iterdir())
    assert pages
    for page in pages:
        html, md = (page / "index.html").read_text(), (page / "finding.md").read_text()
        assert 'id="impact' not in html and "## Impact" not in md, page.name
        assert "needs a closed-loop run" not in html + md


def test_a_trace_the_rerun_does_not_reproduce_gets_no_numbers(tmp_path):
    """`ccdiff sim --set` keeps the header name "death-spiral seed=1"; the catalog scenario
    gives another run, so the page names the command instead of wrong numbers."""
    trace = tmp_path / "short.jsonl"
    main(["sim", "death-spiral", "--seed", str(SEED), "--stack", STACK, "--no-controls",
          "--set", "deadline_us=1500000", "--trace", str(trace)])
    assert closed_loop_of(load_trace(str(trace)).header) == ("death-spiral", SEED)
    out = tmp_path / "report"
    assert main(["replay", str(trace), "--stack", STACK, "--report", str(out)]) == 1
    pages = list((out / "findings").iterdir())
    assert pages
    for page in pages:
        html = (page / "index.html").read_text()
        assert 'id="impact"' in html and 'id="impact-table"' not in html
        assert "No impact numbers: this trace is not the run that command gives" in html
        assert f"ccdiff sim death-spiral --seed {SEED} --stack {STACK}" in html

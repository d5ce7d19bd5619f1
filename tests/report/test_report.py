"""`ccdiff report`: what the folder holds, that it is deterministic, and bad input."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ccdiff.cli import main
from ccdiff.trace import load_trace, parse_trace_text

from .conftest import DEATH_SPIRAL, DS_FINDING, ROOT


def _tree(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_layout_and_summary(death_report):
    out = death_report["out"]
    summary = json.loads((out / "summary.json").read_text())
    ids = [f["id"] for f in summary["findings"]]
    assert DS_FINDING in ids
    assert summary["per_stack"]["quiche@0.26.0"]["passed"] == 0
    assert summary["per_stack"]["quiche@0.30.0"] == {"traces": 1, "passed": 1, "violations": 0,
                                                     "deviations": 0, "errors": 0}
    for fid in ids:
        folder = out / "findings" / fid
        assert {p.name for p in folder.iterdir()} == {"index.html", "finding.md"}   # short run: no zoom
    assert [p.name for p in (out / "plots" / "death-spiral").iterdir()] == ["quiche-0.26.0.png"]
    assert (out / "traces" / "death-spiral.jsonl").read_bytes() == DEATH_SPIRAL.read_bytes()
    assert {p.name for p in (out / "qlog" / "death-spiral").iterdir()} == {"quiche-0.26.0.sqlog", "oracle.sqlog"}
    # The findings JSON names what to re-run.
    assert death_report["doc"]["specs"] == ["oracle", "quiche@0.26.0", "quiche@0.30.0"]


def test_junit_matches_findings(death_report):
    root = ET.parse(death_report["out"] / "junit.xml").getroot()
    summary = json.loads((death_report["out"] / "summary.json").read_text())
    assert int(root.get("failures")) == summary["totals"]["violations"] == 3
    suites = {s.get("name"): s for s in root}
    assert list(suites) == ["oracle", "quiche@0.26.0", "quiche@0.30.0"]
    failed = sorted(c.get("name") for c in suites["quiche@0.26.0"] if c.find("failure") is not None)
    assert failed == ["future-recovery-start", "stuck-at-minimum", "trajectory-divergence"]
    assert suites["quiche@0.30.0"].get("failures") == "0"


def test_report_is_byte_identical_when_rebuilt(death_report, tmp_path):
    """Same findings JSON -> same bytes, PNG plots and qlog included."""
    again = tmp_path / "again"
    assert main(["report", str(death_report["json"]), "--out", str(again)]) == 1
    first, second = _tree(death_report["out"]), _tree(again)
    assert sorted(first) == sorted(second)
    different = [name for name in first if first[name] != second[name]]
    assert different == []
    # Rebuilding into an earlier report replaces it.
    assert main(["report", str(death_report["json"]), "--out", str(again)]) == 1
    assert _tree(again) == second


def test_finding_md_is_a_complete_upstream_report(death_report):
    md = (death_report["out"] / "findings" / DS_FINDING / "finding.md").read_text()
    # First line: the status (ccdiff/status.py): quiche 0.26.1 fixed the death spiral.
    assert md.startswith("**Status: fixed upstream in 0.26.1** — https://github.com/cloudflare/quiche/pull/2370 ")
    assert "\n# quiche 0.26.0 CUBIC: recovery start or epoch after the current time" in md
    for section in ("## Versions", "## What the RFC says", "## What quiche does",
                    "## Expected vs actual at event 40", "## Reproducer", "## How to replay"):
        assert section in md, section
    assert "ae3d74f54c01a8be984dabe97ec79b9fceba5054177f703c012ed0f9dc541f81" in md      # pinned crate
    assert "> where t is the elapsed time in seconds from the beginning of the current congestion avoidance stage" in md
    # Code locations: one line range for the death spiral on every page, linked at the exact commit.
    link = ("https://github.com/cloudflare/quiche/blob/0ed0918d1b68965fe210ec32ae2a55a4f377766a/"
            "quiche/src/recovery/congestion/cubic.rs#L151-L176")
    assert "- ccdiff's note on quiche 0.26.0: carries the idle-restart death spiral " \
        f"([`cubic.rs:151-176`]({link}))" in md
    assert f"- idle-shift-from-last-send: [`src/recovery/congestion/cubic.rs:151-176`]({link}) (0.26.0); " in md
    assert "152-176" not in md
    assert "- quiche upstream: https://github.com/cloudflare/quiche at commit [`0ed0918d1b68965fe210ec32ae2a55a4f377766a`]" in md
    assert "How ccdiff drove the controller: " in md and "implementations/quiche/patches/ccdiff_internal.rs" in md
    assert re.search(r"\*Found by ccdiff \d+\.\d+\.\d+ \([0-9a-f]+(\+dirty)?\),", md)
    assert re.search(r"\| recovery_start_us \*\*≠\*\* \| 50400 \| 60600 \|", md)          # expected vs actual
    assert "Save the trace above as `death-spiral.jsonl`, then:" in md
    assert "ccdiff replay death-spiral.jsonl --stack quiche@0.26.0 --stack oracle" in md
    assert "docker compose run --rm replay death-spiral.jsonl --stack quiche@0.26.0 --stack oracle" in md
    assert "`stuck-at-minimum` (violation, ×5)" in md
    # Since quiche's losses are read from its counters (2026-11-29), its own events show it.
    assert "**Reached by quiche's own connection: yes** — `death-spiral-loopback`, seed 4, event 23" in md
    # The minimal reproducer is one quiche's own connection could send (issue #30 item 6).
    assert "## Minimal reproducer" in md
    assert "Every send fits quiche@0.26.0's own congestion window (RFC 9002 §7;" in md
    # The reproducer is the whole trace, verbatim: paste it into a file and it replays.
    block = re.search(r"```jsonl\n(.*?)\n```", md, re.S).group(1)
    assert parse_trace_text(block).events == load_trace(str(DEATH_SPIRAL)).events


def test_long_trace_shows_the_window(tmp_path):
    """A long trace: the page shows the lines around the violation and links the full file."""
    findings, out = tmp_path / "f.json", tmp_path / "r"
    trace = str(ROOT / "examples" / "idle-restart.jsonl")
    code = main(["replay", trace, "--stack", "oracle:idle=none", "--json", str(findings), "--report", str(out)])
    assert code == 1
    (page,) = (out / "findings").glob("*idle-inflation*/index.html")
    html = page.read_text()
    assert "of 4083)" in html and 'href="../../traces/idle-restart.jsonl"' in html
    assert len(re.findall(r'<span class="(?:line|mark)">', html)) == 41
    assert (page.parent / "window.png").exists()
    md = (page.parent / "finding.md").read_text()
    assert "Trace lines" in md and "the full trace is attached" in md


@pytest.mark.parametrize("content, message", [
    ("not json", "not a JSON findings document"),
    ('{"findings": []}', "not a findings document"),
    ('{"trace": "nope.jsonl", "specs": ["oracle"], "findings": []}', "nope.jsonl from the findings document not found"),
    ('{"trace": "%s", "specs": ["nosuchstack"], "findings": []}' % DEATH_SPIRAL, "unknown stack 'nosuchstack'"),
])
def test_bad_input_is_a_clear_error(tmp_path, capsys, content, message):
    doc = tmp_path / "bad.json"
    doc.write_text(content)
    assert main(["report", str(doc), "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err


def test_changed_trace_is_refused(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(DEATH_SPIRAL.read_bytes())
    findings = tmp_path / "f.json"
    assert main(["replay", str(trace), "--stack", "oracle:idle=last-send", "--json", str(findings)]) == 1
    trace.write_text("\n".join(trace.read_text().splitlines()[:12]) + "\n")   # cut before the spiral
    assert main(["report", str(findings), "--out", str(tmp_path / "out")]) == 2
    assert "does not reproduce the findings" in capsys.readouterr().err


def test_foreign_output_folder_is_not_overwritten(tmp_path, capsys):
    findings, out = tmp_path / "f.json", tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main(["replay", str(DEATH_SPIRAL), "--stack", "oracle", "--json", str(findings)]) == 0
    assert main(["report", str(findings), "--out", str(out)]) == 2
    assert "ccdiff did not write it" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "keep me"


def test_matrix_json_reports_every_trace(tmp_path):
    findings, out = tmp_path / "m.json", tmp_path / "r"
    traces = [str(DEATH_SPIRAL), str(ROOT / "examples" / "idle-restart.jsonl")]
    assert main(["matrix", *traces, "--stack", "oracle", "--stack", "oracle:idle=last-send",
                 "--json", str(findings)]) == 1
    assert main(["report", str(findings), "--out", str(out)]) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["traces"] == traces
    assert summary["per_stack"]["oracle"] == {"traces": 2, "passed": 2, "violations": 0, "deviations": 0,
                                              "errors": 0}
    matrix_doc = json.loads(findings.read_text())
    assert sorted((f["stack"], f["invariant"], f["trace"]) for f in matrix_doc["findings"]) == \
        sorted((f["stack"], f["invariant"], f["trace"]) for f in summary["findings"])


def test_plots_drawn_in_workers_match_serial(tmp_path, monkeypatch):
    """Many plots are drawn in worker processes: the bytes must not depend on that."""
    import ccdiff.report.plots as plots
    findings = tmp_path / "m.json"
    traces = [str(DEATH_SPIRAL), str(ROOT / "examples" / "idle-restart.jsonl")]
    stacks = ["oracle:idle=last-send", "oracle:idle=none", "oracle:idle=last-send,fast_convergence=off",
              "oracle:idle=none,fast_convergence=off"]
    main(["matrix", *traces, *[a for s in stacks for a in ("--stack", s)], "--json", str(findings)])
    calls = []
    real_plot = plots.plot_run
    monkeypatch.setattr(plots.os, "cpu_count", lambda: 1)     # serial: drawn in this process
    monkeypatch.setattr(plots, "plot_run", lambda job: calls.append(job.path) or real_plot(job))
    assert main(["report", str(findings), "--out", str(tmp_path / "serial")]) == 1
    assert len(calls) >= 4                                     # enough to use workers when allowed
    monkeypatch.undo()
    monkeypatch.setattr(plots.os, "cpu_count", lambda: 2)
    assert main(["report", str(findings), "--out", str(tmp_path / "pool")]) == 1
    assert _tree(tmp_path / "serial") != {} and _tree(tmp_path / "serial") == _tree(tmp_path / "pool")


def test_the_examples_report_links_a_conform_overview_beside_it(tmp_path):
    """`make run` writes reports/conform (closed loop) then reports/html (the examples): the
    examples' index links the overview when one sits beside it, and says nothing otherwise."""
    link = '<a href="../conform/index.html">'
    trace = str(ROOT / "examples" / "death-spiral.jsonl")
    alone = tmp_path / "alone" / "html"
    assert main(["replay", trace, "--stack", "oracle", "--report", str(alone)]) == 0
    assert link not in (alone / "index.html").read_text()
    (tmp_path / "pair" / "conform").mkdir(parents=True)
    (tmp_path / "pair" / "conform" / "index.html").write_text("<html></html>\n")
    paired = tmp_path / "pair" / "html"
    assert main(["replay", trace, "--stack", "oracle", "--report", str(paired)]) == 0
    assert link in (paired / "index.html").read_text()


def test_growth_in_recovery_report_quotes_each_rule(tmp_path):
    """Every verbatim quote of the rule is on the page, each under its own section and each a
    Markdown block quote of its own (a line right after a quote would join it)."""
    from ccdiff.build import ensure_built
    from ccdiff.invariants import CATALOG
    ensure_built("aioquic@1.7.2")   # its CUBIC grows in recovery on this trace (test_against, matrix)
    findings, out = tmp_path / "f.json", tmp_path / "r"
    trace = str(ROOT / "examples" / "app-limited-then-bulk.jsonl")
    assert main(["replay", trace, "--stack", "aioquic@1.7.2", "--json", str(findings), "--report", str(out)]) == 1
    (page,) = (out / "findings").glob("*growth-in-recovery*/finding.md")
    md = page.read_text()
    inv = CATALOG["growth-in-recovery"]
    blocks = [f", {inv.quote_from}:\n\n> {inv.quote}\n\n"]
    blocks += [f"\n\n{where}:\n\n> {text}\n\n" for text, where in inv.more_quotes]
    for block in blocks:
        assert block in md, block
    assert "> Do not increase congestion window in recovery period.\n\n" in md
    # Issue #31 item 4: the page says whether aioquic's own connection reached it (the profile's
    # [[reached]] entry, rerun by tests/connection/test_reached.py).
    assert ("**Reached by aioquic's own connection: yes** — `death-spiral`, seed 3, event 26\nof the "
            "connection's own qlog, judged by the same invariant") in md
    assert "`ccdiff sim death-spiral --mode connection --stack aioquic@1.7.2 --seed 3 --qlog own.qlog" in md
    html = (page.parent / "index.html").read_text()
    assert html.count("<blockquote>") == 1 + len(inv.more_quotes) == 3


def test_linux_report_says_where_linux_takes_reports(tmp_path, monkeypatch):
    """A Linux bug report names the netdev list (provenance.toml report_to) and links the
    kernel's own git.kernel.org, never a GitHub mirror; a quiche report whose finding is
    fixed upstream shows no 'Where to report' (death_report covers that below).  No real
    Linux finding is left on the examples (issue #30 withdrew stuck-at-minimum's), so the
    documented recovery-until-high-seq deviation is taken out of Linux's profile for this
    test: its missing-reduction on the death-spiral example becomes a finding to report."""
    import dataclasses
    from ccdiff import replay as replay_module
    from ccdiff.build import ensure_built
    ensure_built("linux@6.1")
    real = replay_module.load_profile

    def without_high_seq(recipe):
        profile = real(recipe)
        if recipe is not None and recipe.name == "linux":
            profile = dataclasses.replace(profile, deviations=[d for d in profile.deviations
                                                               if d["id"] != "recovery-until-high-seq"])
        return profile
    monkeypatch.setattr(replay_module, "load_profile", without_high_seq)
    trace = ROOT / "examples" / "death-spiral.jsonl"
    findings, out = tmp_path / "f.json", tmp_path / "r"
    assert main(["replay", str(trace), "--stack", "linux@6.1", "--json", str(findings), "--report", str(out)]) == 1
    reports = [p.read_text() for p in (out / "findings").glob("*/finding.md")]
    bug_reports = [md for md in reports if "**Where to report:**" in md]
    assert bug_reports and all(md.startswith("**Status: new here") for md in bug_reports)
    for md in reports:
        assert "github.com" not in md
        assert "https://git.kernel.org/pub/scm/linux/kernel/git/stable/linux.git/tree/?h=v6.1.176" in md
    for md in bug_reports:
        assert "**Where to report:** the netdev mailing list, netdev@vger.kernel.org" in md
        assert "— mailto:netdev@vger.kernel.org\n" in md


def test_fixed_finding_has_no_where_to_report(death_report):
    md = (death_report["out"] / "findings" / DS_FINDING / "finding.md").read_text()
    assert md.startswith("**Status: fixed upstream in 0.26.1**")
    assert "Where to report" not in md


def test_a_finding_after_event_400_gets_its_minimal_reproducer(tmp_path):
    """quiche 0.26.0 on death-spiral seed 1 stays at its minimum from event 515 of 2,790: a
    report used to refuse any prefix above 400 events ("shrinks at most 400"), which was
    most of a conform run's findings.  ddmin on it needs ~100 replays; the report's bound is
    now a budget of replayed events, deterministic like the rest of the page."""
    from ccdiff.sim import load_scenario, simulate
    trace = tmp_path / "ds.jsonl"
    trace.write_text(simulate(load_scenario("death-spiral"), "quiche@0.26.0", 1).trace_text())
    out = tmp_path / "r"
    assert main(["replay", str(trace), "--stack", "quiche@0.26.0", "--report", str(out)]) == 1
    (page,) = (out / "findings").glob("*stuck-at-minimum*/finding.md")
    md = page.read_text()
    assert "None in this report" not in md
    events = int(re.search(r"`ccdiff minimize` shrinks the trace to (\d+) events", md).group(1))
    first = int(re.search(r"## Expected vs actual at event (\d+)", md).group(1))
    assert first > 400 and events < 100
    assert "within the report's budget" not in md          # ~100 replays: far inside it

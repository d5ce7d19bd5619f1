"""One report per root cause per stack (issue 30 item 7, ccdiff/report/causes.py).

aioquic 1.7.2's CUBIC grows its window on ACKs of packets sent before recovery started
(RFC 9002 §7.3.2, Appendix B.5) on every example with a loss: one bug, one report.  The
primary page is the shortest trace's (death-spiral, 132 events; long-recovery has 2292); the
other traces' pages point to it.  quiche 0.26.0's trajectory divergence on the death spiral
follows its future recovery start: listed on that page as its consequence.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ccdiff.build import ensure_built
from ccdiff.cli import main

from .conftest import DS_FINDING

ROOT = Path(__file__).resolve().parents[2]
PRIMARY = "death-spiral--aioquic-1.7.2--growth-in-recovery"
OTHER = "long-recovery--aioquic-1.7.2--growth-in-recovery"


@pytest.fixture(scope="module")
def two_traces(tmp_path_factory):
    ensure_built("aioquic@1.7.2")
    out = tmp_path_factory.mktemp("causes") / "report"
    traces = [str(ROOT / "examples" / name) for name in ("long-recovery.jsonl", "death-spiral.jsonl")]
    assert main(["matrix", *traces, "--stack", "aioquic@1.7.2", "--report", str(out)]) == 1
    return out


def test_summary_counts_one_root_cause_over_two_occurrences(two_traces):
    summary = json.loads((two_traces / "summary.json").read_text())
    totals = summary["totals"]
    assert (totals["root_causes"], totals["occurrences"], totals["consequences"], totals["bug_reports"]) == (1, 2, 0, 1)
    by_id = {f["id"]: f for f in summary["findings"]}
    assert by_id[PRIMARY]["role"] == "primary" and by_id[OTHER]["role"] == "occurrence"
    assert by_id[PRIMARY]["root_cause"] == by_id[OTHER]["root_cause"] == PRIMARY
    assert by_id[OTHER]["report"] == f"findings/{PRIMARY}/finding.md"
    assert all(f["role"] == "" and f["root_cause"] == "" for f in summary["findings"] if f["status"] == "deviation")
    index = (two_traces / "index.html").read_text()
    assert "One report per root cause: <strong>1</strong> root cause\n(1 to report), 2 occurrences" in index
    # One "(bug report)" link for growth-in-recovery: the primary's.
    assert index.count(f'findings/{PRIMARY}/finding.md">finding.md (bug report)') == 1
    assert f'findings/{OTHER}/finding.md">finding.md (bug report)' not in index


def test_the_primary_carries_the_report_and_lists_the_other_trace(two_traces):
    md = (two_traces / "findings" / PRIMARY / "finding.md").read_text()
    assert md.startswith("**Status: new**")
    assert "**One root cause on 2 traces**, reported here once; the other occurrences" in md
    assert "examples/long-recovery.jsonl`, event 136 (t = 300 ms): cwnd 41160 -> 41194 on an ACK" in md
    assert "### As a test for aioquic's own suite" in md
    html = (two_traces / "findings" / PRIMARY / "index.html").read_text()
    assert f'<a href="../../findings/{OTHER}/index.html"><code>{ROOT}/examples/long-recovery.jsonl</code></a>' in html


def test_the_other_occurrence_points_to_the_primary_and_is_no_report(two_traces):
    md = (two_traces / "findings" / OTHER / "finding.md").read_text()
    assert md.startswith("**Status: another occurrence of growth-in-recovery on aioquic@1.7.2 — part of the report "
                         f"on death-spiral.jsonl (findings/{PRIMARY}), not a report of its own**")
    assert "Where to report" not in md
    assert f"is reported in\n`findings/{PRIMARY}/finding.md`" in md
    # The report's minimal reproducer and native test are the primary's only.
    assert "## Minimal reproducer" not in md and "As a test for" not in md
    root = ET.parse(two_traces / "junit.xml").getroot()
    failures = [f.text for f in root.iter("failure")]
    assert failures and all(text.endswith(f"report: findings/{PRIMARY}/finding.md") for text in failures)


def test_a_divergence_that_follows_a_violation_is_listed_on_its_page(death_report):
    out = death_report["out"]
    summary = json.loads((out / "summary.json").read_text())
    divergence = next(f for f in summary["findings"] if f["invariant"] == "trajectory-divergence"
                      and f["stack"] == "quiche@0.26.0")
    assert divergence["role"] == "consequence" and divergence["root_cause"] == DS_FINDING
    assert divergence["report"] == f"findings/{DS_FINDING}/finding.md"
    assert summary["totals"]["consequences"] == 1
    md = (out / "findings" / DS_FINDING / "finding.md").read_text()
    assert "**Consequences in this run** (part of this report, not reports of their own):\n" \
           "- `trajectory-divergence` from event 45 (t = " in md
    own = (out / divergence["page"]).parent / "finding.md"
    assert f"follows `future-recovery-start` (event\n40) of the same run: `findings/{DS_FINDING}/finding.md` lists it." \
        in own.read_text()

"""A reused conform --out: resume reruns what changed or lost its files, and an all-pass run
leaves no earlier failure behind (issue 22)."""
from __future__ import annotations

import json
from pathlib import Path

from ccdiff.cli import main

FAILING = "x=oracle:idle=last-send"      # the death spiral's recovery start in the future
TRACE = Path("traces/death-spiral/x/seed-0.jsonl")


def conform(out: Path, stacks: str, *extra: str) -> int:
    return main(["conform", "--scenarios", "death-spiral", "--seeds", "1", "--jobs", "1", "--stacks", stacks,
                 "--out", str(out), *extra])


def traces_of(out: Path) -> list:
    return [c.get("trace") for c in json.loads((out / "summary.json").read_text())["cases"]]


def test_a_run_after_traces_none_writes_the_traces_and_report(tmp_path):
    out = tmp_path / "out"
    assert conform(out, FAILING, "--traces", "none") == 1
    assert not (out / TRACE).exists()
    assert conform(out, FAILING) == 1            # --traces failing: the journal's cases had none
    assert (out / TRACE).is_file()
    assert str(TRACE) in traces_of(out)
    assert (out / "report/x/index.html").is_file()


def test_a_resumed_case_whose_trace_is_gone_runs_again(tmp_path, capsys):
    out = tmp_path / "out"
    assert conform(out, FAILING) == 1
    (out / TRACE).unlink()
    assert conform(out, FAILING) == 1            # exited 2: the report read the missing trace
    assert (out / TRACE).is_file()
    assert "Traceback" not in capsys.readouterr().err


def test_an_all_pass_run_removes_the_earlier_failures_only(tmp_path):
    out = tmp_path / "out"
    assert conform(out, FAILING) == 1
    assert (out / "report/x/index.html").is_file() and (out / TRACE).is_file()
    (out / "report/notes.txt").write_text("mine")            # not ccdiff's: stays
    (out / "traces/keep.jsonl").write_text("mine")
    assert conform(out, "x=oracle") == 0
    assert not (out / "report/x").exists()
    assert not (out / TRACE).exists() and not (out / "traces/death-spiral").exists()
    assert (out / "report/notes.txt").read_text() == "mine"
    assert (out / "traces/keep.jsonl").read_text() == "mine"
    assert all(t is None for t in traces_of(out))

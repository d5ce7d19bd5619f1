"""`ccdiff conform`: the matrix, its outputs and its exit codes."""
from __future__ import annotations

from ccdiff.cli import main
from ccdiff.conform import run_conform, with_controls, write_outputs
from ccdiff.sim import load_scenario


def test_reno_controls_are_added():
    specs = with_controls(["oracle", "oracle:idle=last-send"])
    assert specs == ["oracle", "oracle:idle=last-send", "oracle-reno"]


def test_summary_is_byte_identical_across_runs(tmp_path):
    scenarios = [load_scenario("tail-loss"), load_scenario("death-spiral").with_params(bytes=300_000)]
    for name in ("a", "b"):
        summary = run_conform(["oracle", "oracle:idle=last-send"], scenarios, [0, 1], str(tmp_path / name), jobs=2)
        write_outputs(summary, str(tmp_path / name))
    for leaf in ("summary.json", "junit.xml"):
        assert (tmp_path / "a" / leaf).read_bytes() == (tmp_path / "b" / leaf).read_bytes()
    assert summary["totals"]["runs"] == 2 * 2 * 2
    junit = (tmp_path / "a" / "junit.xml").read_text()
    assert junit.count("<testcase") == 4


def test_exit_codes(tmp_path, capsys):
    assert main(["conform", "--stacks", "oracle", "--scenarios", "tail-loss", "--seeds", "1",
                 "--out", str(tmp_path / "ok"), "--jobs", "1"]) == 0
    assert main(["conform", "--stacks", "oracle", "--scenarios", "nope", "--seeds", "1",
                 "--out", str(tmp_path / "bad")]) == 2

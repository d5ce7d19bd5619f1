"""The must-show results of the foundation, through the real CLI."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEATH_SPIRAL = "examples/death-spiral.jsonl"
IDLE_RESTART = "examples/idle-restart.jsonl"


def ccdiff(*args, tmp_path=None):
    proc = subprocess.run([sys.executable, "-m", "ccdiff", *args], capture_output=True, text=True, cwd=ROOT)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def findings(tmp_path, trace, *specs):
    out = tmp_path / "findings.json"
    args = ["replay", trace, "--json", str(out)]
    for spec in specs:
        args += ["--stack", spec]
    proc = ccdiff(*args)
    return proc.returncode, json.loads(out.read_text())


def test_death_spiral_correct_oracle_passes(tmp_path):
    code, doc = findings(tmp_path, DEATH_SPIRAL, "oracle")
    assert code == 0 and doc["findings"] == []


def test_death_spiral_last_send_mutant_pushes_recovery_into_the_future(tmp_path):
    code, doc = findings(tmp_path, DEATH_SPIRAL, "oracle:idle=last-send")
    assert code == 1
    ids = {f["invariant"] for f in doc["findings"]}
    assert "future-recovery-start" in ids and "stuck-at-minimum" in ids
    first = next(f for f in doc["findings"] if f["invariant"] == "future-recovery-start")
    assert first["line"] > 1 and first["t_us"] > 0 and "after now" in first["detail"]


def test_idle_restart_flags_inflation_only_for_the_no_shift_mutant(tmp_path):
    code, doc = findings(tmp_path, IDLE_RESTART, "oracle", "oracle:idle=none")
    assert code == 1
    by_stack = {}
    for f in doc["findings"]:
        by_stack.setdefault(f["stack"], set()).add(f["invariant"])
    assert by_stack == {"oracle:idle=none": {"idle-inflation"}}


def test_reno_control_passes_both_examples(tmp_path):
    for trace in (DEATH_SPIRAL, IDLE_RESTART):
        code, doc = findings(tmp_path, trace, "oracle-reno")
        assert code == 0, doc["findings"]


def test_examples_are_reproducible():
    before = {p: (ROOT / p).read_text() for p in (DEATH_SPIRAL, IDLE_RESTART)}
    subprocess.run([sys.executable, "examples/make_examples.py"], cwd=ROOT, check=True, capture_output=True)
    assert {p: (ROOT / p).read_text() for p in before} == before


def test_terminal_summary_names_stack_invariant_and_line():
    proc = ccdiff("replay", DEATH_SPIRAL, "--stack", "oracle", "--stack", "oracle:idle=last-send")
    assert proc.returncode == 1
    assert "future-recovery-start" in proc.stdout and "oracle:idle=last-send" in proc.stdout
    assert "line " in proc.stdout and "FAIL" in proc.stdout and "pass" in proc.stdout


def test_bad_specs_and_missing_builds_exit_2_with_one_line():
    for spec, words in (("nosuchstack", "unknown stack"), ("oracle:idle=sometimes", "unknown option"),
                        ("oracle@1.0", "no versions"), ("Bad Spec!", "bad stack spec")):
        proc = ccdiff("replay", DEATH_SPIRAL, "--stack", spec)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr


def test_help_teaches():
    proc = ccdiff("--help")
    assert proc.returncode == 0 and "examples:" in proc.stdout and "exit codes" in proc.stdout
    proc = ccdiff("replay", "--help")
    assert "name[@version][:key=value,...]" in proc.stdout

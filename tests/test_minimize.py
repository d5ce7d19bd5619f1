"""`ccdiff minimize`: the fewest events that still show a finding, strict when the input is."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ccdiff.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent


def ccdiff(*args):
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], cwd=ROOT, capture_output=True, text=True)


def test_the_death_spiral_shrinks_to_a_strict_five_event_reproducer_that_still_fires(tmp_path):
    out = tmp_path / "min.jsonl"
    proc = ccdiff("minimize", "examples/death-spiral.jsonl", "--stack", "quiche@0.26.0",
                  "--invariant", "future-recovery-start", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "132 -> 5 events, strict" in proc.stderr
    small = load_trace(str(out))
    assert len(small.events) <= 5 and small.reachability == "strict"
    replayed = ccdiff("replay", str(out), "--stack", "quiche@0.26.0", "--stack", "quiche@0.30.0")
    assert replayed.returncode == 1 and "future-recovery-start" in replayed.stdout
    # quiche 0.30.0 with its idle fix does not fire on it: the reproducer isolates the bug.
    assert "quiche@0.30.0 future-recovery-start" not in replayed.stdout


def test_an_invariant_that_does_not_fire_is_exit_2_with_what_does(tmp_path):
    proc = ccdiff("minimize", "examples/death-spiral.jsonl", "--stack", "quiche@0.30.0",
                  "--invariant", "future-recovery-start")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "future-recovery-start does not fire on quiche@0.30.0" in proc.stderr
    bad = ccdiff("minimize", "examples/death-spiral.jsonl", "--stack", "oracle", "--invariant", "nope")
    assert bad.returncode == 2 and "--invariant 'nope': unknown" in bad.stderr

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


def test_a_trace_within_the_stacks_window_shrinks_to_one_within_it_too(tmp_path):
    """Issue #30 item 6: a reproducer sent to a stack's maintainers never sends more than that
    stack's own window allows (RFC 9002 §7).  quinn's own closed loop on idle-restart (within
    its window by construction) diverges; a free ddmin drops the ACKs that made room for
    later sends and ends beyond quinn's window, so minimize keeps the bound."""
    from ccdiff.fuzzing.triage import _ddmin, cut_to_finding, signatures, window_of
    spec, trace_path = "quinn@0.11.19", tmp_path / "quinn.jsonl"
    assert ccdiff("sim", "idle-restart", "--stack", spec, "--seed", "1", "--trace", str(trace_path)).returncode == 1
    trace = load_trace(str(trace_path))
    assert window_of(trace, spec) is None
    sig = next(s for s in signatures(trace, spec).values() if s.invariant == "trajectory-divergence")
    cut = cut_to_finding(trace, sig, spec)
    free = _ddmin(cut, sig.key, lambda candidate: signatures(candidate, spec))
    assert window_of(free, spec) is not None          # what minimize returned before the bound
    out = tmp_path / "min.jsonl"
    proc = ccdiff("minimize", str(trace_path), "--stack", spec, "--invariant", "trajectory-divergence", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().endswith(f"strict; within {spec}'s own window -> {out}"), proc.stderr
    small = load_trace(str(out))
    assert window_of(small, spec) is None and sig.key in signatures(small, spec)

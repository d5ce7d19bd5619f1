"""Every "reached by the stack's own connection: yes" a report page states is true: each
[[reached]] entry with state "yes" in a profile.toml is rerun with its own command and its
finding is on the connection's own events, at the event it names, with the stack's own logged
window making the flagged step, or, for an entry confirmed_by = "own-window", with the same
invariant flagging the stack's own logged window at that event (issue #31 item 4;
ccdiff/connection/confirm.py)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ccdiff.profiles import load_profile
from ccdiff.stacks import load_recipes

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = [(name, entry) for name, recipe in sorted(load_recipes().items())
          for entry in load_profile(recipe).reached if entry["state"] == "yes"]


def test_there_are_claims_to_check():
    assert {(name, e["invariant"]) for name, e in CLAIMS} >= {("aioquic", "growth-in-recovery"),
                                                              ("aioquic", "idle-inflation"),
                                                              ("ngtcp2", "idle-inflation"),
                                                              ("picoquic", "ca-growth-bound"),
                                                              ("picoquic", "idle-inflation"),
                                                              ("quiche", "idle-inflation"),
                                                              ("quinn", "idle-inflation"),
                                                              ("quinn", "missing-reduction")}


@pytest.mark.parametrize("name,entry", CLAIMS, ids=[f"{n}-{e['invariant']}" for n, e in CLAIMS])
def test_a_claimed_reach_is_rerun_and_holds(tmp_path, name, entry):
    argv = shlex.split(entry["command"])
    assert argv[:2] == ["ccdiff", "sim"] and "--qlog" in argv, entry["command"]
    proc = subprocess.run([sys.executable, "-m", "ccdiff", *argv[1:], "--json"], cwd=tmp_path,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=900)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (run,) = [r for r in json.loads(proc.stdout)["runs"] if r.get("own_events")]
    found = [f for f in run["own_events"]["findings"]
             if f["invariant"] == entry["invariant"] and f["status"] == "violation"]
    assert found, run["own_events"]["findings"]
    assert found[0]["event"] == entry["event"], found[0]
    if entry.get("confirmed_by", "logged-step") == "own-window":
        assert found[0]["own_window"] is not None, found[0]
        assert found[0]["own_window"]["event"] == entry["event"], found[0]["own_window"]
    else:
        assert found[0]["logged_step"]["confirmed"], found[0]["logged_step"]


def test_the_stack_s_own_window_is_judged_at_the_finding_s_event(tmp_path):
    """aioquic's own connection on outage-3s, seed 0: the adapter fed its events flags
    excess-reduction at event 4041 (its window to 12,000 after the 3 s blackout), and the same
    rule on aioquic's own logged window flags it there too.  The check compared only the own
    window's first excess-reduction (event 1501, a flight-size cut the adapter's side explains),
    so it said "not confirmed" (ccdiff/connection/confirm.py, own_window's occurrences)."""
    argv = ["sim", "outage-3s", "--mode", "connection", "--stack", "aioquic", "--seed", "0",
            "--qlog", "own.qlog", "--no-controls", "--json"]
    proc = subprocess.run([sys.executable, "-m", "ccdiff", *argv], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=900)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (run,) = [r for r in json.loads(proc.stdout)["runs"] if r.get("own_events")]
    (found,) = [f for f in run["own_events"]["findings"] if f["invariant"] == "excess-reduction"]
    assert found["event"] == 4041 and found["own_window"]["event"] == 4041, found
    assert found["own_window"]["count"] > 1           # the first occurrence on its own window is earlier

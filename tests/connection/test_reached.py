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
                                                              ("quinn", "idle-inflation")}


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

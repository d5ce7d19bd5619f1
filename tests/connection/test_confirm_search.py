"""`ccdiff confirm` (ccdiff/connection/search.py): a search over the network and the
application that reaches a finding with the stack's own connection (issue #31 item 4)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccdiff.connection.search import AXES, Outcome, Search, draw_from_trace, scenario_fields
from ccdiff.trace import load_trace

ROOT = Path(__file__).resolve().parents[2]
CSS_IDLE = ROOT / "fuzz" / "reproducers" / "quiche-css-epoch-counts-idle.jsonl"


def ccdiff(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=900)


def test_the_finding_s_trace_suggests_the_network_that_reaches_it():
    """quiche's CSS-epoch reproducer: a 10 ms path whose RTT rises to 15 ms with nothing lost,
    then a 7 s pause -- a deep queue, no loss, the longest pause."""
    draw = draw_from_trace(load_trace(str(CSS_IDLE)))
    assert draw == {"rate_bytes_per_s": 1_250_000, "base_rtt_us": 10_000, "queue_bdp": 64, "loss": 0.0,
                    "bursts": 3, "bytes": 2_000_000, "pause_us": 8_000_000, "outage_us": 0}
    fields = scenario_fields(draw)
    assert fields["loss_schedule"] == [] and fields["queue_bytes"] == 800_000 and fields["blackouts"] == []
    assert fields["period_us"] - fields["max_stall_us"] + 4_000_000 > fields["bytes"] * 1_000_000 // 1_250_000


def test_an_outage_is_a_blackout_half_way_into_the_first_burst():
    draw = dict(draw_from_trace(load_trace(str(CSS_IDLE))), outage_us=3_000_000)
    fields = scenario_fields(draw)
    assert fields["blackouts"] == [[800_000, 3_800_000]]
    assert fields["max_stall_us"] == 8_000_000 + 3_000_000 + 4_000_000


def test_the_search_shrinks_to_the_simplest_draw_within_its_budget():
    """Without a stack (Search.run replaced by a rule on the draw): from a reaching start each
    axis moves towards its simplest value while the rule still holds; the budget bounds the
    runs, shrinking included; the same search gives the same runs."""
    def rule(self, draw):
        key = json.dumps(draw, sort_keys=True)
        if key not in self.runs:
            ok = draw["queue_bdp"] >= 16 and draw["pause_us"] >= 3_000_000 and draw["bytes"] >= 500_000
            self.runs[key] = Outcome(draw, {}, {"event": 1} if ok else None, "own window" if ok else None)
        return self.runs[key]
    start = {name: values[-1] for name, values in AXES.items()}
    searches = []
    for budget in (60, 60, 4):
        search = Search("idle-restart", "quiche@0.30.0", "idle-inflation", 0, budget)
        search.run = rule.__get__(search)
        searches.append((search, search.search(start)))
    (a, best), (b, again), (small, partial) = searches
    assert best.draw == {"rate_bytes_per_s": 1_250_000, "base_rtt_us": 10_000, "queue_bdp": 16, "loss": 0.0,
                         "bursts": 2, "bytes": 500_000, "pause_us": 3_000_000, "outage_us": 0}
    assert list(a.runs) == list(b.runs) and again.draw == best.draw
    assert len(small.runs) == 4 and partial.reached and partial.draw != best.draw


@pytest.mark.skipif(shutil.which("cargo") is None, reason="quiche's shim needs cargo")
def test_confirm_reaches_quiche_s_css_idle_inflation_with_its_own_connection(tmp_path):
    """From the fuzz reproducer's shape, quiche 0.30.0's own connection shows the idle
    inflation with its own logged window on the first draw; the command printed shows it
    again; with HyStart++ off the same draw does not reach it (exit 0)."""
    found = ccdiff("confirm", "--stack", "quiche@0.30.0", "--invariant", "idle-inflation", "--from", str(CSS_IDLE),
                   "--budget", "1", "--json")
    assert found.returncode == 1, found.stderr[-2000:]
    doc = json.loads(found.stdout)
    assert doc["reached"] and doc["outcome"]["confirmed_by"] == "own window" and len(doc["runs"]) == 1
    assert "[confirm] run 1/1: 10 Mbit/s, 10 ms, queue 64 BDP, loss 0%" in found.stderr
    argv = doc["command"].split()
    assert argv[:2] == ["ccdiff", "sim"]
    again = ccdiff(*argv[1:], "--json", cwd=tmp_path)
    assert again.returncode == 1
    (run,) = [r for r in json.loads(again.stdout)["runs"] if r.get("own_events")]
    assert any(f["invariant"] == "idle-inflation" and f["event"] == doc["outcome"]["finding"]["event"]
               for f in run["own_events"]["findings"])
    off = ccdiff("confirm", "--stack", "quiche@0.30.0:hystart=off", "--invariant", "idle-inflation", "--from",
                 str(CSS_IDLE), "--budget", "1", "--no-shrink")
    assert off.returncode == 0, off.stderr[-2000:]
    assert "not reached by quiche@0.30.0:hystart=off's own connection in 1 runs" in off.stdout


@pytest.mark.parametrize("args, message", [
    (["--stack", "linux", "--invariant", "idle-inflation"], "no connection shim"),
    (["--stack", "quiche", "--invariant", "no-such"], "not an invariant"),
    (["--stack", "quiche", "--invariant", "idle-inflation", "--set", "nosuch=1"], "unknown scenario field"),
    (["--stack", "quiche", "--invariant", "idle-inflation", "--budget", "0"], "--budget"),
    (["--stack", "quiche", "--invariant", "idle-inflation", "--from", "/nonexistent.jsonl"], "--from"),
])
def test_confirm_errors_exit_2_with_one_line(args, message):
    result = ccdiff("confirm", *args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr

"""`ccdiff conform --mode connection`: the stacks' own connections in the matrix, their
records kept for failing cases, resumed from the journal, sharded and merged like any run."""
from __future__ import annotations

import json
from pathlib import Path

from ccdiff.cli import main
from ccdiff.connection import run_connection
from ccdiff.sim.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]


def short_scenario(folder: Path) -> Path:
    """death-spiral with 300 kB and a 150 ms deadline: aioquic's own connection misses it
    on some seeds and not on others, so failing cases keep their records."""
    text = (REPO / "scenarios" / "death-spiral.toml").read_text()
    path = folder / "short.toml"
    path.write_text(text.replace("bytes = 10_000_000", "bytes = 300_000")
                    .replace("deadline_us = 10_000_000", "deadline_us = 150_000")
                    .replace('name = "death-spiral"', 'name = "short"'))
    return path


def test_conform_drives_the_stacks_own_connections_and_keeps_failing_records(tmp_path, capsys):
    scenario = short_scenario(tmp_path)
    out = tmp_path / "out"
    code = main(["conform", "--mode", "connection", "--stack", "aioquic", "--scenarios", str(scenario),
                 "--seeds", "3", "--out", str(out), "--jobs", "2"])
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["modes"] == {"aioquic": "connection", "oracle-reno": "closed-loop",
                                "aioquic-reno": "connection"}
    assert "aioquic (own connection)" in printed and "oracle-reno (closed loop)" in printed
    own = [c for c in summary["cases"] if c["stack"] == "aioquic"]
    assert [c["mode"] for c in own] == ["connection"] * 3
    failing = [c for c in own if c["status"] == "fail"]
    assert failing and code == 1
    # A failing case keeps its record (not a replayable trace: its own name), byte for byte
    # what `sim --mode connection` gives for that seed, and no report page replays it.
    case = failing[0]
    assert case["trace"] == f"traces/short/aioquic/seed-{case['seed']}.connection.jsonl"
    again = run_connection(load_scenario(str(scenario)), "aioquic", case["seed"])
    assert (out / case["trace"]).read_text() == again.record_text()
    assert not (out / "report" / "aioquic").exists()
    # Its own events (the client's qlog) went through the adapter and every invariant: aioquic's
    # growth in recovery (RFC 9002 §7.3.2), a real bug, is confirmed by its own logged window on
    # some seed, and the case's one command (`sim --mode connection --qlog`) shows it again.
    # Not a verdict: the cases' statuses and reasons are the outcome's alone.
    assert all(c["own_events"]["events"] > 0 and c["own_events"]["cwnd_compared"] for c in own)
    (row,) = [r for r in summary["own_events"] if r["stack"] == "aioquic"]
    seeds = row["confirmed"]["growth-in-recovery"]
    assert seeds and row["judged"] == 3
    confirmed = next(c for c in own if c["seed"] == seeds[0])
    assert all(r.startswith(("deadline", "liveness", "stack-error")) for c in own for r in c["reasons"])
    command = confirmed["own_events"]["command"].split()
    assert command[:2] == ["ccdiff", "sim"] and command[-2:] == ["--qlog", f"seed-{seeds[0]}.qlog"]
    capsys.readouterr()
    assert main(command[1:-1] + [str(tmp_path / "again.qlog"), "--no-controls"]) == 1
    assert "growth-in-recovery" in capsys.readouterr().out
    # Run again: every case comes from the journal, the summary is the same.
    assert main(["conform", "--mode", "connection", "--stack", "aioquic", "--scenarios", str(scenario),
                 "--seeds", "3", "--out", str(out), "--jobs", "2"]) == code
    assert json.loads((out / "summary.json").read_text()) == summary


def test_a_named_stack_has_its_own_events_judged_under_its_spec(tmp_path):
    """`NAME=SPEC` (run_conform's items, as bench/mutation.py names its builds): the case is
    reported as NAME, its own events are replayed through SPEC's adapter and the case's
    command names SPEC (NAME is no stack ccdiff could resolve)."""
    from ccdiff.conform import run_conform
    summary = run_conform(["mine=aioquic"], [load_scenario(str(short_scenario(tmp_path)))], [0],
                          tmp_path / "out", jobs=1, mode="connection")
    (case,) = [c for c in summary["cases"] if c["stack"] == "mine"]
    assert "error" not in case["own_events"] and case["own_events"]["events"] > 0, case["own_events"]
    assert "--stack aioquic --seed 0 --qlog seed-0.qlog" in case["own_events"]["command"]


def test_connection_shards_merge_to_the_whole_run(tmp_path, capsys):
    scenario = short_scenario(tmp_path)
    args = ["conform", "--mode", "connection", "--stack", "aioquic", "--scenarios", str(scenario),
            "--seeds", "2", "--jobs", "2", "--no-report"]
    whole = main(args + ["--out", str(tmp_path / "whole")])
    for k in (1, 2):
        assert main(args + ["--shard", f"{k}/2", "--out", str(tmp_path / str(k))]) in (0, 1)
    merged = main(["merge", str(tmp_path / "1"), str(tmp_path / "2"), "--out", str(tmp_path / "merged"),
                   "--no-report"])
    assert merged == whole
    one = json.loads((tmp_path / "whole" / "summary.json").read_text())
    joined = json.loads((tmp_path / "merged" / "summary.json").read_text())
    assert joined == one and joined["modes"]["aioquic"] == "connection"
    # A shard of a closed-loop run does not merge with a connection-mode one.
    assert main(args[:1] + args[3:] + ["--shard", "2/2", "--out", str(tmp_path / "closed")]) in (0, 1)
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "1"), str(tmp_path / "closed"), "--out", str(tmp_path / "bad")]) == 2
    assert "mode" in capsys.readouterr().err


def test_a_stack_without_a_shim_is_refused_by_name(tmp_path, capsys):
    assert main(["conform", "--mode", "connection", "--stack", "linux", "--seeds", "1",
                 "--out", str(tmp_path / "o")]) == 2
    assert "linux has no connection shim; stacks with one: aioquic" in capsys.readouterr().err


def test_connection_scenarios_join_the_matrix_only_in_connection_mode():
    from ccdiff.cli import _scenario_list
    closed = [s.name for s in _scenario_list(None)]
    connection = [s.name for s in _scenario_list(None, "connection")]
    assert "death-spiral-loopback" not in closed
    assert connection == closed + ["death-spiral-loopback"]
    assert [s.name for s in _scenario_list(["death-spiral-loopback"])] == ["death-spiral-loopback"]

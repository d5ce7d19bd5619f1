"""Memory bounded by the work, not by the input: caps are checked before anything is expanded.

Each command runs in a child process whose peak RSS (VmHWM, read by the child at exit) must
stay under a generous correctness bound; before these caps the same inputs took 1.6 GB
(20 ranges of 1M packets), 4 GB (validate /dev/zero) or were ended by the kernel
(conform --baseline /dev/zero).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccdiff.trace import MAX_PNS_PER_EVENT, TraceError, parse_lines

ROOT = Path(__file__).resolve().parent.parent
PEAK_BOUND_KB = 300 * 1024
HEADER = '{"ccdiff_trace": 1, "max_datagram_size": 1200}'

# Runs ccdiff.cli.main in this child and prints its peak RSS (kB) last on stderr.
CHILD = """
import atexit, sys
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print("peak-kb", line.split()[1], file=sys.stderr)
atexit.register(peak)
from ccdiff.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_measured(args: list, cwd: Path) -> tuple[int, str, int]:
    """(exit code, stderr without the peak line, peak RSS in kB) of `ccdiff ARGS` in a child."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    if "CCDIFF_BUILD_DIR" in os.environ:   # the stacks built elsewhere (a worktree's tests)
        env["CCDIFF_BUILD_DIR"] = os.environ["CCDIFF_BUILD_DIR"]
    done = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)
    lines = done.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("peak-kb "), done.stderr[-2000:]
    return done.returncode, "\n".join(lines[:-1]), int(lines[-1].split()[1])


def ranges_trace(tmp_path: Path, ranges: int, per_range: int = 1_000_000) -> Path:
    """One ACK of `ranges` ranges of `per_range` packets: a few hundred bytes."""
    pns = [[i * per_range, (i + 1) * per_range - 1] for i in range(ranges)]
    path = tmp_path / f"ranges-{ranges}.jsonl"
    path.write_text(HEADER + "\n" + json.dumps({"t": 10, "ev": "ack", "pns": pns}) + "\n")
    return path


def test_total_packets_of_one_event_are_capped_before_expansion():
    pns = [[0, MAX_PNS_PER_EVENT // 2 - 1], [MAX_PNS_PER_EVENT // 2, MAX_PNS_PER_EVENT]]  # one too many
    with pytest.raises(TraceError) as caught:
        parse_lines([HEADER, json.dumps({"t": 10, "ev": "lost", "pns": pns})], "cap.jsonl")
    assert (caught.value.line, caught.value.reason) == \
        (2, f'"pns" names more than {MAX_PNS_PER_EVENT} packets in one event')


@pytest.mark.parametrize("ranges", [20, 200])
def test_many_huge_ranges_exit_2_in_bounded_memory(tmp_path, ranges):
    code, err, peak_kb = run_measured(["validate", str(ranges_trace(tmp_path, ranges))], tmp_path)
    assert code == 2, err
    assert err.endswith(f'ranges-{ranges}.jsonl:2: "pns" names more than {MAX_PNS_PER_EVENT} packets in one event')
    assert peak_kb < PEAK_BOUND_KB, f"peak {peak_kb} kB"


@pytest.mark.parametrize("args, message", [
    (["validate", "/dev/zero"], "error: /dev/zero:1: line longer than"),
    (["decode", "/dev/zero"], "error: /dev/zero: larger than 16 MiB"),
    (["replay", "/dev/zero"], "error: /dev/zero:1: line longer than"),
    (["conform", "--baseline", "/dev/zero", "--scenarios", "idle-restart", "--seeds", "1", "--stacks", "oracle",
      "--out", "out"], "error: /dev/zero: baseline larger than"),
    (["report", "/dev/zero", "--out", "out"], "error: /dev/zero: findings document larger than"),
])
def test_endless_input_exits_2_in_bounded_memory(tmp_path, args, message):
    code, err, peak_kb = run_measured(args, tmp_path)
    assert code == 2, err
    assert err.splitlines()[-1].startswith(message), err
    assert peak_kb < PEAK_BOUND_KB, f"peak {peak_kb} kB"
    assert not (tmp_path / "out").exists(), "a bad input is refused before the run writes anything"


LONG_EVENTS = 400_000
LONG_PEAK_BOUND_KB = 110 * 1024


@pytest.mark.parametrize("command", [["validate"], ["replay", "--stack", "oracle"],
                                     ["matrix", "--stack", "oracle", "--stack", "quiche@0.30.0"]])
def test_long_trace_runs_in_memory_that_does_not_grow_with_it(tmp_path, command):
    """Streaming: before it, 400k events took ~140 MB to validate, ~330 MB to replay on the
    oracle and ~470 MB for this matrix (every event and snapshot held); now the trace is read
    from its file as replay goes and each run keeps a window.  bench/bench_memory.py
    measures 1 M and 10 M events (< 500 MB each)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_memory import write_trace
    trace = str(write_trace(tmp_path / "long.jsonl", LONG_EVENTS))
    code, err, peak_kb = run_measured([command[0], trace, *command[1:]], tmp_path)
    assert code in (0, 1), err
    assert peak_kb < LONG_PEAK_BOUND_KB, f"peak {peak_kb} kB"

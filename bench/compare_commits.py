#!/usr/bin/env python3
"""The cost of a change, side by side: the same figures for two commits, measured in turns.

    python3 bench/compare_commits.py OLD [--new REV] [--rounds 3] [--events 300000] [--seeds 10]

OLD (and --new, default: this working tree) are checked out as detached git worktrees in
a temporary folder; each round measures OLD, then NEW, so a shared machine's load falls on
both alike.  Figures, medians over the rounds, and NEW/OLD:
  oracle alone     bench_oracle.rates: events/s of ledger + CUBIC on one generated stream
  oracle checked   the same with every invariant (what `replay --stack oracle` does)
  validate         events/s of parsing and validating that stream as a trace file
                   (ccdiff.trace.load_trace: causality, reachability), format 1
  conform          CPU seconds of `ccdiff conform --stack oracle --scenarios
                   death-spiral,idle-restart --seeds N --jobs 1 --no-report` (the oracle
                   and its Reno control in the closed loop: harness cost, no native stack)
Issue 14 asks that the verdict rules cost no more than 10% here, or that the cost is
explained.  Every figure is CPU time (process time; the conformance run's and its workers'
user + system time), so that other jobs on a shared machine change both sides less than
wall time would; caches and frequency still do, hence the turns and the medians.  The
table goes to stdout as Markdown.
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run inside each tree, so that tree's own code is measured.
_ORACLE = """
import json, sys, time
sys.path[:0] = ['bench', '.']
time.perf_counter = time.process_time   # CPU time: a loaded machine slows both trees alike
import bench_oracle
print(json.dumps(bench_oracle.rates(int(sys.argv[1]))))
"""
_WRITE_TRACE = """
import sys
sys.path[:0] = ['bench', '.']
import bench_oracle
from ccdiff.trace import Header, Trace, dump_trace
events = bench_oracle.make_stream(int(sys.argv[1]))
open(sys.argv[2], 'w').write(dump_trace(Trace(Header(1200), events, 'bench')))
"""
_VALIDATE = """
import json, sys, time
sys.path[:0] = ['.']
from ccdiff.trace import load_trace
started = time.process_time()
trace = load_trace(sys.argv[1])
print(json.dumps(len(trace.events) / (time.process_time() - started)))
"""


def _python(tree: Path, code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"compare_commits: {tree}: {done.stderr.strip()[-1500:]}")
    return done.stdout


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _conform_seconds(tree: Path, seeds: int, out: Path) -> float:
    """CPU seconds of the conformance process and its workers (not wall time: see the doc)."""
    shutil.rmtree(out, ignore_errors=True)
    started = _children_cpu()
    done = subprocess.run([sys.executable, "-m", "ccdiff", "conform", "--stack", "oracle", "--scenarios",
                           "death-spiral,idle-restart", "--seeds", str(seeds), "--jobs", "1", "--no-report",
                           "--out", str(out)], cwd=tree, capture_output=True, text=True)
    if done.returncode == 2:
        raise SystemExit(f"compare_commits: conform in {tree} failed: {done.stderr.strip()[-1500:]}")
    return _children_cpu() - started


def _checkout(rev: str, where: Path) -> Path:
    subprocess.run(["git", "worktree", "add", "--detach", str(where), rev], cwd=ROOT, check=True,
                   capture_output=True, text=True)
    return where


def measure(tree: Path, args, trace: Path, scratch: Path) -> dict:
    oracle = json.loads(_python(tree, _ORACLE, str(args.events)))
    return {"oracle alone (events/s)": oracle["alone"], "oracle checked (events/s)": oracle["checked"],
            "validate (events/s)": json.loads(_python(tree, _VALIDATE, str(trace))),
            f"conform oracle, 2 scenarios x {args.seeds} seeds (CPU s)": _conform_seconds(tree, args.seeds, scratch)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="the commit before the change (any git revision)")
    parser.add_argument("--new", help="the commit after it (default: this working tree)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ccdiff-compare-") as tmp:
        tmp = Path(tmp)
        trees = {}
        try:
            trees["old"] = _checkout(args.old, tmp / "old")
            trees["new"] = _checkout(args.new, tmp / "new") if args.new else ROOT
            trace = tmp / "stream.jsonl"
            _python(ROOT, _WRITE_TRACE, str(args.events), str(trace))
            runs = {"old": [], "new": []}
            for round_no in range(args.rounds):
                for side in ("old", "new"):
                    runs[side].append(measure(trees[side], args, trace, tmp / f"conform-{side}"))
                    print(f"round {round_no + 1}/{args.rounds} {side}: {runs[side][-1]}", file=sys.stderr)
        finally:
            for side in ("old", "new"):
                if side in trees and trees[side] != ROOT:
                    subprocess.run(["git", "worktree", "remove", "--force", str(trees[side])], cwd=ROOT,
                                   capture_output=True)
    label_new = args.new or "working tree"
    print(f"| measure (median of {args.rounds}) | {args.old} | {label_new} | new / old |")
    print("|---|---|---|---|")
    for key in runs["old"][0]:
        old = statistics.median(r[key] for r in runs["old"])
        new = statistics.median(r[key] for r in runs["new"])
        print(f"| {key} | {old:,.1f} | {new:,.1f} | {new / old:.2f} |")


if __name__ == "__main__":
    main()

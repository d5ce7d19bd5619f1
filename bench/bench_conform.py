"""Conformance run cost: wall time vs the simulated (real-time) duration, and peak memory.

    python3 bench/bench_conform.py [--scenario death-spiral] [--seeds 100] [--jobs 0] [--no-report]

Runs `ccdiff conform --scenarios SCENARIO --seeds N` (every built stack and the
Reno controls, the default; with the HTML reports of failing stacks unless
--no-report) in a fresh Python process, so that its resource
usage is its own: peak RSS of the main process (VmHWM, see _peak_rss_mb) and of
the largest worker process (RUSAGE_CHILDREN: Linux reports the largest child,
not a sum).  The equivalent real-time duration is the sum over runs of the
simulated time each connection took (metrics.end_us: completion, or the
deadline for a run that missed it), i.e. what running those connections in
real time would take; Cloudflare's real-time test ran about 10 s per run.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(scenario: str = "death-spiral", seeds: int = 100, jobs: int = 0, report: bool = True) -> dict:
    """Run the conformance in a child process and return its figures (see the module doc)."""
    with tempfile.TemporaryDirectory(prefix="ccdiff-bench-conform-") as tmp:
        figures = Path(tmp) / "figures.json"
        done = subprocess.run([sys.executable, __file__, "--child", str(figures), "--scenario", scenario,
                               "--seeds", str(seeds), "--jobs", str(jobs)] + ([] if report else ["--no-report"]),
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if not figures.exists():
            raise RuntimeError(f"conformance run failed (exit {done.returncode}): {done.stderr[-2000:]}")
        return json.loads(figures.read_text())


def _peak_rss_mb() -> float:
    """This process's peak RSS since its exec: VmHWM.  Not getrusage(RUSAGE_SELF).ru_maxrss,
    which Linux carries across execve from the forked parent (run_all.py, after the 1 M
    event oracle benchmark, reported 778 MB for a conform run that peaks at 145 MB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e6
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def _child(figures: Path, scenario: str, seeds: int, jobs: int, report: bool) -> int:
    """In the fresh process: the CLI's own conform command, then the figures."""
    sys.path.insert(0, str(ROOT))
    from ccdiff.cli import main
    out = figures.parent / "conform"
    started = time.perf_counter()
    code = main(["conform", "--scenarios", scenario, "--seeds", str(seeds), "--jobs", str(jobs),
                 "--out", str(out), "--fresh"] + ([] if report else ["--no-report"]))
    wall = time.perf_counter() - started
    if code not in (0, 1):          # 1: findings (the death spiral is expected to fail some stacks)
        return code
    summary = json.loads((out / "summary.json").read_text())
    cases = summary["cases"]
    simulated_us = sum(c["metrics"]["end_us"] for c in cases)
    kib = 1024   # ru_maxrss is in KiB on Linux
    figures.write_text(json.dumps({
        "scenario": scenario, "seeds": seeds, "report": report, "stacks": len(summary["stacks"]), "runs": len(cases),
        "events": sum(c["metrics"]["events"] for c in cases), "totals": summary["totals"],
        "wall_s": wall, "simulated_s": simulated_us / 1e6, "realtime_ratio": simulated_us / 1e6 / wall,
        "cpu_s": sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                     for f in ("ru_utime", "ru_stime")),
        "main_max_rss_mb": _peak_rss_mb(),
        "worker_max_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * kib / 1e6}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="death-spiral")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=0, help="worker processes (default: cores)")
    parser.add_argument("--no-report", dest="report", action="store_false",
                        help="pass --no-report (skip the HTML reports of failing stacks, ~15 s)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args.child, args.scenario, args.seeds, args.jobs, args.report)
    r = measure(args.scenario, args.seeds, args.jobs, args.report)
    print(f"{r['runs']} runs ({r['stacks']} stacks x {r['seeds']} seeds of {r['scenario']}), {r['events']:,} events")
    print(f"wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s; simulated {r['simulated_s']:.0f} s "
          f"= {r['realtime_ratio']:.0f}x real time")
    print(f"peak RSS: main process {r['main_max_rss_mb']:.0f} MB, largest worker {r['worker_max_rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

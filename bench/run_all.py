"""The benchmark suite in one command: one table of figures and ratios, all from this run.

    python3 bench/run_all.py [--quick] [--runs 3] [--fuzz-seconds 20] [--seeds 100] [--out DIR]

Parts (each the function of its own script, imported, not copied):
  oracle     bench_oracle.rates: events/s of ledger + CUBIC alone and with every
             invariant, on one 1 M-event stream (goal: alone >= 300,000/s)
  adapters   bench_adapters.measure: each adapter's events/s vs its bare
             controller (goal: bare/adapter <= 2)
  fuzz       bench_fuzz.speed_rows: execs/s per engine (AFL++, honggfuzz) and stack, beside
             the engine floor and the controller-only bound of the same inputs
             (--fuzz-baseline DIR: and an earlier build's harnesses, before/after)
  ttf        bench_fuzz.ttf_rows: time to the first future-recovery-start on
             quiche@0.26.0 per engine, median of --runs
  strict     bench_fuzz.strict_rows: per real bug (bench_fuzz.REAL_BUGS) and engine, the
             seconds of fuzzing until triage stores it with a strict reproducer, median
             of 5, 60 s cap (about 30 min)
  conform    bench_conform.measure: wall time of `ccdiff conform --scenarios
             death-spiral --seeds 100` vs the simulated (real-time) duration of
             its runs, and the peak RSS of its main and worker processes
  memory     bench_memory.measure: peak RSS of `ccdiff validate`, `replay --stack
             oracle` and `matrix` (every built stack) on generated traces of 1 M
             and 10 M events (goal: each < 500 MB)
  connection bench_connection.measure: each stack's own connection (--mode connection) on
             death-spiral-loopback, --seeds of them, one core: passes (quiche 0.26.0's
             spiral beside the fix), runs per CPU second and the ratio of simulated to
             wall time, and to Cloudflare's real-time form (goal: >= 50x); --quick: aioquic

--quick is a smoke form of about a minute (tiny streams, one fuzz stack, one
second per engine, one seed): it proves every part runs, its figures mean
nothing.  The table goes to stdout and, with the date, command and machine
(nproc, CPU model, load average), to OUT/bench-DATE[-quick].md and .json.
Timing figures are what they are on a shared machine; the conformance run's
counts (runs, events, simulated time) are deterministic.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import bench_adapters  # noqa: E402
import bench_conform   # noqa: E402
import bench_connection  # noqa: E402
import bench_fuzz      # noqa: E402
import bench_memory    # noqa: E402
import bench_oracle    # noqa: E402

PARTS = ("oracle", "adapters", "fuzz", "ttf", "strict", "conform", "connection", "memory")
CLOUDFLARE_S_PER_RUN = 10   # their real-time death-spiral test: one 10 MB download, ~10 s per run


def settings(args) -> dict:
    """What each part runs: the full form, or the seconds-long smoke form."""
    if args.quick:
        return {"oracle_events": 20_000, "adapter_rows": bench_adapters.ROWS[1:], "adapter_events": 20_000,
                "python_events": 2_000, "reps": 1, "fuzz_stacks": ["quiche@0.26.0"], "fuzz_seconds": 1,
                "runs": 1, "cap": 120, "seeds": 1, "report": False, "memory_events": [20_000],
                "connection_seeds": 1, "connection_stacks": ["aioquic"],
                "strict_bugs": [b for b in bench_fuzz.REAL_BUGS if b.stack.startswith("picoquic")],
                "strict_engines": ["afl"], "strict_runs": 1, "strict_cap": 30}
    return {"oracle_events": 1_000_000, "adapter_rows": bench_adapters.ROWS, "adapter_events": 1_000_000,
            "python_events": 100_000, "reps": 10, "fuzz_stacks": bench_fuzz.SPEED_STACKS,
            "fuzz_seconds": args.fuzz_seconds, "runs": args.runs, "cap": args.cap, "seeds": args.seeds,
            "report": True, "memory_events": [1_000_000, 10_000_000], "connection_seeds": args.seeds,
            "connection_stacks": list(bench_connection.DEFAULT_STACKS),
            "strict_bugs": bench_fuzz.REAL_BUGS, "strict_engines": None, "strict_runs": 5, "strict_cap": 60}


def run_oracle(s: dict) -> tuple:
    r = bench_oracle.rates(s["oracle_events"])
    goal = bench_oracle.GOAL_EVENTS_PER_S
    rows = [(f"oracle alone (ledger + CUBIC), {r['events']:,} events, one core", f"{r['alone']:,.0f} events/s",
             f"{r['alone'] / goal:.2f}x the {goal:,}/s goal ({'met' if r['alone'] >= goal else 'NOT met'})"),
            ("oracle + every invariant", f"{r['checked']:,.0f} events/s",
             f"{r['checked'] / r['alone']:.2f}x the oracle alone")]
    return rows, r


def run_adapters(s: dict) -> tuple:
    results = bench_adapters.measure(s["adapter_rows"], s["adapter_events"], s["python_events"], s["reps"])
    rows = []
    for r in results:
        met = "met" if r["ratio"] <= bench_adapters.GOAL_RATIO else "NOT met"
        same = "" if r["same_end_state"] else "; end states DIFFER"
        rows.append((f"adapter {r['stack']} vs bare controller (best of {s['reps']})",
                     f"{r['adapter'] / 1e6:.1f} M vs {r['bare'] / 1e6:.1f} M events/s "
                     f"(+{r['extra_ns']:.0f} ns/event; via ctypes {r['python'] / 1e3:.0f} k)",
                     f"bare/adapter {r['ratio']:.2f}x (goal <= 2x: {met}){same}"))
    return rows, results


def run_fuzz(s: dict) -> tuple:
    results = bench_fuzz.speed_rows(s["fuzz_stacks"], bench_fuzz.ENGINES, s["fuzz_seconds"],
                                    baseline=s["fuzz_baseline"])
    rows = []
    for r in results:
        before = r.get("before_execs_per_sec")
        ratio = f"{r['execs_per_sec'] / before:.2f}x the baseline's {before:,}; " if before else ""
        floor = r["floor_execs_per_sec"]
        share = (f"share of the engine floor {before / floor:.2f} -> {r['execs_per_sec'] / floor:.2f}" if before
                 else f"share of the engine floor {r['execs_per_sec'] / floor:.2f}")
        rows.append((f"fuzz execs/s, {r['engine']} on {r['stack']} ({s['fuzz_seconds']} s, one pinned core)",
                     f"{r['execs_per_sec']:,} execs/s",
                     f"{ratio}{share} (floor {floor:,}); {r['execs_per_sec'] / r['bound']['controller']:.3f} of "
                     f"the controller-only bound ({r['bound']['controller']:,} inputs/s)"))
    return rows, results


def run_ttf(s: dict) -> tuple:
    results = bench_fuzz.ttf_rows(bench_fuzz.TTF_STACKS, bench_fuzz.ENGINES, s["runs"], s["cap"],
                                  baseline=s["fuzz_baseline"])
    rows = []
    for r in results:
        for key, build in (("before_", ", baseline"), ("", "")):
            if key + "runs" not in r:
                continue
            runs = ", ".join("cap" if x["seconds"] is None else f"{x['seconds']:.3f}" for x in r[key + "runs"])
            median = "not found" if r[key + "median_s"] is None else f"{r[key + 'median_s']:.3f} s"
            rows.append((f"time to first future-recovery-start, {r['engine']} on {r['stack']}{build}, "
                         f"median of {s['runs']}", f"{median} (runs: {runs})",
                         f"confirmed: {', '.join(r[key + 'invariants'])}"))
    return rows, results


def run_strict(s: dict) -> tuple:
    results = bench_fuzz.strict_rows(s["strict_bugs"], s["strict_engines"], s["strict_runs"], s["strict_cap"],
                                     bench_fuzz.ROOT / bench_fuzz.DEFAULT_SEEDS)
    rows = []
    for r in results:
        runs, median = bench_fuzz.strict_times(r, s["strict_cap"])
        rows.append((f"time to a strict reproducer of {r['bug']}, {r['engine']} on {r['stack']}, "
                     f"median of {len(r['runs'])}", f"{median} s (runs: {runs})",
                     f"reached {r['reached']}/{len(r['runs'])}: {', '.join(r['signatures']) or '-'}"))
    return rows, results


def run_conform(s: dict) -> tuple:
    r = bench_conform.measure("death-spiral", s["seeds"], report=s["report"])
    cloudflare_s = r["runs"] * CLOUDFLARE_S_PER_RUN
    what = (f"ccdiff conform --scenarios death-spiral --seeds {r['seeds']}"
            f"{'' if r['report'] else ' --no-report'} ({r['runs']} runs, {r['stacks']} stacks, "
            f"{r['events']:,} events)")
    rows = [(what, f"{r['wall_s']:.1f} s wall, {r['cpu_s']:.0f} CPU-s",
             f"simulated {r['simulated_s']:,.0f} s = {r['realtime_ratio']:.1f}x real time "
             f"(Cloudflare's real-time form, ~{CLOUDFLARE_S_PER_RUN} s/run: {cloudflare_s:,} s, "
             f"{cloudflare_s / r['wall_s']:.1f}x)"),
            ("peak RSS of that conformance run", f"main {r['main_max_rss_mb']:.0f} MB, "
             f"largest worker {r['worker_max_rss_mb']:.0f} MB", "")]
    return rows, r


def run_memory(s: dict) -> tuple:
    # The traces (600 MB for 10 M events) are written to a temporary folder, removed after.
    with tempfile.TemporaryDirectory(prefix="ccdiff-bench-memory-") as work:
        results = bench_memory.measure(s["memory_events"], work=Path(work))
    goal = bench_memory.GOAL_MB
    rows = [(f"peak RSS of ccdiff {r['command']}, {r['events']:,} events", f"{r['peak_mb']:.0f} MB "
             f"({r['wall_s']:.0f} s, exit {r['exit']})",
             f"goal < {goal} MB: {'met' if r['peak_mb'] < goal and r['exit'] in (0, 1) else 'NOT met'}")
            for r in results]
    return rows, results


def run_connection(s: dict) -> tuple:
    results = [bench_connection.measure(stack, bench_connection.DEFAULT_SCENARIO, s["connection_seeds"])
               for stack in s["connection_stacks"]]
    goal = 50
    rows = [(f"connection mode, {r['stack']}'s own client and server, {r['scenario']} x {r['runs']} seeds, "
             f"one core", f"{r['runs_per_cpu_s']:.2f} runs/CPU-s ({r['passed']}/{r['runs']} passed, "
             f"{r['wall_s']:.1f} s wall)", f"simulated {r['simulated_s']:,.0f} s = {r['realtime_ratio']:.1f}x real "
             f"time; Cloudflare's real-time form (~{CLOUDFLARE_S_PER_RUN} s/run): {r['cloudflare_ratio']:.1f}x "
             f"(goal >= {goal}x: {'met' if r['cloudflare_ratio'] >= goal else 'NOT met'})") for r in results]
    return rows, results


RUNNERS = {"oracle": run_oracle, "adapters": run_adapters, "fuzz": run_fuzz, "ttf": run_ttf, "strict": run_strict,
           "conform": run_conform, "connection": run_connection, "memory": run_memory}


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"nproc": os.cpu_count(), "cpu_model": model or platform.processor(), "python": platform.python_version(),
            "kernel": platform.release(), "commit": commit}


def markdown(doc: dict) -> str:
    m = doc["machine"]
    lines = [f"# Benchmarks, {doc['date']}", "",
             f"`{doc['command']}` at commit {m['commit']}; {m['nproc']} cores ({m['cpu_model']}), "
             f"Python {m['python']}; load average {doc['load_before'][0]:.2f} before, "
             f"{doc['load_after'][0]:.2f} after; {doc['wall_s']:.0f} s in all.", "",
             "| measure | result | ratio / goal |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in doc["table"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke form (about a minute), no meaningful figures")
    parser.add_argument("--runs", type=int, default=3, help="time-to-finding runs per engine (median)")
    parser.add_argument("--cap", type=float, default=300, help="give up a time-to-finding run after S seconds")
    parser.add_argument("--fuzz-seconds", type=int, default=20, help="seconds per engine and stack for execs/s")
    parser.add_argument("--seeds", type=int, default=100, help="seeds of the death-spiral conformance")
    parser.add_argument("--fuzz-baseline", type=Path, help="fuzz: an earlier CCDIFF_FUZZ_BUILD_DIR to compare "
                        "with (bench_fuzz.py speed --baseline)")
    parser.add_argument("--only", action="append", choices=PARTS, help="run only these parts")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="where the .md and .json go")
    args = parser.parse_args()
    s = dict(settings(args), fuzz_baseline=args.fuzz_baseline)
    started = time.perf_counter()
    now = datetime.datetime.now(datetime.timezone.utc)
    doc = {"date": now.strftime("%Y-%m-%d %H:%M UTC"), "quick": args.quick,
           "command": " ".join(["python3", "bench/run_all.py"] + sys.argv[1:]), "machine": machine(),
           "load_before": list(os.getloadavg()), "table": [], "parts": {}}
    for part in args.only or PARTS:
        part_started = time.perf_counter()
        print(f"run_all: {part} ...", file=sys.stderr, flush=True)
        rows, raw = RUNNERS[part](s)
        doc["table"] += rows
        doc["parts"][part] = raw
        print(f"run_all: {part} done in {time.perf_counter() - part_started:.0f} s", file=sys.stderr, flush=True)
    doc["load_after"] = list(os.getloadavg())
    doc["wall_s"] = time.perf_counter() - started
    text = markdown(doc)
    print(text, end="")
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"bench-{now:%Y-%m-%d}{'-quick' if args.quick else ''}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"run_all: wrote {stem}.md and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

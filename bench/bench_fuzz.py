"""Fuzzing benchmarks: time to first finding and throughput per engine and stack.

  python3 bench/bench_fuzz.py ttf  [--runs 3] [--stack quiche@0.26.0] [--cap 300]
      Median wall-clock time until each engine finds future-recovery-start,
      starting from fuzz/seeds/no-loss (no loss operation in any seed), one core,
      a fresh output folder per run.  Only future-recovery-start aborts
      (CCDIFF_FUZZ_INVARIANTS), the engine stops at its first crash
      (AFL_BENCH_UNTIL_CRASH, honggfuzz --exit_upon_crash), and the crash is
      replayed through the plain harness to confirm the invariant.
      --no-dict: without fuzz/ccdiff.dict (is the dictionary doing the work?).
  python3 bench/bench_fuzz.py speed [--seconds 20] [--stack S ...]
      execs/s of each engine on each stack (one core, no dictionary changes).
Results go to stdout as a Markdown table and to bench/results/fuzz-<mode>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ccdiff.fuzzing.harness import harness, harness_env  # noqa: E402
from ccdiff.fuzzing.toolchain import honggfuzz_home, program  # noqa: E402
from ccdiff.stacks import resolve  # noqa: E402

SEEDS = ROOT / "fuzz" / "seeds" / "no-loss"
DICT = ROOT / "fuzz" / "ccdiff.dict"
AFL_ENV = {"AFL_NO_UI": "1", "AFL_SKIP_CPUFREQ": "1", "AFL_NO_AFFINITY": "1",
           "AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES": "1"}


USE_DICT = True


def afl_cmd(exe, out, seconds=None):
    cmd = [program("afl-fuzz"), "-i", str(SEEDS), "-o", str(out)] + (["-x", str(DICT)] if USE_DICT else [])
    if seconds:
        cmd += ["-V", str(seconds)]
    return cmd + ["--", str(exe)]


def hf_cmd(exe, work, seconds=None, exit_on_crash=False):
    corpus, crashes = work / "corpus", work / "crashes"
    shutil.copytree(SEEDS, corpus)
    crashes.mkdir()
    cmd = [str(honggfuzz_home() / "honggfuzz"), "-i", str(corpus), "-W", str(crashes), "-n", "1", "-P"]
    if USE_DICT:
        cmd += ["-w", str(DICT)]
    if seconds:
        cmd += ["--run_time", str(seconds)]
    if exit_on_crash:
        cmd += ["--exit_upon_crash"]
    return cmd + ["--", str(exe)]


def crash_invariant(plain, env, path: Path) -> str:
    out = subprocess.run([str(plain), str(path)], env=dict(env, CCDIFF_FUZZ_NO_ABORT="1"),
                         capture_output=True, text=True).stderr
    for line in out.splitlines():
        if line.startswith("ccdiff-fuzz: violation "):
            return line.split()[2]
    return "none"


def time_to_finding(spec: str, engine: str, cap: float) -> dict:
    target = resolve(spec)
    exe, plain = harness(target, engine), harness(target, "plain")
    env = dict(harness_env(target, engine=True), CCDIFF_FUZZ_INVARIANTS="future-recovery-start")
    with tempfile.TemporaryDirectory(prefix="ccdiff-ttf-") as tmp:
        work = Path(tmp)
        if engine == "afl":
            cmd, env = afl_cmd(exe, work / "out"), dict(env, **AFL_ENV, AFL_BENCH_UNTIL_CRASH="1")
            crash_glob = lambda: sorted((work / "out" / "default" / "crashes").glob("id:*"))  # noqa: E731
        else:
            cmd = hf_cmd(exe, work, exit_on_crash=True)
            crash_glob = lambda: sorted((work / "crashes").glob("*.fuzz"))  # noqa: E731
        started = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL)
        found = None
        while time.monotonic() - started < cap:
            crashes = crash_glob()
            if crashes:
                found = time.monotonic() - started
                break
            if proc.poll() is not None and not crash_glob():
                break
            time.sleep(0.01)
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        crashes = crash_glob()
        invariant = crash_invariant(plain, harness_env(target), crashes[0]) if crashes else "none"
        return {"seconds": round(found, 3) if found is not None else None, "invariant": invariant}


def throughput(spec: str, engine: str, seconds: int) -> float:
    target = resolve(spec)
    exe = harness(target, engine)
    env = harness_env(target, engine=True)
    with tempfile.TemporaryDirectory(prefix="ccdiff-speed-") as tmp:
        work = Path(tmp)
        if engine == "afl":
            subprocess.run(afl_cmd(exe, work / "out", seconds), env=dict(env, **AFL_ENV),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            stats = {key.strip(): value.strip() for key, _, value in
                     (line.partition(":") for line in
                      (work / "out" / "default" / "fuzzer_stats").read_text().splitlines())}
            return float(stats["execs_done"]) / max(float(stats["run_time"]), 1)
        out = subprocess.run(hf_cmd(exe, work, seconds), env=env, capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
        for line in (out.stdout + out.stderr).splitlines():
            if line.startswith("Summary iterations:"):
                fields = dict(f.split(":") for f in line.split()[1:])
                return int(fields["iterations"]) / max(int(fields["time"]), 1)
        raise RuntimeError(f"honggfuzz printed no summary for {spec}")


TTF_STACKS = ["quiche@0.26.0"]
SPEED_STACKS = ["quiche@0.26.0", "quiche@0.30.0", "ngtcp2", "picoquic"]
ENGINES = ["afl", "honggfuzz"]


def ttf_rows(specs, engines, runs: int, cap: float, on_row=None) -> list:
    """Per stack and engine: each run's seconds to the first finding, and their median
    (None if any run hit the cap)."""
    rows = []
    for spec in specs:
        for engine in engines:
            found = [time_to_finding(spec, engine, cap) for _ in range(runs)]
            times = [r["seconds"] for r in found]
            median = statistics.median(times) if all(t is not None for t in times) else None
            rows.append({"stack": spec, "engine": engine, "runs": found, "median_s": median,
                         "invariants": sorted({r["invariant"] for r in found})})
            if on_row:
                on_row(rows[-1])
    return rows


def speed_rows(specs, engines, seconds: int, on_row=None) -> list:
    rows = []
    for spec in specs:
        for engine in engines:
            rows.append({"stack": spec, "engine": engine, "execs_per_sec": round(throughput(spec, engine, seconds))})
            if on_row:
                on_row(rows[-1])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["ttf", "speed"])
    parser.add_argument("--stack", action="append")
    parser.add_argument("--engine", action="append", choices=ENGINES)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cap", type=float, default=300)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--no-dict", action="store_true", help="without fuzz/ccdiff.dict")
    args = parser.parse_args()
    global USE_DICT
    USE_DICT = not args.no_dict
    engines = args.engine or ENGINES
    results = {"mode": args.mode, "cpu": os.cpu_count(), "dictionary": USE_DICT}
    if args.mode == "ttf":
        print("| stack | engine | runs (s) | median (s) | invariant |\n|---|---|---|---|---|")
        results["rows"] = ttf_rows(args.stack or TTF_STACKS, engines, args.runs, args.cap, lambda r: print(
            f"| {r['stack']} | {r['engine']} | {', '.join(str(x['seconds']) for x in r['runs'])} | "
            f"{r['median_s']} | {', '.join(r['invariants'])} |", flush=True))
    else:
        print("| stack | engine | execs/s |\n|---|---|---|")
        results["rows"] = speed_rows(args.stack or SPEED_STACKS, engines, args.seconds, lambda r: print(
            f"| {r['stack']} | {r['engine']} | {r['execs_per_sec']} |", flush=True))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / f"fuzz-{args.mode}{'' if USE_DICT else '-nodict'}.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

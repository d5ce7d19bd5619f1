"""Hostile-input fuzzing, the long form of tests/test_hostile_input.py.

    python3 bench/bench_hostile.py [--minutes 10 | --seconds S] [--out bench/results]

Two campaigns side by side for the same time, one core each:

  Python  the properties of ccdiff/fuzzing/hostile.py (trace parser, fuzz
          decoder, SPEC parser, CLI), Hypothesis rounds of 200 examples with a
          new seed each round, round-robin until the time is up (the last
          cycle runs to its end).  A crash is any exception other than the
          documented clean errors (TraceError, SetupError, CLI exit 0/1/2 with
          no traceback): Hypothesis shrinks it and it is listed with its input.
  C       fuzz/driver/fz_decode_fuzz.c (decoder + ledger + JSONL writer) built
          with afl-clang-fast, ASan and UBSan, under AFL++ from the vectors and
          seeds with fuzz/ccdiff.dict.  A crash is any sanitizer report, abort
          or signal; each is replayed through the plain ASan build and its
          report's first lines listed.

Prints inputs tried and crashes per target (the goal is zero) and writes
OUT/hostile-DATE.json.  Exit 1 if anything crashed.

    python3 bench/bench_hostile.py --classes

instead runs the hostile user's attempts of issue #32 (bench/hostile_classes.py), one
process each, and prints attempts, classes, data lost, tracebacks, wrong exit codes and the
worst peak RSS (the goal: 0, 0, 0); writes OUT/hostile-classes-DATE.json; exit 1 if any
count is not 0.

    python3 bench/bench_hostile.py --classes --code DIR

runs the same attempts with DIR's ccdiff (another checkout, e.g. the commit issue #32 was
written against) and lists every attempt that FAILS there, and how.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from bench_fuzz import AFL_ENV, DICT                                  # noqa: E402
from ccdiff.fuzzing.harness import decode_harness                     # noqa: E402
from ccdiff.fuzzing.hostile import TARGETS                            # noqa: E402
from ccdiff.fuzzing.toolchain import program                          # noqa: E402

ROUND_EXAMPLES = 200
SEED_DIRS = [ROOT / "fuzz" / "vectors", ROOT / "fuzz" / "seeds" / "no-loss"]


def python_campaign(seconds: float) -> dict:
    """Round-robin Hypothesis rounds over TARGETS until `seconds` have passed; a cycle once
    started runs to its end, so every target gets at least one round."""
    stats = {name: {"inputs": 0, "rounds": 0, "crashes": []} for name in TARGETS}
    started, round_no = time.monotonic(), 0
    while time.monotonic() - started < seconds:
        for name, (strategy, check) in TARGETS.items():
            entry, last = stats[name], {}

            @seed(round_no)
            @settings(max_examples=ROUND_EXAMPLES, deadline=None, database=None, derandomize=False,
                      suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                      phases=[Phase.generate, Phase.shrink])
            @given(strategy)
            def prop(value):
                entry["inputs"] += 1
                last["value"] = value     # the last call before the re-raise is the shrunk example
                check(value)

            try:
                prop()
            except Exception as exc:      # noqa: BLE001 -- any escape from a property is the finding
                entry["crashes"].append({"round": round_no, "error": f"{type(exc).__name__}: {exc}"[:600],
                                         "input": repr(last.get("value"))[:600]})
            entry["rounds"] += 1
        round_no += 1
    return stats


def start_afl(seconds: int, work: Path) -> subprocess.Popen:
    exe = decode_harness("afl", sanitize=True)
    seeds = work / "seeds"
    seeds.mkdir()
    for folder in SEED_DIRS:
        for path in folder.glob("*.bin"):
            if path.stat().st_size:           # afl-fuzz refuses empty seeds
                shutil.copy(path, seeds / f"{folder.name}-{path.name}")
    cmd = [program("afl-fuzz"), "-i", str(seeds), "-o", str(work / "out"), "-x", str(DICT), "-V", str(seconds),
           "--", str(exe)]
    env = {k: v for k, v in os.environ.items() if not k.endswith("SAN_OPTIONS")}   # afl-fuzz sets its own
    return subprocess.Popen(cmd, env=dict(env, **AFL_ENV), stdout=subprocess.DEVNULL,
                            stderr=open(work / "afl.log", "w"), stdin=subprocess.DEVNULL)


def afl_result(work: Path, code: int) -> dict:
    stats_file = work / "out" / "default" / "fuzzer_stats"
    if not stats_file.exists():
        tail = (work / "afl.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"afl-fuzz exited with {code} before fuzzing:\n{tail}")
    stats = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in stats_file.read_text().splitlines())}
    plain = decode_harness("plain", sanitize=True)
    crashes = []
    for path in sorted((work / "out" / "default" / "crashes").glob("id:*")):
        replay = subprocess.run([str(plain), str(path)], capture_output=True, text=True, timeout=60)
        crashes.append({"file": path.name, "exit": replay.returncode,
                        "report": "\n".join(replay.stderr.splitlines()[:6])})
    return {"inputs": int(stats["execs_done"]), "seconds": int(stats["run_time"]),
            "execs_per_sec": float(stats["execs_per_sec"]), "corpus": int(stats["corpus_count"]),
            "hangs": int(stats.get("saved_hangs", stats.get("unique_hangs", 0))), "crashes": crashes,
            "crashes_counted": int(stats.get("saved_crashes", stats.get("unique_crashes", 0)))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--seconds", type=float, help="instead of --minutes (smoke runs)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--classes", action="store_true", help="the issue #32 attempt catalog instead")
    parser.add_argument("--code", type=Path, metavar="DIR",
                        help="with --classes: run each attempt's ccdiff from checkout DIR (PYTHONPATH=DIR)")
    args = parser.parse_args()
    if args.code and not args.classes:
        parser.error("--code goes with --classes")
    if args.classes:
        return classes_main(args.out, args.code)
    seconds = args.seconds if args.seconds is not None else args.minutes * 60
    now = datetime.datetime.now(datetime.timezone.utc)
    with tempfile.TemporaryDirectory(prefix="ccdiff-hostile-") as tmp:
        afl = start_afl(max(1, round(seconds)), Path(tmp))
        try:
            python = python_campaign(seconds)
            code = afl.wait(timeout=seconds + 600)
        finally:
            if afl.poll() is None:
                afl.terminate()
                afl.wait(timeout=30)
        c = afl_result(Path(tmp), code)
    rows = [(name, s["inputs"], len(s["crashes"])) for name, s in python.items()]
    rows.append(("C decoder + ledger + writer (AFL++, ASan + UBSan)", c["inputs"],
                 max(len(c["crashes"]), c["crashes_counted"])))
    print(f"hostile input, {seconds / 60:.1f} min per campaign ({now:%Y-%m-%d %H:%M UTC}, load "
          f"{os.getloadavg()[0]:.2f}); AFL++ {c['execs_per_sec']:.0f} execs/s, corpus {c['corpus']}, "
          f"hangs {c['hangs']}")
    print("| target | inputs tried | crashes |\n|---|---|---|")
    for name, inputs, crashes in rows:
        print(f"| {name} | {inputs:,} | {crashes} |")
    for name, s in python.items():
        for crash in s["crashes"]:
            print(f"CRASH {name}: {crash['error']}\n  input: {crash['input']}")
    for crash in c["crashes"]:
        print(f"CRASH C decoder {crash['file']} (exit {crash['exit']}):\n{crash['report']}")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"hostile-{now:%Y-%m-%d}.json"
    out.write_text(json.dumps({"date": now.strftime("%Y-%m-%d %H:%M UTC"), "seconds": seconds,
                               "command": " ".join(["python3", "bench/bench_hostile.py"] + sys.argv[1:]),
                               "python": python, "c_decoder": c}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 1 if any(crashes for _, _, crashes in rows) else 0


def classes_main(out_dir: Path, code: Path | None = None) -> int:
    from hostile_classes import check_code, failures, run_all, table
    now = datetime.datetime.now(datetime.timezone.utc)
    package = check_code(code) if code else None
    rows = run_all(code)
    print(f"hostile attempts of issue #32 ({now:%Y-%m-%d %H:%M UTC})" + (f", ccdiff from {package}" if code else ""))
    print(table(rows))
    for r in rows:
        if failures(r):
            print(f"FAIL {r['class']}: {r['attempt']!r}: {'; '.join(failures(r))} -- {r['last_line']}")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"hostile-classes-{now:%Y-%m-%d}{'-' + code.resolve().name if code else ''}.json"
    out.write_text(json.dumps({"date": now.strftime("%Y-%m-%d %H:%M UTC"), "code": package, "rows": rows},
                              indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 1 if any(failures(r) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

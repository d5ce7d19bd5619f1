"""Fuzzing benchmarks: time to first finding and throughput per engine and stack.

  python3 bench/bench_fuzz.py ttf  [--runs 3] [--stack quiche@0.26.0] [--cap 300]
      Median wall-clock time until each engine finds future-recovery-start,
      starting from fuzz/seeds/no-loss (no loss operation in any seed), one core,
      a fresh output folder per run.  Only future-recovery-start aborts
      (CCDIFF_FUZZ_INVARIANTS), the engine stops at its first crash
      (AFL_BENCH_UNTIL_CRASH, honggfuzz --exit_upon_crash), and the crash is
      replayed through the plain harness to confirm the invariant.
      --no-dict: without fuzz/ccdiff.dict (is the dictionary doing the work?).
      --baseline DIR: also the harnesses of an earlier build folder (see speed), each run
      right before this commit's.
      --engine libfuzzer: libFuzzer without fork mode, which stops at its first crash.
  python3 bench/bench_fuzz.py speed [--seconds 20] [--stack S ...] [--baseline DIR] [--no-pin]
      execs/s of each engine on each stack, the engine pinned to one core (--no-pin: not),
      beside two bounds measured in the same run:
        floor       the engine around a harness that does nothing (fuzz/driver/fz_empty.c):
                    the most execs/s its fork server, signals and pipes allow here, now;
        controller  the inputs that engine run kept (its queue), through the bare controller
                    loop (fuzz/driver/fz_bench.c: ccd_open, ccd_step over events resolved
                    beforehand, ccd_close; no instrumentation, no engine), inputs/s.
      --hf-max-file-size N: honggfuzz's --max_file_size (its inputs grow to kilobytes,
      AFL++'s stay at tens of bytes; e.g. 128 compares the engines on similar inputs).
      --engine libfuzzer (not in the default set): clang's libFuzzer as `ccdiff fuzz` runs it,
      in fork mode with crashes ignored (-fork=1 -ignore_crashes=1), one job; execs/s is the
      parent's count of finished jobs' runs over its own clock.
      --baseline DIR: also runs the harnesses of an earlier build folder (a
      CCDIFF_FUZZ_BUILD_DIR that an earlier commit built; each harness with the adapter
      library beside it), alternating with this commit's, for a before/after ratio.
  python3 bench/bench_fuzz.py strict [--runs 5] [--cap 60] [--bug NAME ...] [--engine E ...]
      Time to a real bug on strict inputs (issue 36): for each bug in REAL_BUGS (the real bugs
      ccdiff has found, each a stack and the signatures its strict reproducer shows) and each
      engine that can fuzz that stack, the seconds of fuzzing until the engine generated an
      input whose triage stores that bug with a *strict* reproducer (one a real connection's
      loss detection can produce: docs/trace-format.md), median of --runs.  The engine runs
      as `ccdiff fuzz` runs it (its seeds, dictionary, one job pinned to a core) while this
      process triages its corpus on the other core, in the order the engine wrote it; the time
      is when the engine wrote the input (its file's mtime), so triage's own speed does not
      count.  In-process engines (Hypothesis, atheris: aioquic) triage as they go, and their
      time is when the finding was stored.  A run that reaches --cap seconds of fuzzing
      without it is a miss; the median is then over misses as "> cap".
Results go to stdout as a Markdown table and to bench/results/fuzz-<mode>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ccdiff.fuzzing.harness import DRIVER_SOURCES, harness, harness_env  # noqa: E402
from ccdiff.fuzzing.command import DEFAULT_DICT, DEFAULT_SEEDS  # noqa: E402
from ccdiff.fuzzing.conclude import require_built  # noqa: E402
from ccdiff.fuzzing.triage import Triage, signatures  # noqa: E402
from ccdiff.fuzzing.verdicts import reachability_of  # noqa: E402
from ccdiff.trace import load_trace  # noqa: E402
from ccdiff.fuzzing.toolchain import driver_dir, fuzz_build_dir, honggfuzz_home, include_dir, program  # noqa: E402
from ccdiff.build import ensure_built  # noqa: E402
from ccdiff.stacks import resolve  # noqa: E402

SEEDS = ROOT / "fuzz" / "seeds" / "no-loss"
DICT = ROOT / "fuzz" / "ccdiff.dict"
AFL_ENV = {"AFL_NO_UI": "1", "AFL_SKIP_CPUFREQ": "1", "AFL_NO_AFFINITY": "1",
           "AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES": "1"}


USE_DICT = True
# honggfuzz grows inputs to kilobytes (hundreds of events each), AFL++ keeps them to tens
# of bytes: --hf-max-file-size compares the engines on inputs of the same size.
HF_MAX_FILE_SIZE = None


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
    if HF_MAX_FILE_SIZE:
        cmd += ["--max_file_size", str(HF_MAX_FILE_SIZE)]
    if exit_on_crash:
        cmd += ["--exit_upon_crash"]
    return cmd + ["--", str(exe)]


def libfuzzer_cmd(exe, work, seconds=None, fork=True):
    """libFuzzer on a fresh corpus folder, the seeds read beside it.  fork: as `ccdiff fuzz`
    runs it (ccdiff/fuzzing/engines.py, Libfuzzer), going on after crashes."""
    (work / "corpus").mkdir()
    (work / "crashes").mkdir()
    cmd = [str(exe), f"-artifact_prefix={work / 'crashes'}/"]
    if fork:
        cmd += ["-fork=1", "-ignore_crashes=1", "-ignore_timeouts=1", "-ignore_ooms=1"]
    if seconds:
        cmd.append(f"-max_total_time={seconds}")
    if USE_DICT:
        cmd.append(f"-dict={DICT}")
    return cmd + [str(work / "corpus"), str(SEEDS)]


def crash_invariant(plain, env, path: Path) -> str:
    out = subprocess.run([str(plain), str(path)], env=dict(env, CCDIFF_FUZZ_NO_ABORT="1"),
                         capture_output=True, text=True).stderr
    for line in out.splitlines():
        if line.startswith("ccdiff-fuzz: violation "):
            return line.split()[2]
    return "none"


def time_to_finding(spec: str, engine: str, cap: float, exe: Path | None = None) -> dict:
    """Seconds until ENGINE on EXE (default: this commit's harness) finds a crash, and the
    invariant the plain harness confirms on it."""
    target = resolve(spec)
    exe, plain = exe or harness(target, engine), harness(target, "plain")
    env = dict(harness_env(target, engine=True), CCDIFF_FUZZ_INVARIANTS="future-recovery-start",
               LD_LIBRARY_PATH=str(exe.parent))   # an earlier build's harness: see throughput()
    with tempfile.TemporaryDirectory(prefix="ccdiff-ttf-") as tmp:
        work = Path(tmp)
        if engine == "afl":
            cmd, env = afl_cmd(exe, work / "out"), dict(env, **AFL_ENV, AFL_BENCH_UNTIL_CRASH="1")
            crash_glob = lambda: sorted((work / "out" / "default" / "crashes").glob("id:*"))  # noqa: E731
        elif engine == "libfuzzer":
            cmd, env = libfuzzer_cmd(exe, work, fork=False), dict(env, TMPDIR=str(work))
            crash_glob = lambda: sorted((work / "crashes").glob("crash-*"))  # noqa: E731
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


PIN = True


def _pin():
    """One core for the engine and its target (children inherit it): the last one this
    process may use.  Unpinned, the engine and the target's fork server wake each other
    across cores on every execution."""
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})


def throughput(spec: str, engine: str, seconds: int, exe: Path | None = None, keep: Path | None = None) -> float:
    """execs/s of ENGINE on EXE (default: this commit's harness for SPEC); the engine's
    queue is copied to KEEP."""
    target = resolve(spec)
    exe = exe or harness(target, engine)
    # An earlier build's harness runs with the library beside it (LD_LIBRARY_PATH wins over
    # its RUNPATH, which names the folder it was built in).
    env = dict(harness_env(target, engine=True), LD_LIBRARY_PATH=str(exe.parent))
    pin = _pin if PIN else None
    with tempfile.TemporaryDirectory(prefix="ccdiff-speed-") as tmp:
        work = Path(tmp)
        if engine == "afl":
            subprocess.run(afl_cmd(exe, work / "out", seconds), env=dict(env, **AFL_ENV), preexec_fn=pin,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            if keep:
                shutil.copytree(work / "out" / "default" / "queue", keep, ignore=shutil.ignore_patterns(".*"))
            stats = {key.strip(): value.strip() for key, _, value in
                     (line.partition(":") for line in
                      (work / "out" / "default" / "fuzzer_stats").read_text().splitlines())}
            return float(stats["execs_done"]) / max(float(stats["run_time"]), 1)
        if engine == "libfuzzer":
            out = subprocess.run(libfuzzer_cmd(exe, work, seconds), env=dict(env, TMPDIR=str(work)),
                                 capture_output=True, text=True, stdin=subprocess.DEVNULL, preexec_fn=pin)
            if keep:
                shutil.copytree(work / "corpus", keep)
            # The parent's line after each job: "#RUNS: cov: ... time: Ss job: J ..."
            rows = re.findall(r"^#(\d+): cov: .* time: (\d+)s", out.stderr, re.M)
            if not rows:
                raise RuntimeError(f"libFuzzer printed no job line for {spec}:\n{out.stderr[-2000:]}")
            return int(rows[-1][0]) / max(int(rows[-1][1]), 1)
        out = subprocess.run(hf_cmd(exe, work, seconds), env=env, capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, preexec_fn=pin)
        if keep:
            shutil.copytree(work / "corpus", keep)
        for line in (out.stdout + out.stderr).splitlines():
            if line.startswith("Summary iterations:"):
                fields = dict(f.split(":") for f in line.split()[1:])
                return int(fields["iterations"]) / max(int(fields["time"]), 1)
        raise RuntimeError(f"honggfuzz printed no summary for {spec}")


def _build(cmd: list, exe: Path) -> Path:
    exe.parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(cmd + ["-o", str(exe)], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"building {exe} failed:\n{out.stderr}")
    return exe


def floor_harness(engine: str) -> Path:
    """fz_empty.c in the engine's loop (no stack)."""
    out = fuzz_build_dir() / "tools" / "floor"
    src = [str(driver_dir() / "fz_empty.c"), "-I", str(include_dir()), "-I", str(driver_dir()), "-O2"]
    if engine == "libfuzzer":
        return _build([program("clang"), "-fsanitize=fuzzer", *src], out / "floor-libfuzzer")
    if engine == "afl":
        # With fz_counters.c compiled plainly, as in every AFL++ harness (nothing to fold here).
        counters = _build([program("clang"), "-c", "-O2", str(driver_dir() / "fz_counters.c")],
                          out / "fz_counters.o")
        return _build([program("afl-clang-fast"), str(driver_dir() / "fz_main.c"), str(counters), *src],
                      out / "floor-afl")
    home = honggfuzz_home()
    return _build([program("clang"), *src, "-Wl,--whole-archive", str(home / "libhfuzz/libhfuzz.a"),
                   "-Wl,--no-whole-archive", str(home / "libhfcommon/libhfcommon.a"), "-lpthread", "-ldl",
                   "-lrt"], out / "floor-honggfuzz")


def bound_tool(spec: str) -> Path:
    """fz_bench.c with the driver, linked with the stack's ordinary (uninstrumented) library."""
    target = resolve(spec)
    ensure_built(target)
    lib = target.recipe.library(target.version).parent
    out = fuzz_build_dir() / "tools" / "bound" / target.recipe.name / target.version / "fz_bench"
    return _build([program("gcc"), "-O2", "-g", "-std=gnu11", "-I", str(include_dir()),
                   str(driver_dir() / "fz_bench.c"), *(str(driver_dir() / s) for s in DRIVER_SOURCES),
                   "-L", str(lib), "-lccdiff_adapter", f"-Wl,-rpath,{lib}", "-lm"], out)


def controller_bound(spec: str, corpus: Path, seconds: float = 3) -> dict:
    """inputs/s of CORPUS through the plain harness and through the bare controller loop."""
    files = sorted(str(f) for f in corpus.iterdir() if f.is_file())
    out = subprocess.run([str(bound_tool(spec)), str(seconds), *files], env=harness_env(resolve(spec)),
                         capture_output=True, text=True, check=True, preexec_fn=_pin if PIN else None).stdout
    rates = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in out.splitlines()}
    inputs_s, events_s = rates["controller"]
    return {"inputs": len(files), "events_per_input": round(events_s / inputs_s, 1),
            "plain_harness": round(rates["harness"][0]), "controller": round(inputs_s)}


def baseline_harness(baseline: Path, spec: str, engine: str) -> Path | None:
    """The same harness in an earlier build folder, if it is there: at the same path, or
    in any variant folder of the same stack and version (the Rust builds' folder was
    sancov/ for every engine before it became sancov-<engine>/)."""
    here = harness(resolve(spec), engine)
    old = baseline / here.relative_to(fuzz_build_dir())
    if old.exists():
        return old
    found = sorted((baseline / old.parent.parent.relative_to(baseline)).glob(f"*/{here.name}"))
    return found[0] if found else None


TTF_STACKS = ["quiche@0.26.0"]
# The stacks of issue 36's table: the two C stacks and the three Rust ones.
SPEED_STACKS = ["picoquic@1.1.53.0", "ngtcp2@1.25.0", "quiche@0.26.0", "quinn@0.11.19", "s2n-quic@0.91.0"]
ENGINES = ["afl", "honggfuzz"]           # the default set (run_all.py's too)
ENGINE_CHOICES = ENGINES + ["libfuzzer"]


def _median(found: list):
    times = [r["seconds"] for r in found]
    return statistics.median(times) if all(t is not None for t in times) else None


def ttf_rows(specs, engines, runs: int, cap: float, on_row=None, baseline: Path | None = None) -> list:
    """Per stack and engine: each run's seconds to the first finding, and their median
    (None if any run hit the cap); with a baseline build folder, its harness's runs too,
    each run right before this commit's."""
    rows = []
    for spec in specs:
        for engine in engines:
            old = baseline_harness(baseline, spec, engine) if baseline else None
            found, before = [], []
            for _ in range(runs):
                if old:
                    before.append(time_to_finding(spec, engine, cap, exe=old))
                found.append(time_to_finding(spec, engine, cap))
            rows.append({"stack": spec, "engine": engine, "runs": found, "median_s": _median(found),
                         "invariants": sorted({r["invariant"] for r in found})})
            if old:
                rows[-1].update(before_runs=before, before_median_s=_median(before),
                                before_invariants=sorted({r["invariant"] for r in before}))
            if on_row:
                on_row(rows[-1])
    return rows


def speed_rows(specs, engines, seconds: int, on_row=None, baseline: Path | None = None) -> list:
    """Per stack and engine: execs/s (and the baseline's, run right before it), the engine
    floor, and the controller-only bound on the queue of this commit's run."""
    rows = []
    for spec in specs:
        for engine in engines:
            row = {"stack": spec, "engine": engine}
            old = baseline_harness(baseline, spec, engine) if baseline else None
            if old:
                row["before_execs_per_sec"] = round(throughput(spec, engine, seconds, exe=old))
            with tempfile.TemporaryDirectory(prefix="ccdiff-queue-") as tmp:
                row["execs_per_sec"] = round(throughput(spec, engine, seconds, keep=Path(tmp) / "q"))
                row["bound"] = controller_bound(spec, Path(tmp) / "q")
            row["floor_execs_per_sec"] = round(throughput(spec, engine, seconds, exe=floor_harness(engine)))
            rows.append(row)
            if on_row:
                on_row(rows[-1])
    return rows


SPEED_HEADER = ("| stack | engine | before | execs/s | after/before | engine floor | plain harness "
                "| controller bound | execs/s / bound |\n|---|---|---|---|---|---|---|---|---|")


def speed_line(r: dict) -> str:
    before = r.get("before_execs_per_sec")
    bound = r["bound"]["controller"]
    ratio = f"{r['execs_per_sec'] / before:.2f}" if before else "-"
    return (f"| {r['stack']} | {r['engine']} | {before if before else '-'} | {r['execs_per_sec']} | "
            f"{ratio} | {r['floor_execs_per_sec']} | "
            f"{r['bound']['plain_harness']} | {bound} | {r['execs_per_sec'] / bound:.3f} |")


class RealBug:
    """One real bug ccdiff has found, as a campaign's findings folder shows it: the stack,
    the invariants (and, where the invariant alone would take in another bug, the shape)
    of its signature, and what tells it from another cause of the same invariant: a fixed
    release on which the reproducer must not fire (clean_on), or, for an idle bug, that it
    no longer fires once every idle period is cut to 1 ms (idle, without_idle())."""

    def __init__(self, name, stack, invariants, shape=None, clean_on=None, idle=False, where=""):
        self.name, self.stack, self.invariants = name, stack, set(invariants)
        self.shape, self.clean_on, self.idle, self.where = shape, clean_on, idle, where

    def engines(self) -> list:
        return PYTHON_ENGINES if resolve(self.stack).recipe.language == "python" else NATIVE_ENGINES

    def shown_by(self, triage: Triage, checked: dict) -> str | None:
        """The key of a stored finding that is this bug on a strict reproducer, or None."""
        for key, stored in sorted(triage.stored.items()):
            sig = stored.signature
            if sig.invariant not in self.invariants or (self.shape and sig.shape != self.shape):
                continue
            if reachability_of(stored.folder) != "strict":
                continue
            if self.clean_on and sig.not_fixed_by:
                continue          # triage replayed it on the fix's release, which still shows it
            if self.clean_on or self.idle:
                repro = stored.folder / "reproducer.jsonl"
                mark = (key, repro.stat().st_mtime_ns)
                if mark not in checked:
                    trace = load_trace(str(repro))
                    checked[mark] = not ((self.clean_on and key in signatures(trace, self.clean_on))
                                         or (self.idle and key in signatures(without_idle(trace), self.stack)))
                if not checked[mark]:
                    continue
            return key
        return None


def without_idle(trace):
    """TRACE with every silence longer than 1 ms in which nothing was in flight cut to 1 ms
    (later events moved back): an idle bug's reproducer no longer shows it."""
    from ccdiff.trace import Ack, Lost, Sent
    flight, shift, last, events = set(), 0, None, []
    for ev in trace.events:
        if last is not None and not flight and ev.t - last > 1000:
            shift += ev.t - last - 1000
        last = ev.t
        events.append(ev._replace(t=ev.t - shift))
        if isinstance(ev, Sent):
            flight.add(ev.pn)
        elif isinstance(ev, (Ack, Lost)):
            flight.difference_update(ev.pns)
    return type(trace)(trace.header, events, trace.source)


NATIVE_ENGINES = ["afl", "honggfuzz", "libfuzzer"]
PYTHON_ENGINES = ["atheris", "hypothesis"]

# The real bugs of docs/fuzzing.md ("Campaigns") and the profiles' [[known]] entries.
REAL_BUGS = [
    RealBug("quiche 0.26.0 death spiral", "quiche@0.26.0", ["future-recovery-start", "stuck-at-minimum"],
            clean_on="quiche@0.26.1", where="idle measured from the last send moves the recovery start "
            "into the future (profile cubic-idle-shift-death-spiral, fixed in 0.26.1)"),
    RealBug("quiche timer-loss recovery start", "quiche@0.30.0", ["future-recovery-start"],
            where="the idle-restart fix overshoots after a time-threshold loss "
            "(fuzz/reproducers/timer-loss-idle-restart.jsonl)"),
    RealBug("picoquic uncapped W_cubic after idle", "picoquic@1.1.53.0", ["idle-inflation", "ca-growth-bound"],
            shape="ack-congestion_avoidance", idle=True, where="t counted from the last sender-limited time "
            "(fuzz/reproducers/picoquic-idle-uncapped-wcubic.jsonl)"),
    RealBug("ngtcp2 idle inflation", "ngtcp2@1.25.0", ["idle-inflation"], idle=True,
            where="fuzz/reproducers/ngtcp2-idle-inflation.jsonl"),
    RealBug("quinn idle inflation", "quinn@0.11.19", ["idle-inflation"], idle=True,
            where="fuzz/reproducers/quinn-idle-inflation.jsonl"),
    RealBug("s2n-quic idle inflation", "s2n-quic@0.91.0", ["idle-inflation"], idle=True,
            where="fuzz/reproducers/s2n-quic-idle-inflation.jsonl"),
    RealBug("aioquic idle inflation", "aioquic@1.7.2", ["idle-inflation"], idle=True,
            where="docs/fuzzing.md, aioquic"),
    RealBug("aioquic growth in recovery", "aioquic@1.7.2", ["growth-in-recovery"],
            where="Cubic's on_packet_acked has no recovery check (congestion/cubic.py)"),
]


class _Reached(Exception):
    pass


def time_to_strict(bug: RealBug, engine: str, cap: float, seeds: Path, triage_budget: float = 60) -> dict:
    """One campaign of ENGINE on BUG's stack, in a fresh findings folder: the seconds of
    fuzzing until the engine produced an input whose triage stores BUG strictly.  Triage
    goes on after the cap for at most triage_budget seconds, through what the engine wrote
    before it (libFuzzer's fork mode writes a crash per job: hundreds a minute on a stack
    that crashes often)."""
    target = resolve(bug.stack)
    require_built(target)
    checked: dict = {}
    # ignore_cleanup_errors: a libFuzzer job may still be writing into its folder as it dies.
    with tempfile.TemporaryDirectory(prefix="ccdiff-strict-", ignore_cleanup_errors=True) as tmp:
        triage = Triage(Path(tmp), bug.stack, target.label)
        try:
            return _campaign_run(bug, engine, cap, seeds, triage, checked, triage_budget)
        finally:
            triage.close()


def _campaign_run(bug: RealBug, engine: str, cap: float, seeds: Path, triage: Triage, checked: dict,
                  triage_budget: float) -> dict:
    """The engine on the corpus this process triages, in the order the engine wrote it."""
    if engine in PYTHON_ENGINES:
        return _in_process_run(bug, engine, cap, seeds, triage, checked)
    from ccdiff.fuzzing.engines import ENGINES
    campaign = ENGINES[engine](resolve(bug.stack), triage.folder / ".work", seeds, ROOT / DEFAULT_DICT)
    started_wall, started = time.time(), time.monotonic()
    campaign.start()
    deadline = campaign.halt_at(started + cap)
    done, key, at = set(), None, None
    try:
        while key is None and time.monotonic() - started < cap + triage_budget:
            running = campaign.running()
            crashes = set(campaign.crash_files())
            fresh = sorted((f for f in list(crashes) + campaign.queue_files() if f not in done),
                           key=lambda f: f.stat().st_mtime)
            for path in fresh:
                done.add(path)
                written = path.stat().st_mtime - started_wall
                if written > cap:
                    continue
                data = path.read_bytes()
                if path in crashes:
                    triage.add_crash(data, engine, campaign.runner, campaign.direct_env, str(path))
                else:
                    triage.add_input(data, engine, str(path))
                key = bug.shown_by(triage, checked)
                if key:
                    at = max(0.0, written)
                    break
            if not fresh:
                if not running:
                    break
                time.sleep(0.2)
    finally:
        deadline.cancel()
        campaign.halt()
    return {"seconds": round(at, 2) if at is not None else None, "signature": key,
            "triaged": len(done), "stored": sorted(triage.stored)}


def _in_process_run(bug: RealBug, engine: str, cap: float, seeds: Path, triage: Triage, checked: dict) -> dict:
    """Hypothesis or atheris, which triage as they go: stopped as soon as BUG is stored strictly."""
    from ccdiff.fuzzing import atheris_engine, hypo
    started = time.monotonic()
    found = {}

    def progress(stats, new):
        key = bug.shown_by(triage, checked)
        if key:
            found.update(key=key, seconds=time.monotonic() - started)
            raise _Reached
    work = triage.folder / ".work"
    try:
        if engine == "atheris":
            atheris_engine.run(bug.stack, triage.stack_label, triage, cap, work, seeds, progress)
        else:
            hypo.run(bug.stack, triage, cap, work / "hypothesis-db", progress)
        progress({}, [])
    except _Reached:
        pass
    seconds = found.get("seconds")
    return {"seconds": round(seconds, 2) if seconds is not None and seconds <= cap else None,
            "signature": found.get("key"), "stored": sorted(triage.stored)}


def strict_rows(bugs, engines, runs: int, cap: float, seeds: Path, on_row=None) -> list:
    rows = []
    for bug in bugs:
        for engine in bug.engines():
            if engines and engine not in engines:
                continue
            found = [time_to_strict(bug, engine, cap, seeds) for _ in range(runs)]
            times = sorted(r["seconds"] if r["seconds"] is not None else float("inf") for r in found)
            median = statistics.median(times)
            rows.append({"bug": bug.name, "stack": bug.stack, "engine": engine, "runs": found,
                         "reached": sum(r["seconds"] is not None for r in found),
                         "median_s": None if median == float("inf") else round(median, 2),
                         "signatures": sorted({r["signature"] for r in found if r["signature"]})})
            if on_row:
                on_row(rows[-1])
    return rows


STRICT_HEADER = ("| real bug | stack | engine | runs: seconds to a strict reproducer | reached | median (s) "
                 "| signature |\n|---|---|---|---|---|---|---|")


def strict_times(r: dict, cap: float) -> tuple:
    """(each run's seconds, ">CAP" for a miss; the median, "> CAP" when most runs missed)."""
    times = ", ".join(f"{x['seconds']:.1f}" if x["seconds"] is not None else f">{cap:.0f}" for x in r["runs"])
    median = f"{r['median_s']:.1f}" if r["median_s"] is not None else f"> {cap:.0f}"
    return times, median


def strict_line(r: dict, cap: float) -> str:
    times, median = strict_times(r, cap)
    return (f"| {r['bug']} | {r['stack']} | {r['engine']} | {times} | {r['reached']}/{len(r['runs'])} | "
            f"{median} | {', '.join(r['signatures']) or '-'} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["ttf", "speed", "strict"])
    parser.add_argument("--bug", action="append", help="strict: a REAL_BUGS name (or a part of one)")
    parser.add_argument("--seeds", type=Path, default=ROOT / DEFAULT_SEEDS,
                        help=f"strict: the seed corpus (default {DEFAULT_SEEDS}, as `ccdiff fuzz`)")
    parser.add_argument("--stack", action="append")
    parser.add_argument("--engine", action="append", choices=ENGINE_CHOICES + PYTHON_ENGINES)
    parser.add_argument("--runs", type=int, help="runs per row (ttf: 3, strict: 5)")
    parser.add_argument("--cap", type=float, help="seconds before a run gives up (ttf: 300, strict: 60)")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--no-dict", action="store_true", help="without fuzz/ccdiff.dict")
    parser.add_argument("--baseline", type=Path, help="an earlier build folder to compare with (speed, ttf)")
    parser.add_argument("--no-pin", action="store_true", help="speed: do not pin the engine to one core")
    parser.add_argument("--hf-max-file-size", type=int, help="honggfuzz --max_file_size (bytes)")
    args = parser.parse_args()
    global USE_DICT, PIN, HF_MAX_FILE_SIZE
    HF_MAX_FILE_SIZE = args.hf_max_file_size
    USE_DICT = not args.no_dict
    PIN = not args.no_pin
    engines = args.engine or ENGINES
    results = {"mode": args.mode, "cpu": os.cpu_count(), "dictionary": USE_DICT}
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"fuzz-{args.mode}{'' if USE_DICT else '-nodict'}.json"
    if args.mode == "strict":
        bugs = [b for b in REAL_BUGS if not args.bug or any(n.lower() in b.name.lower() for n in args.bug)]
        cap = args.cap or 60
        print(STRICT_HEADER)
        results.update(cap_s=cap, seeds=str(args.seeds), rows=[])

        def strict_row(r):            # each row kept as it comes: a long run stopped loses nothing
            print(strict_line(r, cap), flush=True)
            results["rows"].append(r)
            path.write_text(json.dumps(results, indent=2) + "\n")
        strict_rows(bugs, args.engine, args.runs or 5, cap, args.seeds, strict_row)
    elif args.mode == "ttf":
        print("| stack | engine | build | runs (s) | median (s) | invariant |\n|---|---|---|---|---|---|")

        def ttf_line(r):
            for key, name in (("before_", "baseline"), ("", "this commit")):
                if key + "runs" in r:
                    print(f"| {r['stack']} | {r['engine']} | {name} | "
                          f"{', '.join(str(x['seconds']) for x in r[key + 'runs'])} | {r[key + 'median_s']} | "
                          f"{', '.join(r[key + 'invariants'])} |", flush=True)
        results["rows"] = ttf_rows(args.stack or TTF_STACKS, engines, args.runs or 3, args.cap or 300, ttf_line, args.baseline)
    else:
        print(SPEED_HEADER)
        results["pinned"] = PIN
        results["rows"] = speed_rows(args.stack or SPEED_STACKS, engines, args.seconds,
                                     lambda r: print(speed_line(r), flush=True), args.baseline)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

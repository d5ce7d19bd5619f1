"""AFL++, honggfuzz and libFuzzer campaigns: start, poll statistics, collect inputs, stop.

All keep their corpus under the findings folder, so a second run resumes
from it (AFL_AUTORESUME; honggfuzz and libFuzzer reuse their corpus folder),
and all write a crash file the moment they see one, so stopping at any time
(Ctrl-C included) keeps everything found so far.  Engines get their stop signal
(SIGINT; libFuzzer SIGTERM) when ccdiff dies, even by SIGKILL (Linux's
parent-death signal): a killed run leaves
no fuzzer behind to hold the corpus lock the next run needs.

Workers: several campaigns (processes or containers, `--worker NAME`) may share
one `.work/` folder.  AFL++ instances of a worker are all secondaries named
after it (AFL++ elects one of them to act as main and they sync corpora), and
every worker triages every instance's crashes; honggfuzz and libFuzzer workers
share the corpus folder and the crash folder.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..isolation import die_with_parent
from .harness import harness, harness_env
from .toolchain import honggfuzz_home, program

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]")


def _popen(cmd: list, stop_signal=signal.SIGINT, **kwargs) -> subprocess.Popen:
    """An engine process; its stop signal (save and exit) when ccdiff dies."""
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent(stop_signal), **kwargs)


class Campaign:
    """One engine on one stack: `jobs` fuzzer processes sharing a corpus."""

    name = ""
    stop_signal = signal.SIGINT     # AFL++ and honggfuzz save their state and exit on it

    def __init__(self, target, work: Path, seeds: Path, dictionary: Path | None, jobs: int = 1,
                 sanitize: bool = False, invariants: str = "", worker: str = ""):
        self.target, self.work, self.seeds, self.dictionary = target, work, seeds, dictionary
        self.jobs, self.sanitize, self.worker = max(1, jobs), sanitize, worker
        self.env = harness_env(target, engine=True)
        self.direct_env = harness_env(target)   # for re-running a crash outside the engine
        if invariants:
            self.env["CCDIFF_FUZZ_INVARIANTS"] = invariants
        self.procs: list = []
        self.logs: list = []          # one per engine process, in start order
        self._halting = threading.Lock()
        self.halted_at: float | None = None   # when the engines were told to stop
        self.exe = harness(target, self.name, sanitize)
        # What triage re-runs a crash through (stdin in, exit status out): the engine's own
        # harness, unless that one does something else with stdin (libFuzzer's fuzzes).
        self.runner = self.exe

    def stop(self) -> None:
        self.halt()

    def halt(self) -> None:
        """Stop the engine processes, and only them: safe from a timer thread while the main
        thread triages (the deadline is kept even when one input's triage runs long).  The
        first call records when the engines were told to stop."""
        with self._halting:
            if self.halted_at is None:
                self.halted_at = time.monotonic()
            for proc in self.procs:
                if proc.poll() is None:
                    proc.send_signal(self.stop_signal)
            for proc in self.procs:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def halt_at(self, deadline: float) -> threading.Timer:
        """Halt the engines at `deadline` (a time.monotonic()) on a timer thread of its own."""
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), self.halt)
        timer.daemon = True
        timer.start()
        return timer

    def executions(self) -> int:
        """Inputs executed so far, as the engine counts them (cumulative over resumed
        runs for some engines: callers compare with the count before start)."""
        return 0

    def running(self) -> bool:
        return any(proc.poll() is None for proc in self.procs)

    def failure(self) -> str | None:
        """Why the engine stopped on its own (a setup problem), or None."""
        codes = [proc.poll() for proc in self.procs]
        if any(code is None for code in codes) or all(code == 0 for code in codes):
            return None
        tail = self.logs[0].read_text(errors="replace")[-1500:] if self.logs else ""
        tail = ANSI.sub("", tail)
        return f"{self.name} exited with {codes}; log: {', '.join(map(str, self.logs))}\n{tail}"


class Afl(Campaign):
    name = "afl"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._statsd: dict = {}     # instance name -> (its StatsD socket, the newest counters)

    def _roles(self) -> list:
        """(flag, instance name) per job.  Alone: one main and its secondaries.  As a
        worker: secondaries only, named after the worker, so workers never collide."""
        if self.worker:
            return [("-S", self.worker if job == 0 else f"{self.worker}-{job}") for job in range(self.jobs)]
        return [("-M", "main") if job == 0 else ("-S", f"s{job}") for job in range(self.jobs)]

    def start(self) -> None:
        out = self.work / "afl"
        out.mkdir(parents=True, exist_ok=True)
        env = dict(self.env, AFL_AUTORESUME="1", AFL_NO_UI="1", AFL_SKIP_CPUFREQ="1",
                   AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES="1")
        if self.worker:
            # AFL++ syncs every 30 min by default: workers of a 10-minute campaign would never
            # share.  Import the others' entries at start (a resumed worker) and every minute.
            env.setdefault("AFL_IMPORT_FIRST", "1")
            env.setdefault("AFL_SYNC_TIME", "1")
        roles = self._roles()
        # The caller's AFL_NO_AFFINITY=1 (the compose fuzz service sets it: replicas cannot
        # see each other's afl-fuzz in /proc) turns pinning off altogether.
        if self.env.get("AFL_NO_AFFINITY") == "1":
            cpus = [None] * len(roles)
            print("afl: unpinned (AFL_NO_AFFINITY=1 in the environment)", file=sys.stderr, flush=True)
        else:
            cpus = afl_cpus(len(roles))
            print(pinning_line([name for _, name in roles], cpus), file=sys.stderr, flush=True)
        for (flag, name), cpu in zip(roles, cpus):
            cmd = [program("afl-fuzz"), "-i", str(self.seeds), "-o", str(out), flag, name]
            if cpu is not None:
                cmd += ["-b", str(cpu)]     # afl-fuzz and its target on that CPU (they inherit it)
            if self.dictionary:
                cmd += ["-x", str(self.dictionary)]
            cmd += ["--", str(self.exe)]
            job_env = dict(env, **self._statsd_env(name))
            if cpu is None:
                # No free CPU: unbound.  afl-fuzz would otherwise look for a free core itself and
                # refuse to start when it finds none.
                job_env["AFL_NO_AFFINITY"] = "1"
            self.logs.append(out / f"{name}.log")
            with open(self.logs[-1], "ab") as log:
                self.procs.append(_popen(cmd, env=job_env, stdout=log, stderr=subprocess.STDOUT))

    def _statsd_env(self, name: str) -> dict:
        """Without a status screen (AFL_NO_UI) AFL++ 4.04c writes fuzzer_stats once a minute
        and plot_data at exit only, so a live line read from them said "48 executions (0/s)"
        for a whole short campaign.  Its StatsD client sends the same counters every second
        over UDP: one loopback socket per instance receives them (StatsD has no instance
        name without tags)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        self._statsd[name] = (sock, {})
        return {"AFL_STATSD": "1", "AFL_STATSD_HOST": "127.0.0.1", "AFL_STATSD_PORT": str(sock.getsockname()[1])}

    def _statsd_counters(self, name: str) -> dict:
        """The newest StatsD counters of one instance ("execs_done", "execs_per_sec", ...)."""
        sock, values = self._statsd.get(name, (None, {}))
        while sock is not None:
            try:
                datagram = sock.recv(65535)
            except (BlockingIOError, OSError):
                break
            for line in datagram.decode(errors="replace").splitlines():
                key, _, rest = line.partition(":")
                if key.startswith("fuzzing."):
                    values[key[len("fuzzing."):]] = rest.split("|", 1)[0]
        return values

    def stop(self) -> None:
        super().stop()
        for name in list(self._statsd):
            self._statsd_counters(name)        # the counters sent before the engine stopped
            self._statsd[name][0].close()
            self._statsd[name] = (None, self._statsd[name][1])

    def _instances(self, everyone: bool = False) -> list:
        """This run's instance folders, or every instance's that ever ran on this folder."""
        if everyone:
            return sorted(p for p in (self.work / "afl").glob("*") if (p / "queue").is_dir())
        names = [name for _, name in self._roles()]
        return [p for p in (self.work / "afl" / name for name in names) if (p / "queue").is_dir()]

    def stats(self) -> dict:
        """Summed over this run's instances: StatsD's counters (every second) where they came,
        else plot_data's last row (its columns named in its header line; at exit only
        without a screen).  Coverage is AFL++'s edges found, which both carry (plot_data's
        map_size percentage has no StatsD counterpart, and a line must not change unit)."""
        execs, paths, edges, crashes = 0.0, 0, 0, 0
        for inst in self._instances():
            row = dict(_last_plot_row(inst / "plot_data"), **self._statsd_counters(inst.name))
            speed = float(row.get("execs_per_sec", 0) or 0)
            execs += speed if math.isfinite(speed) else 0.0
            edges = max(edges, _int(row.get("edges_found")))
            paths += len(list((inst / "queue").glob("id:*")))
            crashes += len(list((inst / "crashes").glob("id:*")))
        return {"execs_per_sec": execs, "coverage": f"{edges} edges", "corpus": paths, "crashes": crashes,
                "execs": self.executions()}

    def executions(self) -> int:
        """execs_done of fuzzer_stats (written every minute and at exit), total_execs of
        plot_data or StatsD's execs_done (every second), whichever is fresher, summed over
        this run's instances."""
        total = 0
        for inst in self._instances():
            stats = _fuzzer_stats(inst / "fuzzer_stats")
            row = _last_plot_row(inst / "plot_data")
            live = self._statsd_counters(inst.name).get("execs_done")
            total += max(_int(stats.get("execs_done")), _int(row.get("total_execs")), _int(live))
        return total

    def crash_files(self) -> list:
        """Crashes and hangs of every instance, this run's or not (a killed worker's are
        triaged by the next worker on the folder, whatever its name), including the
        crashes.<date>/ folders a resumed AFL++ moves earlier ones into.  Triage stores
        each finding once."""
        return sorted(f for inst in self._instances(everyone=True)
                      for pattern in ("crashes*/id:*", "hangs/id:*") for f in inst.glob(pattern))

    def queue_files(self) -> list:
        return sorted(f for inst in self._instances() for f in (inst / "queue").glob("id:*"))


def afl_cpus(jobs: int, allowed=None, proc: Path = Path("/proc")) -> list:
    """The CPU each of `jobs` afl-fuzz instances binds to (`afl-fuzz -b CPU`), or None for an
    instance left unbound.  Unbound, afl-fuzz, its fork server and the target wake each other
    across cores on every execution: pinned to one CPU they ran 1.3-2.5x faster here
    (docs/fuzzing.md, "Throughput").  A CPU is free when this process may run on it
    (`allowed`, default its affinity) and no afl-fuzz is already bound to it alone (another
    campaign, another worker); the free CPUs go to the jobs in order, lowest first."""
    allowed = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    taken = afl_bound_cpus(proc)
    free = [cpu for cpu in allowed if cpu not in taken]
    return [free[job] if job < len(free) else None for job in range(jobs)]


def afl_bound_cpus(proc: Path = Path("/proc")) -> set:
    """CPUs an afl-fuzz process is bound to, one CPU each (Cpus_allowed_list of its
    /proc/PID/status); an unbound afl-fuzz takes none."""
    taken = set()
    for status in proc.glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:            # the process ended while we looked
            continue
        if fields.get("Name", "").strip() != "afl-fuzz":
            continue
        cpus = _cpu_list(fields.get("Cpus_allowed_list", ""))
        if len(cpus) == 1:
            taken |= cpus
    return taken


def _cpu_list(text: str) -> set:
    """The kernel's list format: "0-3,6" -> {0, 1, 2, 3, 6}."""
    cpus = set()
    for part in text.strip().split(","):
        low, _, high = part.partition("-")
        if low.strip().isdigit():
            cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def pinning_line(names: list, cpus: list) -> str:
    """One stderr line: which AFL++ jobs run pinned, to which CPU, and which do not."""
    pinned = [f"{name} on CPU {cpu}" for name, cpu in zip(names, cpus) if cpu is not None]
    loose = [name for name, cpu in zip(names, cpus) if cpu is None]
    text = "afl: pinned " + (", ".join(pinned) if pinned else "no job")
    return text + (f"; unpinned (no free CPU): {', '.join(loose)}" if loose else "")


def _int(text) -> int:
    try:
        return int(float(text or 0))
    except ValueError:
        return 0


def _fuzzer_stats(path: Path) -> dict:
    """AFL++'s fuzzer_stats: "name   : value" lines."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _last_plot_row(path: Path) -> dict:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    header = next((line for line in lines if line.startswith("#")), "")
    names = [name.strip() for name in header.lstrip("# ").split(",")]
    rows = [line for line in lines if line and not line.startswith("#")]
    if not rows:
        return {}
    return dict(zip(names, (value.strip() for value in rows[-1].split(","))))


class Honggfuzz(Campaign):
    """honggfuzz's own display runs on a pseudo-terminal we read: it is the only
    place it reports live speed and coverage."""
    name = "honggfuzz"

    def start(self) -> None:
        corpus, crashes = self.work / "honggfuzz" / "corpus", self.work / "honggfuzz" / "crashes"
        corpus.mkdir(parents=True, exist_ok=True)
        crashes.mkdir(parents=True, exist_ok=True)
        if not any(corpus.iterdir()):
            # every file under the seed folder (as AFL++ and libFuzzer read it), one name each
            for seed in sorted(p for p in self.seeds.rglob("*") if p.is_file()):
                shutil.copy(seed, corpus / "-".join(seed.relative_to(self.seeds).parts))
        cmd = [str(honggfuzz_home() / "honggfuzz"), "-i", str(corpus), "-W", str(crashes),
               "-n", str(self.jobs), "-P", "--timeout", "5"]
        if self.dictionary:
            cmd += ["-w", str(self.dictionary)]
        cmd += ["--", str(self.exe)]
        master, slave = os.openpty()
        self.procs.append(_popen(cmd, env=dict(self.env, TERM="xterm"), stdout=slave, stderr=slave))
        os.close(slave)
        self._live = {"execs_per_sec": 0.0, "coverage": "-", "crashes": 0, "execs": 0}
        self.logs.append(self.work / "honggfuzz" / (f"honggfuzz-{self.worker}.log" if self.worker
                                                     else "honggfuzz.log"))
        self._log = open(self.logs[-1], "ab")
        self._reader = threading.Thread(target=self._read, args=(master,), daemon=True)
        self._reader.start()

    def stop(self) -> None:
        super().stop()
        if hasattr(self, "_reader"):
            self._reader.join(timeout=5)    # its exit summary holds the final iteration count

    def _read(self, fd: int) -> None:
        buffer = ""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self._log.write(chunk)
            buffer = (buffer + ANSI.sub("", chunk.decode(errors="replace")))[-20000:]
            speed = re.findall(r"Speed\s*:\s*[\d,]+/sec\s*\[avg:\s*([\d,]+)\]", buffer)  # steadier than now
            edges = re.findall(r"Coverage\s*:.*?edge:\s*([\d,]+)/([\d,]+)", buffer)
            summary = re.findall(r"Summary iterations:(\d+) time:(\d+) speed:(\d+)", buffer)
            iterations = re.findall(r"Iterations\s*:\s*([\d,]+)", buffer)
            if iterations:
                self._live["execs"] = int(iterations[-1].replace(",", ""))
            if summary:
                self._live["execs_per_sec"] = float(summary[-1][2])
                self._live["execs"] = int(summary[-1][0])
            elif speed:
                self._live["execs_per_sec"] = float(speed[-1].replace(",", ""))
            if edges:
                self._live["coverage"] = f"{edges[-1][0]} edges"
        os.close(fd)

    def executions(self) -> int:
        """honggfuzz counts from 0 in each run: its display's Iterations, then its exit summary."""
        return self._live["execs"] if hasattr(self, "_live") else 0

    def stats(self) -> dict:
        return dict(self._live, corpus=len(list((self.work / "honggfuzz" / "corpus").iterdir())),
                    crashes=len(self.crash_files()))

    def crash_files(self) -> list:
        return sorted((self.work / "honggfuzz" / "crashes").glob("*.fuzz"))

    def queue_files(self) -> list:
        return sorted(p for p in (self.work / "honggfuzz" / "corpus").iterdir() if p.is_file())


# A fork-mode parent's line after each job: "#RUNS: cov: C ft: F corp: K exec/s E
# oom/timeout/crash: O/T/X time: Ss job: J dft_time: D" (libFuzzer 14, FuzzerFork.cpp).
LIBFUZZER_PARENT = re.compile(r"^#(\d+): cov: (\d+) ft: \d+ corp: \d+ exec/s:? \d+", re.M)
# A job's own lines ("#RUNS\tNEW cov: C ...", "#RUNS\tpulse  cov: C ..."), in its log.
LIBFUZZER_JOB = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+)", re.M)
ARTIFACTS = ("crash-", "timeout-", "oom-", "leak-", "slow-unit-")


class Libfuzzer(Campaign):
    """clang's libFuzzer (-fsanitize=fuzzer), in process: no fork server, no pipe round trip
    per input.  It stops at its first crash unless run in fork mode, so it always is
    (`-fork=JOBS -ignore_crashes=1`): a parent runs jobs, each a child fuzzing the shared
    corpus until it crashes (then the next starts) or for its time slice (1 s for job 1,
    growing to 300 s), and merges their new inputs into the corpus; each child writes
    the input it crashed on to the crash folder (-artifact_prefix) first.  The corpus
    (`.work/libfuzzer/corpus`, the seeds beside it read-only) is kept, so a second run
    resumes; workers share the corpus and crash folders, as honggfuzz's do."""
    name = "libfuzzer"
    # Measured: a fork-mode parent started from a background shell job (SIGINT ignored,
    # which exec keeps) fuzzed on for 13 min after SIGINT; SIGTERM ends it at once, with its
    # running jobs ("run interrupted; exiting", exit 72).
    stop_signal = signal.SIGTERM

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # libFuzzer's harness fuzzes when run bare; triage re-runs a crash through the plain
        # harness (stdin in, the stack's crash as a signal), with the same sanitizers.
        self.runner = harness(self.target, "plain", self.sanitize)
        self.folder = self.work / "libfuzzer"
        self._execs, self._cov, self._started = 0, 0, None

    def start(self) -> None:
        corpus, crashes, tmp = self.folder / "corpus", self.folder / "crashes", self.folder / "tmp"
        for folder in (corpus, crashes, tmp):
            folder.mkdir(parents=True, exist_ok=True)
        cmd = [str(self.exe), f"-fork={self.jobs}", "-ignore_crashes=1", "-ignore_timeouts=1", "-ignore_ooms=1",
               f"-artifact_prefix={crashes}/", "-timeout=5"]
        if self.dictionary:
            cmd.append(f"-dict={self.dictionary}")     # AFL++'s dictionary format is libFuzzer's
        cmd += [str(corpus), str(self.seeds)]       # new inputs go to the first folder only
        self.logs.append(self.folder / (f"libfuzzer-{self.worker}.log" if self.worker else "libfuzzer.log"))
        # TMPDIR: where the parent keeps its jobs' corpora and logs (read below for live
        # counts); inside .work, so a killed run leaves nothing in /tmp.
        with open(self.logs[-1], "ab") as log:
            self.procs.append(_popen(cmd, stop_signal=self.stop_signal, env=dict(self.env, TMPDIR=str(tmp)),
                                     stdout=log, stderr=subprocess.STDOUT))
        self._started = time.monotonic()

    def halt(self) -> None:
        # The running jobs' executions are in their logs only until the parent exits (it
        # removes its temporary folder): count them first.
        if self.procs and self.halted_at is None:
            self.executions()
        super().halt()

    def executions(self) -> int:
        """The parent's count (the runs of every finished job) plus each running job's newest
        count from its log; never going down (a finished job's log goes before its line)."""
        if not self.procs:
            return 0
        runs = [(int(n), int(c)) for n, c in LIBFUZZER_PARENT.findall(_tail(self.logs[0]))[-1:]]
        total, cov = runs[0] if runs else (0, 0)
        for log in (self.folder / "tmp").glob(f"libFuzzerTemp.FuzzWithFork{self.procs[0].pid}.dir/*.log"):
            job = LIBFUZZER_JOB.findall(_tail(log, 4096))
            if job:
                total += int(job[-1][0])
                cov = max(cov, int(job[-1][1]))
        self._execs, self._cov = max(self._execs, total), max(self._cov, cov)
        return self._execs

    def stats(self) -> dict:
        execs = self.executions()
        if self._started is None:
            return {}
        end = self.halted_at if self.halted_at is not None else time.monotonic()
        return {"execs_per_sec": execs / max(end - self._started, 1e-3), "coverage": f"{self._cov} edges",
                "corpus": len(self.queue_files()), "crashes": len(self.crash_files()), "execs": execs}

    def crash_files(self) -> list:
        return sorted(f for f in (self.folder / "crashes").glob("*") if f.name.startswith(ARTIFACTS))

    def queue_files(self) -> list:
        return sorted(f for f in (self.folder / "corpus").glob("*") if f.is_file())


def _tail(path: Path, size: int = 16384) -> str:
    """The end of a log that may grow long (a line per job), from a line start."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return text if size > len(text) else text.partition("\n")[2]


ENGINES = {"afl": Afl, "honggfuzz": Honggfuzz, "libfuzzer": Libfuzzer}

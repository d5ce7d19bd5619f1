"""AFL++ and honggfuzz campaigns: start, poll statistics, collect inputs, stop.

Both keep their corpus under the findings folder, so a second run resumes
from it (AFL_AUTORESUME; honggfuzz reuses its input folder as its corpus),
and both write a crash file the moment they see one, so stopping at any time
(Ctrl-C included) keeps everything found so far.  Engines get SIGINT when
ccdiff dies, even by SIGKILL (Linux's parent-death signal): a killed run leaves
no fuzzer behind to hold the corpus lock the next run needs.

Workers: several campaigns (processes or containers, `--worker NAME`) may share
one `.work/` folder.  AFL++ instances of a worker are all secondaries named
after it (AFL++ elects one of them to act as main and they sync corpora), and
every worker triages every instance's crashes; honggfuzz workers share the
corpus folder and the crash folder.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from ..isolation import die_with_parent
from .harness import harness, harness_env
from .toolchain import honggfuzz_home, program

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]")


def _popen(cmd: list, **kwargs) -> subprocess.Popen:
    """An engine process; SIGINT (save and exit) when ccdiff dies."""
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent(signal.SIGINT), **kwargs)


class Campaign:
    """One engine on one stack: `jobs` fuzzer processes sharing a corpus."""

    name = ""

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
                    proc.send_signal(signal.SIGINT)   # both engines save state and exit on SIGINT
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
        env = dict(self.env, AFL_AUTORESUME="1", AFL_NO_UI="1", AFL_SKIP_CPUFREQ="1", AFL_NO_AFFINITY="1",
                   AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES="1")
        if self.worker:
            # AFL++ syncs every 30 min by default: workers of a 10-minute campaign would never
            # share.  Import the others' entries at start (a resumed worker) and every minute.
            env.setdefault("AFL_IMPORT_FIRST", "1")
            env.setdefault("AFL_SYNC_TIME", "1")
        for flag, name in self._roles():
            cmd = [program("afl-fuzz"), "-i", str(self.seeds), "-o", str(out), flag, name]
            if self.dictionary:
                cmd += ["-x", str(self.dictionary)]
            cmd += ["--", str(self.exe)]
            self.logs.append(out / f"{name}.log")
            with open(self.logs[-1], "ab") as log:
                self.procs.append(_popen(cmd, env=dict(env, **self._statsd_env(name)), stdout=log,
                                         stderr=subprocess.STDOUT))

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
            for seed in sorted(self.seeds.iterdir()):
                shutil.copy(seed, corpus / seed.name)
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


ENGINES = {"afl": Afl, "honggfuzz": Honggfuzz}

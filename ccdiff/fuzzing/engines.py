"""AFL++ and honggfuzz campaigns: start, poll statistics, collect inputs, stop.

Both keep their corpus under the findings folder, so a second run resumes
from it (AFL_AUTORESUME; honggfuzz reuses its input folder as its corpus),
and both write a crash file the moment they see one, so stopping at any time
(Ctrl-C included) keeps everything found so far.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path

from .harness import harness, harness_env
from .toolchain import honggfuzz_home, program

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]")


class Campaign:
    """One engine on one stack: `jobs` fuzzer processes sharing a corpus."""

    name = ""

    def __init__(self, target, work: Path, seeds: Path, dictionary: Path | None, jobs: int = 1,
                 sanitize: bool = False, invariants: str = ""):
        self.target, self.work, self.seeds, self.dictionary = target, work, seeds, dictionary
        self.jobs, self.sanitize = max(1, jobs), sanitize
        self.env = harness_env(target, engine=True)
        self.direct_env = harness_env(target)   # for re-running a crash outside the engine
        if invariants:
            self.env["CCDIFF_FUZZ_INVARIANTS"] = invariants
        self.procs: list = []
        self.exe = harness(target, self.name, sanitize)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)   # both engines save state and exit on SIGINT
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def running(self) -> bool:
        return any(proc.poll() is None for proc in self.procs)

    def failure(self) -> str | None:
        """Why the engine stopped on its own (a setup problem), or None."""
        codes = [proc.poll() for proc in self.procs]
        if any(code is None for code in codes) or all(code == 0 for code in codes):
            return None
        logs = sorted(self.work.glob(f"{self.name}/*.log"))
        tail = logs[0].read_text(errors="replace")[-1500:] if logs else ""
        tail = ANSI.sub("", tail)
        return f"{self.name} exited with {codes}; log: {', '.join(map(str, logs))}\n{tail}"


class Afl(Campaign):
    name = "afl"

    def start(self) -> None:
        out = self.work / "afl"
        out.mkdir(parents=True, exist_ok=True)
        env = dict(self.env, AFL_AUTORESUME="1", AFL_NO_UI="1", AFL_SKIP_CPUFREQ="1", AFL_NO_AFFINITY="1",
                   AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES="1")
        for job in range(self.jobs):
            role = ["-M", "main"] if job == 0 else ["-S", f"s{job}"]
            cmd = [program("afl-fuzz"), "-i", str(self.seeds), "-o", str(out), *role]
            if self.dictionary:
                cmd += ["-x", str(self.dictionary)]
            cmd += ["--", str(self.exe)]
            log = open(out / f"afl-{job}.log", "ab")
            self.procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL))

    def _instances(self) -> list:
        return sorted(p for p in (self.work / "afl").glob("*") if (p / "queue").is_dir())

    def stats(self) -> dict:
        """Summed over instances.  plot_data (rewritten every 5 s) is fresher than
        fuzzer_stats (every minute); its columns are named in its header line."""
        execs, paths, cover, crashes = 0.0, 0, 0.0, 0
        for inst in self._instances():
            row = _last_plot_row(inst / "plot_data")
            speed = float(row.get("execs_per_sec", 0) or 0)
            execs += speed if math.isfinite(speed) else 0.0
            cover = max(cover, float(str(row.get("map_size", "0%")).rstrip("%") or 0))
            paths += len(list((inst / "queue").glob("id:*")))
            crashes += len(list((inst / "crashes").glob("id:*")))
        return {"execs_per_sec": execs, "coverage": f"{cover:.2f}% map", "corpus": paths, "crashes": crashes}

    def crash_files(self) -> list:
        return sorted(f for inst in self._instances() for f in (inst / "crashes").glob("id:*"))

    def queue_files(self) -> list:
        return sorted(f for inst in self._instances() for f in (inst / "queue").glob("id:*"))


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
        self.procs.append(subprocess.Popen(cmd, env=dict(self.env, TERM="xterm"), stdout=slave, stderr=slave,
                                           stdin=subprocess.DEVNULL))
        os.close(slave)
        self._live = {"execs_per_sec": 0.0, "coverage": "-", "crashes": 0}
        self._log = open(self.work / "honggfuzz" / "honggfuzz.log", "ab")
        threading.Thread(target=self._read, args=(master,), daemon=True).start()

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
            if summary:
                self._live["execs_per_sec"] = float(summary[-1][2])
            elif speed:
                self._live["execs_per_sec"] = float(speed[-1].replace(",", ""))
            if edges:
                self._live["coverage"] = f"{edges[-1][0]} edges"
        os.close(fd)

    def stats(self) -> dict:
        return dict(self._live, corpus=len(list((self.work / "honggfuzz" / "corpus").iterdir())),
                    crashes=len(self.crash_files()))

    def crash_files(self) -> list:
        return sorted((self.work / "honggfuzz" / "crashes").glob("*.fuzz"))

    def queue_files(self) -> list:
        return sorted(p for p in (self.work / "honggfuzz" / "corpus").iterdir() if p.is_file())


ENGINES = {"afl": Afl, "honggfuzz": Honggfuzz}

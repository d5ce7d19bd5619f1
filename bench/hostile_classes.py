"""The hostile user's attempts of issue #32, one or more per class, run as a user would run
them (a `ccdiff` process each, in a scratch folder) and judged on four counts:

  data lost      a file the attempt must not touch (an input, a user's file) changed or vanished
  traceback      a Python traceback on stdout or stderr
  wrong exit     an exit code other than the one the class calls for (2: every error that is
                 not a finding; 0/1: the run went on)
  peak RSS       the process's own maximum resident size (wait4's rusage)

    python3 bench/bench_hostile.py --classes          # the table, and bench/results/hostile-classes-DATE.json
"""
from __future__ import annotations

import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "examples" / "death-spiral.jsonl"
QLOG = ROOT / "tests" / "fixtures" / "qlog" / "aioquic-cubic-random-loss.qlog"
SCENARIO = (ROOT / "scenarios" / "death-spiral.toml").read_text().replace("bytes = 10_000_000", "bytes = 200_000")


@dataclass
class Attempt:
    klass: str
    what: str
    argv: list                       # after `python3 -m ccdiff`; "{d}" is the scratch folder
    exits: tuple = (2,)
    files: dict = field(default_factory=dict)   # relative path -> text, made before the attempt
    keep: tuple = ()                 # relative paths that must be byte-identical afterwards
    made: tuple = ()                 # relative paths the attempt must still write (else: data lost)
    stdin: str | None = None
    limit_file_bytes: int = 0        # RLIMIT_FSIZE: a full disk, as EFBIG
    close_stdout: bool = False
    before: list = field(default_factory=list)   # argv lists run first (their exits unchecked)


def _scenario(name: str, **changes) -> str:
    text = SCENARIO.replace('name = "death-spiral"', f'name = "{name}"')
    for old, new in changes.items():
        text = text.replace(old, new)
    return text


ATTEMPTS = [
    # data loss
    Attempt("report eats its input", "replay R/traces/t.jsonl --report R",
            ["replay", "{d}/R/traces/t.jsonl", "--stack", "quiche@0.26.0", "--report", "{d}/R"],
            before=[["replay", "{d}/t.jsonl", "--stack", "quiche@0.26.0", "--report", "{d}/R"]],
            files={"t.jsonl": TRACE.read_text()}, keep=("R/traces/t.jsonl", "R/summary.json")),
    Attempt("report eats its input", "matrix R/traces/t.jsonl --report R",
            ["matrix", "{d}/R/traces/t.jsonl", "--stack", "quiche@0.26.0", "--report", "{d}/R"],
            before=[["replay", "{d}/t.jsonl", "--stack", "quiche@0.26.0", "--report", "{d}/R"]],
            files={"t.jsonl": TRACE.read_text()}, keep=("R/traces/t.jsonl",)),
    Attempt("scenario names collide", "two scenarios 'a b' and 'a_b'",
            ["conform", "--stack", "oracle", "--scenario", "{d}/a.toml", "--scenario", "{d}/b.toml",
             "--seeds", "1", "--out", "{d}/out"],
            files={"a.toml": _scenario("a b"), "b.toml": _scenario("a_b")}),
    Attempt("scenario names collide", "a custom file named like a catalog scenario",
            ["conform", "--stack", "oracle", "--scenario", "death-spiral", "--scenario", "{d}/death-spiral.toml",
             "--seeds", "1", "--out", "{d}/out"], files={"death-spiral.toml": _scenario("death-spiral")}),
    Attempt("closed stdout", "replay --json --report | head -c0",
            ["replay", str(TRACE), "--stack", "quiche@0.26.0", "--json", "{d}/f.json", "--report", "{d}/R"],
            exits=(1,), close_stdout=True, made=("f.json", "R/summary.json")),
    Attempt("conform into a user's folder", "--out holding the user's summary.json",
            ["conform", "--stack", "oracle", "--scenario", "{d}/s.toml", "--seeds", "1", "--out", "{d}/mine"],
            files={"s.toml": _scenario("s"), "mine/summary.json": "mine", "mine/index.html": "mine"},
            keep=("mine/summary.json", "mine/index.html")),
    Attempt("conform into a user's folder", "a user's file in conform's own report folder",
            ["conform", "--stack", "x=oracle", "--scenario", "{d}/s.toml", "--seeds", "1", "--out", "{d}/out"],
            exits=(0,), files={"s.toml": _scenario("s")}, keep=("out/report/x/notes.txt",),
            before=[["conform", "--stack", "x=oracle:idle=last-send", "--scenario", "{d}/s.toml", "--seeds", "1",
                     "--out", "{d}/out"], ["!write", "out/report/x/notes.txt", "keep me"]]),
    Attempt("output is an input", "replay X --json X", ["replay", "{d}/t.jsonl", "--json", "{d}/t.jsonl"],
            files={"t.jsonl": TRACE.read_text()}, keep=("t.jsonl",)),
    Attempt("output is an input", "import q.qlog -o q.qlog", ["import", "{d}/q.qlog", "-o", "{d}/q.qlog"],
            files={"q.qlog": QLOG.read_text()}, keep=("q.qlog",)),
    Attempt("bad --baseline", "a cell's pass_rate is a string",
            ["conform", "--stack", "oracle", "--scenario", "{d}/s.toml", "--seeds", "1", "--baseline", "{d}/b.json",
             "--out", "{d}/out"],
            files={"s.toml": _scenario("s"), "b.json": '{"schema": "ccdiff-conform/1", "cases": [], "cells": '
                   '[{"stack": "oracle", "scenario": "s", "pass_rate": "x"}]}'}),
    Attempt("full disk", "replay --report with 20 kB of disk",
            ["replay", str(TRACE), "--stack", "quiche@0.26.0", "--report", "{d}/R"], limit_file_bytes=20_000),
    Attempt("full disk", "conform with 20 kB of disk",
            ["conform", "--stack", "oracle:idle=last-send", "--scenario", "{d}/s.toml", "--seeds", "1",
             "--out", "{d}/out"], files={"s.toml": _scenario("s")}, limit_file_bytes=20_000),
    # security and availability (the serve token, control characters)
    Attempt("secret on the command line", "serve --token SECRET", ["serve", "--token", "s3cret"]),
    Attempt("control characters", "a trace named with ESC ] 0 ; and BEL",
            ["validate", "{d}/x\x1b]0;owned\x07.jsonl"], exits=(0,), files={"x\x1b]0;owned\x07.jsonl": TRACE.read_text()}),
    # hangs and memory: scenario values
    Attempt("scenario values", "max_datagram_size = true", ["sim", "{d}/s.toml"],
            files={"s.toml": _scenario("s", **{"max_datagram_size = 1350": "max_datagram_size = true"})}),
    Attempt("scenario values", "pto_probes = 1e9", ["sim", "{d}/s.toml"],
            files={"s.toml": _scenario("s") + "\n[sender]\npto_probes = 1e9\n"}),
    Attempt("scenario values", "bursts = 1e8", ["sim", "{d}/s.toml"],
            files={"s.toml": 'name = "s"\n[app]\npattern = "bursts"\nbursts = 100_000_000\nperiod_us = 10\n'}),
    Attempt("scenario values", "max_datagram_size = 1", ["sim", "{d}/s.toml"],
            files={"s.toml": _scenario("s", **{"max_datagram_size = 1350": "max_datagram_size = 1"})}),
    Attempt("scenario values", "a NaN loss rate", ["validate", "{d}/s.toml"],
            files={"s.toml": 'name = "s"\n[loss]\nrate = nan\n'}),
    Attempt("scenario values", "a scenario named '..'", ["conform", "--stack", "oracle", "--scenario", "{d}/s.toml",
                                                        "--seeds", "1", "--out", "{d}/out"],
            files={"s.toml": _scenario("..")}),
    Attempt("sim runs forever", "sim --timeout 0.05", ["sim", "death-spiral", "--timeout", "0.05"]),
    Attempt("sim grows without end", "sim --memory-limit 1", ["sim", "death-spiral", "--memory-limit", "1"]),
    # wrong exit codes and silent acceptance
    Attempt("options that do nothing", "--timeout without --isolate",
            ["replay", str(TRACE), "--timeout", "5"]),
    Attempt("output targets checked late", "--json naming a folder", ["replay", str(TRACE), "--json", "{d}"]),
    Attempt("output targets checked late", "--json in a missing folder",
            ["matrix", str(TRACE), "--json", "{d}/no/such/f.json"]),
    Attempt("a piped trace", "cat t | ccdiff replay /dev/stdin", ["replay", "/dev/stdin", "--stack", "oracle"],
            exits=(0,), stdin=str(TRACE)),
]


def _sha(path: Path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _ccdiff(argv, folder: Path, stdin=None, limit=0, close_stdout=False):
    """Run one ccdiff process; returns (exit code, output text, peak RSS in kB)."""
    argv = [a.replace("{d}", str(folder)) for a in argv]

    def preexec():
        if limit:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    stdin_file = open(stdin, "rb") if stdin else subprocess.DEVNULL
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "ccdiff", *argv], cwd=folder, stdin=stdin_file,
                            stdout=subprocess.PIPE if close_stdout else out, stderr=out, preexec_fn=preexec)
    if close_stdout:
        proc.stdout.close()
    deadline = time.monotonic() + 300
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
        time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if stdin:
        stdin_file.close()
    out.seek(0)
    return proc.returncode, out.read().decode(errors="replace"), usage.ru_maxrss


def run_attempt(attempt: Attempt, folder: Path) -> dict:
    for rel, text in attempt.files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    for argv in attempt.before:
        if argv[0] == "!write":
            (folder / argv[1]).write_text(argv[2])
        else:
            _ccdiff(argv, folder)
    kept = {rel: _sha(folder / rel) for rel in attempt.keep}
    code, text, rss = _ccdiff(attempt.argv, folder, attempt.stdin, attempt.limit_file_bytes, attempt.close_stdout)
    lost = [rel for rel, digest in kept.items() if digest is None or _sha(folder / rel) != digest]
    lost += [rel for rel in attempt.made if not (folder / rel).is_file()]
    return {"class": attempt.klass, "attempt": attempt.what, "exit": code, "expected": list(attempt.exits),
            "wrong_exit": code not in attempt.exits, "traceback": "Traceback" in text, "data_lost": lost,
            "raw_control": any(c in text for c in "\x1b\x07"),
            "peak_rss_kb": rss, "last_line": (text.strip().splitlines() or [""])[-1][:200]}


def run_all() -> list:
    rows = []
    for attempt in ATTEMPTS:
        folder = Path(tempfile.mkdtemp(prefix="ccdiff-hostile-class-"))
        try:
            rows.append(run_attempt(attempt, folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def table(rows: list) -> str:
    classes = sorted({r["class"] for r in rows})
    lines = ["| attempts | classes | data lost | tracebacks | wrong exit codes | raw control characters "
             "| worst peak RSS |", "|---|---|---|---|---|---|---|",
             f"| {len(rows)} | {len(classes)} | {sum(bool(r['data_lost']) for r in rows)} | "
             f"{sum(r['traceback'] for r in rows)} | {sum(r['wrong_exit'] for r in rows)} | "
             f"{sum(r['raw_control'] for r in rows)} | "
             f"{max(r['peak_rss_kb'] for r in rows) / 1024:.0f} MB |", "",
             "| class | attempt | exit (expected) | traceback | data lost | peak RSS |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['class']} | {r['attempt']!r} | {r['exit']} ({'/'.join(map(str, r['expected']))}) | "
                     f"{'YES' if r['traceback'] else 'no'} | {', '.join(r['data_lost']) or '-'} | "
                     f"{r['peak_rss_kb'] / 1024:.0f} MB |")
    return "\n".join(lines)

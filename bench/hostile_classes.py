"""The hostile user's attempts of issue #32, one or more per class, run as a user would run
them (a `ccdiff` process each, in a scratch folder) and judged on these counts:

  data lost      a file the attempt must not touch (an input, a user's file) changed or vanished
  traceback      a Python traceback on stdout or stderr, or an error naming a ccdiff or stdlib
                 line (`engine.py:261: TypeError`) instead of the input's
  wrong exit     an exit code other than the one the class calls for (2: every error that is
                 not a finding; 0/1: the run went on)
  raw control    ESC or BEL reaching the terminal
  peak RSS       the process's own maximum resident size (wait4's rusage)

An exit 2 from the option parser ("unrecognized arguments") does not count as the class's
refusal (the attempt never ran) unless the attempt says so; an attempt marked `only_error`
must be refused before any work (its output is the error line alone).

    python3 bench/bench_hostile.py --classes          # the table, and bench/results/hostile-classes-DATE.json
    python3 bench/bench_hostile.py --classes --code ../old   # the same attempts on another checkout's ccdiff

With --code DIR every ccdiff process imports DIR's ccdiff (PYTHONPATH=DIR; the attempts' inputs
still come from this tree) and the attempts that FAIL there are listed: does each attempt catch
its class on an older commit?  A process still running after DEADLINE_S or holding more than
GUARD_MIB resident is killed (its exit is then -9, a wrong exit; its process group is killed with it).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
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
DEADLINE_S = 300
GUARD_MIB = 6144                     # above sim's own default bound (4096): a hang must not cost the machine
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
    seconds: float = DEADLINE_S      # killed after this (exit -9)
    parser_refusal_ok: bool = False  # the option's refusal is the fix (serve --token)
    only_error: bool = False         # refused before any work: one line of output


def _scenario(name: str, **changes) -> str:
    text = SCENARIO.replace('name = "death-spiral"', f'name = "{name}"')
    for old, new in changes.items():
        text = text.replace(old, new)
    return text


ATTEMPTS = [
    # data loss
    Attempt("report eats its input", "replay R/traces/t.jsonl --report R",
            ["replay", "{d}/R/traces/t.jsonl", "--stack", "aioquic@1.7.2", "--report", "{d}/R"],
            before=[["replay", "{d}/t.jsonl", "--stack", "aioquic@1.7.2", "--report", "{d}/R"]],
            files={"t.jsonl": TRACE.read_text()}, keep=("R/traces/t.jsonl", "R/summary.json")),
    Attempt("report eats its input", "matrix R/traces/t.jsonl --report R",
            ["matrix", "{d}/R/traces/t.jsonl", "--stack", "aioquic@1.7.2", "--report", "{d}/R"],
            before=[["replay", "{d}/t.jsonl", "--stack", "aioquic@1.7.2", "--report", "{d}/R"]],
            files={"t.jsonl": TRACE.read_text()}, keep=("R/traces/t.jsonl",)),
    Attempt("scenario names collide", "two scenarios 'a b' and 'a_b'",
            ["conform", "--stack", "oracle", "--scenario", "{d}/a.toml", "--scenario", "{d}/b.toml",
             "--seeds", "1", "--out", "{d}/out"],
            files={"a.toml": _scenario("a b"), "b.toml": _scenario("a_b")}),
    Attempt("scenario names collide", "a custom file named like a catalog scenario",
            ["conform", "--stack", "oracle", "--scenario", "death-spiral", "--scenario", "{d}/death-spiral.toml",
             "--seeds", "1", "--out", "{d}/out"], files={"death-spiral.toml": _scenario("death-spiral")}),
    Attempt("closed stdout", "replay --json --report | head -c0",
            ["replay", str(TRACE), "--stack", "aioquic@1.7.2", "--json", "{d}/f.json", "--report", "{d}/R"],
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
            ["replay", str(TRACE), "--stack", "aioquic@1.7.2", "--report", "{d}/R"], limit_file_bytes=20_000),
    Attempt("full disk", "conform with 20 kB of disk",
            ["conform", "--stack", "oracle:idle=last-send", "--scenario", "{d}/s.toml", "--seeds", "1",
             "--out", "{d}/out"], files={"s.toml": _scenario("s")}, limit_file_bytes=20_000),
    # security and availability (the serve token, control characters)
    Attempt("secret on the command line", "serve --token SECRET", ["serve", "--token", "s3cret", "--port", "0"],
            seconds=20, parser_refusal_ok=True),
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
    Attempt("scenario values", "a NaN ACK loss rate", ["sim", "{d}/s.toml"],
            files={"s.toml": _scenario("s", **{"ack_every = 2": "ack_every = 2\nack_loss_rate = nan"})}),
    Attempt("scenario values", "a scenario named '..'", ["conform", "--stack", "oracle", "--scenario", "{d}/s.toml",
                                                        "--seeds", "1", "--out", "{d}/out"],
            files={"s.toml": _scenario("..")}),
    Attempt("sim runs forever", "sim --timeout 0.05", ["sim", "death-spiral", "--timeout", "0.05"]),
    Attempt("sim grows without end", "sim --memory-limit 1", ["sim", "death-spiral", "--memory-limit", "1"]),
    # wrong exit codes and silent acceptance
    Attempt("options that do nothing", "--timeout without --isolate",
            ["replay", str(TRACE), "--timeout", "5"]),
    Attempt("output targets checked late", "--json naming a folder",
            ["replay", str(TRACE), "--stack", "aioquic@1.7.2", "--json", "{d}"], only_error=True),
    Attempt("output targets checked late", "--json in a missing folder",
            ["matrix", str(TRACE), "--stack", "aioquic@1.7.2", "--json", "{d}/no/such/f.json"], only_error=True),
    Attempt("a piped trace", "cat t | ccdiff replay /dev/stdin", ["replay", "/dev/stdin", "--stack", "oracle"],
            exits=(0,), stdin=str(TRACE)),
]


def _sha(path: Path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _env(code: Path | None) -> dict:
    """The attempts' environment: with `code`, PYTHONPATH puts that checkout's ccdiff first."""
    if code is None:
        return dict(os.environ)
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")])))


def check_code(code: Path) -> str:
    """The ccdiff package file a process in a scratch folder imports with _env(code); refuses any
    other than code's own (an editable install or the cwd taking precedence)."""
    with tempfile.TemporaryDirectory(prefix="ccdiff-hostile-code-") as tmp:
        found = subprocess.run([sys.executable, "-c", "import ccdiff; print(ccdiff.__file__)"], cwd=tmp,
                               env=_env(code), capture_output=True, text=True, check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(code.resolve()):
        raise SystemExit(f"error: with PYTHONPATH={code} a ccdiff process imports {found}, not {code}'s")
    return found


def _rss_mib(pid: int) -> float:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except (OSError, ValueError, IndexError):
        return 0.0


def _ccdiff(argv, folder: Path, stdin=None, limit=0, close_stdout=False, code=None, seconds=DEADLINE_S):
    """Run one ccdiff process (from `code`'s checkout when given); returns (exit code, output
    text, peak RSS in kB, what killed it: "" or "deadline"/"memory guard")."""
    argv = [a.replace("{d}", str(folder)) for a in argv]

    def preexec():
        if limit:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    feeder = subprocess.Popen(["cat", stdin], stdout=subprocess.PIPE) if stdin else None   # a pipe, not a file
    stdin_file = feeder.stdout if feeder else subprocess.DEVNULL
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "ccdiff", *argv], cwd=folder, stdin=stdin_file,
                            stdout=subprocess.PIPE if close_stdout else out, stderr=out, preexec_fn=preexec,
                            env=_env(code), start_new_session=True)
    if feeder:
        feeder.stdout.close()
    if close_stdout:
        proc.stdout.close()
    deadline, killed = time.monotonic() + seconds, ""
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if not killed:
            killed = ("deadline" if time.monotonic() > deadline else
                      "memory guard" if _rss_mib(proc.pid) > GUARD_MIB else "")
            if killed:
                os.killpg(proc.pid, signal.SIGKILL)   # its workers too (a new session: its own group)
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)           # workers it left behind
    proc.returncode = os.waitstatus_to_exitcode(status)
    if feeder:
        feeder.wait()
    out.seek(0)
    return proc.returncode, out.read().decode(errors="replace"), usage.ru_maxrss, killed


def run_attempt(attempt: Attempt, folder: Path, code: Path | None = None) -> dict:
    for rel, text in attempt.files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    for argv in attempt.before:
        if argv[0] == "!write":
            (folder / argv[1]).write_text(argv[2])
        else:
            _ccdiff(argv, folder, code=code)
    kept = {rel: _sha(folder / rel) for rel in attempt.keep}
    started = time.monotonic()
    exit_code, text, rss, killed = _ccdiff(attempt.argv, folder, attempt.stdin, attempt.limit_file_bytes,
                                           attempt.close_stdout, code, attempt.seconds)
    lost = [rel for rel, digest in kept.items() if digest is None or _sha(folder / rel) != digest]
    lost += [rel for rel in attempt.made if not (folder / rel).is_file()]
    return {"class": attempt.klass, "attempt": attempt.what, "exit": exit_code, "expected": list(attempt.exits),
            "wrong_exit": exit_code not in attempt.exits, "killed": killed,
            "internal_line": (re.findall(r"\b\w+\.py:\d+", text) or [""])[0],
            "parser_refused": "unrecognized arguments" in text and not attempt.parser_refusal_ok,
            "worked_first": attempt.only_error and len(text.strip().splitlines()) > 1,
            "seconds": round(time.monotonic() - started, 1), "traceback": "Traceback" in text, "data_lost": lost,
            "raw_control": any(c in text for c in "\x1b\x07"),
            "peak_rss_kb": rss, "last_line": (text.strip().splitlines() or [""])[-1][:200]}


def failures(row: dict) -> list:
    """Why an attempt's row fails (empty: it held)."""
    return [why for why, bad in [(f"exit {row['exit']}, expected {'/'.join(map(str, row['expected']))}"
                                  + (f" (killed: {row['killed']})" if row["killed"] else ""), row["wrong_exit"]),
                                 ("traceback", row["traceback"]),
                                 (f"error names {row['internal_line']}", row["internal_line"]),
                                 ("the option parser refused it (never ran)", row["parser_refused"]),
                                 ("did the work before refusing", row["worked_first"]),
                                 (f"data lost: {', '.join(row['data_lost'])}", row["data_lost"]),
                                 ("raw control characters", row["raw_control"])] if bad]


def run_all(code: Path | None = None) -> list:
    rows = []
    for attempt in ATTEMPTS:
        folder = Path(tempfile.mkdtemp(prefix="ccdiff-hostile-class-"))
        try:
            rows.append(run_attempt(attempt, folder, code))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def table(rows: list) -> str:
    classes = sorted({r["class"] for r in rows})
    lines = ["| attempts | classes | failing | data lost | tracebacks | wrong exit codes | raw control characters "
             "| worst peak RSS |", "|---|---|---|---|---|---|---|---|",
             f"| {len(rows)} | {len(classes)} | {sum(bool(failures(r)) for r in rows)} | "
             f"{sum(bool(r['data_lost']) for r in rows)} | "
             f"{sum(bool(r['traceback'] or r['internal_line']) for r in rows)} | "
             f"{sum(r['wrong_exit'] for r in rows)} | "
             f"{sum(r['raw_control'] for r in rows)} | "
             f"{max(r['peak_rss_kb'] for r in rows) / 1024:.0f} MB |", "",
             "| class | attempt | exit (expected) | fails | peak RSS |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['class']} | {r['attempt']!r} | {r['exit']} ({'/'.join(map(str, r['expected']))}) | "
                     f"{'; '.join(failures(r)) or '-'} | {r['peak_rss_kb'] / 1024:.0f} MB |")
    return "\n".join(lines)

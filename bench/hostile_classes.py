"""The hostile user's attempts of issue #32, one or more per class, run as a user would run
them (a `ccdiff` process each, in a scratch folder) and judged on these counts:

  data lost      a file the attempt must not touch (an input, a user's file) changed or vanished
  traceback      a Python traceback on stdout or stderr, or an error naming a ccdiff or stdlib
                 line (`engine.py:261: TypeError`) instead of the input's
  wrong exit     an exit code other than the one the class calls for (2: every error that is
                 not a finding; 0/1: the run went on)
  raw control    ESC or BEL reaching the terminal
  peak RSS       the process's own maximum resident size (wait4's rusage)

and, where an attempt asks: words its output must (`says`) or must not (`never_says`) hold, the
mode of every file it wrote under a umask, XML files that must be well-formed, and processes of
its group still alive after it died (a signal sent to it mid-run, `signal`); a second ccdiff
may run beside it (`background`).  A server attempt (`client`) starts `ccdiff serve` or
`serve-reports` on port 0 in the scratch folder, runs a Python client against it (a stranger's
large line or idle connections, then a client that has the token) and is judged on what the
client saw and on the peak RSS of the server's process tree (VmHWM, sampled in /proc).

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
import socket
import subprocess
import sys
import tempfile
import threading
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
    keep: tuple = ()                 # relative paths (or globs) that must be byte-identical afterwards
    made: tuple = ()                 # relative paths the attempt must still write (else: data lost)
    stdin: str | None = None
    limit_file_bytes: int = 0        # RLIMIT_FSIZE: a full disk, as EFBIG
    close_stdout: bool = False
    before: list = field(default_factory=list)   # argv lists run first (their exits unchecked)
    seconds: float = DEADLINE_S      # killed after this (exit -9)
    parser_refusal_ok: bool = False  # the option's refusal is the fix (serve --token)
    only_error: bool = False         # refused before any work: one line of output
    env: dict = field(default_factory=dict)      # extra environment ("{d}" is the scratch folder)
    background: list = field(default_factory=list)   # argv started before the attempt, running beside it
    wait_for: str = ""               # relative path the background run makes before the attempt starts
    says: tuple = ()                 # words the output must hold ("{d}": the scratch folder)
    never_says: tuple = ()           # words it must not hold
    umask: int | None = None         # run under this umask: every file it writes has 0666 & ~umask
    xml: tuple = ()                  # relative paths that must be well-formed XML
    send_signal: tuple = ()          # (signum, "group" | "parent", workers): sent once it has that many
    no_orphans: bool = False         # nothing of its process group may outlive it
    absent: tuple = ()               # globs (relative) that must match nothing afterwards: left behind
    client: object = None            # a server attempt: argv starts a server on port 0 that must still be
                                     # serving at the end (exit -9: killed by the bench); client(port) -> problems
    rss_bound_mib: int = 0           # peak RSS of any of its processes (a server's children too) above: a failure
    limit_files: int = 0             # RLIMIT_NOFILE (a server under the usual 1024 open files)


def _scenario(name: str, **changes) -> str:
    text = SCENARIO.replace('name = "death-spiral"', f'name = "{name}"')
    for old, new in changes.items():
        text = text.replace(old, new)
    return text


def _long(name: str = "long") -> str:
    """A case that runs for minutes: the run is still under way when something happens to it."""
    return _scenario(name).replace("bytes = 200_000", "bytes = 2_000_000_000").replace(
        "deadline_us = 10_000_000", "deadline_us = 3_600_000_000")


def _faulty_home(folder: Path) -> None:
    """tests/fault_adapters.py's faulty stack (fault=crash|opencrash|...), built into folder/home."""
    sys.path.insert(0, str(ROOT))
    from tests.fault_adapters import install_faulty_stack
    install_faulty_stack(folder / "home")


def _shard_without_status(folder: Path) -> None:
    """Shard s2's case loses its "status"; shard.json's hash of summary.json follows, so only
    the record itself is wrong (the merge must name s2, not s1)."""
    import json
    summary, marker = folder / "s2" / "summary.json", folder / "s2" / "shard.json"
    doc = json.loads(summary.read_text())
    for case in doc["cases"]:
        case.pop("status", None)
    summary.write_text(json.dumps(doc))
    record = json.loads(marker.read_text())
    record["summary_sha256"] = hashlib.sha256(summary.read_bytes()).hexdigest()
    marker.write_text(json.dumps(record))


TOKEN = "s3cret-of-the-owner"
SERVE = {"CCDIFF_BUILD_DIR": os.environ.get("CCDIFF_BUILD_DIR", str(ROOT / "build")), "CCDIFF_SERVE_TOKEN": TOKEN}
SERVE_ARGV = ["serve", "--port", "0", "--stack", "aioquic"]   # the token from the environment: both codes read it


def _line(sock: socket.socket) -> bytes:
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        reply += chunk
    return reply


def _owner_gets_in(port: int, seconds: float, request: bytes, ok) -> list:
    """The client that has the token (or, for serve-reports, anyone), retrying for `seconds`:
    no problem if one answer passes ok(answer), else the last answer it got."""
    deadline, last = time.monotonic() + seconds, b""
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
                sock.sendall(request)
                last = _line(sock) or b"(closed without an answer)"
                if ok(last):
                    return []
        except OSError as exc:
            last = f"({type(exc).__name__}: {exc})".encode()
        if time.monotonic() > deadline:
            return [f"locked out for {seconds:.0f} s: {last[:80].decode(errors='replace').strip()}"]
        time.sleep(0.5)


HELLO = ('{"op": "hello", "token": "%s"}\n' % TOKEN).encode()


def _is_ok(reply: bytes) -> bool:
    return reply.startswith(b'{"ok":true') or reply.startswith(b'{"ok": true')


def _stranger_sends_a_large_line(port: int) -> list:
    """A stranger (no token) sends one 47 MiB request line (under 3c176b9's 48 MiB request
    limit), a list of numbers, and waits for the answer; then the owner must still be served."""
    line = b'{"op": "hello", "pad": [' + b"0," * (47 << 19) + b'0]}\n'   # 24 M numbers: a list of 190 MB
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        with contextlib.suppress(OSError):       # cut off mid-line: that is the fix
            sock.sendall(line)
        with contextlib.suppress(OSError):
            reply = _line(sock)
            if reply and b"needs a token" not in reply:
                return [f"the stranger was answered {reply[:80]!r}"]
        time.sleep(0.5)                          # its child's peak is sampled while it lives
    return _owner_gets_in(port, 10, HELLO, _is_ok)


def _idle_strangers(port: int, count: int, source: str, request: bytes, ok, seconds: float) -> list:
    """A stranger opens `count` connections from `source` and sends nothing; the owner then
    tries for `seconds`.  A connection the server no longer accepts ends the stranger's run."""
    strangers = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.settimeout(2)
            try:
                sock.bind((source, 0))
                sock.connect(("127.0.0.1", port))
            except OSError:
                sock.close()
                break
            strangers.append(sock)
            time.sleep(0.002)                    # an accept queue of 5 (serve-reports) overflows, costing 1 s a SYN
        time.sleep(1)                            # the server has taken them
        return _owner_gets_in(port, seconds, request, ok)
    finally:
        for sock in strangers:
            sock.close()


# a stack with findings that 3c176b9 runs too: it calls /work/main/build's aioquic@1.7.2 stale since
# that build was redone for a later adapter (then exit 2 before the attempt's class is reached)
LAST_SEND = "oracle:idle=last-send"
FAULTY = {"CCDIFF_HOME": "{d}/home", "CCDIFF_BUILD_DIR": "{d}/home/build"}
HEADER = TRACE.read_text().splitlines()[0]
CUT_SQLOG = ('\x1e{"qlog_version": "0.3"}\n\x1e{"time": 0, "name": "transport:packet_sent", "data": {\n'
             '\x1e{"time": 1, "name": "transport:packet_sent", "data": {}}\n')
SHARD = ["conform", "--stack", "oracle", "--stack", "oracle:idle=last-send", "--scenario", "{d}/s.toml",
         "--seeds", "1", "--no-report"]


TINY = {"CCDIFF_HOME": "{d}/home", "CCDIFF_BUILD_DIR": "{d}/home/build"}


def _tiny_home(folder: Path, sha256: str | None = None) -> None:
    """tests/test_build.py's stack `tiny` in folder/home: its release one README (pinned by
    sha256, or by a wrong one), its adapter one C file; and folder/enclosing, one git
    repository holding two source trees that differ in one file."""
    import io
    import tarfile
    stack = folder / "home" / "implementations" / "tiny"
    stack.mkdir(parents=True)
    (stack.parent / "include").mkdir()
    (stack.parent / "include" / "ccdiff_adapter.h").write_text("/* ABI */\n")
    archive = folder / "tiny-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("tiny-1.0/README")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"tiny\n"))
    (stack / "stack.toml").write_text(
        f'name = "tiny"\nlanguage = "c"\ndefault_version = "1.0"\n[[versions]]\nversion = "1.0"\n'
        f'url = "{archive.as_uri()}"\nsha256 = "{sha256 or hashlib.sha256(archive.read_bytes()).hexdigest()}"\n')
    (stack / "build.sh").write_text('#!/bin/sh\ncc -shared -fPIC -o "$2/libccdiff_adapter.so" '
                                    '"$(dirname "$0")/adapter.c"\n')
    (stack / "build.sh").chmod(0o755)
    (stack / "adapter.c").write_text("int ccd_abi_version(void) { return 1; }\n")
    (stack / "profile.toml").write_text("")
    enclosing = folder / "enclosing"
    for n in range(2):
        (enclosing / f"tree-{n}" / "lib").mkdir(parents=True)
        (enclosing / f"tree-{n}" / "lib" / "cc.c").write_text(f"/* tree {n} */\n")
    git = ["git", "-C", str(enclosing), "-c", "user.email=t@t", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "two trees"]):
        subprocess.run(git + args, check=True, capture_output=True)


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
            ["replay", str(TRACE), "--stack", LAST_SEND, "--json", "{d}/f.json", "--report", "{d}/R"],
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
            ["replay", str(TRACE), "--stack", LAST_SEND, "--report", "{d}/R"], limit_file_bytes=20_000),
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
            ["replay", str(TRACE), "--stack", LAST_SEND, "--json", "{d}"], only_error=True),
    Attempt("output targets checked late", "--json in a missing folder",
            ["matrix", str(TRACE), "--stack", LAST_SEND, "--json", "{d}/no/such/f.json"], only_error=True),
    Attempt("a piped trace", "cat t | ccdiff replay /dev/stdin", ["replay", "/dev/stdin", "--stack", "oracle"],
            exits=(0,), stdin=str(TRACE)),
    # the classes the first catalogue left to tests/ (notes: bench/results/hostile-vs-3c176b9-2026-11-29.md)
    Attempt("two runs into one folder", "a conform into the --out another conform is writing",
            ["conform", "--stack", "oracle", "--scenario", "{d}/s.toml", "--seeds", "1", "--out", "{d}/out"],
            files={"s.toml": _scenario("s"), "long.toml": _long()}, wait_for="out",
            background=[["conform", "--stack", "oracle", "--scenario", "{d}/long.toml", "--seeds", "1", "--jobs", "1",
                         "--out", "{d}/out"]]),
    Attempt("an adapter crash is the stack's finding", "replay: a stack segfaults mid-trace",
            ["replay", str(TRACE), "--stack", "oracle:idle=last-send", "--stack", "faulty:fault=crash",
             "--json", "{d}/f.json"], exits=(1,), before=[_faulty_home], env=FAULTY, made=("f.json",)),
    Attempt("an adapter crash is the stack's finding", "replay --isolate: a stack segfaults while opening",
            ["replay", str(TRACE), "--isolate", "--stack", "faulty:fault=opencrash", "--stack", "oracle:idle=last-send",
             "--json", "{d}/f.json"], exits=(1,), before=[_faulty_home], env=FAULTY, made=("f.json",)),
    Attempt("an adapter crash is the stack's finding", "sim: a stack segfaults", ["sim", "{d}/s.toml", "--stack",
            "faulty:fault=crash"], exits=(1,), files={"s.toml": _scenario("s")}, before=[_faulty_home], env=FAULTY),
    Attempt("a trace that means two things", "a key given twice in an event", ["validate", "{d}/t.jsonl"],
            files={"t.jsonl": HEADER + '\n{"t": 0, "ev": "sent", "pn": 0, "pn": 1, "bytes": 1200}\n'}),
    Attempt("a trace that means two things", "a key given twice in the header", ["validate", "{d}/t.jsonl"],
            files={"t.jsonl": '{"ccdiff_trace": 1, "ccdiff_trace": 2, "max_datagram_size": 1200}\n'}),
    Attempt("a trace that means two things", '"ccdiff_trace": 1.0', ["validate", "{d}/t.jsonl"],
            files={"t.jsonl": '{"ccdiff_trace": 1.0, "max_datagram_size": 1200}\n'}),
    Attempt("an unknown qlog version", 'import a qlog of version "9.9"', ["import", "{d}/q.qlog", "-o", "{d}/t.jsonl"],
            files={"q.qlog": QLOG.read_text().replace('"qlog_version": "0.3"', '"qlog_version": "9.9"')}),
    Attempt("errors at the wrong line", "a JSON-SEQ record cut short mid-file",
            ["import", "{d}/cut.sqlog", "-o", "{d}/t.jsonl"], files={"cut.sqlog": CUT_SQLOG}, says=("cut.sqlog:2:",)),
    Attempt("errors at the wrong line", "merge: the second shard's record is bad",
            ["merge", "{d}/s1", "{d}/s2", "--out", "{d}/m"], files={"s.toml": _scenario("s")},
            before=[SHARD + ["--shard", "1/2", "--out", "{d}/s1"], SHARD + ["--shard", "2/2", "--out", "{d}/s2"],
                    _shard_without_status], says=("{d}/s2/shard.json",), never_says=("{d}/s1/",)),
    Attempt("file modes", "replay --json --report under umask 027",
            ["replay", str(TRACE), "--stack", LAST_SEND, "--json", "{d}/f.json", "--report", "{d}/R"],
            exits=(1,), umask=0o027, made=("f.json", "R/summary.json")),
    Attempt("file modes", "import -o under umask 027", ["import", str(QLOG), "-o", "{d}/t.jsonl"], exits=(0,),
            umask=0o027, made=("t.jsonl",)),
    Attempt("control characters", "junit.xml of a trace named with ESC and BEL",
            ["matrix", "{d}/x\x1b]0;owned\x07.jsonl", "--stack", LAST_SEND, "--report", "{d}/R"], exits=(1,),
            files={"x\x1b]0;owned\x07.jsonl": TRACE.read_text()}, xml=("R/junit.xml",)),
    Attempt("harness errors blamed on the stack", "a scenario name too long for a folder (ENAMETOOLONG)",
            ["conform", "--stack", "oracle:idle=last-send", "--scenario", "{d}/s.toml", "--seeds", "1", "--out",
             "{d}/out"], files={"s.toml": _scenario("x" * 300)}, never_says=("worker died",)),
    Attempt("options that do nothing", "a stack option given twice",
            ["replay", str(TRACE), "--stack", "oracle:idle=last-send,idle=none"]),
    Attempt("scenario values", "max_datagram_size = 10 M", ["sim", "{d}/s.toml"],
            files={"s.toml": _scenario("s", **{"max_datagram_size = 1350": "max_datagram_size = 10_000_000",
                                               "queue_bytes = 250_000": "queue_bytes = 100_000_000"})}),
    Attempt("scenario values", "a negative reordering delay", ["sim", "{d}/s.toml"],
            files={"s.toml": _scenario("s", **{"base_rtt_us = 10_000": "base_rtt_us = 10_000\nreorder_rate = 0.1\n"
                                                                       "reorder_delay_us = -1000"})}),
    Attempt("orphaned workers", "SIGKILL of conform while its two workers run",
            ["conform", "--stack", "oracle", "--scenario", "{d}/long.toml", "--seeds", "2", "--jobs", "2",
             "--out", "{d}/out"], exits=(-9,), files={"long.toml": _long()}, send_signal=(signal.SIGKILL, "parent", 2),
            no_orphans=True),
    Attempt("failed builds leave folders", "a build whose archive is not the pinned one", ["build", "tiny"],
            before=[lambda d: _tiny_home(d, sha256="0" * 64)], env=TINY, absent=("home/build/tiny/[!.]*",)),
    Attempt("failed builds leave folders", "a build from a --source that is not a folder",
            ["build", "tiny", "--source", "{d}/no-such-folder"], before=[_tiny_home], env=TINY,
            absent=("home/build/tiny/[!.]*",)),
    Attempt("--source builds named by their tree", "two trees of one git repository, built one after the other",
            ["build", "tiny", "--source", "{d}/enclosing/tree-1"], exits=(0,), env=TINY,
            before=[_tiny_home, ["build", "tiny", "--source", "{d}/enclosing/tree-0"]],
            keep=("home/build/tiny/*/build-info.json",)),
    # the serve classes the tests covered alone (notes: bench/results/hostile-vs-3c176b9-2026-11-29.md)
    Attempt("a stranger's line is read before the token", "serve: one 47 MiB line without the token",
            SERVE_ARGV, exits=(-9,), env=SERVE, client=_stranger_sends_a_large_line, rss_bound_mib=128),
    Attempt("idle strangers lock out the owner", "serve: 512 idle connections, then a client with the token",
            SERVE_ARGV, exits=(-9,), env=SERVE, seconds=60,
            client=lambda port: _idle_strangers(port, 512, "127.0.0.2", HELLO, _is_ok, 15)),
    Attempt("idle strangers lock out the owner", "serve-reports: 1100 idle connections, then a GET (1024 files)",
            ["serve-reports", "{d}/reports", "--port", "0"], exits=(-9,), limit_files=1024,
            env={"CCDIFF_REPORTS_IDLE_TIMEOUT": "5"}, files={"reports/index.html": "<h1>reports</h1>"},
            client=lambda port: _idle_strangers(port, 1100, "127.0.0.2", b"GET / HTTP/1.0\r\n\r\n",
                                                lambda r: r.startswith(b"HTTP/1.0 200"), 15)),
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


def _env_for(code, extra: dict, folder: Path) -> dict:
    return dict(_env(code), **{k: v.replace("{d}", str(folder)) for k, v in extra.items()})


def _start(argv, folder: Path, code=None, env=None) -> subprocess.Popen:
    """A ccdiff process running beside the attempt (its own session; killed with its group)."""
    return subprocess.Popen([sys.executable, "-m", "ccdiff", *[a.replace("{d}", str(folder)) for a in argv]],
                            cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=_env_for(code, env or {}, folder), start_new_session=True)


def _group(pgid: int, but: int = 0) -> list:
    """Live (not zombie) processes of process group pgid, but `but`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z" and int(stat.parent.name) != but:
            found.append(int(stat.parent.name))
    return found


def _well_formed(path: Path) -> bool:
    import xml.etree.ElementTree as ET
    try:
        ET.parse(path)
    except (OSError, ET.ParseError):
        return False
    return True


def _ccdiff(argv, folder: Path, stdin=None, limit=0, close_stdout=False, code=None, seconds=DEADLINE_S,
            env=None, umask=None, send=()):
    """Run one ccdiff process (from `code`'s checkout when given); returns (exit code, output
    text, peak RSS in kB, what killed it: "" or "deadline"/"memory guard", how many processes
    of its group were still alive 5 s after it ended)."""
    argv = [a.replace("{d}", str(folder)) for a in argv]

    def preexec():
        if limit:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        if umask is not None:
            os.umask(umask)
    feeder = subprocess.Popen(["cat", stdin], stdout=subprocess.PIPE) if stdin else None   # a pipe, not a file
    stdin_file = feeder.stdout if feeder else subprocess.DEVNULL
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "ccdiff", *argv], cwd=folder, stdin=stdin_file,
                            stdout=subprocess.PIPE if close_stdout else out, stderr=out, preexec_fn=preexec,
                            env=_env_for(code, env or {}, folder), start_new_session=True)
    if feeder:
        feeder.stdout.close()
    if close_stdout:
        proc.stdout.close()
    started = time.monotonic()
    deadline, killed, sent = started + seconds, "", not send
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if not sent and (len(_group(proc.pid, but=proc.pid)) >= send[2] or time.monotonic() > started + 60):
            time.sleep(1)                             # the workers are under way
            (os.killpg if send[1] == "group" else os.kill)(proc.pid, send[0])   # Ctrl-C: the whole group
            sent = True
        if not killed:
            killed = ("deadline" if time.monotonic() > deadline else
                      "memory guard" if _rss_mib(proc.pid) > GUARD_MIB else "")
            if killed:
                os.killpg(proc.pid, signal.SIGKILL)   # its workers too (a new session: its own group)
        time.sleep(0.02)
    left = _group(proc.pid)
    until = time.monotonic() + 5
    while left and time.monotonic() < until:          # a worker's death may take a moment
        time.sleep(0.1)
        left = _group(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)           # workers it left behind
    proc.returncode = os.waitstatus_to_exitcode(status)
    if feeder:
        feeder.wait()
    out.seek(0)
    return proc.returncode, out.read().decode(errors="replace"), usage.ru_maxrss, killed, len(left)


def _hwm_kb(pid: int) -> int:
    """A process's peak resident size so far (VmHWM), 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _serve(attempt: Attempt, folder: Path, code=None):
    """A server attempt: start it (its own session), wait until it listens, run the client,
    sampling the peak RSS of every process of its group; it must still be serving at the end
    (then killed: exit -9).  Returns (exit code, its stderr, peak kB of its tree, problems)."""
    argv = [a.replace("{d}", str(folder)) for a in attempt.argv]

    def preexec():
        if attempt.limit_files:
            resource.setrlimit(resource.RLIMIT_NOFILE, (attempt.limit_files, attempt.limit_files))
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "ccdiff", *argv], cwd=folder, stdin=subprocess.DEVNULL,
                            stdout=out, stderr=out, preexec_fn=preexec, start_new_session=True,
                            env=_env_for(code, attempt.env, folder))
    peak, stop, problems = [0], threading.Event(), []

    def sample():
        while not stop.wait(0.2):
            for pid in [proc.pid, *_group(proc.pid, but=proc.pid)]:
                peak[0] = max(peak[0], _hwm_kb(pid))
    try:
        deadline, port = time.monotonic() + 60, None
        while port is None and proc.poll() is None and time.monotonic() < deadline:
            found = re.search(rb"127\.0\.0\.1:(\d+)", os.pread(out.fileno(), 1 << 16, 0))
            port = int(found.group(1)) if found else time.sleep(0.05)
        if port is None:
            problems.append("never listened")
        else:
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                problems += attempt.client(port)
            except Exception as exc:              # noqa: BLE001 -- the client's own failure is the row's
                problems.append(f"client: {type(exc).__name__}: {exc}")
            stop.set()
            sampler.join()
    finally:
        stop.set()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)   # children of a server that died first
    out.seek(0)
    return proc.returncode, out.read().decode(errors="replace"), peak[0], problems


def run_attempt(attempt: Attempt, folder: Path, code: Path | None = None) -> dict:
    for rel, text in attempt.files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    for argv in attempt.before:
        if callable(argv):
            argv(folder)
        elif argv[0] == "!write":
            (folder / argv[1]).write_text(argv[2])
        else:
            _ccdiff(argv, folder, code=code, env=attempt.env)
    kept = {p.relative_to(folder).as_posix(): _sha(p) for rel in attempt.keep
            for p in ((sorted(folder.glob(rel)) if any(c in rel for c in "*?[") else []) or [folder / rel])}
    present = {p for p in folder.rglob("*") if p.is_file()}
    beside = [_start(argv, folder, code, attempt.env) for argv in attempt.background]
    try:
        deadline = time.monotonic() + 60
        while attempt.wait_for and not (folder / attempt.wait_for).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        started, problems = time.monotonic(), []
        if attempt.client:
            (exit_code, text, rss, problems), killed, orphans = _serve(attempt, folder, code), "", 0
        else:
            exit_code, text, rss, killed, orphans = _ccdiff(
                attempt.argv, folder, attempt.stdin, attempt.limit_file_bytes, attempt.close_stdout, code,
                attempt.seconds, env=attempt.env, umask=attempt.umask, send=attempt.send_signal)
    finally:
        for proc in beside:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lost = [rel for rel, digest in kept.items() if digest is None or _sha(folder / rel) != digest]
    lost += [rel for rel in attempt.made if not (folder / rel).is_file()]
    sub = lambda words: [w.replace("{d}", str(folder)) for w in words]   # noqa: E731
    modes = []
    if attempt.umask is not None:
        want = (0o666 & ~attempt.umask, 0o777 & ~attempt.umask)     # a file, an executable
        modes = sorted(f"{p.relative_to(folder)} {p.stat().st_mode & 0o777:04o}" for p in folder.rglob("*")
                       if p.is_file() and p not in present and p.stat().st_mode & 0o777 not in want)
    return {"class": attempt.klass, "attempt": attempt.what, "exit": exit_code, "expected": list(attempt.exits),
            "unsaid": [w for w in sub(attempt.says) if w not in text],
            "said": [w for w in sub(attempt.never_says) if w in text],
            "modes": modes, "ill_formed": [rel for rel in attempt.xml if not _well_formed(folder / rel)],
            "orphans": orphans if attempt.no_orphans else 0,
            "left": sorted(p.relative_to(folder).as_posix() for rel in attempt.absent for p in folder.glob(rel)),
            "wrong_exit": exit_code not in attempt.exits, "killed": killed,
            "internal_line": (re.findall(r"\b\w+\.py:\d+", text) or [""])[0],
            "parser_refused": "unrecognized arguments" in text and not attempt.parser_refusal_ok,
            "worked_first": attempt.only_error and len(text.strip().splitlines()) > 1,
            "seconds": round(time.monotonic() - started, 1), "traceback": "Traceback" in text, "data_lost": lost,
            "raw_control": any(c in text for c in "\x1b\x07"),
            "peak_rss_kb": rss, "last_line": (text.strip().splitlines() or [""])[-1][:200],
            "problems": problems, "rss_bound_mib": attempt.rss_bound_mib}


def failures(row: dict) -> list:
    """Why an attempt's row fails (empty: it held)."""
    return [why for why, bad in [(f"exit {row['exit']}, expected {'/'.join(map(str, row['expected']))}"
                                  + (f" (killed: {row['killed']})" if row["killed"] else ""), row["wrong_exit"]),
                                 ("traceback", row["traceback"]),
                                 (f"error names {row['internal_line']}", row["internal_line"]),
                                 ("the option parser refused it (never ran)", row["parser_refused"]),
                                 ("did the work before refusing", row["worked_first"]),
                                 (f"data lost: {', '.join(row['data_lost'])}", row["data_lost"]),
                                 ("raw control characters", row["raw_control"]),
                                 (f"does not say {row.get('unsaid')!r}", row.get("unsaid")),
                                 (f"says {row.get('said')!r}", row.get("said")),
                                 (f"not the umask's mode: {', '.join(row.get('modes') or [])}", row.get("modes")),
                                 (f"not well-formed XML: {', '.join(row.get('ill_formed') or [])}",
                                  row.get("ill_formed")),
                                 (f"{row.get('orphans')} of its processes outlived it", row.get("orphans")),
                                 (f"left behind: {', '.join(row.get('left') or [])}", row.get("left")),
                                 ("; ".join(row.get("problems") or []), row.get("problems")),
                                 (f"peak RSS {row['peak_rss_kb'] / 1024:.0f} MiB > {row.get('rss_bound_mib')} MiB",
                                  row.get("rss_bound_mib") and row["peak_rss_kb"] > row["rss_bound_mib"] << 10)]
            if bad]


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

"""Every subcommand and every option of `ccdiff`, with hostile values.

The parser is introspected, so an option added tomorrow is walked too.  Each case runs
in-process (ccdiff.cli.main) from its own scratch folder, under a time limit, and must:
exit 0, 1 or 2; exit 2 where the value is an error (negative, nan, inf, huge numbers, a
missing or unreadable input, an output that cannot be written, a choice that does not
exist); print no traceback; write nothing outside its scratch folder (checked on the
worktree, the device nodes used as outputs and a sentinel beside the scratch folders).
Known examples from issue 22: `conform --out /etc/passwd`, `replay --report /proc/x`,
`sim --trace /nonexistent/x.jsonl`, `--baseline` that is `[]` or binary, `--isolate
--timeout -1|nan|inf`, `serve --port 70000`, `conform --seeds 0`.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import signal
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from ccdiff.cli import EXIT_ERROR, build_parser, main, numeric_bounds

ROOT = Path(__file__).resolve().parent.parent
TRACE = str(ROOT / "examples" / "death-spiral.jsonl")
QLOG = str(ROOT / "tests" / "fixtures" / "qlog" / "aioquic-cubic-idle.qlog")   # the smallest real qlog
CASE_SECONDS = 8      # a case still running then counts as "no error" (a case takes ~1 s)
SERVER_SECONDS = 2    # a server that started serves until then

# Path options, by (subcommand, dest).  Every option that takes a value and is not a
# number or a choice must be listed in one of the three tables: a new path option then
# fails test_every_value_option_is_classified until someone says what it is.
INPUTS = {("check-harness", "traces"), ("replay", "traces"), ("matrix", "traces"), ("report", "input"), ("validate", "traces"),
          ("build", "source"), ("decode", "input"), ("serve-reports", "folder"), ("conform", "baseline"),
          ("conform", "scenarios"), ("sim", "scenario"), ("fuzz", "seeds"), ("minimize", "trace"),
          ("bisect", "trace"), ("bisect", "scenario"), ("coverage", "corpus"), ("merge", "shards"),
          ("merge", "baseline"), ("import", "qlog"), ("fidelity", "qlog"),
          ("fuzz-triage", "inputs"), ("serve", "token_file"), ("encode", "trace"), ("confirm", "start"),
          ("confirm", "scenario")}
OUTPUTS = {("check-harness", "json"), ("replay", "json"), ("replay", "report"), ("matrix", "json"), ("matrix", "report"),
           ("report", "out"), ("conform", "out"), ("sim", "trace"), ("sim", "qlog"), ("fuzz", "findings"),
           ("minimize", "output"), ("bisect", "json"), ("coverage", "out"), ("coverage", "json"), ("merge", "out"),
           ("import", "output"), ("import", "json"), ("import", "scenario"), ("fidelity", "out"), ("fidelity", "json"),
           ("fuzz-triage", "findings"), ("encode", "output")}
NOT_PATHS = {("check-harness", "stack"), ("check-harness", "relations"), ("replay", "stack"), ("matrix", "stack"), ("build", "specs"), ("serve", "stack"),
             ("serve", "host"), ("serve-reports", "host"), ("conform", "stacks"),
             ("conform", "shard"), ("conform", "against"), ("matrix", "against"), ("sim", "stack"),
             ("sim", "set"), ("fuzz", "stack"), ("fuzz", "against"), ("fuzz", "time"), ("fuzz", "worker"), ("fuzz", "invariants"),
             ("minimize", "stack"), ("minimize", "invariant"), ("fidelity", "stack"), ("versions", "stack"), ("coverage", "stack"),
             ("bisect", "stack"), ("bisect", "invariant"), ("bisect", "good"), ("bisect", "bad"),
             # choices (walked with "nosuch-choice" like every choice), listed so a reader finds them
             ("replay", "qlog_schema"), ("matrix", "qlog_schema"), ("report", "qlog_schema"),
             ("conform", "qlog_schema"), ("fuzz", "qlog_schema"),
             ("fuzz-triage", "stack"), ("fuzz-triage", "qlog_schema"),
             ("confirm", "stack"), ("confirm", "invariant"), ("confirm", "set")}
ANY_BYTES = {("decode", "input"),   # every byte string decodes (docs/fuzz-encoding.md): only unreadable is an error
             ("serve", "token_file")}   # any visible ASCII line is a secret (a JSON list too)
ZERO_IS_ERROR = {("conform", "seeds"), ("coverage", "seeds")}   # `conform --seeds 0` ran nothing and passed

TEXT_VALUES = ["", "..", "\udcff", "$\\frac{a$", "x" * 5000, "-"]
NUMBER_ERRORS = ["-1", "nan", "inf", "-inf", "1e400", "99999999999999999999999"]


class CaseTimeout(BaseException):
    """Raised by SIGALRM; a BaseException so that main()'s top-level rule does not catch it."""


def subcommands(parser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def value_actions(sub):
    """The options and positionals of a subcommand that take a value."""
    return [a for a in sub._actions
            if not isinstance(a, (argparse._HelpAction, argparse._StoreConstAction, argparse._VersionAction))
            and a.nargs != 0]


def flag_actions(sub):
    return [a for a in sub._actions if isinstance(a, argparse._StoreConstAction)]


class Scratch:
    """Files the cases use: a findings JSON, a fuzz input, hostile inputs and outputs."""

    def __init__(self, root: Path):
        self.root = root
        self.findings = root / "findings.json"
        self.bin = root / "input.bin"
        self.bin.write_bytes(bytes([0, 3, 2, 7] * 8))
        self.loop = root / "loop"
        os.symlink(root / "loop", self.loop)
        self.fifo = root / "fifo"
        os.mkfifo(self.fifo)
        self.plain = root / "plain-file"
        self.plain.write_text("not a folder\n")
        self.binary = root / "binary"
        self.binary.write_bytes(bytes(range(256)) * 4)
        self.empty_list = root / "list.json"
        self.empty_list.write_text("[]\n")
        self.full = root / "full"          # our own /dev/full: a regression that renames over
        with contextlib.suppress(OSError):  # a device node replaces this one, not the system's
            os.mknod(self.full, stat.S_IFCHR | 0o666, os.makedev(1, 7))
        self.sentinel = root.parent / "sentinel"
        self.sentinel.write_text("untouched\n")
        # `ccdiff merge`'s inputs: the two shards of a one-seed run (2 cases, about a second)
        self.shards = [root / "shard-1", root / "shard-2"]
        for k, folder in enumerate(self.shards, 1):
            assert main(["conform", "--scenarios", "idle-restart", "--seeds", "1", "--stacks", "oracle",
                         "--jobs", "1", "--no-report", "--shard", f"{k}/2", "--out", str(folder)]) == 0

    def unreadable_inputs(self):
        return [str(self.root / "nonexistent" / "x"), "/dev/zero", str(self.loop), "/proc/self/mem"]

    def malformed_inputs(self):
        return [str(self.fifo), str(self.binary), str(self.empty_list)]

    def bad_outputs(self):
        full = [str(self.full)] if self.full_is_device() else []
        return ["/proc/x", "/proc/x/y", str(self.plain / "sub"), str(self.loop / "x")] + full

    def full_is_device(self) -> bool:
        return self.full.exists() and stat.S_ISCHR(os.stat(self.full).st_mode)


def base_args(command: str, scratch: Scratch, out: Path) -> dict:
    """A cheap valid invocation of each subcommand, as {dest or positional: argv items}."""
    bases = {
        "replay": {"trace": [TRACE], "stack": ["--stack", "oracle"]},
        "matrix": {"traces": [TRACE], "stack": ["--stack", "oracle"]},
        "report": {"input": [str(scratch.findings)], "out": ["--out", str(out / "rep")]},
        "validate": {"traces": [TRACE]},
        "stacks": {},
        "build": {"specs": ["nosuch-stack"]},        # a real build takes minutes: parse-level only
        "coverage": {"stack": ["nosuch-stack"]},     # a coverage build and run: parse-level only
        "decode": {"input": [str(scratch.bin)]},
        "encode": {"trace": [TRACE], "output": ["-o", str(out / "seed.bin")]},
        "serve": {"port": ["--port", "0"]},
        "serve-reports": {"folder": [str(out)], "port": ["--port", "0"]},
        "conform": {"scenarios": ["--scenarios", "idle-restart"], "seeds": ["--seeds", "1"],
                    "stacks": ["--stacks", "oracle"], "jobs": ["--jobs", "1"], "report": ["--no-report"],
                    "out": ["--out", str(out / "conform")]},
        "merge": {"shards": [str(folder) for folder in scratch.shards], "out": ["--out", str(out / "merged")]},
        "sim": {"scenario": ["idle-restart"], "stack": ["--stack", "oracle"]},
        "scenarios": {},
        "fuzz": {"stack": ["--stack", "nosuch-stack"], "engine": ["--engine", "hypothesis"],
                 "time": ["--time", "1s"], "findings": ["--findings", str(out / "findings")]},
        # a folder of inputs checked, then parse-level only: a real triage builds the stack's harness
        "fuzz-triage": {"inputs": [str(scratch.root)], "stack": ["--stack", "nosuch-stack"],
                        "findings": ["--findings", str(out / "findings")]},
        "check-harness": {"stack": ["--stack", "oracle"], "traces": [TRACE], "relations": ["--relations", "pn"]},
        # the oracle varied as quiche 0.26.0 measured idle: the death spiral fires in ~0.2 s
        "versions": {"stack": ["quiche"], "offline": ["--offline"]},   # no registry read
        # a real bisect builds releases (minutes): parse-level only, like build
        "bisect": {"trace": [TRACE], "stack": ["--stack", "nosuch-stack"],
                   "invariant": ["--invariant", "future-recovery-start"], "all": ["--all"]},
        "import": {"qlog": [QLOG], "output": ["-o", str(out / "t.jsonl")]},
        # connection runs take seconds each: its inputs (--from, --scenario, --set) are read and
        # checked, then the stack is refused
        "confirm": {"stack": ["--stack", "nosuch-stack"], "invariant": ["--invariant", "idle-inflation"]},
        "fidelity": {"qlog": [QLOG], "stack": ["--stack", "oracle"]},
        "minimize": {"trace": [TRACE], "stack": ["--stack", "oracle:idle=last-send"],
                     "invariant": ["--invariant", "future-recovery-start"], "output": ["-o", str(out / "min.jsonl")]},
    }
    assert command in bases, f"add a cheap valid invocation of `ccdiff {command}` to base_args"
    return bases[command]


def argv_for(command: str, action, value, base: dict) -> list:
    args = dict(base)
    if action is None:
        pass
    elif not action.option_strings:
        args[action.dest] = [value]
    elif value is None:
        args[action.dest] = [action.option_strings[-1]]
    else:
        args[action.dest] = [f"{action.option_strings[-1]}={value}"]
    positional = [v for k, v in args.items() if v and not v[0].startswith("-")]
    options = [v for k, v in args.items() if v and v[0].startswith("-")]
    return [command] + [x for v in options for x in v] + [x for v in positional for x in v]


def cases(parser, scratch: Scratch):
    """(subcommand, option, value, expect_error) for every option and hostile value."""
    for command, sub in subcommands(parser).items():
        yield command, None, None, False
        for action in flag_actions(sub):
            yield command, action, None, False
        for action in value_actions(sub):
            key = (command, action.dest)
            if action.type in (int, float):
                for value in NUMBER_ERRORS:
                    yield command, action, value, True
                yield command, action, "0", (command, action.dest) in ZERO_IS_ERROR
                continue
            if action.choices:
                yield command, action, "nosuch-choice", True
                yield command, action, "\udcff", True
                continue
            values = TEXT_VALUES if action.dest != "host" else [v for v in TEXT_VALUES if v]  # "": every interface
            for value in values:
                yield command, action, value, False
            if key in INPUTS:
                for value in scratch.unreadable_inputs():
                    yield command, action, value, True
                for value in scratch.malformed_inputs():
                    yield command, action, value, key not in ANY_BYTES
            if key in OUTPUTS:
                for value in scratch.bad_outputs():
                    yield command, action, value, True


@contextlib.contextmanager
def fifo_writer(path: Path):
    """Feed the FIFO garbage whenever a case opens it for reading, so no case blocks on it."""
    stop = threading.Event()

    def feed():
        while not stop.is_set():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:          # ENXIO: nobody reads it yet
                stop.wait(0.02)
                continue
            with contextlib.suppress(OSError):
                os.write(fd, b"\x00garbage{\n")
            os.close(fd)
    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def run_case(argv: list, cwd: Path, seconds: int = CASE_SECONDS):
    """(exit code or None when the time limit ended a running case, stderr)."""
    err = io.StringIO()
    old_cwd, old_handlers = os.getcwd(), {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def expire(signum, frame):
        raise CaseTimeout
    previous_alarm = signal.signal(signal.SIGALRM, expire)
    os.chdir(cwd)
    signal.alarm(seconds)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exc:        # argparse: usage errors exit 2
        code = exc.code
    except CaseTimeout:
        code = None
    except Exception as exc:         # what `python -m ccdiff` would print as a traceback
        code = None
        err.write(f"Traceback (most recent call last): uncaught {type(exc).__name__}: {str(exc)[:200]}\n")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous_alarm)
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)
        os.chdir(old_cwd)
    return code, err.getvalue()


def worktree_state() -> str:
    return subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--ignored=no"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def test_every_numeric_default_is_within_its_bounds():
    """A bound that refuses its own default breaks the command for everyone (check-harness
    --seeds defaults to 0, conform --seeds must be at least 1)."""
    for command, sub in subcommands(build_parser()).items():
        for action in value_actions(sub):
            if action.type in (int, float) and action.default is not None:
                low, high = numeric_bounds(command, action.dest)
                assert low <= action.default <= high, (command, action.dest, action.default)


def test_every_value_option_is_classified():
    for command, sub in subcommands(build_parser()).items():
        for action in value_actions(sub):
            if action.type in (int, float) or action.choices:
                continue
            key = (command, action.dest)
            assert sum(key in table for table in (INPUTS, OUTPUTS, NOT_PATHS)) == 1, \
                f"classify {key} as an input path, an output path or not a path in this test"


@contextlib.contextmanager
def address_space_cap(extra_bytes: int):
    """A regression that reads /dev/zero whole meets MemoryError (a failing case) instead of
    the machine's OOM killer."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + extra_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_every_option_with_hostile_values(tmp_path, capsys):
    scratch_root = tmp_path / "scratch"
    scratch_root.mkdir()
    scratch = Scratch(scratch_root)
    assert main(["replay", TRACE, "--stack", "oracle:idle=last-send", "--json", str(scratch.findings)]) == 1
    parser = build_parser()
    before_tree, full_device = worktree_state(), scratch.full_is_device()
    failures, counted = [], 0
    with fifo_writer(scratch.fifo), address_space_cap(3 << 30):
        for index, (command, action, value, expect_error) in enumerate(cases(parser, scratch)):
            out = tmp_path / f"case-{index}"
            (out / "cwd").mkdir(parents=True)     # relative values such as '..' stay inside `out`
            argv = argv_for(command, action, value, base_args(command, scratch, out))
            code, err = run_case(argv, out / "cwd", SERVER_SECONDS if command.startswith("serve") else CASE_SECONDS)
            counted += 1
            name = action.option_strings[-1] if action is not None and action.option_strings else \
                getattr(action, "dest", "-")
            what = f"{command} {name} {value!r}: exit {code}"
            if "Traceback" in err:
                failures.append(f"{what}: traceback\n{err[-1500:]}")
            elif code not in (0, 1, 2, None):
                failures.append(f"{what}: exit code outside 0/1/2\n{err[-500:]}")
            elif expect_error and code != EXIT_ERROR:
                failures.append(f"{what}: expected exit 2\n{err[-500:]}")
            elif code == EXIT_ERROR and "error:" not in (err.strip().splitlines() or [""])[-1]:
                failures.append(f"{what}: an error must end with one line saying what and where\n{err[-500:]}")
    with capsys.disabled():
        print(f"\nhostile options: {counted} (subcommand, option, value) cases, {len(failures)} failing")
    assert not failures, "\n".join(failures[:30]) + f"\n({len(failures)} failing of {counted})"
    assert worktree_state() == before_tree, "a case wrote into the worktree"
    assert scratch.full_is_device() == full_device, "a case replaced a device node with a file"
    assert scratch.sentinel.read_text() == "untouched\n"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(("case-", "scratch")))\
        == ["sentinel"], "a case wrote beside its folder"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_full_disk_is_exit_2(tmp_path):
    """A 64 KiB tmpfs as the output: conform --out, replay --report, sim --trace exit 2."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        (disk / "filler").write_bytes(b"\0" * (60 << 10))
        commands = [
            ["conform", "--scenarios", "idle-restart", "--seeds", "1", "--stacks", "oracle", "--jobs", "1",
             "--traces", "all", "--out", str(disk / "conform")],
            ["replay", TRACE, "--stack", "oracle:idle=last-send", "--report", str(disk / "report")],
            ["sim", "idle-restart", "--stack", "oracle", "--trace", str(disk / "trace.jsonl")],
        ]
        for argv in commands:
            code, err = run_case(argv, tmp_path)
            assert code == EXIT_ERROR, (argv, code, err[-800:])
            assert "Traceback" not in err and len(err.strip().splitlines()) >= 1
            assert "No space left on device" in err.strip().splitlines()[-1], err[-800:]
        # Nothing of the folders it refused to fill stays open in this process (a lock left
        # on the report folder kept the tmpfs busy: umount failed, pytest could not clean up).
        held = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                if os.path.exists(f"/proc/self/fd/{fd}") and str(disk) in os.readlink(f"/proc/self/fd/{fd}")]
        assert held == []
    finally:
        subprocess.run(["umount", str(disk)], check=False)

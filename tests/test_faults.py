"""Fault injection: a stack that crashes, hangs, refuses or returns garbage is a finding,
and the run goes on with the other stacks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .fault_adapters import install_faulty_stack

REPO = Path(__file__).resolve().parent.parent
TRACE = str(REPO / "examples" / "death-spiral.jsonl")   # runs to t = 350 ms
SCENARIO = str(REPO / "scenarios" / "death-spiral.toml")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    install_faulty_stack(home)
    return home


def ccdiff(home, *args, timeout=120):
    env = dict(os.environ, CCDIFF_HOME=str(home), CCDIFF_BUILD_DIR=str(home / "build"),
               PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=home)


def findings(home, *args):
    out = home / "out.json"
    proc = ccdiff(home, "replay", TRACE, "--json", str(out), *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(out.read_text())
    return proc, {(f["stack"], f["invariant"]): f for f in doc["findings"]}, doc


@pytest.mark.parametrize("fault,words", [("crash", "closed the connection (crashed?)"), ("hang", "no reply within 3 s")])
def test_isolated_crash_or_hang_is_a_finding_and_the_run_goes_on(home, fault, words):
    proc, found, doc = findings(home, "--isolate", "--timeout", "3", "--stack", "oracle",
                                "--stack", "oracle:idle=last-send", "--stack", f"faulty:fault={fault}")
    assert proc.returncode == 1
    error = found[(f"faulty:fault={fault}", "adapter-error")]
    assert words in error["detail"] and error["t_us"] >= 50_000
    # the stacks around it were not affected
    assert ("oracle:idle=last-send", "future-recovery-start") in found
    assert not [k for k in found if k[0] == "oracle"]
    run = next(s for s in doc["stacks"] if s["stack"] == f"faulty:fault={fault}")
    assert run["error"] and run["final"]["cwnd"] == 12000      # snapshots before the fault are kept


def test_refused_event_is_a_finding_without_isolation(home):
    proc, found, _ = findings(home, "--stack", "faulty:fault=refuse", "--stack", "oracle")
    assert proc.returncode == 1
    assert "refused the event on purpose" in found[("faulty:fault=refuse", "adapter-error")]["detail"]


def test_garbage_snapshot_is_numeric_error(home):
    proc, found, _ = findings(home, "--stack", "faulty:fault=garbage")
    assert proc.returncode == 1
    assert "cwnd=0" in found[("faulty:fault=garbage", "numeric-error")]["detail"]


def test_matrix_isolated_keeps_going_after_a_crash(home):
    out = home / "matrix.json"
    proc = ccdiff(home, "matrix", TRACE, TRACE, "--isolate", "--timeout", "3", "--json", str(out),
                  "--stack", "faulty:fault=crash", "--stack", "oracle")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    doc = json.loads(out.read_text())
    assert len(doc["errors"]) == 2          # one per trace: the run went on after the first crash
    assert {c["stack"] for c in doc["cells"]} == {"faulty:fault=crash"}


def test_fuzz_triage_never_replays_a_crashing_input_in_process(home, tmp_path):
    """An engine's crash file on which the stack's own code segfaults is stored as a native
    crash; replaying it in ccdiff's process would have killed the campaign (here: the
    child below), losing everything not yet triaged."""
    harness = tmp_path / "harness.sh"
    harness.write_text("#!/bin/sh\ncat > /dev/null\nkill -SEGV $$\n")
    harness.chmod(0o755)
    crash = tmp_path / "id:000000,sig:11"
    crash.write_bytes(bytes([0, 0x80, 1, 0xFF, 0, 0]))      # send, wait 255 ms, send: past at=0
    spec = "faulty:fault=crash,at=0"
    script = f"""
from pathlib import Path
from types import SimpleNamespace
from ccdiff.fuzzing.command import _triage_files
from ccdiff.fuzzing.triage import Triage
triage = Triage(Path({str(tmp_path / "findings")!r}), {spec!r}, {spec!r})
campaign = SimpleNamespace(exe=Path({str(harness)!r}), runner=Path({str(harness)!r}), direct_env={{}})
_triage_files(triage, [Path({str(crash)!r})], "afl", set(), campaign)
print(sorted(triage.stored))
"""
    env = dict(os.environ, CCDIFF_HOME=str(home), CCDIFF_BUILD_DIR=str(home / "build"), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['native-crash--signal-11']"


def test_fuzz_triage_survives_a_crash_its_harness_did_not_show(home, tmp_path):
    """msquic's case (issue #32/#35): the harness stops at the first violation and exits
    normally, but ccdiff's replay goes on and the stack dies in its native code (there:
    SIGFPE after cwnd = 0).  Replayed in ccdiff's process, that ended the campaign (exit
    136) with the later inputs untriaged and no report.  Now the crash is stored as
    native-crash--signal-11 with a minimized reproducer that still kills the stack, the next
    input is triaged, and the report (its replays isolated) is written."""
    harness = tmp_path / "harness.sh"
    harness.write_text("#!/bin/sh\ncat > /dev/null\nexit 0\n")       # the harness sees nothing wrong
    harness.chmod(0o755)
    crash = tmp_path / "id:000000,sig:06"
    crash.write_bytes(bytes([0, 0x80, 0, 0x80, 0, 0x80, 1, 0xFF, 0, 0x80, 0, 0x80]))  # 3 sends; 2 at 32 s
    calm = tmp_path / "id:000001,sig:06"
    calm.write_bytes(bytes([0, 0x80]))                               # one send at t = 0
    spec = "faulty:fault=crash,at=100000"
    script = f"""
from pathlib import Path
from types import SimpleNamespace
from ccdiff.fuzzing.command import _triage_files
from ccdiff.fuzzing.conclude import write_report as _report
from ccdiff.fuzzing.crash_guard import crash_signal
from ccdiff.fuzzing.triage import Triage
from ccdiff.encoding import decode
from ccdiff.replay import replay
from ccdiff.trace import load_trace
triage = Triage(Path({str(tmp_path / "findings")!r}), {spec!r}, {spec!r})
campaign = SimpleNamespace(exe=Path({str(harness)!r}), runner=Path({str(harness)!r}), direct_env={{}})
_triage_files(triage, [Path({str(crash)!r}), Path({str(calm)!r})], "afl", set(), campaign)
stored = triage.stored["native-crash--signal-11"]
small = load_trace(str(stored.folder / "reproducer.jsonl"))
print(len(decode(Path({str(crash)!r}).read_bytes()).events), len(small.events))
print(crash_signal(lambda: replay(small, [{spec!r}])))
print(sorted(triage.seen_inputs) == sorted([Path({str(crash)!r}).read_bytes(), Path({str(calm)!r}).read_bytes()]))
_report(triage)
print((triage.folder / "report" / "index.html").is_file())
"""
    env = dict(os.environ, CCDIFF_HOME=str(home), CCDIFF_BUILD_DIR=str(home / "build"), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sizes, signal_number, both, report = proc.stdout.strip().splitlines()
    found, kept = map(int, sizes.split())
    assert kept < found                   # minimized, each candidate replayed in a child
    assert signal_number == "11"          # and it still kills the stack
    assert both == "True" and report == "True"


def processes_of(home) -> list:
    """PIDs of live processes started for this home (their environment names it)."""
    marker = f"CCDIFF_HOME={home}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in environ and state != "Z":
            found.append(int(entry.name))
    return found


def test_a_hang_under_isolate_leaves_no_process_behind(home):
    import signal
    import time
    assert processes_of(home) == []
    proc, found, _ = findings(home, "--isolate", "--timeout", "2", "--stack", "faulty:fault=hang")
    assert ("faulty:fault=hang", "adapter-error") in found
    deadline = time.monotonic() + 10          # SIGKILL is asynchronous: let the kernel reap
    while processes_of(home) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = processes_of(home)
    for pid in left:                          # ours (by environment): do not leak them into the suite
        os.kill(pid, signal.SIGKILL)
    assert left == [], "ccdiff serve processes outlived replay --isolate"


def test_isolated_crash_after_the_first_prefetched_chunk_names_its_event(home, tmp_path):
    """Replay hands remote controllers the events a chunk (remote.BATCH) at a time, never
    the whole run: a crash in a later chunk is still localized to its event, by re-sending
    every earlier event of the run (re-read from the trace file)."""
    sys.path.insert(0, str(REPO / "bench"))
    from bench_memory import write_trace
    from ccdiff.trace import load_trace
    path = write_trace(tmp_path / "long.jsonl", 6000)
    events = load_trace(str(path)).events
    at = events[5000].t
    crash_index = next(i for i, ev in enumerate(events) if ev.t >= at)
    out = tmp_path / "out.json"
    proc = ccdiff(home, "replay", str(path), "--json", str(out), "--isolate", "--timeout", "10",
                  "--stack", f"faulty:fault=crash,at={at}")
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(out.read_text())
    (error,) = [f for f in doc["findings"] if f["invariant"] == "adapter-error"]
    assert error["event_index"] == crash_index > 4096, error
    run = doc["stacks"][0]
    assert run["error"].startswith(f"event {crash_index}: ") and run["final"]["cwnd"] == 12000


def test_a_crash_without_isolation_is_still_that_stacks_finding(home):
    """Issue #32: a segfault in a stack's native code ended replay and matrix with 139, no
    message and no --json.  The command now runs again with every stack isolated."""
    proc, found, doc = findings(home, "--stack", "oracle:idle=last-send", "--stack", "faulty:fault=crash")
    assert proc.returncode == 1, proc.stderr
    assert "a stack crashed ccdiff's process (SIGSEGV); running again with every stack isolated" in proc.stderr
    assert "closed the connection (crashed?)" in found[("faulty:fault=crash", "adapter-error")]["detail"]
    assert ("oracle:idle=last-send", "future-recovery-start") in found
    out = home / "m.json"
    proc = ccdiff(home, "matrix", TRACE, "--json", str(out), "--stack", "faulty:fault=crash", "--stack", "oracle")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert json.loads(out.read_text())["errors"]


def test_a_crash_while_opening_is_a_finding_and_the_other_stacks_stand(home):
    """Issue #32: with --isolate, an adapter that crashed at load gave exit 2 "closed the
    connection" and lost the other stacks' results."""
    for isolate in (["--isolate"], []):
        proc, found, doc = findings(home, *isolate, "--stack", "faulty:fault=opencrash",
                                    "--stack", "oracle:idle=last-send")
        assert proc.returncode == 1, proc.stderr
        error = found[("faulty:fault=opencrash", "adapter-error")]
        assert error["detail"].startswith("open: ") and "crashed?" in error["detail"]
        assert ("oracle:idle=last-send", "future-recovery-start") in found


def test_a_stack_that_grows_without_end_is_stopped_by_the_memory_bound(home):
    """Issue #32: a run's memory is bounded.  `sim` stops itself (exit 2, the bound named);
    in `conform` the case is killed from the parent and is that stack's error, and the run
    goes on (the oracle's case beside it passes)."""
    proc = ccdiff(home, "sim", SCENARIO, "--stack", "faulty:fault=leak,at=0", "--memory-limit", "300")
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "above the bound of 300 MiB (--memory-limit)" in last and "Traceback" not in proc.stderr, last
    out = home / "leak-conform"
    proc = ccdiff(home, "conform", "--scenarios", SCENARIO, "--seeds", "1", "--no-report",
                  "--stacks", "oracle,faulty:fault=leak,at=0", "--memory-limit", "300", "--out", str(out))
    assert "Traceback" not in proc.stderr, proc.stderr
    cases = {c["stack"]: c for c in json.loads((out / "summary.json").read_text())["cases"]}
    leaking = cases["faulty:fault=leak,at=0"]
    assert leaking["status"] == "error", leaking
    assert any("above the bound of 300 MiB" in r for r in leaking["reasons"]), leaking["reasons"]
    assert cases["oracle"]["status"] != "error"


@pytest.mark.parametrize("args", [
    ["sim", SCENARIO, "--stack", "faulty:fault=crash"],
    ["minimize", TRACE, "--stack", "faulty:fault=crash", "--invariant", "adapter-error"],
    ["check-harness", "--stack", "faulty:fault=crash", TRACE],
])
def test_a_crash_in_a_command_without_isolation_is_named_as_the_stacks_finding(home, args):
    """Issue #32: a segfault in a stack ended sim (and minimize, check-harness) with exit 139
    and no word; it is that stack's crash, a finding: exit 1 and one line naming it."""
    proc = ccdiff(home, *args)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-500:])
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"adapter-error: a stack's native code crashed the {args[0]} process (SIGSEGV): "
                           "faulty:fault=crash."), last

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
campaign = SimpleNamespace(exe=Path({str(harness)!r}), direct_env={{}})
_triage_files(triage, [Path({str(crash)!r})], "afl", set(), campaign)
print(sorted(triage.stored))
"""
    env = dict(os.environ, CCDIFF_HOME=str(home), CCDIFF_BUILD_DIR=str(home / "build"), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['native-crash--signal-11']"


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

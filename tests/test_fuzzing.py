"""`ccdiff fuzz`: harnesses, engines, triage.  Smoke campaigns of seconds; the
abort checks feed a stored reproducer, so nothing waits for luck."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ccdiff.encoding import decode
from ccdiff.errors import SetupError
from ccdiff.fuzzing.command import parse_duration
from ccdiff.fuzzing.harness import harness, harness_env
from ccdiff.fuzzing.triage import Triage, minimize, signatures
from ccdiff.replay import replay
from ccdiff.stacks import resolve
from ccdiff.trace import Lost, PersistentCongestion, dump_trace, load_trace

ROOT = Path(__file__).resolve().parent.parent
SEEDS = sorted((ROOT / "fuzz" / "seeds" / "no-loss").glob("*.bin"))
# send 1, lose it, send 1: the loss empties the pipe, the send is an "idle restart",
# and quiche shifts the recovery start it just set by the idle time into the future.
REPRODUCER = ROOT / "fuzz" / "reproducers" / "future-recovery-start.bin"
QUICHE = "quiche@0.26.0"


def run_harness(exe, data: bytes, spec: str):
    return subprocess.run([str(exe)], input=data, env=harness_env(resolve(spec)), capture_output=True,
                          timeout=60)


def test_durations():
    assert [parse_duration(t) for t in ("90", "90s", "10m", "1h", "1m30s", "2.5s")] == [90, 90, 600, 3600, 90, 2.5]
    for bad in ("", "abc", "10x", "m"):
        with pytest.raises(SetupError):
            parse_duration(bad)


def test_no_loss_seed_corpus_has_no_congestion_signal():
    """The must-show starts from nothing: no loss, no persistent congestion, no ECN-CE."""
    assert len(SEEDS) >= 3
    for seed in SEEDS:
        trace = decode(seed.read_bytes())
        assert trace.events, seed
        assert not [e for e in trace.events if isinstance(e, (Lost, PersistentCongestion))], seed
        assert not [e for e in trace.events if getattr(e, "ecn_ce", False)], seed


def test_dictionary_tokens_are_operations():
    tokens = [line.split("=", 1)[1] for line in (ROOT / "fuzz" / "ccdiff.dict").read_text().splitlines()
              if line and not line.startswith("#")]
    assert len(tokens) >= 10
    for token in tokens:
        data = token.strip('"').encode().decode("unicode_escape").encode("latin-1")
        assert len(data) == 2, token


@pytest.mark.parametrize("engine", ["plain", "afl", "honggfuzz"])
def test_quiche_harness_aborts_on_stored_reproducer(engine):
    exe = harness(resolve(QUICHE), engine)
    crash = run_harness(exe, REPRODUCER.read_bytes(), QUICHE)
    assert crash.returncode == -signal.SIGABRT, crash.stderr
    assert b"violation future-recovery-start at event 2 (t=10000 us)" in crash.stderr
    for seed in SEEDS:
        clean = run_harness(exe, seed.read_bytes(), QUICHE)
        assert clean.returncode == 0, (seed, clean.stderr)


def test_in_process_check_agrees_with_python_replay():
    """The reproducer's violation is the one the Python replay reports, at the same event."""
    trace = decode(REPRODUCER.read_bytes())
    found = [(f.invariant, f.event_index) for f in replay(trace, [QUICHE]).violations]
    assert ("future-recovery-start", 2) in found


@pytest.mark.parametrize("stack", ["ngtcp2", "picoquic"])
@pytest.mark.parametrize("engine,sanitize", [("plain", False), ("afl", False), ("honggfuzz", False),
                                             ("plain", True)])
def test_c_stack_harnesses_build_and_run(stack, engine, sanitize):
    """C adapters with each engine's instrumentation (and ASan+UBSan) run the vectors and seeds clean."""
    exe = harness(resolve(stack), engine, sanitize)
    inputs = SEEDS + sorted((ROOT / "fuzz" / "vectors").glob("*.bin")) + [REPRODUCER]
    for path in inputs:
        result = run_harness(exe, path.read_bytes(), stack)
        assert result.returncode == 0, (path.name, result.stderr[-2000:])


def test_harness_invariant_selection():
    """CCDIFF_FUZZ_NO_ABORT=1 reports instead of aborting (triage and tests use it);
    CCDIFF_FUZZ_INVARIANTS selects what aborts; an unknown name is a setup error."""
    exe = harness(resolve(QUICHE), "plain")
    env = dict(harness_env(resolve(QUICHE)), CCDIFF_FUZZ_NO_ABORT="1")
    result = subprocess.run([str(exe), str(REPRODUCER)], env=env, capture_output=True)
    assert result.returncode == 1 and b"future-recovery-start" in result.stderr
    env["CCDIFF_FUZZ_INVARIANTS"] = "cwnd-below-minimum"
    result = subprocess.run([str(exe), str(REPRODUCER)], env=env, capture_output=True)
    assert result.returncode == 0, result.stderr
    env["CCDIFF_FUZZ_INVARIANTS"] = "no-such-invariant"
    assert subprocess.run([str(exe), str(REPRODUCER)], env=env, capture_output=True).returncode == 2


def test_minimizer_shrinks_to_a_short_reproducer():
    data = (ROOT / "fuzz" / "vectors" / "random-512.bin").read_bytes()
    trace = decode(data)
    key = "future-recovery-start--sent-recovery"
    assert key in signatures(trace, QUICHE)
    small = minimize(trace, QUICHE, key)
    assert key in signatures(small, QUICHE)
    assert len(small.events) <= 4 < len(trace.events)
    assert dump_trace(minimize(trace, QUICHE, key)) == dump_trace(small)   # deterministic


def test_triage_stores_once_and_remembers(tmp_path):
    data = REPRODUCER.read_bytes()
    triage = Triage(tmp_path, QUICHE, QUICHE)
    new = triage.add_input(data, "afl", "crash-1")
    assert [s.signature.key for s in new] == ["future-recovery-start--sent-recovery"]
    assert triage.add_input(data + b"\x00", "honggfuzz", "crash-2") == []    # same finding, other engine
    info = json.loads((new[0].folder / "finding.json").read_text())
    assert info["found_by"] == ["afl", "honggfuzz"] and info["events"] == 3
    again = Triage(tmp_path, QUICHE, QUICHE)                                   # a later run
    assert set(again.stored) == {"future-recovery-start--sent-recovery"}
    reproducer = load_trace(str(new[0].folder / "reproducer.jsonl"))
    assert [f.invariant for f in replay(reproducer, [QUICHE]).violations] == ["future-recovery-start"]


def ccdiff(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("engine", ["afl", "honggfuzz", "hypothesis"])
def test_smoke_campaign_finds_future_recovery_start(engine, tmp_path):
    """Seconds-long campaign from the no-loss seeds: the engine runs, triage stores the
    death-spiral root cause with a replay command, and a second run resumes."""
    result = ccdiff("fuzz", "--stack", QUICHE, "--engine", engine, "--time", "4s", "--findings", str(tmp_path),
                    "--no-queue")
    assert result.returncode == 1, result.stderr[-3000:]
    folder = tmp_path / QUICHE / "future-recovery-start--sent-recovery"
    assert (folder / "reproducer.jsonl").exists(), result.stdout
    assert f"python3 -m ccdiff replay {folder / 'reproducer.jsonl'} --stack {QUICHE}" in result.stdout
    assert "execs/s" in result.stderr
    again = ccdiff("fuzz", "--stack", QUICHE, "--engine", engine, "--time", "2s", "--findings", str(tmp_path),
                   "--no-queue")
    assert again.returncode == 1, again.stderr[-3000:]
    assert "future-recovery-start (sent-recovery)" not in again.stdout   # stored once, not new


def test_fuzz_cli_errors_exit_2(tmp_path):
    for args in (["--stack", "oracle", "--engine", "afl", "--time", "1s"],
                 ["--stack", "nosuch", "--engine", "afl", "--time", "1s"],
                 ["--stack", QUICHE, "--engine", "afl", "--time", "soon"],
                 ["--stack", QUICHE, "--engine", "afl", "--time", "1s", "--seeds", str(tmp_path / "none")]):
        result = ccdiff("fuzz", *args, "--findings", str(tmp_path))
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr and result.stderr.startswith("error:"), result.stderr

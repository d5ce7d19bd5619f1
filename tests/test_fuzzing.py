"""`ccdiff fuzz`: harnesses, engines, triage.  Smoke campaigns of seconds; the
abort checks feed a stored reproducer, so nothing waits for luck."""
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccdiff.encoding import decode
from ccdiff.errors import SetupError
from ccdiff.fuzzing.command import parse_duration
from ccdiff.fuzzing.harness import harness, harness_env
from ccdiff.fuzzing.triage import Triage, minimize, signatures
from ccdiff.replay import replay
from ccdiff.stacks import resolve
from ccdiff.trace import Lost, PersistentCongestion, Sent, dump_trace, judge_reachability, load_trace

ROOT = Path(__file__).resolve().parent.parent
SEEDS = sorted((ROOT / "fuzz" / "seeds" / "no-loss").glob("*.bin"))
# send 1, lose it, send 1: the loss empties the pipe, the send is an "idle restart",
# and quiche shifts the recovery start it just set by the idle time into the future.
REPRODUCER = ROOT / "fuzz" / "reproducers" / "quiche-future-recovery-start.bin"
# The former fuzz/reproducers/ngtcp2-cwnd-below-minimum.bin (removed, docs/fuzzing.md) redone
# with a persistent congestion RFC 9002 7.6.2 allows: a 10 ms sample, pns 1 and 2 sent 200 ms
# apart and lost together (> 165 ms), pn 3 acked.  ngtcp2 resets its CUBIC state (w_est = 0)
# and the ACK lands in congestion avoidance with no epoch; only with ngtcp2's clock near 0
# (220 ms) is W_cubic small enough that cwnd = w_est = 600 bytes.  At an uptime-like clock: 3000.
NGTCP2_CLOCK_NEAR_ZERO = bytes.fromhex("0000050001000000019300010381" "0500")
# send 1 (app-limited), ACK it with ECN-CE, 940 waits of 32 s, send 1, ACK it: picoquic's
# W_cubic(t) counts the 8.4 h of idle and sets cwnd to it uncapped (1.3e16 bytes).
PICOQUIC_REPRODUCER = ROOT / "fuzz" / "reproducers" / "picoquic-numeric-error.bin"


def picoquic_idle_input(waits: int) -> bytes:
    ops = [(0, 0x80), (5, 0x01)] + [(1, 0xFF)] * waits + [(0, 0x00), (5, 0x00)]
    return bytes(b for op in ops for b in op)
QUICHE = "quiche@0.26.0"


def run_harness(exe, data: bytes, spec: str, **env):
    return subprocess.run([str(exe)], input=data, env=dict(harness_env(resolve(spec)), **env),
                          capture_output=True, timeout=60)


def exits_on_strict_new_only(returncode: int, out: str) -> None:
    """A fuzz run exits 1 exactly when a stored finding is a strict bug report (issue #30's
    one vocabulary: a nightly fails only on strict, new ones), as its summary counts them."""
    strict_new = int(re.search(r"; (\d+) strict and new", out).group(1))
    assert returncode == (1 if strict_new else 0), out[-3000:]


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


def _calls_guard(path: Path) -> bool:
    """PATH (an object or archive) is coverage-instrumented: it registers sancov guards (the
    sancov pass, and AFL++'s PCGUARD pass, which also bumps __afl_area_ptr inline) or inline
    8-bit counters (the Rust stacks' AFL++ build)."""
    symbols = subprocess.run(["nm", "-u", str(path)], capture_output=True, text=True, check=True).stdout.split()
    return any(s in symbols for s in ("__sanitizer_cov_trace_pc_guard_init", "__afl_area_ptr",
                                      "__sanitizer_cov_8bit_counters_init"))


def test_instrumentation_covers_the_stack_not_the_driver_or_dependencies():
    """Coverage is the controller's: quiche's crate and the adapter carry the sancov pass,
    its dependencies (libm, smallvec) do not, and the harness's own driver objects
    (decoder, ledger, checks, state feedback) are plain."""
    exe = harness(resolve(QUICHE), "afl")
    deps = exe.parent / "target" / "x86_64-unknown-linux-gnu" / "release" / "deps"
    newest = lambda pattern: max(deps.glob(pattern), key=lambda f: f.stat().st_mtime_ns)  # noqa: E731
    assert _calls_guard(deps / "libquiche.rlib")
    assert not _calls_guard(newest("liblibm-*.rlib")) and not _calls_guard(newest("libsmallvec-*.rlib"))
    for engine in ("afl", "honggfuzz", "libfuzzer"):
        objects = sorted((harness(resolve("ngtcp2"), engine).parent / f"harness-{engine}-driver").glob("*.o"))
        # AFL++'s harness also has fz_counters.o, which folds the Rust stacks' counters into
        # AFL++'s map (it names the map and the guard allocator; it has no edges of its own).
        counters = ["fz_counters.o"] if engine == "afl" else []
        assert [o.name for o in objects] == sorted(["fz_check.o", "fz_decode.o", "fz_harness.o", "fz_ledger.o",
                                                    "fz_state.o", *counters])
        assert not any(_calls_guard(o) for o in objects if o.name not in counters + ["fz_state.o"])
        # fz_state.o hands its state counters to the engine (fz_state.h) and has no edges: it
        # registers them as 8-bit counters for AFL++ and honggfuzz; libFuzzer finds them in
        # their section.
        state = next(o for o in objects if o.name == "fz_state.o")
        undefined = subprocess.run(["nm", "-u", str(state)], capture_output=True, text=True, check=True).stdout.split()
        assert not {"__sanitizer_cov_trace_pc_guard_init", "__afl_area_ptr"} & set(undefined)
        assert ("__sanitizer_cov_8bit_counters_init" in undefined) == (engine != "libfuzzer"), (engine, undefined)


@pytest.mark.parametrize("stack", ["quiche@0.26.0", "quinn", "s2n-quic"])
def test_rust_afl_harness_feeds_afl_map_from_counters_including_on_a_crash(stack, tmp_path):
    """The Rust stacks' AFL++ build counts edges in inline 8-bit counters that fz_counters.c
    folds into AFL++'s map after each input and before a crash signal: afl-showmap sees the
    stack's edges on a clean input and on one that aborts, and nothing of the warm-up run
    before the fork server (fz_main.c: all-ops and death-spiral, losses and recovery) shows
    up in the map of an empty input."""
    target = resolve(stack)
    exe = harness(target, "afl")
    lib = subprocess.run(["nm", "-D", "-u", str(exe.parent / "libccdiff_adapter.so")], capture_output=True,
                         text=True, check=True).stdout
    assert "__sanitizer_cov_8bit_counters_init" in lib and "__sanitizer_cov_trace_pc_guard" not in lib
    assert "__sanitizer_cov_trace_cmp" not in lib     # AFL++ reads comparisons only in CMPLOG

    def edges(data: bytes) -> set:
        (tmp_path / "in").write_bytes(data)
        out = tmp_path / "map"
        with open(tmp_path / "in", "rb") as stdin:
            subprocess.run([shutil.which("afl-showmap"), "-q", "-o", str(out), "--", str(exe)], stdin=stdin,
                           env=harness_env(target, engine=True), capture_output=True, timeout=60)
        return {line.split(":")[0] for line in out.read_text().split()}

    clean = edges((ROOT / "fuzz" / "seeds" / "no-loss" / "rounds.bin").read_bytes())
    assert len(clean) > 50, clean            # fz_main.c alone has 11 edges
    empty = edges(b"")                       # open and close only
    assert 0 < len(empty) < len(clean) and len(empty - clean) <= 5, (len(empty), len(clean), empty - clean)
    if stack == QUICHE:
        # A violation aborts (future-recovery-start at event 2): the edges of that run are
        # folded before SIGABRT ends it -- afl-fuzz tells crashes apart by them.
        crash = edges(REPRODUCER.read_bytes())
        assert len(crash) > len(empty) and crash - clean, crash


def test_in_process_check_agrees_with_python_replay():
    """The reproducer's violation is the one the Python replay reports, at the same event."""
    trace = decode(REPRODUCER.read_bytes())
    found = [(f.invariant, f.event_index) for f in replay(trace, [QUICHE]).violations]
    assert ("future-recovery-start", 2) in found


@pytest.mark.parametrize("stack", ["ngtcp2", "picoquic"])
@pytest.mark.parametrize("engine,sanitize", [("plain", False), ("afl", False), ("honggfuzz", False),
                                             ("plain", True), ("afl", True)])
def test_c_stack_harnesses_build_and_run(stack, engine, sanitize):
    """C adapters with each engine's instrumentation (and ASan+UBSan) run the vectors and seeds
    clean, picoquic's harnesses abort on its stored reproducer, and the harnesses run at the
    realistic clock (ngtcp2's near-zero-clock input is clean, and aborts at a 1 us base)."""
    exe = harness(resolve(stack), engine, sanitize)
    inputs = [p.read_bytes() for p in SEEDS + sorted((ROOT / "fuzz" / "vectors").glob("*.bin")) + [REPRODUCER]]
    for data in inputs + [NGTCP2_CLOCK_NEAR_ZERO]:
        result = run_harness(exe, data, stack)
        assert result.returncode == 0, (data[:16], result.stderr[-2000:])
    crash = run_harness(exe, PICOQUIC_REPRODUCER.read_bytes(), stack)
    if stack == "picoquic":
        assert crash.returncode == -signal.SIGABRT, crash.stderr[-2000:]
        assert b"violation numeric-error at event 3 (t=30080020000 us)" in crash.stderr
    else:
        assert crash.returncode == 0, crash.stderr[-2000:]
    near_zero = run_harness(exe, NGTCP2_CLOCK_NEAR_ZERO, stack, CCDIFF_CLOCK_BASE_US="1")
    if stack == "ngtcp2":
        assert near_zero.returncode == -signal.SIGABRT, near_zero.stderr[-2000:]
        assert b"violation cwnd-below-minimum at event 7 (t=220100 us): cwnd 600" in near_zero.stderr
    else:
        assert near_zero.returncode == 0, near_zero.stderr[-2000:]


def test_picoquic_reproducer_is_the_stored_bytes():
    assert PICOQUIC_REPRODUCER.read_bytes() == picoquic_idle_input(940)


def test_picoquic_ubsan_float_cast_overflow_after_93_hours_idle():
    """UBSan in picoquic's own code: cubic.c:296 casts W_cubic * mtu to uint64_t; once t
    passes ~93 h the double exceeds 2**64 (undefined behaviour, C11 6.3.1.4)."""
    exe = harness(resolve("picoquic"), "plain", sanitize=True)
    result = run_harness(exe, picoquic_idle_input(11_000), "picoquic")
    assert result.returncode == -signal.SIGABRT
    assert b"cubic.c:296" in result.stderr and b"outside the range of representable values" in result.stderr


def test_ngtcp2_near_zero_clock_input_agrees_with_python_replay(monkeypatch):
    """Python replay and the C harness see the same thing on both clocks."""
    trace = decode(NGTCP2_CLOCK_NEAR_ZERO)
    result = replay(trace, ["ngtcp2", "oracle"])
    assert any(isinstance(ev, PersistentCongestion) for ev in trace.events)
    assert result.runs["ngtcp2"].snapshots[-1].cwnd == 3000
    assert not [f for f in result.violations if f.stack == "ngtcp2"]
    monkeypatch.setenv("CCDIFF_CLOCK_BASE_US", "1")
    result = replay(trace, ["ngtcp2", "oracle"])
    assert result.runs["ngtcp2"].snapshots[-1].cwnd == 600
    assert ("ngtcp2", "cwnd-below-minimum", 7) in {(f.stack, f.invariant, f.event_index) for f in result.violations}


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
    # send 1, lose it, send 1: no acknowledged packet was sent after it (RFC 9002 §6.1)
    assert info["reachability"] == "lenient" and "not sent before an acknowledged packet" in info["lenient_reason"]
    again = Triage(tmp_path, QUICHE, QUICHE)                                   # a later run
    assert set(again.stored) == {"future-recovery-start--sent-recovery"}
    reproducer = load_trace(str(new[0].folder / "reproducer.jsonl"))
    assert [f.invariant for f in replay(reproducer, [QUICHE]).violations] == ["future-recovery-start"]



# Strict (found by a random search over short operation strings): the signature REPRODUCER
# shows, on a trace loss detection can produce -- a time-threshold loss, then a send.
STRICT_FUTURE_RECOVERY = bytes.fromhex("035200e6017b013403c10796")


def test_an_input_the_fix_does_not_cover_is_a_finding_of_its_own(tmp_path):
    """CI, stop 42: quiche 0.26.0's death spiral (fixed in 0.26.1) and its timer-loss recovery
    start (0.26.1 and 0.30.0 still show it) are both future-recovery-start on a send in
    recovery; one folder held whichever came first, and its status ("fixed" or "new") was the
    campaign's luck.  Triage replays a strict input on the fix's release and keeps the two
    apart: each is stored, each with its own status."""
    from ccdiff.encoding import encode
    from ccdiff.fuzzing.verdicts import verdicts
    timer_loss, dropped = encode(load_trace(str(ROOT / "fuzz" / "reproducers" / "timer-loss-idle-restart.jsonl")))
    assert not dropped
    triage = Triage(tmp_path, QUICHE, QUICHE)
    keys = {s.signature.key for s in triage.add_input(timer_loss, "afl", "crash-1")}
    keys |= {s.signature.key for s in triage.add_input(STRICT_FUTURE_RECOVERY, "afl", "crash-2")}
    unfixed = "future-recovery-start--sent-recovery--not-fixed-by-0.26.1"
    assert {"future-recovery-start--sent-recovery", unfixed} <= keys
    found = verdicts(triage)
    assert found["future-recovery-start--sent-recovery"].kind == "fixed"
    assert found[unfixed].kind in ("new", "unchecked") and found[unfixed].fails
    assert "still shown after the fix in 0.26.1" in triage.stored[unfixed].signature.shown
    assert Triage(tmp_path, QUICHE, QUICHE).stored[unfixed].signature.not_fixed_by == "0.26.1"   # read back


def test_a_lenient_finding_is_replaced_by_the_first_strict_input_that_shows_it(tmp_path):
    """The nightly fails on strict findings only: a signature stored first from a lenient
    input (strictify could not repair it) must not hide a strict input of the same
    signature for the rest of the campaign, nor in later runs on the folder."""
    key = "future-recovery-start--sent-recovery"
    triage = Triage(tmp_path, QUICHE, QUICHE)
    [lenient] = triage.add_input(REPRODUCER.read_bytes(), "afl", "crash-1")
    assert json.loads((lenient.folder / "finding.json").read_text())["reachability"] == "lenient"
    again = Triage(tmp_path, QUICHE, QUICHE)                       # a later run on the folder
    assert again.wanted(decode(REPRODUCER.read_bytes())) == set()  # lenient: nothing to add
    assert again.wanted(decode(STRICT_FUTURE_RECOVERY)) == {key}   # Hypothesis and atheris keep it
    assert again.add_input(REPRODUCER.read_bytes() + b"\x00", "honggfuzz", "crash-2") == []
    [strict] = again.add_input(STRICT_FUTURE_RECOVERY, "libfuzzer", "crash-3")
    info = json.loads((strict.folder / "finding.json").read_text())
    assert strict.folder == lenient.folder and info["reachability"] == "strict"
    assert info["found_by"] == ["afl", "honggfuzz", "libfuzzer"] and info["first_input"] == "crash-3"
    assert load_trace(str(strict.folder / "reproducer.jsonl")).reachability == "strict"
    assert again.upgraded == {key} and not list((again.folder / ".staging").iterdir())
    assert again.add_input(STRICT_FUTURE_RECOVERY + b"\x00", "afl", "crash-4") == []   # strict stays
    assert Triage(tmp_path, QUICHE, QUICHE).wanted(decode(STRICT_FUTURE_RECOVERY)) == set()


def test_a_replacement_waits_for_another_workers_conclusion(tmp_path, monkeypatch, capsys):
    """CI, stop 41: two workers on one findings folder; one replaced a lenient finding by a
    strict one while the other's report replayed it, and the other's report failed ("does not
    reproduce the findings in the document", exit 2).  A replacement now waits while another
    worker concludes, and that worker's summary and report are of the folder as it was."""
    import threading
    from argparse import Namespace

    import ccdiff.matrix
    from ccdiff.fuzzing.conclude import conclude
    first = Triage(tmp_path, QUICHE, QUICHE)
    [lenient] = first.add_input(REPRODUCER.read_bytes(), "afl", "crash-1")
    other = Triage(tmp_path, QUICHE, QUICHE)                     # the second worker
    real, seen = ccdiff.matrix.run_matrix, {}

    def replace_while_reporting(traces, specs):
        doc = real(traces, specs)                                # the report's first replay
        seen["thread"] = threading.Thread(
            target=lambda: seen.setdefault("stored", other.add_input(STRICT_FUTURE_RECOVERY, "libfuzzer", "c2")))
        seen["thread"].start()
        seen["thread"].join(3)
        seen["waited"] = seen["thread"].is_alive()               # blocked by the conclusion's lock
        return doc
    monkeypatch.setattr(ccdiff.matrix, "run_matrix", replace_while_reporting)
    conclude(first, [lenient], Namespace(no_report=False, qlog_schema="0.3"))   # raised SetupError before
    seen["thread"].join(120)
    assert seen["waited"]
    assert "lenient trace only" in capsys.readouterr().out and (first.folder / "report" / "index.html").exists()
    [strict] = seen["stored"]
    assert load_trace(str(strict.folder / "reproducer.jsonl")).reachability == "strict"
    assert json.loads((strict.folder / "finding.json").read_text())["found_by"] == ["afl", "libfuzzer"]


def test_every_seed_is_strict_and_clean_on_every_pinned_stack():
    """Campaigns start from fuzz/seeds/ (every subfolder).  The seeds are shapes a real
    connection has (slow start, an ECN-CE mark, congestion avoidance, a short pause, app-
    limited sends; docs/fuzzing.md): strict, and no seed shows a violation on any pinned
    stack, so a bug a campaign reports is one the engine found, not one a seed was."""
    from ccdiff.recipes import load_recipes
    specs = [f"{recipe.name}@{version}" for recipe in load_recipes().values() for version in recipe.versions]
    seeds = sorted((ROOT / "fuzz" / "seeds").rglob("*.bin"))
    assert {p.parent.name for p in seeds} == {"no-loss", "shapes"} and len(specs) >= 10
    for path in seeds:
        trace = judge_reachability(decode(path.read_bytes(), name=path.name))
        assert trace.reachability == "strict", (path.name, trace.lenient_reason)
        result = replay(trace, specs)
        assert [(v.stack, v.invariant) for v in result.violations] == [], path.name


def _pause_variants():
    """The per-packet-ACK seed as it is (a 5 ms pause) and with its pause made 770 ms."""
    short = (ROOT / "fuzz" / "seeds" / "shapes" / "ce-per-packet-acks-pause.bin").read_bytes()
    at = short.index(bytes([0x01, 0x31]))
    return short, short[:at] + bytes([0x01, 0xE8]) + short[at + 2:]


def test_state_feedback_tells_a_long_pause_from_a_short_one(tmp_path):
    """fz_state.c: code coverage cannot tell a 5 ms pause from a 770 ms one (ngtcp2 runs the
    same lines), so without state feedback the input showing ngtcp2's idle inflation never
    reached the corpus (no strict reproducer in 60 s; docs/fuzzing.md).  The state slots
    do: congestion avoidance (phase 2) growing towards the 1.5x bound (growth class 4)
    after a pause of 64 RTTs or more (idle class 4) is slot (2 x 6 + 4) x 5 + 4 = 84, hit
    by the long pause only -- and AFL++'s map shows the difference.  Losses have slots of
    their own (one RFC 9002 §6.1 would declare or not, by the time threshold or not, emptying
    the pipe or not), and so does a send
    after a loss emptied the pipe: quiche 0.30.0's timer-loss bug is one of those shapes."""
    short, long = _pause_variants()
    target = resolve("ngtcp2@1.25.0")

    def slots(data: bytes) -> dict:
        out = subprocess.run([str(harness(target, "plain"))], input=data, capture_output=True, timeout=60,
                             env=dict(harness_env(target), CCDIFF_FUZZ_STATE="1", CCDIFF_FUZZ_NO_ABORT="1"))
        line = [x for x in out.stderr.decode().splitlines() if x.startswith("ccdiff-fuzz: state slots")]
        return dict(map(int, pair.split(":")) for pair in line[-1].split()[3:])
    before, after = slots(short), slots(long)
    assert 84 not in before and after[84] == 12, (before, after)
    assert "idle-inflation--ack-congestion_avoidance" in signatures(decode(long), "ngtcp2@1.25.0")
    assert not signatures(decode(short), "ngtcp2@1.25.0")

    # Losses: quiche 0.30.0's timer-loss reproducer, encoded, is a loss RFC 9002 §6.1 declares
    # by the time threshold, emptying the pipe (120 + 4 + 2 + 1 = 127), and a send after it
    # (128 + 4 + idle class 1 = 133); REPRODUCER's loss has nothing acknowledged after it (121:
    # not declared, not by the timer, empties; then the send at that instant: 128).
    from ccdiff.encoding import encode
    timer_loss, dropped = encode(load_trace(str(ROOT / "fuzz" / "reproducers" / "timer-loss-idle-restart.jsonl")))
    assert not dropped and {127, 133} <= set(slots(timer_loss)) and not {121, 128} & set(slots(timer_loss))
    assert {121, 128} <= set(slots(REPRODUCER.read_bytes())) and not {127, 133} & set(slots(REPRODUCER.read_bytes()))
    assert not set(range(120, 136)) & set(after)    # no loss there

    exe = harness(target, "afl")

    def edges(data: bytes) -> set:
        (tmp_path / "in").write_bytes(data)
        with open(tmp_path / "in", "rb") as stdin:
            subprocess.run([shutil.which("afl-showmap"), "-q", "-o", str(tmp_path / "map"), "--", str(exe)],
                           stdin=stdin, env=harness_env(target, engine=True), capture_output=True, timeout=60)
        return {line.split(":")[0] for line in (tmp_path / "map").read_text().split()}
    assert len(edges(long) - edges(short)) >= 1

def ccdiff(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("engine", ["afl", "honggfuzz", "libfuzzer", "hypothesis"])
def test_smoke_campaign_finds_future_recovery_start(engine, tmp_path):
    """Seconds-long campaign from the no-loss seeds: the engine runs, triage stores the
    death-spiral root cause with a replay command, and a second run resumes."""
    if engine != "hypothesis":
        harness(resolve(QUICHE), engine)   # build first: the campaign's 10 s are for fuzzing
    result = ccdiff("fuzz", "--stack", QUICHE, "--engine", engine, "--time", "10s", "--findings", str(tmp_path),
                    "--no-queue")
    exits_on_strict_new_only(result.returncode, result.stdout)
    folder = tmp_path / QUICHE / "future-recovery-start--sent-recovery"
    assert (folder / "reproducer.jsonl").exists(), result.stdout
    # The death spiral's root cause, fixed in 0.26.1 ([[known]]): never a bug report on 0.26.0
    info = json.loads((folder / "finding.json").read_text())
    assert info["status"] == ("fixed" if info["reachability"] == "strict" else "lenient"), info
    assert info["fails_nightly"] is False
    # quiche's timer-loss recovery start is the same signature and not what 0.26.1 fixed:
    # when the campaign meets it, it is a finding of its own, never filed as fixed (CI, stop 42)
    for other in (tmp_path / QUICHE).glob("*--not-fixed-by-0.26.1"):
        assert json.loads((other / "finding.json").read_text())["status"] in ("new", "unchecked", "lenient"), other
    assert f"python3 -m ccdiff replay {folder / 'reproducer.jsonl'} --stack {QUICHE}" in result.stdout
    unit = "examples" if engine == "hypothesis" else "executions"     # not "coverage"/"crashes" for Hypothesis
    assert re.search(rf"\] +\d+ s  [1-9]\d* {unit} \(\d+/s\)", result.stderr), result.stderr[-2000:]
    if engine != "hypothesis":
        # issue #36: the engine's line gives fuzzing seconds (the 10 asked: a timer stops the
        # engine then, whatever triage is doing); triage after it is timed on a line of its own,
        # not folded into the rate
        final = re.findall(rf"\[{engine}\] +(\d+) s ", result.stderr)[-1]
        assert 10 <= int(final) <= 20, result.stderr[-2000:]
        assert re.search(r"triage after the engine stopped: \d+ input\(s\) in \d+ s", result.stderr)
    if engine == "afl":     # the one line on CPU pinning
        assert re.search(r"^afl: (pinned|unpinned)", result.stderr, re.M), result.stderr[-2000:]
    report = tmp_path / QUICHE / "report" / "index.html"       # issue 7: a report at the end
    assert report.exists() and "future-recovery-start" in report.read_text()
    again = ccdiff("fuzz", "--stack", QUICHE, "--engine", engine, "--time", "2s", "--findings", str(tmp_path),
                   "--no-queue")
    exits_on_strict_new_only(again.returncode, again.stdout)
    assert "future-recovery-start (sent-recovery)" not in again.stdout   # stored once, not new


@pytest.mark.parametrize("engine", ["afl", "honggfuzz", "libfuzzer"])
def test_engine_stops_at_its_time_while_triage_is_busy(engine, tmp_path):
    """CI's honggfuzz line once said 45 s for --time 10s: the first crash's triage ran long on
    a loaded machine and the engine was stopped only when it returned.  The engine now stops
    at --time on a timer of its own, whatever triage is doing: here triage blocks until the
    engine has stopped (on the old code it never does, and the wait gives up after 120 s)."""
    from argparse import Namespace
    from ccdiff.fuzzing.command import Status, _run_engine
    from ccdiff.fuzzing.engines import ENGINES
    triage = Triage(tmp_path, QUICHE, QUICHE)
    campaign = ENGINES[engine](resolve(QUICHE), tmp_path / ".work", SEEDS[0].parent, None)
    crash = tmp_path / "crash-1"       # a crash file from the first turn, not left to luck
    shutil.copy(REPRODUCER, crash)
    campaign.crash_files = lambda: [crash]
    seen = []
    original = triage.add_input

    def busy_until_the_engine_stops(data, engine_name, name):
        if not seen:
            give_up = time.monotonic() + 120
            while campaign.running() and time.monotonic() < give_up:
                time.sleep(0.2)
            seen.append(campaign.running())
        return original(data, engine_name, name)
    triage.add_input = busy_until_the_engine_stops
    started = time.monotonic()
    stats, interrupted = _run_engine(Namespace(engine=engine, no_queue=True), campaign, triage, 4,
                                     Status(engine), started)
    assert not interrupted and seen == [False], seen       # stopped while triage was busy
    assert campaign.halted_at is not None and campaign.halted_at - started >= 4
    assert stats["fuzz_seconds"] == campaign.halted_at - started


def _fake_proc(root: Path, processes: dict) -> Path:
    """A /proc with a status file per process: pid -> (name, Cpus_allowed_list)."""
    for pid, (name, cpus) in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "status").write_text(f"Name:\t{name}\nState:\tS (sleeping)\n"
                                                f"Cpus_allowed:\tf\nCpus_allowed_list:\t{cpus}\n")
    return root


def test_afl_jobs_get_the_free_cpus_and_the_rest_run_unpinned(tmp_path):
    """A CPU is taken by an afl-fuzz bound to it alone; an unbound afl-fuzz or another
    program bound to one takes none.  Jobs get the free CPUs lowest first, then None."""
    from ccdiff.fuzzing.engines import _cpu_list, afl_bound_cpus, afl_cpus, pinning_line
    proc = _fake_proc(tmp_path / "proc", {100: ("afl-fuzz", "1"), 101: ("afl-fuzz", "0-3"),
                                          102: ("python3", "2"), 103: ("afl-fuzz", "3,5")})
    (tmp_path / "proc" / "self").mkdir()          # not a pid: ignored
    assert afl_bound_cpus(proc) == {1}
    assert afl_cpus(3, {0, 1, 2, 3}, proc) == [0, 2, 3]
    assert afl_cpus(4, {0, 1, 2, 3}, proc) == [0, 2, 3, None]
    assert afl_cpus(2, {1}, proc) == [None, None]           # the one CPU allowed is taken
    assert afl_cpus(1, {0, 1}, tmp_path / "empty") == [0]
    assert _cpu_list("0-3,6") == {0, 1, 2, 3, 6} and _cpu_list("") == set()
    assert pinning_line(["main", "s1", "s2"], [0, 2, None]) == \
        "afl: pinned main on CPU 0, s1 on CPU 2; unpinned (no free CPU): s2"
    assert pinning_line(["main"], [None]) == "afl: pinned no job; unpinned (no free CPU): main"


def test_missing_libfuzzer_runtime_names_the_package(tmp_path, monkeypatch):
    """clang without libclang_rt.fuzzer (Debian's clang only recommends libclang-rt-14-dev):
    -print-file-name answers the bare name.  The error names the package, exit 2."""
    from ccdiff.fuzzing.toolchain import libfuzzer_runtime
    fake = tmp_path / "clang"
    fake.write_text('#!/bin/sh\ncase "$1" in -dumpversion) echo 14.0.6;; *) echo "${1#-print-file-name=}";; esac\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    with pytest.raises(SetupError, match=r"libclang_rt\.fuzzer.*libclang-rt-14-dev"):
        libfuzzer_runtime()


def test_afl_counters_are_live_while_it_runs(tmp_path):
    """AFL++ 4.04c without a screen writes fuzzer_stats once a minute and plot_data at exit:
    read from them, a short campaign's line said "48 executions (0/s)" until the end
    (issue #36).  Its StatsD counters come every second."""
    from ccdiff.fuzzing.engines import Afl
    campaign = Afl(resolve(QUICHE), tmp_path, SEEDS[0].parent, None)
    campaign.start()
    try:
        deadline = time.monotonic() + 30
        stats = {}
        while time.monotonic() < deadline and campaign.running():
            time.sleep(1)
            stats = campaign.stats()
            if stats["execs"] > 1000:
                break
        assert campaign.running()                  # read live, not after the engine's exit
        assert stats["execs"] > 1000 and stats["execs_per_sec"] > 0, stats
        assert re.fullmatch(r"[1-9]\d* edges", stats["coverage"]), stats
    finally:
        campaign.stop()


@pytest.mark.parametrize("spec,trace,kind,code", [
    (QUICHE, "examples/death-spiral.jsonl", "fixed", 0),
    (QUICHE, "fuzz/reproducers/timer-loss-idle-restart.jsonl", "new", 1),
    ("quiche@0.30.0", "fuzz/reproducers/timer-loss-idle-restart.jsonl", "new", 1)])
def test_stored_findings_are_judged_and_only_strict_new_ones_fail(tmp_path, spec, trace, kind, code, capsys):
    """The death spiral on 0.26.0 is fixed upstream in 0.26.1 (its [[known]] entry, and 0.26.1
    replayed no longer shows it): reported, not failed on.  The timer loss that pushes the
    recovery start into the future is new on 0.26.0 as on 0.30.0 -- the death spiral's
    version bound covers it, but 0.26.1 replayed still shows it (it was filed "fixed" until
    2026-11-29) -- and the run exits 1.  A campaign on a pristine release used to print every
    stored signature as "new" and exit 1."""
    from ccdiff.build import ensure_built
    from ccdiff.fuzzing.triage import stack_folder_name
    from ccdiff.fuzzing.verdicts import record, summarize, verdicts
    ensure_built("quiche@0.30.0")     # what 0.26.1's fix is replayed on when 0.26.1 is not built
    folder = tmp_path / stack_folder_name(spec) / "future-recovery-start--sent-recovery"
    folder.mkdir(parents=True)
    shutil.copy(ROOT / trace, folder / "reproducer.jsonl")
    (folder / "finding.json").write_text(json.dumps({"stack": spec, "invariant": "future-recovery-start",
                                                     "shape": "sent-recovery", "events": 9, "found_by": ["afl"]}))
    triage = Triage(tmp_path, spec, spec)
    found = verdicts(triage)
    record(triage, found)
    assert summarize(triage, found, []) == code
    info = json.loads((folder / "finding.json").read_text())
    assert (info["status"], info["fails_nightly"]) == (kind, bool(code))
    assert f"; {code} strict and new" in capsys.readouterr().out


def test_fuzz_cli_errors_exit_2(tmp_path):
    for args in (["--stack", "oracle", "--engine", "afl", "--time", "1s"],
                 ["--stack", "nosuch", "--engine", "afl", "--time", "1s"],
                 ["--stack", QUICHE, "--engine", "afl", "--time", "soon"],
                 ["--stack", QUICHE, "--engine", "afl", "--time", "1s", "--seeds", str(tmp_path / "none")],
                 ["--stack", QUICHE, "--engine", "afl", "--time", "1s", "--invariants", "idle-inflation"],
                 ["--stack", QUICHE, "--engine", "afl", "--time", "1s", "--jobs", "0"]):
        result = ccdiff("fuzz", *args, "--findings", str(tmp_path))
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr and result.stderr.startswith("error:"), result.stderr


def test_quiche_030_idle_fix_leaves_future_recovery_start_after_a_timer_loss():
    """Found by fuzzing: the 0.30 fix measures idle from max(last ACK, last send) but a
    time-threshold loss starts recovery after the last ACK, so the shift still lands in
    the future, by exactly loss time - last ACK time.  0.26.0 overshoots by the whole gap."""
    trace = load_trace(str(ROOT / "fuzz" / "reproducers" / "timer-loss-idle-restart.jsonl"))
    result = replay(trace, ["quiche@0.30.0", QUICHE, "oracle"])
    snaps = {label: run.snapshots[-1] for label, run in result.runs.items()}
    assert snaps["quiche@0.30.0"].recovery_start_us == 20_000 + (13_000 - 11_000)
    assert snaps[QUICHE].recovery_start_us == 13_000 + (20_000 - 1_000)
    found = {(f.stack, f.invariant) for f in result.violations}
    assert ("quiche@0.30.0", "future-recovery-start") in found and (QUICHE, "future-recovery-start") in found
    assert not [f for f in result.violations if f.stack == "oracle"]


def test_ctrl_c_keeps_what_was_found(tmp_path):
    """SIGINT once the engine has a crash: the engine stops, triage stores the finding."""
    import time
    harness(resolve(QUICHE), "afl")
    proc = subprocess.Popen([sys.executable, "-m", "ccdiff", "fuzz", "--stack", QUICHE, "--engine", "afl",
                             "--time", "10m", "--findings", str(tmp_path), "--no-queue"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    crashes = tmp_path / QUICHE / ".work" / "afl" / "main" / "crashes"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list(crashes.glob("id:*")):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    exits_on_strict_new_only(proc.returncode, out)
    assert "interrupted" in err
    assert (tmp_path / QUICHE / "future-recovery-start--sent-recovery" / "reproducer.jsonl").exists(), out
    assert not subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True).stdout   # engine gone


@pytest.mark.parametrize("script,key", [
    ("kill -SEGV $$", "native-crash--signal-11"),
    ("echo '==1==ERROR: AddressSanitizer: heap-buffer-overflow on address' >&2; exit 1",
     "native-crash--addresssanitizer-heap-buffer-overflow"),
    ("sleep 30", "native-crash--hang"),
    ("exit 1", None),           # an invariant violation, reported: the Python replay judges it
    ("exit 0", None),
])
def test_crash_in_the_stacks_own_code_is_kept_with_its_report(tmp_path, monkeypatch, script, key):
    """An engine's crash or hang file first runs through the harness with violations only
    reported: a signal, a sanitizer report or a hang is the stack's own code, stored with the
    harness's stderr; anything else is left to the Python replay (None)."""
    import ccdiff.fuzzing.triage as triage_module
    monkeypatch.setattr(triage_module, "NATIVE_TIMEOUT_S", 1)
    exe = tmp_path / "harness.sh"
    exe.write_text(f"#!/bin/sh\ncat > /dev/null\n{script}\n")
    exe.chmod(0o755)
    triage = Triage(tmp_path / "findings", "ngtcp2", "ngtcp2")
    data = SEEDS[0].read_bytes()
    stored = triage.add_native_crash(data, "afl", exe, {}, "crash-file")
    if key is None:
        assert stored is None and triage.stored == {}
        return
    assert [s.signature.key for s in stored] == [key]
    folder = stored[0].folder
    assert (folder / "input.bin").read_bytes() == data and (folder / "stderr.txt").exists()
    assert triage.add_native_crash(data, "honggfuzz", exe, {}) == []      # stored once


def test_parallel_campaigns_store_a_finding_once(tmp_path):
    """Two runs on one findings folder (say AFL++ and honggfuzz side by side)."""
    first, second = Triage(tmp_path, QUICHE, QUICHE), Triage(tmp_path, QUICHE, QUICHE)
    assert len(first.add_input(REPRODUCER.read_bytes(), "afl")) == 1
    assert second.add_input(REPRODUCER.read_bytes(), "honggfuzz") == []
    folder = tmp_path / QUICHE / "future-recovery-start--sent-recovery"
    assert json.loads((folder / "finding.json").read_text())["found_by"] == ["afl", "honggfuzz"]


def test_two_workers_racing_on_one_signature_store_it_once(tmp_path):
    """Both workers minimized the same finding before either published it: rename(2)
    lets exactly one in; the other adds its engine to the stored entry and leaves no trace."""
    first, second = Triage(tmp_path, QUICHE, QUICHE), Triage(tmp_path, QUICHE, QUICHE)
    [mine] = first.add_input(REPRODUCER.read_bytes(), "afl")
    files = {"reproducer.jsonl": b"{}\n", "input.bin": b"other worker's input"}
    assert second._publish(mine.signature, files, 99, "honggfuzz", "its-crash-file") is None
    folder = tmp_path / QUICHE / mine.signature.key
    info = json.loads((folder / "finding.json").read_text())
    assert info["found_by"] == ["afl", "honggfuzz"] and info["events"] == mine.events == 3
    assert (folder / "input.bin").read_bytes() == REPRODUCER.read_bytes()      # the winner's files
    assert not list((tmp_path / QUICHE / ".staging").iterdir())
    assert [p.name for p in (tmp_path / QUICHE).iterdir() if not p.name.startswith(".")] == [mine.signature.key]


def test_leftovers_of_a_killed_triage_are_not_findings(tmp_path):
    """A run killed while publishing leaves a staging folder; it is neither loaded as a
    finding nor in the way of storing that finding again."""
    half = tmp_path / QUICHE / ".staging" / "future-recovery-start--sent-recovery.abc123"
    half.mkdir(parents=True)
    (half / "finding.json").write_text('{"stack": "quiche@0.2')
    triage = Triage(tmp_path, QUICHE, QUICHE)
    assert triage.stored == {}
    assert [s.signature.key for s in triage.add_input(REPRODUCER.read_bytes(), "afl")] == \
        ["future-recovery-start--sent-recovery"]


def _fuzz_processes(marker) -> list:
    """pids of processes whose command line names `marker` (our findings folder)."""
    found = subprocess.run(["pgrep", "-f", str(marker)], capture_output=True, text=True).stdout
    return found.split()


def test_killed_run_loses_nothing_and_leaves_no_engine_behind(tmp_path):
    """SIGKILL (no chance to clean up) once AFL++ has a crash: the engine dies with ccdiff
    (parent-death signal), and the next run resumes the corpus and stores the finding
    from the crash file the killed run left, although it cannot crash on it itself."""
    import time
    harness(resolve(QUICHE), "afl")
    proc = subprocess.Popen([sys.executable, "-m", "ccdiff", "fuzz", "--stack", QUICHE, "--engine", "afl",
                             "--time", "10m", "--findings", str(tmp_path), "--no-queue", "--no-report"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stack = tmp_path / QUICHE
    instance = stack / ".work" / "afl" / "main"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list((instance / "crashes").glob("id:*")):
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _fuzz_processes(tmp_path):
        time.sleep(0.2)
    assert not _fuzz_processes(tmp_path), "afl-fuzz outlived the killed ccdiff"
    finding = stack / "future-recovery-start--sent-recovery"
    shutil.rmtree(finding, ignore_errors=True)          # as if killed before its first triage
    queue = {p.read_bytes() for p in (instance / "queue").glob("id:*")}
    assert list((instance / "crashes").glob("id:*")) and queue
    # Only cwnd-below-minimum aborts now: the finding can only come from the killed run's crash.
    again = ccdiff("fuzz", "--stack", QUICHE, "--engine", "afl", "--time", "3s", "--findings", str(tmp_path),
                   "--no-queue", "--no-report", "--invariants", "cwnd-below-minimum")
    exits_on_strict_new_only(again.returncode, again.stdout)
    assert (finding / "reproducer.jsonl").exists(), again.stdout
    assert queue <= {p.read_bytes() for p in (instance / "queue").glob("id:*")}   # resumed, not restarted


def test_workers_share_one_corpus_and_store_each_finding_once(tmp_path):
    """Two `--worker` campaigns at once on one findings folder (as compose's fuzz replicas
    run): one AFL++ instance each under one .work/afl, entries of one imported by the other
    (AFL++ elects one secondary as main, which imports from the rest), and one stored folder
    per signature."""
    harness(resolve(QUICHE), "afl")

    def worker(name):
        return subprocess.Popen([sys.executable, "-m", "ccdiff", "fuzz", "--stack", QUICHE, "--engine", "afl",
                                 "--findings", str(tmp_path), "--no-queue", "--no-report", "--time", "8s",
                                 "--worker", name],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # An AFL++ secondary syncs on its first cycle, then rarely: started together on a loaded
    # machine, each could sync before the other had a queue (1 run in ~5 failed).  b starts
    # once a's queue exists, so b's first sync has something to import.
    procs = [worker("a")]
    queue_a = tmp_path / QUICHE / ".work" / "afl" / "a" / "queue"
    deadline = time.monotonic() + 120
    while not list(queue_a.glob("id:*")) and time.monotonic() < deadline and procs[0].poll() is None:
        time.sleep(0.2)
    procs.append(worker("b"))
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        exits_on_strict_new_only(proc.returncode, out)
    stack, afl = tmp_path / QUICHE, tmp_path / QUICHE / ".work" / "afl"
    assert sorted(p.name for p in afl.iterdir() if p.is_dir()) == ["a", "b"]
    imported = [p.name for p in afl.glob("a/queue/id:*,sync:b,*")] + \
               [p.name for p in afl.glob("b/queue/id:*,sync:a,*")]
    assert imported, "neither worker imported the other's corpus entries"
    stored = sorted(p.parent.name for p in stack.glob("[!.]*/finding.json"))
    assert len(stored) == len(set(stored)) and "future-recovery-start--sent-recovery" in stored
    assert not list((stack / ".staging").iterdir())


def test_a_worker_triages_the_crashes_of_workers_that_died(tmp_path):
    """A replica killed before its triage leaves crash files under its own instance name;
    the next worker, whatever its name, picks them up (stored once by triage)."""
    from ccdiff.fuzzing.engines import Afl
    dead = tmp_path / "afl" / "3f2a9c0d1e7b"
    for folder in ("queue", "crashes", "crashes.2026-11-23-12:00:00"):
        (dead / folder).mkdir(parents=True)
    (dead / "crashes" / "id:000000,sig:06").write_bytes(b"x")
    (dead / "crashes.2026-11-23-12:00:00" / "id:000000,sig:06").write_bytes(b"y")
    (dead / "queue" / "id:000000,orig:seed").write_bytes(b"z")
    campaign = Afl(resolve(QUICHE), tmp_path, SEEDS[0].parent, None, worker="b")
    assert [f.read_bytes() for f in campaign.crash_files()] == [b"x", b"y"]
    assert campaign.queue_files() == []                  # corpus entries: its own (synced) only


def test_worker_names_are_checked():
    from ccdiff.fuzzing.command import worker_name
    assert worker_name("fuzz-afl_2") == "fuzz-afl_2" and worker_name("a/b c") == "a-b-c"
    assert len(worker_name("x" * 40)) == 20 and worker_name("auto")
    for bad in ("main", "s1", "", "///"):
        with pytest.raises(SetupError):
            worker_name(bad)


def test_spurious_undo_after_idle_is_not_idle_inflation():
    """Harness defect found by fuzzing, fixed in invariants.py: a spurious-loss undo right
    after an idle period restored quiche's pre-loss window and idle-inflation blamed W_cubic(t).

    Since the adapter follows quiche's sent_packets (docs/entry-points.md: rollback only
    while quiche still holds the lost packet, recovery.rs:173-182, 305-327), this trace no
    longer undoes at all: packet 135 was drained one smoothed RTT after its loss, long
    before its ACK 940 ms later, so a real quiche connection cannot take this path.  What
    stays: the window is left alone and nothing is blamed on W_cubic(t)."""
    trace = load_trace(str(ROOT / "fuzz" / "reproducers" / "spurious-undo-after-idle.jsonl"))
    result = replay(trace, ["quiche@0.30.0", QUICHE])
    cwnds = [s.cwnd for s in result.runs["quiche@0.30.0"].snapshots]
    assert cwnds[-3:] == [5880, 5880, 5880]          # the late ACK of 135 (event 12) undoes nothing
    assert "idle-inflation" not in {f.invariant for f in result.findings}


def test_quiche_undo_then_avoidance_entry_is_not_growth():
    """Harness defect found by fuzzing, fixed in invariants.py: one ACK rolls quiche back to
    its pre-loss 24300 (undo-on-few-losses) and, cwnd == ssthresh, enters congestion avoidance
    with the epoch -- quiche's recovery start -- at now.  The recovery start moved forward, so
    the checker took the restored window for growth; it now also knows the window it reduced from."""
    trace = load_trace(str(ROOT / "fuzz" / "reproducers" / "quiche-undo-then-avoidance-entry.jsonl"))
    # The fuzz input's app-limited marks, dropped: quiche keeps app_limited set after an
    # app-limited send (lib.rs:8325), so with them its window no longer grows to 24300 and the
    # undo is not reached; without them the adapter's states are those the defect was found
    # with (the file keeps them: the other stacks' stored verdicts are judged on it as it is).
    trace.events = [ev._replace(app_limited=False) if isinstance(ev, Sent) else ev for ev in trace.events]
    result = replay(trace, ["quiche@0.30.0"])
    last = result.runs["quiche@0.30.0"].snapshots[-2:]
    assert [s.cwnd for s in last] == [17010, 24300] and last[1].recovery_start_us == trace.events[-1].t
    assert not result.violations


def test_growth_after_a_missed_congestion_event_is_reported_once():
    """Harness defect found by fuzzing, fixed in invariants.py: quiche skips a congestion event
    (its idle-restart shift put the lost packet inside the old recovery period: documented,
    missing-reduction) and then grows on ACKs of packets sent after that loss; the checker
    reported that growth again as growth-in-recovery of the period quiche never entered.  The
    missed event itself is a finding since the waiver audit (nothing upstream means it:
    docs/waiver-audit.md); the growth after it is still not reported again."""
    trace = load_trace(str(ROOT / "fuzz" / "reproducers" / "quiche-missed-event-then-growth.jsonl"))
    result = replay(trace, ["quiche@0.30.0"])
    assert [s.cwnd for s in result.runs["quiche@0.30.0"].snapshots[-2:]] == [8400, 9600]
    assert [(f.invariant, f.status) for f in result.findings] == [("missing-reduction", "violation")]


def test_quiche_css_epoch_counts_idle_time():
    """Pins a quiche bug found by fuzzing (fails once fixed): after HyStart++ leaves slow start
    through CSS, congestion avoidance measures t from css_start_time (cubic.rs:280-281), which
    the idle-restart shift (cubic.rs:174-193, recovery start only) never moves.  After 7 s idle
    the first round trip grows at the 1.5x cap; without HyStart++ the same trace is clean."""
    trace = load_trace(str(ROOT / "fuzz" / "reproducers" / "quiche-css-epoch-counts-idle.jsonl"))
    result = replay(trace, ["quiche@0.30.0", "quiche@0.30.0:hystart=off", QUICHE])
    found = {(f.stack, f.invariant) for f in result.violations}
    assert found == {("quiche@0.30.0", "idle-inflation"), (QUICHE, "idle-inflation")}
    assert [s.cwnd for s in result.runs["quiche@0.30.0"].snapshots[-8::7]] == [25800, 29400]


def test_hystart_seen_when_css_begins_part_way_through_an_ack():
    """A misfire found by fuzzing pristine quiche (2026-11-29, reported "new, strict"): the
    18-packet ACK that carries HyStart++'s RTT increase grows cwnd by one datagram per packet
    until CSS begins and by a quarter after (+12,600 of 21,600 bytes).  The `hystart` trigger
    looked for growth under half the acked bytes only, so the documented hystart-plus-plus
    deviation could not explain the divergence it starts.  With HyStart++ off, no divergence."""
    trace = load_trace(str(ROOT / "fuzz" / "reproducers" / "quiche-css-entry-mid-ack.jsonl"))
    assert trace.reachability == "strict"
    result = replay(trace, ["quiche@0.30.0", QUICHE, "quiche@0.30.0:hystart=off"])
    assert [s.cwnd for s in result.runs[QUICHE].snapshots[19:21]] == [13200, 25800]
    assert result.runs[QUICHE].triggers.first["hystart"] == 20
    assert {(f.stack, f.invariant, f.status) for f in result.findings if f.invariant == "trajectory-divergence"} == {
        ("quiche@0.30.0", "trajectory-divergence", "deviation"), (QUICHE, "trajectory-divergence", "deviation")}
    assert not result.violations


def test_a_loss_in_a_recovery_period_the_stack_undid_is_its_first_there():
    """quiche's own connection (2026-11-29, its losses read from its counters) was convicted of
    excess-reduction: it rolled back a congestion event (undo-on-few-losses, documented) and then
    reduced, by beta, on the loss of a packet sent before that event.  With the reduction it undid
    the period: the checker now judges that signal as the stack's first there (late_entry)."""
    trace = load_trace(str(ROOT / "fuzz" / "reproducers" / "quiche-loss-in-undone-period.jsonl"))
    assert trace.reachability == "strict"
    result = replay(trace, [QUICHE, "quiche@0.30.0"])
    assert result.violations == []
    cwnd = [s.cwnd for s in result.runs[QUICHE].snapshots]
    assert cwnd[9:] == [6615, 6615, 9450, 6615]        # reduced, rolled back, reduced by beta again


def test_a_loss_of_a_packet_sent_in_the_microsecond_the_stack_set_its_start_is_judged_either_way():
    """AFL++ stored a new strict missing-reduction on pristine quiche 0.30.0: an ACK starts its
    CUBIC epoch (its recovery start), a packet sent after that ACK in the same microsecond is
    lost, and quiche, comparing sent_time <= start, calls it part of the period.  On a real
    clock the send comes after (quiche reads Instant::now() again to send): with those sends
    1 us later quiche reduces.  The trace's clock cannot place the packet: no verdict either way."""
    from ccdiff.trace import Sent
    trace = load_trace(str(ROOT / "fuzz" / "reproducers" / "quiche-epoch-tie-same-microsecond.jsonl"))
    assert trace.reachability == "strict"
    result = replay(trace, ["quiche@0.30.0"])
    assert result.violations == []
    run = result.runs["quiche@0.30.0"]
    assert run.snapshots[-2].recovery_start_us == trace.events[-1].t - 10_000 == trace.events[-7].t
    assert run.snapshots[-1].cwnd == run.snapshots[-2].cwnd             # quiche kept its window
    later = [e._replace(t=e.t + 1) if isinstance(e, Sent) and e.t == 155_000 else e for e in trace.events]
    shifted = replay(type(trace)(trace.header, later, trace.source), ["quiche@0.30.0"])
    cwnd = [s.cwnd for s in shifted.runs["quiche@0.30.0"].snapshots[-2:]]
    assert cwnd[1] < cwnd[0] and not shifted.violations                # on a later clock it reduces


def test_picoquic_idle_uses_w_cubic_uncapped():
    """Pins a picoquic bug found by fuzzing under the reachability rules (fails once fixed):
    a strict trace, the application's idle period declared.  After 17 s idle the first ACK in
    congestion avoidance sets cwnd to W_cubic(t), t counted from the start of the idle
    (cubic.c:287-307: the epoch moves only to the last sender-limited time, and no 1.5 x cwnd
    target caps it).  The oracle, idle time excluded (RFC 9438 §4.2), barely moves."""
    trace = load_trace(str(ROOT / "fuzz" / "reproducers" / "picoquic-idle-uncapped-wcubic.jsonl"))
    assert trace.reachability == "strict"
    result = replay(trace, ["oracle", "picoquic"])
    assert [(f.stack, f.invariant) for f in result.violations] == [("picoquic", "ca-growth-bound")]
    before, after = [s.cwnd for s in result.runs["picoquic"].snapshots[-2:]]
    assert before == 11759 and after > 1_000_000      # 11,759 -> 1,798,021 bytes
    assert result.runs["oracle"].snapshots[-1].cwnd < 10_000


def test_engine_that_cannot_start_is_a_setup_error(tmp_path, monkeypatch):
    """An engine refusing its environment ends the run with exit 2 and its log, not a silent 0."""
    harness(resolve(QUICHE), "afl")
    env_bad = {"ASAN_OPTIONS": "symbolize=1"}     # afl-fuzz refuses this
    result = subprocess.run([sys.executable, "-m", "ccdiff", "fuzz", "--stack", QUICHE, "--engine", "afl",
                             "--time", "30s", "--findings", str(tmp_path)], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={**__import__("os").environ, **env_bad})
    assert result.returncode == 2, result.stderr[-2000:]
    assert "afl exited with" in result.stderr and "ASAN_OPTIONS" in result.stderr


@pytest.mark.parametrize("engine", ["plain", "afl", "honggfuzz"])
def test_quiche_builds_keep_debug_assertions_and_overflow_checks(engine):
    """Rust has no ASan on stable; what stands in for it is the adapter's release profile
    (debug-assertions, overflow-checks: implementations/quiche/adapter/Cargo.toml).  The
    fuzzers' sancov build (RUSTFLAGS) and the plain build must both keep it: the adapter
    reports what its build has armed, probed at run time."""
    exe = harness(resolve(QUICHE), engine)
    result = subprocess.run([str(exe)], input=b"", env=dict(harness_env(resolve(QUICHE)), CCDIFF_FUZZ_DESCRIBE="1"),
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert b"debug-assertions on, overflow-checks on" in result.stderr, result.stderr[-2000:]


def test_a_budget_stops_ddmin_early_with_a_trace_that_still_shows_the_finding():
    """Budget: the work a minimization may do, counted in replayed events (a report's bound,
    deterministic).  Cut short, ddmin's result is longer but still a reproducer."""
    from ccdiff.fuzzing.triage import Budget
    trace = load_trace(str(ROOT / "examples" / "death-spiral.jsonl"))
    key = next(k for k in signatures(trace, QUICHE) if k.startswith("future-recovery-start--"))
    full = minimize(trace, QUICHE, key)
    budget = Budget(3 * len(trace.events))
    cut_short = minimize(trace, QUICHE, key, budget=budget)
    assert budget.exhausted and len(full.events) < len(cut_short.events) <= len(trace.events)
    assert key in signatures(cut_short, QUICHE)
    assert minimize(trace, QUICHE, key, budget=Budget(10 ** 9)).events == full.events

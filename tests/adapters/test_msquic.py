"""msquic CUBIC adapter (implementations/msquic): windows from src/core/cubic.c's own arithmetic.

Each test re-creates a case of msquic's own src/core/unittest/CubicTest.cpp (on msquic main;
the 2.5.1 crate ships no CubicTest.cpp) as a trace, or derives the window by hand from
cubic.c 2.5.1, with the arithmetic in the docstring.  1200-byte datagrams: the adapter's
path is IPv4 with MTU 1228, so DatagramPayloadLength = 1228 - 20 - 8 = 1200.

  slow start: cwnd += BytesAcked (cubic.c:527-545)
  loss:       W_max = cwnd, cwnd = ssthresh = max(2 x 1200, cwnd x 7 / 10) (cubic.c:330-367)
  K (ms):     (CubeRoot((W_max / 1200 x 3 << 9) / 4) x 1000) >> 3 (cubic.c:353-358)
"""
from __future__ import annotations

import json

import pytest

from ccdiff.build import ensure_built
from ccdiff.errors import SetupError
from ccdiff.paths import implementations_dir, project_root
from ccdiff.recipes import folder_module
from ccdiff.replay import replay
from ccdiff.trace import load_trace, parse_trace_text

from .common import MDS, run_events, run_marked, sent

SPEC = "msquic@2.5.1"
# msquic's K in integer milliseconds, from its folder's mechanisms.py (msquic-k-from-w-max)
msquic_k_ms = folder_module(implementations_dir() / "msquic", "mechanisms").msquic_k_ms


@pytest.fixture(scope="module", autouse=True)
def built():
    try:
        ensure_built(SPEC)
    except SetupError as exc:
        pytest.skip(f"msquic not buildable here: {exc}")


def ack(t, *pns, **extra):
    return dict(t=t, ev="ack", pns=list(pns), **extra)


def lost(t, *pns):
    return dict(t=t, ev="lost", pns=list(pns))


def test_initial_window_and_slow_start():
    """QUIC_INITIAL_WINDOW_PACKETS = 10: 12000 bytes; each ACK adds its bytes (cubic.c:527-531),
    up to 2 x BytesInFlightMax (cubic.c:664-666): with 2 packets sent that is 2 x 6000 (half
    the initial window, cubic.c:911), so the window stays at 12000; with 10 sent it grows."""
    snaps, _ = run_events([sent(0, 0), sent(0, 1), ack(100000, 0), ack(100000, 1)], SPEC)
    assert [s.cwnd for s in snaps] == [12000, 12000, 12000, 12000]
    snaps, _ = run_events([sent(0, pn) for pn in range(10)] + [ack(100000, 0), ack(100000, 1)], SPEC)
    assert [s.cwnd for s in snaps[-2:]] == [13200, 14400]
    assert snaps[-1].ssthresh is None and snaps[-1].phase == "slow_start"
    assert snaps[-1].w_max is None and snaps[-1].k_us is None   # 0 until a congestion event


def test_loss_reduces_by_beta_with_rfc8312_k():
    """CubicTest OnDataLost_WindowReduction: window x 7 / 10.  Here 13 packets sent, pn 0
    acked (13200), pn 1 lost: W_max = 13200, cwnd = ssthresh = 9240; K = CubeRoot((11 x 3
    << 9) / 4 = 4224) = 16 -> 16000 >> 3 = 2000 ms.  The recovery start is the loss's time."""
    events = [sent(0, pn) for pn in range(13)] + [ack(100000, 0), lost(100000, 1), ack(100000, 2)]
    snaps, _ = run_events(events, SPEC)
    after = snaps[-2]
    assert (after.cwnd, after.ssthresh, after.w_max, after.k_us) == (9240, 9240, 13200.0, 2_000_000.0)
    assert msquic_k_ms(13200, MDS) == 2000
    assert after.phase == "recovery" and after.recovery_start_us == 100000
    assert snaps[-1].cwnd == 9240          # the same instant's ACK: still in recovery


def test_recovery_ends_only_on_a_packet_sent_after_the_event():
    """CubicTest Recovery_StayOnOldAck / Recovery_ExitOnNewAck: RecoverySentPacketNumber is
    the largest packet sent at the loss (pn 12); ACKs up to it keep the window, the ACK of
    pn 13 ends recovery and starts the epoch (TimeOfCongAvoidStart, cubic.c:434-446)."""
    events = [(0, sent(0, pn), None) for pn in range(13)] + [
        (100000, ack(100000, 0), None), (100000, lost(100000, 1), None), (100000, ack(100000, 2), None),
        (100000, sent(100000, 13), None),
        (150000, ack(150000, 12), "old"),
        (200000, ack(200000, 13), "new")]
    snaps, _ = run_marked([(t, {k: v for k, v in e.items() if k != "t"}, m) for t, e, m in events], SPEC)
    assert snaps["old"].phase == "recovery" and snaps["old"].cwnd == 9240
    assert snaps["new"].phase == "congestion_avoidance" and snaps["new"].epoch_start_us == 200000


def test_persistent_congestion_is_one_call_with_the_flag():
    """msquic reports persistent congestion as a flag of the loss (loss_detection.c:1071):
    the adapter re-applies the held loss as one call, so β is applied once (msquic #2231
    fixed a 0.7 x 0.7).  pn 0 acknowledged at 100 ms (13200), pn 10 and 11 sent 1.1 s apart
    after that sample, everything lost at 2 s: W_max = ssthresh = 13200 x 7 / 10 = 9240,
    cwnd = 2 x 1200, K = 0 (cubic.c:318-327)."""
    events = [sent(0, pn) for pn in range(10)] + [
        ack(100000, 0), sent(150000, 10), sent(1_200_000, 11),
        lost(2_000_000, *range(1, 12)), dict(t=2_000_000, ev="persistent_congestion")]
    snaps, _ = run_events(events, SPEC)
    pc = snaps[-1]
    assert (pc.cwnd, pc.ssthresh, pc.w_max, pc.k_us) == (2400, 9240, 9240.0, 0.0)
    assert snaps[-2].cwnd == 9240          # the loss alone (provisional): one β
    assert pc.phase == "recovery"          # the collapse keeps a recovery period (profile)


def test_spurious_loss_undoes_the_reduction():
    """CubicTest SpuriousCongestion_StateRollback: when the ACK of the lost packet empties
    LostPackets, OnSpuriousCongestionEvent restores the window before the event (cubic.c:787-799)."""
    events = [sent(0, pn) for pn in range(13)] + [
        ack(100000, 0), lost(100000, 1), ack(100000, 2), ack(120000, 1)]
    snaps, _ = run_events(events, SPEC)
    assert snaps[-2].cwnd == 9240
    assert snaps[-1].cwnd == 13200 and snaps[-1].recovery_start_us is None


def test_a_late_ack_is_spurious_while_msquic_keeps_the_lost_packet_2_pto():
    """ABI 4 hands the adapter the peer's max_ack_delay, which msquic's PTO adds
    (loss_detection.c:226-245) and so how long it keeps a lost packet (2 PTO, 936-957).
    pn 0-2 sent at 0, pn 3-12 at 90 ms; pn 12 acknowledged at 100 ms (SRTT 10 ms, RTTVAR
    5 ms) and pn 1 lost then.  The ACK of pn 3 at 130 ms with a 25 ms ack delay (sample
    15 ms: SRTT 10.6 ms, RTTVAR 5 ms) runs the retention scan: 2 PTO = 2 x (30.6 ms +
    max_ack_delay).  With the default 25 ms (111 ms) msquic forgets pn 1 there and the ACK
    of pn 1 at 400 ms changes nothing; with 200 ms (461 ms) it empties LostPackets and the
    reduction is undone (cubic.c:787-799)."""
    events = [sent(0, pn) for pn in range(3)] + [sent(90000, pn) for pn in range(3, 13)] + [
        ack(100000, 12), lost(100000, 1), ack(130000, 3, ack_delay=25000), ack(400000, 1)]
    snaps, _ = run_events(events, SPEC)
    assert [s.cwnd for s in snaps[-3:]] == [9240, 9240, 9240]
    snaps, _ = run_events(events, SPEC, max_ack_delay=200_000)
    assert [s.cwnd for s in snaps[-3:]] == [9240, 9240, 13200]


def test_options_are_checked_by_name():
    text = "\n".join([json.dumps({"ccdiff_trace": 1, "max_datagram_size": MDS}), json.dumps(sent(0, 0))])
    with pytest.raises(SetupError, match="hystart: unknown value 'sideways'"):
        replay(parse_trace_text(text), [SPEC + ":hystart=sideways"])
    with pytest.raises(SetupError, match="unknown option 'idle_fix'"):
        replay(parse_trace_text(text), [SPEC + ":idle_fix=on"])
    replay(parse_trace_text(text), [SPEC + ":hystart=on"])


AIMD_WRAP = "fuzz/reproducers/msquic-aimd-accumulator-wrap.jsonl"


def test_aimd_accumulator_wraps_and_the_window_runs_away():
    """msquic 2.5.1's Reno-friendly accumulator (cubic.c:630-638) adds the new AimdWindow's
    size back, `AimdWindow += DPL; AimdAccumulator -= AimdWindow`, in uint32: when the ACK
    that crosses the threshold leaves less than one datagram over it, the accumulator wraps
    to ~4.29e9 and every later ACK adds a datagram to AimdWindow, which the window follows
    in the Reno-friendly region.  The reproducer: one loss, then one 1200-byte ACK every
    10 ms.  AimdWindow = 9240 after the loss; the accumulator reaches 9600 (16 ACKs of 600)
    > 9240: AimdWindow = 10440, accumulator = 9600 - 10440 < 0 -> wraps.  From then on the
    window grows by exactly one datagram per ACK (RFC 9438 §4.3 allows ~0.5 per RTT) until
    2 x BytesInFlightMax.  Pinned: a fix changes these numbers."""
    trace = load_trace(str(project_root() / AIMD_WRAP))
    res = replay(trace, [SPEC])
    run = res.runs[SPEC]
    acks = [s.cwnd for s, line in zip(run.snapshots, (project_root() / AIMD_WRAP).read_text().splitlines()[1:])
            if '"ack"' in line]
    steps = [b - a for a, b in zip(acks, acks[1:])]
    assert steps.count(MDS) >= 5, steps
    assert {f.invariant for f in res.findings if f.stack == SPEC and f.status == "violation"} == {"ca-off-curve"}


def test_the_aimd_wrap_reproducer_is_one_msquics_connection_could_send():
    """The maintainer's first objection: strict (RFC 9002-valid losses and ACKs), and no send
    overfills msquic's own window (ccdiff/window_reach.py); a time shift or a packet-number
    offset keeps the verdict (tests/test_metamorphic.py runs the relations on it)."""
    from ccdiff.fuzzing.triage import window_of
    trace = load_trace(str(project_root() / AIMD_WRAP))
    assert trace.reachability == "strict" and window_of(trace, SPEC) is None


# Kept with the stack, not in fuzz/reproducers: in the shared metamorphic corpus it moves
# other stacks' verdicts under splits and (picoquic) a time shift, not yet classified.
ECN_UNDO = "implementations/msquic/reproducers/msquic-ecn-spurious-undo-zero-window.jsonl"

CRASH_CHILD = """
import sys
from ccdiff.replay import replay
from ccdiff.trace import parse_trace_text
replay(parse_trace_text(sys.stdin.read()), [sys.argv[1]])
print("survived")
"""


def test_spurious_undo_after_an_ecn_event_zeroes_the_window():
    """An ACK with a new CE mark that also reveals the loss of pn 4 and 5: loss_detection.c
    runs ECN before loss detection (1523-1566, 1597), so OnEcn makes the congestion event
    (12000 -> 8400) without saving undo state (`if (!Ecn)`, cubic.c:297-305) and the loss,
    inside that recovery, changes nothing.  The late ACK of pn 4 and 5 empties LostPackets:
    OnSpuriousCongestionEvent (loss_detection.c:1384) checks only IsInRecovery (cubic.c:775)
    and restores Prev* never saved: cwnd = ssthresh = 0 (cubic.c:790-796).  msquic main
    pins the same in CubicTest.cpp ECN_SpuriousRollbackRestoresStaleState, calling the
    controller directly; this is msquic's own connection order reaching it."""
    trace = load_trace(str(project_root() / ECN_UNDO))
    assert trace.reachability == "strict"
    res = replay(trace, [SPEC])
    snaps = res.runs[SPEC].snapshots
    assert (snaps[-2].cwnd, snaps[-2].phase) == (8400, "recovery")
    assert (snaps[-1].cwnd, snaps[-1].ssthresh) == (0, 0)
    assert {f.invariant for f in res.findings if f.stack == SPEC and f.status == "violation"} == {"numeric-error"}
    from ccdiff.fuzzing.triage import window_of
    assert window_of(trace, SPEC) is None


def test_the_next_ack_divides_by_the_zero_window():
    """With cwnd = ssthresh = 0 the next ACK takes the congestion-avoidance branch and
    computes (TargetWindow - cwnd) x datagram / cwnd (cubic.c:649-650): an integer division
    by zero, SIGFPE in the process that runs msquic.  Run in a child: it kills it."""
    import signal
    import subprocess
    import sys
    text = (project_root() / ECN_UNDO).read_text() + json.dumps({"t": 200000, "ev": "ack", "pns": [10]}) + "\n"
    child = subprocess.run([sys.executable, "-c", CRASH_CHILD, SPEC], input=text, text=True,
                           capture_output=True, cwd=project_root(), timeout=120)
    assert child.returncode == -signal.SIGFPE, (child.returncode, child.stdout, child.stderr[-500:])


def _native_test(tmp_path):
    """tests/adapters/msquic_native/cubic_findings_test.c, compiled against the pinned build's
    copy of cubic.c (build/msquic/2.5.1/work/gen) and the adapter's shim."""
    import shutil
    import subprocess
    from ccdiff.paths import build_dir, implementations_dir
    gen = build_dir() / "msquic" / "2.5.1" / "work" / "gen"
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None or not (gen / "cubic.c").is_file():
        pytest.skip("needs gcc and the msquic@2.5.1 build")
    exe = tmp_path / "cubic_findings_test"
    subprocess.run([cc, "-std=gnu11", "-O1", "-Wno-unknown-pragmas", f"-I{gen}",
                    f"-I{implementations_dir() / 'msquic' / 'shim'}", "-o", str(exe),
                    str(project_root() / "tests/adapters/msquic_native/cubic_findings_test.c")],
                   check=True, capture_output=True)
    return lambda arg: subprocess.run([str(exe), arg], capture_output=True, text=True, timeout=60)


def test_native_aimd_wrap(tmp_path):
    """The AIMD wrap in C against cubic.c alone: 40 one-packet ACKs after a loss at an
    11-packet window grow AimdWindow from 9240 to 39240 (one datagram per ACK once wrapped);
    with the two lines in RFC 3465's order the program exits 1 (checked by hand: 11640)."""
    run = _native_test(tmp_path)("aimd")
    assert run.returncode == 0 and "AimdWindow 9240 -> 39240" in run.stdout, run.stdout


def test_native_ecn_undo_and_division_by_zero(tmp_path):
    """OnEcn, a loss inside its recovery, OnSpuriousCongestionEvent: cwnd = ssthresh = 0; the
    next OnDataAcknowledged dies of SIGFPE (cubic.c:650)."""
    import signal
    native = _native_test(tmp_path)
    undo = native("ecn-undo")
    assert undo.returncode == 0 and "after undo: cwnd 0 ssthresh 0" in undo.stdout, undo.stdout
    assert native("ecn-undo-divide").returncode == -signal.SIGFPE

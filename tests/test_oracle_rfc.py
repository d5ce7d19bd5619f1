"""The oracle pinned to RFC 9438 / RFC 9002 numbers.  Each test names its section."""
import math

import pytest

from oracle.cubic import ALPHA_AIMD, BETA, C, cubic_k_seconds

from .flow import MDS, Flow

RTT = 100_000


def flow_in_avoidance(w_max_segments: int) -> Flow:
    """Slow start to exactly w_max_segments, then one loss: CA with W_max known."""
    flow = Flow()
    cwnd = 10
    while cwnd < w_max_segments:
        n = min(cwnd, w_max_segments - cwnd)
        flow.round_trip(n, RTT)
        cwnd += n
    # One flight at W_max, the first packet lost: one congestion event.
    flight = flow.send(w_max_segments)
    flow.wait(RTT)
    flow.lose(flight[:1])
    flow.ack(flight[1:])
    # Packets sent at the very instant recovery started still belong to it (RFC 9002
    # §7.3.2 uses sent_time <= recovery start): the next flight goes 100 us later.
    flow.wait(100)
    return flow


def test_initial_window_rfc9002_7_2():
    """RFC 9002 §7.2: initial window min(10 * mds, max(14720, 2 * mds))."""
    assert Flow().send(1) and Flow().last is not None
    flow = Flow()
    flow.send(1)
    assert flow.last().cwnd == 12000
    big = Flow(mds=1500)
    big.send(1)
    assert big.last().cwnd == 14720


def test_slow_start_doubles_per_rtt_rfc9002_7_3_1():
    """RFC 9002 §7.3.1: cwnd grows by the bytes acknowledged: doubling per round trip."""
    flow = Flow()
    windows = []
    for _ in range(3):
        flow.round_trip(flow_window := (windows[-1] if windows else 12000) // MDS, RTT)
        windows.append(flow.last().cwnd)
        assert flow_window
    assert windows == [24000, 48000, 96000]
    assert flow.last().phase == "slow_start"


def test_beta_reduction_rfc9438_4_6():
    """RFC 9438 §4.6: cwnd = ssthresh = cwnd * β_cubic with β_cubic = 0.7."""
    snaps = flow_in_avoidance(100).run()
    reduced = next(s for s in snaps if s.ssthresh is not None)
    assert BETA == 0.7
    assert reduced.cwnd == int(100 * MDS * 0.7)
    assert reduced.ssthresh == int(100 * MDS * 0.7)
    assert reduced.w_max == 100 * MDS
    assert reduced.phase == "recovery"


def test_k_rfc9438_4_2():
    """RFC 9438 §4.2 eq. 2: K = cbrt(W_max (1 - β) / C), in segments and seconds."""
    assert C == 0.4
    snaps = flow_in_avoidance(100).run()
    k_us = next(s.k_us for s in snaps if s.ssthresh is not None)
    assert k_us == pytest.approx(math.cbrt(100 * (1 - 0.7) / 0.4) * 1e6, rel=1e-9)
    assert cubic_k_seconds(100, 70) == pytest.approx(4.2172, abs=1e-4)


def test_window_returns_to_w_max_after_k_rfc9438_4_2():
    """RFC 9438 §4.2: W_cubic(K) = W_max: about K seconds into CA the window is back at W_max."""
    flow = flow_in_avoidance(100)
    k_s = cubic_k_seconds(100, 70)
    rounds = int(k_s * 1e6 / RTT)
    halfway = None
    for i in range(rounds):
        window = flow.last().cwnd // MDS
        flow.round_trip(window, RTT)
        if i == rounds // 2:
            halfway = flow.last().cwnd
    at_k = flow.last().cwnd
    assert halfway < 0.99 * 100 * MDS            # concave region: still below W_max at K/2
    assert at_k == pytest.approx(100 * MDS, rel=0.03)


def test_alpha_aimd_rfc9438_4_3():
    """RFC 9438 §4.3: α_cubic = 3 (1 - β) / (1 + β); W_est grows α segments per window acked."""
    assert ALPHA_AIMD == pytest.approx(3 * 0.3 / 1.7)
    assert ALPHA_AIMD == pytest.approx(0.5294, abs=1e-4)
    # A small W_max (the Reno-friendly region dominates): one window of ACKs grows the window
    # by about α segments.
    flow = flow_in_avoidance(12)
    start = flow.last().cwnd                      # 0.7 * 12 segments
    flow.round_trip(start // MDS, RTT)
    grown = flow.last().cwnd - start
    assert grown == pytest.approx(ALPHA_AIMD * MDS * (start // MDS * MDS) / start, rel=0.1)


def test_fast_convergence_rfc9438_4_7():
    """RFC 9438 §4.7: a reduction below the previous W_max sets W_max = cwnd (1 + β) / 2."""
    flow = flow_in_avoidance(100)
    flow.round_trip(2, RTT)                       # leave recovery
    before = flow.last().cwnd
    flight = flow.send(2)
    flow.wait(RTT)
    flow.lose(flight[:1])
    snap = flow.last()
    assert snap.w_max == pytest.approx(before * (1 + 0.7) / 2, rel=1e-4)
    assert snap.cwnd == int(before * 0.7)
    no_fc = Flow()
    no_fc.events = list(flow.events)
    assert no_fc.last("oracle:fast_convergence=off").w_max == pytest.approx(before, rel=1e-4)


def test_minimum_window_rfc9002_7_2():
    """RFC 9002 §7.2: reductions stop at 2 * max_datagram_size."""
    flow = Flow()
    for _ in range(8):
        flow.wait(100)
        flight = flow.send(3)
        flow.wait(RTT)
        flow.lose(flight[:1])
        flow.ack(flight[1:])
    snaps = flow.run()
    assert min(s.cwnd for s in snaps) == 2 * MDS
    assert snaps[-1].cwnd == 2 * MDS


def test_one_reduction_per_recovery_period_rfc9002_7_3_2():
    """RFC 9002 §7.3.2: losses of packets sent before the recovery start do not reduce again."""
    flow = Flow()
    flight = flow.send(6)
    flow.wait(RTT)
    flow.lose(flight[:1])
    flow.lose(flight[1:2])
    flow.ack(flight[2:])
    snaps = flow.run()
    assert snaps[6].cwnd == 8400 and snaps[7].cwnd == 8400
    assert snaps[8].cwnd == 8400        # ACK of packets sent before recovery: no growth


def test_persistent_congestion_rfc9002_7_6_2():
    """RFC 9002 §7.6.2: persistent congestion reduces cwnd to the minimum window."""
    flow = Flow()
    flow.round_trip(10, RTT)
    # Two lost packets further apart than (smoothed + max(4 rttvar, 1 ms) + 25 ms) * 3,
    # nothing acknowledged between them, sent after the first RTT sample: §7.6.2's
    # conditions (the validator checks them).
    flow.wait(100)
    flight = flow.send(2)
    flow.wait(5 * RTT)
    flight += flow.send(2)
    flow.wait(RTT)
    flow.lose(flight, persistent=True)
    snap = flow.last()
    assert snap.cwnd == 2 * MDS
    assert snap.recovery_start_us is None
    flow.round_trip(2, RTT)
    assert flow.last().cwnd == 4 * MDS          # back in slow start (cwnd < ssthresh)


def test_app_limited_ack_does_not_grow_rfc9002_7_8():
    """RFC 9002 §7.8: no growth on ACKs of packets sent while app-limited."""
    flow = Flow()
    flow.round_trip(3, RTT, app_limited=True)
    assert flow.last().cwnd == 12000


def test_a_later_cwnd_limited_send_makes_the_round_trip_cwnd_limited_rfc9438_5_8():
    """RFC 9438 §5.8 calls a flow application-limited when it is "currently sending less than
    what is allowed by the congestion window", RFC 9002 §7.8 the window underutilized "When
    bytes in flight is smaller than the congestion window": a send that fills the window, or
    one the trace does not mark, makes every packet sent up to it cwnd-limited, whatever its
    mark (Linux's tcp_is_cwnd_limited looks back the same way).  Its own marks decide the rest."""
    full = Flow()          # every send marked, the tenth fills the 12,000-byte window
    full.round_trip(10, RTT, app_limited=True)
    assert full.last().cwnd == 24000
    paced = Flow()         # marked sends with room, then one the application did not limit
    flight = paced.send(3, app_limited=True) + paced.send(1)
    paced.wait(RTT).ack(flight[:3])
    assert paced.last().cwnd == 12000 + 3 * MDS
    tail = Flow()          # unmarked sends, then a marked one: the unmarked ones still grow it
    flight = tail.send(3) + tail.send(1, app_limited=True)
    tail.wait(RTT).ack(flight)
    assert tail.last().cwnd == 12000 + 3 * MDS


def test_idle_shifts_epoch_by_the_gap_and_never_past_now_rfc9438_4_2():
    """RFC 9438 §4.2: t excludes idle; idle runs from the last ACK, not the last send."""
    flow = flow_in_avoidance(40)
    for _ in range(5):
        flow.round_trip(flow.last().cwnd // MDS, RTT)
    epoch = flow.last().epoch_start_us
    last_ack = flow.now
    flow.wait(2_000_000)
    flow.send(1)
    snap = flow.last()
    assert snap.epoch_start_us == epoch + 2_000_000       # shifted by the idle gap, from the last ACK
    assert snap.epoch_start_us <= flow.now
    mutant = Flow()
    mutant.events = list(flow.events)
    # The quiche-before-0.28 mutant measures idle from the last send and shifts the one
    # field that is both epoch and recovery start: it lands after now.
    bad = mutant.last("oracle:idle=last-send")
    assert bad.recovery_start_us > flow.now
    assert last_ack > 0
    assert mutant.last("oracle:idle=none").epoch_start_us == epoch


def test_spurious_loss_undo_rfc9438_4_9():
    """RFC 9438 §4.9: with undo on, a loss that proves spurious restores the window."""
    flow = Flow()
    flight = flow.send(4)
    flow.wait(RTT)
    flow.lose(flight[:1])
    flow.ack(flight[1:])
    flow.wait(1000)
    flow.ack(flight[:1])                    # the "lost" packet arrives after all
    assert flow.last("oracle:undo=on").cwnd == 12000
    assert flow.last("oracle").cwnd == 8400


def test_newreno_halves_and_grows_one_datagram_per_window_rfc9002_7_3():
    """RFC 9002 §7.3.2 halving (kLossReductionFactor 0.5) and §7.3.3 additive increase."""
    flow = Flow()
    flight = flow.send(10)
    flow.wait(RTT)
    flow.lose(flight[:1])
    flow.ack(flight[1:])
    assert flow.last("oracle-reno").cwnd == 6000
    flow.wait(100)
    flow.round_trip(5, RTT)
    # 5 ACKs of one datagram each add mds * acked / cwnd: a little under one datagram.
    assert 6000 + 0.9 * MDS < flow.last("oracle-reno").cwnd <= 6000 + MDS


def test_ssthresh_floor_two_segments_rfc9438_eq_4_6():
    """RFC 9438 §4.6 (equation after "Multiplicative Decrease"): ssthresh = max(ssthresh, 2),
    "ssthresh is at least 2 MSS" -- also when the reduction starts at the minimum window."""
    flow = Flow()
    for _ in range(8):
        flow.wait(100)
        flight = flow.send(3)
        flow.wait(RTT)
        flow.lose(flight[:1])
        flow.ack(flight[1:])
    snaps = flow.run()
    reduced = [s.ssthresh for s in snaps if s.ssthresh is not None]
    assert min(reduced) == 2 * MDS
    assert snaps[-1].ssthresh == 2 * MDS and snaps[-1].cwnd == 2 * MDS


def collapse_then_slow_start_to_avoidance() -> Flow:
    """Slow start to 24,000 bytes, the next flight lost with persistent congestion, then
    slow start from the minimum window until it crosses ssthresh = 16,800."""
    flow = Flow()
    flow.round_trip(10, RTT)
    flow.wait(100)          # RFC 9002 §7.6.2: lost packets sent after the first RTT sample,
    flight = flow.send(2)   # two of them further apart than the persistent congestion duration
    flow.wait(12 * RTT)
    flight += flow.send(2)
    flow.wait(4 * RTT)
    flow.lose(flight, persistent=True)
    flow.wait(100)
    for packets in (2, 4, 8, 16):
        flow.round_trip(packets, RTT)
    return flow


def test_first_avoidance_after_timeout_has_k_zero_rfc9438_4_8():
    """RFC 9438 §4.8: in the first congestion avoidance stage after a timeout "K is set to 0"
    and W_max is the window at the beginning of that stage."""
    snaps = collapse_then_slow_start_to_avoidance().run()
    collapse = next(i for i, s in enumerate(snaps) if s.cwnd == 2 * MDS)
    in_avoidance = [s for s in snaps[collapse:] if s.epoch_start_us is not None]
    assert in_avoidance, "the flow never reached congestion avoidance"
    first = in_avoidance[0]
    assert first.k_us == 0
    assert first.w_max <= first.cwnd
    assert snaps[collapse].ssthresh == int(24000 * BETA)


def test_undo_only_below_cwnd_prior_rfc9438_4_9():
    """RFC 9438 §4.9: restore the saved variables only "if cwnd < cwnd_prior": a window that
    already grew back past cwnd_prior keeps its value when the loss proves spurious."""
    flow = Flow()
    flight = flow.send(10)
    flow.wait(RTT)
    flow.lose(flight[:1])
    flow.ack(flight[1:])
    flow.wait(100)
    while flow.last("oracle:undo=on").cwnd < 12000 + 4 * MDS:
        flow.round_trip(flow.last("oracle:undo=on").cwnd // MDS, RTT)
    grown = flow.last("oracle:undo=on").cwnd
    flow.ack(flight[:1])                    # the "lost" packet arrives after all
    assert flow.last("oracle:undo=on").cwnd >= grown


def test_ack_that_reveals_persistent_congestion_grows_from_the_minimum_rfc9002_b4_b8():
    """RFC 9002 Appendix B.4 OnAckReceived calls OnPacketsLost before OnPacketsAcked, and B.8
    sets congestion_recovery_start_time = 0 on persistent congestion: the newly acknowledged
    packets of that same ACK then grow the minimum window in slow start (B.5).  This is no
    undo (ngtcp2 1.25.0 does the same on persistent-congestion seed 1: 2,400 -> 378,000), and
    a spurious-loss undo saved before the collapse is dropped (RFC 9438 §4.9 restores only a
    reduction, not a collapse)."""
    flow = Flow()
    flow.round_trip(10, RTT)
    flow.wait(100)          # RFC 9002 §7.6.2: lost packets sent after the first RTT sample,
    lost = flow.send(2)     # two of them further apart than the persistent congestion duration
    flow.wait(12 * RTT)
    lost += flow.send(2)
    flow.wait(10)
    late = flow.send(6)
    flow.wait(4 * RTT)
    flow.lose(lost, persistent=True)
    flow.ack(late)
    assert flow.last().cwnd == 2 * MDS + 6 * MDS
    assert flow.last().phase == "slow_start"
    flow.wait(100)
    flow.ack(lost[:1])                     # one "lost" packet arrives after all
    assert flow.last("oracle:undo=on").cwnd == 8 * MDS

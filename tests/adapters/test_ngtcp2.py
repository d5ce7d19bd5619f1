"""ngtcp2 adapter (implementations/ngtcp2): expected windows from ngtcp2's own code.

ngtcp2's only controller unit test upstream (tests/ngtcp2_cc_test.c,
test_ngtcp2_cbrt) covers the integer cube root, and the ngtcp2-sys crate
ships no tests, so the numbers below are derived by hand from ngtcp2 1.25.0
(lib/ngtcp2_cc.c, lib/ngtcp2_rtb.c, lib/ngtcp2_rst.c; "cc.c:N" etc.).  Each
docstring shows the arithmetic.  They were also re-computed with an
independent transcription of cc.c's integer formulas, and they pin the
adapter's calling order: rate sample before the congestion event, the
congestion event before on_ack_recv, one summary per ACK frame, ngtcp2's
app-limited accounting.

Constants: mds = 1200, so the initial window is
min(10 * 1200, max(2 * 1200, 14720)) = 12000 (cc.c:38-41).  RTT samples are
all 10 ms, so smoothed_rtt = 10 ms.  K is reported in us: k_m / 1024 s
(cc.h:299, cc.c:521-522).
"""
from __future__ import annotations


import pytest

from ccdiff.build import ensure_built
from ccdiff.clock import ENV_VAR
from ccdiff.errors import SetupError

from .common import run_events, sent

SPEC = "ngtcp2@1.25.0"
RENO = "ngtcp2-reno@1.25.0"
MDS = 1200


@pytest.fixture(scope="module", autouse=True)
def built():
    ensure_built(SPEC)


def run(events, spec=SPEC):
    return run_events(events, spec)


def four_then_loss():
    """4 packets at t=0; at 10 ms pn 0 is lost and pns 1-3 acked in one frame."""
    return ([sent(0, i) for i in range(4)]
            + [dict(t=10_000, ev="lost", pns=[0]), dict(t=10_000, ev="ack", pns=[[1, 3]])])


def test_describe_and_options():
    with pytest.raises(SetupError, match="hystart"):
        run([sent(0, 0)], "ngtcp2@1.25.0:hystart=on")
    with pytest.raises(SetupError, match="cc=cubic\\|reno"):
        run([sent(0, 0)], "ngtcp2@1.25.0:cc=bbr")


def test_slow_start_round():
    """Slow start grows by the bytes each ACK frame delivers (cc.c:332-341).

    10 packets at t=0, acked at 10 ms in two frames of 5:
    12000 + 6000 = 18000, then + 6000 = 24000.  ssthresh stays UINT64_MAX
    (None), no epoch yet (cubic_vars_reset, cc.c:198).  HyStart++ needs 8 RTT
    samples in a round (cc.c:383), so it does not act.
    """
    snaps, findings = run([sent(0, i) for i in range(10)]
                          + [dict(t=10_000, ev="ack", pns=[[0, 4]]),
                             dict(t=10_000, ev="ack", pns=[[5, 9]])])
    assert snaps[9].cwnd == 12000 and snaps[9].bytes_in_flight == 12000
    assert [s.cwnd for s in snaps[10:]] == [18000, 24000]
    assert snaps[-1].ssthresh is None and snaps[-1].phase == "slow_start"
    assert snaps[-1].epoch_start_us is None and snaps[-1].bytes_in_flight == 0
    assert findings == []


def test_loss_reduces_by_beta():
    """A loss among 10 packets: cwnd = ssthresh = 12000 * 7 / 10 = 8400 (cc.c:501).

    Rate sample of the ACK (rst.c:88-99, taken before the congestion event,
    rtb.c:954-959): 9 packets delivered = 10800; 10800 * 2 >= 12000, so the
    delivery bound of cc.c:503 does not apply.  W_max = 12000 (cwnd >= old
    W_max 0, cc.c:495), epoch = recovery start = 10 ms (cc.c:484-486),
    k_m = cbrt(((12000 - 8400) << 30) * 10 / 4 / 1200) = cbrt(8053063680)
    = 2004 -> K = 2004 / 1024 s = 1957031.25 us.  on_ack_recv then ignores the
    ACK: its largest packet was sent at 0 <= recovery start (cc.c:320-323).
    """
    snaps, _ = run([sent(0, i) for i in range(10)]
                   + [dict(t=10_000, ev="lost", pns=[0]), dict(t=10_000, ev="ack", pns=[[1, 9]])])
    after = snaps[-1]
    assert (after.cwnd, after.ssthresh) == (8400, 8400)
    assert after.recovery_start_us == 10_000 and after.epoch_start_us == 10_000
    assert after.w_max == 12000 and after.k_us == pytest.approx(1957031.25)
    assert after.phase == "recovery"


def test_loss_in_ack_uses_that_acks_rate_sample():
    """ngtcp2 detects the loss inside the ACK, after the ACK's rate sample.

    cwnd 12000; the ACK delivers 3 packets: rs.delivered = 3600 (rst.c:90).
    3600 * 2 < 12000, so (cc.c:503-507) flight_size = bytes in flight after
    the ACK and the loss (0) + bytes lost (1200) = 1200 and
    ssthresh = min(12000 * 7 / 10, max(3600, 1200)) = 3600 -> cwnd 3600.
    The CCD_LOST snapshot before it is the loss-timer path's provisional
    value (no rate sample yet, rs.delivered = 0; flight = 3600 + 1200):
    min(8400, max(0, 4800)) = 4800.  Applying the loss before the ACK (the
    wrong order) would leave 4800.  W_max 12000,
    k_m = cbrt(((12000 - 3600) << 30) * 10 / 4 / 1200) = 2658 -> 2595703.125 us.
    """
    snaps, _ = run(four_then_loss())
    lost, acked = snaps[4], snaps[5]
    assert (lost.cwnd, lost.ssthresh, lost.bytes_in_flight) == (4800, 4800, 3600)
    assert (acked.cwnd, acked.ssthresh, acked.bytes_in_flight) == (3600, 3600, 0)
    assert acked.w_max == 12000 and acked.k_us == pytest.approx(2595703.125)
    assert acked.recovery_start_us == 10_000


def idle_trace(app_limited_tail: bool):
    """After four_then_loss: 5 rounds of 2 packets, acked one frame per round
    (sends at 11, 21, ..., 51 ms, ACKs 10 ms later), 5 s idle, then 2 packets
    at 5061 ms acked at 5071 ms."""
    events = four_then_loss()
    pn, t = 4, 11_000
    for r in range(5):
        extra = {"app_limited": True} if app_limited_tail and r == 4 else {}
        events += [sent(t, pn, **extra), sent(t, pn + 1, **extra),
                   dict(t=t + 10_000, ev="ack", pns=[[pn, pn + 1]])]
        pn, t = pn + 2, t + 10_000
    t += 5_000_000
    events += [sent(t, pn), sent(t, pn + 1), dict(t=t + 10_000, ev="ack", pns=[[pn, pn + 1]])]
    return events


def ack_cwnds(events, snaps):
    return [s.cwnd for e, s in zip(events, snaps) if e["ev"] == "ack"]


def test_congestion_avoidance_and_idle_counts_in_t():
    """CUBIC avoidance per ACK frame, and an idle period that counts towards t.

    From cwnd 3600 (W_max 12000, k_m 2658, epoch 10 ms, w_est 3600,
    cwnd_prior 12000), each frame delivers 2400 bytes (cc.c:430-442):
    m = 2400 * 1200 / cwnd, w_est += m * 9 / 17 while w_est < cwnd_prior:
      21 ms: m = 800 -> w_est 3600 + 423 = 4023 > W_cubic(11 ms) = 3710 -> 4023
      31 ms: m = 2880000 / 4023 = 715 -> + 378 = 4401
      41 ms: m = 654 -> + 346 = 4747;  51 ms: m = 606 -> + 320 = 5067
      61 ms: m = 568 -> + 300 = 5368
    No packet is app-limited, so nothing is excluded from t, and ngtcp2 has no
    send-time epoch shift: at 5071 ms t = 5061 ms > K, W_cubic(t) = 19187,
    W_cubic(t + srtt) = 19272 > 1.5 * 5368, target = 5368 * 3 / 2 = 8052
    (cc.c:422-428); w_est = 5368 + 283 = 5651 < W_cubic, so (cc.c:447-455)
    cwnd += (8052 - 5368) * 1200 / 5368 = 600 -> 5968.  The epoch stays at
    10 ms.
    """
    events = idle_trace(app_limited_tail=False)
    snaps, _ = run(events)
    assert ack_cwnds(events, snaps) == [3600, 4023, 4401, 4747, 5067, 5368, 5968]
    assert {s.epoch_start_us for s in snaps[6:]} == {10_000}
    assert snaps[-1].phase == "congestion_avoidance"


def test_idle_after_app_limited_tail_is_excluded():
    """ngtcp2's app-limited accounting excludes the idle time (cc.c:402-420).

    The two packets sent at 51 ms are app-limited: the adapter sets
    rst.app_limited = delivered + bytes in flight (conn.c:12128) and
    ngtcp2_rst_on_pkt_sent marks them (rst.c:55).  Their ACK at 61 ms is an
    app-limited rate sample while not cwnd-limited: no growth (5067 stays),
    app_limited_start_ts = 61 ms, phase app_limited.  The ACK at 5071 ms is
    not app-limited: app_limited_duration = 5071 - 61 = 5010 ms, so the epoch
    in effect is 10 + 5010 = 5020 ms and t = 51 ms: W_cubic small, w_est path
    m = 2400 * 1200 / 5067 = 568 -> 5067 + 300 = 5368.
    """
    events = idle_trace(app_limited_tail=True)
    snaps, _ = run(events)
    assert ack_cwnds(events, snaps) == [3600, 4023, 4401, 4747, 5067, 5067, 5368]
    frozen = [s for e, s in zip(events, snaps) if e["ev"] == "ack"][5]
    assert frozen.phase == "app_limited" and frozen.epoch_start_us == 10_000
    assert snaps[-1].epoch_start_us == 5_020_000


def test_death_spiral_pattern_does_not_stick():
    """The quiche death-spiral pattern: ngtcp2 1.25.0 leaves the minimum.

    Collapse: rounds of 4 packets (at 0, 11, 22 ms), first lost and three
    acked 10 ms later: 12000 -> 3600 (see above) -> 2520 (cwnd < W_max:
    W_max = 3600 * 17 / 20 = 3060, ssthresh 3600 * 7 / 10 = 2520) -> 2400
    (2520 * 7 / 10 = 1764, floored at 2 * 1200, cc.c:509-510; W_max 2400,
    K 0).  Then 2 packets in flight, acked together each RTT, 2 new ones
    sent at the same instant: the ACK at 42 ms covers packets sent at the
    recovery start (32 ms) and is ignored (sent_ts <= start, cc.c:113-117);
    from 52 ms w_est grows (m = 2400 * 1200 / cwnd; 9/17 of it below
    cwnd_prior 2520, all of it above): 3035, 3983, 4706, 5318.  The epoch
    never moves (no send-time shift).
    """
    events, pn, t = [], 0, 0
    for _ in range(3):
        events += [sent(t, pn + i) for i in range(4)]
        events += [dict(t=t + 10_000, ev="lost", pns=[pn]),
                   dict(t=t + 10_000, ev="ack", pns=[[pn + 1, pn + 3]])]
        pn, t = pn + 4, t + 11_000
    t -= 1_000
    events += [sent(t, pn), sent(t, pn + 1)]
    pn += 2
    for _ in range(5):
        t += 10_000
        events += [dict(t=t, ev="ack", pns=[[pn - 2, pn - 1]]), sent(t, pn), sent(t, pn + 1)]
        pn += 2
    snaps, findings = run(events)
    assert ack_cwnds(events, snaps) == [3600, 2520, 2400, 2400, 3035, 3983, 4706, 5318]
    assert {s.epoch_start_us for s in snaps[18:]} == {32_000}
    assert not [f for f in findings if f.invariant in ("stuck-at-minimum", "future-recovery-start")]


def test_spurious_loss_is_undone():
    """All lost packets acknowledged -> on_spurious_congestion (rtb.c:949-952).

    After four_then_loss (cwnd 3600), pn 0 is acked at 12 ms.  CUBIC restores
    the state saved at the congestion event (cc.c:478-482, 536-541): cwnd
    12000, ssthresh UINT64_MAX, no epoch, recovery start cleared.  Then
    on_ack_recv credits the late packet's 1200 bytes (ngtcp2 counts acked
    lost entries, rtb.c:923-927) in slow start: 13200.
    """
    snaps, _ = run(four_then_loss() + [dict(t=12_000, ev="ack", pns=[0])])
    undone = snaps[-1]
    assert (undone.cwnd, undone.ssthresh) == (13200, None)
    assert undone.recovery_start_us is None and undone.epoch_start_us is None


def persistent_congestion_events():
    """RFC 9002 §7.6.2 holds: a 10 ms sample at 10 ms, then pns 10-14 lost 200 ms apart."""
    return ([sent(0, i) for i in range(10)] + [dict(t=10_000, ev="ack", pns=[[0, 9]])]
            + [sent(10_100 + 50_000 * i, 10 + i) for i in range(6)]
            + [dict(t=270_100, ev="lost", pns=[[10, 14]]),
               dict(t=270_100, ev="persistent_congestion"),
               dict(t=270_100, ev="ack", pns=[15])])


def test_persistent_congestion():
    """Persistent congestion: cwnd = 2 * mds, ssthresh kept (cc.c:556-568).

    10 packets acked at 10 ms (cwnd 24000), 6 more sent every 50 ms from
    10.1 ms; at 270.1 ms pns 10-14 (sent 200 ms apart, more than RFC 9002
    §7.6.1's (10 + 20 + 25) * 3 = 165 ms) are lost with persistent congestion
    and pn 15 acked.  In the ACK (rtb.c order): rs.delivered = 1200 (pn 15 was sent
    after 12000 bytes were delivered); 2400 < 24000 so ssthresh = min(16800,
    max(1200, 0 + 6000)) = 6000; then cwnd = 2400 and the recovery start is
    cleared, so on_ack_recv grows slow start by 1200: 3600, ssthresh 6000.
    The persistent_congestion snapshot itself (loss-timer path) is 2400.
    """
    snaps, findings = run(persistent_congestion_events())
    assert snaps[-2].cwnd == 2 * MDS
    assert (snaps[-1].cwnd, snaps[-1].ssthresh) == (3600, 6000)
    assert snaps[-1].recovery_start_us is None
    assert not [f for f in findings if f.invariant == "persistent-congestion-ignored"]


def test_reno_grows_before_the_loss_of_the_same_ack():
    """Reno credits acked packets (on_pkt_acked, rtb.c:921-930) before loss
    detection of the same ACK (rtb.c:958): slow start 12000 + 3 * 1200 =
    15600, then halved (cc.c:161): 7800 = ssthresh.  The provisional
    CCD_LOST snapshot is 12000 >> 1 = 6000."""
    snaps, _ = run(four_then_loss(), RENO)
    assert snaps[4].cwnd == 6000
    assert (snaps[5].cwnd, snaps[5].ssthresh) == (7800, 7800)
    assert snaps[5].epoch_start_us is None and snaps[5].w_max is None


def test_gap_fill_ack_is_not_held_by_recovery():
    """An ACK frame that only fills a gap skips CUBIC's recovery check.

    After four_then_loss the largest acked is pn 3.  Here pn 2 is held back:
    the loss ACK covers pns 1 and 3, pn 2 is acked alone at 12 ms.  Its frame
    does not raise the largest acked (rtb.c:825, 862-864), so
    largest_pkt_sent_ts stays UINT64_MAX and in_congestion_recovery() is
    false (cc.c:113-117, 320-321) although pn 2 was sent at 0 <= recovery
    start 10 ms.  The loss ACK delivered 2400: 4800 < 12000 so ssthresh =
    min(8400, max(2400, 1200 + 1200)) = 2400; the gap fill is then credited in
    congestion avoidance: w_est 2400 < cwnd_prior 12000, m = 1200 * 1200 /
    2400 = 600, w_est += 600 * 9 / 17 = 317 -> 2717.
    """
    events = ([sent(0, i) for i in range(4)]
              + [dict(t=10_000, ev="lost", pns=[0]), dict(t=10_000, ev="ack", pns=[1, 3]),
                 dict(t=12_000, ev="ack", pns=[2])])
    snaps, _ = run(events)
    assert snaps[5].cwnd == 2400
    assert snaps[6].cwnd == 2717


def avoidance_after_persistent_congestion():
    """Slow start from the collapsed 2400 to the kept ssthresh 6000, then two ACKs in avoidance."""
    events = persistent_congestion_events()
    pn, t = 16, 271_000
    for _ in range(2):
        events += [sent(t, pn), sent(t, pn + 1),
                   dict(t=t + 10_000, ev="ack", pns=[pn]), dict(t=t + 10_000, ev="ack", pns=[pn + 1])]
        pn, t = pn + 2, t + 10_000
    return events


def test_known_bug_avoidance_without_epoch_after_persistent_congestion():
    """Pins an ngtcp2 1.25.0 bug (reported by ccdiff; fails once fixed).

    Congestion avoidance with no epoch after cubic_vars_reset.  Persistent
    congestion resets CUBIC's variables (epoch_start = UINT64_MAX, w_max =
    w_est = 0, cc.c:194-205 via cc.c:562) but keeps ssthresh (6000, see
    test_persistent_congestion).  Slow start from 2400 reaches 6000 and the
    next ACKs run congestion avoidance with no epoch: cc.c:277 computes t =
    ts - UINT64_MAX = ts + 1 ns, i.e. the clock's whole uptime (capped at an
    hour, cc.c:290).  W_cubic is then enormous, the target is capped at
    1.5 x cwnd (cc.c:425) and the window grows by half a datagram per acked
    datagram (6000 -> 6600 -> 7200) with no epoch ever set: neither RFC
    9438's curve nor its Reno-friendly estimate.  The window stays above the
    minimum at a real clock (test_clock.py pins that the old clock near 0
    made it 240).
    """
    snaps, findings = run(avoidance_after_persistent_congestion())
    assert ack_cwnds(avoidance_after_persistent_congestion(), snaps)[-4:] == [4800, 6000, 6600, 7200]
    assert snaps[-1].epoch_start_us is None
    assert "cwnd-below-minimum" not in {f.invariant for f in findings}


def test_clock_near_zero_made_the_window_fall_below_the_minimum(monkeypatch):
    """The same trace with ngtcp2's clock at 1 us (the adapter's old mapping of trace time 0).

    With ts ~ 221 ms, W_cubic ~ 0 + a few bytes, w_est = 0 + m = 1200 * 1200 /
    6000 = 240 > W_cubic, so cwnd = w_est = 240 (cc.c:444-445): below the
    2 * 1200 minimum, a state no connection with an uptime-like clock reaches.
    """
    monkeypatch.setenv(ENV_VAR, "1")
    events = avoidance_after_persistent_congestion()
    snaps, findings = run(events)
    assert ack_cwnds(events, snaps)[-4:] == [4800, 6000, 240, 1440]
    assert "cwnd-below-minimum" in {f.invariant for f in findings}


def test_loss_after_persistent_congestion_at_the_same_time_starts_recovery():
    """A lost that follows persistent_congestion at the same time is applied after the collapse.

    Found by fuzzing (a harness defect, fixed in the adapter): the adapter merged it into the
    pending batch, which ngtcp2 applies before persistent congestion (rtb.c:1159, 1178-1185),
    so the collapse erased the recovery period the later loss starts and the ACK of a packet
    sent at that instant grew the window (growth-in-recovery).  Now the collapsed batch is
    committed first (loss-timer path): cwnd 2400, then pn 41's loss (sent at 30 ms, not in
    recovery) is a congestion event at 240 ms: ssthresh = max(1680, 2400) = cwnd = 2400 and
    the recovery start is 240 ms, so pn 51 (sent at 240 ms <= start, cc.c:113-117) is not
    credited.  (A 10 ms sample first and pns 46-47 sent 200 ms apart: RFC 9002 §7.6.2 holds.)
    """
    events = ([sent(0, 0), dict(t=10_000, ev="ack", pns=[0])]
              + [sent(30_000, pn) for pn in (41, 42, 46)] + [sent(230_000, 47)]
              + [dict(t=240_000, ev="lost", pns=[[46, 47]]), dict(t=240_000, ev="persistent_congestion"),
                 dict(t=240_000, ev="lost", pns=[41]), sent(240_000, 51), dict(t=250_000, ev="ack", pns=[51])])
    snaps, findings = run(events)
    assert snaps[7].cwnd == 2 * MDS and snaps[7].recovery_start_us is None
    assert (snaps[8].cwnd, snaps[8].recovery_start_us) == (2400, 240_000)
    assert (snaps[10].cwnd, snaps[10].recovery_start_us) == (2400, 240_000)
    assert not [f for f in findings if f.status == "violation"]

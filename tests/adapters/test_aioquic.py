"""The aioquic adapter drives aioquic's own Cubic / Reno modules the way QuicPacketRecovery does.

aioquic 1.7.2's sdist ships tests/test_congestion_cubic.py and test_congestion_reno.py.
They call the controller's methods directly and set private fields; each test below
reaches the same state through ccdiff events (sends, ACKs, losses, at aioquic's own
times and sizes: 1440-byte datagrams for Cubic, 1280 for Reno, 1280-byte packets) and
asserts the numbers the upstream test asserts, named after it.  Upstream tests that only
set fields the events cannot reach (test_congestion_avoidance's W_max of 5 segments,
test_convex/concave_region, test_cwnd_target, test_reno_friendly_region's W_est of
100000) are re-created on states the events do reach, with upstream's own formula
(cubic.py:47-50) for the expected window.  test_packet_expired (on_packets_expired, a
PTO's retransmission) is the shape aioquic's own qlog shows for it: a loss of the oldest
outstanding packet above the largest acknowledged one, then a send at once.

Shared facts: initial window 10 x max_datagram_size (base.py:8, 22), minimum 2 x
(base.py:9), beta 0.7 and C 0.4 (cubic.py:14-15), Reno halves (reno.py:11).  Stack time
is float seconds = (clock base + trace us) / 1e6; snapshots are read back in trace us.

The mutation tests break the adapter in process (its loaded module's Controller,
monkeypatched): the loss applied before the ACK's packets (RFC 9002's order, not
aioquic's), on_rtt_measurement dropped, and on_rtt_measurement called before the ACK's
packets.  Each makes an upstream-numbers test below fail.
"""
from __future__ import annotations

import json
import math

import pytest

from ccdiff.build import ensure_built
from ccdiff.pyadapter import load_module
from ccdiff.replay import replay
from ccdiff.stacks import resolve
from ccdiff.trace import parse_trace_text
from tests.adapters.common import run_marked   # absolute: the mutation check imports this file alone

SPEC = "aioquic"
RENO = "aioquic-reno"
S = 1_000_000          # trace microseconds per second
MS = 1000


@pytest.fixture(scope="module", autouse=True)
def built():
    ensure_built(SPEC)


def adapter_module():
    target = resolve(SPEC)
    return load_module(str(target.recipe.library(target.version)))


def run(events, spec=SPEC, mds=1440, check=False):
    """Replay (t, event dict, mark) rows; returns ({mark: snapshot}, findings)."""
    return run_marked(events, spec, mds=mds, check=check)


def sent(t, *pns, size=1280, mark=None):
    return [(t, dict(ev="sent", pn=pn, bytes=size), mark) for pn in pns]


def ack(t, pns, mark=None, ack_delay=0):
    return [(t, dict(ev="ack", pns=list(pns), ack_delay=ack_delay), mark)]


def lost(t, pns, mark=None):
    return [(t, dict(ev="lost", pns=list(pns)), mark)]


def cbrt(x):
    return -((-x) ** (1 / 3)) if x < 0 else x ** (1 / 3)       # better_cube_root, cubic.py:19-24


# -- test_congestion_cubic.py ----------------------------------------------------------

def test_slow_start():
    """test_slow_start: one acknowledged 1280-byte packet: 10 x 1440 + 1280 = 15680."""
    s, _ = run(sent(0, 0) + ack(500 * MS, [0], mark="ack"))
    assert s["ack"].cwnd == 10 * 1440 + 1280 == 15680
    assert s["ack"].ssthresh is None and s["ack"].phase == "slow_start"


def packet_lost_events():
    """test_packet_lost's calls as events: a packet sent at 200 s is lost at 210 s (loss
    timer: no ACK at that instant), a packet sent at 240 s is acknowledged at 250 s."""
    return (sent(200 * S, 0) + lost(210 * S, [0], mark="lost") + sent(240 * S, 1)
            + ack(250 * S, [1], mark="ack"))


def test_packet_lost():
    """test_packet_lost: recovery start 210 s, W_max = the previous window 14400,
    ssthresh = cwnd = 2 x 1440 (the flight after the loss is empty: max(int(0 x 0.7),
    2880), cubic.py:184-192).  The next ACK in congestion avoidance starts the epoch:
    t_epoch = 250 s, cwnd_epoch = 2880, K = cbrt((14400/1440 - 2880/1440) / 0.4) =
    cbrt(20) s, W_est = int(2880 + 1440 x 1280 / 2880) = 3520 (cubic.py:94-111); at t = 0
    W_cubic(0) = int((0.4 x (0 - K)^3 + 10) x 1440) < 3520: Reno-friendly, cwnd = W_est."""
    s, _ = run(packet_lost_events())
    after_loss = s["lost"]
    assert after_loss.recovery_start_us == 210 * S
    assert after_loss.w_max == 14400
    assert after_loss.ssthresh == after_loss.cwnd == 2 * 1440
    acked = s["ack"]
    assert acked.epoch_start_us == 250 * S
    assert acked.k_us == pytest.approx(cbrt((14400 / 1440 - 2880 / 1440) / 0.4) * 1e6)
    assert acked.cwnd == 2880 + 1440 * 1280 // 2880 == 3520
    assert acked.ssthresh == 2880 and acked.w_max == 14400


def test_persistent_congestion():
    """test_persistent_congestion: a loss at 1.0 s of packets sent at 0.2 and 0.5 s, then
    persistent congestion: the window collapses to 2 x 1440 and recovery ends
    (_congestion_recovery_start_time = 0.0: unset).  (ccdiff traces declare persistent
    congestion only after an RTT sample, RFC 9002 §7.6.2: one 10 ms sample first.)"""
    s, _ = run(sent(0, 0) + ack(10 * MS, [0]) + sent(200 * MS, 1) + sent(S // 2, 2)
               + lost(S, [1, 2], mark="lost") + [(S, dict(ev="persistent_congestion"), "pc")])
    assert s["lost"].recovery_start_us == S
    assert s["pc"].cwnd == 2 * 1440
    assert s["pc"].recovery_start_us is None


def test_lost_with_w_max():
    """test_lost_with_W_max: a loss with cwnd < W_max applies fast convergence,
    W_max = int(cwnd x (1 + 0.7) / 2) (cubic.py:176-179).  Upstream sets W_max = 100000
    by hand; here a first loss makes W_max = 14400 > cwnd = 2880, and a second loss of a
    packet sent after the first recovery start gives W_max = int(2880 x 0.85) = 2448."""
    s, _ = run(sent(0, 0) + lost(S, [0], mark="first") + sent(2 * S, 1)
               + lost(3 * S, [1], mark="second"))
    assert s["first"].w_max == 14400 and s["first"].cwnd == 2880
    assert s["second"].w_max == int(2880 * (1 + 0.7) / 2) == 2448
    assert s["second"].recovery_start_us == 3 * S


def idle_events(resume_us):
    """test_reset_idle's state: the last acknowledged packet was sent at 1 s; then a send.
    A loss first brings the window below the initial one so a reset shows."""
    return (sent(S, 0, 1) + lost(S + 20 * MS, [1], mark="lost") + ack(S + 50 * MS, [0], mark="acked")
            + sent(resume_us, 2, mark="resume"))


def test_reset_idle():
    """test_reset_idle: a send 9 s after the send time of the last acknowledged packet
    (last_ack = 1 s, cubic.py:72) resets the controller (cubic.py:149-155, 58-68):
    cwnd = 10 x 1440, ssthresh None, K = 0, t_epoch = 0.0 (unset), W_max = 14400."""
    s, _ = run(idle_events(10 * S))
    assert s["acked"].cwnd < 14400 and s["acked"].ssthresh == 2880
    r = s["resume"]
    assert r.cwnd == 14400 and r.ssthresh is None
    assert r.k_us == 0 and r.epoch_start_us is None and r.w_max == 14400
    assert r.phase == "slow_start"


def test_reset_idle_threshold_is_two_seconds_after_the_acked_send():
    """elapsed_idle = sent_time - last_ack >= 2 (cubic.py:153-154), last_ack the SEND time
    of the last acknowledged packet (1 s), not the ACK's time (1.05 s): a send 1 us after
    3 s resets; 1 us before does not.  (At exactly 3 s the float seconds' rounding decides,
    and it depends on the clock base: aioquic subtracts two large float times.)"""
    before, _ = run(idle_events(3 * S - 1))
    at, _ = run(idle_events(3 * S + 1))
    assert before["resume"].cwnd == before["acked"].cwnd and before["resume"].ssthresh == 2880
    assert at["resume"].cwnd == 14400 and at["resume"].ssthresh is None


def rtt_events(low_us, high_us, n_low=10, n_high=10):
    """Packets acknowledged one by one: n_low RTT samples of low_us, then n_high of
    high_us, each ACK 10 ms after the previous (QuicRttMonitor takes one sample per ms,
    base.py:91-94).  Marks the ACK of the k-th high sample 'high<k>'."""
    events, t = [], 0
    sends, acks = [], []
    for i in range(n_low + n_high):
        send_t = i * 10 * MS
        rtt = low_us if i < n_low else high_us
        sends.append((send_t, i))
        acks.append((send_t + rtt, i, f"high{i - n_low + 1}" if i >= n_low else None))
    merged = [(t, 0, pn, None) for t, pn in sends] + [(t, 1, pn, m) for t, pn, m in acks]
    for t, kind, pn, mark in sorted(merged):
        events += sent(t, pn) if kind == 0 else ack(t, [pn], mark=mark)
    return events


def test_increasing_rtt():
    """test_increasing_rtt: RTT samples that rise by a quarter or more (100 ms, then
    200 ms) end slow start: ssthresh = cwnd (cubic.py:201-207).  QuicRttMonitor
    (base.py:55-107) is ready after 5 samples; filtered_min = 0.1 s; the window of five
    is all 0.2 s from the 5th high sample on, and the 5th such increase (the 9th high
    sample) returns True: ssthresh = the window after that ACK's packet
    (on_packet_acked runs before on_rtt_measurement, recovery.py:286, 326)."""
    s, _ = run(rtt_events(100 * MS, 200 * MS))
    assert s["high8"].ssthresh is None
    exit_ack = s["high9"]
    # pn 18's ACK at 380 ms is the 19th: every one grew the window by 1280 in slow start.
    assert exit_ack.ssthresh == exit_ack.cwnd == 14400 + 19 * 1280


def test_increasing_rtt_exiting_slow_start():
    """test_increasing_rtt_exiting_slow_start: the first ACK in congestion avoidance
    after slow start ended without a loss starts the epoch (cubic.py:79-91): W_max =
    cwnd_epoch = the window, t_epoch = now, K = cbrt(0) = 0."""
    s, _ = run(rtt_events(100 * MS, 200 * MS, n_high=10))
    exit_ack, next_ack = s["high9"], s["high10"]
    assert next_ack.w_max == exit_ack.cwnd
    assert next_ack.epoch_start_us == 190 * MS + 200 * MS
    assert next_ack.k_us == 0


def test_the_stacks_own_rtt_sample_drives_the_slow_start_exit():
    """An ACK's `rtt` (the stack's own sample, from its qlog) is the sample the adapter hands
    on_rtt_measurement and its recovery's estimate (recovery.py:299, 326), not the trace's
    difference: test_increasing_rtt's samples given as `rtt` on ACKs whose times say 100 ms
    throughout end slow start at the same ACK; the same times without `rtt` do not."""
    events = rtt_events(100 * MS, 100 * MS)
    flat, _ = run(events)
    assert flat["high9"].ssthresh is None
    for _, ev, mark in events:
        if mark and mark.startswith("high"):
            ev["rtt"] = 200 * MS
    s, _ = run(events)
    assert s["high8"].ssthresh is None
    assert s["high9"].ssthresh == s["high9"].cwnd == 14400 + 19 * 1280


def test_congestion_avoidance_follows_w_cubic():
    """test_congestion_avoidance / test_concave_region: in congestion avoidance each
    acknowledged packet moves the window by (target - cwnd) x mds / cwnd with target =
    W_cubic(t + rtt) = int((0.4 (t + rtt - K)^3 + W_max / mds) x mds) (cubic.py:47-50,
    245-279), rtt the last sample (cubic.py:202).  After test_packet_lost's state
    (W_max 14400, epoch at 250 s), a packet sent at 250 s is acknowledged 1 s after the
    epoch: t = 1, rtt = 10 s (the previous ACK's sample).  The packet is sent at 241 s:
    a send 2 s after 240 s, the send time of the last acknowledged packet, would reset
    the controller (cubic.py:153-155)."""
    events = packet_lost_events()
    events = events[:3] + sent(241 * S, 2) + events[3:] + ack(251 * S, [2], mark="ca")
    s, _ = run(events)
    prev = s["ack"]
    k = prev.k_us / 1e6
    w_est = int(3520 + 1440 * (1280 / 3520))
    t, rtt = 1.0, 10.0
    w_cubic = int((0.4 * (t + rtt - k) ** 3 + 14400 / 1440) * 1440)
    target = prev.cwnd if w_cubic < prev.cwnd else (int(prev.cwnd * 1.5) if w_cubic > 1.5 * prev.cwnd else w_cubic)
    w_cubic_t = int((0.4 * (t - k) ** 3 + 14400 / 1440) * 1440)
    if w_cubic_t < w_est:
        expected = w_est                                                   # Reno-friendly
    else:
        expected = int(prev.cwnd + (target - prev.cwnd) * (1440 / prev.cwnd))
    assert s["ca"].cwnd == expected
    assert s["ca"].cwnd > prev.cwnd


# -- test_congestion_reno.py -----------------------------------------------------------

def test_reno_slow_start():
    """test_slow_start: 10 x 1280 + 1280."""
    s, _ = run(sent(0, 0) + ack(500 * MS, [0], mark="ack"), spec=RENO, mds=1280)
    assert s["ack"].cwnd == 11 * 1280


def test_reno_packet_lost():
    """test_packet_lost: halved to 6400 and ssthresh = cwnd; a loss of a packet sent
    before the recovery start (0.9 s < 1.0 s) changes nothing; one sent after (1.5 s)
    halves again to 3200 (reno.py:51-65)."""
    events = (sent(S // 2, 0) + sent(900 * MS, 1) + lost(S, [0], mark="first") + sent(1500 * MS, 2)
              + lost(2 * S, [1], mark="before") + lost(3 * S, [2], mark="after"))
    s, _ = run(events, spec=RENO, mds=1280)
    assert s["first"].cwnd == s["first"].ssthresh == 6400
    assert s["before"].cwnd == 6400 and s["before"].recovery_start_us == S
    assert s["after"].cwnd == 3200 and s["after"].recovery_start_us == 3 * S


def test_reno_packet_acked_during_recovery():
    """test_packet_acked_during_recovery + test_congestion_avoidance: after the loss at
    1.0 s the window is 5 x 1280; five ACKs of packets sent at 1.0 s (not after the
    recovery start, reno.py:30) leave it; five of packets sent at 1.5 s add one datagram
    once a full window (6400 bytes) is acknowledged: 6 x 1280 after the fifth, not before."""
    events = (sent(S // 2, 0) + lost(S, [0]) + sent(S, *range(1, 6)) + sent(1500 * MS, *range(6, 11))
              + ack(2 * S, [1, 2, 3, 4, 5], mark="recovery")
              + ack(2 * S + 1, [6, 7, 8, 9], mark="four") + ack(2 * S + 2, [10], mark="five"))
    s, _ = run(events, spec=RENO, mds=1280)
    assert s["recovery"].cwnd == 5 * 1280
    assert s["four"].cwnd == 5 * 1280
    assert s["five"].cwnd == 6 * 1280


def test_reno_minimum_window_and_persistent_congestion():
    """test_packet_lost_minimum_window: ten losses, each of a packet sent after the
    previous recovery start: 2 x 1280.  test_persistent_congestion: the collapse to the
    minimum ends recovery (recovery start 0.0: unset)."""
    events = sent(0, 0) + ack(10 * MS, [0])                # an RTT sample (RFC 9002 §7.6.2)
    for i in range(10):
        events += sent(i * S + S // 2, i + 1) + lost(i * S + S, [i + 1], mark=f"l{i}")
    events += (sent(10 * S + S // 4, 11) + sent(10 * S + S // 2, 12) + lost(11 * S, [11, 12])
               + [(11 * S, dict(ev="persistent_congestion"), "pc")])
    s, _ = run(events, spec=RENO, mds=1280)
    assert s["l9"].cwnd == 2 * 1280
    assert s["pc"].cwnd == 2 * 1280 and s["pc"].recovery_start_us is None


def test_reno_rtt_increasing_exits_slow_start():
    """test_rtt_increasing_exits_slow_start: Reno shares QuicRttMonitor (reno.py:71-76)."""
    s, _ = run(rtt_events(100 * MS, 200 * MS), spec=RENO, mds=1280)
    assert s["high8"].ssthresh is None
    assert s["high9"].ssthresh == s["high9"].cwnd


# -- the connection's call order (recovery.py) -------------------------------------------

def order_events():
    """Ten packets at 0; at 10 ms pn 0 is lost and pn 1..3 acknowledged (packet
    threshold: 3 - 3 = 0 >= 0, recovery.py:442-451, so this ACK reveals the loss)."""
    return sent(0, *range(10), size=1200) + lost(10 * MS, [0], mark="lost") + ack(10 * MS, [1, 2, 3], mark="ack")


def test_acks_before_losses():
    """aioquic acknowledges before it detects losses (recovery.py:286, then 335): slow
    start grows 12000 -> 15600 by pn 1..3; then on_packets_lost: flight 12000 - 3600 -
    1200 = 7200, ssthresh = cwnd = int(7200 x 0.7) = 5040, W_max = 15600 (cubic.py:181).
    RFC 9002's order would give int(10800 x 0.7) = 7559 (float) and W_max 12000.  The
    loss's own snapshot is the loss-timer path's (no ACK yet): the same 7559."""
    s, _ = run(order_events(), mds=1200)
    assert s["lost"].cwnd == int(10800 * 0.7) == 7559
    a = s["ack"]
    assert (a.cwnd, a.ssthresh, a.w_max, a.bytes_in_flight) == (5040, 5040, 15600, 7200)
    assert a.recovery_start_us == 10 * MS


def test_ack_not_revealing_the_loss_leaves_it_to_the_timer():
    """A loss the ACK at its instant does not reveal (pn 5 above the largest acked 1,
    sent 10 ms ago < 9/8 x the 10 ms sample) is committed by the next event through the
    timer path, after the ACK's growth: 12000 + 1200, then 0.7 x the flight."""
    events = (sent(0, *range(10), size=1200) + lost(10 * MS, [5]) + ack(10 * MS, [0, 1], mark="ack")
              + sent(11 * MS, 10, size=1200, mark="next"))
    s, _ = run(events, mds=1200)
    assert s["ack"].cwnd == int((12000 - 2400 - 1200) * 0.7)      # provisional: the timer's result
    n = s["next"]
    assert n.ssthresh == int((12000 - 2400 - 1200) * 0.7) and n.recovery_start_us == 10 * MS


def test_packet_expired_is_the_ptos_loss_followed_by_its_probe():
    """test_packet_expired: on_packets_expired only drops the bytes.  aioquic's PTO
    (reschedule_data, recovery.py:407-431) declares the oldest ack-eliciting packet lost
    with congestion_event=False and sends a probe at once; its qlog logs that as
    packet_lost.  So a timer loss of the oldest outstanding packet above the largest
    acknowledged one, followed by a send within 1 ms, leaves the window; the same loss
    with the next send 10 ms later is a congestion event (cubic.py:161-197)."""
    base = sent(0, 0, 1, 2) + ack(10 * MS, [0]) + lost(300 * MS, [1], mark="lost")
    s, _ = run(base + sent(300 * MS + 500, 3, mark="probe"))
    assert s["probe"].cwnd == 14400 + 1280 and s["probe"].ssthresh is None
    assert s["probe"].bytes_in_flight == 2 * 1280 and s["probe"].recovery_start_us is None
    s, _ = run(base + sent(310 * MS, 3, mark="later"))
    assert s["later"].cwnd < 14400 and s["later"].recovery_start_us == 300 * MS
    # not the oldest outstanding packet (0 is acknowledged, 1 is still in flight): a loss
    s, _ = run(sent(0, 0, 1, 2) + ack(10 * MS, [0]) + lost(300 * MS, [2]) + sent(300 * MS + 500, 3, mark="n"))
    assert s["n"].recovery_start_us == 300 * MS


def test_growth_in_recovery_is_reported():
    """Cubic's on_packet_acked has no recovery check (cubic.py:70-147, unlike reno.py:30):
    ACKs of packets sent before the recovery start grow the window.  RFC 9002 §7.3.2:
    the checker reports growth-in-recovery (profile.toml: no waiver)."""
    events = order_events() + ack(20 * MS, [4, 5, 6], mark="recovery")
    s, findings = run(events, mds=1200, check=True)
    assert s["recovery"].cwnd > 5040
    assert "growth-in-recovery" in {f.invariant for f in findings}


def test_options_rejected():
    from ccdiff.errors import SetupError
    with pytest.raises(SetupError, match="unknown option 'idle'"):
        run(sent(0, 0), spec="aioquic:idle=on")
    with pytest.raises(SetupError, match="cc: unknown value 'bbr'"):
        run(sent(0, 0), spec="aioquic:cc=bbr")


def test_private_modules_not_site_packages():
    """The controller classes come from the build folder, under a private package name,
    never an `aioquic` installed in site-packages."""
    module = adapter_module()
    target = resolve(SPEC)
    folder = target.recipe.build_folder(target.version)
    cubic, reno, version = module._upstream(str(folder))
    assert version == "1.7.2"
    assert not cubic.__name__.startswith("aioquic")
    assert cubic.__file__.startswith(str(folder / "upstream"))
    assert reno.__file__.startswith(str(folder / "upstream"))


def test_stack_exception_is_an_adapter_error(monkeypatch):
    """An exception raised inside the stack's code is that stack's adapter-error finding
    (the Python form of a panic), and the run goes on."""
    module = adapter_module()
    cubic = module._upstream(str(resolve(SPEC).recipe.build_folder("1.7.2")))[0]

    def boom(self, *, now, packet):
        raise ZeroDivisionError("planted")
    monkeypatch.setattr(cubic.CubicCongestionControl, "on_packet_acked", boom)
    lines = [json.dumps({"ccdiff_trace": 1, "max_datagram_size": 1200})] + \
        [json.dumps({"t": 0, "ev": "sent", "pn": 0, "bytes": 1200}),
         json.dumps({"t": 10 * MS, "ev": "ack", "pns": [0], "ack_delay": 0})]
    res = replay(parse_trace_text("\n".join(lines)), [SPEC, "oracle"], check=True)
    errors = [f for f in res.findings if f.stack == SPEC and f.invariant == "adapter-error"]
    assert len(errors) == 1 and "ZeroDivisionError in the stack: planted" in errors[0].detail
    assert res.runs["oracle"].error is None


# -- mutations: a broken adapter fails the tests above -----------------------------------

def test_mutation_loss_before_acks_fails(monkeypatch):
    """Applying the held-back loss before the ACK's packets (RFC 9002's order) breaks
    test_acks_before_losses: 7559, not 5040."""
    module = adapter_module()
    real = module.Controller._acked

    def loss_first(self, ev):
        pending = self.pending
        if pending is not None and pending.t == ev.t:
            self.pending = None
            self._congestion(self.cc, pending)
        return real(self, ev)
    monkeypatch.setattr(module.Controller, "_acked", loss_first)
    with pytest.raises(AssertionError):
        test_acks_before_losses()
    s, _ = run(order_events(), mds=1200)
    assert s["ack"].ssthresh == int(10800 * 0.7)


def test_mutation_dropped_rtt_measurement_fails(monkeypatch):
    """Without on_rtt_measurement slow start never ends on rising RTTs."""
    module = adapter_module()
    cubic = module._upstream(str(resolve(SPEC).recipe.build_folder("1.7.2")))[0]
    monkeypatch.setattr(cubic.CubicCongestionControl, "on_rtt_measurement", lambda self, *, now, rtt: None)
    with pytest.raises(AssertionError):
        test_increasing_rtt()


def test_mutation_rtt_before_acks_fails(monkeypatch):
    """on_rtt_measurement before the ACK's on_packet_acked (the order reversed) exits
    slow start one packet earlier: test_increasing_rtt's ssthresh == cwnd fails."""
    module = adapter_module()
    real = module.Controller._acked

    def rtt_first(self, ev):
        cc = self.cc
        calls = []
        acked = cc.on_packet_acked
        cc.on_packet_acked = lambda *, packet, now: calls.append((packet, now))
        try:
            real(self, ev)
        finally:
            del cc.on_packet_acked
        for packet, now in calls:
            acked(packet=packet, now=now)
    monkeypatch.setattr(module.Controller, "_acked", rtt_first)
    with pytest.raises(AssertionError):
        test_increasing_rtt()


# -- profile mechanisms (ccdiff/mechanisms.py): explain aioquic's rule, not a planted one --

def findings_by_status(findings, invariant):
    return {f.status for f in findings if f.invariant == invariant}


def test_flight_size_reduction_is_a_deviation_and_a_planted_beta_is_not(monkeypatch):
    """test_acks_before_losses' reduction 15600 -> 5040 is below beta x cwnd (RFC 9438 §4.6
    with flight_size): mechanism aioquic-flight-size-ssthresh explains it.  With beta
    planted at 0.5 (int(7200 x 0.5) = 3600) the same step is a violation."""
    _, findings = run(order_events(), mds=1200, check=True)
    assert findings_by_status(findings, "excess-reduction") == {"deviation"}
    cubic = adapter_module()._upstream(str(resolve(SPEC).recipe.build_folder("1.7.2")))[0]
    monkeypatch.setattr(cubic, "K_CUBIC_LOSS_REDUCTION_FACTOR", 0.5)
    s, findings = run(order_events(), mds=1200, check=True)
    assert s["ack"].cwnd == 3600
    assert findings_by_status(findings, "excess-reduction") == {"violation"}


def outage_events():
    """Slow start to 24000 (pn 0..9 sent at 0, acknowledged at 50 ms), then sends without
    any ACK: pn 11 goes 2.06 s after pn 9's send time (last_ack), so cubic.py:153-155
    resets the window to 10 x 1200 with no congestion signal."""
    return (sent(0, *range(10), size=1200) + ack(50 * MS, range(10), mark="grown")
            + sent(60 * MS, 10, size=1200) + sent(2060 * MS, 11, size=1200, mark="reset"))


def inactive_events():
    """The same, but pn 10 is acknowledged at 70 ms: the send of pn 11, 2.01 s later, comes
    after 2 s of real inactivity, what cubic.py:16's comment says the reset is for."""
    return (sent(0, *range(10), size=1200) + ack(50 * MS, range(10), mark="grown")
            + sent(60 * MS, 10, size=1200) + ack(70 * MS, [10])
            + sent(2080 * MS, 11, size=1200, mark="reset"))


def test_idle_reset_in_an_outage_is_a_violation_after_inactivity_a_deviation(monkeypatch):
    """Issue #30: the reset with a packet in flight (an outage) was filed as the documented
    idle deviation; only a reset after 2 s of inactivity is upstream's intent."""
    s, findings = run(outage_events(), mds=1200, check=True)
    assert s["grown"].cwnd == 24000
    r = s["reset"]
    assert (r.cwnd, r.ssthresh, r.w_max, r.k_us, r.epoch_start_us) == (12000, None, 12000, 0, None)
    assert findings_by_status(findings, "excess-reduction") == {"violation"}
    s, findings = run(inactive_events(), mds=1200, check=True)
    assert s["reset"].cwnd == 12000
    assert findings_by_status(findings, "excess-reduction") == {"deviation"}
    cubic = adapter_module()._upstream(str(resolve(SPEC).recipe.build_folder("1.7.2")))[0]
    real_reset = cubic.CubicCongestionControl.reset

    def planted(self):
        real_reset(self)
        self.congestion_window = 5 * self._max_datagram_size     # a reset to half the initial window
    monkeypatch.setattr(cubic.CubicCongestionControl, "reset", planted)
    _, findings = run(inactive_events(), mds=1200, check=True)
    assert "violation" in findings_by_status(findings, "excess-reduction")


def test_stacks_lists_aioquic_and_its_reno_alias_built():
    from ccdiff.stacks import available
    rows = {(r["stack"], r["version"]): r for r in available()}
    for name in (SPEC, RENO):
        row = rows[(name, "1.7.2")]
        assert row["built"] and not row["stale"] and row["default"], row


def test_the_idle_restart_example_is_no_idle_inflation_where_aioquic_restarts():
    """After the example's 8 s idle aioquic resets to its initial window in slow start (its
    rule for idles of 2 s or more): W_cubic(t) is not in play, so idle-inflation must not
    measure slow start's growth from the old window (ccdiff/invariants.py track_idle_growth).
    ngtcp2 on the same trace keeps its window and is still flagged."""
    from ccdiff.trace import load_trace
    from ccdiff.paths import project_root
    trace = load_trace(str(project_root() / "examples" / "idle-restart.jsonl"))
    ensure_built("ngtcp2")
    result = replay(trace, [SPEC, "ngtcp2"])
    assert any(s.phase == "slow_start" and s.ssthresh is None for s in result.runs[SPEC].snapshots[-1500:])
    found = {(f.stack.split("@")[0], f.invariant) for f in result.findings if f.status == "violation"}
    assert ("aioquic", "idle-inflation") not in found
    assert ("ngtcp2", "idle-inflation") in found

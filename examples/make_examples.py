"""Regenerate the example traces: python3 examples/make_examples.py

The traces are committed; this script documents how they were made and keeps
them reproducible (same script, same bytes).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ccdiff.ledger import Ledger                          # noqa: E402
from ccdiff.trace import Ack, AppData, AppIdle, Header, Lost, Sent, Trace, dump_trace  # noqa: E402
from oracle import Cubic                                  # noqa: E402

MDS = 1200
HERE = Path(__file__).resolve().parent


class Writer:
    def __init__(self):
        self.events = []
        self.pn = 0

    def send(self, t, count=1, app_limited=False):
        pns = []
        for _ in range(count):
            self.events.append(Sent(t, self.pn, MDS, app_limited))
            pns.append(self.pn)
            self.pn += 1
        return pns

    def ack(self, t, pns):
        self.events.append(Ack(t, tuple(pns)))

    def lose(self, t, pns):
        self.events.append(Lost(t, tuple(pns)))


def death_spiral() -> Trace:
    """The open-loop shape of quiche's CUBIC death spiral (../shared/brief.md).

    Phase 1, collapse: five congestion events, each a loss of a packet sent
    after the previous recovery started, while the pipe is never empty (so no
    idle shift happens yet): 12000 -> 8400 -> 5880 -> 4116 -> 2881 -> 2400.
    Phase 2, the minimum window: every RTT the two outstanding packets are
    acknowledged in one ACK, which drains the pipe, and two new packets are
    sent at that same instant.  A controller that measures idle from the last
    send sees a full RTT of idle on every send and pushes its recovery start
    (= epoch) past now; a correct one sees none and grows.
    """
    rtt, w = 10_000, Writer()
    t = 0
    flight = w.send(t, 5)
    for _ in range(5):
        a, b, c, d, e = flight
        t_ack = t + rtt
        # The ACK of b..d makes a lost by RFC 9002 §6.1's packet threshold (3 later
        # packets acknowledged); loss detection runs before the ACK hook.
        w.lose(t_ack, [a])
        w.ack(t_ack, [b, c, d])
        nxt = t_ack + 100
        flight = w.send(nxt, 5) if _ < 4 else []
        w.ack(t_ack + 200, [e])           # sent before the recovery start: no growth
        t = nxt
    now = t_ack + 200                     # the pipe just drained
    outstanding = w.send(now, 2)
    for _ in range(30):
        now += rtt
        w.ack(now, outstanding)           # drains the pipe...
        outstanding = w.send(now, 2)      # ...and the sender refills it at the same instant
    header = Header(MDS, name="death-spiral",
                    comment="loss collapses cwnd to the minimum; then per RTT two packets are "
                            "acked and two sent at the same instant (quiche CUBIC death spiral)")
    return Trace(header, w.events)


def idle_restart() -> Trace:
    """Bulk transfer in congestion avoidance, 8 s idle, then bulk again.

    Flights are sized by the reference oracle (ACK-clocked, one ACK per two
    packets, RTT 50 ms) and then frozen into an open-loop trace.  A single
    loss early on moves the flow into congestion avoidance.
    """
    rtt, w = 50_000, Writer()
    oracle, ledger = Cubic(MDS, 333_000), Ledger(Header(MDS))

    def emit(ev):
        w.events.append(ev)
        oracle.step(ledger.resolve(ev))

    pending = []       # (ack time, pn)
    now, pn = 0, 0
    lost = []          # the one lost packet, until RFC 9002 §6.1 lets the sender declare it

    def fill(t, stop_sending):
        nonlocal pn
        while not stop_sending and ledger.bytes_in_flight + MDS <= oracle.cwnd:
            emit(Sent(t, pn, MDS))
            pending.append((t + rtt, pn))
            pn += 1

    def run_until(t_end, sending):
        nonlocal now
        fill(now, not sending)
        while pending:
            t_ack = pending[0][0]
            if sending and t_ack > t_end:
                break
            batch = [p for ta, p in pending[:2] if ta == t_ack] or [pending[0][1]]
            del pending[:len(batch)]
            now = t_ack
            if batch[0] == 30:                       # the one loss: leave slow start
                lost.append(30)
                batch = batch[1:]
            if lost and batch and batch[-1] >= lost[0] + 3:
                # RFC 9002 §6.1 packet threshold: declared when 3 later packets are acked.
                emit(Lost(now, tuple(lost)))
                lost.clear()
            if batch:
                emit(Ack(now, tuple(batch)))
            fill(now, not sending or now >= t_end)
        now = max(now, t_end)

    # The application's own events (trace format 2): its send call finds no data at the
    # end of each bulk phase, and it has data again when the next one starts.
    run_until(2_000_000, sending=True)    # bulk for 2 s
    emit(AppIdle(now))
    run_until(2_000_000, sending=False)   # drain
    now = 10_000_000                      # 8 s idle
    emit(AppData(now))
    run_until(11_000_000, sending=True)   # bulk for 1 s
    emit(AppIdle(now))
    run_until(11_000_000, sending=False)
    header = Header(MDS, name="idle-restart",
                    comment="bulk in congestion avoidance, 8 s idle, bulk again (RFC 9438 §4.2 idle)")
    return Trace(header, w.events)


class Flow:
    """An ACK-clocked flow whose window the reference oracle sizes, frozen into an open-loop
    trace (as idle_restart, generalised): fixed RTT, an ACK per `ack_every` packets, a
    dropped packet declared lost by RFC 9002 §6.1's packet threshold (3 later packets
    acknowledged), a CE-marked packet reported on the ACK that acknowledges it (RFC 9002
    §7.1).  drop(pn) / ce(pn) decide at send time; the application is unlimited unless
    app_burst() is used.
    """

    def __init__(self, rtt: int, ack_every: int = 2):
        self.rtt, self.ack_every = rtt, ack_every
        self.events, self.pn, self.now = [], 0, 0
        self.oracle, self.ledger = Cubic(MDS, 333_000), Ledger(Header(MDS))
        self.pending = []          # (ack time, pn, CE-marked)
        self.dropped = []          # dropped packets not declared lost yet
        self.drop = lambda pn: False
        self.ce = lambda pn: False

    def emit(self, ev) -> None:
        self.events.append(ev)
        self.oracle.step(self.ledger.resolve(ev))

    def send(self, t: int, app_limited: bool = False) -> None:
        pn = self.pn
        self.pn += 1
        self.emit(Sent(t, pn, MDS, app_limited))
        if self.drop(pn):
            self.dropped.append(pn)
        else:
            self.pending.append((t + self.rtt, pn, self.ce(pn)))

    def fill(self, t: int) -> None:
        while self.ledger.bytes_in_flight + MDS <= self.oracle.cwnd:
            self.send(t)

    def deliver(self, batch: list) -> None:
        """One ACK frame of `batch` (its pns), after the losses it reveals."""
        t = self.pending[0][0]
        del self.pending[:len(batch)]
        self.now = t
        pns = tuple(p for _, p, _ in batch)
        declared = [d for d in self.dropped if pns[-1] >= d + 3]
        if declared:
            self.dropped = [d for d in self.dropped if d not in declared]
            self.emit(Lost(t, tuple(declared)))
        self.emit(Ack(t, pns, 0, any(ce for _, _, ce in batch)))

    def bulk(self, t_end: int) -> None:
        """Cwnd-limited until t_end (the window refilled at every ACK), then drain."""
        self.fill(self.now)
        while self.pending:
            t_ack = self.pending[0][0]
            batch = [x for x in self.pending[:self.ack_every] if x[0] == t_ack]
            self.deliver(batch)
            if self.now < t_end:
                self.fill(self.now)
        self.dropped.clear()       # nothing left to reveal them: not declared (no PTO here)

    def app_burst(self, t_end: int, packets: int) -> None:
        """Application-limited until t_end: every RTT (at half-RTT offsets, between the
        ACKs) the application has `packets` packets of data, sends them and finds no more:
        app_data, the sends (flagged app-limited: the window had room, RFC 9002 §7.8),
        app_idle."""
        t = self.now + self.rtt // 2
        self.emit(AppIdle(self.now))
        while t < t_end:
            while self.pending and self.pending[0][0] <= t:
                t_ack = self.pending[0][0]
                self.deliver([x for x in self.pending[:self.ack_every] if x[0] == t_ack])
            self.now = t
            self.emit(AppData(t))
            for _ in range(packets):
                self.send(t, app_limited=True)
            self.emit(AppIdle(t))
            t += self.rtt
        while self.pending:
            t_ack = self.pending[0][0]
            self.deliver([x for x in self.pending[:self.ack_every] if x[0] == t_ack])
        self.now = max(self.now, t_end)
        self.emit(AppData(self.now))

    def trace(self, name: str, comment: str) -> Trace:
        return Trace(Header(MDS, name=name, comment=comment), self.events)


def burst(first: int, count: int, gap: int):
    """Packet numbers first, first + gap, ... (count of them): a loss burst."""
    return set(range(first, first + count * gap, gap))


def repeated_losses() -> Trace:
    """Losses in bursts: each burst drops every second packet of one flight, so its losses
    are declared one after another, all of packets sent before the first was declared: one
    recovery period, one reduction (RFC 9002 §7.3.2; RFC 9438 §4.6).  A controller that
    reduces again for each later loss of the burst cuts the window several times.  Bursts
    (not one loss) so that a loss-rate filter such as picoquic's (15%, cc_common.c:105-136)
    lets them count: the examples must reach every stack's reduction code."""
    flow = Flow(50_000)
    first = burst(30, 6, 2)
    flow.drop = lambda pn: pn in first or pn in second
    second = set()
    flow.bulk(1_000_000)                          # slow start, a burst, then avoidance
    second.update(burst(flow.pn + 4, 8, 2))       # the next flight loses every second packet
    flow.bulk(2_000_000)
    return flow.trace("repeated-losses", "bursts of losses within one recovery period: one reduction each "
                      "(RFC 9002 §7.3.2, RFC 9438 §4.6)")


def ecn_small_window() -> Trace:
    """ECN-CE marks at a small window: a CE on the first flight, then one on a packet sent
    after each reduction, every other RTT, driving the window towards the minimum; each
    is a new congestion event (RFC 9002 §7.1, §B.7) and must reduce.  Slow start ends on
    the first CE: picoquic and ngtcp2 react to CE without a loss-rate filter."""
    flow = Flow(20_000)
    marked = {8}
    flow.ce = lambda pn: pn in marked
    flow.bulk(200_000)
    for _ in range(12):
        marked.add(flow.pn + 1)                   # sent after the last reduction
        flow.bulk(flow.now + 2 * flow.rtt)
    flow.bulk(flow.now + 400_000)
    return flow.trace("ecn-small-window", "ECN-CE every other RTT at a small window: each a new "
                      "congestion event (RFC 9002 §7.1, §B.7)")


def long_recovery() -> Trace:
    """A long recovery period: a large window acknowledged packet by packet, then a loss
    burst, so hundreds of ACKs of packets sent before the recovery started arrive in it;
    none may grow the window (RFC 9002 §7.3.2)."""
    flow = Flow(100_000, ack_every=1)
    losses = burst(40, 5, 2)
    flow.drop = lambda pn: pn in losses
    flow.bulk(2_000_000)
    losses.update(burst(flow.pn + 2, 6, 3))
    flow.bulk(3_000_000)
    return flow.trace("long-recovery", "a large window acknowledged packet by packet, then losses: hundreds of "
                      "ACKs of pre-recovery packets in one recovery period (RFC 9002 §7.3.2)")


def app_limited_then_bulk() -> Trace:
    """Congestion avoidance, then 1.5 s in which the application has only two packets per
    RTT (the window is far from full: app-limited, RFC 9002 §7.8), then cwnd-limited bulk
    again.  The window must not grow while app-limited (RFC 9002 §7.8; RFC 9438 §5.8) and
    must grow again after."""
    flow = Flow(50_000)
    losses = burst(30, 6, 2)
    flow.drop = lambda pn: pn in losses
    flow.bulk(800_000)
    flow.app_burst(2_300_000, 2)
    flow.bulk(3_300_000)
    return flow.trace("app-limited-then-bulk", "congestion avoidance, 1.5 s application-limited (2 packets per "
                      "RTT), then cwnd-limited again (RFC 9002 §7.8, RFC 9438 §5.8)")


def convex_probing() -> Trace:
    """One loss burst, then 7 s of cwnd-limited congestion avoidance, ACK per packet: the
    window climbs the concave side of W_cubic(t) to W_max (t = K, about 3 s) and goes on into
    the convex region (RFC 9438 §4.4, §4.5) past it.  The other examples leave avoidance
    long before t = K, so a slip in C, in t - K or in the RTT look-ahead moves their windows
    by less than a datagram; here the window follows one curve for 60 round trips
    (ca-off-curve)."""
    flow = Flow(200_000)
    losses = burst(50, 6, 2)
    flow.drop = lambda pn: pn in losses
    flow.bulk(5_600_000)
    return flow.trace("convex-probing", "one loss burst, then 7 s of congestion avoidance: the concave region "
                      "up to W_max and the convex region past it (RFC 9438 §4.4, §4.5)")


def main() -> None:
    for name, make in (("death-spiral", death_spiral), ("idle-restart", idle_restart),
                       ("repeated-losses", repeated_losses), ("ecn-small-window", ecn_small_window),
                       ("long-recovery", long_recovery), ("app-limited-then-bulk", app_limited_then_bulk),
                       ("convex-probing", convex_probing)):
        path = HERE / f"{name}.jsonl"
        path.write_text(dump_trace(make()))
        print(path)


if __name__ == "__main__":
    main()

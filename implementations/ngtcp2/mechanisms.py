"""ngtcp2's mechanisms: the executable form of its profile's mechanism-checked deviations,
ngtcp2 1.25.0 (lib/ngtcp2_cc.c, lib/ngtcp2_rtb.c).

Loaded by ccdiff/mechanisms.py (`registry`), which registers every Mechanism subclass
defined here under its `name`; the shape they share is that module's (docs/adding-a-stack.md)."""
from __future__ import annotations

from collections import deque

from ccdiff.ledger import ACKED, LOST, SENT
from ccdiff.mechanisms import Mechanism, Occurrence


class Ngtcp2DeliverySsthresh(Mechanism):
    """ngtcp2 1.25.0 CUBIC's congestion event (lib/ngtcp2_cc.c:501-513):

        ssthresh = cwnd * 7 / 10
        if rs.delivered * 2 < cwnd:
            ssthresh = min(ssthresh, max(rs.delivered, bytes_in_flight + bytes_lost))
        ssthresh = max(ssthresh, 2 * mds);  cwnd = ssthresh

    rs.delivered is the rate sampler's last sample (lib/ngtcp2_rst.c:95, 116, 120): the bytes
    delivered between the send of the newest packet the last ACK acknowledged and that ACK.
    The model keeps ngtcp2's delivered counter per sent packet from the events.  One thing the
    events do not say: an ACK of a packet declared lost counts in ngtcp2 only while the lost
    entry is still kept (lib/ngtcp2_rtb.c:1207-1275, its own expiry and reordering-threshold
    eviction), and such a packet can be the sample's newest.  Where ACKs of lost packets fall
    inside a sample, rs.delivered is therefore known only within [without them, with all of
    them]; the rule is monotone in rs.delivered, so the new ssthresh must lie between the
    rule's values at both ends.  Everywhere else the value is exact.  A reduction below beta
    is explained only if the stack's new ssthresh is the rule's value for the state at that
    event -- a beta of 0.5, or any other depth, is not.
    """
    name = "ngtcp2-delivery-ssthresh"
    invariants = frozenset({"excess-reduction"})
    rule = "lib/ngtcp2_cc.c:501-513; lib/ngtcp2_rst.c:95, 116, 120 (ngtcp2 1.25.0)"
    families = ("cubic",)
    KEEP = 256   # ACK samples remembered (a loss group is judged within a few events)

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.delivered = 0           # ngtcp2's rst->delivered without ACKs of lost packets ...
        self.spurious = 0            # ... and the bytes of those ACKs, which it may count
        self.stamp = {}              # pn -> (delivered, spurious) when it was sent (ent->rst.delivered)
        # (ACK index, (lowest, highest) rs.delivered); before any ACK rs.delivered is 0
        # (ngtcp2_rs_init, lib/ngtcp2_rst.c:34-40)
        self.samples = deque([(-1, (0, 0))], maxlen=self.KEEP)

    def observe(self, index: int, ev) -> None:
        kind = ev.kind
        if kind == SENT:
            self.stamp[ev.packets[0][0]] = (self.delivered, self.spurious)
        elif kind == ACKED:
            stamp = self.stamp
            self.delivered += sum(p[2] for p in ev.packets)
            self.spurious += sum(p[2] for p in ev.spurious)
            newest = [max(p[0] for p in packets) for packets in (ev.packets, ev.spurious) if packets]
            values = []
            for pn in newest:        # the newest acked entry ngtcp2 still had (rst.c:112-126)
                sent = stamp.get(pn)
                if sent is not None:
                    exact = self.delivered - sent[0]
                    values += [exact, exact + self.spurious - sent[1]]
            for packets in (ev.packets, ev.spurious):
                for p in packets:
                    stamp.pop(p[0], None)
            if values:
                self.samples.append((index, (min(values), max(values))))

    def sample(self, events) -> tuple | None:
        """(lowest, highest) rs.delivered at the congestion event: the group's ACK's sample,
        else (the loss timer) the last ACK's before the loss."""
        indices = [i for i, ev in events if ev.kind == ACKED]
        first = events[0][0]
        for index, bounds in reversed(self.samples):
            if (indices and index == indices[-1]) or (not indices and index < first):
                return bounds
        return None

    @staticmethod
    def ssthresh(cwnd: int, delivered: int, flight_size: int, mds: int) -> int:
        """lib/ngtcp2_cc.c:501-510, in ngtcp2's integer arithmetic."""
        ssthresh = cwnd * 7 // 10
        if delivered * 2 < cwnd:
            ssthresh = min(ssthresh, max(delivered, flight_size))
        return max(ssthresh, 2 * mds)

    def expected(self, occ: Occurrence) -> tuple | None:
        """(lowest, highest) ssthresh the rule gives at this congestion event (equal when exact)."""
        events = occ.events
        bounds = self.sample(events)
        if bounds is None:
            return None
        lost = sum(p[2] for _, ev in events if ev.kind == LOST for p in ev.packets)
        flight = events[-1][1].bytes_in_flight_after + lost   # cstat->bytes_in_flight + ack->bytes_lost
        return tuple(self.ssthresh(occ.before.cwnd, d, flight, self.mds) for d in bounds)

    def explains(self, occ: Occurrence) -> bool:
        if occ.cause != "below-beta" or not occ.events:
            return False
        after, expected = occ.after, self.expected(occ)
        return expected is not None and after.ssthresh is not None \
            and expected[0] <= after.ssthresh <= expected[1] and after.cwnd >= after.ssthresh


class Ngtcp2RenoAckedBeforeCongestionEvent(Mechanism):
    """ngtcp2 1.25.0's Reno credits an ACK's packets (on_pkt_acked, lib/ngtcp2_rtb.c:912-935;
    lib/ngtcp2_cc.c:119-146, per packet: + pktlen in slow start, less in avoidance) before the
    congestion event that the same ACK reveals -- its losses (lib/ngtcp2_rtb.c:954-962) or its
    ECN-CE count (965-967) -- which then halves the grown window (lib/ngtcp2_cc.c:148-172:
    cwnd = max(cwnd >> 1, 2 * mds), ssthresh = cwnd, recovery start = now).  From a small window
    the halved result can exceed the window before the ACK: growth on an ACK of pre-recovery
    packets, no reduction for a new congestion event.  Explained only where the stack did take
    that congestion event at this ACK (its recovery start is now, ssthresh = cwnd) and the
    window is at most half of the window before plus every byte the ACK acknowledged (so
    also a reduction shallower than half the window before the ACK).
    """
    name = "ngtcp2-reno-acked-before-congestion-event"
    invariants = frozenset({"growth-in-recovery", "missing-reduction", "shallow-reduction"})
    rule = "lib/ngtcp2_rtb.c:912-935, 954-967; lib/ngtcp2_cc.c:119-172 (ngtcp2 1.25.0)"
    families = ("reno",)

    def explains(self, occ: Occurrence) -> bool:
        acks = [ev for _, ev in occ.events if ev.kind == ACKED]
        if not acks:
            return False
        ack, before, after = acks[-1], occ.before, occ.after
        halved = max((before.cwnd + ack.acked_bytes) >> 1, 2 * self.mds)
        return after.recovery_start_us == ack.t and after.ssthresh == after.cwnd and after.cwnd <= halved


class Ngtcp2RenoFriendlySwitch(Mechanism):
    """ngtcp2 1.25.0 CUBIC in congestion avoidance sets cwnd = w_est whenever w_est > W_cubic(t)
    (lib/ngtcp2_cc.c:436-445), RFC 9438 §4.3 to the letter, even when cwnd has meanwhile climbed
    above w_est towards the target W_cubic(t + RTT) (lib/ngtcp2_cc.c:446-455): on the ACK where
    w_est overtakes W_cubic(t) the window drops a little, with no congestion signal.  W_cubic(t)
    is computed here in ngtcp2's fixed point (lib/ngtcp2_cc.c:274-306) from the snapshot's W_max,
    K and epoch (the epoch as the adapter reports it, shifted by app_limited_duration).  The drop
    is explained only where the new window is above W_cubic(t) (the Reno-friendly branch ran) and
    at most one step of w_est above it (w_est was at most W_cubic before this ACK and grows by at
    most the ACK's bytes x mds / cwnd, lib/ngtcp2_cc.c:430-441), with the curve unchanged.
    """
    name = "ngtcp2-reno-friendly-switch"
    invariants = frozenset({"excess-reduction"})
    rule = "lib/ngtcp2_cc.c:274-306, 430-455 (ngtcp2 1.25.0)"
    families = ("cubic",)

    def w_cubic(self, snap, t_us: int) -> int | None:
        """cubic_cc_compute_w_cubic (lib/ngtcp2_cc.c:274-306) at trace time t_us."""
        if snap.epoch_start_us is None or snap.w_max is None or snap.k_us is None or t_us < snap.epoch_start_us:
            return None
        tx_m = ((t_us - snap.epoch_start_us) * 1000 << 10) // 1_000_000_000
        k_m = round(snap.k_us * 1024 / 1e6)          # the snapshot's K is k_m / 1024 s
        delta_m = min(abs(tx_m - k_m), 3600 << 10)
        delta = ((((delta_m * delta_m) >> 10) * delta_m) >> 10) * self.mds * 4 // 10 >> 10
        w_max = int(snap.w_max)
        if tx_m < k_m:
            return 0 if w_max < delta else w_max - delta
        return w_max + delta

    def explains(self, occ: Occurrence) -> bool:
        acks = [ev for _, ev in occ.events if ev.kind == ACKED]
        before, after = occ.before, occ.after
        if occ.cause != "no-signal" or len(acks) != 1 or after.cwnd >= before.cwnd:
            return False
        same_curve = (before.epoch_start_us, before.w_max, before.k_us, before.ssthresh) == \
            (after.epoch_start_us, after.w_max, after.k_us, after.ssthresh)
        w_cubic = self.w_cubic(after, acks[0].t)
        if not same_curve or w_cubic is None or after.ssthresh is None or after.cwnd < after.ssthresh:
            return False
        step = -(-acks[0].acked_bytes * self.mds // before.cwnd) + 1
        return w_cubic < after.cwnd <= w_cubic + step

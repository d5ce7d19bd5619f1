"""Mechanism-checked deviations: a documented deviation excuses a finding only where it happened.

A deviation in a stack's profile.toml may name a `mechanism` (a key of MECHANISMS) and the
invariants it `explains`.  Each run of that stack then carries one instance of the
mechanism; the checker feeds it every resolved event (`observe`) and, each time one of
those invariants fires, asks it whether the stack's own rule produced that step
(`explains`).  Only occurrences it explains become deviations; any other occurrence of the
invariant stays a violation.  `tolerates` keeps the old meaning -- a wholesale waiver of
every finding of the invariant -- for deviations no mechanism expresses yet
(`ccdiff stacks --waivers` lists them, with their reasons).

A mechanism is a small executable model of the stack's own rule, with the upstream
file:line it mirrors, computed from what the harness sees (the resolved events and the
stack's snapshots): never from the stack's private state, which the adapter does not
expose, so a patched build cannot explain itself.  Adding one for another stack (picoquic's
no-recovery-period growth, quiche's HyStart++ exit) is a subclass of Mechanism and an entry
in MECHANISMS; nothing else changes.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .ledger import ACKED, LOST, SENT


@dataclass
class Occurrence:
    """One occurrence of a finding, as the checker saw it.

    cause: which rule of the invariant fired (excess-reduction: "below-beta", "in-recovery",
    "no-signal"; the others: the invariant id).  events: (index, resolved event) of the
    events judged together -- a loss and the ACK that revealed it (docs/adapters.md), or
    the one event.  before / after: the stack's snapshots around them.
    """
    invariant: str
    cause: str
    index: int
    t: int
    before: object
    after: object
    events: list = field(default_factory=list)


class Mechanism:
    """The executable form of one documented deviation.  One instance per run."""
    name = ""
    invariants: frozenset = frozenset()   # what it can explain
    rule = ""                             # the upstream rule it mirrors, file:line

    def __init__(self, max_datagram_size: int):
        self.mds = max_datagram_size

    def observe(self, index: int, ev) -> None:
        """Every resolved event, in order, before the checker judges it."""

    def explains(self, occ: Occurrence) -> bool:
        raise NotImplementedError


class Ngtcp2DeliverySsthresh(Mechanism):
    """ngtcp2 1.25.0 CUBIC's congestion event (lib/ngtcp2_cc.c:501-513):

        ssthresh = cwnd * 7 / 10
        if rs.delivered * 2 < cwnd:
            ssthresh = min(ssthresh, max(rs.delivered, bytes_in_flight + bytes_lost))
        ssthresh = max(ssthresh, 2 * mds);  cwnd = ssthresh

    rs.delivered is the rate sampler's last sample (lib/ngtcp2_rst.c:95, 116, 120): the bytes
    delivered between the send of the newest packet the last ACK acknowledged and that ACK.
    The model keeps ngtcp2's delivered counter per sent packet from the events.  An ACK of a
    packet declared lost counts in ngtcp2 only while the lost entry is still kept
    (lib/ngtcp2_rtb.c:1207-1275), which the events do not say: both readings are candidates.
    A reduction below beta is explained only if the stack's new ssthresh is the rule's value
    for the state at that event -- a beta of 0.5, or any other depth, is not.
    """
    name = "ngtcp2-delivery-ssthresh"
    invariants = frozenset({"excess-reduction"})
    rule = "lib/ngtcp2_cc.c:501-513; lib/ngtcp2_rst.c:95, 116, 120 (ngtcp2 1.25.0)"
    KEEP = 256   # ACK samples remembered (a loss group is judged within a few events)

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.delivered = [0, 0]      # ngtcp2's rst->delivered, counting ACKs of lost packets or not
        self.stamp = {}              # pn -> (delivered, delivered) when it was sent (ent->rst.delivered)
        # (ACK index, candidate rs.delivered values); before any ACK rs.delivered is 0
        # (ngtcp2_rs_init, lib/ngtcp2_rst.c:34-40)
        self.samples = deque([(-1, frozenset({0}))], maxlen=self.KEEP)

    def observe(self, index: int, ev) -> None:
        kind = ev.kind
        if kind == SENT:
            pn = ev.packets[0][0]
            self.stamp[pn] = tuple(self.delivered)
        elif kind == ACKED:
            stamp, delivered = self.stamp, self.delivered
            newest = {}
            for spurious, packets in ((False, ev.packets), (True, ev.spurious)):
                for p in packets:
                    delivered[0] += p[2]
                    if not spurious:
                        delivered[1] += p[2]
                    newest[spurious] = max(newest.get(spurious, -1), p[0])
            candidates = set()
            for pn in set(newest.values()) | {max(newest.values(), default=-1)}:
                sent = stamp.get(pn)
                if sent is not None:
                    candidates.add(delivered[0] - sent[0])
                    candidates.add(delivered[1] - sent[1])
            for packets in (ev.packets, ev.spurious):
                for p in packets:
                    stamp.pop(p[0], None)
            if candidates:
                self.samples.append((index, frozenset(candidates)))

    def sample(self, events) -> frozenset:
        """rs.delivered at the congestion event: the group's ACK's sample, else (the loss timer)
        the last ACK's before the loss."""
        indices = [i for i, ev in events if ev.kind == ACKED]
        first = events[0][0]
        for index, candidates in reversed(self.samples):
            if (indices and index == indices[-1]) or (not indices and index < first):
                return candidates
        return frozenset()

    @staticmethod
    def ssthresh(cwnd: int, delivered: int, flight_size: int, mds: int) -> int:
        """lib/ngtcp2_cc.c:501-510, in ngtcp2's integer arithmetic."""
        ssthresh = cwnd * 7 // 10
        if delivered * 2 < cwnd:
            ssthresh = min(ssthresh, max(delivered, flight_size))
        return max(ssthresh, 2 * mds)

    def expected(self, occ: Occurrence) -> set:
        events = occ.events
        lost = sum(p[2] for _, ev in events if ev.kind == LOST for p in ev.packets)
        flight = events[-1][1].bytes_in_flight_after + lost   # cstat->bytes_in_flight + ack->bytes_lost
        return {self.ssthresh(occ.before.cwnd, d, flight, self.mds) for d in self.sample(events)}

    def explains(self, occ: Occurrence) -> bool:
        if occ.cause != "below-beta" or not occ.events:
            return False
        after = occ.after
        return after.ssthresh in self.expected(occ) and after.cwnd >= after.ssthresh


class Ngtcp2GapFillAck(Mechanism):
    """ngtcp2 1.25.0 takes an ACK frame's recovery decision and its ECN reaction from its largest
    acknowledged packet only when that packet is newly acknowledged (lib/ngtcp2_rtb.c:824-826,
    862-864): an ACK that only fills a gap below the largest acknowledged so far has
    largest_pkt_sent_ts = UINT64_MAX, so CUBIC's recovery check passes (lib/ngtcp2_cc.c:320-321)
    and it grows cwnd, and it never verifies ECN (lib/ngtcp2_rtb.c:965-967, 776-780), so a CE
    count on it starts no recovery period.  Growth in recovery (and a missing ECN-CE
    reduction) is explained only on such an ACK; on an ACK that newly acknowledges the
    largest packet, ngtcp2's rule does not grow and does reduce.
    """
    name = "ngtcp2-gap-fill-ack"
    invariants = frozenset({"growth-in-recovery", "missing-reduction"})
    rule = "lib/ngtcp2_rtb.c:824-826, 862-864, 965-967; lib/ngtcp2_cc.c:320-321 (ngtcp2 1.25.0)"
    KEEP = 256

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.largest = -1                         # rtb->largest_acked_tx_pkt_num
        self.gap_fill = deque(maxlen=self.KEEP)   # (ACK index, fills a gap only)

    def observe(self, index: int, ev) -> None:
        if ev.kind != ACKED:
            return
        pns = [p[0] for p in ev.packets] + [p[0] for p in ev.spurious]
        largest = max(pns, default=-1)
        new = largest > self.largest
        self.largest = max(self.largest, largest)
        self.gap_fill.append((index, not new))

    def fills_gap(self, index: int) -> bool:
        for i, gap in reversed(self.gap_fill):
            if i == index:
                return gap
        return False

    def explains(self, occ: Occurrence) -> bool:
        acks = [(i, ev) for i, ev in occ.events if ev.kind == ACKED]
        if not acks:
            return False
        index, ev = acks[-1]
        if occ.invariant == "missing-reduction" and (not ev.ecn_ce or any(e.kind == LOST for _, e in occ.events)):
            return False   # only a CE count is ignored; a loss always reaches congestion_event
        return self.fills_gap(index)


class Ngtcp2EcnOnNewLargestOnly(Ngtcp2GapFillAck):
    """The ECN side of the same rule: a CE count on an ACK that does not raise the largest
    acknowledged packet is never verified (lib/ngtcp2_rtb.c:824-826, 965-967, 776-780), so
    no reduction, and the gap-fill growth on that ACK.  Explains only ACKs that carry CE."""
    name = "ngtcp2-ecn-on-new-largest-only"
    rule = "lib/ngtcp2_rtb.c:824-826, 965-967, 776-780; lib/ngtcp2_cc.c:320-321 (ngtcp2 1.25.0)"

    def explains(self, occ: Occurrence) -> bool:
        acks = [ev for _, ev in occ.events if ev.kind == ACKED]
        return bool(acks) and acks[-1].ecn_ce and super().explains(occ)


MECHANISMS = {m.name: m for m in (Ngtcp2DeliverySsthresh, Ngtcp2GapFillAck, Ngtcp2EcnOnNewLargestOnly)}

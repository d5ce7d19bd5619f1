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

from .k_tolerance import CUBIC_C, K_SLACK_S, K_TOLERANCE   # one tolerance for both
from .ledger import ACKED, APP_IDLE, LOST, PERSISTENT_CONGESTION, SENT
from .snapshot import CONGESTION_AVOIDANCE, RECOVERY, SLOW_START


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
    families = ("cubic", "reno")          # the controllers of the stack it applies to
    family = "cubic"                      # the one this instance judges (Profile.mechanisms sets it)

    def __init__(self, max_datagram_size: int):
        self.mds = max_datagram_size

    def observe(self, index: int, ev) -> None:
        """Every resolved event, in order, before the checker judges it."""

    def after_step(self, index: int, ev, before, after) -> None:
        """The stack's own step on that event (its snapshots), after the checker judged it."""

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
    families = ("cubic",)   # Reno decides recovery per packet (lib/ngtcp2_cc.c:126)
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
    families = ("cubic", "reno")   # the ACK processing is the connection's, for either controller

    def explains(self, occ: Occurrence) -> bool:
        acks = [ev for _, ev in occ.events if ev.kind == ACKED]
        return bool(acks) and acks[-1].ecn_ce and super().explains(occ)


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


def _lost_in_own_recovery(occ: Occurrence) -> bool:
    """quiche's in_congestion_recovery (src/recovery/congestion/mod.rs:172): every lost packet
    was sent at or before the recovery start the stack itself reports."""
    start = occ.before.recovery_start_us
    lost = [p[1] for _, ev in occ.events if ev.kind == LOST for p in ev.packets]
    return bool(lost) and start is not None and max(lost) <= start


class QuicheIdleShiftFirstSend(Mechanism):
    """quiche's idle shift (src/recovery/congestion/cubic.rs:187-192, 0.30.0) moves
    congestion_recovery_start_time forward on the first send after an idle period (to that
    send's time since 0.26.1; by the gap since the last send before, the known death spiral),
    and in_congestion_recovery is `sent_time <= congestion_recovery_start_time` (mod.rs:172):
    a packet sent at or before quiche's start counts as sent in recovery, so its loss is no new
    congestion event, although RFC 9002's timeline (which no idle moves) has a new one.
    Explained only after a send has moved the stack's recovery start in this run, and only
    where every lost packet was sent at or before the recovery start the stack reports: a
    quiche that skips the reduction of any other loss (an emptied congestion_event,
    bench/mutation.py quiche 359:5) stays a violation."""
    name = "quiche-idle-shift-first-send"
    invariants = frozenset({"missing-reduction"})
    rule = "src/recovery/congestion/cubic.rs:187-192, mod.rs:172 (quiche 0.30.0)"

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.shifted = False          # a send moved the stack's recovery start

    def after_step(self, index: int, ev, before, after) -> None:
        if ev.kind == SENT and before is not None and after.recovery_start_us != before.recovery_start_us:
            self.shifted = True

    def explains(self, occ: Occurrence) -> bool:
        return self.shifted and _lost_in_own_recovery(occ)


class QuicheNoPersistentCongestion(Mechanism):
    """quiche never declares persistent congestion (LegacyRecovery, src/recovery/congestion/
    recovery.rs:531-569, 0.30.0: cloudflare/quiche#2680), so its recovery start survives one
    that RFC 9002 B.8 clears; a loss of a packet sent before that start is then no new
    congestion event for quiche (mod.rs:172).  The collapse it skips is reported as
    persistent-congestion-ignored (a MUST, never waived); the reduction it skips afterwards is
    explained only after a persistent congestion event in the run and only where every lost
    packet was sent at or before the recovery start the stack reports."""
    name = "quiche-no-persistent-congestion"
    invariants = frozenset({"missing-reduction"})
    rule = "src/recovery/congestion/recovery.rs:531-569, mod.rs:172 (quiche 0.30.0)"

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.declared = False

    def observe(self, index: int, ev) -> None:
        if ev.kind == PERSISTENT_CONGESTION:
            self.declared = True

    def explains(self, occ: Occurrence) -> bool:
        return self.declared and _lost_in_own_recovery(occ)


def w_max_from_window(w_max, low: float, high: float, factor: float, mds: int) -> bool:
    """W_max is a window between low and high (the window before the event and what the same
    instant's ACK may have added to it), or that times the stack's fast-convergence factor,
    within a datagram (RFC 9438 §4.7, w-max-mismatch's rounding)."""
    if w_max is None:
        return False
    return any(lo - mds <= w_max <= hi + mds for lo, hi in ((low, high), (low * factor, high * factor)))


class AcksCreditedBeforeLosses(Mechanism):
    """The connection hands the controller an ACK's newly acknowledged packets before it runs
    loss detection for that ACK (quinn: connection/mod.rs:1503-1536, 1556, on_ack then
    on_end_acks, then detect_lost_packets; aioquic: recovery.py:275-335, on_packet_acked
    then _detect_loss), so the multiplicative decrease applies to the window the ACK has just
    grown; RFC 9002 A.7's OnAckReceived detects losses first.  Explains a reduction shallower
    than β of the window before the ACK only where the reduced window and ssthresh are at
    most β of that window plus every byte the ACK acknowledged (one datagram of rounding), and
    a W_max (w-max-mismatch) taken from that grown window: between the window before the ACK
    and it plus the acknowledged bytes, or 0.85 of that (fast convergence, RFC 9438 §4.7)."""
    name = "acks-credited-before-losses"
    invariants = frozenset({"shallow-reduction", "w-max-mismatch"})
    rule = "quinn-proto src/connection/mod.rs:1503-1536, 1556 (0.11.19); src/aioquic/quic/recovery.py:275-335 (1.7.2)"

    def explains(self, occ: Occurrence) -> bool:
        acked = sum(ev.acked_bytes for _, ev in occ.events if ev.kind == ACKED)
        before, after = occ.before, occ.after
        if occ.invariant == "w-max-mismatch":
            return acked > 0 and w_max_from_window(after.w_max, before.cwnd, before.cwnd + acked,
                                                   (1 + 0.7) / 2, self.mds)
        beta = 0.7 if self.family == "cubic" else 0.5       # RFC 9438 §4.6, RFC 9002 §7.3.2
        reduced = min(after.cwnd, after.ssthresh if after.ssthresh is not None else after.cwnd)
        return acked > 0 and reduced <= beta * (before.cwnd + acked) + self.mds


class KFromWMax(Mechanism):
    """RFC 8312's K = cbrt(W_max x (1 - β) / C), which assumes the stage starts at β x W_max
    (quinn: cubic.rs:36-40, computed at the congestion event, 189-197).  After fast
    convergence (W_max = 0.85 x cwnd, below the window the reduction starts from) that is
    not RFC 9438 Eq. 2's cbrt((W_max - cwnd_epoch) / C).  Explains a k-mismatch only where
    the snapshot's K is that expression of its own W_max, within k-mismatch's tolerance: a
    C or β slip in quinn's K stays a violation."""
    name = "k-from-w-max"
    invariants = frozenset({"k-mismatch"})
    rule = "quinn-proto src/congestion/cubic.rs:36-40, 189-197 (0.11.19)"
    families = ("cubic",)
    beta = 0.7

    def explains(self, occ: Occurrence) -> bool:
        after = occ.after
        if after.w_max is None or after.k_us is None:
            return False
        expected = (after.w_max / self.mds * (1 - self.beta) / CUBIC_C) ** (1 / 3)   # RFC 8312 Eq. 2
        return abs(after.k_us / 1e6 - expected) <= K_TOLERANCE * expected + K_SLACK_S


class PicoquicKFromWMax(KFromWMax):
    """picoquic's cubic_enter_avoidance: K = cubic_root(W_max x (1 - 7/8) / C) (cubic.c:138),
    which is Eq. 2 where the stage starts at W_cubic(0) = 7/8 x W_max (every congestion event,
    cubic.c:189-201) but not after a spurious-loss undo (cubic_correct_spurious, cubic.c:214-228):
    W_max is restored to W_last_max and the window to W_cubic(now) of the restored epoch, and
    K is recomputed from W_max alone.  Explains a K that is exactly that expression."""
    name = "picoquic-k-from-w-max"
    rule = "picoquic/cubic.c:138, 214-228 (1.1.53.0)"
    beta = 7 / 8


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


# -- picoquic 1.1.53.0 (picoquic/cubic.c, cc_common.c) -----------------------------------------
# Each replaces a wholesale waiver (issue #21: a beta of 0.5 planted in cubic.c:138, or ECN
# ignored in cubic.c:334, was excused by them).  Code references are to picoquic 1.1.53.0 as
# vendored by the aiopquic 0.6.1 sdist (third_party/picoquic/).

class PicoquicLossRateFilter(Mechanism):
    """picoquic reacts to an ACK-detected ("repeat") loss only once its smoothed loss rate
    exceeds 15% (cubic.c:318-336 -> picoquic_cc_hystart_loss_test, cc_common.c:105-136:
    per lost packet number, an EWMA of factor 1/16 over at most 32 numbers; threshold
    PICOQUIC_SMOOTHED_LOSS_THRESHOLD 0.15, cc_common.h:30-32).  A timer loss always counts
    (cc_common.c:128-129) and so does ECN-CE (cubic.c:320, 334: `notification == ecn_ec ||`).
    A missing reduction is explained only where the signal is ACK-detected losses alone
    and the loss rate, as picoquic computes it from the lost packet numbers, stayed at or
    below 15% for every one of them -- or, in slow start, where the signal came within one
    smoothed RTT of the epoch's start (cubic.c:320-323, for CE as for losses).  The rate is modelled on every lost packet number the
    stack evaluates: in congestion avoidance picoquic skips (short-circuit, cubic.c:333)
    the losses of packets numbered below its recovery_sequence, the first number sent after
    its last reduction, which the model takes from the stack's own steps (after_step)."""
    name = "picoquic-loss-rate-filter"
    invariants = frozenset({"missing-reduction"})
    rule = "picoquic/cubic.c:314-340; picoquic/cc_common.c:105-136; cc_common.h:30-32 (1.1.53.0)"
    families = ("cubic",)
    SCOPE, FACTOR, THRESHOLD = 32, 1.0 / 16.0, 0.15
    KEEP = 256

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.rate = 0.0                      # rtt_track->smoothed_drop_rate
        self.last_lost = 0                   # rtt_track->last_lost_packet_number (starts at 0)
        self.next_pn = 0                     # the next packet number the sender will use
        self.recovery_sequence = 0           # cubic_state->recovery_sequence
        self.avoidance = False               # the stack's state before the loss: past slow start
        self.filtered = deque(maxlen=self.KEEP)   # (LOST index, every evaluated loss stayed <= 15%)

    def loss_test(self, pn: int) -> bool:
        """cc_common.c:105-136 for a repeat loss: True when the filter lets it count."""
        if pn <= self.last_lost:
            return False                     # numbers at or below the last one: no update, 0
        next_number = max(self.last_lost, pn - self.SCOPE)
        self.rate *= (1.0 - self.FACTOR) ** (pn - next_number)
        self.rate += (1.0 - self.rate) * self.FACTOR
        self.last_lost = pn
        return self.rate > self.THRESHOLD

    def observe(self, index: int, ev) -> None:
        if ev.kind == SENT:
            self.next_pn = max(self.next_pn, ev.packets[0][0] + 1)
        elif ev.kind == LOST:
            counted = False
            for p in ev.packets:
                if self.avoidance and p[0] < self.recovery_sequence:
                    continue                 # cubic.c:333 short-circuits the test
                if self.loss_test(p[0]):
                    # The reduction happens at this packet (cubic_enter_recovery, cubic.c:152):
                    # the group's later, lower-numbered losses are then short-circuited.
                    counted, self.avoidance = True, True
                    self.recovery_sequence = self.next_pn
            self.filtered.append((index, not counted))

    def after_step(self, index: int, ev, before, after) -> None:
        if before is not None and (after.cwnd < before.cwnd or after.ssthresh != before.ssthresh):
            if ev.kind in (LOST, ACKED, PERSISTENT_CONGESTION):
                self.recovery_sequence = self.next_pn      # cubic_enter_recovery, cubic.c:152
        self.avoidance = after.phase != SLOW_START

    @staticmethod
    def too_soon_in_slow_start(occ: Occurrence) -> bool:
        """cubic.c:320-323: in slow start a counted signal reduces only more than one smoothed
        RTT after the epoch started (or once the recovery sequence is acknowledged, which the
        model does not check: it may excuse such a case in that one RTT)."""
        before, ev = occ.before, occ.events[-1][1]
        return before.phase == SLOW_START and before.epoch_start_us is not None \
            and occ.t - before.epoch_start_us <= ev.rtt[1]

    def explains(self, occ: Occurrence) -> bool:
        kinds = [ev.kind for _, ev in occ.events]
        if PERSISTENT_CONGESTION in kinds or not occ.events:
            return False
        if self.too_soon_in_slow_start(occ):
            return True
        if LOST not in kinds or any(ev.kind == ACKED and ev.ecn_ce for _, ev in occ.events):
            return False                     # CE always counts (cubic.c:320, 334)
        losses = [i for i, ev in occ.events if ev.kind == LOST]
        verdicts = dict(self.filtered)
        return all(verdicts.get(i, False) for i in losses)


class PicoquicBetaSevenEighths(Mechanism):
    """picoquic's CUBIC congestion event (cubic.c:28-29, 138, 168, 189-201): W_max is the
    window, times 7/8 when it is below the last W_max (fast convergence, which applies on the
    first event too: W_last_max starts at UINT64_MAX / send_mtu), and ssthresh = cwnd =
    W_cubic(0) = 7/8 x W_max (PICOQUIC_CUBIC_BETA_ECN).  Explains a reduction shallower than
    β = 0.7 only where the snapshots show exactly that: W_max at most the window before the
    event (plus what the same instant's ACK added), and ssthresh 7/8 of it within a byte of
    rounding -- a β of 0.9 planted in picoquic stays a violation.  Explains a W_max
    (w-max-mismatch) that is that window or 7/8 of it."""
    name = "picoquic-beta-seven-eighths"
    invariants = frozenset({"shallow-reduction", "w-max-mismatch"})
    rule = "picoquic/cubic.c:28-29, 138, 168, 189-201 (1.1.53.0)"
    families = ("cubic",)

    def explains(self, occ: Occurrence) -> bool:
        before, after = occ.before, occ.after
        if after.w_max is None or after.ssthresh is None:
            return False
        grown = before.cwnd + sum(ev.acked_bytes for _, ev in occ.events if ev.kind == ACKED)
        if occ.invariant == "w-max-mismatch":
            return w_max_from_window(after.w_max, before.cwnd, grown, 7 / 8, self.mds)
        return after.w_max <= grown + 1 and abs(after.ssthresh - after.w_max * 7 / 8) <= 2


class PicoquicTimeoutCollapse(Mechanism):
    """After a retransmission-timer loss (the adapter's mapping of persistent congestion)
    picoquic sets cwnd to its minimum and slow start but keeps ssthresh (cubic.c:181-186);
    slow start exits at that ssthresh and the next congestion-avoidance ACK takes cwnd from
    the overshoot back to max(W_cubic(t), W_reno = cwnd / 2) (cubic.c:266-270, 287-307): a
    shrink with no congestion signal.  Explained only after such a collapse (a persistent
    congestion event earlier in the run, and no other congestion signal since), with
    ssthresh unchanged by the step and the window left at or above half of what it was."""
    name = "picoquic-timeout-collapse"
    invariants = frozenset({"excess-reduction"})
    rule = "picoquic/cubic.c:181-186, 266-270, 287-307 (1.1.53.0)"
    families = ("cubic",)

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.collapsed = False

    def observe(self, index: int, ev) -> None:
        if ev.kind == PERSISTENT_CONGESTION:
            self.collapsed = True
        elif ev.kind == LOST or (ev.kind == ACKED and ev.ecn_ce):
            self.collapsed = False

    def explains(self, occ: Occurrence) -> bool:
        before, after = occ.before, occ.after
        return occ.cause == "no-signal" and self.collapsed and after.ssthresh == before.ssthresh \
            and 2 * after.cwnd >= before.cwnd


class PicoquicHystartDelayExit(Mechanism):
    """picoquic leaves its initial slow start on a delay signal (cubic.c:346-391, HyStart test
    cc_common.c:167-208): cwnd is halved (or, above the Reno target RTT, cut by half the part
    above the RTT-corrected window), then cubic_enter_recovery applies fast convergence, which
    on the first event already multiplies W_max by 7/8 (W_last_max starts at its maximum), and
    restarts the curve at W_max: at least 1/2 x 7/8 of the window before.  Explained only in
    the initial slow start (the stack reports slow start and no ssthresh yet: the test runs
    only while ssthresh is UINT64_MAX, cubic.c:347, whatever losses its filter ignored), on
    the step that sets ssthresh, with the window left at or above 7/16 of what it was."""
    name = "picoquic-hystart-delay-exit"
    invariants = frozenset({"excess-reduction"})
    rule = "picoquic/cubic.c:146-170, 346-391; picoquic/cc_common.c:167-208 (1.1.53.0)"
    families = ("cubic",)

    def explains(self, occ: Occurrence) -> bool:
        before, after = occ.before, occ.after
        return occ.cause == "no-signal" and before.phase == SLOW_START and before.ssthresh is None \
            and after.ssthresh is not None and 16 * after.cwnd >= 7 * before.cwnd


class PicoquicSlowStartSeed(Mechanism):
    """In slow start every ACK first raises cwnd to the bandwidth estimate
    (picoquic_cc_update_target_cwin_estimation, cubic.c:258) before the sender-limited test
    (cubic.c:260), so slow start grows on ACKs of app-limited packets and by more than the
    bytes acknowledged (newreno.c:222-228 likewise, in its initial slow start).  Explained
    only while the stack is in slow start (its own state); in congestion avoidance picoquic
    grows only when not sender-limited (cubic.c:287, newreno.c:230)."""
    name = "picoquic-slow-start-seed"
    invariants = frozenset({"growth-while-app-limited", "ss-growth-bound"})
    rule = "picoquic/cubic.c:256-270, 287; picoquic/newreno.c:222-228 (1.1.53.0)"
    families = ("cubic", "reno")

    def explains(self, occ: Occurrence) -> bool:
        return occ.before.phase == SLOW_START


class PicoquicEpochResetToAppLimited(Mechanism):
    """In congestion avoidance picoquic moves the epoch forward to the last time the sender
    was app-limited (cubic.c:289-291, `start_of_epoch = last_sender_limited_time`) and keeps
    K and W_max, so W_cubic(t) restarts from W_cubic(0) = beta x W_max; the window becomes
    max(W_cubic(t), W_reno) (cubic.c:293-307), which after an application-limited stretch
    can be a little below the window before: a shrink with no congestion signal.  Explained
    only on the ACK where the stack's epoch moved forward (to a time not after now) with
    W_max, K and ssthresh unchanged and the window still at or above ssthresh."""
    name = "picoquic-epoch-reset-to-app-limited"
    invariants = frozenset({"excess-reduction"})
    rule = "picoquic/cubic.c:287-307 (1.1.53.0)"
    families = ("cubic",)

    def explains(self, occ: Occurrence) -> bool:
        before, after = occ.before, occ.after
        if occ.cause != "no-signal" or before.epoch_start_us is None or after.epoch_start_us is None:
            return False
        same_curve = (before.w_max, before.k_us, before.ssthresh) == (after.w_max, after.k_us, after.ssthresh)
        return same_curve and before.epoch_start_us < after.epoch_start_us <= occ.t \
            and after.ssthresh is not None and after.cwnd >= after.ssthresh


class PicoquicRecoveryByPacketNumber(PicoquicLossRateFilter):
    """picoquic decides whether a loss is in its recovery period by packet number, not send
    time: in congestion avoidance it reduces again for a loss numbered at or above
    recovery_sequence, the next number at its last reduction (cubic.c:152, 333); in slow
    start it does not look at the number at all (cubic.c:318-326).  So a loss of a packet
    sent in the same microsecond as the recovery start but after the reduction (RFC 9002
    Appendix B.5 counts it inside the period: sent_time <= recovery start), or a slow-start
    loss of a packet the RFC's period already covered, reduces again.  NewReno decides the
    same way (newreno.c:123, recovery_sequence set at newreno.c:72).  Explained only in
    those cases, and only to a depth one of picoquic's reductions reaches: half the window
    (NewReno, newreno.c:52-62; CUBIC's 7/8 x 7/8 after fast convergence, cubic.c:158-168, is
    shallower) less a datagram of rounding, or its minimum window (cubic.c:170-178)."""
    name = "picoquic-recovery-by-packet-number"
    invariants = frozenset({"excess-reduction"})
    rule = "picoquic/cubic.c:146-178, 314-340; picoquic/newreno.c:47-73, 119-127 (1.1.53.0)"
    families = ("cubic", "reno")
    MINIMUM = 3072                       # PICOQUIC_CWIN_MINIMUM, picoquic_internal.h:93

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.sequence_at = deque(maxlen=self.KEEP)   # (LOST index, recovery_sequence before it)

    def observe(self, index: int, ev) -> None:
        if ev.kind == LOST:
            self.sequence_at.append((index, self.recovery_sequence))
        super().observe(index, ev)

    def explains(self, occ: Occurrence) -> bool:
        if occ.cause != "in-recovery":
            return False
        before, after = occ.before, occ.after
        deep_enough = 2 * after.cwnd >= before.cwnd - 2 * self.mds or after.cwnd <= self.MINIMUM
        recorded = dict(self.sequence_at)
        by_number = any(p[0] >= recorded.get(i, self.recovery_sequence)
                        for i, ev in occ.events if ev.kind == LOST for p in ev.packets)
        return deep_enough and (before.phase == SLOW_START or by_number)


class PicoquicAppLimitedByTimestamp(Mechanism):
    """picoquic grows (cubic.c:261, 287; newreno.c:230) only when the newest send time of any
    packet acknowledged so far (last_time_acked_data_frame_sent, frames.c:3638) is strictly
    after the last time the sender was limited (last_sender_limited_time: an app-limited
    send, the scheduler finding no data, and after every incoming packet while the last
    send was app-limited: sender.c:1426, 3307-3316).  An ACK whose packets the trace marks
    app-limited still grows the window when a packet sent after that instant was already
    acknowledged.  Explained only where that rule, replayed from the events, lets it grow."""
    name = "picoquic-app-limited-by-timestamp"
    invariants = frozenset({"growth-while-app-limited"})
    rule = "picoquic/cubic.c:261, 287; picoquic/newreno.c:230; picoquic/frames.c:3638; picoquic/sender.c:1426, 3307-3316 (1.1.53.0)"
    families = ("cubic", "reno")

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.acked_sent = None           # last_time_acked_data_frame_sent
        self.limited = None              # last_sender_limited_time
        self.last_send_limited = False
        self.grows = deque(maxlen=256)   # (ACK index, the rule let it grow)

    def observe(self, index: int, ev) -> None:
        if ev.kind == SENT:
            self.last_send_limited = bool(ev.packets[0][3])
            if self.last_send_limited:
                self.limited = ev.t
        elif ev.kind == APP_IDLE:
            self.limited = ev.t
        elif ev.kind == ACKED:
            for p in tuple(ev.packets) + tuple(ev.spurious):
                if self.acked_sent is None or p[1] > self.acked_sent:
                    self.acked_sent = p[1]
            self.grows.append((index, self.acked_sent is not None
                               and (self.limited is None or self.acked_sent > self.limited)))
            if self.last_send_limited:
                self.limited = ev.t

    def explains(self, occ: Occurrence) -> bool:
        return dict(self.grows).get(occ.index, False)


class AioquicFlightSizeSsthresh(Mechanism):
    """aioquic 1.7.2 CUBIC's congestion event (on_packets_lost, cubic.py:161-195) takes RFC
    9438 §4.6's equation with flight_size, not cwnd:

        bytes_in_flight -= every lost packet's size
        ssthresh = max(int(bytes_in_flight * 0.7), 2 * mds);  cwnd = max(ssthresh, 2 * mds)

    and runs after the ACK's packets left the flight (QuicPacketRecovery.on_ack_received acks
    before it detects losses, recovery.py:286, 335).  With less in flight than the window the
    reduction goes below beta x cwnd.  Explained only where the new window is the rule's value
    for the flight the harness counted around the congestion event (after the loss and the ACK
    that revealed it; before the next send when the loss timer committed it) and the stack's
    recovery start moved to the loss's instant: any other depth (a beta of 0.5) is not.
    """
    name = "aioquic-flight-size-ssthresh"
    invariants = frozenset({"excess-reduction"})
    rule = "src/aioquic/quic/congestion/cubic.py:161-192 (aioquic 1.7.2)"
    families = ("cubic",)

    def explains(self, occ: Occurrence) -> bool:
        after, before = occ.after, occ.before
        if occ.cause != "below-beta" or after.ssthresh is None or after.ssthresh != after.cwnd:
            return False
        losses = [ev.t for _, ev in occ.events if ev.kind == LOST]
        if after.recovery_start_us is None or after.recovery_start_us == before.recovery_start_us \
                or (losses and after.recovery_start_us not in losses):
            return False
        flights = {f for _, ev in occ.events for f in (ev.bytes_in_flight, ev.bytes_in_flight_after)}
        return any(after.cwnd == max(int(f * 0.7), 2 * self.mds) for f in flights)


class AioquicIdleReset(Mechanism):
    """aioquic 1.7.2 CUBIC's only idle rule (on_packet_sent, cubic.py:149-155): a send at
    least K_CUBIC_MAX_IDLE_TIME = 2 s after last_ack -- the SEND time of the last packet
    on_packet_acked saw (cubic.py:72; the ACK's packets in ascending order,
    recovery.py:275-288) -- calls reset() (cubic.py:58-68): cwnd = 10 x mds, ssthresh None,
    W_max = cwnd, K = 0.  Upstream's intent is its comment, cubic.py:16: "reset the cwnd after
    2 seconds of inactivity" (RFC 9002 §7.8 lets a sender update its window after
    underutilization).  So only a reset after 2 s of real inactivity is explained: nothing in
    flight at the send, and no send and no ACK for 2 s before it (1 us of float rounding
    allowed), leaving exactly that state.  The same code also fires with bytes in flight (an
    outage of 2 s and its PTO probes: a window of 462 kB cut to 12 kB with no congestion
    signal) and after a pause under 2 s on a path with a long RTT (last_ack is a send time):
    neither is inactivity, both stay violations -- aioquic's bug, not its intent.  A reset
    that raises the window is growth-without-ack, which nothing here explains.
    """
    name = "aioquic-idle-reset"
    invariants = frozenset({"excess-reduction"})
    rule = "src/aioquic/quic/congestion/cubic.py:16, 58-72, 149-155 (aioquic 1.7.2)"
    families = ("cubic",)
    IDLE_US = 2_000_000

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.last_ack_sent = None    # aioquic's last_ack: the send time of the last packet acked
        self.last_activity = None    # the later of the last ACK's arrival and the last send
        self.inactive = {}           # index of the latest send -> (nothing in flight, idle us)

    def observe(self, index: int, ev) -> None:
        if ev.kind == SENT:
            idle = None if self.last_activity is None else ev.t - self.last_activity
            self.inactive = {index: (ev.bytes_in_flight == 0, idle)}
            self.last_activity = ev.t
        if ev.kind == ACKED and ev.packets:
            self.last_ack_sent = max(ev.packets)[1]      # the largest newly acked pn's send time
            self.last_activity = ev.t

    def explains(self, occ: Occurrence) -> bool:
        after = occ.after
        if occ.cause != "no-signal" or self.last_ack_sent is None:
            return False
        reset = (after.cwnd == 10 * self.mds and after.ssthresh is None and after.w_max == 10 * self.mds
                 and after.k_us == 0 and after.epoch_start_us is None)
        if not reset:
            return False
        for index, ev in occ.events:
            if ev.kind != SENT or ev.t - self.last_ack_sent < self.IDLE_US - 1:
                continue                                   # not aioquic's rule at all
            empty, idle = self.inactive.get(index, (False, None))
            if empty and idle is not None and idle >= self.IDLE_US - 1:
                return True                                # 2 s of real inactivity: its intent
        return False


class AioquicRenoFriendlySwitch(Mechanism):
    """aioquic 1.7.2 CUBIC sets cwnd = W_est whenever W_cubic(t) < W_est (cubic.py:124-127),
    even when cwnd had climbed above W_est towards the target W_cubic(t + rtt)
    (cubic.py:113-147): on the ACK where W_est overtakes W_cubic(t) the window drops a little,
    with no congestion signal.  W_cubic(t) = int((0.4 (t - K)^3 + W_max / mds) x mds)
    (cubic.py:47-50) from the snapshot's W_max, K and epoch.  Explained only where the new
    window is above W_cubic(t) (the Reno-friendly branch ran) and at most the ACK's W_est
    increments above it (W_est was at most W_cubic(t) before: otherwise cwnd = W_est already;
    each packet adds int(mds x bytes / cwnd), cubic.py:107-111), with the curve unchanged.
    """
    name = "aioquic-reno-friendly-switch"
    invariants = frozenset({"excess-reduction"})
    rule = "src/aioquic/quic/congestion/cubic.py:47-50, 107-147 (aioquic 1.7.2)"
    families = ("cubic",)

    def explains(self, occ: Occurrence) -> bool:
        acks = [ev for _, ev in occ.events if ev.kind == ACKED]
        before, after = occ.before, occ.after
        # "in-recovery": the ACK came with a loss of a packet sent during the recovery
        # period, which aioquic ignores (cubic.py:169), so only the ACK moved the window.
        if occ.cause not in ("no-signal", "in-recovery") or len(acks) != 1 or after.cwnd >= before.cwnd:
            return False
        same_curve = (before.epoch_start_us, before.w_max, before.k_us, before.ssthresh,
                      before.recovery_start_us) == \
            (after.epoch_start_us, after.w_max, after.k_us, after.ssthresh, after.recovery_start_us)
        if not same_curve or after.epoch_start_us is None or after.w_max is None or after.k_us is None:
            return False
        t = (acks[0].t - after.epoch_start_us) / 1e6
        w_cubic = int((0.4 * (t - after.k_us / 1e6) ** 3 + after.w_max / self.mds) * self.mds)
        step = sum(self.mds * p[2] // max(after.cwnd, 1) + 1 for p in acks[0].packets) + 1
        return w_cubic - 1 <= after.cwnd <= w_cubic + step


class S2nUnderUtilized(Mechanism):
    """s2n-quic's CUBIC gates growth on one flag, `under_utilized`, set by the LAST packet sent
    (cubic.rs:221-232): the connection's app_limited for that packet (nothing more to send and
    room for another datagram after it, s2n-quic-transport space/application.rs:587-589, path/
    mod.rs:600-609) AND the window under-utilized after it: not congestion-limited, in slow
    start less than half the window in flight, otherwise more than 3 datagrams of room
    (cubic.rs:669-690).  An ACK of packets the trace marks app-limited still grows the window
    when the last send filled half the window in slow start, or left at most 3 datagrams of
    room.  Replayed from the events and the stack's own snapshots (cwnd, bytes in flight and
    phase after each send); explained only where that flag was clear at the ACK."""
    name = "s2n-under-utilized-window"
    invariants = frozenset({"growth-while-app-limited"})
    rule = "src/recovery/cubic.rs:221-232, 302-312, 669-690 (s2n-quic-core 0.91.0); src/space/application.rs:587-589 (s2n-quic-transport 0.91.0)"
    families = ("cubic",)

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.under = True                 # CubicCongestionController::new (cubic.rs:516)
        self.under_at = deque(maxlen=256)  # (ACK index, under_utilized when it arrived)

    def observe(self, index: int, ev) -> None:
        if ev.kind == ACKED:
            self.under_at.append((index, self.under))

    def after_step(self, index: int, ev, before, after) -> None:
        if ev.kind != SENT:
            return
        cwnd, in_flight, mds = after.cwnd, after.bytes_in_flight, self.mds
        room = cwnd - in_flight
        app_limited = bool(ev.packets[0][3]) and room >= mds        # application.rs:587-589
        congestion_limited = room < mds                              # cubic.rs:191-196
        half_used = after.phase == SLOW_START and in_flight >= cwnd // 2
        self.under = app_limited and not congestion_limited and not half_used and room > 3 * mds

    def explains(self, occ: Occurrence) -> bool:
        return dict(self.under_at).get(occ.index, True) is False


class S2nRecoveryByState(S2nUnderUtilized):
    """s2n-quic's CUBIC keeps its recovery period as a state, not as a send time: on_packet_lost
    carries no send time (PacketInfo = (), cubic.rs:178, 390-409), so any loss or CE count while
    the state is Recovery is ignored and any loss outside it reduces (cubic.rs:622-659), and the
    state ends only when on_ack sees a packet sent after the recovery start -- on an ACK that
    is processed after the losses it reveals (s2n-quic-transport recovery/manager.rs:644,
    728-741) and only while the window is not under-utilized (cubic.rs:302-322).  RFC 9002
    §7.3.2's prose ("a recovery period ends ... when a packet sent during the recovery period
    is acknowledged"; "during a recovery period, the congestion window does not change in
    response to new losses") against its Appendix B.8, which compares each lost packet's send
    time with the recovery start.  Explained: a missing reduction while the stack is in
    Recovery and this model (ACKs of post-start packets, processed while not under-utilized)
    agrees it had not left; growth on the ACK that ends the stack's recovery period (a packet
    sent after its start); and a single beta step on a loss after the stack left it."""
    name = "s2n-recovery-by-state"
    invariants = frozenset({"missing-reduction", "growth-in-recovery", "excess-reduction"})
    rule = "src/recovery/cubic.rs:302-322, 390-421, 622-659 (s2n-quic-core 0.91.0); src/recovery/manager.rs:644, 728-741 (s2n-quic-transport 0.91.0)"
    families = ("cubic",)
    BETA = 0.7

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.start = None        # recovery start while the model says the stack is in recovery
        self.ended = None        # the start of the period the model saw end
        self.exit = False        # this ACK ends the period (a post-start packet, not under-utilized)
        self.start_at = deque(maxlen=256)   # (index, start before that event): a loss group is
        #                                     judged after its later events have stepped
        self.exits = deque(maxlen=256)      # ACK indices that ended a period (model)
        self.ignored = deque(maxlen=64)     # times of losses the stack took inside its period

    def observe(self, index: int, ev) -> None:
        super().observe(index, ev)
        self.start_at.append((index, self.start))
        self.exit = (ev.kind == ACKED and self.start is not None and not self.under
                     and any(p[1] > self.start for p in ev.packets))
        if self.exit:
            self.exits.append(index)
        if ev.kind == LOST and self.start is not None:
            self.ignored.append(ev.t)

    def after_step(self, index: int, ev, before, after) -> None:
        super().after_step(index, ev, before, after)
        if self.exit and ev.kind == ACKED:
            self.ended, self.start = self.start, None
        elif after.phase == RECOVERY and after.recovery_start_us not in (None, self.ended):
            self.start = after.recovery_start_us
        elif after.phase == SLOW_START:
            self.start = None
        if ev.kind == ACKED:
            self.exit = False

    def explains(self, occ: Occurrence) -> bool:
        before, after = occ.before, occ.after
        first = min((i for i, _ in occ.events), default=occ.index)
        start = dict(self.start_at).get(first, self.start)   # the model's, before the group
        if occ.invariant == "missing-reduction":
            return before.phase == RECOVERY and start is not None
        acks = [(i, ev) for i, ev in occ.events if ev.kind == ACKED]
        if occ.invariant == "growth-in-recovery":
            if (any(i in self.exits for i, _ in acks) and before.phase == RECOVERY
                    and after.phase == CONGESTION_AVOIDANCE and after.epoch_start_us == occ.t):
                return True     # the ACK that ends the stack's period
            # an ACK of packets sent before the recovery start, after an earlier ACK ended the
            # stack's period (model-confirmed): RFC 9002 B.5 never grows on such packets, s2n's
            # congestion-avoidance state does (cubic.rs:315-322, 343-383)
            if (before.phase == CONGESTION_AVOIDANCE and start is None and self.ended is not None
                    and self.ended == before.recovery_start_us):
                return True
            # an ACK of packets sent before a loss the stack took inside its (then) period,
            # after that period ended: the RFC's period the stack never entered
            epoch = after.epoch_start_us
            sent = [p[1] for _, ev in acks for p in ev.packets]
            return (before.phase == CONGESTION_AVOIDANCE and epoch is not None and bool(sent)
                    and any(lt <= epoch and max(sent) <= lt for lt in self.ignored))
        if occ.invariant == "excess-reduction" and occ.cause == "in-recovery":
            one_step = max(int(before.cwnd * self.BETA) - 1, 2 * self.mds)
            left = (start is None and before.phase != RECOVERY) or any(i in self.exits for i, _ in occ.events)
            return (left and after.phase == RECOVERY and after.recovery_start_us == occ.t
                    and after.cwnd >= one_step)
        return False

class S2nRenoFriendlySet(Mechanism):
    """s2n-quic's CUBIC in its Reno-friendly region SETS cwnd = min(W_est(t), cap) at every
    ACK (cubic.rs:554-567, RFC 8312 §4.2's "cwnd SHOULD be set to W_est(t)"), with W_est(t) =
    W_max x 0.7 + 3 x 0.3 / 1.7 x t / min_rtt (cubic.rs:771-776, 380) -- also when W_est is
    below the current window (after the app-limited rule moved the epoch, or min_rtt fell), so
    an ACK can shrink the window without a congestion signal.  Explained only where the
    window after the ACK is that W_est (within 1 %), computed from the stack's own W_max and
    epoch and the harness's min RTT, in congestion avoidance on both sides."""
    name = "s2n-reno-friendly-set"
    invariants = frozenset({"excess-reduction"})
    rule = "src/recovery/cubic.rs:547-567, 771-776 (s2n-quic-core 0.91.0)"
    families = ("cubic",)

    def explains(self, occ: Occurrence) -> bool:
        before, after = occ.before, occ.after
        acks = [ev for _, ev in occ.events if ev.kind == ACKED]
        if (occ.cause != "no-signal" or not acks or before.phase != CONGESTION_AVOIDANCE
                or after.phase != CONGESTION_AVOIDANCE or after.epoch_start_us is None
                or after.w_max is None or after.w_max != after.w_max):
            return False
        min_rtt = acks[-1].rtt[3]
        if min_rtt <= 0:
            return False
        t = (occ.t - after.epoch_start_us) / 1e6
        w_est = after.w_max * 0.7 + (3 * 0.3 / 1.7) * t / (min_rtt / 1e6) * self.mds
        return after.cwnd < before.cwnd and abs(after.cwnd - w_est) <= 0.01 * w_est


class WEstClosedForm(Mechanism):
    """RFC 8312's closed-form Reno-friendly estimate (quinn: cubic.rs:49-56, 131-155):
    W_est(t) = W_max x 0.7 + 3 x 0.3 / 1.7 x t / RTT, a function of the time since the
    stack's epoch, not RFC 9438 §4.3's W_est += α x acked / cwnd per ACK.  It grows with
    elapsed time whatever was acknowledged, so after a gap (an idle period the stack keeps in t,
    a stall) the window jumps to it faster than ca-off-curve's per-ACK sums allow.  Explains a
    ca-off-curve above the curve only where the window after the ACK is at most that W_est,
    from the stack's own W_max and epoch, plus one datagram (quinn adds a whole MTU at a time;
    s2n-quic caps the step, its src/recovery/cubic.rs:556-558): a larger W_est (another α or
    β) or growth past it stays a violation.  RTT: quinn's smoothed RTT, before or after this
    ACK's sample."""
    name = "w-est-closed-form"
    invariants = frozenset({"ca-off-curve"})
    rule = "quinn-proto src/congestion/cubic.rs:49-56, 131-155 (0.11.19)"
    families = ("cubic",)
    beta = 0.7

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.rtt = None          # the RTT values of the ACK before the current one
        self.prior_rtt = None

    def observe(self, index: int, ev) -> None:
        if ev.kind == ACKED:
            self.prior_rtt, self.rtt = self.rtt, ev.rtt

    def rtts(self) -> list:
        """The RTTs (µs) the stack may have divided by: smoothed, after and before the sample."""
        return [r[1] for r in (self.rtt, self.prior_rtt) if r is not None]

    def explains(self, occ: Occurrence) -> bool:
        after = occ.after
        if occ.cause != "above" or after.epoch_start_us is None or after.w_max is None:
            return False
        rtts = [r for r in self.rtts() if r > 0]
        if not rtts:
            return False
        t = (occ.t - after.epoch_start_us) / 1e6
        alpha = 3 * (1 - self.beta) / (1 + self.beta)
        w_est = after.w_max * self.beta + alpha * t / (min(rtts) / 1e6) * self.mds   # RFC 8312 Eq. 4
        return after.cwnd <= w_est + self.mds


class S2nWEstClosedForm(WEstClosedForm):
    """s2n-quic's W_est is the same closed form over min_rtt (cubic.rs:771-776, 380), not the
    smoothed RTT: explained only with the harness's min RTT."""
    name = "s2n-w-est-closed-form"
    rule = "src/recovery/cubic.rs:547-567, 771-776 (s2n-quic-core 0.91.0)"

    def rtts(self) -> list:
        return [self.rtt[3]] if self.rtt is not None else []


class S2nFastConvergenceRfc8312(Mechanism):
    """s2n-quic's fast convergence is RFC 8312 §4.6's: W_max is reduced to 0.85 of the window
    when that window is below W_last_max, the *unreduced* window of the previous congestion
    event (cubic.rs:790-824), where RFC 9438 §4.7 compares with W_max, which fast convergence
    may already have reduced.  A window between the two (below the last event's window, above
    0.85 of it) gets 0.85 in s2n and the window itself in RFC 9438.  Explains a W_max
    (w-max-mismatch) that is 0.85 x the window before the event only where that window is
    below the window before the previous event whose W_max it saw (reset to none by a
    persistent congestion, which zeroes W_last_max, cubic.rs:742-743)."""
    name = "s2n-fast-convergence-rfc8312"
    invariants = frozenset({"w-max-mismatch"})
    rule = "src/recovery/cubic.rs:790-824, 742-743 (s2n-quic-core 0.91.0)"
    families = ("cubic",)

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.events = []     # (index, window before it) of each reduction that set W_max

    def after_step(self, index: int, ev, before, after) -> None:
        if before is None:
            return
        if ev.kind == PERSISTENT_CONGESTION or after.w_max == 0:    # cubic.rs:742-743
            self.events.clear()
        elif after.w_max != before.w_max and after.cwnd < before.cwnd:
            self.events = self.events[-1:] + [(index, before.cwnd)]

    def explains(self, occ: Occurrence) -> bool:
        earlier = [window for index, window in self.events if index < occ.index]
        prior = occ.before.cwnd
        if not earlier or not prior < earlier[-1] or occ.after.w_max is None:
            return False
        return abs(occ.after.w_max - max(prior * (1 + 0.7) / 2, 2 * self.mds)) <= self.mds


class MsquicFastConvergenceRfc8312(S2nFastConvergenceRfc8312):
    """msquic's fast convergence is RFC 8312 §4.6's, as s2n-quic's: W_max = cwnd x 17 / 20
    when the window is below WindowLastMax, the previous congestion event's unreduced window
    (cubic.c:332-343; cubic.h: "W_last_max from rfc8312bis").  Persistent congestion sets
    WindowLastMax = W_max = 0.7 x cwnd (cubic.c:319-324), so the next event compares with
    that, not with the window before the collapse."""
    name = "msquic-fast-convergence-rfc8312"
    rule = "src/core/cubic.c:319-324, 332-343 (msquic 2.5.1)"

    def after_step(self, index: int, ev, before, after) -> None:
        if before is None:
            return
        if ev.kind == PERSISTENT_CONGESTION and after.w_max is not None:
            self.events = [(index, after.w_max)]
        elif after.w_max != before.w_max and after.cwnd < before.cwnd:
            self.events = self.events[-1:] + [(index, before.cwnd)]

    def explains(self, occ: Occurrence) -> bool:
        earlier = [window for index, window in self.events if index < occ.index]
        prior = occ.before.cwnd
        if not earlier or not prior < earlier[-1] or occ.after.w_max is None:
            return False
        return occ.after.w_max == prior * (10 + 7) // 20


class S2nEcnOnNewLargestOnly(Ngtcp2EcnOnNewLargestOnly):
    """s2n-quic processes an ACK frame's ECN counts only when the frame's largest
    acknowledged is at least the largest acknowledged so far (s2n-quic-transport
    recovery/manager.rs:444-450, 718-726: "An endpoint MUST NOT fail ECN validation as a
    result of processing an ACK frame that does not increase the largest acknowledged",
    RFC 9000 §13.4.2.1, applied to the whole CE reaction): a CE count on a reordered ACK
    frame starts no recovery period.  The same rule as ngtcp2's, with s2n's tie (an equal
    largest counts as new)."""
    name = "s2n-ecn-on-new-largest-only"
    rule = "src/recovery/manager.rs:444-450, 718-726, 766-779 (s2n-quic-transport 0.91.0)"
    families = ("cubic",)

    def observe(self, index: int, ev) -> None:
        if ev.kind != ACKED:
            return
        pns = [p[0] for p in ev.packets] + [p[0] for p in ev.spurious]
        largest = max(pns, default=-1)
        new = largest >= self.largest
        self.largest = max(self.largest, largest)
        self.gap_fill.append((index, not new))


# -- msquic 2.5.1 (src/core/cubic.c) -----------------------------------------------------------

def msquic_cube_root(radicand: int) -> int:
    """CubeRoot (cubic.c:43-62), in uint32 arithmetic: the shifting nth-root, 3 bits a step."""
    x = y = 0
    for i in range(30, -1, -3):
        x = (x * 8 + ((radicand >> i) & 7)) & 0xFFFFFFFF
        if (((y * 2 + 1) ** 3) & 0xFFFFFFFF) <= x:
            y = y * 2 + 1
        else:
            y = y * 2
    return y


def msquic_k_ms(w_max: int, mds: int) -> int:
    """KCubic (cubic.c:345-358): K = cbrt(W_max x (1 - β) / C) with W_max in whole datagrams
    (integer division), TEN_TIMES_BETA_CUBIC 7 and TEN_TIMES_C_CUBIC 4, the radicand shifted
    left by 9 and the root (then in ms) right by 3: a 1/8 s grid."""
    radicand = (((w_max // mds) * (10 - 7)) << 9) // 4
    return ((msquic_cube_root(radicand & 0xFFFFFFFF) * 1000) & 0xFFFFFFFF) >> 3


class MsquicKFromWMax(Mechanism):
    """msquic's K is RFC 8312's cbrt(W_max x (1 - β) / C) of the W_max it keeps (after fast
    convergence), computed in integers: W_max in whole datagrams and the root on a 1/8 s grid
    (cubic.c:345-358); persistent congestion sets K = 0 with W_max = 0.7 x cwnd
    (cubic.c:318-327).  RFC 9438 Eq. 2 takes K from the window the stage starts at, which
    differs after fast convergence and where the window was clamped up to the minimum
    (cubic.c:361-366).  Explains a k-mismatch only where the snapshot's K is exactly that
    integer expression of its own W_max (or 0 after persistent congestion)."""
    name = "msquic-k-from-w-max"
    invariants = frozenset({"k-mismatch"})
    rule = "src/core/cubic.c:318-327, 345-358 (msquic 2.5.1)"
    families = ("cubic",)

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.collapsed = False       # the last congestion event was persistent congestion

    def observe(self, index: int, ev) -> None:
        if ev.kind == PERSISTENT_CONGESTION:
            self.collapsed = True
        elif ev.kind == LOST:
            self.collapsed = False

    def explains(self, occ: Occurrence) -> bool:
        after = occ.after
        if after.w_max is None or after.k_us is None:
            return False
        if after.k_us == 0 and self.collapsed:
            return True
        return after.k_us == msquic_k_ms(int(after.w_max), self.mds) * 1000


class MsquicFlightMaxCap(Mechanism):
    """msquic's CUBIC has no app-limited state (CubicCongestionControlIsAppLimited returns
    FALSE, SetAppLimited does nothing: cubic.c:854-871): every ACK grows the window by the
    usual rules, and the window is capped at 2 x BytesInFlightMax, the largest bytes in
    flight after any send (initially half the initial window; cubic.c:167, 381-385, 654-666).
    Explains growth while app-limited only where the new window is within that cap, modelled
    from the sends."""
    name = "msquic-flight-max-cap"
    invariants = frozenset({"growth-while-app-limited"})
    rule = "src/core/cubic.c:381-385, 654-666, 854-871 (msquic 2.5.1)"
    initial_window_datagrams = 10   # QUIC_INITIAL_WINDOW_PACKETS (quicdef.h)

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.flight_max = self.initial_window_datagrams * max_datagram_size // 2

    def observe(self, index: int, ev) -> None:
        if ev.kind == SENT:
            self.flight_max = max(self.flight_max, ev.bytes_in_flight_after)

    def explains(self, occ: Occurrence) -> bool:
        return occ.after.cwnd <= 2 * self.flight_max


MECHANISMS = {m.name: m for m in (Ngtcp2DeliverySsthresh, Ngtcp2GapFillAck, Ngtcp2EcnOnNewLargestOnly,
                                  Ngtcp2RenoAckedBeforeCongestionEvent, Ngtcp2RenoFriendlySwitch, AcksCreditedBeforeLosses, KFromWMax, PicoquicKFromWMax,
                                  QuicheIdleShiftFirstSend, QuicheNoPersistentCongestion,
                                  PicoquicLossRateFilter, PicoquicBetaSevenEighths, PicoquicTimeoutCollapse, PicoquicHystartDelayExit,
                                  PicoquicSlowStartSeed, PicoquicEpochResetToAppLimited,
                                  PicoquicRecoveryByPacketNumber, PicoquicAppLimitedByTimestamp,
                                  AioquicFlightSizeSsthresh, AioquicIdleReset, AioquicRenoFriendlySwitch,
                                  S2nUnderUtilized, S2nRecoveryByState, S2nRenoFriendlySet, S2nFastConvergenceRfc8312,
                                  WEstClosedForm, S2nWEstClosedForm,
                                  S2nEcnOnNewLargestOnly, MsquicKFromWMax, MsquicFlightMaxCap,
                                  MsquicFastConvergenceRfc8312)}

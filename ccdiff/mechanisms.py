"""Mechanism-checked deviations: a documented deviation excuses a finding only where it happened.

A deviation in a stack's profile.toml may name a `mechanism` (a key of `registry()`) and the
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
expose, so a patched build cannot explain itself.

This module is the shape every mechanism shares (`Occurrence`, `Mechanism`) and the rules
more than one stack runs (SHARED).  A stack's own mechanisms live in its folder,
implementations/<stack>/mechanisms.py: every subclass of Mechanism defined there with a
`name` of its own is registered under that name (`registry`), so adding one touches
nothing here (docs/adding-a-stack.md, step 6).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .errors import SetupError
from .k_tolerance import CUBIC_C, K_SLACK_S, K_TOLERANCE   # one tolerance for both
from .ledger import ACKED, LOST, PERSISTENT_CONGESTION
from .paths import implementations_dir
from .recipes import folder_module


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


# The rules more than one stack runs: quinn's and aioquic's profiles name the first three
# as they are, and picoquic's, s2n-quic's and msquic's folders subclass them or the last three.
SHARED = (AcksCreditedBeforeLosses, KFromWMax, WEstClosedForm, Ngtcp2GapFillAck, Ngtcp2EcnOnNewLargestOnly,
          S2nFastConvergenceRfc8312)
_REGISTRIES: dict = {}


def registry() -> dict:
    """Every mechanism by name: SHARED, then each stack folder's mechanisms.py in folder
    order, its classes in the order it defines them.  A class registers under a `name` it
    sets itself (one it only inherits is its base's); a name registered twice is a setup
    error naming both files.  Read once per implementations folder."""
    root = implementations_dir()
    found = _REGISTRIES.get(root)
    if found is not None:
        return found
    found = {m.name: m for m in SHARED}
    where = {m.name: __file__ for m in SHARED}
    for path in sorted(root.glob("*/mechanisms.py")):
        if not path.with_name("stack.toml").is_file():
            continue
        module = folder_module(path.parent, "mechanisms")
        for obj in vars(module).values():
            if not (isinstance(obj, type) and issubclass(obj, Mechanism) and obj.__module__ == module.__name__
                    and vars(obj).get("name")):
                continue
            if obj.name in found:
                raise SetupError(f"{path}: mechanism {obj.name!r} is already registered by {where[obj.name]}")
            found[obj.name], where[obj.name] = obj, str(path)
    _REGISTRIES[root] = found
    return found

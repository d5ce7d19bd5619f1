"""msquic's mechanisms: the executable form of its profile's mechanism-checked deviations,
msquic 2.5.1 (src/core/cubic.c).

Loaded by ccdiff/mechanisms.py (`registry`), which registers every Mechanism subclass
defined here under its `name`; the shape they share is that module's (docs/adding-a-stack.md)."""
from __future__ import annotations


from collections import deque

from ccdiff.ledger import ACKED, LOST, PERSISTENT_CONGESTION, SENT
from ccdiff.mechanisms import Mechanism, Ngtcp2EcnOnNewLargestOnly, Occurrence, S2nFastConvergenceRfc8312


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


class MsquicEcnOnNewLargestOnly(Ngtcp2EcnOnNewLargestOnly):
    """msquic reads an ACK frame's ECN counts only when the frame raises the largest
    acknowledged packet number (loss_detection.c:1523-1528: "Per RFC 9000, we validate ECN
    counts from received ACK frames when the largest acked packet number increases"), and
    only then calls OnEcn: a CE count on a reordered ACK frame starts no congestion event.
    Explains a missing reduction only on such a frame that carries CE and reveals no loss
    (a loss always reaches OnDataLost); a CE count on a frame with a new largest reaches
    OnEcn, where recovery-by-packet-number decides."""
    name = "msquic-ecn-on-new-largest-only"
    invariants = frozenset({"missing-reduction"})
    rule = "src/core/loss_detection.c:1523-1566 (msquic 2.5.1)"
    families = ("cubic",)


class MsquicRecoveryByPacketNumber(Mechanism):
    """msquic leaves recovery on the first ACK whose largest acknowledged packet (the largest
    ever acknowledged) is numbered above RecoverySentPacketNumber, the largest packet sent at
    the congestion event (cubic.c:434-446); that ACK does not grow, the next ones grow in
    congestion avoidance whatever packets they acknowledge.  RFC 9002 B.5 keeps every packet
    sent before the recovery start from growing the window.  A congestion event is a loss
    numbered above RecoverySentPacketNumber, or the first (cubic.c:716-726), or a CE count on an
    ACK raising the largest acknowledged above it (cubic.c:751-761; loss_detection.c:1523-1566,
    ECN before OnDataAcknowledged).  Explains growth-in-recovery only on an ACK that reveals no
    loss and finds the rule, replayed from the events, out of recovery before it."""
    name = "msquic-recovery-by-packet-number"
    invariants = frozenset({"growth-in-recovery"})
    rule = "src/core/cubic.c:434-446, 716-726, 751-761; src/core/loss_detection.c:1523-1624 (msquic 2.5.1)"
    families = ("cubic",)

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.largest_sent = self.largest_acked = self.recovery_pn = -1
        self.had_event = self.in_recovery = False
        self.out_before = deque(maxlen=256)     # (ACK index, out of recovery before it)

    def _congestion_event(self) -> None:
        self.recovery_pn, self.in_recovery, self.had_event = self.largest_sent, True, True

    def observe(self, index: int, ev) -> None:
        if ev.kind == SENT:
            self.largest_sent = max(self.largest_sent, max(p[0] for p in ev.packets))
        elif ev.kind in (LOST, PERSISTENT_CONGESTION):
            lost = max((p[0] for p in ev.packets), default=-1)
            if not self.had_event or lost > self.recovery_pn:
                self._congestion_event()
        elif ev.kind == ACKED:
            self.out_before.append((index, not self.in_recovery))
            largest = max((p[0] for p in ev.packets), default=-1)
            new_largest = largest > self.largest_acked
            self.largest_acked = max(self.largest_acked, largest)
            if ev.ecn_ce and new_largest and (not self.had_event or self.largest_acked > self.recovery_pn):
                self._congestion_event()
            elif self.in_recovery and self.largest_acked > self.recovery_pn:
                self.in_recovery = False

    def explains(self, occ: Occurrence) -> bool:
        if any(ev.kind != ACKED for _, ev in occ.events) or not occ.events:
            return False
        return dict(self.out_before).get(occ.events[-1][0], False)

"""msquic's mechanisms: the executable form of its profile's mechanism-checked deviations,
msquic 2.5.1 (src/core/cubic.c).

Loaded by ccdiff/mechanisms.py (`registry`), which registers every Mechanism subclass
defined here under its `name`; the shape they share is that module's (docs/adding-a-stack.md)."""
from __future__ import annotations


from ccdiff.ledger import LOST, PERSISTENT_CONGESTION, SENT
from ccdiff.mechanisms import Mechanism, Occurrence, S2nFastConvergenceRfc8312


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

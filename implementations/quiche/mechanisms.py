"""quiche's mechanisms: the executable form of its profile's mechanism-checked deviations,
quiche (src/recovery/congestion/).

Loaded by ccdiff/mechanisms.py (`registry`), which registers every Mechanism subclass
defined here under its `name`; the shape they share is that module's (docs/adding-a-stack.md)."""
from __future__ import annotations


from ccdiff.ledger import LOST, PERSISTENT_CONGESTION, SENT
from ccdiff.mechanisms import Mechanism, Occurrence


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

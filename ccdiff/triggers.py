"""What happened in a run, for dynamic waivers of trajectory-divergence (issue #21 item 5).

A documented deviation explains a stack's window leaving the oracle's only if the
deviation's rule had something to act on before the divergence began: an undo on a
spurious loss cannot explain a divergence in a trace without one.  A profile names the
trigger of each deviation that tolerates trajectory-divergence (`observed = NAME`);
`Triggers` records the first event at which each trigger occurred in one stack's run,
and profiles.Profile.divergence_excuses keeps only the deviations whose trigger came at
or before the divergence.

Most triggers read the trace alone (the same for every stack); `hystart` reads the
stack's snapshots, `mechanism` the checker (a mechanism-checked deviation is observed
where its mechanism explained an occurrence, ccdiff/mechanisms.py).
"""
from __future__ import annotations

from .invariants import in_slow_start
from .ledger import ACKED, APP_DATA, APP_IDLE, LOST, PERSISTENT_CONGESTION, SENT

TRIGGERS = {
    "loss": "a packet was declared lost",
    "congestion-event": "a loss or an ECN-CE mark the stack counts (RFC 9002 §7.1)",
    "ecn-ce": "an ACK reported an ECN-CE mark",
    "spurious-loss": "an ACK acknowledged a packet already declared lost",
    "persistent-congestion": "persistent congestion was declared (RFC 9002 §7.6)",
    "app-limited": "the application limited sending: an app-limited send, an ACK of one, or an "
                   "app_idle / app_data event",
    "idle": "a send into an empty pipe after an earlier send (RFC 9438 §5.8)",
    "ack-of-several-packets": "one ACK acknowledged two or more packets",
    "hystart": "the stack, in slow start, grew by less than half the bytes an ACK outside recovery "
               "acknowledged or by at least a datagram less than them, or left slow start on an ACK "
               "without a congestion signal: HyStart (RFC 9406) seen from outside",
    "window-beyond-twice-flight": "an ACK on which slow start's growth (the window plus the bytes "
                                  "acknowledged) would pass twice the largest flight so far: where a "
                                  "stack that caps its window at twice its largest flight holds it "
                                  "(RFC 9002 §7.8's underutilized window)",
    "mechanism": "the deviation's own mechanism explained an occurrence of an invariant "
                 "(ccdiff/mechanisms.py)",
}


class Triggers:
    """The first event index of each trigger in one stack's run (`first`)."""

    def __init__(self):
        self.first: dict[str, int] = {}
        self.flight_max = 0      # the largest bytes in flight after any send so far

    def _saw(self, name: str, index: int) -> None:
        self.first.setdefault(name, index)

    def observe(self, index: int, ev, before, after, truth) -> None:
        """After the stack stepped event `index`: truth is the trace's timeline as this stack
        sees it (invariants.Truth), before/after the stack's snapshots."""
        kind, saw = ev.kind, self._saw
        if truth.signal and kind != PERSISTENT_CONGESTION:
            saw("congestion-event", index)
        if kind == LOST:
            saw("loss", index)
        elif kind == PERSISTENT_CONGESTION:
            saw("persistent-congestion", index)
        elif kind in (APP_IDLE, APP_DATA):
            saw("app-limited", index)
        elif kind == SENT:
            self.flight_max = max(self.flight_max, ev.bytes_in_flight_after)
            if ev.app_limited:
                saw("app-limited", index)
            if truth.idle_gap > 0:
                saw("idle", index)
        elif kind == ACKED:
            if ev.ecn_ce:
                saw("ecn-ce", index)
            if ev.spurious:
                saw("spurious-loss", index)
            if any(p[3] for p in ev.packets):
                saw("app-limited", index)
            if len(ev.packets) >= 2:
                saw("ack-of-several-packets", index)
            if before is not None and 2 * self.flight_max < before.cwnd + ev.acked_bytes:
                saw("window-beyond-twice-flight", index)
            if before is not None and self._hystart(ev, before, after, truth):
                saw("hystart", index)

    @staticmethod
    def _hystart(ev, before, after, truth) -> bool:
        if not in_slow_start(before) or truth.signal or truth.ack_in_recovery or truth.ack_app_limited:
            return False
        # Slow start adds every acknowledged byte (RFC 9002 §7.3.1); a stack counting whole
        # datagrams may lag by less than one.  An ACK wholly in HyStart++'s conservative slow
        # start grows by a quarter (RFC 9406 §4.2, CSS_GROWTH_DIVISOR); one on which CSS began
        # part-way by more than that but at least a datagram short of the acked bytes (quiche's
        # 18-packet ACK at its CSS entry: +12,600 of 21,600, which the half rule missed).
        grew = after.cwnd - before.cwnd
        short = ev.acked_bytes - grew
        return (not in_slow_start(after) or 0 <= grew < ev.acked_bytes / 2
                or (grew >= 0 and bool(ev.packets) and short >= max(p[2] for p in ev.packets)))

    def record_mechanisms(self, first_explained: dict) -> None:
        """The checker's first explained occurrence per deviation id, as `mechanism:<id>`."""
        for deviation, index in first_explained.items():
            self._saw("mechanism:" + deviation, index)

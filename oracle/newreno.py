"""RFC 9002 NewReno (§7.3, Appendix B): the control experiment."""
from __future__ import annotations

from ccdiff.snapshot import Snapshot

from .base import Controller

LOSS_REDUCTION_FACTOR = 0.5  # RFC 9002 §7.3.2 kLossReductionFactor


class NewReno(Controller):
    name = "newreno"

    def grow_in_avoidance(self, ev, acked_bytes: int) -> None:
        # RFC 9002 §7.3.3 / B.5: one max_datagram_size per congestion window acknowledged.
        self.cwnd += self.mds * acked_bytes / self.cwnd

    def reduce(self, now: int) -> None:
        # RFC 9002 B.6 OnCongestionEvent.
        self.ssthresh = self.cwnd * LOSS_REDUCTION_FACTOR
        self.cwnd = max(self.ssthresh, self.min_window)

    def snapshot(self, ev) -> Snapshot:
        return Snapshot(int(self.cwnd), self.ssthresh_value(), ev.bytes_in_flight_after,
                        self.phase(ev), self.recovery_start, None, None, None)

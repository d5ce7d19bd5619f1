"""The RFC 9002 §5 RTT estimate, shared by the trace reader (persistent congestion, §7.6.2),
the packet ledger and the simulator's loss recovery: one arithmetic for all of them."""
from __future__ import annotations


class Rtt:
    """RFC 9002 §5 estimator in integer microseconds.

    Integer arithmetic (floor division) so every decoder and harness, in any
    language, computes the same numbers.  ack_delay is used as reported: the
    traces model a confirmed handshake with the peer's max_ack_delay already
    applied (RFC 9002 §5.3).
    """

    __slots__ = ("latest", "smoothed", "rttvar", "min", "has_sample")

    def __init__(self, initial_rtt_us: int):
        self.latest = 0
        self.min = 0
        self.smoothed = initial_rtt_us        # RFC 9002 §5.3: before the first sample
        self.rttvar = initial_rtt_us // 2
        self.has_sample = False

    def update(self, latest: int, ack_delay: int) -> None:
        self.latest = latest
        if not self.has_sample:                # RFC 9002 §5.3 first sample
            self.has_sample = True
            self.min = latest
            self.smoothed = latest
            self.rttvar = latest // 2
            return
        self.min = min(self.min, latest)       # RFC 9002 §5.2: min_rtt ignores ack delay
        adjusted = latest - ack_delay if latest >= self.min + ack_delay else latest
        self.rttvar = (3 * self.rttvar + abs(self.smoothed - adjusted)) // 4
        self.smoothed = (7 * self.smoothed + adjusted) // 8

    def values(self) -> tuple:
        return (self.latest, self.smoothed, self.rttvar, self.min)

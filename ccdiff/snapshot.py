"""The normalized snapshot every controller reports after every event."""
from __future__ import annotations

from typing import NamedTuple, Optional

SLOW_START = "slow_start"
CONGESTION_AVOIDANCE = "congestion_avoidance"
RECOVERY = "recovery"
APP_LIMITED = "app_limited"
UNKNOWN = "unknown"
PHASES = (UNKNOWN, SLOW_START, CONGESTION_AVOIDANCE, RECOVERY, APP_LIMITED)  # index = ccd_phase


class Snapshot(NamedTuple):
    """State after an event.  None where the stack has no such field.

    cwnd, ssthresh, bytes_in_flight and w_max are bytes; times are virtual
    microseconds; k_us is CUBIC's K (RFC 9438 §4.2) in microseconds.
    """
    cwnd: int
    ssthresh: Optional[int]
    bytes_in_flight: int
    phase: str
    recovery_start_us: Optional[int]
    epoch_start_us: Optional[int]
    w_max: Optional[float]
    k_us: Optional[float]

    def to_dict(self) -> dict:
        return self._asdict()

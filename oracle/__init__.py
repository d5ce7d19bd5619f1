"""Reference controllers: RFC 9438 CUBIC and, as the control, RFC 9002 NewReno.

Both read resolved events (ccdiff.ledger.Resolved) and report ccdiff
snapshots, exactly like a stack adapter, so the harness treats them alike.
"""
from .base import GROWTH_MODES, RECOVERY_MODES
from .cubic import Cubic, EPOCH_MODES, IDLE_MODES, RENO_FRIENDLY_MODES
from .newreno import NewReno

__all__ = ["Cubic", "NewReno", "IDLE_MODES", "EPOCH_MODES", "RENO_FRIENDLY_MODES", "GROWTH_MODES",
           "RECOVERY_MODES"]

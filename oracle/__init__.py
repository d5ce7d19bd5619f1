"""Reference controllers: RFC 9438 CUBIC and, as the control, RFC 9002 NewReno.

Both read resolved events (ccdiff.ledger.Resolved) and report ccdiff
snapshots, exactly like a stack adapter, so the harness treats them alike.
"""
from .cubic import Cubic, IDLE_MODES
from .newreno import NewReno

__all__ = ["Cubic", "NewReno", "IDLE_MODES"]

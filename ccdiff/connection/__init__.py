"""Connection mode (issue #31): a stack's own client and server over ccdiff's network.

A run puts one stack's real client and server in this process, each behind the
connection contract (implementations/include/ccdiff_connection.h), and carries
their UDP datagrams through the scenario's path (path.py) in virtual time
(run.py).  Handshake, packet protection, loss detection, PTO, pacing, the
app-limited logic and the congestion controller are all the stack's; ccdiff
only moves datagrams, advances the clock and reads the stack's own congestion
state through its API after every call.  docs/connection-mode.md has the
contract and what each stack's shim does.
"""
from .run import ConnectionResult, run_connection

__all__ = ["ConnectionResult", "run_connection"]

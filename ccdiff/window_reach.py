"""Whether a trace's sends fit the window of the stack it convicts.

A strict trace (ccdiff/trace.py) is one a real connection's loss detection could produce;
it says nothing of the congestion window, because the same trace is replayed through every
stack.  A reproducer sent to one stack's maintainers must also be one that stack's own
connection could send: RFC 9002 §7, "An endpoint MUST NOT send a packet if it would cause
bytes_in_flight (see {{vars-of-interest}}) to be larger than the congestion window, unless
the packet is sent on a PTO timer expiration (see {{pto}}) or when entering recovery (see
{{recovery-period}})."  (issue #30 item 6: ngtcp2's idle-inflation reproducer sent 14 kB
into a 6.9 kB window.)"""
from __future__ import annotations

from .trace import Ack, Lost, Sent, Trace, probe_sends

PROBES_PER_PTO = 2     # RFC 9002 §6.2.4: "a sender MUST send at least one ack-eliciting packet ...
                       # An endpoint MAY send up to two full-sized datagrams containing ack-eliciting packets"


def window_overrun(trace: Trace, snapshots: list) -> str | None:
    """Where the first send of `trace` overfills the window of the stack whose snapshots
    (one per event, replay's) these are, or None when every send fits.  The window is the
    stack's cwnd after the event before the send; bytes in flight are the trace's own.
    Exempt: the PTO's probes and the one send on entering recovery (a loss or an ECN-CE
    mark just before it: §7.3.2, "a single packet can be sent prior to reduction")."""
    probes = probe_sends(trace)
    sizes: dict = {}
    in_flight, congestion, streak, streak_t = 0, False, 0, None
    for index, ev in enumerate(trace.events):
        kind = type(ev)
        if kind is Sent:
            sizes[ev.pn] = ev.bytes
            in_flight += ev.bytes
            if index in probes:
                streak, streak_t = 1, ev.t
            elif streak and ev.t == streak_t and streak < PROBES_PER_PTO:
                streak += 1                  # the PTO's second probe, sent with the first
            else:
                streak = 0
                window = snapshots[index - 1].cwnd if 0 < index <= len(snapshots) else None
                if window is not None and in_flight > window and not congestion:
                    return (f"event {index} (t={ev.t} us) puts {in_flight} bytes in flight, over the "
                            f"stack's window of {window} bytes (RFC 9002 §7: not a probe, not the send "
                            f"on entering recovery)")
            congestion = False
        elif kind is Ack or kind is Lost:
            for pn in ev.pns:
                in_flight -= sizes.pop(pn, 0)
            if kind is Lost or ev.ecn_ce:
                congestion = True
    return None

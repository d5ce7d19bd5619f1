"""The packet ledger: turns trace events into the resolved events controllers see.

One ledger serves every controller in a run, so bytes-in-flight accounting and
RTT estimation are identical for all of them and any difference between
stacks comes from the controllers.  The resolved event carries what each
stack's own connection code would hand its controller: the packets an ACK or
a loss covers (number, send time, size, app-limited flag), bytes in flight
*before* the event (quiche's convention, ngtcp2's prior_inflight) and the
RFC 9002 §5 RTT estimate.  An ACK whose trace event carries the stack's own RTT
sample (`rtt`, from a qlog's latest_rtt) passes it on as `stack_rtt`, for an adapter
that hands its stack the sample the stack itself took (aioquic); the ledger's
estimate stays the trace's own (t - send time of the largest packet), as every
other controller and the trace's checks see it.
"""
from __future__ import annotations

from .rtt import Rtt
from .trace import Ack, AppData, AppIdle, Header, Lost, PersistentCongestion, Sent

SENT, ACKED, LOST, PERSISTENT_CONGESTION = 1, 2, 3, 4  # ccd_event_kind in ccdiff_adapter.h
APP_IDLE, APP_DATA = 5, 6                              # ABI 3: the application's own events
KIND_NAMES = {SENT: "sent", ACKED: "ack", LOST: "lost", PERSISTENT_CONGESTION: "persistent_congestion",
              APP_IDLE: "app_idle", APP_DATA: "app_data"}


class Resolved:
    """One event as controllers see it.  packets: tuples (pn, sent_us, bytes, app_limited)."""

    __slots__ = ("kind", "t", "bytes_in_flight", "bytes_in_flight_after", "packets", "spurious",
                 "ack_delay", "app_limited", "ecn_ce", "rtt", "stack_rtt")

    def __init__(self, kind, t, bytes_in_flight, bytes_in_flight_after, packets, rtt,
                 spurious=(), ack_delay=0, app_limited=False, ecn_ce=False, stack_rtt=None):
        self.kind = kind
        self.t = t
        self.bytes_in_flight = bytes_in_flight            # before this event changes it
        self.bytes_in_flight_after = bytes_in_flight_after
        self.packets = packets
        self.rtt = rtt                                    # (latest, smoothed, rttvar, min) µs
        self.spurious = spurious
        self.ack_delay = ack_delay
        self.app_limited = app_limited
        self.ecn_ce = ecn_ce
        self.stack_rtt = stack_rtt                        # µs: the stack's own sample (ACK), or None

    @property
    def acked_bytes(self) -> int:
        return sum(p[2] for p in self.packets)


class Ledger:
    """Packets in flight and declared lost, bytes in flight, and the RTT estimate."""

    def __init__(self, header: Header):
        self.max_datagram_size = header.max_datagram_size
        self.rtt = Rtt(header.initial_rtt_us)
        self.rtt_values = self.rtt.values()   # shared by events until the next sample
        self.in_flight: dict[int, tuple] = {}  # pn -> (pn, sent_us, bytes, app_limited)
        self.declared_lost: dict[int, tuple] = {}
        self.bytes_in_flight = 0
        self.app_idle = False                   # format 2: after app_idle, before app_data

    def resolve(self, ev) -> Resolved:
        kind = type(ev)
        before = self.bytes_in_flight
        if kind is Sent:
            t, pn, size, app_limited = ev   # unpacking beats NamedTuple attribute access
            # A packet sent while the application has no data (a retransmission, a probe)
            # does not use the window it was given: app-limited (RFC 9002 §7.8).
            app_limited = app_limited or self.app_idle
            packet = (pn, t, size, app_limited)
            self.in_flight[pn] = packet
            self.bytes_in_flight = after = before + size
            return Resolved(SENT, t, before, after, (packet,), self.rtt_values, (), 0, app_limited)
        if kind is Ack:
            acked, spurious = [], []
            pop_flight, pop_lost = self.in_flight.pop, self.declared_lost.pop
            for pn in ev.pns:
                packet = pop_flight(pn, None)
                if packet is not None:
                    acked.append(packet)
                else:  # validated traces only ack sent packets: this one was declared lost
                    spurious.append(pop_lost(pn))
            self.bytes_in_flight = after = before - sum(p[2] for p in acked)
            largest = spurious[-1] if spurious and (not acked or spurious[-1][0] > acked[-1][0]) else acked[-1]
            # RFC 9002 §5.1: a sample when the largest acknowledged is newly acknowledged.
            self.rtt.update(ev.t - largest[1], ev.ack_delay)
            self.rtt_values = self.rtt.values()
            return Resolved(ACKED, ev.t, before, after, tuple(acked), self.rtt_values,
                            tuple(spurious), ev.ack_delay, ecn_ce=ev.ecn_ce, stack_rtt=ev.rtt)
        if kind is Lost:
            lost = []
            for pn in ev.pns:
                packet = self.in_flight.pop(pn)
                self.declared_lost[pn] = packet
                lost.append(packet)
            self.bytes_in_flight = after = before - sum(p[2] for p in lost)
            return Resolved(LOST, ev.t, before, after, tuple(lost), self.rtt_values)
        if kind is PersistentCongestion:
            return Resolved(PERSISTENT_CONGESTION, ev.t, before, before, (), self.rtt_values)
        if kind is AppIdle or kind is AppData:
            self.app_idle = kind is AppIdle
            return Resolved(APP_IDLE if self.app_idle else APP_DATA, ev.t, before, before, (),
                            self.rtt_values, app_limited=self.app_idle)
        raise TypeError(f"not a trace event: {ev!r}")

"""What RFC 9002 §7 says for every controller: windows, recovery periods, signals."""
from __future__ import annotations

import math

from ccdiff.ledger import ACKED, APP_DATA, APP_IDLE, LOST, PERSISTENT_CONGESTION, SENT
from ccdiff.snapshot import (APP_LIMITED, CONGESTION_AVOIDANCE, RECOVERY, SLOW_START,
                             Snapshot)

INFINITE = math.inf
GROWTH_MODES = ("per-packet", "per-ack")
RECOVERY_MODES = ("send-time", "largest-acked")


class Controller:
    """RFC 9002 §7 skeleton; subclasses supply growth and reduction.

    Recovery (RFC 9002 §7.3.2): a congestion signal for a packet sent after
    the start of the current recovery period starts a new one; the period
    ends when a packet sent after its start is acknowledged.  The window does
    not grow on ACKs of packets sent before the recovery start.
    """

    def __init__(self, max_datagram_size: int, initial_rtt_us: int, *, ecn: bool = True,
                 app_limited: bool = True, growth: str = "per-packet", recovery: str = "send-time"):
        # Variants a stack's profile selects to reproduce its documented deviations
        # (ccdiff/profiles.py Profile.reference), so its trajectory is compared with an oracle
        # that does what the stack does on purpose:
        #   ecn=False          CE marks are no congestion signal (a stack that sends no ECT,
        #                      RFC 9000 §13.4, never sees one)
        #   app_limited=False  ACKs of app-limited packets grow the window (a stack that
        #                      does not apply RFC 9002 §7.8's SHOULD NOT)
        #   growth="per-ack"   congestion avoidance takes one step per ACK frame, from the
        #                      bytes it acknowledged outside recovery (ngtcp2's
        #                      per-ack-frame-growth), not one per packet (RFC 9002 B.5)
        #   recovery="largest-acked"  an ACK is "in recovery" by the send time of its largest
        #                      acknowledged packet, for all its packets (ngtcp2's
        #                      recovery-by-largest-acked), not packet by packet (§7.3.2)
        if growth not in GROWTH_MODES or recovery not in RECOVERY_MODES:
            raise ValueError(f"growth={growth}, recovery={recovery}: expected growth one of "
                             f"{', '.join(GROWTH_MODES)}, recovery one of {', '.join(RECOVERY_MODES)}")
        self.recovery_by_largest = recovery == "largest-acked"
        self.ecn = ecn
        self.app_limited = app_limited
        self.per_ack = growth == "per-ack"
        self.mds = max_datagram_size
        self.min_window = 2 * max_datagram_size                       # RFC 9002 §7.2
        self.cwnd = min(10 * max_datagram_size, max(14720, 2 * max_datagram_size))  # §7.2
        self.ssthresh = INFINITE
        self.recovery_start = None
        self.in_recovery = False
        self.last_sent_app_limited = False
        self.limited_pn = -1           # the last packet sent cwnd-limited (note_sent)
        self.app_idle = False          # format 2: the application said it has no data
        self.smoothed_rtt = initial_rtt_us

    # -- the one entry point -------------------------------------------------
    def step(self, ev) -> Snapshot:
        kind = ev.kind
        self.smoothed_rtt = ev.rtt[1]
        if kind == ACKED:
            self.on_ack(ev)
        elif kind == SENT:
            self.on_sent(ev)
        elif kind == LOST:
            self.on_lost(ev)
        elif kind == PERSISTENT_CONGESTION:
            self.on_persistent_congestion(ev)
        elif kind == APP_IDLE or kind == APP_DATA:
            # RFC 9438 §5.8: an application-limited sender; the window is not updated by
            # the application's events themselves (§4.2's t rule acts on the next send).
            self.app_idle = kind == APP_IDLE
        return self.snapshot(ev)

    # -- RFC 9002 §7 rules shared by CUBIC and NewReno -----------------------
    def on_sent(self, ev) -> None:
        self.note_sent(ev)

    def note_sent(self, ev) -> None:
        """RFC 9002 §7.8: "When bytes in flight is smaller than the congestion window and
        sending is not pacing limited, the congestion window is underutilized"; RFC 9438 §5.8:
        application-limited is "currently sending less than what is allowed by the congestion
        window".  A send the trace does not mark app-limited, or one that fills the window
        (bytes in flight after it reach cwnd), was not sending less than allowed: the packets
        sent up to it are acknowledged as cwnd-limited (Linux's tcp_is_cwnd_limited looks back
        over the window the same way), whatever their own marks."""
        self.last_sent_app_limited = ev.app_limited
        if not ev.app_limited or ev.bytes_in_flight_after >= self.cwnd:
            self.limited_pn = max(self.limited_pn, max(p[0] for p in ev.packets))

    def on_lost(self, ev) -> None:
        # RFC 9002 B.8 OnPacketsLost: one congestion event, timed by the newest lost packet.
        self.congestion_event(ev.t, max(p[1] for p in ev.packets))

    def on_ack(self, ev) -> None:
        if ev.ecn_ce and ev.packets and self.ecn:
            # RFC 9002 §7.3.2 / B.7: a new CE count is a congestion signal for the largest acked.
            self.congestion_event(ev.t, ev.packets[-1][1])
        in_avoidance = 0
        largest_sent_t = max(ev.packets)[1] if ev.packets else None
        for packet in ev.packets:
            sent_t = largest_sent_t if self.recovery_by_largest else packet[1]
            if self.in_congestion_recovery(sent_t):
                continue                               # §7.3.2: no growth during recovery
            self.in_recovery = False                   # §7.3.2: a post-recovery packet was acked
            if self.app_limited and packet[3] and packet[0] > self.limited_pn:
                continue                               # §7.8: no growth when app-limited
            if self.cwnd < self.ssthresh:
                self.cwnd += packet[2]                 # §7.3.1 slow start
            elif self.per_ack:
                in_avoidance += packet[2]
            else:
                self.grow_in_avoidance(ev, packet[2])
        if in_avoidance:
            self.grow_in_avoidance(ev, in_avoidance)

    def in_congestion_recovery(self, sent_t: int) -> bool:
        return self.recovery_start is not None and sent_t <= self.recovery_start

    def congestion_event(self, now: int, sent_t: int) -> None:
        if self.in_congestion_recovery(sent_t):
            return                                     # §7.3.2: one reduction per period
        self.recovery_start = now
        self.in_recovery = True
        self.reduce(now)

    def on_persistent_congestion(self, ev) -> None:
        # RFC 9002 §7.6.2: "the sender's congestion window MUST be reduced to the
        # minimum congestion window"; B.8 also clears the recovery start.
        self.cwnd = self.min_window
        self.recovery_start = None
        self.in_recovery = False

    # -- what subclasses define -----------------------------------------------
    def grow_in_avoidance(self, ev, acked_bytes: int) -> None:
        raise NotImplementedError

    def reduce(self, now: int) -> None:
        raise NotImplementedError

    def snapshot(self, ev) -> Snapshot:
        raise NotImplementedError

    def phase(self, ev) -> str:
        if self.in_recovery:
            return RECOVERY
        if self.app_limited and (self.app_idle or self.last_sent_app_limited) \
                and ev.bytes_in_flight_after < self.cwnd:
            return APP_LIMITED
        return SLOW_START if self.cwnd < self.ssthresh else CONGESTION_AVOIDANCE

    def ssthresh_value(self):
        return None if self.ssthresh == INFINITE else int(self.ssthresh)

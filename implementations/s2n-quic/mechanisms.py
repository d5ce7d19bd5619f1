"""s2n-quic's mechanisms: the executable form of its profile's mechanism-checked deviations,
s2n-quic-core 0.91.0 (src/recovery/cubic.rs) and s2n-quic-transport.

Loaded by ccdiff/mechanisms.py (`registry`), which registers every Mechanism subclass
defined here under its `name`; the shape they share is that module's (docs/adding-a-stack.md)."""
from __future__ import annotations

from collections import deque

from ccdiff.ledger import ACKED, LOST, SENT
from ccdiff.mechanisms import Mechanism, Ngtcp2EcnOnNewLargestOnly, Occurrence, WEstClosedForm
from ccdiff.snapshot import CONGESTION_AVOIDANCE, RECOVERY, SLOW_START


class S2nUnderUtilized(Mechanism):
    """s2n-quic's CUBIC gates growth on one flag, `under_utilized`, set by the LAST packet sent
    (cubic.rs:221-232): the connection's app_limited for that packet (nothing more to send and
    room for another datagram after it, s2n-quic-transport space/application.rs:587-589, path/
    mod.rs:600-609) AND the window under-utilized after it: not congestion-limited, in slow
    start less than half the window in flight, otherwise more than 3 datagrams of room
    (cubic.rs:669-690).  An ACK of packets the trace marks app-limited still grows the window
    when the last send filled half the window in slow start, or left at most 3 datagrams of
    room.  Replayed from the events and the stack's own snapshots (cwnd, bytes in flight and
    phase after each send); explained only where that flag was clear at the ACK."""
    name = "s2n-under-utilized-window"
    invariants = frozenset({"growth-while-app-limited"})
    rule = "src/recovery/cubic.rs:221-232, 302-312, 669-690 (s2n-quic-core 0.91.0); src/space/application.rs:587-589 (s2n-quic-transport 0.91.0)"
    families = ("cubic",)

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.under = True                 # CubicCongestionController::new (cubic.rs:516)
        self.under_at = deque(maxlen=256)  # (ACK index, under_utilized when it arrived)

    def observe(self, index: int, ev) -> None:
        if ev.kind == ACKED:
            self.under_at.append((index, self.under))

    def after_step(self, index: int, ev, before, after) -> None:
        if ev.kind != SENT:
            return
        cwnd, in_flight, mds = after.cwnd, after.bytes_in_flight, self.mds
        room = cwnd - in_flight
        app_limited = bool(ev.packets[0][3]) and room >= mds        # application.rs:587-589
        congestion_limited = room < mds                              # cubic.rs:191-196
        half_used = after.phase == SLOW_START and in_flight >= cwnd // 2
        self.under = app_limited and not congestion_limited and not half_used and room > 3 * mds

    def explains(self, occ: Occurrence) -> bool:
        return dict(self.under_at).get(occ.index, True) is False


class S2nRecoveryByState(S2nUnderUtilized):
    """s2n-quic's CUBIC keeps its recovery period as a state, not as a send time: on_packet_lost
    carries no send time (PacketInfo = (), cubic.rs:178, 390-409), so any loss or CE count while
    the state is Recovery is ignored and any loss outside it reduces (cubic.rs:622-659), and the
    state ends only when on_ack sees a packet sent after the recovery start -- on an ACK that
    is processed after the losses it reveals (s2n-quic-transport recovery/manager.rs:644,
    728-741) and only while the window is not under-utilized (cubic.rs:302-322).  RFC 9002
    §7.3.2's prose ("a recovery period ends ... when a packet sent during the recovery period
    is acknowledged"; "during a recovery period, the congestion window does not change in
    response to new losses") against its Appendix B.8, which compares each lost packet's send
    time with the recovery start.  Explained: a missing reduction while the stack is in
    Recovery and this model (ACKs of post-start packets, processed while not under-utilized)
    agrees it had not left; growth on the ACK that ends the stack's recovery period (a packet
    sent after its start); and a single beta step on a loss after the stack left it."""
    name = "s2n-recovery-by-state"
    invariants = frozenset({"missing-reduction", "growth-in-recovery", "excess-reduction"})
    rule = "src/recovery/cubic.rs:302-322, 390-421, 622-659 (s2n-quic-core 0.91.0); src/recovery/manager.rs:644, 728-741 (s2n-quic-transport 0.91.0)"
    families = ("cubic",)
    BETA = 0.7

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.start = None        # recovery start while the model says the stack is in recovery
        self.ended = None        # the start of the period the model saw end
        self.exit = False        # this ACK ends the period (a post-start packet, not under-utilized)
        self.start_at = deque(maxlen=256)   # (index, start before that event): a loss group is
        #                                     judged after its later events have stepped
        self.exits = deque(maxlen=256)      # ACK indices that ended a period (model)
        self.ignored = deque(maxlen=64)     # times of losses the stack took inside its period

    def observe(self, index: int, ev) -> None:
        super().observe(index, ev)
        self.start_at.append((index, self.start))
        self.exit = (ev.kind == ACKED and self.start is not None and not self.under
                     and any(p[1] > self.start for p in ev.packets))
        if self.exit:
            self.exits.append(index)
        if ev.kind == LOST and self.start is not None:
            self.ignored.append(ev.t)

    def after_step(self, index: int, ev, before, after) -> None:
        super().after_step(index, ev, before, after)
        if self.exit and ev.kind == ACKED:
            self.ended, self.start = self.start, None
        elif after.phase == RECOVERY and after.recovery_start_us not in (None, self.ended):
            self.start = after.recovery_start_us
        elif after.phase == SLOW_START:
            self.start = None
        if ev.kind == ACKED:
            self.exit = False

    def explains(self, occ: Occurrence) -> bool:
        before, after = occ.before, occ.after
        first = min((i for i, _ in occ.events), default=occ.index)
        start = dict(self.start_at).get(first, self.start)   # the model's, before the group
        if occ.invariant == "missing-reduction":
            return before.phase == RECOVERY and start is not None
        acks = [(i, ev) for i, ev in occ.events if ev.kind == ACKED]
        if occ.invariant == "growth-in-recovery":
            if (any(i in self.exits for i, _ in acks) and before.phase == RECOVERY
                    and after.phase == CONGESTION_AVOIDANCE and after.epoch_start_us == occ.t):
                return True     # the ACK that ends the stack's period
            # an ACK of packets sent before the recovery start, after an earlier ACK ended the
            # stack's period (model-confirmed): RFC 9002 B.5 never grows on such packets, s2n's
            # congestion-avoidance state does (cubic.rs:315-322, 343-383)
            if (before.phase == CONGESTION_AVOIDANCE and start is None and self.ended is not None
                    and self.ended == before.recovery_start_us):
                return True
            # an ACK of packets sent before a loss the stack took inside its (then) period,
            # after that period ended: the RFC's period the stack never entered
            epoch = after.epoch_start_us
            sent = [p[1] for _, ev in acks for p in ev.packets]
            return (before.phase == CONGESTION_AVOIDANCE and epoch is not None and bool(sent)
                    and any(lt <= epoch and max(sent) <= lt for lt in self.ignored))
        if occ.invariant == "excess-reduction" and occ.cause == "in-recovery":
            one_step = max(int(before.cwnd * self.BETA) - 1, 2 * self.mds)
            left = (start is None and before.phase != RECOVERY) or any(i in self.exits for i, _ in occ.events)
            return (left and after.phase == RECOVERY and after.recovery_start_us == occ.t
                    and after.cwnd >= one_step)
        return False


class S2nRenoFriendlySet(Mechanism):
    """s2n-quic's CUBIC in its Reno-friendly region SETS cwnd = min(W_est(t), cap) at every
    ACK (cubic.rs:554-567, RFC 8312 §4.2's "cwnd SHOULD be set to W_est(t)"), with W_est(t) =
    W_max x 0.7 + 3 x 0.3 / 1.7 x t / min_rtt (cubic.rs:771-776, 380) -- also when W_est is
    below the current window (after the app-limited rule moved the epoch, or min_rtt fell), so
    an ACK can shrink the window without a congestion signal.  Explained only where the
    window after the ACK is that W_est (within 1 %), computed from the stack's own W_max and
    epoch and the harness's min RTT, in congestion avoidance on both sides."""
    name = "s2n-reno-friendly-set"
    invariants = frozenset({"excess-reduction"})
    rule = "src/recovery/cubic.rs:547-567, 771-776 (s2n-quic-core 0.91.0)"
    families = ("cubic",)

    def explains(self, occ: Occurrence) -> bool:
        before, after = occ.before, occ.after
        acks = [ev for _, ev in occ.events if ev.kind == ACKED]
        if (occ.cause != "no-signal" or not acks or before.phase != CONGESTION_AVOIDANCE
                or after.phase != CONGESTION_AVOIDANCE or after.epoch_start_us is None
                or after.w_max is None or after.w_max != after.w_max):
            return False
        min_rtt = acks[-1].rtt[3]
        if min_rtt <= 0:
            return False
        t = (occ.t - after.epoch_start_us) / 1e6
        w_est = after.w_max * 0.7 + (3 * 0.3 / 1.7) * t / (min_rtt / 1e6) * self.mds
        return after.cwnd < before.cwnd and abs(after.cwnd - w_est) <= 0.01 * w_est


class S2nWEstClosedForm(WEstClosedForm):
    """s2n-quic's W_est is the same closed form over min_rtt (cubic.rs:771-776, 380), not the
    smoothed RTT: explained only with the harness's min RTT."""
    name = "s2n-w-est-closed-form"
    rule = "src/recovery/cubic.rs:547-567, 771-776 (s2n-quic-core 0.91.0)"

    def rtts(self) -> list:
        return [self.rtt[3]] if self.rtt is not None else []


class S2nEcnOnNewLargestOnly(Ngtcp2EcnOnNewLargestOnly):
    """s2n-quic processes an ACK frame's ECN counts only when the frame's largest
    acknowledged is at least the largest acknowledged so far (s2n-quic-transport
    recovery/manager.rs:444-450, 718-726: "An endpoint MUST NOT fail ECN validation as a
    result of processing an ACK frame that does not increase the largest acknowledged",
    RFC 9000 §13.4.2.1, applied to the whole CE reaction): a CE count on a reordered ACK
    frame starts no recovery period.  The same rule as ngtcp2's, with s2n's tie (an equal
    largest counts as new)."""
    name = "s2n-ecn-on-new-largest-only"
    rule = "src/recovery/manager.rs:444-450, 718-726, 766-779 (s2n-quic-transport 0.91.0)"
    families = ("cubic",)

    def observe(self, index: int, ev) -> None:
        if ev.kind != ACKED:
            return
        pns = [p[0] for p in ev.packets] + [p[0] for p in ev.spurious]
        largest = max(pns, default=-1)
        new = largest >= self.largest
        self.largest = max(self.largest, largest)
        self.gap_fill.append((index, not new))

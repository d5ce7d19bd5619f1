"""picoquic's mechanisms: the executable form of its profile's mechanism-checked deviations,
picoquic 1.1.53.0 (picoquic/cubic.c, cc_common.c).

Loaded by ccdiff/mechanisms.py (`registry`), which registers every Mechanism subclass
defined here under its `name`; the shape they share is that module's (docs/adding-a-stack.md)."""
from __future__ import annotations

from collections import deque

from ccdiff.ledger import ACKED, APP_IDLE, LOST, PERSISTENT_CONGESTION, SENT
from ccdiff.mechanisms import KFromWMax, Mechanism, Occurrence, w_max_from_window
from ccdiff.snapshot import SLOW_START

# Each replaces a wholesale waiver (issue #21: a beta of 0.5 planted in cubic.c:138, or ECN
# ignored in cubic.c:334, was excused by them).  Code references are to picoquic 1.1.53.0 as
# vendored by the aiopquic 0.6.1 sdist (third_party/picoquic/).


class PicoquicKFromWMax(KFromWMax):
    """picoquic's cubic_enter_avoidance: K = cubic_root(W_max x (1 - 7/8) / C) (cubic.c:138),
    which is Eq. 2 where the stage starts at W_cubic(0) = 7/8 x W_max (every congestion event,
    cubic.c:189-201) but not after a spurious-loss undo (cubic_correct_spurious, cubic.c:214-228):
    W_max is restored to W_last_max and the window to W_cubic(now) of the restored epoch, and
    K is recomputed from W_max alone.  Explains a K that is exactly that expression."""
    name = "picoquic-k-from-w-max"
    rule = "picoquic/cubic.c:138, 214-228 (1.1.53.0)"
    beta = 7 / 8


class PicoquicLossRateFilter(Mechanism):
    """picoquic reacts to an ACK-detected ("repeat") loss only once its smoothed loss rate
    exceeds 15% (cubic.c:318-336 -> picoquic_cc_hystart_loss_test, cc_common.c:105-136:
    per lost packet number, an EWMA of factor 1/16 over at most 32 numbers; threshold
    PICOQUIC_SMOOTHED_LOSS_THRESHOLD 0.15, cc_common.h:30-32).  A timer loss always counts
    (cc_common.c:128-129) and so does ECN-CE (cubic.c:320, 334: `notification == ecn_ec ||`).
    A missing reduction is explained only where the signal is ACK-detected losses alone
    and the loss rate, as picoquic computes it from the lost packet numbers, stayed at or
    below 15% for every one of them -- or, in slow start, where the signal came within one
    smoothed RTT of the epoch's start (cubic.c:320-323, for CE as for losses).  The rate is modelled on every lost packet number the
    stack evaluates: in congestion avoidance picoquic skips (short-circuit, cubic.c:333)
    the losses of packets numbered below its recovery_sequence, the first number sent after
    its last reduction, which the model takes from the stack's own steps (after_step)."""
    name = "picoquic-loss-rate-filter"
    invariants = frozenset({"missing-reduction"})
    rule = "picoquic/cubic.c:314-340; picoquic/cc_common.c:105-136; cc_common.h:30-32 (1.1.53.0)"
    families = ("cubic",)
    SCOPE, FACTOR, THRESHOLD = 32, 1.0 / 16.0, 0.15
    KEEP = 256

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.rate = 0.0                      # rtt_track->smoothed_drop_rate
        self.last_lost = 0                   # rtt_track->last_lost_packet_number (starts at 0)
        self.next_pn = 0                     # the next packet number the sender will use
        self.recovery_sequence = 0           # cubic_state->recovery_sequence
        self.avoidance = False               # the stack's state before the loss: past slow start
        self.filtered = deque(maxlen=self.KEEP)   # (LOST index, every evaluated loss stayed <= 15%)
        self.largest_acked = -1              # pkt_ctx->highest_acknowledged
        self.group = None                    # this instant's losses: (t, the filter before them, [(index, ev)])

    def loss_test(self, pn: int) -> bool:
        """cc_common.c:105-136 for a repeat loss: True when the filter lets it count."""
        if pn <= self.last_lost:
            return False                     # numbers at or below the last one: no update, 0
        next_number = max(self.last_lost, pn - self.SCOPE)
        self.rate *= (1.0 - self.FACTOR) ** (pn - next_number)
        self.rate += (1.0 - self.rate) * self.FACTOR
        self.last_lost = pn
        return self.rate > self.THRESHOLD

    def observe(self, index: int, ev) -> None:
        if ev.kind == SENT:
            self.next_pn = max(self.next_pn, ev.packets[0][0] + 1)
        elif ev.kind == LOST:
            if self.group is None or self.group[0] != ev.t:
                self.group = (ev.t, (self.rate, self.last_lost, self.recovery_sequence, self.avoidance), [])
            self.group[2].append((index, ev))
            self._test(index, ev)
        elif ev.kind == ACKED:
            largest = max((p[0] for p in ev.packets), default=-1)
            if ev.ecn_ce and self.group is not None and self.group[0] == ev.t:
                self._ce_before_losses(largest if largest > self.largest_acked else 0)
            self.largest_acked = max(self.largest_acked, largest)
        if ev.kind != LOST:
            self.group = None

    def _test(self, index: int, ev) -> None:
        counted = False
        for p in ev.packets:
            if self.avoidance and p[0] < self.recovery_sequence:
                continue                 # cubic.c:333 short-circuits the test
            if self.loss_test(p[0]):
                # The reduction happens at this packet (cubic_enter_recovery, cubic.c:152):
                # the group's later, lower-numbered losses are then short-circuited.
                counted, self.avoidance = True, True
                self.recovery_sequence = self.next_pn
        self.filtered.append((index, not counted))   # a later entry for an index replaces it

    def _ce_before_losses(self, largest_in_path: int) -> None:
        """The ACK that reveals this instant's losses carries CE: picoquic notifies the CE count
        at the end of the frame (frames.c:3994-4003, with the new largest acknowledged or 0) and
        detects the losses after it (frames.c:3099-3102), so they are tested from the state the
        CE leaves -- in congestion avoidance a reduction at a number at or above
        recovery_sequence (cubic.c:333-338), in slow start always (the time condition is
        too_soon_in_slow_start's) -- not the one the trace's order gives."""
        t, state, losses = self.group
        self.rate, self.last_lost, self.recovery_sequence, self.avoidance = state
        if not self.avoidance or largest_in_path >= self.recovery_sequence:
            self.recovery_sequence, self.avoidance = self.next_pn, True
        for index, lost in losses:
            self._test(index, lost)

    def after_step(self, index: int, ev, before, after) -> None:
        if before is not None and (after.cwnd < before.cwnd or after.ssthresh != before.ssthresh):
            if ev.kind in (LOST, ACKED, PERSISTENT_CONGESTION):
                self.recovery_sequence = self.next_pn      # cubic_enter_recovery, cubic.c:152
        self.avoidance = after.phase != SLOW_START

    @staticmethod
    def too_soon_in_slow_start(occ: Occurrence) -> bool:
        """cubic.c:320-323: in slow start a counted signal reduces only more than one smoothed
        RTT after the epoch started (or once the recovery sequence is acknowledged, which the
        model does not check: it may excuse such a case in that one RTT)."""
        before, ev = occ.before, occ.events[-1][1]
        return before.phase == SLOW_START and before.epoch_start_us is not None \
            and occ.t - before.epoch_start_us <= ev.rtt[1]

    def explains(self, occ: Occurrence) -> bool:
        kinds = [ev.kind for _, ev in occ.events]
        if PERSISTENT_CONGESTION in kinds or not occ.events:
            return False
        if self.too_soon_in_slow_start(occ):
            return True
        if LOST not in kinds or any(ev.kind == ACKED and ev.ecn_ce for _, ev in occ.events):
            return False                     # CE always counts (cubic.c:320, 334)
        losses = [i for i, ev in occ.events if ev.kind == LOST]
        verdicts = dict(self.filtered)
        return all(verdicts.get(i, False) for i in losses)


class PicoquicBetaSevenEighths(Mechanism):
    """picoquic's CUBIC congestion event (cubic.c:28-29, 138, 168, 189-201): W_max is the
    window, times 7/8 when it is below the last W_max (fast convergence, which applies on the
    first event too: W_last_max starts at UINT64_MAX / send_mtu), and ssthresh = cwnd =
    W_cubic(0) = 7/8 x W_max (PICOQUIC_CUBIC_BETA_ECN).  Explains a reduction shallower than
    β = 0.7 only where the snapshots show exactly that: W_max at most the window before the
    event (plus what the same instant's ACK added), and ssthresh 7/8 of it within a byte of
    rounding -- a β of 0.9 planted in picoquic stays a violation.  Explains a W_max
    (w-max-mismatch) that is that window or 7/8 of it."""
    name = "picoquic-beta-seven-eighths"
    invariants = frozenset({"shallow-reduction", "w-max-mismatch"})
    rule = "picoquic/cubic.c:28-29, 138, 168, 189-201 (1.1.53.0)"
    families = ("cubic",)

    def explains(self, occ: Occurrence) -> bool:
        before, after = occ.before, occ.after
        if after.w_max is None or after.ssthresh is None:
            return False
        grown = before.cwnd + sum(ev.acked_bytes for _, ev in occ.events if ev.kind == ACKED)
        if occ.invariant == "w-max-mismatch":
            return w_max_from_window(after.w_max, before.cwnd, grown, 7 / 8, self.mds)
        return after.w_max <= grown + 1 and abs(after.ssthresh - after.w_max * 7 / 8) <= 2


class PicoquicTimeoutCollapse(Mechanism):
    """After a retransmission-timer loss (the adapter's mapping of persistent congestion)
    picoquic sets cwnd to its minimum and slow start but keeps ssthresh (cubic.c:181-186);
    slow start exits at that ssthresh and the next congestion-avoidance ACK takes cwnd from
    the overshoot back to max(W_cubic(t), W_reno = cwnd / 2) (cubic.c:266-270, 287-307): a
    shrink with no congestion signal.  Explained only after such a collapse (a persistent
    congestion event earlier in the run, and no other congestion signal since), with
    ssthresh unchanged by the step and the window left at or above half of what it was."""
    name = "picoquic-timeout-collapse"
    invariants = frozenset({"excess-reduction"})
    rule = "picoquic/cubic.c:181-186, 266-270, 287-307 (1.1.53.0)"
    families = ("cubic",)

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.collapsed = False

    def observe(self, index: int, ev) -> None:
        if ev.kind == PERSISTENT_CONGESTION:
            self.collapsed = True
        elif ev.kind == LOST or (ev.kind == ACKED and ev.ecn_ce):
            self.collapsed = False

    def explains(self, occ: Occurrence) -> bool:
        before, after = occ.before, occ.after
        return occ.cause == "no-signal" and self.collapsed and after.ssthresh == before.ssthresh \
            and 2 * after.cwnd >= before.cwnd


class PicoquicHystartDelayExit(Mechanism):
    """picoquic leaves its initial slow start on a delay signal (cubic.c:346-391, HyStart test
    cc_common.c:167-208): cwnd is halved (or, above the Reno target RTT, cut by half the part
    above the RTT-corrected window), then cubic_enter_recovery applies fast convergence, which
    on the first event already multiplies W_max by 7/8 (W_last_max starts at its maximum), and
    restarts the curve at W_max: at least 1/2 x 7/8 of the window before.  Explained only in
    the initial slow start (the stack reports slow start and no ssthresh yet: the test runs
    only while ssthresh is UINT64_MAX, cubic.c:347, whatever losses its filter ignored), on
    the step that sets ssthresh, with the window left at or above 7/16 of what it was."""
    name = "picoquic-hystart-delay-exit"
    invariants = frozenset({"excess-reduction"})
    rule = "picoquic/cubic.c:146-170, 346-391; picoquic/cc_common.c:167-208 (1.1.53.0)"
    families = ("cubic",)

    def explains(self, occ: Occurrence) -> bool:
        before, after = occ.before, occ.after
        return occ.cause == "no-signal" and before.phase == SLOW_START and before.ssthresh is None \
            and after.ssthresh is not None and 16 * after.cwnd >= 7 * before.cwnd


class PicoquicSlowStartSeed(Mechanism):
    """In slow start every ACK first raises cwnd to the bandwidth estimate
    (picoquic_cc_update_target_cwin_estimation, cubic.c:258) before the sender-limited test
    (cubic.c:260), so slow start grows on ACKs of app-limited packets and by more than the
    bytes acknowledged (newreno.c:222-228 likewise, in its initial slow start).  Explained
    only while the stack is in slow start (its own state); in congestion avoidance picoquic
    grows only when not sender-limited (cubic.c:287, newreno.c:230)."""
    name = "picoquic-slow-start-seed"
    invariants = frozenset({"growth-while-app-limited", "ss-growth-bound"})
    rule = "picoquic/cubic.c:256-270, 287; picoquic/newreno.c:222-228 (1.1.53.0)"
    families = ("cubic", "reno")

    def explains(self, occ: Occurrence) -> bool:
        return occ.before.phase == SLOW_START


class PicoquicEpochResetToAppLimited(Mechanism):
    """In congestion avoidance picoquic moves the epoch forward to the last time the sender
    was app-limited (cubic.c:289-291, `start_of_epoch = last_sender_limited_time`) and keeps
    K and W_max, so W_cubic(t) restarts from W_cubic(0) = beta x W_max; the window becomes
    max(W_cubic(t), W_reno) (cubic.c:293-307), which after an application-limited stretch
    can be a little below the window before: a shrink with no congestion signal.  Explained
    only on the ACK where the stack's epoch moved forward (to a time not after now) with
    W_max, K and ssthresh unchanged and the window still at or above ssthresh."""
    name = "picoquic-epoch-reset-to-app-limited"
    invariants = frozenset({"excess-reduction"})
    rule = "picoquic/cubic.c:287-307 (1.1.53.0)"
    families = ("cubic",)

    def explains(self, occ: Occurrence) -> bool:
        before, after = occ.before, occ.after
        if occ.cause != "no-signal" or before.epoch_start_us is None or after.epoch_start_us is None:
            return False
        same_curve = (before.w_max, before.k_us, before.ssthresh) == (after.w_max, after.k_us, after.ssthresh)
        return same_curve and before.epoch_start_us < after.epoch_start_us <= occ.t \
            and after.ssthresh is not None and after.cwnd >= after.ssthresh


class PicoquicRecoveryByPacketNumber(PicoquicLossRateFilter):
    """picoquic decides whether a loss is in its recovery period by packet number, not send
    time: in congestion avoidance it reduces again for a loss numbered at or above
    recovery_sequence, the next number at its last reduction (cubic.c:152, 333); in slow
    start it does not look at the number at all (cubic.c:318-326).  So a loss of a packet
    sent in the same microsecond as the recovery start but after the reduction (RFC 9002
    Appendix B.5 counts it inside the period: sent_time <= recovery start), or a slow-start
    loss of a packet the RFC's period already covered, reduces again.  NewReno decides the
    same way (newreno.c:123, recovery_sequence set at newreno.c:72).  Explained only in
    those cases, and only to a depth one of picoquic's reductions reaches: half the window
    (NewReno, newreno.c:52-62; CUBIC's 7/8 x 7/8 after fast convergence, cubic.c:158-168, is
    shallower) less a datagram of rounding, or its minimum window (cubic.c:170-178)."""
    name = "picoquic-recovery-by-packet-number"
    invariants = frozenset({"excess-reduction"})
    rule = "picoquic/cubic.c:146-178, 314-340; picoquic/newreno.c:47-73, 119-127 (1.1.53.0)"
    families = ("cubic", "reno")
    MINIMUM = 3072                       # PICOQUIC_CWIN_MINIMUM, picoquic_internal.h:93

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.sequence_at = deque(maxlen=self.KEEP)   # (LOST index, recovery_sequence before it)

    def observe(self, index: int, ev) -> None:
        if ev.kind == LOST:
            self.sequence_at.append((index, self.recovery_sequence))
        super().observe(index, ev)

    def explains(self, occ: Occurrence) -> bool:
        if occ.cause != "in-recovery":
            return False
        before, after = occ.before, occ.after
        deep_enough = 2 * after.cwnd >= before.cwnd - 2 * self.mds or after.cwnd <= self.MINIMUM
        recorded = dict(self.sequence_at)
        by_number = any(p[0] >= recorded.get(i, self.recovery_sequence)
                        for i, ev in occ.events if ev.kind == LOST for p in ev.packets)
        return deep_enough and (before.phase == SLOW_START or by_number)


class PicoquicAppLimitedByTimestamp(Mechanism):
    """picoquic grows (cubic.c:261, 287; newreno.c:230) only when the newest send time of any
    packet acknowledged so far (last_time_acked_data_frame_sent, frames.c:3638) is strictly
    after the last time the sender was limited (last_sender_limited_time: an app-limited
    send, the scheduler finding no data, and after every incoming packet while the last
    send was app-limited: sender.c:1426, 3307-3316).  An ACK whose packets the trace marks
    app-limited still grows the window when a packet sent after that instant was already
    acknowledged.  Explained only where that rule, replayed from the events, lets it grow --
    and, the other side of it, a slow start that fell short (ss-growth-shortfall) only on an
    ACK the rule kept from growing: packets the trace marks cwnd-limited, sent in the
    microsecond of an app-limited one (fuzzed on pristine picoquic, 2026-11-29)."""
    name = "picoquic-app-limited-by-timestamp"
    invariants = frozenset({"growth-while-app-limited", "ss-growth-shortfall"})
    rule = "picoquic/cubic.c:261, 287; picoquic/newreno.c:230; picoquic/frames.c:3638; picoquic/sender.c:1426, 3307-3316 (1.1.53.0)"
    families = ("cubic", "reno")

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.acked_sent = None           # last_time_acked_data_frame_sent
        self.limited = None              # last_sender_limited_time
        self.last_send_limited = False
        self.grows = deque(maxlen=256)   # (ACK index, the rule let it grow)

    def observe(self, index: int, ev) -> None:
        if ev.kind == SENT:
            self.last_send_limited = bool(ev.packets[0][3])
            if self.last_send_limited:
                self.limited = ev.t
        elif ev.kind == APP_IDLE:
            self.limited = ev.t
        elif ev.kind == ACKED:
            for p in tuple(ev.packets) + tuple(ev.spurious):
                if self.acked_sent is None or p[1] > self.acked_sent:
                    self.acked_sent = p[1]
            self.grows.append((index, self.acked_sent is not None
                               and (self.limited is None or self.acked_sent > self.limited)))
            if self.last_send_limited:
                self.limited = ev.t

    def explains(self, occ: Occurrence) -> bool:
        grows = dict(self.grows).get(occ.index)
        if occ.invariant == "ss-growth-shortfall":
            return grows is False
        return bool(grows)

"""RFC 9438 CUBIC, byte-based, in virtual microseconds.

Readable first: each rule names the section it comes from.  Windows are
bytes; W_cubic is evaluated in segments of max_datagram_size (RFC 9438 §4.1
defines C in segments per second cubed) and converted back.

Idle semantics (RFC 9438 §4.2: “The elapsed time t in Figure 1 MUST NOT include
periods during which cwnd has not been updated due to application-limited
behavior (see Section 5.8).”; §5.8 counts idle periods among them).  Idle starts when the pipe actually emptied: the ACK or loss
declaration that took bytes in flight to zero -- the later of the last ACK,
the last loss and the last send, except that a late ACK of a packet already
declared lost moves nothing through the pipe and does not count.  On the
first send after it the epoch moves forward by the idle gap, never further
than now (the intent of Linux commit c2e7204d180f, "tcp_cubic: do not set
epoch_start in the future").

Mutants, selectable with ``idle=``, measure the suite's detection power:
  correct    the rule above (default)
  last-send  quiche before 0.28: the gap is measured from the last send and
             added, unclamped, to the one field quiche uses both as epoch and
             as recovery start -- the death spiral
  none       no shift at all: t includes idle time (Linux tcp_cubic before its
             idle-restart fix)
"""
from __future__ import annotations

from ccdiff.snapshot import Snapshot

from .base import INFINITE, Controller

_new_snapshot = tuple.__new__

BETA = 0.7                               # RFC 9438 §4.6 β_cubic
C = 0.4                                  # RFC 9438 §4.2
ALPHA_AIMD = 3 * (1 - BETA) / (1 + BETA)  # RFC 9438 §4.3 α_cubic ≈ 0.529
IDLE_MODES = ("correct", "last-send", "none")
EPOCH_MODES = ("ca-start", "congestion-event")
RENO_FRIENDLY_MODES = ("max", "set")


def cubic_k_seconds(w_max_segments: float, cwnd_epoch_segments: float) -> float:
    """RFC 9438 §4.2 eq. 2: K = cbrt((W_max - cwnd_epoch) / C), 0 if cwnd_epoch ≥ W_max."""
    return max(0.0, (w_max_segments - cwnd_epoch_segments) / C) ** (1 / 3)


def w_cubic_segments(t_seconds: float, k_seconds: float, w_max_segments: float) -> float:
    """RFC 9438 §4.2 eq. 1: W_cubic(t) = C (t - K)^3 + W_max."""
    return C * (t_seconds - k_seconds) ** 3 + w_max_segments


class Cubic(Controller):
    name = "cubic"

    def __init__(self, max_datagram_size: int, initial_rtt_us: int, *, idle: str = "correct",
                 fast_convergence: bool = True, undo: bool = False, epoch: str = "ca-start",
                 reno_friendly: str = "max", **variants):
        super().__init__(max_datagram_size, initial_rtt_us, **variants)
        # Variants reproducing documented deviations (profiles.Profile.reference):
        #   epoch="congestion-event"  the epoch starts at the reduction, so t includes the
        #                             recovery round trip (ngtcp2's epoch-at-congestion-event)
        #   reno_friendly="set"       cwnd = W_est in the Reno-friendly region even when cwnd
        #                             has grown above it (§4.3 to the letter; ngtcp2, aioquic)
        if epoch not in EPOCH_MODES or reno_friendly not in RENO_FRIENDLY_MODES:
            raise ValueError(f"epoch={epoch}, reno_friendly={reno_friendly}: expected epoch one of "
                             f"{', '.join(EPOCH_MODES)}, reno_friendly one of {', '.join(RENO_FRIENDLY_MODES)}")
        self.epoch_at_reduction = epoch == "congestion-event"
        self.reno_friendly_set = reno_friendly == "set"
        if idle not in IDLE_MODES:
            raise ValueError(f"idle={idle}: expected one of {', '.join(IDLE_MODES)}")
        self.idle = idle
        self.fast_convergence = fast_convergence
        self.undo = undo
        self.w_max = None          # bytes, window before the last reduction (§4.6, §4.7)
        self.k = 0.0               # seconds (§4.2)
        self.epoch_start = None    # µs; None until congestion avoidance starts
        self.cwnd_prior = None     # bytes, cwnd before the last reduction (§4.3)
        self.w_est = None          # bytes, Reno-friendly estimate (§4.3)
        self.last_sent_t = None
        self.pipe_emptied_t = None  # when bytes in flight last dropped to zero
        self.saved = None          # state before the last reduction, for §4.9 undo
        self.recovery_lost = ()    # packet numbers whose loss started this recovery
        self.after_timeout = False  # §4.8: the next CA stage is the first after a timeout

    # -- idle (§4.2) ----------------------------------------------------------
    def on_sent(self, ev) -> None:
        self.note_sent(ev)
        now = ev.t
        if ev.bytes_in_flight == 0 and self.last_sent_t is not None:
            if self.idle == "correct":
                gap = now - max(self.last_sent_t, self.pipe_emptied_t or 0)
                if gap > 0 and self.epoch_start is not None:
                    self.epoch_start = min(self.epoch_start + gap, now)
            elif self.idle == "last-send":
                gap = now - self.last_sent_t
                if gap > 0:
                    if self.recovery_start is not None:
                        self.recovery_start += gap
                    if self.epoch_start is not None:
                        self.epoch_start += gap
        self.last_sent_t = now

    def note_drain(self, ev) -> None:
        if ev.bytes_in_flight > 0 and ev.bytes_in_flight_after == 0:
            self.pipe_emptied_t = ev.t

    def on_ack(self, ev) -> None:
        self.note_drain(ev)
        if self.undo and ev.spurious:
            self.maybe_undo(ev)
        super().on_ack(ev)

    def on_lost(self, ev) -> None:
        self.note_drain(ev)
        started = self.recovery_start
        super().on_lost(ev)
        if self.recovery_start != started:
            self.recovery_lost = frozenset(p[0] for p in ev.packets)

    # -- congestion avoidance (§4.2–§4.5) ------------------------------------
    def start_epoch(self, now: int) -> None:
        self.epoch_start = now
        if self.after_timeout:
            # §4.8: in the first CA stage after a timeout "K is set to 0", W_max is "the
            # congestion window size at the beginning of the current congestion avoidance
            # stage", and so is W_est.
            self.after_timeout = False
            self.w_max = self.w_est = self.cwnd_prior = self.cwnd
            self.k = 0.0
            return
        if self.w_max is None or self.w_max < self.cwnd:
            # §4.2: no reduction yet, or above the old plateau: the curve starts here.
            self.w_max = self.cwnd
        self.k = cubic_k_seconds(self.w_max / self.mds, self.cwnd / self.mds)
        if self.w_est is None:
            self.w_est = self.cwnd
        if self.cwnd_prior is None:
            self.cwnd_prior = self.cwnd

    def grow_in_avoidance(self, ev, acked_bytes: int) -> None:
        now = ev.t
        if self.epoch_start is None:
            self.start_epoch(now)
        mds = self.mds
        t = (now - self.epoch_start) / 1e6
        rtt = self.smoothed_rtt / 1e6
        w_max_seg = self.w_max / mds
        cwnd = self.cwnd
        # §4.2: target = W_cubic(t + RTT), clamped to [cwnd, 1.5 cwnd].
        target = w_cubic_segments(t + rtt, self.k, w_max_seg) * mds
        target = min(max(target, cwnd), 1.5 * cwnd)
        # §4.3: W_est grows by α per cwnd of acknowledged data; α becomes 1 once
        # W_est reaches the window before the reduction.
        alpha = 1.0 if self.w_est >= self.cwnd_prior else ALPHA_AIMD
        self.w_est += alpha * acked_bytes * mds / cwnd
        if w_cubic_segments(t, self.k, w_max_seg) * mds < self.w_est:
            # §4.3 Reno-friendly region.  max(): an ACK never shrinks the window.
            self.cwnd = self.w_est if self.reno_friendly_set else max(cwnd, self.w_est)
        else:
            # §4.4 concave / §4.5 convex: (target - cwnd)/cwnd per segment acked (per ACK
            # frame, one segment's step, with growth="per-ack").
            self.cwnd = cwnd + (target - cwnd) / cwnd * (mds if self.per_ack else acked_bytes)

    # -- multiplicative decrease (§4.6, §4.7) ---------------------------------
    def reduce(self, now: int) -> None:
        self.saved = (self.cwnd, self.ssthresh, self.w_max, self.k, self.epoch_start,
                      self.cwnd_prior, self.w_est)
        cwnd = self.cwnd
        self.cwnd_prior = cwnd
        if self.fast_convergence and self.w_max is not None and cwnd < self.w_max:
            self.w_max = cwnd * (1 + BETA) / 2        # §4.7 fast convergence
        else:
            self.w_max = cwnd
        # §4.6 eq. 4.6: cwnd = max(ssthresh, 2) and "ssthresh is at least 2 MSS" (min_window
        # is RFC 9002 §7.2's 2 * max_datagram_size).
        self.ssthresh = max(cwnd * BETA, self.min_window)
        self.cwnd = self.ssthresh
        self.w_est = self.cwnd                       # §4.3: W_est = cwnd at the reduction
        self.k = cubic_k_seconds(self.w_max / self.mds, self.cwnd / self.mds)
        # The next CA stage starts a new epoch (§4.2), or the variant starts it now.
        self.epoch_start = now if self.epoch_at_reduction else None

    def on_persistent_congestion(self, ev) -> None:
        super().on_persistent_congestion(ev)
        self.epoch_start = None                      # §4.8: restart from slow start
        self.after_timeout = True                    # §4.8: K = 0 in the next CA stage
        # The collapse is not the reduction §4.9 saved state for: nothing to undo after it.
        self.saved = None
        self.recovery_lost = ()

    # -- spurious congestion (§4.9) -------------------------------------------
    def maybe_undo(self, ev) -> None:
        """§4.9 MAY: undo the reduction once every loss that started it proved spurious."""
        if self.saved is None or not self.recovery_lost:
            return
        self.recovery_lost = self.recovery_lost - {p[0] for p in ev.spurious}
        if self.recovery_lost or self.cwnd >= self.cwnd_prior:
            return                                   # §4.9: restore only "if cwnd < cwnd_prior"
        (self.cwnd, self.ssthresh, self.w_max, self.k, self.epoch_start,
         self.cwnd_prior, self.w_est) = self.saved
        self.saved = None
        self.recovery_start = None
        self.in_recovery = False

    def snapshot(self, ev) -> Snapshot:
        ssthresh = self.ssthresh
        # tuple.__new__ skips NamedTuple's argument handling: this runs once per event.
        return _new_snapshot(Snapshot, (
            int(self.cwnd), None if ssthresh == INFINITE else int(ssthresh), ev.bytes_in_flight_after,
            self.phase(ev), self.recovery_start, self.epoch_start,
            self.w_max, self.k * 1e6 if self.w_max is not None else None))

"""The invariant catalog and the checker that turns snapshots into findings.

Each invariant has a stable id, the RFC text it enforces and an explanation a
maintainer would accept (docs/invariants.md is generated from CATALOG).  The
checks read only three things: the resolved event, the stack's snapshot
before and after it, and `Truth` -- what the trace itself says about
recovery periods and idle periods, independent of any controller.  A stack
whose own recovery start drifted (the quiche death spiral) is judged against
the trace's timeline, not its own.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from .k_tolerance import CUBIC_C, K_SLACK_S, K_TOLERANCE
from .ledger import ACKED, APP_DATA, APP_IDLE, LOST, PERSISTENT_CONGESTION, SENT
from .mechanisms import Occurrence
from .snapshot import CONGESTION_AVOIDANCE, RECOVERY


# The RFC keyword an invariant rests on.  Only a MUST (or MUST NOT / REQUIRED) can make an
# invariant non-waivable; "descriptive" means the RFC states the behaviour without a keyword,
# "harness" marks checks that are no RFC rule at all (the controller crashed or produced
# garbage) and "differential" the comparison with the oracle.
KEYWORDS = ("MUST", "SHOULD", "RECOMMENDED", "MAY", "descriptive", "harness", "differential")


@dataclass(frozen=True)
class Invariant:
    id: str
    title: str
    rfc: str          # where the rule comes from
    quote: str        # RFC text, verbatim (tests/test_rfc_quotes.py); "" when there is none
    why: str          # the explanation for a maintainer
    waivable: bool    # False only for RFC MUSTs: no profile can tolerate it
    keyword: str = "descriptive"   # one of KEYWORDS: what the quote obliges
    quote_from: str = ""           # "RFC 9438 §4.2": the section the quote is taken from
    # Further verbatim quotes, (text, "RFC NNNN §X.Y") each, where the rule takes more than one
    # sentence to state (checked like quote; reports show them after it).
    more_quotes: tuple = ()


CATALOG = {inv.id: inv for inv in [
    Invariant("future-recovery-start", "Recovery start or epoch after the current time",
              "RFC 9438 §4.2; RFC 9002 §7.3.2; Linux c2e7204d180f",
              "where t is the elapsed time in seconds from the beginning of the current congestion "
              "avoidance stage",
              "An epoch or recovery start later than now makes t negative and makes every packet sent "
              "before that instant look like it was sent during recovery, so ACKs never grow the window. "
              "The RFC has no keyword for it: the rule is derived from the definition of t. Linux fixed "
              "the same slip in commit c2e7204d180f (\"tcp_cubic: do not set epoch_start in the "
              "future\"); quiche's idle-restart shift before 0.28 reintroduced it (the death spiral).",
              True, "descriptive", "RFC 9438 §4.2"),
    Invariant("cwnd-below-minimum", "Congestion window below the minimum window",
              "RFC 9002 §7.2",
              "The minimum congestion window is the smallest value the congestion window can attain in "
              "response to loss, an increase in the peer-reported ECN-CE count, or persistent congestion. "
              "The RECOMMENDED value is 2 * max_datagram_size.",
              "Below two datagrams a sender cannot keep an ACK clock going: a single loss stalls it "
              "until a PTO. RFC 9002 only RECOMMENDS the value, so a stack's profile may document "
              "a smaller floor.", True, "RECOMMENDED", "RFC 9002 §7.2"),
    Invariant("stuck-at-minimum", "Window frozen at or near the minimum after losses stopped",
              "RFC 9002 §7.3.2, §7.3.3; RFC 9438 §4.2–§4.5",
              "A recovery period ends and the sender enters congestion avoidance when a packet sent "
              "during the recovery period is acknowledged.",
              "Packets sent after the last congestion signal keep being acknowledged, yet the window "
              "does not grow at all while it sits at the minimum or less than two datagrams above it, "
              "for 20 smoothed round trips, 250 ms and at least 8 acknowledged packets: the controller believes "
              "it is still in recovery, or never credits the ACKs. This is the observable face of the "
              "death spiral (quiche 0.26.0: 775-786 round trips pinned on the death-spiral scenario). "
              "From the floor slow start doubles the window and the Reno-friendly estimate of RFC 9438 "
              "§4.3 adds about half a datagram per round trip; the slowest correct controller measured, "
              "Linux's integer estimator with its HZ/32 recompute throttle, leaves the band within 6 "
              "round trips and 70 ms (16-18 packets), so the check waits 20 and 250 ms. Only packets sent while the window was full count (the bytes in flight left no "
              "room for one more datagram, RFC 9002 §7): a window the sender does not fill is "
              "underutilized (RFC 9002 §7.8), not stuck, and need not grow. In closed loop, when the path's bandwidth-delay product is itself below that band, "
              "a small window is the path's operating point and only a window exactly at the floor "
              "counts.", True, "descriptive", "RFC 9002 §7.3.2"),
    Invariant("missing-reduction", "No window reduction on a new congestion event",
              "RFC 9438 §4.6; RFC 9002 §7.3.2",
              "In case of packet loss, the sender MUST reduce cwnd and ssthresh immediately upon entering "
              "loss recovery, similar to [RFC5681] (and [RFC6675]).",
              "A loss of a packet sent after the current recovery period began is a new congestion "
              "event; the window must shrink (multiplicative decrease). Waivable although a MUST: the "
              "same section lets a stack reduce gradually with Proportional Rate Reduction, which a "
              "profile can document.", True, "MUST", "RFC 9438 §4.6"),
    Invariant("excess-reduction", "More than one reduction per recovery period, or deeper than β",
              "RFC 9002 §7.3.2; RFC 9438 §4.6",
              "The recovery period aims to limit congestion window reduction to once per round trip. "
              "Therefore, during a recovery period, the congestion window does not change in response to "
              "new losses or increases in the ECN-CE count.",
              "Reducing again for packets sent before the recovery started, reducing without any "
              "congestion signal, or below β·cwnd punishes the flow several times for one event. "
              "RFC 9002 states the rule without a keyword and RFC 9438 §4.6 says β_cubic SHOULD be 0.7. "
              "A stack that skipped the start of a recovery period (missing-reduction there) and reduces "
              "on a later congestion signal inside it makes its one reduction for that period: judged "
              "by depth only.",
              True, "descriptive", "RFC 9002 §7.3.2"),
    Invariant("shallow-reduction", "Reduction shallower than β on a new congestion event",
              "RFC 9438 §4.6; RFC 9002 §7.3.2",
              "The parameter β_cubic SHOULD be set to 0.7, which is different from the multiplicative "
              "decrease factor used in [RFC5681] (and [RFC6675]) during fast recovery.",
              "On a new congestion event the window and the slow-start threshold go to β times the "
              "window before it (β_cubic = 0.7; NewReno's kLossReductionFactor 0.5, RFC 9002 §7.3.2). "
              "A stack whose reduced window and threshold both stay above β x max(cwnd, bytes in "
              "flight) plus one datagram backs off less than the RFC says, so it takes more than its "
              "share of a congested path. Checked on the lower of the two, so a stack that lowers "
              "cwnd gradually (Proportional Rate Reduction, RFC 6937) but sets ssthresh at once "
              "passes. A SHOULD: a profile may document another β.",
              True, "SHOULD", "RFC 9438 §4.6"),
    Invariant("growth-in-recovery", "Window grew on an ACK of a packet sent before recovery started",
              "RFC 9002 §7.3.2, Appendix B.5; RFC 9438 §4.2",
              "Do not increase congestion window in recovery period.",
              "RFC 9002's OnPacketAcked (Appendix B.5) returns before any growth while "
              "InCongestionRecovery(acked_packet.time_sent), that is for packets sent at or before the "
              "recovery start, and the recovery period lasts until a packet sent during it is "
              "acknowledged (§7.3.2). CUBIC changes the window increase function, not fast recovery "
              "(RFC 9438 §4.2), so the same holds for a CUBIC sender. Growth during recovery undoes the "
              "reduction before the network has drained.",
              True, "descriptive", "RFC 9002 §B.5",
              (("A recovery period ends and the sender enters congestion avoidance when a packet sent "
                "during the recovery period is acknowledged.", "RFC 9002 §7.3.2"),
               ("CUBIC maintains the acknowledgment (ACK) clocking of Reno by increasing the congestion "
                "window only at the reception of a new ACK. It does not make any changes to the TCP Fast "
                "Recovery and Fast Retransmit algorithms", "RFC 9438 §4.2"))),
    Invariant("growth-while-app-limited", "Window grew while the sender was app-limited",
              "RFC 9002 §7.8; RFC 9438 §5.8",
              "When bytes in flight is smaller than the congestion window and sending is not pacing "
              "limited, the congestion window is underutilized. ... When this occurs, the congestion "
              "window SHOULD NOT be increased in either slow start or congestion avoidance.",
              "ACKs of packets sent while the application had nothing to send say nothing about the "
              "path's capacity at the current window. Only a round trip in which every send was marked "
              "app-limited and left the stack's own window room for another full datagram counts: a "
              "mark is the application's word, a full window is the stack's, and a stack may judge by "
              "the acknowledged packets or by its state now (quiche clears its flag when bytes in "
              "flight reach the window; Linux looks back over the window).", True, "SHOULD", "RFC 9002 §7.8",
              more_quotes=(("A flow is application-limited if it is currently sending less than what is "
                            "allowed by the congestion window.", "RFC 9438 §5.8"),)),
    Invariant("growth-without-ack", "Window grew on an event that acknowledged nothing",
              "RFC 9002 §7.8, Appendix B.5; RFC 9438 §5.8",
              "When this occurs, the congestion window SHOULD NOT be increased in either slow start or "
              "congestion avoidance.",
              "A send, a loss, a timer or the application's idle and restart carry no news that the path "
              "can take more: RFC 9002 grows the window only in OnPacketsAcked (Appendix B.5), and a "
              "window the sender leaves unfilled must not grow (§7.8). A restart after idle may keep or "
              "lower the window (RFC 9002 §7.8's MAY, the restart window of RFC 5681 §4.1 is the "
              "minimum of the initial window and cwnd), never raise it: a collapsed window raised "
              "back to the initial one on the first send after a pause (or after an outage whose "
              "probes went unanswered) sends a burst the path has not shown it can carry.",
              True, "SHOULD", "RFC 9002 §7.8",
              (("CUBIC does not increase its congestion window if a flow is application-limited.",
                "RFC 9438 §5.8"),)),
    Invariant("idle-inflation", "Window grew faster right after an idle period than before it",
              "RFC 9438 §4.2, §5.8",
              "The elapsed time t in Figure 1 MUST NOT include periods during which cwnd has not been "
              "updated due to application-limited behavior (see Section 5.8).",
              "Idle periods are application-limited periods (RFC 9438 §5.8). If idle time counts "
              "towards t, W_cubic(t) jumps far past W_max while the sender was quiet and the first "
              "round trip after resuming inflates the window by up to 50%.", False, "MUST",
              "RFC 9438 §4.2"),
    Invariant("ca-growth-bound", "Congestion-avoidance growth beyond 1.5x per round trip",
              "RFC 9438 §4.2, §4.4, §4.5",
              "In this region, cwnd MUST be incremented by ... for each received new ACK, where target "
              "is calculated as described in Section 4.2.",
              "target is at most 1.5 * cwnd (RFC 9438 §4.2), so in congestion avoidance one "
              "acknowledged byte may grow the window by at most half a byte (plus one datagram of "
              "rounding for stacks that grow in whole datagrams). Judged ACK by ACK; for a stack "
              "that sets its window from W_cubic(t) on every ACK (profile `ca_growth_per = "
              "\"round-trip\"`: picoquic), whose growth follows time, over the ACKs of the last "
              "smoothed RTT -- the 1.5x per round trip the rule implies; an idle period or a congestion "
              "signal starts a new round, so the first ACK after one is judged alone.", False, "MUST",
              "RFC 9438 §4.4"),
    Invariant("ca-without-epoch", "Congestion avoidance with no epoch",
              "RFC 9438 §4.2, §4.8",
              "During the first congestion avoidance stage after a timeout, CUBIC increases its "
              "congestion window size using Figure 1, where t is the elapsed time since the beginning "
              "of the current congestion avoidance, K is set to 0, and W_max is set to the congestion "
              "window size at the beginning of the current congestion avoidance stage.",
              "W_cubic(t) (RFC 9438 §4.2) needs t = t_current - t_epoch: a CUBIC stack that grows its "
              "window in congestion avoidance (by its own reported phase) while it has no epoch computes "
              "t from an unset value. ngtcp2 1.25.0 after persistent congestion (`cubic_vars_reset` sets "
              "epoch_start = UINT64_MAX, `ngtcp2_cc.c` ~198) computes t = ts - UINT64_MAX, which at a "
              "real clock makes W_cubic huge, so the window grows at the 1.5 x cwnd target cap instead "
              "of from K = 0 and W_max = cwnd as §4.8 describes. Judged only for CUBIC stacks whose "
              "adapter reports an epoch at all (one has been reported earlier in the run); the RFC "
              "describes the curve without a keyword, so a profile may document it.",
              True, "descriptive", "RFC 9438 §4.8"),
    Invariant("k-mismatch", "K does not take the window from the epoch's cwnd to W_max",
              "RFC 9438 §4.2 (Eq. 2), §5.1",
              "K is the time period that the above function takes to increase the congestion window size "
              "at the beginning of the current congestion avoidance stage to W_max if there are no further "
              "congestion events and is calculated using the following equation:",
              "Where W_cubic(t) uses a K (the first ACK that finds a CUBIC stack in congestion avoidance "
              "after it computed K), the snapshot's K must be the cube root of (W_max - cwnd_epoch) / C in segments and "
              "seconds, with C = 0.4 (RFC 9438 §5.1: \"C SHOULD be set to 0.4\"), the stack's own W_max, "
              "and as cwnd_epoch the window (or slow-start threshold) when K was computed; 0 (or the "
              "negative root) when the window is already at or above W_max. A "
              "wrong K puts the plateau of W_cubic(t) at the wrong time: the window then follows "
              "another curve, which no growth bound notices while it stays under 1.5 x cwnd per RTT. "
              "The tolerance (1% of K plus 5 ms) covers fixed-point K (ngtcp2's 1/1024 s, Linux's "
              "approximated cube root).",
              True, "descriptive", "RFC 9438 §4.2",
              (("where cwnd_epoch is the congestion window at the beginning of the current congestion "
                "avoidance stage.", "RFC 9438 §4.2"),)),
    Invariant("w-max-mismatch", "W_max after a congestion event is neither the window nor its fast-convergence value",
              "RFC 9438 §4.7; §4.1.2",
              "With Fast Convergence, when a congestion event occurs, W_max is updated as follows, before the "
              "window reduction described in Section 4.6.",
              "On a new congestion event a CUBIC stack's W_max becomes the window just before the reduction, "
              "or, with fast convergence and a window below the previous W_max, that window times "
              "(1 + β_cubic) / 2 = 0.85 (RFC 9438 §4.7). A W_max set from anything else puts the "
              "plateau of the next W_cubic(t) at the wrong height: the window then follows another curve, "
              "which no growth bound notices. One datagram of rounding is allowed (Linux and picoquic count "
              "W_max in whole segments). Fast convergence SHOULD be implemented but SHOULD be disabled "
              "for a single flow, so both values pass.",
              True, "descriptive", "RFC 9438 §4.7",
              (("Size of cwnd in segments just before cwnd was reduced in the last congestion event when "
                "fast convergence is disabled (same as cwnd_prior on a congestion event). However, if fast "
                "convergence is enabled, W_max may be further reduced based on the current saturation "
                "point.", "RFC 9438 §4.1.2"),)),
    Invariant("ca-off-curve", "Congestion-avoidance growth off the stack's own W_cubic curve",
              "RFC 9438 §4.2 (Eq. 1), §4.3, §4.4, §4.5",
              "In this region, cwnd MUST be incremented by ... for each received new ACK, where target "
              "is calculated as described in Section 4.2.",
              "Over a stretch of congestion-avoidance ACKs on one curve (the stack's own epoch, K and "
              "W_max unchanged; no congestion signal, recovery, app-limited ACK, shrinking window or idle "
              "restart inside it), a CUBIC stack grows its window by (target - cwnd) / cwnd per ACK, "
              "target = W_cubic(t + RTT) clamped to [cwnd, 1.5 cwnd] (RFC 9438 §4.2, §4.4, §4.5), or "
              "follows W_est in the Reno-friendly region (§4.3), whichever is larger. From the stack's "
              "own epoch, K and W_max and C = 0.4 (§5.1), two shadow windows are stepped beside the "
              "stack's: the fastest (the target with the largest RTT the trace knows, latest or smoothed, "
              "before or after this ACK's sample, per acknowledged segment; or W_est with α = 1 per window "
              "acknowledged or per RTT elapsed, RFC 8312's closed form) and the slowest (W_cubic(t) "
              "without look-ahead, one segment's step per ACK frame -- \"for each received new ACK\", "
              "as ngtcp2 and s2n-quic read it -- and only for ACKs that found the window full: RFC "
              "9002 §7.8 lets an underutilized window stand still). The stack's growth must "
              "stay within 10% plus two datagrams of that band; a window at or below the target itself "
              "is never too high. The tolerance covers whole-segment growth (Linux's integer bic_target "
              "and cnt, quiche's and quinn's accumulators). A slip in C, in t - K, in the RTT "
              "look-ahead or in the epoch leaves every other bound intact while the window follows "
              "another curve; this is where it shows. Waivable although a MUST, and only by a mechanism: "
              "RFC 8312's closed-form W_est (quinn, s2n-quic) is the previous RFC's rule, which a profile "
              "documents and a mechanism recomputes.",
              True, "MUST", "RFC 9438 §4.4",
              (("Upon receiving a new ACK during congestion avoidance, CUBIC computes the target congestion "
                "window size after the next RTT using Figure 1 as follows, where RTT is the smoothed "
                "round-trip time.", "RFC 9438 §4.2"),
               ("To summarize, CUBIC computes both Wcubic(t) and West (see Section 4.3) on receiving a "
                "new ACK in congestion avoidance and chooses the larger of the two values.",
                "RFC 9438 §4.2"))),
    Invariant("ss-growth-bound", "Slow-start growth beyond the bytes acknowledged",
              "RFC 9002 §7.3.1",
              "While a sender is in slow start, the congestion window increases by the number of bytes "
              "acknowledged when each acknowledgment is processed.",
              "Slow start at most doubles the window per round trip. A stack whose profile says it counts "
              "acknowledged bytes and adds whole datagrams (ss_byte_counter: quiche's bytes_acked_sl) "
              "may grow by more than one ACK's bytes with what earlier ACKs left in its counter, never "
              "by more than all of them: for it the bound carries what earlier slow-start ACKs "
              "acknowledged and did not grow, up to one datagram less a byte. RFC 9002 describes this "
              "without a MUST and variants (HyStart++, bandwidth-seeded starts) exist, so a profile "
              "may document a different slow start.", True, "descriptive", "RFC 9002 §7.3.1"),
    Invariant("ss-growth-shortfall", "Slow-start growth short of the bytes acknowledged",
              "RFC 9002 §7.3.1; RFC 9406 §4.2",
              "While a sender is in slow start, the congestion window increases by the number of bytes "
              "acknowledged when each acknowledgment is processed.",
              "The lower side of ss-growth-bound. Over a stretch of slow-start ACKs (the stack in slow "
              "start before and after each, no congestion signal, recovery or app-limited ACK inside "
              "it), the window must grow by the bytes acknowledged by ACKs that found the window full "
              "(RFC 9002 §7.8 lets an underutilized window stand still), of packets sent after the last "
              "congestion signal and not app-limited, up to ssthresh (Linux "
              "stops slow start there). HyStart++'s conservative slow start (RFC 9406 §4.2) grows by a "
              "quarter of that; it can only begin after a round's minimum RTT rose by clamp(min_rtt / 8, "
              "4 ms, 16 ms), so once any RTT sample of the run is that far above the minimum RTT, a "
              "quarter is enough. Tolerance: 10% plus two datagrams (whole-datagram counting, quiche's "
              "bytes_acked_sl). A window that crawls in slow start (a byte counter that never fills, "
              "CSS's divisor applied outside CSS) takes rounds longer to find the path's capacity and "
              "passes every upper bound. Descriptive in RFC 9002, so a profile may document another "
              "slow start.", True, "descriptive", "RFC 9002 §7.3.1"),
    Invariant("persistent-congestion-ignored", "Window not collapsed on persistent congestion",
              "RFC 9002 §7.6.2",
              "When persistent congestion is declared, the sender's congestion window MUST be reduced "
              "to the minimum congestion window (kMinimumWindow), similar to a TCP sender's response on "
              "an RTO [RFC5681].",
              "Persistent congestion means the path lost everything for longer than a PTO period. "
              "The MUST is part of the controller RFC 9002 specifies (NewReno); RFC 9002 §7 says \"A "
              "sender can unilaterally choose a different algorithm to use, such as CUBIC\", and RFC "
              "9438 §4.8 only says CUBIC \"follows Reno\" on a timeout, without a keyword. At least "
              "one stack's maintainers read it that way and removed their persistent-congestion hook, "
              "so for a CUBIC stack this is waivable: its profile can document the choice.",
              True, "MUST", "RFC 9002 §7.6.2"),
    Invariant("numeric-error", "A snapshot field is not a sane number",
              "— (harness check)", "",
              "cwnd, ssthresh and W_max are positive amounts of data: zero, negative, NaN or "
              "astronomically large values point at overflow, underflow or division by zero in the "
              "controller. K is a time that may be negative (RFC 9438 §4.2 eq. 2 is the cube root of "
              "(W_max - cwnd_epoch) / C, negative when the stage starts above W_max): only a NaN, "
              "infinite or astronomically large K counts. No RFC text: no controller can be right "
              "with them.",
              False, "harness"),
    Invariant("adapter-error", "The stack refused or crashed on an event",
              "— (harness check)", "",
              "A controller accepts every causally consistent event stream. The stack's controller "
              "raised an error (a Rust panic, a C assertion) on a valid event stream; the run for that "
              "stack stops at this event.", False, "harness"),
    Invariant("trajectory-divergence", "Window trajectory leaves the oracle's envelope",
              "RFC 9438 (differential)", "",
              "The stack's window differs from its reference -- the RFC 9438 oracle configured with the "
              "variants of the stack's profile, its documented deviations made executable -- by more "
              "than the profile's tolerance for a sustained stretch of ACKs, in replay and in closed "
              "loop (there on the run's own events). A deviation the oracle cannot run yet excuses it "
              "only when its trigger (a loss, a spurious loss, an app-limited send, ...) occurred at "
              "or before the divergence began; after an earlier violation it is that violation's "
              "consequence.", True, "differential"),
]}

# ca-off-curve: how far a stretch's growth may leave its shadow windows.  Whole-segment growth
# overshoots or lags them by a segment or two (Linux rounds its integer bic_target up and its
# cnt = cwnd / (target - cwnd) down; quiche's and quinn's accumulators add a datagram at a time):
# two datagrams.  A C halved, t + K, or a W_cubic of 0 moves the window by far more; a C off by
# 10% moves it by less than that on the examples, and survives (docs/detection-power.md).
CURVE_REL_TOLERANCE = 0.10
CURVE_SLACK_DATAGRAMS = 2


@dataclass(slots=True)
class CurveStretch:
    """ca-off-curve: congestion-avoidance ACKs on one curve (the stack's epoch, K, W_max), and
    two shadow windows stepped beside the stack's over them: the fastest and the slowest a
    controller on that curve could have grown (Checker.judge_curve)."""
    curve: tuple          # (epoch_start_us, w_max, k_us) the stretch's ACKs all had
    first: int            # index of its first ACK
    start: int            # the stack's window after that ACK
    last_ack_t: int       # time of its last ACK (W_est's closed form grows with elapsed time)
    last: int = 0         # the window after its last ACK: a stretch ends where another event moved it
    highest: float = 0.0  # the fastest window: W_cubic(t + the largest RTT), or W_est with α = 1
    lowest: float = 0.0   # the slowest: W_cubic(t), one segment's step per ACK of a full window
    acks: int = 0
    rate: float = 0.0     # with a rate tick: the fastest window's step per byte, and its tick
    rate_tick: int = -1

    def __post_init__(self):
        self.last = self.start
        self.highest = self.lowest = float(self.start)


# ss-growth-shortfall: RFC 9406 §4.2's conservative slow start -- its growth divisor and the RTT
# rise that lets it begin (RttThresh = clamp(lastRoundMinRTT / 8, MIN_RTT_THRESH, MAX_RTT_THRESH)).
CSS_GROWTH_DIVISOR = 4
CSS_MIN_RTT_THRESH_US = 4_000
CSS_MAX_RTT_THRESH_US = 16_000
SS_REL_TOLERANCE = 0.10
SS_SLACK_DATAGRAMS = 2


@dataclass(slots=True)
class SlowStartStretch:
    """ss-growth-shortfall: consecutive slow-start ACKs and the growth they owe."""
    first: int            # index of its first ACK
    start: int            # the stack's window before it
    last: int             # the window after its last ACK: a stretch ends where another event moved it
    acked: int = 0        # bytes its ACKs acknowledged with the window full (window_limited_bytes)
    owed: float = 0.0     # the least growth RFC 9002 §7.3.1 (or RFC 9406's CSS) allows for them
    acks: int = 0


LOSS_REVISED_US = 1_000      # a send this soon after a loss may show the loss reduced nothing
_KIND_NAMES = {SENT: "send", LOST: "loss", PERSISTENT_CONGESTION: "persistent congestion",
               APP_IDLE: "app idle", APP_DATA: "app data"}
STUCK_PACKETS = 8        # post-signal packets acknowledged while pinned at the minimum
# ... over at least this many smoothed round trips while the window was full (issue #30):
# the slowest correct controller measured, Linux's tcp_cubic (integer Reno-friendly
# estimate that acts a whole segment ahead, the HZ/32 recompute throttle), needs up to
# 6 round trips to leave the band (death-spiral, 10 seeds, 6.1 and 6.12); quiche 0.26.0's
# death spiral stays pinned for 775-786 (seconds at 10 ms).  20 leaves Linux a margin of
# 3x and the spiral one of 39x (docs/detection-power.md, "Verdicts, second round").
STUCK_ROUND_TRIPS = 20
# ... and at least this long: on a path of a millisecond or less, Linux's recompute throttle
# (HZ/32, in jiffies) spans many round trips; its worst stay measured is 70 ms, the spiral's 8 s.
STUCK_MIN_US = 250_000
NEAR_FLOOR_DATAGRAMS = 2  # "near the floor": less than this many datagrams above it


def near_floor_limit(floor: int, mds: int, bdp_bytes: int | None) -> int:
    """The largest window stuck-at-minimum still calls "at the minimum".

    From the floor (RFC 9002 §7.2, 2 datagrams) a window that works grows by at least
    one datagram within a few round trips: slow start doubles it (RFC 9002 §7.3.1),
    the Reno-friendly estimate adds α_cubic ≈ 0.53 datagram per round trip (RFC 9438
    §4.3).  A window frozen less than two datagrams above the floor (2.7 datagrams after
    the same idle bug that pins another stack at exactly 2) is the same failure.  When
    the path's bandwidth-delay product is itself below that limit (closed loop knows
    it), a small window is the path's operating point -- the flat part of W_cubic
    around W_max (RFC 9438 §4.4, §4.5) -- and only a window exactly at the floor counts.
    """
    near = floor + NEAR_FLOOR_DATAGRAMS * mds
    if bdp_bytes is not None and bdp_bytes < near:
        return floor
    return near
HUGE = 2**53


@dataclass
class Finding:
    stack: str
    invariant: str
    event_index: int
    t_us: int
    detail: str
    count: int = 1               # violations of this invariant on this run
    status: str = "violation"    # or "deviation" when the stack's profile documents it
    line: int = 0                # trace line of the first violation
    # Deviations whose mechanism was observed at every occurrence counted here
    # (ccdiff/mechanisms.py); empty for findings no mechanism explained.
    explained_by: tuple = ()
    # Where the finding's evidence starts, when that is before event_index: idle-inflation
    # is flagged at the last ACK of the round trip it measures, but the window began to
    # inflate at that round trip's first ACK (profiles.judge orders causes by it).
    onset_index: int | None = None

    def to_dict(self) -> dict:
        return {"stack": self.stack, "invariant": self.invariant, "status": self.status,
                "event_index": self.event_index, "line": self.line, "t_us": self.t_us,
                "count": self.count, "detail": self.detail}


class Truth:
    """The trace's own timeline: RFC 9002 §7.3.2 recovery periods and idle restarts."""

    def __init__(self, ecn: bool = True):
        # A stack that does not use ECN (its profile says `ecn = false`) never receives a
        # CE count on a real path (it sends no ECT codepoints, RFC 9000 §13.4): for its
        # timeline an ECN-CE mark in the trace is no congestion signal (RFC 9002 §7.1).
        self.ecn = ecn
        self.recovery_start = None
        self.last_signal_t = None
        self.signal = False          # this event carries a congestion signal
        self.new_event = False       # ... and it starts a new recovery period
        self.ack_in_recovery = False  # every packet this ACK covers was sent before recovery start
        self.ack_app_limited = False  # every packet outside recovery was sent app-limited
        # The sender's own state as an ACK arrives (RFC 9002 B.5 IsAppOrFlowControlLimited()):
        # its last send was marked app-limited, or the application said it is idle.  A stack
        # may gate growth on it instead of the acknowledged packets' marks (quinn's connection
        # flag, quiche's): a window that did not grow then falls short of no rule (limited_now).
        self.last_send_limited = False
        self.app_idle = False
        self.idle_gap = 0            # on a send after idle: how long the pipe was empty
        # After a spurious loss (an ACK of a packet declared lost) a stack may undo its
        # reduction and end recovery (RFC 9438 §4.9, a MAY) or not: until the next new
        # congestion event, recovery-period rules cannot tell right from wrong.
        self.undo_window = False
        self.ambiguous = False       # this event falls in that window
        self.last_sent_t = None
        self.last_sent_pn = None
        self.pipe_emptied_t = None   # the ACK or loss that last took bytes in flight to zero
        # RFC 9002 §7.3.2: recovery ends when "a packet sent during the recovery period" is
        # acknowledged, and a loss of a packet sent after the start is a new congestion event.
        # A packet sent in the same microsecond as the signal that started recovery, but after
        # it, is one the clock cannot place: a stack that compares send times (quiche, aioquic:
        # sent_time <= recovery start) calls it part of the period, one that compares packet
        # numbers or the order of events calls it sent after.  Both read the RFC right, so the
        # timeline keeps both readings: recovery_start by time, start_by_order as (time, the
        # last packet sent before the signal).  Where they disagree on whether a loss starts a
        # new period, neither verdict is given; an ACK is in recovery only if it is in both.
        self.start_by_order = None
        self.order_ambiguous = False  # this event's signal is new in one reading only

    @property
    def limited_now(self) -> bool:
        """The acknowledged packets' marks or the sender's state now say app-limited: the
        shortfall rules (ss-growth-shortfall, ca-off-curve) hold back where either reading
        excuses a window that did not grow."""
        return self.ack_app_limited or self.last_send_limited or self.app_idle

    def in_recovery(self, packet) -> bool:
        """Sent at or before the recovery start in both readings (by time, by order)."""
        return self._before_by_time(packet) and self._before_by_order(packet)

    def _before_by_time(self, packet) -> bool:
        return self.recovery_start is not None and packet[1] <= self.recovery_start

    def _before_by_order(self, packet) -> bool:
        start = self.start_by_order
        if start is None:
            return False
        return packet[1] < start[0] or (packet[1] == start[0] and start[1] is not None and packet[0] <= start[1])

    def _signal(self, now: int, packets) -> None:
        latest = max(packets, key=lambda p: (p[1], p[0]))
        # A packet sent after every earlier signal is new for every stack, whatever
        # each did with its own recovery start: that closes an undo window.
        clean = self.last_signal_t is None or latest[1] > self.last_signal_t
        self.signal = True
        self.last_signal_t = now
        new_by_time, new_by_order = not self._before_by_time(latest), not self._before_by_order(latest)
        if new_by_time:
            self.recovery_start = now
        if new_by_order:
            self.start_by_order = (now, self.last_sent_pn)
        if new_by_time and new_by_order:
            self.new_event = True
        elif new_by_time or new_by_order:
            # Only the order of events within one microsecond makes it a new period: a stack
            # that reduces here and one that does not both follow RFC 9002 §7.3.2 (a
            # reduction deeper than beta follows neither: Checker.judge_either_reading).
            self.ambiguous = self.order_ambiguous = True
            return
        if self.undo_window and clean:
            self.undo_window = self.ambiguous = False

    def update(self, ev) -> None:
        self.signal = self.new_event = self.order_ambiguous = False
        self.idle_gap = 0
        kind, now = ev.kind, ev.t
        if kind == ACKED and ev.spurious:
            self.undo_window = True
        self.ambiguous = self.undo_window
        if kind == SENT:
            if ev.bytes_in_flight == 0 and self.last_sent_t is not None:
                self.idle_gap = now - max(self.last_sent_t, self.pipe_emptied_t or 0)
            self.last_sent_t = now
            self.last_sent_pn = ev.packets[-1][0] if ev.packets else self.last_sent_pn
            self.last_send_limited = bool(ev.packets) and bool(ev.packets[-1][3])
            return
        if kind == APP_IDLE or kind == APP_DATA:
            self.app_idle = kind == APP_IDLE
        if ev.bytes_in_flight > 0 and ev.bytes_in_flight_after == 0:
            self.pipe_emptied_t = now
        if kind == LOST:
            self._signal(now, ev.packets)
        elif kind == ACKED:
            if ev.ecn_ce and ev.packets and self.ecn:
                self._signal(now, ev.packets[-1:])
            packets = ev.packets
            self.ack_in_recovery = bool(packets) and all(self.in_recovery(p) for p in packets)
            outside = [p for p in packets if not self.in_recovery(p)]
            self.ack_app_limited = bool(outside) and all(p[3] for p in outside)
        elif kind == PERSISTENT_CONGESTION:
            self.signal = True
            self.last_signal_t = now
            self.recovery_start = self.start_by_order = None   # RFC 9002 B.8


def _rolled_back(before, after, reduced_from) -> bool:
    """The stack restored its pre-reduction state: the recovery start moved back in time, or
    it moved at all and the window returned exactly to where the last reduction took it from
    (quiche's undo can be followed, in the same ACK, by an entry into congestion avoidance
    that sets the epoch -- its recovery start -- to now)."""
    if after.cwnd <= before.cwnd:
        return False
    start, now_start = before.recovery_start_us, after.recovery_start_us
    moved_back = start is not None and (now_start is None or now_start < start)
    return moved_back or (now_start != start and after.cwnd == reduced_from)


def in_slow_start(snap) -> bool:
    """Slow start needs both the stack's word and the window: RFC 9002 §7.3.1, "A NewReno
    sender is in slow start any time the congestion window is below the slow start threshold."
    A stack that reports congestion avoidance or recovery is not in slow start even with cwnd
    a byte below ssthresh (picoquic's rounding: 11,759 against 11,760); recovery ends in
    congestion avoidance (RFC 9002 §7.3.2).  A stack that reports slow start with cwnd at or
    above ssthresh is judged in congestion avoidance: quiche labels the stretch after a
    HyStart++ exit slow start, picoquic's bandwidth seed carries cwnd past ssthresh before
    its exit test runs.  Without a usable phase (unknown, app-limited) the window decides."""
    below = snap.ssthresh is None or snap.cwnd < snap.ssthresh
    if snap.phase in (CONGESTION_AVOIDANCE, RECOVERY):
        return False
    return below


def _bad_number(value, lo: float) -> bool:
    return value is not None and (not math.isfinite(value) or value < lo or value > HUGE)


class Checker:
    """All invariants for one stack's run.  Call check() after every event."""

    def __init__(self, stack: str, max_datagram_size: int, family: str = "cubic",
                 min_window_datagrams: int = 2, loss_applied_with_ack: bool = False,
                 bdp_bytes: int | None = None, mechanisms: dict | None = None, rate_tick_us: int = 0,
                 ca_growth_per_round_trip: bool = False, ss_byte_counter: bool = False):
        self.stack = stack
        # Mechanism-checked deviations (Profile.mechanisms): invariant -> [(deviation id,
        # Mechanism)].  An occurrence of such an invariant that a mechanism explains goes to
        # `explained` instead of `findings` (ccdiff/mechanisms.py).
        self.mechanisms = mechanisms or {}
        self.observers = list({id(m): m for pairs in self.mechanisms.values() for _, m in pairs}.values())
        self.explained: dict[str, Finding] = {}
        self.first_explained: dict[str, int] = {}   # deviation id -> its mechanism's first occurrence
        # {invariant: {event: (t_us, detail)}} of every occurrence, where a caller sets it to {}
        # (connection/confirm.own_window); findings keep the first occurrence and a count.
        self.occurrences: dict | None = None
        self.mds = max_datagram_size
        self.min_window = 2 * max_datagram_size                  # RFC 9002 §7.2
        self.floor = max(min_window_datagrams, 2) * max_datagram_size  # the stack's own floor
        self.beta = 0.7 if family == "cubic" else 0.5             # RFC 9438 §4.6 / RFC 9002 §7.3.2
        self.time_based = family == "cubic"   # idle-inflation concerns W_cubic(t) only
        self.findings: dict[str, Finding] = {}
        self.post_signal_acked = 0
        self.stuck_cwnd = None       # the window when the stuck-at-minimum count began
        self.stuck_rtts = 0.0        # smoothed round trips spent pinned since then
        self.last_loss = None        # (t, snapshot before it) of the latest loss (growth-without-ack)
        self.stuck_last_t = 0        # the last counted ACK's time
        self.stuck_first_t = 0       # the first counted ACK's time
        self.full_window_pn = -1     # the last packet sent with the window full (judge_step)
        self.limited_pn = -1         # the last packet sent full or not app-limited (judge_step)
        self.own_start_tie = None    # note_own_start
        self.near_floor = near_floor_limit(self.floor, max_datagram_size, bdp_bytes)
        self.recent_acks = deque()   # recent ACKs, for idle-inflation
        self.idle_watch = None
        self.loss_group = None       # a loss (and persistent congestion) awaiting its ACK
        self.reduced_from = None     # cwnd before the last reduction, for undo detection
        self.missed_period = None    # start of a recovery period the stack never entered
        self.late_entered = False    # ... and it has reduced since, inside that period
        # Adapters whose stack applies a loss only inside the ACK that reveals it (ngtcp2)
        # report a provisional snapshot for the loss event (docs/adapters.md).
        self.provisional_loss = loss_applied_with_ack
        # ca-without-epoch: only for a stack whose adapter has reported an epoch in this run
        # (Reno stacks and adapters without an epoch field never do).
        self.reports_epoch = False
        self.k_basis = None          # k-mismatch: candidate cwnd_epoch of a K not judged yet
        self.stretch = None          # ca-off-curve: the CurveStretch being summed
        self.prior_rtt = None        # the RTT values before this ACK's sample (ca-off-curve)
        self.rate_tick_us = rate_tick_us   # ca-off-curve: Profile.ca_rate_tick_us
        # ca-growth-bound over the ACKs of the last smoothed RTT instead of ACK by ACK, for a
        # stack that sets its window from W_cubic(t) (Profile.ca_growth_per): (t, growth, bytes)
        self.ca_growth_per_round_trip = ca_growth_per_round_trip and family == "cubic"
        self.ca_round = deque()
        self.ss_stretch = None       # ss-growth-shortfall: the SlowStartStretch being summed
        self.css_possible = False    # an RTT rise that lets HyStart++'s CSS begin was seen
        # ss-growth-bound, for a stack whose profile says its slow start is a byte counter adding
        # whole datagrams (ss_byte_counter: quiche's bytes_acked_sl): what the counter may still
        # hold from earlier slow-start ACKs that grew by less than they acknowledged (under a
        # datagram).  quiche's own connections send 1,128-byte packets: 1,200 on the second ACK.
        # Any other stack's ACK is bounded by its own bytes (msquic's 3,065 for 2,400 after
        # persistent congestion, conform outage-3s, stays a finding).
        self.ss_byte_counter = ss_byte_counter
        self.ss_carry = 0

    def flag(self, invariant: str, index: int, t: int, detail: str, occurrence=None, onset=None) -> None:
        """One occurrence.  occurrence: a callable returning its Occurrence, for invariants a
        mechanism-checked deviation may explain (called only when one is configured)."""
        if self.occurrences is not None:
            self.occurrences.setdefault(invariant, {}).setdefault(index, (t, detail))
        findings, explained_by = self.findings, ()
        pairs = self.mechanisms.get(invariant)
        if pairs and occurrence is not None:
            occ = occurrence()
            explained_by = tuple(dev for dev, mechanism in pairs if mechanism.explains(occ))
            if explained_by:
                findings = self.explained
                for dev in explained_by:
                    self.first_explained.setdefault(dev, index)
        found = findings.get(invariant)
        if found is None:
            findings[invariant] = Finding(self.stack, invariant, index, t, detail, explained_by=explained_by,
                                          onset_index=onset)
        else:
            found.count += 1
            if explained_by:
                found.explained_by = tuple(dict.fromkeys(found.explained_by + explained_by))

    def check(self, index: int, ev, before, after, truth: Truth) -> None:
        for mechanism in self.observers:
            mechanism.observe(index, ev)
        self.judge_step(index, ev, before, after, truth)
        self.note_own_start(ev, before, after)
        for mechanism in self.observers:
            mechanism.after_step(index, ev, before, after)

    def note_own_start(self, ev, before, after) -> None:
        """Where the stack set its own recovery start (quiche's CUBIC epoch shares the field:
        congestion avoidance sets it to now on an ACK): the microsecond, when it was set there
        by an ACK or a loss (tied_to_own_start), else None."""
        start = after.recovery_start_us
        if start is not None and (before is None or start != before.recovery_start_us):
            self.own_start_tie = start if ev.kind != SENT and start == ev.t else None

    def tied_to_own_start(self, ev) -> bool:
        """The latest packet this loss covers was sent in the microsecond in which an ACK or a
        loss before it set the stack's own recovery start.  Sent after that event, it is after
        the start on any real clock (a stack reads its clock again to send: quiche's
        Instant::now() in recv and in send); on the trace's microseconds it is at the start,
        and a stack comparing sent_time <= start calls it part of the period.  The clock cannot
        place it, so a loss of it is judged in either reading (judge_either_reading), as the
        timeline's own same-microsecond signals are (Truth._signal).  AFL++ stored it as a new
        strict missing-reduction on pristine quiche 0.30.0 (its epoch set by an ACK at
        155,000 us, the packet sent after it in that microsecond lost)."""
        tie = self.own_start_tie
        return tie is not None and bool(ev.packets) and max(p[1] for p in ev.packets) == tie

    def judge_step(self, index: int, ev, before, after, truth: Truth) -> None:
        t, kind = ev.t, ev.kind
        flag = self.flag
        cwnd = after.cwnd
        # K may be negative: RFC 9438 §4.2 eq. 2 is a cube root of (W_max - cwnd_epoch) / C,
        # negative when the window at the start of the stage is above W_max.
        if (_bad_number(cwnd, 1) or _bad_number(after.ssthresh, 1) or _bad_number(after.w_max, 0)
                or _bad_number(after.k_us, -HUGE)):
            flag("numeric-error", index, t, f"snapshot has cwnd={cwnd}, ssthresh={after.ssthresh}, "
                 f"w_max={after.w_max}, K={after.k_us}")
            return
        if after.epoch_start_us is not None:
            self.reports_epoch = True
        if kind == SENT and ev.bytes_in_flight_after + self.mds > cwnd:
            # The window is full: every packet in flight now (packet numbers ascend, so those
            # up to this one) was sent by a cwnd-limited flow, and only such packets show a
            # stuck window (stuck-at-minimum).  RFC 9002 §7.8: "When bytes in flight is smaller
            # than the congestion window and sending is not pacing limited, the congestion
            # window is underutilized. ... When this occurs, the congestion window SHOULD NOT
            # be increased".  Full means no room for one more full-sized datagram, RFC 9002 §7:
            # "An endpoint MUST NOT send a packet if it would cause bytes_in_flight ... to be
            # larger than the congestion window" -- 2 datagrams fill a window of 2.7, not one of
            # 3 (Linux's tcp_is_cwnd_limited, packets_out >= cwnd, in whole segments).  Measured
            # at the send, not at the ACK: a flight sent in one burst and acknowledged packet
            # by packet filled the window although the later ACKs find it half drained.
            self.full_window_pn = ev.packets[0][0]
        if kind == SENT and ev.packets and (self.full_window_pn == ev.packets[0][0] or not ev.packets[0][3]):
            self.limited_pn = ev.packets[0][0]      # growth-while-app-limited: sent_unlimited_since
        if cwnd < self.min_window:
            flag("cwnd-below-minimum", index, t, f"cwnd {cwnd} < minimum window {self.min_window} "
                 f"(2 x {self.mds})")
        future = [f"{name} at t={value} us is {value - t} us after now (t={t} us)"
                  for name, value in (("recovery start", after.recovery_start_us),
                                      ("epoch start", after.epoch_start_us))
                  if value is not None and value > t]
        if future:
            flag("future-recovery-start", index, t, "; ".join(future))
        if kind == PERSISTENT_CONGESTION and cwnd > self.floor:
            flag("persistent-congestion-ignored", index, t,
                 f"cwnd {cwnd} after persistent congestion, minimum window is {self.floor}")
        if before is None:
            return
        if self.time_based and after.k_us != before.k_us:
            # cwnd_epoch is one of the windows around the event that computed K (judge_k).
            self.k_basis = None if after.k_us is None else \
                {w for w in (after.cwnd, after.ssthresh, before.cwnd) if w is not None}
        elif self.time_based and after.k_us is not None and after.w_max != before.w_max:
            # A new W_max with the same K is still a new K: the stack may have computed the
            # same value again (K = 0 both after persistent congestion's reset and at the
            # slow-start exit that sets W_max = cwnd, RFC 9438 §4.8; s2n-quic 0.91.0
            # cubic.rs:416-420 then 354-361 and 859-866).  Its windows join the candidates.
            self.k_basis = (self.k_basis or set()) | \
                {w for w in (after.cwnd, after.ssthresh, before.cwnd) if w is not None}
        base = before.cwnd
        revised = self.last_loss
        if kind == SENT and revised is not None and t - revised[0] <= LOSS_REVISED_US:
            # A loss the adapter reported before the stack had decided it (aioquic: a timer's
            # loss that the probe sent at once shows to be a PTO, which reduces nothing,
            # implementations/aioquic/adapter.py): the send may restore the window from before.
            base = max(base, revised[1].cwnd)
        if kind in (LOST, PERSISTENT_CONGESTION):
            if self.last_loss is None or self.last_loss[0] != t:
                self.last_loss = (t, before)
        elif kind != SENT:
            self.last_loss = None
        if kind != ACKED and cwnd > base and not (
                self.provisional_loss and kind in (LOST, PERSISTENT_CONGESTION)):
            # RFC 9002 grows the window on acknowledgments only (OnPacketsAcked, Appendix
            # B.5): a send, a loss, persistent congestion or an application event that raises
            # it (aioquic 1.7.2's reset to the initial window on a send after 2 s) is not
            # growth any ACK earned.  A provisional loss snapshot (ngtcp2) is not the stack's
            # state yet: the ACK at the same instant is judged instead.
            flag("growth-without-ack", index, t, f"cwnd {before.cwnd} -> {cwnd} on a {_KIND_NAMES.get(kind, kind)} "
                 f"event, {ev.bytes_in_flight} bytes in flight before it",
                 lambda: Occurrence("growth-without-ack", "no-ack", index, t, before, after, [(index, ev)]))
        if kind == ACKED and ev.spurious:
            # RFC 9438 §4.9: an undo restores the window from before the loss; growth
            # across it says nothing about W_cubic(t) after an idle period.
            self.idle_watch = None
        group = self.loss_group
        if group is not None and (t != group["t"] or kind == SENT):
            self.close_loss_group()
            group = None
        if truth.signal or truth.ambiguous or truth.idle_gap > 0 or (kind == ACKED and ev.spurious):
            # ca-off-curve, ss-growth-shortfall and a per-round-trip ca-growth-bound sum growth
            # between such events
            self.stretch = self.ss_stretch = None
            self.ca_round.clear()
        if truth.signal:
            self.post_signal_acked = 0
            self.stuck_cwnd = None
            self.idle_watch = None
            self.recent_acks.clear()
        if kind in (LOST, PERSISTENT_CONGESTION) or (kind == ACKED and group is not None):
            # Stacks detect losses while processing the ACK that reveals them: a loss and
            # the ACK at the same instant are judged together.  Where the loss snapshot
            # is provisional, the ACK's snapshot is the reduced window and growth is
            # measured from the state before the loss -- except after persistent
            # congestion, which collapses the window to the minimum (RFC 9002 §7.6.2)
            # and leaves the stack in slow start: growth counts from the collapse.
            if group is None:
                group = self.loss_group = {"t": t, "before": before, "new": False, "ambiguous": False,
                                           "order": False, "undo": False, "pc": False, "index": index,
                                           "events": []}
            group["events"].append((index, ev))
            group["new"] |= truth.new_event
            group["tied"] = group.get("tied", False) or (kind == LOST and self.tied_to_own_start(ev))
            group["late"] = group.get("late", False) or self.late_entry(truth)
            group["ambiguous"] |= truth.ambiguous
            group["order"] |= truth.order_ambiguous
            group["undo"] |= truth.undo_window
            group["start"] = truth.recovery_start
            group["pc"] |= kind == PERSISTENT_CONGESTION
            if kind == PERSISTENT_CONGESTION:
                group["collapsed"] = after
            if kind != ACKED or self.provisional_loss:
                group["after"] = after
            elif ev.ecn_ce and after.cwnd < group["after"].cwnd:
                # The ACK of that instant carries a CE count of its own and the stack reduced
                # on it: the period's one reduction, in its microsecond (close_loss_group)
                group["ack_after"] = after
            if kind == ACKED:
                self.close_loss_group()
                if not ev.spurious:
                    base = before
                    if self.provisional_loss:
                        base = group.get("collapsed", group["before"])
                    self.check_ack(index, ev, base, after, truth, after.cwnd - base.cwnd)
            return
        grew = cwnd - before.cwnd
        if _rolled_back(before, after, self.reduced_from):
            # The stack undid its last reduction (RFC 9438 §4.9 lets it; quiche does so
            # after a few losses): the window returns to where it was, not growth.  With the
            # reduction it undid the recovery period it had entered: for the stack, a later
            # signal in that period is its first there (judged by depth, as after a
            # missing-reduction: late_entry) and its ACKs are not growth in recovery.
            # quiche 0.26.0's own connection (death-spiral-loopback seed 4, 2026-11-29) was
            # convicted of excess-reduction for reducing on such a loss.
            if truth.recovery_start is not None:
                self.missed_period, self.late_entered = truth.recovery_start, False
            return
        if truth.ambiguous:
            if truth.order_ambiguous and not truth.undo_window:
                self.judge_either_reading(index, t, before, after, [(index, ev)], truth.recovery_start)
        elif truth.new_event:            # an ECN-CE signal on an ACK
            self.judge_reduction(index, t, before, after, True, [(index, ev)])
        elif grew < 0 and self.late_entry(truth):   # an ECN-CE signal in a period the stack missed
            self.late_entered = True
            self.judge_reduction(index, t, before, after, True, [(index, ev)])
        elif grew < 0 and not (kind == ACKED and ev.spurious):
            flag("excess-reduction", index, t, f"cwnd {before.cwnd} -> {cwnd} on no congestion signal",
                 lambda: Occurrence("excess-reduction", "no-signal", index, t, before, after, [(index, ev)]))
        if kind == ACKED and not ev.spurious:
            self.check_ack(index, ev, before, after, truth, grew)
        elif kind == SENT and truth.idle_gap > 0:
            self.watch_idle(ev, before, truth)

    def late_entry(self, truth: Truth) -> bool:
        """This event's congestion signal falls in a recovery period whose start the stack
        skipped (missing-reduction at that start) and in which it has not reduced since: for
        the stack it is the period's first congestion event, so a reduction here is its one
        reduction for the period, judged by depth (β) like any first reduction.  Only the
        first: a second reduction in the period is still excess-reduction."""
        return truth.signal and not self.late_entered and self.missed_period is not None \
            and truth.recovery_start == self.missed_period

    def close_loss_group(self) -> None:
        group, self.loss_group = self.loss_group, None
        either = group is not None and not group["undo"] and not group["pc"] and (
            (group["ambiguous"] and group["order"]) or (group.get("tied") and group["new"] and not group["ambiguous"]))
        if either:
            self.judge_either_reading(group["index"], group["t"], group["before"], group["after"], group["events"],
                                      group["start"])
        if group is None or group["ambiguous"] or group["pc"] or either:
            return   # persistent congestion has its own invariant
        new = group["new"]
        after = group["after"]
        if new and after.cwnd >= group["before"].cwnd and "ack_after" in group:
            # The loss left the window as it was and the ACK closing the group, in the same
            # microsecond, reduced it on its own CE count (picoquic filters an isolated loss in
            # slow start and reacts to the CE): one reduction in the period's first microsecond,
            # whichever signal the stack took for it -- no missing-reduction; its depth is judged.
            # (Without a CE count, a stack whose loss snapshot is final must reduce there.)
            after = group["ack_after"]
        if not new and group["late"] and after.cwnd < group["before"].cwnd:
            new = self.late_entered = True
        self.judge_reduction(group["index"], group["t"], group["before"], after, new, group["events"])

    def judge_either_reading(self, index, t, before, after, events, recovery_start) -> None:
        """A congestion signal that is a new period by packet order and not by send time, or
        the reverse (Truth._signal): keeping the window and reducing it once by beta are
        both right; a reduction deeper than beta is right in neither.  A reduction here is
        the period's one for the late-entry rule; keeping the window leaves the period
        (recovery_start, the send-time reading's) to a later first reduction, judged by
        depth as after a missing-reduction (late_entry)."""
        if after.cwnd >= before.cwnd:
            if before.cwnd > self.floor:
                self.missed_period = recovery_start
                self.late_entered = False
            return
        self.late_entered = True
        self.reduced_from = before.cwnd
        self.judge_below_beta(index, t, before, after, events,
                              " (a signal that starts a new recovery period in one reading of RFC 9002 "
                              "§7.3.2 only: either reading allows one reduction by beta, neither a deeper one)")

    def judge_below_beta(self, index, t, before, after, events, why: str = "") -> None:
        """excess-reduction: a reduction deeper than beta, to above the floor (RFC 9438 §4.6)."""
        if self.floor < after.cwnd < before.cwnd * self.beta - self.mds:
            self.flag("excess-reduction", index, t,
                      f"cwnd {before.cwnd} -> {after.cwnd}, below beta={self.beta} x cwnd{why}",
                      lambda: Occurrence("excess-reduction", "below-beta", index, t, before, after, list(events)))

    def judge_reduction(self, index, t, before, after, new_event: bool, events=()) -> None:
        """RFC 9002 §7.3.2 / RFC 9438 §4.6: one reduction per recovery period, by β.
        events: (index, resolved event) judged together, for mechanism-checked deviations."""
        grew = after.cwnd - before.cwnd
        if grew < 0:
            self.reduced_from = before.cwnd

        def occurrence(invariant, cause):
            return lambda: Occurrence(invariant, cause, index, t, before, after, list(events))
        if new_event:
            if grew < 0:
                self.judge_depth(index, t, before, after, events, occurrence)
                if self.time_based:
                    self.judge_w_max(index, t, before, after, occurrence)
            if before.cwnd > self.floor and grew >= 0:
                self.missed_period = t
                self.late_entered = False
                self.flag("missing-reduction", index, t,
                          f"new congestion event at t={t} (a packet sent after the previous recovery "
                          f"start was lost or CE-marked) but cwnd went {before.cwnd} -> {after.cwnd}",
                          occurrence("missing-reduction", "missing-reduction"))
            elif grew < 0:
                self.judge_below_beta(index, t, before, after, events)
        elif grew < 0:
            self.flag("excess-reduction", index, t,
                      f"cwnd {before.cwnd} -> {after.cwnd} on a loss of a packet sent during the current "
                      f"recovery period", occurrence("excess-reduction", "in-recovery"))

    def judge_depth(self, index, t, before, after, events, occurrence) -> None:
        """shallow-reduction: the lower of the reduced cwnd and ssthresh is above β times the
        larger of the window and the bytes in flight before the event (RFC 9438 §4.6 takes
        flight_size), with one datagram of rounding.  A stack that credits an ACK before it
        runs loss detection on it reduces from the grown window: a mechanism
        (acks-credited-before-losses) says so where its profile documents the order."""
        flight = max((ev.bytes_in_flight for _, ev in events), default=0)
        base = max(before.cwnd, flight)
        reduced = min(after.cwnd, after.ssthresh if after.ssthresh is not None else after.cwnd)
        if reduced > self.beta * base + self.mds:
            self.flag("shallow-reduction", index, t,
                      f"cwnd {before.cwnd} -> {after.cwnd}, ssthresh {after.ssthresh}: above beta={self.beta} "
                      f"x {base} + {self.mds} (the larger of the window and the {flight} bytes in flight)",
                      occurrence("shallow-reduction", "above-beta"))

    def judge_w_max(self, index, t, before, after, occurrence) -> None:
        """w-max-mismatch: on a new congestion event's reduction, W_max is the window before it,
        or 0.85 of it when that window is below the previous W_max (RFC 9438 §4.7), within a
        datagram.  Only for stacks that report W_max, and only where it changed: a stack that
        keeps W_max until the next epoch (aioquic, Linux) is judged when it sets it."""
        if after.w_max is None or after.w_max == before.w_max:
            return
        prior = before.cwnd
        allowed = [prior]
        if before.w_max is not None and prior < before.w_max:
            allowed.append(prior * (1 + self.beta) / 2)
        if any(abs(after.w_max - w) <= self.mds for w in allowed):
            return
        fc = f" or {allowed[1]:.0f} (fast convergence: below the previous W_max {before.w_max:.0f})" if len(allowed) > 1 else ""
        self.flag("w-max-mismatch", index, t,
                  f"W_max {before.w_max} -> {after.w_max:.0f} on a congestion event with cwnd {prior} -> "
                  f"{after.cwnd}: expected {prior}{fc}, within {self.mds} bytes",
                  occurrence("w-max-mismatch", "w-max-mismatch"))

    def judge_k(self, index, t, before, after) -> None:
        """k-mismatch, judged once per K where W_cubic(t) uses it: at the first ACK that finds
        the stack in congestion avoidance and leaves it there, after it computed K (a K computed
        inside an ACK that then reveals a loss is recomputed before use by aioquic; a K left
        stale by a persistent congestion is reset by quinn at the first ACK that finds it in
        avoidance, not at the slow-start ACK that crosses ssthresh).  K must be RFC 9438 Eq. 2's cube root of
        (W_max - cwnd_epoch) / C in segments and seconds, with the W_max of now and, as
        cwnd_epoch, a window around the event that computed K (self.k_basis: the window or
        threshold after it, or the window before it, for a stack that computes K at the first
        ACK of the stage before crediting it).  K = 0 or the negative root when the window is
        at or above W_max (Linux and quiche clamp to 0, the equation gives the root)."""
        candidates, self.k_basis = self.k_basis, None
        if after.w_max is None or not after.w_max > 0 or after.k_us is None:
            return
        k = after.k_us / 1e6
        expected = [math.copysign(abs(after.w_max - w) / self.mds / CUBIC_C, after.w_max - w) for w in candidates]
        expected = [math.copysign(abs(x) ** (1 / 3), x) for x in expected]
        if any(abs(k - e) <= K_TOLERANCE * abs(e) + K_SLACK_S or (e < 0 and k == 0) for e in expected):
            return
        best = min(expected, key=lambda e: abs(k - e))
        self.flag("k-mismatch", index, t,
                  f"K = {k:.4f} s with W_max = {after.w_max:.0f} bytes, but no window the stack had here "
                  f"({', '.join(str(w) for w in sorted(candidates))} bytes) gives it: the closest is "
                  f"{best:.4f} s (RFC 9438 Eq. 2, C = {CUBIC_C}, {self.mds}-byte segments)",
                  lambda: Occurrence("k-mismatch", "k-mismatch", index, t, before, after, []))

    def judge_curve(self, index, ev, before, after, truth, grew) -> None:
        """ca-off-curve: sum, over congestion-avoidance ACKs on one curve, the least and the most
        growth RFC 9438 §4.2-§4.5 allow from the stack's own epoch, K and W_max, and flag a
        window that leaves that band (once per stretch).  An ACK on which the stack set its
        curve (the first of a stage) or left avoidance, or which the trace puts in recovery or
        app-limited, ends the stretch; so does a shrinking window (excess-reduction's to judge,
        and the switch of stacks that set cwnd to W_est)."""
        prior, rtt = self.prior_rtt, ev.rtt
        self.prior_rtt = rtt
        # Snapshot fields 3 and 5-7: phase, epoch_start_us, w_max, k_us (one slice each: this
        # runs at every ACK)
        curve = after[5:8]
        if (after[3] != CONGESTION_AVOIDANCE or before[3] != CONGESTION_AVOIDANCE or None in curve
                or before[5:8] != curve or grew < 0 or truth.ack_in_recovery or truth.limited_now
                or truth.ambiguous or not before.cwnd > 0):
            self.stretch = None
            return
        stretch = self.stretch
        if stretch is None or stretch.curve != curve or stretch.last != before.cwnd:
            self.stretch = CurveStretch(curve, index, after.cwnd, ev.t)
            return   # the first ACK: the time since the last one is unknown
        stretch.last = after.cwnd
        mds, acked, now = self.mds, ev.acked_bytes, ev.t
        epoch, w_max, k_us = curve
        t, k, c = (now - epoch) / 1e6, k_us / 1e6, CUBIC_C * mds   # W_cubic in bytes, RFC 9438 Eq. 1
        # RTT: the smoothed RTT (§4.2), but stacks take min_rtt (quiche, Linux) or the value before
        # this ACK's sample: the largest of them bounds the look-ahead from above, none from below.
        latest, smoothed, min_rtt = rtt[0], rtt[1], rtt[3]
        rtt_hi = latest if latest > smoothed else smoothed
        rtt_lo = min_rtt if 0 < min_rtt < smoothed else smoothed
        if prior is not None:
            rtt_hi = max(rtt_hi, prior[0], prior[1])
            if 0 < prior[1] < rtt_lo:
                rtt_lo = prior[1]
        rtt_hi, rtt_lo = rtt_hi / 1e6, max(rtt_lo, 1) / 1e6
        d = t + rtt_hi - k
        target = c * d * d * d + w_max
        high = stretch.highest
        # §4.4, §4.5: (target - cwnd) / cwnd per segment acknowledged, target clamped to
        # [cwnd, 1.5 cwnd]; §4.3 with α = 1: W_est's growth per window acknowledged or (RFC
        # 8312's closed form) per RTT elapsed
        step = (min(target, 1.5 * high) - high) / high * acked if target > high else 0.0
        if self.rate_tick_us:
            # Linux: bictcp_update computes ca->cnt in whole segments, cnt = cwnd / (bic_target -
            # cwnd) with an integer bic_target (tcp_cubic.c:279-290: rounded up here, an upper
            # bound), at least 2 (:321), and at most once per jiffy (:221-230); tcp_cong_avoid_ai
            # then adds a segment per cnt packets to every ACK of that jiffy, past a target the
            # window reached meanwhile.
            tick = now // self.rate_tick_us
            if tick != stretch.rate_tick:
                window, goal = before.cwnd // mds, math.ceil(target / mds)
                stretch.rate = 1 / max(2, window // (goal - window)) if goal > window else 0.0
                stretch.rate_tick = tick
            step = max(step, stretch.rate * acked)
        reno = mds * max(acked / high, (now - stretch.last_ack_t) / 1e6 / rtt_lo)
        stretch.highest = high + (step if step > reno else reno)
        full = self.window_limited_bytes(ev, before, truth)
        if full:
            low = stretch.lowest
            d = t - k
            floor = c * d * d * d + w_max
            if floor > low:
                # "for each received new ACK" (§4.4): one segment's step per ACK frame, as ngtcp2
                # and s2n-quic read it; per acknowledged segment (Linux, quiche) grows faster
                stretch.lowest = low + (min(floor, 1.5 * low) - low) / low * min(full, mds)
        stretch.acks += 1
        stretch.last_ack_t = now
        start, slack = stretch.start, CURVE_SLACK_DATAGRAMS * mds
        grown = after.cwnd - start
        # A window at or below the target itself is never too high: the shadow nears a moving
        # target ever more slowly, a stack that rounds its target up (Linux's integer bic_target)
        # or its step (cnt = cwnd / (target - cwnd)) gets there sooner.
        most = max((stretch.highest - start) * (1 + CURVE_REL_TOLERANCE), min(target, 1.5 * before.cwnd) - start)
        above = grown > most + slack
        below = grown < (stretch.lowest - start) * (1 - CURVE_REL_TOLERANCE) - slack
        if not (above or below):
            return
        self.stretch = None
        bound = (f"at most {stretch.highest - stretch.start:.0f} (W_cubic(t + {rtt_hi * 1e3:.1f} ms), or W_est "
                 f"with alpha = 1)" if above else
                 f"at least {stretch.lowest - stretch.start:.0f} (W_cubic(t), one segment's step per ACK that "
                 f"found the window full)")
        self.flag("ca-off-curve", index, ev.t,
                  f"{'above' if above else 'below'} its own curve (epoch t={epoch} us, K = {k:.4f} s, W_max = "
                  f"{w_max:.0f}): cwnd grew {stretch.start} -> {after.cwnd} over {stretch.acks} ACKs from event "
                  f"{stretch.first}, {bound}, +-{CURVE_REL_TOLERANCE:.0%} and {slack} bytes",
                  lambda: Occurrence("ca-off-curve", "above" if above else "below", index, ev.t, before,
                                     after, [(index, ev)]), onset=stretch.first)

    def window_limited_bytes(self, ev, before, truth) -> int:
        """The bytes of this ACK a window must grow for (the lower bounds of ca-off-curve and
        ss-growth-shortfall): none unless the window was full when it arrived -- RFC 9002 §7.8,
        "When bytes in flight is smaller than the congestion window and sending is not pacing
        limited, the congestion window is underutilized", and stacks judge that at the ACK
        (quinn's and s2n-quic's app-limited state is the last send's); then those of its packets
        sent after the last congestion signal (an ACK of the flight a persistent congestion
        collapsed says nothing of the new window) and not app-limited."""
        if ev.bytes_in_flight + self.mds <= before.cwnd:
            return 0
        since = truth.last_signal_t
        return sum(p[2] for p in ev.packets if not p[3] and (since is None or p[1] > since))

    def judge_slow_start(self, index, ev, before, after, truth, grew) -> None:
        """ss-growth-shortfall: sum over slow-start ACKs the growth RFC 9002 §7.3.1 asks for (a
        quarter of it once RFC 9406's conservative slow start may have begun) and flag a window
        that falls short of it (once per stretch)."""
        if not self.css_possible:
            latest, min_rtt = ev.rtt[0], ev.rtt[3]
            if min_rtt > 0 and latest >= min_rtt + min(max(min_rtt // 8, CSS_MIN_RTT_THRESH_US),
                                                       CSS_MAX_RTT_THRESH_US):
                self.css_possible = True   # RFC 9406 §4.2: the necessary RTT rise, in some round
        if (not in_slow_start(before) or not in_slow_start(after) or grew < 0 or truth.signal
                or truth.ack_in_recovery or truth.limited_now or truth.ambiguous):
            self.ss_stretch = None
            return
        stretch = self.ss_stretch
        if stretch is None or stretch.last != before.cwnd:
            stretch = self.ss_stretch = SlowStartStretch(index, before.cwnd, before.cwnd)
        stretch.last = after.cwnd
        full = self.window_limited_bytes(ev, before, truth)
        if before.ssthresh is not None:
            full = min(full, before.ssthresh - before.cwnd)   # Linux: min(cwnd + acked, ssthresh)
        stretch.acked += full
        stretch.owed += full / CSS_GROWTH_DIVISOR if self.css_possible else full
        stretch.acks += 1
        grown = after.cwnd - stretch.start
        least = stretch.owed * (1 - SS_REL_TOLERANCE) - SS_SLACK_DATAGRAMS * self.mds
        if grown >= least:
            return
        self.ss_stretch = None
        rule = ("a quarter of them once an RTT rise let RFC 9406's conservative slow start begin"
                if self.css_possible else "all of them")
        self.flag("ss-growth-shortfall", index, ev.t,
                  f"slow start grew cwnd {stretch.start} -> {after.cwnd} over {stretch.acks} ACKs from event "
                  f"{stretch.first}, which acknowledged {stretch.acked} bytes with the window full: at least "
                  f"{max(least, 0):.0f} expected ({rule}, -{SS_REL_TOLERANCE:.0%} and "
                  f"{SS_SLACK_DATAGRAMS * self.mds} bytes)",
                  lambda: Occurrence("ss-growth-shortfall", "ss-growth-shortfall", index, ev.t, before, after,
                                     [(index, ev)]), onset=stretch.first)

    def sent_unlimited_since(self, ev) -> bool:
        """A packet sent since the first one this ACK acknowledges was not app-limited: it
        filled the stack's own window, or the trace does not mark it (self.limited_pn,
        judge_step).  RFC 9438 §5.8: "A flow is application-limited if it is currently
        sending less than what is allowed by the congestion window", and RFC 9002 §7.8 calls
        the window underutilized only "When bytes in flight is smaller than the congestion
        window and sending is not pacing limited".  A stack may judge by the acknowledged
        packets or by its state now (quiche's on_packet_sent sets its flag at each send and
        clears it when bytes in flight reach cwnd; Linux's tcp_is_cwnd_limited looks back
        over the window): growth is convicted only where both readings say app-limited.  A
        mark is the application's word, the window the stack's: a fuzzer marks any send."""
        return bool(ev.packets) and min(p[0] for p in ev.packets) <= self.limited_pn

    def check_ack(self, index, ev, before, after, truth, grew) -> None:
        t, flag = ev.t, self.flag
        acked = ev.acked_bytes
        # A stack that never entered this recovery period (missing-reduction, reported
        # once) grows on its ACKs as a consequence: not a second finding.
        entered = truth.recovery_start != self.missed_period
        if grew > 0 and truth.ack_in_recovery and not truth.ambiguous and entered:
            flag("growth-in-recovery", index, t,
                 f"cwnd {before.cwnd} -> {after.cwnd} on an ACK of packets sent before the recovery "
                 f"start t={truth.recovery_start}",
                 lambda: Occurrence("growth-in-recovery", "growth-in-recovery", index, t, before, after,
                                    [(index, ev)]))
        elif grew > 0 and truth.ack_app_limited and not truth.ambiguous and not self.sent_unlimited_since(ev):
            flag("growth-while-app-limited", index, t,
                 f"cwnd {before.cwnd} -> {after.cwnd} on an ACK of packets sent while app-limited",
                 lambda: Occurrence("growth-while-app-limited", "growth-while-app-limited", index, t, before,
                                    after, [(index, ev)]))
        slow_start = in_slow_start(before)
        if slow_start and grew > acked + self.ss_carry:
            flag("ss-growth-bound", index, t, f"slow start grew cwnd by {grew} for {acked} bytes acknowledged "
                 f"(and at most {self.ss_carry} left from earlier ACKs)",
                 lambda: Occurrence("ss-growth-bound", "ss-growth-bound", index, t, before, after,
                                    [(index, ev)]))
        if slow_start:       # a counter keeps its bytes across phases (quiche's bytes_acked_sl)
            # ... and gathers them only where slow start could grow: not on an app-limited ACK or
            # one in recovery (quiche returns before counting), nor on the ACK that ends slow
            # start (the window capped at ssthresh is not bytes held back).
            counts = in_slow_start(after) and not (truth.ack_app_limited or truth.ack_in_recovery)
            carried = self.ss_carry + (acked if counts else 0) - grew
            self.ss_carry = min(self.mds - 1, max(0, carried)) if self.ss_byte_counter else 0
        if slow_start:
            self.ca_round.clear()
        else:
            self.judge_ca_growth(index, ev, grew, acked)
        if (self.k_basis and before.phase == CONGESTION_AVOIDANCE and after.phase == CONGESTION_AVOIDANCE
                and not (self.reports_epoch and after.epoch_start_us is None)):
            # A stack that reports its epoch and has none yet does not use K (W_cubic(t) needs
            # t_epoch): the K is judged at the ACK that starts the epoch (aioquic 1.7.2 after
            # persistent congestion sets W_max on an ACK and K at the next one).
            self.judge_k(index, t, before, after)
        if self.time_based:
            self.judge_curve(index, ev, before, after, truth, grew)
        self.judge_slow_start(index, ev, before, after, truth, grew)
        if (grew > 0 and self.time_based and self.reports_epoch and before.phase == CONGESTION_AVOIDANCE
                and after.epoch_start_us is None):
            flag("ca-without-epoch", index, t,
                 f"congestion avoidance grew cwnd {before.cwnd} -> {after.cwnd} on an ACK while the stack "
                 f"reports no epoch (t_epoch unset, RFC 9438 §4.2: t = t_current - t_epoch)")
        # stuck-at-minimum: count acknowledged packets sent after the last signal while the
        # window sits near the floor without growing at all -- only packets of a full window
        # (self.full_window_pn, set in judge_step): a window the sender does not fill is not stuck.
        if after.cwnd > self.near_floor or (self.stuck_cwnd is not None and after.cwnd > self.stuck_cwnd):
            self.post_signal_acked = 0
            self.stuck_cwnd = None
        else:
            since = truth.last_signal_t
            counted = sum(1 for p in ev.packets if not p[3] and p[0] <= self.full_window_pn
                          and (since is None or p[1] > since))
            if self.post_signal_acked == 0:
                self.stuck_cwnd = after.cwnd
                self.stuck_rtts = 0.0
            self.post_signal_acked += counted
            srtt = ev.rtt[1] if ev.rtt and ev.rtt[1] else None
            if counted and srtt and self.post_signal_acked > counted:
                # Round trips spent pinned, counted ACK by ACK in the smoothed RTT of the
                # moment (a path whose RTT changes is measured in its own round trips).
                self.stuck_rtts += (t - self.stuck_last_t) / srtt
            if counted:
                if self.post_signal_acked == counted:
                    self.stuck_first_t = t
                self.stuck_last_t = t
            if self.post_signal_acked >= STUCK_PACKETS and self.stuck_rtts >= STUCK_ROUND_TRIPS \
                    and t - self.stuck_first_t >= STUCK_MIN_US:
                flag("stuck-at-minimum", index, t,
                     f"cwnd stays at or near the minimum ({after.cwnd} bytes, floor {self.floor}) for "
                     f"{self.stuck_rtts:.0f} round trips, although {self.post_signal_acked} "
                     f"packets sent after the last congestion signal (t={since}) were acknowledged")
        if self.time_based:
            eligible = 0 if truth.ack_in_recovery or truth.ack_app_limited else acked
            self.track_idle_growth(index, ev, before, after, eligible)

    def judge_ca_growth(self, index, ev, grew, acked) -> None:
        """ca-growth-bound: target <= 1.5 cwnd (RFC 9438 §4.2) and cwnd += (target - cwnd) / cwnd
        per new ACK (§4.4, §4.5) let one acknowledged byte grow the window by half a byte at
        most.  Judged ACK by ACK; for a stack that sets its window from W_cubic(t) on every ACK
        (picoquic) the growth follows time, so an ACK after a gap in the ACK clock carries the
        growth of the whole gap: there the bound holds over the ACKs of the last smoothed RTT
        (the 1.5x per round trip the rule implies) -- still per ACK after an idle period or a
        congestion signal, which empty that round."""
        bound = acked / 2 + self.mds
        if not self.ca_growth_per_round_trip:
            if grew > bound:
                self.flag("ca-growth-bound", index, ev.t,
                          f"congestion avoidance grew cwnd by {grew} for {acked} bytes acknowledged "
                          f"(at most {acked // 2} + {self.mds})")
            return
        srtt = ev.rtt[1] if ev.rtt and ev.rtt[1] else 0
        window = self.ca_round
        window.append((ev.t, max(grew, 0), acked))
        while window and window[0][0] < ev.t - srtt:
            window.popleft()
        if grew <= bound:
            return
        round_grew, round_acked = sum(w[1] for w in window), sum(w[2] for w in window)
        if round_grew > round_acked / 2 + self.mds:
            self.flag("ca-growth-bound", index, ev.t,
                      f"congestion avoidance grew cwnd by {round_grew} for {round_acked} bytes acknowledged "
                      f"by the {len(window)} ACK(s) of the last smoothed round trip ({srtt} us; at most "
                      f"{round_acked // 2} + {self.mds}: the stack sets its window from W_cubic(t), judged "
                      "per round trip)")

    # -- idle-inflation: compare the window's growth per acknowledged byte in the
    #    round trip after an idle period with the round trip before it.  With t
    #    excluding idle, the curve continues where it stopped and the two rates
    #    match; with idle counted, W_cubic(t) jumped and the rate approaches the
    #    0.5 per byte ceiling.  Only a pre-idle round trip that was a real
    #    congestion-avoidance round (at least half a window acknowledged outside
    #    recovery, not app-limited) is a fair reference.
    def track_idle_growth(self, index, ev, before, after, eligible_bytes) -> None:
        t, srtt = ev.t, max(ev.rtt[1], 1)
        recent = self.recent_acks
        recent.append((t, before.cwnd, after.cwnd, eligible_bytes))
        while recent and recent[0][0] < t - srtt:
            recent.popleft()
        watch = self.idle_watch
        if watch is None:
            return
        if t > watch["until"]:
            self.finish_idle_watch()
        elif in_slow_start(after):
            # The stack restarted after the idle (aioquic's reset to its initial window; RFC
            # 9002 §7.8: "A sender MAY implement alternative mechanisms to update its congestion
            # window after periods of underutilization"): W_cubic(t) is not in play, and slow
            # start's growth is ss-growth-bound's to judge, not measured from the old window.
            self.idle_watch = None
        else:
            watch["max_cwnd"] = max(watch["max_cwnd"], after.cwnd)
            watch["acked"] += eligible_bytes
            watch["last"] = (index, t)
            if watch["first"] is None:
                watch["first"] = index

    def watch_idle(self, ev, before, truth) -> None:
        srtt = ev.rtt[1]
        in_avoidance = not in_slow_start(before)
        recent = self.recent_acks
        pre_acked = sum(a[3] for a in recent)
        if truth.idle_gap < max(srtt, 1) or not in_avoidance or pre_acked < before.cwnd / 2:
            recent.clear()
            return
        pre_growth = max(0, recent[-1][2] - recent[0][1])
        self.idle_watch = {"until": ev.t + 2 * srtt, "base": before.cwnd, "pre_rate": pre_growth / pre_acked,
                           "max_cwnd": before.cwnd, "acked": 0, "gap": truth.idle_gap, "last": None,
                           "first": None}
        recent.clear()

    def finish_idle_watch(self) -> None:
        watch, self.idle_watch = self.idle_watch, None
        if watch is None or watch["last"] is None or watch["acked"] == 0:
            return
        growth = watch["max_cwnd"] - watch["base"]
        rate = growth / watch["acked"]
        # The Reno-friendly region (RFC 9438 §4.3) may grow up to one datagram per
        # window acknowledged whatever t is: that rate is always allowed.
        reno_rate = self.mds / watch["base"]
        if growth > 2 * self.mds and rate > 2 * max(watch["pre_rate"], reno_rate) + 0.05:
            index, t = watch["last"]
            self.flag("idle-inflation", index, t,
                      f"after {watch['gap']} us idle, the first round trip grew cwnd {watch['base']} -> "
                      f"{watch['max_cwnd']}: {rate:.3f} bytes per byte acknowledged, against "
                      f"{watch['pre_rate']:.3f} in the round trip before the idle period",
                      onset=watch["first"])

    def finish(self) -> list:
        """The findings: one per invariant.  An invariant with occurrences no mechanism explained
        is reported at the first of those (the explained ones are counted in its detail); one
        whose every occurrence was explained comes back with explained_by set
        (profiles.judge makes it a deviation)."""
        self.close_loss_group()
        self.finish_idle_watch()
        out = list(self.findings.values())
        for invariant, explained in self.explained.items():
            found = self.findings.get(invariant)
            if found is None:
                out.append(explained)
            else:
                found.detail += (f"; {explained.count} other occurrence(s) explained by the observed "
                                 f"mechanism of {', '.join(explained.explained_by)}")
        return out

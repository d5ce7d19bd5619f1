"""Reachability: events a real connection's loss detection could produce.

RFC 9002 §7.6.2 sets when a sender establishes persistent congestion; a trace
(or a fuzz input) that declares it otherwise feeds a stack a state its own
connection never reaches.  The trace validator (ccdiff/trace.py) and the fuzz
decoders (ccdiff/encoding.py, fuzz/driver/fz_decode.c) share these rules.
"""
from __future__ import annotations

K_GRANULARITY_US = 1_000                 # RFC 9002 §6.1.2: kGranularity, 1 ms
K_PERSISTENT_CONGESTION_THRESHOLD = 3    # RFC 9002 §7.6.1: RECOMMENDED value
DEFAULT_MAX_ACK_DELAY_US = 25_000        # RFC 9000 §18.2: max_ack_delay default, 25 ms


def persistent_congestion_duration_us(smoothed_us: int, rttvar_us: int, max_ack_delay_us: int) -> int:
    """RFC 9002 §7.6.1: (smoothed_rtt + max(4*rttvar, kGranularity) + max_ack_delay) * threshold."""
    return (smoothed_us + max(4 * rttvar_us, K_GRANULARITY_US) + max_ack_delay_us) \
        * K_PERSISTENT_CONGESTION_THRESHOLD


def persistent_congestion_failure(lost, batch_pns, first_sample_t, smoothed_us: int, rttvar_us: int,
                                  max_ack_delay_us: int, acked_between) -> str | None:
    """Why RFC 9002 §7.6.2 does not let this loss establish persistent congestion, or None.

    lost: every packet declared lost so far and not acknowledged since, (pn, sent_us)
    ascending, including batch_pns, the packets this loss detection just declared.
    The two packets of §7.6.2 may come from earlier losses, but one of them is new
    (otherwise the earlier loss already established it).
    first_sample_t: when the first RTT sample was taken, None if never.
    acked_between(lo, hi): whether a packet with lo < pn < hi has been acknowledged.
    """
    if first_sample_t is None:
        return "no RTT sample yet (RFC 9002 §7.6.2: a prior RTT sample must exist)"
    # §7.6.2 and Appendix B.8: only packets sent after the first RTT sample count.
    after_sample = [p for p in lost if p[1] > first_sample_t]
    if len(after_sample) < 2 or not any(p[0] in batch_pns for p in after_sample):
        return (f"fewer than two lost packets, one of them just declared, were sent after the first "
                f"RTT sample (t={first_sample_t}); RFC 9002 §7.6.2 needs two")
    duration = persistent_congestion_duration_us(smoothed_us, rttvar_us, max_ack_delay_us)
    longest, run_start, split = 0, after_sample[0], False
    for prev, packet in zip(after_sample, after_sample[1:]):
        if acked_between(prev[0], packet[0]):
            run_start, split = packet, True   # a span may not contain an acknowledged packet
        elif packet[0] in batch_pns:
            longest = max(longest, packet[1] - run_start[1])
    if longest > duration:
        return None
    if split:
        return (f"acknowledged packets split the lost packets {after_sample[0][0]}..{after_sample[-1][0]}; "
                f"the longest span with nothing acknowledged, ending at a packet just declared lost, "
                f"is {longest} us, not more than the persistent congestion duration {duration} us "
                f"(RFC 9002 §7.6.2)")
    return (f"the lost packets' send times span {longest} us, not more than the persistent "
            f"congestion duration {duration} us = (smoothed_rtt {smoothed_us} + max(4*rttvar {rttvar_us}, "
            f"kGranularity {K_GRANULARITY_US}) + max_ack_delay {max_ack_delay_us}) * "
            f"{K_PERSISTENT_CONGESTION_THRESHOLD} (RFC 9002 §7.6.1, §7.6.2)")


def pto_period_us(smoothed_us: int, rttvar_us: int, max_ack_delay_us: int) -> int:
    """RFC 9002 §6.2.1: PTO = smoothed_rtt + max(4*rttvar, kGranularity) + max_ack_delay."""
    return smoothed_us + max(4 * rttvar_us, K_GRANULARITY_US) + max_ack_delay_us


PTO_EXPIRES = "the PTO timer expires at t="   # pto_failure's words; fuzzing/strictify.py reads the time


def pto_failure(now_us: int, deadline_us: int | None, last_send_us: int, outstanding: int) -> str | None:
    """Why a connection would not reach now_us without having sent a probe, or None.

    deadline_us: when the PTO timer armed at the last send expires (RFC 9002 Appendix A.8,
    the period doubled by every probe already sent, §6.2.1), None with nothing in flight.
    Then "a sender MUST send at least one ack-eliciting packet in the packet number space
    as a probe" (§6.2.4), whatever its window (§7.5).  An event later than the deadline,
    with nothing sent in between, skips the probe the connection sends at the deadline.
    Timers fire late by up to kGranularity (RFC 9002 §6.1.2), so that much slack is allowed.
    """
    if deadline_us is None or now_us <= deadline_us + K_GRANULARITY_US:
        return None
    return (f"{outstanding} packet(s) in flight and nothing sent since t={last_send_us}: {PTO_EXPIRES}"
            f"{deadline_us}, {now_us - deadline_us} us before this event, and the "
            f"sender must send a probe then (RFC 9002 §6.2.1, §6.2.4)")


K_PACKET_THRESHOLD = 3                   # RFC 9002 §6.1.1: RECOMMENDED initial value
K_TIME_THRESHOLD = (9, 8)                # RFC 9002 §6.1.2: kTimeThreshold 9/8


def loss_delay_us(smoothed_us: int, latest_us: int) -> int:
    """RFC 9002 §6.1.2: max(kTimeThreshold * max(smoothed_rtt, latest_rtt), kGranularity)."""
    num, den = K_TIME_THRESHOLD
    return max(num * max(smoothed_us, latest_us) // den, K_GRANULARITY_US)


def loss_detection_failure(pn: int, sent_us: int, now_us: int, largest_acked: int,
                           smoothed_us: int, latest_us: int) -> str | None:
    """Why RFC 9002 §6.1 would not declare this packet lost at now_us, or None.

    Lost when sent before an acknowledged packet and either kPacketThreshold packets
    before the largest acknowledged or sent at least the loss delay ago (Appendix A.10).
    """
    if largest_acked < pn:
        return (f"lost packet {pn} was not sent before an acknowledged packet "
                f"(largest acknowledged {'none' if largest_acked < 0 else largest_acked}; RFC 9002 §6.1)")
    if largest_acked >= pn + K_PACKET_THRESHOLD:
        return None
    delay = loss_delay_us(smoothed_us, latest_us)
    if sent_us <= now_us - delay:
        return None
    return (f"lost packet {pn} is {largest_acked - pn} packets before the largest acknowledged "
            f"{largest_acked} (kPacketThreshold {K_PACKET_THRESHOLD}) and was sent {now_us - sent_us} us "
            f"before, less than 9/8 x max(smoothed_rtt {smoothed_us}, latest_rtt {latest_us}) = {delay} us "
            f"(RFC 9002 §6.1)")

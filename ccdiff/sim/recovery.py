"""RFC 9002 §6 loss detection and §7.6 persistent congestion, shared by every controller.

The simulator's sender runs this one implementation whatever controller it
drives, so two runs differ only by their controllers.  Integer microseconds;
the RTT estimator is ccdiff.rtt.Rtt, the same arithmetic the ledger uses.

    ld = LossDetection(initial_rtt_us=333_000, max_ack_delay_us=25_000)
    ld.on_rtt_sample(latest_rtt_us, ack_delay_us, now)
    lost = ld.detect(now, in_flight, largest_acked, skip=acked_now)   # [(pn, sent, bytes, al), ...]
"""
from __future__ import annotations

from ..rtt import Rtt

PACKET_THRESHOLD = 3          # RFC 9002 §6.1.1 kPacketThreshold
TIME_THRESHOLD = (9, 8)       # RFC 9002 §6.1.2 kTimeThreshold = 9/8
GRANULARITY_US = 1_000        # RFC 9002 §6.1.2 kGranularity = 1 ms
PERSISTENT_CONGESTION_THRESHOLD = 3  # RFC 9002 §7.6.1 kPersistentCongestionThreshold


class LossDetection:
    __slots__ = ("rtt", "max_ack_delay", "largest_acked", "loss_time", "pto_count",
                 "first_rtt_sample_t")

    def __init__(self, initial_rtt_us: int, max_ack_delay_us: int):
        self.rtt = Rtt(initial_rtt_us)
        self.max_ack_delay = max_ack_delay_us
        self.largest_acked = -1
        self.loss_time = None          # earliest time a packet becomes lost by the time threshold
        self.pto_count = 0
        self.first_rtt_sample_t = None

    def on_rtt_sample(self, latest_us: int, ack_delay_us: int, now: int) -> None:
        # RFC 9002 §5.3: ack_delay is capped at max_ack_delay once the handshake is confirmed.
        self.rtt.update(latest_us, min(ack_delay_us, self.max_ack_delay))
        if self.first_rtt_sample_t is None:
            self.first_rtt_sample_t = now

    def loss_delay(self) -> int:
        """RFC 9002 §6.1.2: max(kTimeThreshold * max(smoothed_rtt, latest_rtt), kGranularity)."""
        rtt = self.rtt
        num, den = TIME_THRESHOLD
        return max(num * max(rtt.latest, rtt.smoothed) // den, GRANULARITY_US)

    def pto_period(self) -> int:
        """RFC 9002 §6.2.1: smoothed_rtt + max(4 rttvar, kGranularity) + max_ack_delay."""
        rtt = self.rtt
        return rtt.smoothed + max(4 * rtt.rttvar, GRANULARITY_US) + self.max_ack_delay

    def detect(self, now: int, in_flight: dict, skip=()) -> list:
        """RFC 9002 A.10 DetectAndRemoveLostPackets over the packets in flight.

        in_flight maps pn -> (pn, sent_us, bytes, app_limited) in ascending pn
        order (the ledger's); packets in `skip` are acknowledged by the ACK
        being processed.  Sets loss_time; returns the lost packets, ascending.
        """
        self.loss_time = None
        largest = self.largest_acked
        delay = self.loss_delay()
        lost_send_time = now - delay
        lost = []
        for pn, packet in in_flight.items():
            if pn > largest:
                break
            if pn in skip:
                continue
            if packet[1] <= lost_send_time or largest >= pn + PACKET_THRESHOLD:
                lost.append(packet)
            else:
                # Later packets were sent later and are closer to largest: none is lost yet.
                self.loss_time = packet[1] + delay
                break
        return lost

    def timer(self, last_ack_eliciting_t, bytes_in_flight: int):
        """RFC 9002 A.8 SetLossDetectionTimer (application data space, handshake confirmed)."""
        if self.loss_time is not None:
            return self.loss_time
        if bytes_in_flight == 0 or last_ack_eliciting_t is None:
            return None
        return last_ack_eliciting_t + (self.pto_period() << self.pto_count)

    def persistent_congestion(self, lost: list, status, sent_times) -> bool:
        """RFC 9002 §7.6.2, checked when `lost` (ascending) have just been declared lost.

        status[pn] is 0 in flight, 1 acknowledged, 2 declared lost (including
        `lost`); sent_times[pn] the send time.  Persistent congestion: two lost
        packets, both sent after the first RTT sample, more than the persistent
        congestion duration apart, and no packet sent between them acknowledged.
        """
        first_sample = self.first_rtt_sample_t
        if first_sample is None or not lost:
            return False
        duration = self.pto_period() * PERSISTENT_CONGESTION_THRESHOLD
        newest = lost[-1]
        end_t = newest[1]
        if end_t <= first_sample:
            return False
        pn = newest[0] - 1
        while pn >= 0:
            st = status[pn]
            sent = sent_times[pn]
            if st == 1 or sent <= first_sample:
                return False
            if st == 2 and end_t - sent > duration:
                return True
            pn -= 1
        return False

"""aioquic's mechanisms: the executable form of its profile's mechanism-checked deviations,
aioquic 1.7.2 (src/aioquic/quic/congestion/).

Loaded by ccdiff/mechanisms.py (`registry`), which registers every Mechanism subclass
defined here under its `name`; the shape they share is that module's (docs/adding-a-stack.md)."""
from __future__ import annotations


from ccdiff.ledger import ACKED, LOST, SENT
from ccdiff.mechanisms import Mechanism, Occurrence


class AioquicFlightSizeSsthresh(Mechanism):
    """aioquic 1.7.2 CUBIC's congestion event (on_packets_lost, cubic.py:161-195) takes RFC
    9438 §4.6's equation with flight_size, not cwnd:

        bytes_in_flight -= every lost packet's size
        ssthresh = max(int(bytes_in_flight * 0.7), 2 * mds);  cwnd = max(ssthresh, 2 * mds)

    and runs after the ACK's packets left the flight (QuicPacketRecovery.on_ack_received acks
    before it detects losses, recovery.py:286, 335).  With less in flight than the window the
    reduction goes below beta x cwnd.  Explained only where the new window is the rule's value
    for the flight the harness counted around the congestion event (after the loss and the ACK
    that revealed it; before the next send when the loss timer committed it) and the stack's
    recovery start moved to the loss's instant: any other depth (a beta of 0.5) is not.
    """
    name = "aioquic-flight-size-ssthresh"
    invariants = frozenset({"excess-reduction"})
    rule = "src/aioquic/quic/congestion/cubic.py:161-192 (aioquic 1.7.2)"
    families = ("cubic",)

    def explains(self, occ: Occurrence) -> bool:
        after, before = occ.after, occ.before
        if occ.cause != "below-beta" or after.ssthresh is None or after.ssthresh != after.cwnd:
            return False
        losses = [ev.t for _, ev in occ.events if ev.kind == LOST]
        if after.recovery_start_us is None or after.recovery_start_us == before.recovery_start_us \
                or (losses and after.recovery_start_us not in losses):
            return False
        flights = {f for _, ev in occ.events for f in (ev.bytes_in_flight, ev.bytes_in_flight_after)}
        return any(after.cwnd == max(int(f * 0.7), 2 * self.mds) for f in flights)


class AioquicIdleReset(Mechanism):
    """aioquic 1.7.2 CUBIC's only idle rule (on_packet_sent, cubic.py:149-155): a send at
    least K_CUBIC_MAX_IDLE_TIME = 2 s after last_ack -- the SEND time of the last packet
    on_packet_acked saw (cubic.py:72; the ACK's packets in ascending order,
    recovery.py:275-288) -- calls reset() (cubic.py:58-68): cwnd = 10 x mds, ssthresh None,
    W_max = cwnd, K = 0.  Upstream's intent is its comment, cubic.py:16: "reset the cwnd after
    2 seconds of inactivity", and RFC 9002 §7.8 lets any sender do so: "A sender MAY
    implement alternative mechanisms to update its congestion window after periods of
    underutilization".  So a reset is explained where there was such a period: nothing in
    flight at the send, and no send and no ACK before it for at least a round trip of the
    last acknowledged packet (its ACK's arrival less its send time) -- the pipe empty for a
    whole round trip.  Measured from that packet's send time, aioquic's 2 s leave 2 s less one
    RTT of inactivity (1.92 s on an 80 ms path: aioquic's own connection, `ccdiff confirm`,
    2026-11-29); a maintainer would rightly answer that §7.8's MAY covers it, so it is this
    deviation, not a bug report.  The same code also fires with bytes in flight (an outage
    of 2 s and its PTO probes: a window of 462 kB cut to 12 kB with no congestion signal, no
    underutilization) and, on a path whose RTT is 2 s or more, on the send right after every
    ACK (no period at all): both stay violations -- aioquic's bug, not its intent.  A reset
    that raises the window is growth-without-ack, which nothing here explains.
    """
    name = "aioquic-idle-reset"
    invariants = frozenset({"excess-reduction"})
    rule = "src/aioquic/quic/congestion/cubic.py:16, 58-72, 149-155 (aioquic 1.7.2); RFC 9002 §7.8"
    families = ("cubic",)
    IDLE_US = 2_000_000

    def __init__(self, max_datagram_size: int):
        super().__init__(max_datagram_size)
        self.last_ack_sent = None    # aioquic's last_ack: the send time of the last packet acked
        self.last_ack_rtt = None     # ... and that packet's round trip (its ACK's arrival - send)
        self.last_activity = None    # the later of the last ACK's arrival and the last send
        self.inactive = {}           # index of the latest send -> (nothing in flight, idle us)

    def observe(self, index: int, ev) -> None:
        if ev.kind == SENT:
            idle = None if self.last_activity is None else ev.t - self.last_activity
            self.inactive = {index: (ev.bytes_in_flight == 0, idle)}
            self.last_activity = ev.t
        if ev.kind == ACKED and ev.packets:
            self.last_ack_sent = max(ev.packets)[1]      # the largest newly acked pn's send time
            self.last_ack_rtt = ev.t - self.last_ack_sent
            self.last_activity = ev.t

    def explains(self, occ: Occurrence) -> bool:
        after = occ.after
        if occ.cause != "no-signal" or self.last_ack_sent is None:
            return False
        reset = (after.cwnd == 10 * self.mds and after.ssthresh is None and after.w_max == 10 * self.mds
                 and after.k_us == 0 and after.epoch_start_us is None)
        if not reset:
            return False
        for index, ev in occ.events:
            if ev.kind != SENT or ev.t - self.last_ack_sent < self.IDLE_US - 1:
                continue                                   # not aioquic's rule at all
            empty, idle = self.inactive.get(index, (False, None))
            if empty and idle is not None and idle >= max(self.last_ack_rtt, 1):
                return True                                # a round trip of an empty pipe: §7.8
        return False


class AioquicRenoFriendlySwitch(Mechanism):
    """aioquic 1.7.2 CUBIC sets cwnd = W_est whenever W_cubic(t) < W_est (cubic.py:124-127),
    even when cwnd had climbed above W_est towards the target W_cubic(t + rtt)
    (cubic.py:113-147): on the ACK where W_est overtakes W_cubic(t) the window drops a little,
    with no congestion signal.  W_cubic(t) = int((0.4 (t - K)^3 + W_max / mds) x mds)
    (cubic.py:47-50) from the snapshot's W_max, K and epoch.  Explained only where the new
    window is above W_cubic(t) (the Reno-friendly branch ran) and at most the ACK's W_est
    increments above it (W_est was at most W_cubic(t) before: otherwise cwnd = W_est already;
    each packet adds int(mds x bytes / cwnd), cubic.py:107-111), with the curve unchanged.
    """
    name = "aioquic-reno-friendly-switch"
    invariants = frozenset({"excess-reduction"})
    rule = "src/aioquic/quic/congestion/cubic.py:47-50, 107-147 (aioquic 1.7.2)"
    families = ("cubic",)

    def explains(self, occ: Occurrence) -> bool:
        acks = [ev for _, ev in occ.events if ev.kind == ACKED]
        before, after = occ.before, occ.after
        # "in-recovery": the ACK came with a loss of a packet sent during the recovery
        # period, which aioquic ignores (cubic.py:169), so only the ACK moved the window.
        if occ.cause not in ("no-signal", "in-recovery") or len(acks) != 1 or after.cwnd >= before.cwnd:
            return False
        same_curve = (before.epoch_start_us, before.w_max, before.k_us, before.ssthresh,
                      before.recovery_start_us) == \
            (after.epoch_start_us, after.w_max, after.k_us, after.ssthresh, after.recovery_start_us)
        if not same_curve or after.epoch_start_us is None or after.w_max is None or after.k_us is None:
            return False
        t = (acks[0].t - after.epoch_start_us) / 1e6
        w_cubic = int((0.4 * (t - after.k_us / 1e6) ** 3 + after.w_max / self.mds) * self.mds)
        step = sum(self.mds * p[2] // max(after.cwnd, 1) + 1 for p in acks[0].packets) + 1
        return w_cubic - 1 <= after.cwnd <= w_cubic + step

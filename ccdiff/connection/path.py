"""The scenario's path for real datagrams, both ways, in integer microseconds.

Client to server carries the data: the scenario's bottleneck (rate, drop-tail
queue), its loss schedule, reordering and blackouts.  Server to client carries
ACKs (and the server's handshake): half the base RTT, the scenario's jitter
and ACK aggregation (kept in order, as the closed loop's ACK path), its ACK
loss rate and the same blackouts.  The receiver's ACK policy (ack_every,
max_ack_delay, ack_on_gap) and the sender's PTO probes are the stack's own:
those scenario fields apply to the closed loop only.  Each random choice draws from its own stream, seeded from the
run's seed, so one choice never shifts another's.
"""
from __future__ import annotations

import random

from ..sim.network import Link, LossModel
from ..sim.scenario import Scenario

LOST, QUEUE_DROP = "lost", "queue-drop"


class Path:
    def __init__(self, s: Scenario, seed: int):
        def rng(stream: str) -> random.Random:
            return random.Random(f"ccdiff-connection:{seed}:{stream}")
        self.forward_delay = s.base_rtt_us - s.base_rtt_us // 2
        self.return_delay = s.base_rtt_us // 2
        self.link = Link(s.rate_bytes_per_s, s.queue_bytes, self.forward_delay)
        self.loss = LossModel(s.loss_schedule, s.blackouts, rng("loss"))
        self.s = s
        self._reorder = rng("reorder")
        self._ack_loss = rng("ack-loss")
        self._jitter = rng("jitter")
        self._last_return = 0

    def to_server(self, now: int, size: int):
        """Arrival time at the server, or LOST / QUEUE_DROP."""
        if self.loss.drops(now):
            return LOST
        arrival = self.link.send(now, size)
        if arrival is None:
            return QUEUE_DROP
        s = self.s
        if s.reorder_rate and self._reorder.random() < s.reorder_rate:
            arrival += s.reorder_delay_us
        return arrival

    def to_client(self, now: int):
        """Arrival time at the client, or LOST."""
        s = self.s
        if s.blackouts and self.loss.in_blackout(now):
            return LOST
        if s.ack_loss_rate and self._ack_loss.random() < s.ack_loss_rate:
            return LOST
        arrival = now + self.return_delay
        if s.jitter_us:
            arrival += self._jitter.randrange(s.jitter_us + 1)
        if s.ack_aggregation_us:      # ACKs reach the sender in batches, as in the closed loop
            arrival = -(-arrival // s.ack_aggregation_us) * s.ack_aggregation_us
        # The return path keeps datagrams in order (as the closed loop's ACK path does).
        arrival = max(arrival, self._last_return)
        self._last_return = arrival
        return arrival

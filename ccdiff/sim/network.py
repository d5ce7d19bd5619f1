"""The path: a loss model and a drop-tail bottleneck link, in integer microseconds."""
from __future__ import annotations

import random


class LossModel:
    """Random loss with a piecewise-constant schedule, plus blackouts (everything lost).

    schedule: ((until_us, rate), ...) ascending; the rate of the first step whose
    `until_us` is after now applies, and past the last step there is no loss.
    """

    __slots__ = ("schedule", "blackouts", "rng", "_step", "_until", "_rate")

    def __init__(self, schedule, blackouts, rng: random.Random):
        self.schedule = tuple((int(u), float(r)) for u, r in schedule)
        self.blackouts = tuple((int(a), int(b)) for a, b in blackouts)
        self.rng = rng
        self._step = 0
        self._until, self._rate = self.schedule[0] if self.schedule else (2**62, 0.0)
        if not self.schedule:
            self._step = -1

    def in_blackout(self, now: int) -> bool:
        for lo, hi in self.blackouts:
            if lo <= now < hi:
                return True
        return False

    def rate(self, now: int) -> float:
        # time only moves forward: walk the schedule once
        while now >= self._until:
            self._step += 1
            if 0 <= self._step < len(self.schedule):
                self._until, self._rate = self.schedule[self._step]
            else:
                self._until, self._rate = 2**62, 0.0
        return self._rate

    def drops(self, now: int) -> bool:
        if self.blackouts and self.in_blackout(now):
            return True
        rate = self.rate(now)
        # Draw only while a rate is in force, so a loss-free tail costs nothing.
        return rate > 0.0 and self.rng.random() < rate


class Link:
    """A bottleneck of `rate` bytes/s with a drop-tail queue of `queue_bytes`, then a fixed delay."""

    __slots__ = ("rate", "queue_bytes", "delay", "free_at", "drops")

    def __init__(self, rate_bytes_per_s: int, queue_bytes: int, delay_us: int):
        self.rate = rate_bytes_per_s
        self.queue_bytes = queue_bytes
        self.delay = delay_us
        self.free_at = 0        # when the link finishes serializing what it holds
        self.drops = 0

    def send(self, now: int, size: int):
        """Arrival time at the far end, or None when the queue is full (tail drop)."""
        free_at = self.free_at
        if free_at > now:
            backlog = (free_at - now) * self.rate // 1_000_000
            if backlog + size > self.queue_bytes:
                self.drops += 1
                return None
            start = free_at
        else:
            start = now
        self.free_at = done = start + (size * 1_000_000 + self.rate - 1) // self.rate
        return done + self.delay

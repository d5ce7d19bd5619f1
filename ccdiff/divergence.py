"""trajectory-divergence: the stack's window against its reference oracle's, event by event.

The reference is the stack's family oracle configured with its profile's variants
(profiles.Profile.reference).  Replay (ccdiff/replay.py) and the closed loop
(ccdiff/sim/engine.py) feed both windows after every ACK; `sustain` consecutive ACKs
beyond the profile's relative tolerance make the finding, at the first of them.
"""
from __future__ import annotations

from .invariants import Finding
from .ledger import ACKED


class DivergenceWatch:
    def __init__(self, label: str, reference: str, tolerance: float, sustain: int):
        self.label, self.reference = label, reference
        self.tolerance, self.sustain = tolerance, sustain
        self.streak, self.worst = 0, (0.0, 0, 0)
        self.start = None          # (index, t, cwnd, reference cwnd) where the streak began
        self.finding: Finding | None = None

    def compare(self, index: int, t: int, mine: int, theirs: int) -> bool:
        """One ACK's windows; False once the finding is made (nothing more to compare)."""
        rel = abs(mine - theirs) / max(theirs, 1)
        if rel <= self.tolerance:
            self.streak = 0
            return True
        if self.streak == 0:
            self.start = (index, t, mine, theirs)
        self.streak += 1
        if rel > self.worst[0]:
            self.worst = (rel, mine, theirs)
        if self.streak < self.sustain:
            return True
        start, t0, first_mine, first_theirs = self.start
        rel, worst_mine, worst_theirs = self.worst
        self.finding = Finding(self.label, "trajectory-divergence", start, t0,
                               f"cwnd {first_mine} vs {self.reference} {first_theirs} from this event on for "
                               f"{self.sustain}+ ACKs (tolerance {self.tolerance:.0%}); worst {worst_mine} vs "
                               f"{worst_theirs} ({rel:.0%})")
        return False


class Differential:
    """One closed-loop run's differential (ccdiff/sim/engine.py): the reference oracle steps
    through the same resolved events as the stack -- the events the stack's own connection
    produced, so nothing in them is out of the stack's reach -- and the windows are compared
    after every ACK.  Also records the run's triggers (ccdiff/triggers.py), which decide
    whether a documented deviation may excuse the divergence (profiles.judge)."""

    def __init__(self, label: str, profile, family: str, max_datagram_size: int, initial_rtt_us: int):
        from .stacks import open_controller, resolve
        from .triggers import Triggers
        reference = profile.reference(family)
        self.oracle = open_controller(resolve(reference), max_datagram_size, initial_rtt_us)
        self.watch = DivergenceWatch(label, reference, profile.cwnd_rel_tolerance, profile.sustain_events)
        self.triggers = Triggers()
        self.comparing = True

    def step(self, index: int, ev, before, after, truth) -> None:
        self.triggers.observe(index, ev, before, after, truth)
        if not self.comparing:
            return
        try:
            theirs = self.oracle.step(ev)
        except (ArithmeticError, ValueError):
            self.comparing = False      # the reference cannot go on: nothing more to compare
            return
        if ev.kind == ACKED:
            self.comparing = self.watch.compare(index, ev.t, after.cwnd, theirs.cwnd)

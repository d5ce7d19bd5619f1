"""Per-stack profiles: documented deviations from RFC 9438 and differential tolerances.

implementations/<stack>/profile.toml lists what the stack does differently on
purpose, with code references.  A finding of an invariant a deviation names
in `tolerates` is reported as a deviation, not a violation -- unless the
invariant is an RFC MUST (Invariant.waivable is False), which no profile can
waive.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field

from .errors import SetupError
from .invariants import CATALOG


@dataclass
class Profile:
    stack: str = ""
    cwnd_rel_tolerance: float = 0.25   # |stack - oracle| / oracle before divergence counts
    sustain_events: int = 16           # consecutive ACKs beyond tolerance that make a finding
    min_window_datagrams: int = 2
    ecn: bool = True                   # False: the stack ignores ECN counts (no ECT sent)
    deviations: list = field(default_factory=list)

    def explaining(self, invariant: str) -> list:
        """Deviations that document this invariant's findings for this stack."""
        if not CATALOG[invariant].waivable:
            return []
        return [d for d in self.deviations if invariant in d.get("tolerates", [])]


def load_profile(recipe) -> Profile:
    if recipe is None:
        return Profile()
    path = recipe.folder / "profile.toml"
    if not path.exists():
        return Profile(stack=recipe.name)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SetupError(f"{path}: {exc}") from None
    divergence = data.get("divergence", {})
    deviations = data.get("deviation", [])
    for dev in deviations:
        for inv in dev.get("tolerates", []):
            if inv not in CATALOG:
                raise SetupError(f"{path}: deviation {dev.get('id')!r} tolerates unknown invariant {inv!r}")
    return Profile(stack=data.get("stack", recipe.name),
                   cwnd_rel_tolerance=float(divergence.get("cwnd_rel_tolerance", 0.25)),
                   sustain_events=int(divergence.get("sustain_events", 16)),
                   min_window_datagrams=int(data.get("min_window_datagrams", 2)),
                   ecn=bool(data.get("ecn", True)),
                   deviations=deviations)

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
from .status import validate_known


@dataclass
class Profile:
    stack: str = ""
    cwnd_rel_tolerance: float = 0.25   # |stack - oracle| / oracle before divergence counts
    sustain_events: int = 16           # consecutive ACKs beyond tolerance that make a finding
    min_window_datagrams: int = 2
    ecn: bool = True                   # False: the stack ignores ECN counts (no ECT sent)
    deviations: list = field(default_factory=list)
    known: list = field(default_factory=list)   # [[known]] upstream issues and fixes (ccdiff/status.py)

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
    try:
        known = validate_known(data.get("known", []), str(path), CATALOG)
    except ValueError as exc:
        raise SetupError(str(exc)) from None
    return Profile(stack=data.get("stack", recipe.name),
                   cwnd_rel_tolerance=float(divergence.get("cwnd_rel_tolerance", 0.25)),
                   sustain_events=int(divergence.get("sustain_events", 16)),
                   min_window_datagrams=int(data.get("min_window_datagrams", 2)),
                   ecn=bool(data.get("ecn", True)),
                   deviations=deviations, known=known)


def judge(findings: list, profile: Profile) -> list:
    """Deviation or violation: one rule for replay, matrix, sim and conform.

    A finding of an invariant a documented deviation tolerates is a deviation (never an RFC
    MUST: Profile.explaining).  A trajectory divergence that comes after the run broke an
    RFC rule is that bug's footprint, not a documented deviation: it is a violation that
    "follows" the earlier findings -- only those that happened at or before it (causal
    order).  Returns the findings, in the order given.
    """
    for finding in findings:
        explaining = profile.explaining(finding.invariant)
        if explaining:
            finding.status = "deviation"
            finding.detail += "; documented deviations: " + ", ".join(d["id"] for d in explaining)
    for finding in findings:
        if finding.invariant != "trajectory-divergence":
            continue
        earlier = sorted({f.invariant for f in findings
                          if f.status == "violation" and f.invariant != "trajectory-divergence"
                          and f.event_index <= finding.event_index})
        if earlier:
            finding.status = "violation"
            finding.detail = finding.detail.split("; documented deviations")[0] + \
                f" (follows {', '.join(earlier)})"
    return findings

"""One report per root cause per stack (issue 30 item 7).

A report folder holds one page per (trace, stack, invariant) finding.  Filed as is, one bug
shows up as many reports: aioquic's growth in recovery on six example traces, and a
trajectory divergence that only follows another violation of the same run.  So, among the
violations of a report:

* a trajectory divergence that follows violations of its run (profiles.judge: "(follows X)",
  X's evidence beginning at or before it) is a **consequence**: it is listed on the page of
  the earliest such violation of the same run, and its own page points there;
* the other violations of one stack and one invariant are **occurrences** of one root cause:
  one of them is the **primary** page, which carries the report (finding.md, the minimal
  reproducer, the native test) and lists the others; their pages say where the report is.
  A standalone trajectory divergence is not a rule of its own (any cause may drive the run
  off the oracle's), so its occurrences are grouped per trace, never across traces.

The primary is the occurrence a maintainer can read fastest: one whose status is a bug
report (new, unchecked) before one that is not (lenient, local...), then the shortest trace,
then the finding id: the same findings give the same grouping (reports are byte-identical).
Deviations are not reports and stay one page each.
"""
from __future__ import annotations

from ..profiles import onset
from ..status import followed

DIVERGENCE = "trajectory-divergence"


def assign(views: list) -> None:
    """Sets cause / consequences / primary / occurrences on the report's FindingViews."""
    groups: dict = {}
    for view in views:
        if view.finding.status != "violation":
            continue
        if view.finding.invariant == DIVERGENCE:
            follows = set(followed(view.finding.detail))
            causes = [s for s in view.siblings if s.finding.status == "violation"
                      and s.finding.invariant in follows]
            if causes:
                cause = min(causes, key=lambda s: (onset(s.finding), s.id))
                view.cause = cause
                cause.consequences.append(view)
                continue
            key = (view.label, DIVERGENCE, view.trace_path)
        else:
            key = (view.label, view.finding.invariant)
        groups.setdefault(key, []).append(view)
    for members in groups.values():
        primary = min(members, key=lambda v: (not v.base_status.is_bug_report, len(v.run.trace.events), v.id))
        primary.occurrences = sorted((m for m in members if m is not primary), key=lambda v: v.id)
        for member in primary.occurrences:
            member.primary = primary
    for view in views:
        view.consequences.sort(key=lambda v: v.id)


def role(view) -> str:
    """primary / occurrence / consequence for a violation, "" for a deviation."""
    if view.finding.status != "violation":
        return ""
    if view.cause is not None:
        return "consequence"
    return "occurrence" if view.primary is not None else "primary"


def report_id(view) -> str:
    """The id of the page whose finding.md reports this finding."""
    while view.cause is not None or view.primary is not None:
        view = view.cause if view.cause is not None else view.primary
    return view.id


def totals(views: list) -> dict:
    """Root causes (one report each), their occurrences and the consequences listed on them."""
    violations = [v for v in views if v.finding.status == "violation"]
    return {"root_causes": sum(1 for v in violations if role(v) == "primary"),
            "occurrences": sum(1 for v in violations if role(v) in ("primary", "occurrence")),
            "consequences": sum(1 for v in violations if role(v) == "consequence"),
            "bug_reports": sum(1 for v in violations if role(v) == "primary" and v.status.is_bug_report)}

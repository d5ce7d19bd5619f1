"""Open-loop replay: one trace through several controllers, checked step by step.

    >>> from ccdiff.trace import load_trace
    >>> result = replay(load_trace("examples/death-spiral.jsonl"), ["oracle", "oracle:idle=last-send"])
    >>> [f.invariant for f in result.findings]
    ['future-recovery-start', 'stuck-at-minimum', ...]

The ledger resolves each event once; every controller sees the same resolved
event.  Stacks are compared with the reference oracle of their family (CUBIC
with `oracle`, Reno with `oracle-reno`), which runs hidden if not requested.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import SetupError
from .invariants import Checker, Finding, Truth
from .ledger import Ledger
from .native import AdapterError
from .profiles import Profile, judge, load_profile
from .status import status_of
from .stacks import Target, load_recipes, open_controller, resolve
from .trace import Trace, judge_reachability

REFERENCE = {"cubic": "oracle", "reno": "oracle-reno"}


@dataclass
class Run:
    target: Target
    controller: object
    checker: Checker
    profile: Profile
    snapshots: list = field(default_factory=list)
    error: str | None = None
    hidden: bool = False

    @property
    def label(self) -> str:
        return self.target.label


@dataclass
class ReplayResult:
    trace: Trace
    runs: dict            # label -> Run, in the order requested
    findings: list        # Finding, ordered by stack then event

    @property
    def violations(self) -> list:
        return [f for f in self.findings if f.status == "violation"]


def _open_run(target: Target, trace: Trace, hidden: bool = False) -> Run:
    header = trace.header
    profile = load_profile(target.recipe)
    controller = open_controller(target, header.max_datagram_size, header.initial_rtt_us)
    provisional = bool(target.recipe and target.recipe.loss_applied_with_ack)
    checker = Checker(target.label, header.max_datagram_size, target.family, profile.min_window_datagrams,
                      provisional, mechanisms=profile.mechanisms(header.max_datagram_size, target.family))
    return Run(target, controller, checker, profile, hidden=hidden)


def replay(trace: Trace, specs: list, check: bool = True) -> ReplayResult:
    recipes = load_recipes()
    targets = [resolve(spec, recipes) for spec in specs]
    labels = [t.label for t in targets]
    if len(set(labels)) != len(labels):
        raise SetupError(f"a stack is named twice: {', '.join(labels)}")
    runs = {t.label: _open_run(t, trace) for t in targets}
    for family in sorted({t.family for t in targets if t.kind == "native"}):
        ref = REFERENCE[family]
        if ref not in runs:
            runs[ref] = _open_run(resolve(ref, recipes), trace, hidden=True)
    # Every controller sees the same resolved events, whatever they answer, so the
    # ledger can resolve the whole trace first; remote controllers batch them.
    ledger = Ledger(trace.header)
    truths = {True: Truth(), False: Truth(ecn=False)}   # the trace's timeline with / without ECN
    resolved = [ledger.resolve(event) for event in trace.events]
    active = list(runs.values())
    for run in active:
        if hasattr(run.controller, "prefetch"):
            run.controller.prefetch(resolved)
    for index, ev in enumerate(resolved):
        for truth in truths.values():
            truth.update(ev)
        for run in active:
            if run.error is not None:
                continue
            try:
                snap = run.controller.step(ev)
            except (AdapterError, ArithmeticError, ValueError) as exc:
                run.error = f"event {index}: {exc}"
                run.checker.flag("adapter-error", index, ev.t, str(exc))
                continue
            before = run.snapshots[-1] if run.snapshots else None
            run.snapshots.append(snap)
            if check:
                run.checker.check(index, ev, before, snap, truths[run.profile.ecn])
    findings = []
    for run in runs.values():
        if hasattr(run.controller, "close"):
            run.controller.close()
        if run.hidden:
            continue
        run_findings = run.checker.finish()
        if check and run.target.kind == "native":
            ref = runs[REFERENCE[run.target.family]]
            divergence = compare_trajectories(run, ref, trace)
            if divergence:
                run_findings.append(divergence)
        for finding in run_findings:
            finding.line = trace.line_of(finding.event_index)
        findings.extend(sorted(judge(run_findings, run.profile), key=lambda f: f.event_index))
    visible = {label: run for label, run in runs.items() if not run.hidden}
    judge_reachability(trace)
    return ReplayResult(trace, visible, findings)


def reachability_fields(trace: Trace) -> dict:
    """The trace's strict/lenient label for JSON documents (docs/trace-format.md)."""
    judge_reachability(trace)
    fields = {"reachability": trace.reachability}
    if trace.lenient_reason:
        fields["lenient_reason"] = trace.lenient_reason
    return fields


def finding_dicts(result: ReplayResult) -> list:
    """Findings as JSON; those from a lenient trace say so: a real connection's loss
    detection would not have produced every event they rest on."""
    reachability = judge_reachability(result.trace).reachability
    out = []
    for f in result.findings:
        d = dict(f.to_dict(), reachability="lenient") if reachability == "lenient" else f.to_dict()
        run = result.runs.get(f.stack)
        if run is not None:       # the status line of ccdiff/status.py, the reports' first line
            d["upstream_status"] = status_of(f.status, f.invariant, run.target.version, run.profile.known,
                                             reachability, f.detail).text
        out.append(d)
    return out


def compare_trajectories(run: Run, ref: Run, trace: Trace) -> Finding | None:
    """trajectory-divergence: cwnd beyond the profile's tolerance for a sustained stretch of ACKs."""
    tolerance, sustain = run.profile.cwnd_rel_tolerance, run.profile.sustain_events
    streak_start, streak, worst = None, 0, (0.0, 0, 0)
    events = trace.events
    for index, (mine, theirs) in enumerate(zip(run.snapshots, ref.snapshots)):
        if type(events[index]).__name__ != "Ack":
            continue
        rel = abs(mine.cwnd - theirs.cwnd) / max(theirs.cwnd, 1)
        if rel > tolerance:
            if streak == 0:
                streak_start = index
            streak += 1
            if rel > worst[0]:
                worst = (rel, mine.cwnd, theirs.cwnd)
            if streak >= sustain:
                first = run.snapshots[streak_start], ref.snapshots[streak_start]
                return Finding(run.label, "trajectory-divergence", streak_start, events[streak_start].t,
                               f"cwnd {first[0].cwnd} vs oracle {first[1].cwnd} from this event on for "
                               f"{sustain}+ ACKs (tolerance {tolerance:.0%}); worst {worst[1]} vs "
                               f"{worst[2]} ({worst[0]:.0%})")
        else:
            streak = 0
    return None

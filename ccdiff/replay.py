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
from functools import partial
from itertools import islice

from .divergence import DivergenceWatch
from .errors import SetupError
from .invariants import Checker, Finding, Truth
from .ledger import ACKED, Ledger
from .native import AdapterCrash, AdapterError
from .profiles import Profile, judge, load_profile
from .remote import BATCH
from .status import FixReplay, fixes_claimed, status_of, version_key
from .stacks import Target, load_recipes, open_controller, resolve
from .trace import Trace, judge_reachability
from .triggers import Triggers

REFERENCE = {"cubic": "oracle", "reno": "oracle-reno"}
PREFETCH = BATCH   # a remote request's size: the same requests as when the whole run was prefetched


@dataclass
class Run:
    target: Target
    controller: object
    checker: Checker
    profile: Profile
    # Every snapshot, for reports and plots; None when replay keeps only the window the
    # checks need (last, steps), so a trace of any length replays in bounded memory.
    snapshots: list | None = field(default_factory=list)
    error: str | None = None
    hidden: bool = False
    triggers: Triggers = field(default_factory=Triggers)   # for dynamic divergence waivers
    last: object = None       # the latest snapshot (Snapshot), None before the first
    steps: int = 0            # snapshots taken: events stepped without an error
    # fixed_in -> FixReplay (status.status_of), computed the first time a status needs it
    # (fixes()): triage and minimization replay thousands of times and ask for no status.
    fix_replays: dict | None = None
    fix_check: object = None          # () -> that dict, set by replay() where a fix may be checked

    @property
    def label(self) -> str:
        return self.target.label

    def fixes(self) -> dict | None:
        """The run's fix replays (replay.fix_replays), made once, on first use."""
        if self.fix_replays is None and self.fix_check is not None:
            self.fix_replays, self.fix_check = self.fix_check(), None
        return self.fix_replays


@dataclass
class ReplayResult:
    trace: Trace
    runs: dict            # label -> Run, in the order requested
    findings: list        # Finding, ordered by stack then event
    # compare=[(a, b)]: a's label -> the first event where a's snapshot is not b's (None: none)
    first_difference: dict = field(default_factory=dict)

    @property
    def violations(self) -> list:
        return [f for f in self.findings if f.status == "violation"]


def _open_run(target: Target, trace: Trace, hidden: bool = False) -> Run:
    header = trace.header
    profile = load_profile(target.recipe)
    crash = None
    try:
        controller = open_controller(target, header.max_datagram_size, header.initial_rtt_us, header.max_ack_delay)
    except AdapterCrash as exc:          # an isolated adapter died while opening: its finding
        controller, crash = None, str(exc)
    provisional = bool(target.recipe and target.recipe.loss_applied_with_ack)
    checker = Checker(target.label, header.max_datagram_size, target.family, profile.min_window_datagrams,
                      provisional, mechanisms=profile.mechanisms(header.max_datagram_size, target.family),
                      **profile.checker_options(target.options))
    run = Run(target, controller, checker, profile, hidden=hidden)
    if crash is not None:
        run.error = f"open: {crash}"
        checker.flag("adapter-error", 0, 0, f"open: {crash}")
    return run


def replay(trace: Trace, specs: list, check: bool = True, keep_snapshots: bool = True,
           compare: tuple = (), confirm_fixes: bool = True) -> ReplayResult:
    """trace: a Trace, or a StreamedTrace (ccdiff/trace_stream.py) read from its file as it
    goes; with keep_snapshots False each run keeps its last snapshot only.  compare: pairs
    of labels (candidate, baseline) of the requested stacks whose snapshots are compared
    event by event as the replay goes (ReplayResult.first_difference).  confirm_fixes: a
    finding a [[known]] fix's version bound covers is replayed on that release (fix_replays)."""
    recipes = load_recipes()
    targets = [resolve(spec, recipes) for spec in specs]
    labels = [t.label for t in targets]
    if len(set(labels)) != len(labels):
        raise SetupError(f"a stack is named twice: {', '.join(labels)}")
    runs = {t.label: _open_run(t, trace) for t in targets}
    # Each stack is compared with its family's oracle configured with its profile's variants
    # (its documented deviations, made executable: profiles.Profile.reference).
    references = {run.label: run.profile.reference(run.target.family) for run in list(runs.values())
                  if run.target.kind == "native"}
    for ref in sorted(set(references.values())):
        if ref not in runs:
            runs[ref] = _open_run(resolve(ref, recipes), trace, hidden=True)
    active = list(runs.values())
    if not keep_snapshots:
        for run in active:
            run.snapshots = None
    divergences = {run.label: Divergence(run, runs[references[run.label]]) for run in active
                   if check and not run.hidden and run.target.kind == "native"}
    watching = list(divergences.values())
    first_difference = {a: None for a, _ in compare}
    comparing = [(runs[a], runs[b]) for a, b in compare]
    ledger = Ledger(trace.header)
    truths = {True: Truth(), False: Truth(ecn=False)}   # the trace's timeline with / without ECN
    resolved = map(ledger.resolve, trace.stream())
    remote = [run.controller for run in active if hasattr(run.controller, "prefetch")]
    if remote:
        resolved = _prefetched(resolved, remote, lambda: map(Ledger(trace.header).resolve, trace.stream()))
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
            before, run.last = run.last, snap
            run.steps += 1
            if run.snapshots is not None:
                run.snapshots.append(snap)
            if check:
                truth = truths[run.profile.ecn]
                run.checker.check(index, ev, before, snap, truth)
                run.triggers.observe(index, ev, before, snap, truth)
        if watching:
            watching = [d for d in watching if d.step(index, ev)]
        if comparing:
            comparing = [pair for pair in comparing if not _differs(pair, index, first_difference)]
    findings = []
    strict = judge_reachability(trace).reachability == "strict"   # a lenient finding's status is that
    for run in runs.values():
        if hasattr(run.controller, "close"):
            run.controller.close()
        if run.hidden:
            continue
        run_findings = run.checker.finish()
        if run.label in divergences and divergences[run.label].finding:
            run_findings.append(divergences[run.label].finding)
        for finding in run_findings:
            finding.line = trace.line_of(finding.event_index)
        run.triggers.record_mechanisms(run.checker.first_explained)
        run_findings = sorted(judge(run_findings, run.profile, run.triggers.first), key=lambda f: f.event_index)
        if check and confirm_fixes and strict and run.target.kind == "native":
            run.fix_check = partial(fix_replays, trace, run.target, run.profile, run_findings)
        findings.extend(run_findings)
    visible = {label: run for label, run in runs.items() if not run.hidden}
    return ReplayResult(trace, visible, findings, first_difference)


def fix_replays(trace: Trace, target: Target, profile: Profile, findings: list, replayer=None) -> dict:
    """fixed_in -> FixReplay for each [[known]] fix that would file one of these findings as
    fixed (status.fixes_claimed): the trace replayed on that release, or on the first pinned
    release after it that is built (`make run` builds the pinned ones: quiche 0.30.0 stands
    for 0.26.1), in its default configuration of the same algorithm -- a tuning option such
    as quiche's idle_fix=off would turn the very fix off.  Nothing built: FixReplay("").
    replayer(trace, specs): how to replay (_replay_on_release; triage's probes crashes)."""
    wanted = sorted({v for f in findings for v in fixes_claimed(f.status, f.invariant, target.version,
                                                                profile.known, f.detail)})
    out = {}
    for fixed_in in wanted:
        replays = (_replay_on_release(trace, spec, replayer) for spec in _release_specs(target, fixed_in))
        out[fixed_in] = next((r for r in replays if r is not None), FixReplay(""))
    return out


def _release_specs(target: Target, fixed_in: str):
    """The specs a fix is checked on, in order, as they are asked for (fix_replays stops at
    the first that runs): `fixed_in`, then each later pinned release, of the same algorithm;
    those that cannot run here (not built, not served by the stack's adapter container) left out."""
    from .build import is_current
    from .remote import remote_address
    recipe = target.recipe
    cc = [f"{key}={value}" for key, value in target.options if key == "cc"]
    later = sorted((v for v in recipe.versions if version_key(v) > version_key(fixed_in)), key=version_key)
    return (f"{recipe.name}@{version}" + (":" + ",".join(cc) if cc else "") for version in [fixed_in] + later
            if remote_address(recipe.name) is not None or is_current(recipe, version))


def _replay_on_release(trace: Trace, spec: str, replayer=None) -> FixReplay | None:
    """The trace replayed on one _release_specs spec, or None where it cannot run."""
    try:
        result = replayer(trace, [spec]) if replayer else replay(trace, [spec], keep_snapshots=False,
                                                                 confirm_fixes=False)
    except SetupError:
        return None
    (run,) = result.runs.values()
    if run.error is not None:
        return None
    return FixReplay(spec, frozenset(f.invariant for f in result.violations))


def _differs(pair: tuple, index: int, first_difference: dict) -> bool:
    """True once the pair is decided: the first event where one run stepped and the other
    failed, or their snapshots differ (repr: a NaN field equals itself), is recorded."""
    a, b = pair
    if a.error is not None and b.error is not None:
        return True                        # both stopped: nothing more to compare
    if (a.error is None) != (b.error is None) or repr(a.last) != repr(b.last):
        first_difference[a.label] = index
        return True
    return False


def _prefetched(resolved, controllers: list, history):
    """The resolved events, handed to remote controllers PREFETCH at a time ahead of their
    steps (they batch requests, remote.py), with history() to re-send every earlier one
    (how they name a crash's event): the run is never held whole."""
    while True:
        chunk = list(islice(resolved, PREFETCH))
        if not chunk:
            return
        for controller in controllers:
            controller.prefetch(chunk, history)
        yield from chunk


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
            d["upstream_status"] = upstream_status(run, f, reachability).text
        out.append(d)
    return out


def upstream_status(run: Run, finding, reachability: str):
    """The status line of one finding of a run (ccdiff/status.py): the terminal, the JSON and
    the reports (report/context.py) all ask here."""
    recipe = run.target.recipe
    claimed = fixes_claimed(finding.status, finding.invariant, run.target.version, run.profile.known, finding.detail)
    return status_of(finding.status, finding.invariant, run.target.version, run.profile.known, reachability,
                     finding.detail, run.profile.upstream, stack=recipe.name if recipe else "",
                     release=recipe.default_version if recipe else "",
                     fix_replays=run.fixes() if claimed else None)


class Divergence:
    """A run against its reference run (ccdiff/divergence.py), fed each event as the replay
    goes (step), so no snapshot needs to be kept; compares events both runs stepped without
    an error."""

    def __init__(self, run: Run, ref: Run):
        self.run, self.ref = run, ref
        self.watch = DivergenceWatch(run.label, ref.label, run.profile.cwnd_rel_tolerance,
                                     run.profile.sustain_events)

    @property
    def finding(self) -> Finding | None:
        return self.watch.finding

    def step(self, index: int, ev) -> bool:
        """Compare the runs' snapshots of event index; False once there is nothing more to
        compare (a run stopped at an error, or the finding is made)."""
        run, ref = self.run, self.ref
        if run.steps != index + 1 or ref.steps != index + 1:
            return False
        if ev.kind != ACKED:
            return True
        return self.watch.compare(index, ev.t, run.last.cwnd, ref.last.cwnd)

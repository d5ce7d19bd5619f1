"""What a finding page and a bug report say, computed once per finding.

Everything here is plain data (strings, numbers, lists); the templates only
lay it out.  Sources: the replayed snapshots, the invariant CATALOG (RFC
text), the stack's profile.toml (documented deviations with code references)
and the comments of its stack.toml (known issues of a pinned version).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..provenance import ccdiff_version, link_code, pin, report_to, tree_url
from ..replay import REFERENCE, upstream_status
from ..trace import event_to_dict

WINDOW_EVENTS = 20      # trace lines shown either side of the violation in long traces
INLINE_LINES = 200      # traces up to this many lines are shown whole (fits an issue comment)
SNAPSHOT_FIELDS = ("cwnd", "ssthresh", "bytes_in_flight", "phase", "recovery_start_us",
                   "epoch_start_us", "w_max", "k_us")


def slug(text: str) -> str:
    """A file-name-safe form of a label: letters, digits, '.', '_' and '-' only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "x"


@dataclass
class FindingView:
    id: str
    finding: object            # ccdiff.invariants.Finding
    run: object                # load.TraceRun
    label: str                 # stack label
    target: object             # ccdiff.stacks.Target
    reference: str | None      # label of the oracle it is compared with (None: it is one)
    invariant: object          # ccdiff.invariants.Invariant
    siblings: list = field(default_factory=list)   # other FindingViews of the same run
    # One report per root cause (report/causes.py): the page holding the report of this
    # finding's root cause when it is another occurrence of it, the other occurrences on the
    # primary page, the violation a trajectory divergence follows, and those it follows.
    primary: object = None
    occurrences: list = field(default_factory=list)
    cause: object = None
    consequences: list = field(default_factory=list)

    @property
    def trace_path(self) -> str:
        return self.run.path

    @property
    def stack_run(self):
        return self.run.result.runs[self.label]

    @property
    def base_status(self):
        """new / known upstream / fixed upstream in X / documented deviation / lenient only."""
        return upstream_status(self.stack_run, self.finding, self.run.trace.reachability or "strict")

    @property
    def status(self):
        """base_status, but another occurrence of a root cause that is a bug report is part of
        the primary page's report, not one of its own."""
        status = self.base_status
        if self.primary is not None and status.is_bug_report:
            from ..status import OCCURRENCE, Status
            return Status("occurrence", OCCURRENCE.format(invariant=self.finding.invariant, stack=self.label,
                                                          trace=Path(self.primary.trace_path).name,
                                                          id=self.primary.id))
        return status

    @property
    def oracle_run(self):
        return self.run.result.runs.get(self.reference) if self.reference else None


def reference_of(target) -> str | None:
    if target.kind == "native":
        return REFERENCE[target.family]
    return None


def version_note(target) -> str:
    """ccdiff's note on this version, e.g. quiche 0.26.0's '... (cubic.rs:151-176)'.

    provenance.toml's `note` first: the stack.toml comment cannot be corrected without
    marking the built library stale (build.py hashes stack.toml); it is the fallback."""
    if target.recipe is None:
        return ""
    note = pin(target.recipe, target.version).get("note")
    if note:
        return note
    text = (target.recipe.folder / "stack.toml").read_text()
    match = re.search(r'^version\s*=\s*"%s"\s*#\s*(.+)$' % re.escape(target.version), text, re.M)
    return match.group(1).strip() if match else ""


def _deviation_blocks(target) -> dict:
    """id -> raw text (with comments) of each [[deviation]] of the stack's profile.toml."""
    if target.recipe is None:
        return {}
    path = target.recipe.folder / "profile.toml"
    if not path.exists():
        return {}
    blocks = {}
    for chunk in path.read_text().split("[[deviation]]")[1:]:
        match = re.search(r'^id\s*=\s*"([^"]+)"', chunk, re.M)
        if match:
            blocks[match.group(1)] = chunk
    return blocks


def related_deviations(view: FindingView) -> list:
    """Documented deviations that bear on this finding.

    A deviation applies when it tolerates the invariant (the finding is then a
    'deviation'), or when its profile entry names the invariant -- as quiche's
    idle-shift-from-last-send does ('it breaks future-recovery-start') for a
    violation no profile may waive.
    """
    profile = view.stack_run.profile
    blocks = _deviation_blocks(view.target)
    inv = view.finding.invariant
    out = []
    for dev in profile.deviations:
        tolerated = inv in dev.get("tolerates", [])
        checked = inv in dev.get("explains", [])
        named = re.search(r"\b%s\b" % re.escape(inv), blocks.get(dev.get("id", ""), ""))
        if tolerated or checked or named:
            out.append(dict(dev, why="tolerates this invariant" if tolerated else
                            "explains this invariant where its mechanism (%s) is observed" % dev.get("mechanism")
                            if checked else "its profile entry names this invariant"))
    return out


SOURCE_REF = re.compile(r"([\w/.-]+\.(?:rs|c|h|cc|cpp)):\d+")


def code_locations(view: FindingView, deviations: list) -> list:
    """Where in the stack's source the behaviour lives, as far as ccdiff's files know.

    The `code` of each deviation that bears on the finding, and ccdiff's note on
    the version (quiche 0.26.0: 'carries the idle-restart death spiral
    (cubic.rs:151-176)') when one of those deviations points into the same
    source file -- otherwise that note is about something else and is shown
    with the versions only.  Each location is a list of pieces {"text", "url"}:
    line ranges become permalinks at the version's upstream commit
    (ccdiff/provenance.py), the rest stays text.
    """
    target, locations = view.target, []
    note = version_note(target)
    files = {Path(f).name for f in SOURCE_REF.findall(note)}
    if files and any(name in dev.get("code", "") for dev in deviations for name in files):
        locations.append(_label(f"ccdiff's note on {target.recipe.name} {target.version}: ")
                         + link_code(note, target.recipe, target.version))
    for dev in deviations:
        if dev.get("code"):
            # A profile entry's line numbers are about the version named after them.
            locations.append(_label(f"{dev['id']}: ") + link_code(dev["code"], target.recipe))
    return locations


def _label(text: str) -> list:
    return [{"text": text, "url": None}]


def at_violation(view: FindingView) -> list:
    """Rows (field, expected = oracle, actual = stack) at the finding's event."""
    index = view.finding.event_index
    mine = view.stack_run.snapshots
    theirs = view.oracle_run.snapshots if view.oracle_run else []
    rows = []
    for name in SNAPSHOT_FIELDS:
        actual = getattr(mine[index], name) if index < len(mine) else None
        expected = getattr(theirs[index], name) if index < len(theirs) else None
        rows.append({"field": name, "expected": _fmt(expected), "actual": _fmt(actual),
                     "differs": view.oracle_run is not None and _fmt(expected) != _fmt(actual)})
    return rows


def _fmt(value) -> str:
    """Numbers as a reader compares them: 48000 and 48000.0 are the same window."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.1f}"
    return str(value)


def trace_excerpt(view: FindingView) -> dict:
    """The trace text to show: whole if short, else the window around the violation.

    Lines are the trace file's own lines (1 = header), so `line` in the finding
    points into both the excerpt and the full file.
    """
    trace = view.run.trace
    lines = view.run.lines
    mark = view.finding.line or trace.line_of(view.finding.event_index)
    if len(lines) <= INLINE_LINES:
        first, last = 1, len(lines)
    else:
        first, last = max(2, mark - WINDOW_EVENTS), min(len(lines), mark + WINDOW_EVENTS)
    shown = [{"no": n, "text": lines[n - 1], "mark": n == mark} for n in range(first, last + 1)]
    return {"lines": shown, "whole": first == 1 and last == len(lines), "first": first,
            "last": last, "total": len(lines), "mark": mark}


def replay_commands(view: FindingView, trace_path: str) -> dict:
    stacks = " ".join(f"--stack {shlex.quote(s)}" for s in
                      ([view.label] + ([view.reference] if view.reference else [])))
    trace = shlex.quote(trace_path)
    commands = {"native": f"ccdiff replay {trace} {stacks}",
                "compose": f"docker compose run --rm replay {trace} {stacks}", "sim": ""}
    # A closed-loop trace (`ccdiff sim` / `conform` name it "SCENARIO seed=N"): the run itself,
    # with the oracle and the Reno control beside it, is one command too.
    match = re.fullmatch(r"([A-Za-z0-9_.-]+) seed=(\d+)", view.run.trace.header.name or "")
    if match:
        commands["sim"] = (f"ccdiff sim {shlex.quote(match.group(1))} --seed {match.group(2)} "
                           f"--stack {shlex.quote(view.label)}")
    return commands


def versions(view: FindingView) -> list:
    """Rows (name, pieces): what ran, and where upstream its code is (provenance.toml)."""
    rows = [("ccdiff", _label(ccdiff_version()))]
    target = view.target
    if target.recipe is not None:
        pin_ = target.recipe.versions.get(target.version, {})
        rows.append((target.recipe.name, _label(target.version + (f" ({pin_['url']}, sha256 {pin_['sha256']})"
                                                                  if pin_ else ""))))
        upstream = upstream_row(target)
        if upstream:
            rows.append((f"{target.recipe.name} upstream", upstream))
        note = version_note(target)
        if note:
            rows.append((f"ccdiff's note on {target.recipe.name} {target.version}",
                         link_code(note, target.recipe, target.version)))
        rows.append(("options", _label(target.options_text or "(defaults)")))
    return rows


def upstream_row(target) -> list:
    """'https://github.com/ngtcp2/ngtcp2 at commit f9e9ff0... (tag v1.25.0), vendored in crate
    ngtcp2-sys 0.2.0 (crates.io), deps/ngtcp2' with the repository tree at that commit linked."""
    p = pin(target.recipe, target.version)
    ref = p.get("upstream_commit") or p.get("upstream_tag")
    if not (p.get("upstream_repo") and ref):
        return []
    path = p.get("path_in_repo", "").strip("/")
    tree = tree_url(p, path)
    tag = f" (tag {p['upstream_tag']})" if p.get("upstream_commit") and p.get("upstream_tag") else ""
    where = f", {path}/ in the repository" if path else ""
    packaged = f"; packaged as {p['package']}" if p.get("package") else ""
    return [{"text": f"{p['upstream_repo']} at {'commit ' if p.get('upstream_commit') else 'tag '}", "url": None},
            {"text": ref, "url": tree}] + _label(f"{tag}{where}{packaged}")


def driven(view: FindingView) -> str:
    """How ccdiff drove the stack's controller and what it injected (provenance.toml)."""
    return view.target.recipe.provenance.get("driven", "") if view.target.recipe else ""


def event_at(view: FindingView) -> dict:
    return event_to_dict(view.run.trace.events[view.finding.event_index])


# Events a report's minimization may replay in all (fuzzing/triage.py Budget): ddmin on a
# trace of any length, bounded by work, not by the clock (the same report every run).  ddmin
# usually needs ~100 replays, far less than this (quiche@0.26.0's stuck-at-minimum on a
# 2,789-event death-spiral trace: 103 replays, 2.5 s, to 37 events); a bound used to refuse
# every trace whose finding came after event 400, which was most of a conform run's.
MINIMIZE_BUDGET_EVENTS = 2_000_000


def minimal(view: FindingView) -> dict:
    """The finding's minimal strict reproducer, whether its sends fit the stack's own window
    (ccdiff/window_reach.py), and for quiche, quinn, s2n-quic, ngtcp2, picoquic and aioquic a test for their own suites.

    {} when there is nothing to shrink; "budget" says when the shrinking stopped at the
    report's budget (`ccdiff minimize` has none)."""
    from ..fuzzing.triage import Budget, cut_to_finding, reduce, window_of
    from ..trace import dump_trace
    trace, f = view.run.trace, view.finding
    if f.status != "violation" or view.target.kind != "native":
        return {}
    stored = stored_reproducer(view)
    if stored is not None:
        small, repair = stored
    else:
        found = [sig for sig in _signatures_once(trace, view.label).values() if sig.invariant == f.invariant]
        if not found:
            return {}
        # what follows the finding plays no part in it; the report has replayed the trace already
        cut = cut_to_finding(trace, found[0], view.label, at=f.event_index)
        budget = Budget(MINIMIZE_BUDGET_EVENTS)
        small, repair = reduce(cut, found[0], view.label, budget)
    overrun = window_of(small, view.label)
    out = {"trace": dump_trace(small), "events": len(small.events), "reachability": small.reachability,
           "repair": repair, "window": overrun}
    if stored is None and budget.exhausted:
        out["budget"] = (f"shrunk from {len(cut.events)} events within the report's budget of "
                         f"{MINIMIZE_BUDGET_EVENTS:,} replayed events; `ccdiff minimize` may shrink it further")
    if repair == "stored":
        out["stored"] = f"fuzz/reproducers/{stored_name(view)}"
    if view.target.recipe is not None:
        message = (f"ccdiff: {f.invariant} ({view.invariant.title.lower()}), "
                   f"minimized from {trace.header.name or 'a trace'} by ccdiff minimize")
        out.update(native_test(view.target.recipe.name, small, f.invariant, message, view.label))
    return out


def native_test(stack: str, small, invariant: str, message: str, label: str) -> dict:
    """The minimal reproducer as a test in the stack's own suite, under the keys the finding
    templates read: "rust" (quiche, quinn, s2n-quic), "c" (ngtcp2, picoquic) or "python"
    (aioquic), with "<key>_stack" where one key serves two stacks and "c_name"; or
    "<key>_why_not" when the trace cannot be written as such a test.  {} for other stacks."""
    from .unit_test import NotExpressible, ngtcp2_test, ngtcp2_test_file, quiche_test
    name, snake = f"ccdiff_{invariant}", invariant.replace("-", "_")
    if stack == "quiche":
        key, named = "rust", {}
        write = lambda: quiche_test(small, invariant, name, message)  # noqa: E731
    elif stack == "ngtcp2":
        key, named = "c", {}
        write = lambda: ngtcp2_test_file(ngtcp2_test(small, invariant, invariant, message, spec=label))  # noqa: E731
    elif stack == "quinn":
        from .quinn_test import quinn_test
        key, named = "rust", {"rust_stack": "quinn"}
        write = lambda: quinn_test(small, invariant, name, message, spec=label)  # noqa: E731
    elif stack == "s2n-quic":
        from .s2n_test import s2n_test
        key, named = "rust", {"rust_stack": "s2n-quic"}
        write = lambda: s2n_test(small, invariant, name, message, spec=label)  # noqa: E731
    elif stack == "picoquic":
        from .picoquic_test import picoquic_test, picoquic_test_file
        key, named = "c", {"c_stack": "picoquic"}
        write = lambda: picoquic_test_file(picoquic_test(small, invariant, name, message, spec=label))  # noqa: E731
    elif stack == "aioquic":
        from .aioquic_test import aioquic_test
        key, named = "python", {}
        write = lambda: aioquic_test(small, invariant, name, message, spec=label)  # noqa: E731
    else:
        return {}
    try:
        out = {key: write(), **named}
    except (NotExpressible, KeyError) as exc:
        return {**named, f"{key}_why_not": _why_not(exc, stack, invariant)}
    if stack == "ngtcp2":
        out["c_name"] = f"test_ngtcp2_cc_cubic_{snake}"
    elif stack == "picoquic":
        out["c_name"] = f"ccdiff_{snake}_test"
    return out


def _why_not(exc, stack: str, invariant: str) -> str:
    """Why no native test: NotExpressible's reason, or (KeyError) no assertion for the invariant."""
    from .unit_test import NotExpressible
    if isinstance(exc, NotExpressible) and str(exc):
        return str(exc)
    return f"no {stack} assertion for {invariant} yet"


def _signatures_once(trace, label: str) -> dict:
    """fuzzing.triage.signatures of a report's trace, replayed once per stack however many of
    its findings the report shows (kept on the trace object, which lives as long as the build)."""
    from ..fuzzing.triage import signatures
    cache = trace.__dict__.setdefault("_report_signatures", {})
    if label not in cache:
        cache[label] = signatures(trace, label)
    return cache[label]


def stored_name(view: FindingView) -> str:
    return f"{view.target.recipe.name}-{view.finding.invariant}.jsonl"


def stored_reproducer(view: FindingView):
    """(trace, "stored") when fuzz/reproducers/STACK-INVARIANT.jsonl (made with `ccdiff minimize`
    and committed) is strict and shows the finding on this stack: a 1-minimal reproducer made
    without the report's budget, and the same one on every page of that finding."""
    from ..paths import project_root
    from ..replay import replay
    from ..trace import load_trace
    if view.target.recipe is None:
        return None
    path = project_root() / "fuzz" / "reproducers" / stored_name(view)
    if not path.exists():
        return None
    small = load_trace(str(path))
    if (small.reachability or "strict") != "strict" or len(small.events) > len(view.run.trace.events):
        return None
    if not any(v.invariant == view.finding.invariant for v in replay(small, [view.label]).violations):
        return None
    return small, "stored"


def describe(view: FindingView, closed_loop_runs=None, impact_of=None) -> dict:
    """Everything a finding page and its finding.md need.

    closed_loop_runs: a ccdiff.report.impact.ClosedLoopRuns shared by one report build (the
    oracle's and the Reno control's own closed loops, run once per scenario and seed);
    impact_of: the impact already computed for this view (build_report's, for the plots)."""
    from .impact import impact
    deviations = related_deviations(view)
    return {"view": view, "f": view.finding, "inv": view.invariant, "deviations": deviations,
            "impact": impact_of if impact_of is not None else impact(view, closed_loop_runs),
            "status": view.status, "report_to": report_to(view.target.recipe),
            # Only the page carrying a root cause's report shrinks it and writes the native test.
            "minimal": minimal(view) if view.primary is None and view.cause is None else {},
            "reached": view.stack_run.profile.reached_by_connection(view.finding.invariant)
            if view.finding.status == "violation" and view.target.kind == "native" else None,
            "all_deviations": view.stack_run.profile.deviations,
            "code": code_locations(view, deviations), "at": at_violation(view),
            "excerpt": trace_excerpt(view), "replay": replay_commands(view, view.trace_path),
            # The bug report is read elsewhere: it replays the trace file saved under its own name.
            "trace_name": Path(view.trace_path).name,
            "replay_md": replay_commands(view, Path(view.trace_path).name),
            "versions": versions(view), "driven": driven(view), "event": event_at(view), "header": view.run.trace.header}

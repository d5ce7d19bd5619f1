"""The impact of a closed-loop finding: the stack's own run beside the oracle's and the Reno
control's own runs on the same scenario and seed (issue 15, points 2 and 5).

A trace that `ccdiff sim` or `ccdiff conform` wrote names its run "SCENARIO seed=N" in its
header.  Replaying that trace through the oracle shows what the oracle does on the *stack's*
packets -- its window then has nothing to do with its own closed-loop behaviour (40x smaller
in one case).  What the oracle does on that path is another run: the same scenario and seed,
the oracle gating its own sends, exactly `ccdiff sim SCENARIO --seed N --stack oracle`.
These runs are deterministic, so a report build runs each (scenario, seed, stack) once
(ClosedLoopRuns) and the pages stay byte-identical.

The stack's own numbers come from rerunning its closed loop too, and count only when that
rerun writes the finding's trace events again, line for line: a trace run with `ccdiff sim --set`,
edited, or written by another ccdiff has no impact table, only the command that measures it.

Open-loop traces (examples/*.jsonl) get one line: impact needs a closed-loop run, and the
nearest `ccdiff sim` command when the trace's name is a catalog scenario.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from ..errors import SetupError
from ..units import duration, size

CONTROLS = ("oracle", "oracle-reno")   # as `ccdiff sim` (cli.SIM_CONTROLS): CUBIC reference, Reno control
ROLES = {"oracle": "CUBIC reference, RFC 9438", "oracle-reno": "Reno control, RFC 9002 NewReno"}
CLOSED_LOOP_NAME = re.compile(r"([A-Za-z0-9_.-]+) seed=(\d+)")
TERMS = ("completion: time to deliver the scenario's data, or what was delivered by the deadline; "
         "at minimum window: time the window spent at its floor (RFC 9002 §7.2, each controller's own); "
         "recovery↔avoidance: entries into and exits from recovery (Cloudflare's \"flips\")")


def closed_loop_of(header) -> tuple | None:
    """(scenario name, seed) of a closed-loop trace ("SCENARIO seed=N"), else None."""
    match = CLOSED_LOOP_NAME.fullmatch(getattr(header, "name", None) or "")
    return (match.group(1), int(match.group(2))) if match else None


def sim_command(scenario: str, seed: int, label: str) -> str:
    """The one command that reruns a closed loop with the oracle and the Reno control beside it."""
    return f"ccdiff sim {shlex.quote(scenario)} --seed {seed} --stack {shlex.quote(label)}"


def catalog_scenario(name: str):
    """The catalog's scenario of that name (scenarios/NAME.toml), or None."""
    from ..sim.scenario import available_scenarios, load_scenario
    if name not in available_scenarios():
        return None
    return load_scenario(name)


# ---------------------------------------------------------------- runs (cached)

@dataclass
class ClosedLoopRun:
    """What a report needs of one closed-loop run: its metrics and its cwnd over time."""
    label: str
    status: str
    metrics: dict
    lines: list = field(repr=False)          # its trace's text lines (line 1 = header); [] for a control
    times_us: list = field(default_factory=list, repr=False)   # cwnd change points (cwnd_steps)
    cwnd: list = field(default_factory=list, repr=False)


def cwnd_steps(times_us, cwnds) -> tuple:
    """(times, values) where the window changes, plus the last event: the same step line
    (drawn where="post") with a fraction of the points of a per-event series."""
    times, values = [], []
    last = len(cwnds) - 1
    for i, (t, w) in enumerate(zip(times_us, cwnds)):
        if w is None:
            continue
        if not values or w != values[-1] or i == last:
            if times and times[-1] == t:     # several changes at one instant: the last holds
                values[-1] = w
                continue
            times.append(t)
            values.append(w)
    return times, values


class ClosedLoopRuns:
    """One report build's closed-loop runs, each (scenario, seed, stack) simulated once.

    ccdiff conform hands one instance to the report of every failing stack, so the oracle
    and the Reno control of a (scenario, seed) run once per conform run."""

    def __init__(self):
        self._runs: dict = {}

    def get(self, scenario, seed: int, stack, label: str, series: bool = True) -> ClosedLoopRun:
        """stack: a SPEC or a Target.  Raises SetupError when it cannot run here."""
        key = (scenario.name, seed, label)
        run = self._runs.get(key)
        if run is None or (series and not run.times_us) or (not series and not run.lines):
            run = _simulate(scenario, seed, stack, label, series)
            self._runs[key] = run
        return run


def _simulate(scenario, seed: int, stack, label: str, series: bool) -> ClosedLoopRun:
    from ..replay import replay
    from ..sim import simulate
    result = simulate(scenario, stack, seed, record=True)
    # A stack's trace lines are compared with the finding's trace; a control's are not kept
    # (conform's report may hold many scenarios' runs at once).
    run = ClosedLoopRun(label, result.status, result.metrics, [] if series else result.trace_text().splitlines())
    if series and result.trace is not None:
        # The run's trace through the same controller gives the run's own snapshots (engine.py).
        spec = stack if isinstance(stack, str) else label
        snaps = replay(result.trace, [spec], check=False).runs[result.stack].snapshots
        run.times_us, run.cwnd = cwnd_steps([ev.t for ev in result.trace.events[:len(snaps)]],
                                            [s.cwnd for s in snaps])
    return run


# ---------------------------------------------------------------- what a page shows

def completion_text(metrics: dict, deadline_us: int) -> str:
    """"3.38 s" or "did not complete in 10 s (2.34 MB of 10 MB delivered)" (as `ccdiff sim`)."""
    if metrics.get("completion_us") is not None:
        return duration(metrics["completion_us"])
    return (f"did not complete in {duration(deadline_us)} ({size(metrics.get('delivered_bytes'))} of "
            f"{size(metrics.get('total_bytes'))} delivered)")


def row(run: ClosedLoopRun, role: str, deadline_us: int) -> dict:
    m = run.metrics
    return {"label": run.label, "role": role, "status": run.status,
            "completion": completion_text(m, deadline_us), "completion_us": m.get("completion_us"),
            "delivered_bytes": m.get("delivered_bytes"), "total_bytes": m.get("total_bytes"),
            "min_window": duration(m.get("min_window_us")), "min_window_us": m.get("min_window_us"),
            "transitions": m.get("recovery_transitions")}


def sentence(rows: list) -> str:
    """One sentence a maintainer reads first: the stack's outcome, then the references'."""
    stack, others = rows[0], rows[1:]
    verb = (f"completed in {stack['completion']}" if stack["completion_us"] is not None
            else stack["completion"])
    text = f"{stack['label']} {verb} and spent {stack['min_window']} at its minimum window"
    named = {"oracle": "the oracle", "oracle-reno": "the Reno control"}
    parts = []
    for r in others:
        who = named.get(r["label"], r["label"])
        done = (f"completed in {r['completion']}" if r["completion_us"] is not None else r["completion"])
        parts.append(f"{who} {done} ({r['min_window']} at its minimum window)")
    if parts:
        text += "; " + " and ".join(parts)
    return text + "."


def impact(view, runs: ClosedLoopRuns | None = None) -> dict:
    """What the finding page's Impact section shows.

    {"kind": "closed", "rows", "sentence", "command", "scenario", "seed", "deadline", "terms",
     "series"} for a closed-loop trace whose run reproduces here; {"kind": "closed", "note",
    "command"} when it does not; {"kind": "open", "command"} for an open-loop trace naming a
    catalog scenario; {} otherwise.  series: the controls' own cwnd steps for the plots."""
    runs = runs if runs is not None else ClosedLoopRuns()
    header = view.run.trace.header
    found = closed_loop_of(header)
    if found is None:
        scenario = _quiet(catalog_scenario, header.name or "")
        if scenario is None:
            return {}
        return {"kind": "open", "command": sim_command(scenario.name, 0, view.label)}
    name, seed = found
    command = sim_command(name, seed, view.label)
    scenario = _quiet(catalog_scenario, name)
    if scenario is None:
        return {"kind": "closed", "command": command,
                "note": f"scenario {name} is not in ccdiff's catalog (scenarios/); run ccdiff sim on its "
                        ".toml file with this seed to measure the impact"}
    try:
        mine = runs.get(scenario, seed, view.target, view.label, series=False)
    except SetupError as exc:
        return {"kind": "closed", "command": command, "note": f"the closed loop could not be rerun here: {exc}"}
    # The events, line for line (the header's comment names the stack as conform labelled it:
    # NAME=SPEC runs SPEC under NAME).
    if mine.lines[1:] != view.run.lines[1:]:
        return {"kind": "closed", "command": command,
                "note": "this trace is not the run that command gives with this ccdiff (run with --set, "
                        "edited, or written by another version)"}
    rows = [row(mine, "stack under test", scenario.deadline_us)]
    series = []
    for control in CONTROLS:
        if control == view.label:
            continue
        try:
            theirs = runs.get(scenario, seed, control, control)
        except SetupError as exc:
            return {"kind": "closed", "command": command,
                    "note": f"the {control} closed loop could not be run here: {exc}"}
        rows.append(row(theirs, ROLES[control], scenario.deadline_us))
        series.append({"label": control, "times_us": theirs.times_us, "cwnd": theirs.cwnd,
                       "note": theirs_done(theirs.metrics, scenario.deadline_us)})
    return {"kind": "closed", "rows": rows, "sentence": sentence(rows), "command": command,
            "scenario": name, "seed": seed, "deadline": duration(scenario.deadline_us), "terms": TERMS,
            "series": series}


def theirs_done(metrics: dict, deadline_us: int) -> str:
    """Short legend note: the completion time ("3.38 s") or "not done" (by the deadline)."""
    if metrics.get("completion_us") is not None:
        return duration(metrics["completion_us"])
    return "not done"


def _quiet(load, name: str):
    """A catalog scenario, or None when the name is no scenario or its file does not load."""
    if not name:
        return None
    try:
        return load(name)
    except SetupError:
        return None

"""`ccdiff confirm`: reach a finding with a stack's own connection by searching the network.

A finding made on ccdiff's own event streams meets a maintainer's first objection, "my
connection never does that", with an argument; the stack's own connection showing it is a
fact (issue #31 item 4).  The catalog's scenarios do not reach every finding's shape, so
this searches for one that does.  It drives the network and the application, never the
controller: Hypothesis draws scenario parameters -- the bottleneck's rate, the RTT, the
queue (in multiples of the path's BDP), a loss rate during the first burst, an outage in it,
the number and size of the application's bursts and the pause between them -- on top of a base scenario
(`idle-restart` unless told).  Each draw runs the stack's own client and server in virtual
time with the client's own qlog (connection/run.py), and the qlog's events are judged
(confirm.judge_qlog).  A draw reaches the finding when the invariant is a violation on the
connection's own events *and* the stack's own log confirms it at that event
(confirm.confirmed_by: its logged window makes the adapter's step, or the same invariant
flags its own logged window).  An adapter-only finding on the stack's events is reported
but is not a confirmation.

The search then moves each parameter towards its simplest value while the finding is still
reached, within the same run budget (`--no-shrink` stops at the first).  It is derandomized:
the same command gives the same draws, the same answer and the same output.  The answer is
the `ccdiff sim` command that shows it and a `[[reached]]` entry for the stack's profile.toml.

quiche's idle inflation after a HyStart++ exit was first reached by hand this way
(docs/connection-mode.md): no loss, a queue many BDPs deep, pauses of seconds.
"""
from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SetupError

RATES = (1_250_000, 3_125_000, 6_250_000, 12_500_000)        # 10, 25, 50, 100 Mbit/s
RTTS = (10_000, 20_000, 40_000, 80_000)
QUEUE_BDPS = (1, 4, 16, 64)
LOSSES = (0.0, 0.01, 0.02, 0.05, 0.1)                          # during the first burst only
BURSTS = (2, 3, 4)
BYTES = (150_000, 500_000, 2_000_000)
PAUSES = (300_000, 1_000_000, 3_000_000, 8_000_000)
OUTAGES = (0, 1_000_000, 3_000_000)                            # a blackout half-way into the first burst
# Search.shrink moves each towards its first value: no loss, a shallow queue, a short pause, small
# and few bursts -- the least unusual network that still shows the finding.
AXES = {"rate_bytes_per_s": RATES, "base_rtt_us": RTTS, "queue_bdp": QUEUE_BDPS, "loss": LOSSES,
        "bursts": BURSTS, "bytes": BYTES, "pause_us": PAUSES, "outage_us": OUTAGES}


def scenario_fields(draw: dict) -> dict:
    """A draw as the base scenario's fields (ccdiff sim --set): the queue from its BDP
    multiple, the loss over the first burst's expected time, an outage (every packet and
    ACK lost) from half-way into the first burst, each burst's period long enough to send
    it at a quarter of the rate through the outage and then pause, the deadline and the
    liveness limit from those."""
    rate, rtt = draw["rate_bytes_per_s"], draw["base_rtt_us"]
    send_us = draw["bytes"] * 4_000_000 // rate + 20 * rtt + draw["outage_us"]
    period = send_us + draw["pause_us"]
    outage_from = draw["bytes"] * 500_000 // rate          # half of the first burst, at the full rate
    fields = {"app": "bursts", "rate_bytes_per_s": rate, "base_rtt_us": rtt,
              "queue_bytes": max(30_000, rate * rtt // 1_000_000 * draw["queue_bdp"]),
              "loss_schedule": [[send_us, draw["loss"]]] if draw["loss"] else [],
              "bursts": draw["bursts"], "bytes": draw["bytes"], "period_us": period,
              "deadline_us": period * draw["bursts"] + 10_000_000,
              "max_stall_us": draw["pause_us"] + draw["outage_us"] + 4_000_000,
              "blackouts": [[outage_from, outage_from + draw["outage_us"]]] if draw["outage_us"] else []}
    return fields


def _value(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def sim_command(base: str, spec: str, seed: int, fields: dict) -> str:
    sets = " ".join(f"--set {key}={_value(value)}" for key, value in fields.items())
    return f"ccdiff sim {base} --mode connection --stack {spec} --seed {seed} {sets} --qlog own.qlog --no-controls"


@dataclass
class Outcome:
    """One draw's run: the invariant's violation on the connection's own events (or None),
    and how the stack's own log confirms it (None: the adapter's finding only)."""
    draw: dict
    fields: dict
    finding: dict | None = None
    confirmed_by: str | None = None
    error: str = ""

    @property
    def reached(self) -> bool:
        return self.confirmed_by is not None


@dataclass
class Search:
    base: str
    spec: str
    invariant: str
    seed: int
    budget: int
    shrink_to_simplest: bool = True
    fixed: dict = field(default_factory=dict)       # --set: fields every draw keeps
    runs: dict = field(default_factory=dict)        # draw key -> Outcome, in run order
    log: object = sys.stderr

    def run(self, draw: dict) -> Outcome:
        """One draw, run once (a draw met again is looked up)."""
        from ..sim.scenario import load_scenario
        from . import run_connection
        from .confirm import confirmed_by, judge_qlog
        key = json.dumps(draw, sort_keys=True)
        if key in self.runs:
            return self.runs[key]
        fields = dict(scenario_fields(draw), **self.fixed)
        outcome = Outcome(draw, fields)
        # A field the base scenario refuses is this search's error, the same on every draw: raised.
        scenario = load_scenario(self.base).with_params(**json.loads(json.dumps(fields)))
        try:
            with tempfile.TemporaryDirectory(prefix="ccdiff-confirm-") as tmp:
                qlog = str(Path(tmp) / "own.qlog")
                run_connection(scenario, self.spec, self.seed, record=False, qlog=qlog)
                judged = judge_qlog(qlog, self.spec)
            found = [f for f in judged["findings"] if f["invariant"] == self.invariant and f["status"] == "violation"]
            confirmed = [f for f in found if confirmed_by(f)]
            outcome.finding = (confirmed or found or [None])[0]
            outcome.confirmed_by = confirmed_by(confirmed[0]) if confirmed else None
        except SetupError as exc:      # a draw the stack's shim refuses: not reached, said in its line
            outcome.error = str(exc).splitlines()[0][:300]
        self.runs[key] = outcome
        self._progress(outcome)
        return outcome

    def _progress(self, outcome: Outcome) -> None:
        d = outcome.draw
        what = (f"reached (event {outcome.finding['event']}, {outcome.confirmed_by})" if outcome.reached
                else f"on the adapter only (event {outcome.finding['event']})" if outcome.finding
                else f"error: {outcome.error}" if outcome.error else "not reached")
        outage = f", outage {d['outage_us'] / 1e6:g} s" if d.get("outage_us") else ""
        print(f"[confirm] run {len(self.runs)}/{self.budget}: {d['rate_bytes_per_s'] * 8 // 1_000_000} Mbit/s, "
              f"{d['base_rtt_us'] // 1000} ms, queue {d['queue_bdp']} BDP, loss {d['loss']:.0%}, "
              f"{d['bursts']} x {d['bytes']} B, pause {d['pause_us'] / 1e6:g} s{outage} -> {what}",
              file=self.log, flush=True)

    def search(self, start: dict | None = None) -> Outcome | None:
        """The simplest draw found that reaches the finding, or None within the budget.
        start: a draw tried first (draw_from_trace: the finding's own shape); then Hypothesis
        draws until one reaches it; then shrink()."""
        from hypothesis import HealthCheck, Phase, Verbosity, example, given, settings
        from hypothesis import strategies as st
        strategy = st.fixed_dictionaries({name: st.sampled_from(values) for name, values in AXES.items()})

        class Reached(Exception):
            pass

        def check(draw: dict) -> None:
            if len(self.runs) >= self.budget:
                return                             # the budget is spent
            if self.run(draw).reached:
                raise Reached()
        test = given(strategy)(check)
        if start is not None:
            test = example(start)(test)
        test = settings(max_examples=self.budget, derandomize=True, database=None, deadline=None,
                        phases=[Phase.explicit, Phase.generate], verbosity=Verbosity.quiet,
                        suppress_health_check=list(HealthCheck))(test)
        try:
            test()
        except Reached:
            pass
        first = next((o for o in self.runs.values() if o.reached), None)
        return self.shrink(first) if first is not None and self.shrink_to_simplest else first

    def shrink(self, best: Outcome) -> Outcome:
        """Each axis in turn moved to a simpler value (earlier in AXES: no loss, a shallow queue,
        a short pause, small and few bursts) while the finding is still reached, until no move
        helps or the budget is spent: the [[reached]] entry names the least unusual network."""
        improved = True
        while improved:
            improved = False
            for name, values in AXES.items():
                for value in values[:values.index(best.draw[name])]:
                    if len(self.runs) >= self.budget:
                        return best
                    outcome = self.run(dict(best.draw, **{name: value}))
                    if outcome.reached:
                        best, improved = outcome, True
                        break
        return best


def _nearest(values: tuple, x: float) -> int | float:
    return min(values, key=lambda v: (abs(v - x), v))


def draw_from_trace(trace) -> dict:
    """The draw a finding's own trace suggests (`--from`): its minimum RTT, its losses (none,
    or their share of the packets sent), its longest pause, and a queue that turns a rise
    in RTT into delay without loss (64 BDPs) where the trace's RTT rises by a quarter or more
    with nothing lost; the longest bursts, on the slowest path, so that congestion avoidance
    is reached before a pause.  quiche's CSS-epoch reproducer gives the draw that reaches it
    (docs/connection-mode.md)."""
    from ..trace import Ack, Lost, PersistentCongestion, Sent
    sent_t, rtts, sent, lost, gap, last_t = {}, [], 0, 0, 0, None
    for ev in trace.events:
        if last_t is not None:
            gap = max(gap, ev.t - last_t)
        last_t = ev.t
        if isinstance(ev, Sent):
            sent_t[ev.pn], sent = ev.t, sent + 1
        elif isinstance(ev, Ack):
            largest = max((pn for pn in ev.pns if pn in sent_t), default=None)
            if largest is not None:
                rtts.append(ev.t - sent_t[largest])
        elif isinstance(ev, (Lost, PersistentCongestion)):
            lost += 1
    if not rtts or not sent:
        raise SetupError("--from: the trace has no acknowledged packet to read an RTT from")
    min_rtt, max_rtt = max(min(rtts), 1), max(rtts)
    share = lost / sent
    rises = max_rtt >= 1.25 * min_rtt
    return {"rate_bytes_per_s": RATES[0], "base_rtt_us": _nearest(RTTS, min_rtt),
            "queue_bdp": QUEUE_BDPS[-1] if rises and not lost else QUEUE_BDPS[0] if lost else QUEUE_BDPS[1],
            "loss": _nearest(LOSSES[1:], share) if lost else 0.0, "bursts": BURSTS[1], "bytes": BYTES[-1],
            "pause_us": _nearest(PAUSES, gap), "outage_us": 0}


def reached_entry(search: Search, outcome: Outcome) -> str:
    """The `[[reached]]` block for implementations/<stack>/profile.toml (docs/connection-mode.md)."""
    finding = outcome.finding
    command = sim_command(search.base, search.spec, search.seed, outcome.fields)
    sets = " ".join(f"{k}={_value(v)}" for k, v in outcome.fields.items())
    lines = ["[[reached]]", f'invariant = "{search.invariant}"', 'state = "yes"',
             f"scenario = {json.dumps(f'{search.base} (--set {sets})')}", f"seed = {search.seed}",
             f"event = {finding['event']}"]
    if outcome.confirmed_by == "own window":
        lines.append('confirmed_by = "own-window"')
    lines += [f"command = {json.dumps(command)}", f"note = {json.dumps('found by ccdiff confirm: ' + finding['detail'])}"]
    return "\n".join(lines) + "\n"


def add_parser(sub) -> None:
    from ..cli_help import Once, add_command
    p = add_command(sub, "confirm",
                    summary="search scenario parameters until a stack's own connection shows a finding",
                    description="Reach a finding with the stack's own client and server (connection mode, "
                                "virtual time): Hypothesis draws the network and the application -- rate, RTT, "
                                "queue, loss in the first burst, bursts and pauses -- on top of a base scenario, "
                                "each draw runs the stack's own connection with its own qlog, and the "
                                "connection's events are judged. A draw reaches the finding when INVARIANT is "
                                "a violation there and the stack's own logged window confirms it at that "
                                "event; the search then shrinks to the simplest such draw. Prints the `ccdiff "
                                "sim` command that shows it and a [[reached]] entry for the stack's "
                                "profile.toml (docs/connection-mode.md). The same command gives the same "
                                "search. Exit 1 when reached, 0 when not within --budget runs, 2 on an error.",
                    examples=["ccdiff confirm --stack quiche@0.30.0 --invariant idle-inflation "
                              "--from fuzz/reproducers/quiche-css-epoch-counts-idle.jsonl",
                              "ccdiff confirm --stack quinn --invariant idle-inflation --set loss_schedule=[] "
                              "--no-shrink",
                              "ccdiff confirm --stack picoquic --invariant idle-inflation --json"])
    p.add_argument("--stack", required=True, metavar="SPEC", action=Once,
                   help="the stack whose own connection is run (one with a connection shim: `ccdiff stacks`)")
    p.add_argument("--invariant", required=True, metavar="ID", help="the finding to reach (docs/invariants.md)")
    p.add_argument("--scenario", default="idle-restart", metavar="NAME",
                   help="the base scenario the draws change (default idle-restart)")
    p.add_argument("--seed", type=int, default=0, help="the scenario's random seed for every draw (default 0)")
    p.add_argument("--budget", type=int, default=40, metavar="N",
                   help="connection runs the search may spend, shrinking included (default 40)")
    p.add_argument("--no-shrink", dest="shrink", action="store_false",
                   help="stop at the first draw that reaches it")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="keep a scenario field fixed in every draw (as `ccdiff sim --set`), repeatable")
    p.add_argument("--from", dest="start", metavar="TRACE",
                   help="the finding's trace (a reproducer): the first draw is the network its shape "
                        "suggests -- its RTT, losses, longest pause, an RTT rise without loss as a deep queue")
    p.add_argument("--json", action="store_true", help="print the outcome and every run as JSON")
    p.set_defaults(func=cmd_confirm)


def cmd_confirm(args) -> int:
    from ..invariants import CATALOG
    from ..sim.scenario import load_scenario, parse_overrides
    from ..stacks import resolve
    from ..trace import TraceError, load_trace
    from .build import supports_connection
    # Everything the search reads is checked before the first connection run.
    if args.invariant not in CATALOG:
        raise SetupError(f"--invariant {args.invariant!r}: not an invariant; see docs/invariants.md")
    start = None
    if args.start:
        try:
            start = draw_from_trace(load_trace(args.start))
        except (OSError, TraceError) as exc:
            raise SetupError(f"--from {args.start}: {exc}") from None
    fixed = parse_overrides(args.set)
    load_scenario(args.scenario).with_params(**fixed)        # a bad name or field fails here
    target = resolve(args.stack)
    if target.kind != "native" or not supports_connection(target):
        raise SetupError(f"{args.stack}: no connection shim (implementations/<stack>/connection/); "
                         "`ccdiff stacks` lists the stacks")
    search = Search(args.scenario, args.stack, args.invariant, args.seed, args.budget, args.shrink, fixed)
    outcome = search.search(start)
    if args.json:
        print(json.dumps({"stack": args.stack, "invariant": args.invariant, "scenario": args.scenario,
                          "seed": args.seed, "reached": outcome is not None,
                          "command": sim_command(args.scenario, args.stack, args.seed, outcome.fields)
                          if outcome else None,
                          "outcome": vars(outcome) if outcome else None,
                          "runs": [vars(o) for o in search.runs.values()]}, indent=1, sort_keys=True))
    elif outcome is None:
        adapter_only = sum(1 for o in search.runs.values() if o.finding)
        print(f"{args.invariant} not reached by {args.stack}'s own connection in {len(search.runs)} runs"
              + (f" ({adapter_only} with the adapter's finding on the stack's events, not its own window)"
                 if adapter_only else "") + "; a [[reached]] entry says so: state = \"not-yet\" and what was tried")
    else:
        print(f"{args.invariant} reached by {args.stack}'s own connection in {len(search.runs)} runs "
              f"(event {outcome.finding['event']}, {outcome.confirmed_by}): {outcome.finding['detail']}\n\n"
              f"shows it:\n  {sim_command(args.scenario, args.stack, args.seed, outcome.fields)}\n\n"
              f"for implementations/{target.recipe.name}/profile.toml:\n\n{reached_entry(search, outcome)}")
    return 1 if outcome is not None else 0      # 1: a finding, as `ccdiff sim` on it (2: errors, cli.py)


__all__ = ["Outcome", "Search", "add_parser", "cmd_confirm", "draw_from_trace", "reached_entry", "scenario_fields",
           "sim_command"]

"""Metamorphic relations: trace transforms that must not change a replay's verdict.

    >>> from ccdiff.metamorphic import RELATIONS, check_trace
    >>> rows = check_trace(load_trace("examples/death-spiral.jsonl"), "quiche@0.26.0")
    >>> [(r.relation, r.changed) for r in rows][:2]
    [('shift+1s', False), ('shift+100s', False)]

A controller's decisions depend on time differences and on which packets an
ACK covers, never on the value of the clock's origin or of the first packet
number: a real connection starts with whatever monotonic clock the host has
(days of uptime) and, after a key update or a long connection, with large
packet numbers (RFC 9000 §12.3 numbers packets from 0 up to 2^62-1).  So a
verdict that moves when the trace is shifted in time or its packet numbers
offset is the harness's doing (an adapter's clock, an overflow, a threshold
that reads absolute time), not the stack's.  docs/metamorphic.md has the
relations and what each one compares.

Verdicts:
- shift and offset relations keep every event where it was, so the verdict is
  exact: (stack, invariant, status, event index, count) of every finding.
- split relations insert an event, so indices move and a violation on the
  split ACK may be counted on both halves: the verdict is the set of
  (stack, invariant, status).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .trace import Ack, Lost, Sent, Trace, TraceError, dump_trace, load_trace, parse_trace_text

SECOND_US = 1_000_000
DAY_US = 86_400 * SECOND_US

# From "the host just booted" to "up for weeks"; RFC 9002 never bounds the clock's origin.
TIME_SHIFTS = (("shift+1s", SECOND_US), ("shift+100s", 100 * SECOND_US),
               ("shift+1d", DAY_US), ("shift+3w", 21 * DAY_US))
# Past 16-bit and 20-bit boundaries: packet-number encodings and ranges must not care.
PN_OFFSETS = (("pn+1000", 1000), ("pn+2^20", 2**20))
SINGLE_SPLITS = 3   # split-ack@first, @middle, @last splittable ACK, one at a time


@dataclass(frozen=True)
class Relation:
    name: str
    transform: Callable[[Trace], Trace]
    exact: bool       # events keep their indices: compare indices and counts too


@dataclass
class Row:
    """One relation applied to one trace for one stack."""
    trace: str
    stack: str
    relation: str
    before: tuple
    after: tuple | None      # None: the transform left the reachable traces (see `skipped`)
    skipped: str = ""        # why the transformed trace is invalid, e.g. a §7.6.2 failure

    @property
    def changed(self) -> bool:
        return self.after is not None and self.before != self.after


def _rebuilt(trace: Trace, events: list, what: str) -> Trace:
    """The transformed trace, written and read back: the one trace parser validates it,
    and its lines are those of the canonical text."""
    candidate = Trace(trace.header, events, trace.source)
    return parse_trace_text(dump_trace(candidate), f"{trace.source} ({what})")


def shift_time(trace: Trace, base_us: int) -> Trace:
    """Every event `base_us` later: the same trace on a clock that started earlier.  An
    ACK's `rtt` (the stack's sample, a difference of times) is kept as it is; so is it by
    offset_packet_numbers, which moves no time."""
    return _rebuilt(trace, [ev._replace(t=ev.t + base_us) for ev in trace.events], f"shift +{base_us} us")


def offset_packet_numbers(trace: Trace, offset: int) -> Trace:
    """Every packet number `offset` higher: the same packets later in a connection."""
    def moved(ev):
        if type(ev) is Sent:
            return ev._replace(pn=ev.pn + offset)
        if type(ev) in (Ack, Lost):
            return ev._replace(pns=tuple(pn + offset for pn in ev.pns))
        return ev
    return _rebuilt(trace, [moved(ev) for ev in trace.events], f"pn +{offset}")


def splittable_acks(trace: Trace) -> list:
    """Indices of the ACKs that cover more than one packet."""
    return [i for i, ev in enumerate(trace.events) if type(ev) is Ack and len(ev.pns) > 1]


def split_pns(pns: tuple) -> tuple:
    """Two ascending parts: before the highest ACK range if there are gaps, else halves."""
    gaps = [i for i in range(1, len(pns)) if pns[i] != pns[i - 1] + 1]
    cut = gaps[-1] if gaps else len(pns) // 2
    return pns[:cut], pns[cut:]


def split_ack(ack: Ack) -> tuple:
    """One ACK as two ACK frames processed in sequence at the same time.

    The frame with the largest acknowledged comes first, as when two ACK packets of one
    receive batch arrive reordered: a loss or persistent congestion that the original
    ACK revealed is revealed by that frame, with the original's RTT sample (RFC 9002
    §5.1, Appendix A.7: the sample is taken before loss detection runs), so the trace's
    loss declarations stay reachable.  The first frame carries the ECN-CE mark, so a
    CE-triggered recovery period starts at the same send time (RFC 9002 §7.1, §7.3.2).
    Both frames keep the ack_delay, which the peer reports per frame.  The stack's own
    RTT sample (`rtt`) is that of the original's largest packet: the first frame keeps
    it; the second, whose largest is another packet, drops it (its sample is the
    harness's, t - that packet's send time, as for any ACK without one).
    """
    low, high = split_pns(ack.pns)
    return ack._replace(pns=high), ack._replace(pns=low, ecn_ce=False, rtt=None)


def split_acks_at(trace: Trace, indices) -> Trace:
    chosen = set(indices)
    events = []
    for i, ev in enumerate(trace.events):
        events.extend(split_ack(ev) if i in chosen else (ev,))
    where = f"ACK event {min(chosen)}" if len(chosen) == 1 else f"{len(chosen)} ACKs"
    return _rebuilt(trace, events, f"split {where}")


def _split_all(trace: Trace) -> Trace:
    return split_acks_at(trace, splittable_acks(trace))


def single_split_positions(trace: Trace, count: int = SINGLE_SPLITS) -> list:
    """First, middle and last splittable ACK (fewer when the trace has fewer)."""
    acks = splittable_acks(trace)
    if not acks:
        return []
    picks = [acks[0], acks[len(acks) // 2], acks[-1]][:count]
    return sorted(set(picks))


def relations_for(trace: Trace) -> list:
    """Every relation that applies to this trace (a trace without a multi-packet ACK has no split)."""
    out = [Relation(name, lambda tr, b=base: shift_time(tr, b), True) for name, base in TIME_SHIFTS]
    out += [Relation(name, lambda tr, o=offset: offset_packet_numbers(tr, o), True) for name, offset in PN_OFFSETS]
    if splittable_acks(trace):
        out.append(Relation("split-all-acks", _split_all, False))
        for index in single_split_positions(trace):
            out.append(Relation(f"split-ack@{index}", lambda tr, i=index: split_acks_at(tr, [i]), False))
    return out


def verdict(findings: list, exact: bool) -> tuple:
    """What a relation must preserve; times and details (which quote times) are left out."""
    if exact:
        return tuple(sorted((f.stack, f.invariant, f.status, f.event_index, f.count) for f in findings))
    return tuple(sorted({(f.stack, f.invariant, f.status) for f in findings}))


FAMILIES = ("shift", "pn", "split")


def check_trace(trace: Trace, spec: str, name: str | None = None, families=FAMILIES) -> list:
    """Replay the trace and each transform of it through one stack; one Row per relation
    of the chosen families (the part of a relation's name before '+', '-' or '@')."""
    from .replay import replay
    name = name or trace.source
    base = replay(trace, [spec]).findings
    rows = []
    for relation in relations_for(trace):
        if not relation.name.startswith(tuple(families)):
            continue
        before = verdict(base, relation.exact)
        try:
            transformed = relation.transform(trace)
        except TraceError as exc:
            # The strict validator judges the transformed trace like any other: a split's
            # extra RTT samples can move the RFC 9002 §7.6.2 duration past a persistent
            # congestion the original declared.  No stack's connection could see that
            # trace, so there is no verdict to compare; the row says why.
            rows.append(Row(name, spec, relation.name, before, None, exc.reason))
            continue
        after = replay(transformed, [spec]).findings
        rows.append(Row(name, spec, relation.name, before, verdict(after, relation.exact)))
    return rows


def load_any(path: str) -> Trace:
    """A JSONL trace, or a fuzzer input (.bin) decoded as `ccdiff decode` does."""
    if path.endswith(".bin"):
        from .encoding import decode
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise TraceError(path, None, f"cannot read: {exc.strerror}") from None
        return decode(data, name=Path(path).name)
    return load_trace(path)


def default_trace_paths(root: Path) -> list:
    """examples/*.jsonl and every stored reproducer, sorted."""
    paths = sorted((root / "examples").glob("*.jsonl"))
    paths += sorted(p for p in (root / "fuzz" / "reproducers").glob("*") if p.suffix in (".jsonl", ".bin"))
    return [str(p) for p in paths]


def sim_traces(spec: str, seeds: int) -> list:
    """(name, trace) of every scenario x seeds 0..N-1 (conform's default seeds), recorded
    with SPEC gating its own sends as `ccdiff conform` runs it."""
    from .sim import available_scenarios, load_scenario, simulate
    out = []
    for scenario in available_scenarios():
        loaded = load_scenario(scenario)
        for seed in range(seeds):
            result = simulate(loaded, spec, seed, record=True, check=False)
            out.append((f"sim:{scenario}:seed{seed}", result.trace))
    return out


def describe(v: tuple | None) -> str:
    """A verdict in one cell: invariant[@index xcount] per finding, or 'clean'."""
    if v is None:
        return "n/a"
    if not v:
        return "clean"
    parts = []
    for item in v:
        text = item[1] + ("" if item[2] == "violation" else "(d)")
        if len(item) == 5:
            text += f"@{item[3]}x{item[4]}"
        parts.append(text)
    return " ".join(parts)

"""ddmin's candidates are validated without a text round trip (ccdiff/fuzzing/triage.py
`_valid`): the same trace, line numbers and verdict as writing each candidate out and
parsing it back, which is what it did before (and two thirds of a conform report's time)."""
import random

from ccdiff.fuzzing.triage import _repair, _valid
from ccdiff.paths import project_root
from ccdiff.trace import TraceError, dump_trace, load_trace, parse_trace_text


def _round_trip(trace, events):
    """The earlier _valid: the candidate written out and parsed back."""
    try:
        return parse_trace_text(dump_trace(type(trace)(trace.header, events, source=trace.source)), trace.source)
    except TraceError:
        return None


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return (a.header == b.header and a.events == b.events and a.lines == b.lines and a.source == b.source
            and a.reachability == b.reachability and a.lenient_reason == b.lenient_reason)


def test_candidates_are_judged_as_the_text_round_trip_judges_them():
    rng = random.Random(7)
    paths = sorted((project_root() / "examples").glob("*.jsonl")) + \
        sorted((project_root() / "fuzz" / "reproducers").glob("*.jsonl"))[:12]
    refused = accepted = lenient = 0
    for path in paths:
        trace = load_trace(str(path))
        n = len(trace.events)
        for _ in range(40):
            # ddmin's shapes: a complement of one chunk, or a chunk alone, at random sizes
            size = max(1, n // rng.choice((2, 3, 4, 8, 16)))
            start = rng.randrange(0, max(1, n - size))
            chunk = trace.events[start:start + size]
            events = chunk if rng.random() < 0.3 else trace.events[:start] + trace.events[start + size:]
            repaired = _repair(events)
            old, new = _round_trip(trace, repaired), _valid(trace, repaired)
            assert _same(old, new), (path.name, start, size)
            refused += new is None
            accepted += new is not None
            lenient += new is not None and new.reachability == "lenient"
        # and candidates the validator refuses (time running backwards: the first send again)
        broken = trace.events + [trace.events[0]]
        assert _round_trip(trace, broken) is None and _valid(trace, broken) is None, path.name
        refused += 1
    # the comparison covered strict and lenient candidates
    assert accepted and lenient, (refused, accepted, lenient)

"""Triage turns a lenient reproducer into a strict one, or labels the finding lenient-only."""
from __future__ import annotations

import json
from pathlib import Path

from ccdiff.fuzzing.strictify import LENIENT_ONLY, make_strict
from ccdiff.fuzzing.triage import _repair, _valid, signatures
from ccdiff.trace import Lost, load_trace, parse_trace_text

ROOT = Path(__file__).resolve().parent.parent
LENIENT_DEATH_SPIRAL = ROOT / "tests" / "fixtures" / "death-spiral-lenient.jsonl"
MUTANT = "oracle:idle=last-send"          # measures idle from the last send: the death spiral
KEY = "future-recovery-start--sent-recovery"


def revalidate(trace):
    return lambda events: _valid(trace, _repair(events))


def early_loss_death_spiral():
    """The death-spiral example with its first loss declared 1 ms before the ACK that
    reveals it (RFC 9002 §6.1: nothing after packet 0 is acknowledged yet): lenient."""
    trace = load_trace(str(ROOT / "examples" / "death-spiral.jsonl"))
    events = list(trace.events)
    i = next(i for i, ev in enumerate(events) if type(ev) is Lost)
    events[i] = events[i]._replace(t=events[i].t - 1000)
    early = _valid(trace, events)
    assert early.reachability == "lenient" and "not sent before an acknowledged packet" in early.lenient_reason
    return trace, early


def test_a_lenient_reproducer_is_repaired_into_a_strict_one_that_still_fires():
    """The loss moves to the ACK that acknowledges packet 3 (kPacketThreshold above it,
    RFC 9002 §6.1.1): the strict example again, death spiral intact."""
    original, early = early_loss_death_spiral()
    assert KEY in signatures(early, MUTANT)
    strict, outcome = make_strict(early, lambda t: KEY in signatures(t, MUTANT), revalidate(early))
    assert outcome == "repaired" and strict.reachability == "strict"
    assert strict.events == original.events


def test_the_old_lenient_death_spiral_is_repaired_and_still_fires():
    """The death-spiral example before trace format 2 declared each loss with two later
    packets acknowledged.  Loss detection declares it at the ACK of the third (at +200 us,
    RFC 9002 §6.1.1), before its time threshold: there the death spiral still happens."""
    trace = load_trace(str(LENIENT_DEATH_SPIRAL))
    assert trace.reachability == "lenient" and KEY in signatures(trace, MUTANT)
    strict, outcome = make_strict(trace, lambda t: KEY in signatures(t, MUTANT), revalidate(trace))
    assert outcome == "repaired" and strict.reachability == "strict"
    old = [ev for ev in trace.events if type(ev) is Lost]
    new = [ev for ev in strict.events if type(ev) is Lost]
    assert [ev.pns for ev in new] == [ev.pns for ev in old]
    assert all(b.t - a.t == 200 for a, b in zip(old, new))


def test_a_repair_that_loses_the_finding_is_labelled_lenient_only():
    trace = load_trace(str(LENIENT_DEATH_SPIRAL))
    assert make_strict(trace, lambda t: False, revalidate(trace)) == (None, LENIENT_ONLY)


def test_a_loss_the_ack_overtakes_cannot_be_repaired_and_is_labelled():
    """Packet 0 is acknowledged 500 us after it was declared lost: loss detection would
    not have declared it by then, and moving the loss later puts it after its own ACK."""
    rows = [{"ccdiff_trace": 1, "max_datagram_size": 1200},
            {"t": 0, "ev": "sent", "pn": 0, "bytes": 1200}, {"t": 0, "ev": "sent", "pn": 1, "bytes": 1200},
            {"t": 10000, "ev": "ack", "pns": [1]}, {"t": 10000, "ev": "lost", "pns": [0]},
            {"t": 10500, "ev": "ack", "pns": [0]}]
    trace = parse_trace_text("".join(json.dumps(r) + "\n" for r in rows))
    assert trace.reachability == "lenient"
    assert make_strict(trace, lambda t: True, revalidate(trace)) == (None, LENIENT_ONLY)


def test_an_ack_delay_above_max_ack_delay_is_clamped():
    rows = [{"ccdiff_trace": 1, "max_datagram_size": 1200, "max_ack_delay": 20000},
            {"t": 0, "ev": "sent", "pn": 0, "bytes": 1200},
            {"t": 50000, "ev": "ack", "pns": [0], "ack_delay": 25000}]
    trace = parse_trace_text("".join(json.dumps(r) + "\n" for r in rows))
    strict, outcome = make_strict(trace, lambda t: True, revalidate(trace))
    assert outcome == "repaired" and strict.events[-1].ack_delay == 20000


def test_a_strict_trace_is_kept_as_found():
    trace = load_trace(str(ROOT / "examples" / "death-spiral.jsonl"))
    assert make_strict(trace, lambda t: True, revalidate(trace)) == (trace, "strict as found")


def test_a_silence_past_the_pto_is_cut_to_the_deadline_and_the_quiche_css_bug_still_fires():
    """The quiche HyStart++ reproducer as the fuzzer found it: packet 21 in flight for 52 s
    with nothing sent, which quiche's own PTO ends with a probe (RFC 9002 §6.2.4).  The
    repair moves everything from that silence on earlier, to the PTO deadline (t=75 ms); the
    7 s idle with nothing in flight that the bug needs keeps its length, and quiche@0.30.0
    still counts it in t (idle-inflation).  The stored reproducer is this repair."""
    key = "idle-inflation--ack-congestion_avoidance"
    trace = load_trace(str(ROOT / "tests" / "fixtures" / "quiche-css-epoch-counts-idle-lenient.jsonl"))
    assert trace.reachability == "lenient" and "the PTO timer expires at t=75000" in trace.lenient_reason
    assert key in signatures(trace, "quiche@0.30.0")
    strict, outcome = make_strict(trace, lambda t: key in signatures(t, "quiche@0.30.0"), revalidate(trace))
    assert outcome == "repaired" and strict.reachability == "strict"
    assert [ev.t for ev in strict.events][:4] == [10_000, 20_000, 20_000, 75_000]
    assert all(b.t - a.t == 52_020_000 - 75_000 for a, b in zip(strict.events[3:], trace.events[3:]))
    stored = load_trace(str(ROOT / "fuzz" / "reproducers" / "quiche-css-epoch-counts-idle.jsonl"))
    assert stored.reachability == "strict" and stored.events == strict.events

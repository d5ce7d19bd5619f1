"""Turn a lenient reproducer into a strict one, or say that it cannot be done.

A fuzzer explores lenient space: losses its loss detection would not declare yet, ACK
delays above the peer's max_ack_delay (docs/trace-format.md, "Strict or lenient").  A
finding is only worth a bug report if a real connection can produce it, so triage, after
minimizing, repairs the timings the way loss detection would have set them and keeps the
finding only if the same signature still fires:

- an `ack` whose ack_delay exceeds max_ack_delay gets max_ack_delay (RFC 9000 §18.2: the
  peer never reports more);
- a `lost` that RFC 9002 §6.1 would not declare yet moves later, to the first instant
  loss detection would declare it: the ACK that acknowledges a packet kPacketThreshold
  (3) above it (§6.1.1), or the expiry of its time threshold, sent time + 9/8 x
  max(smoothed_rtt, latest_rtt) (§6.1.2), whichever comes first; with the
  `persistent_congestion` that follows it;
- a `lost` of a packet after which nothing is ever acknowledged is dropped: loss detection
  would never declare it (RFC 9002 §6.1 needs an acknowledged later packet);
- a silence with packets in flight that outlasts the PTO (RFC 9002 §6.2: the connection
  sends a probe when its timer expires) is cut short: the event after it, and every later
  one, move earlier so that it lands at the PTO deadline.  Fuzzers make such silences by
  chance (a 52 s one in quiche-css-epoch-counts-idle); the spacing of everything after
  it, idle periods with nothing in flight included, is kept.

One fix at a time, re-validating after each, so every step sees the RTT estimate that the
previous ones produced.  Outcome labels (finding.json "reachability_repair"):
  "strict as found"   the minimized trace was strict already
  "repaired"          made strict, the signature still fires
  LENIENT_ONLY        could not be made strict with the signature intact
"""
from __future__ import annotations

import re

from ..ledger import Ledger
from ..reach import K_PACKET_THRESHOLD, PTO_EXPIRES, loss_delay_us
from ..trace import Ack, Lost, PersistentCongestion, Sent, Trace

LENIENT_ONLY = "lenient trace only — not reachable as found"
MAX_FIXES = 64            # timing fixes per reproducer (minimized ones have a handful of events)
_LINE = re.compile(r"line (\d+): ")
_PTO_DEADLINE = re.compile(re.escape(PTO_EXPIRES) + r"(\d+)")


def make_strict(trace: Trace, still_fires, revalidate) -> tuple:
    """(strict trace or None, outcome label).

    still_fires(trace) -> bool: does the finding's signature still fire on it.
    revalidate(events) -> Trace | None: the events parsed and judged again (None if invalid).
    """
    if trace.reachability == "strict":
        return trace, "strict as found"
    current = trace
    for _ in range(MAX_FIXES):
        events = _fix_first(current)
        if events is None:
            return None, LENIENT_ONLY
        candidate = revalidate(events)
        if candidate is None:
            return None, LENIENT_ONLY
        if candidate.reachability == "strict":
            return (candidate, "repaired") if still_fires(candidate) else (None, LENIENT_ONLY)
        current = candidate
    return None, LENIENT_ONLY


def _fix_first(trace: Trace) -> list | None:
    """The events with the first lenient event repaired, or None when timing cannot fix it."""
    match = _LINE.match(trace.lenient_reason)
    if not match or int(match.group(1)) not in trace.lines:
        return None
    index = trace.lines.index(int(match.group(1)))
    events = list(trace.events)
    ev = events[index]
    pto = _PTO_DEADLINE.search(trace.lenient_reason)
    if pto:
        return _cut_silence(events, index, int(pto.group(1)))
    if type(ev) is Ack:
        if ev.ack_delay <= trace.header.max_ack_delay:
            return None
        events[index] = ev._replace(ack_delay=trace.header.max_ack_delay)
        return events
    if type(ev) is Lost:
        return _delay_loss(trace, events, index)
    return None


def _cut_silence(events: list, index: int, deadline: int) -> list | None:
    """Move events[index:] earlier so that events[index] comes at the PTO deadline (or right
    after the event before it): the probe the connection sends there is not in the trace, so
    the silence is what cannot be; the events after it keep their spacing."""
    land = max(deadline, events[index - 1].t if index else 0)
    shift = events[index].t - land
    if shift <= 0:
        return None
    # An ACK moved earlier whose largest packet was sent before the cut took a shorter
    # round trip than the stack's own sample (`rtt`) says: that sample is dropped.
    before = {ev.pn for ev in events[:index] if type(ev) is Sent}

    def moved(ev):
        if type(ev) is Ack and ev.rtt is not None and ev.pns[-1] in before:
            return ev._replace(t=ev.t - shift, rtt=None)
        return ev._replace(t=ev.t - shift)
    return events[:index] + [moved(ev) for ev in events[index:]]


def _delay_loss(trace: Trace, events: list, index: int) -> list | None:
    """Move events[index] (a `lost`) to the first instant RFC 9002 §6.1 declares it: the ACK
    that puts kPacketThreshold later packets above it, or its time threshold, if earlier."""
    ledger = Ledger(trace.header)
    sent_at, largest_acked = {}, -1
    for ev in events[:index]:
        ledger.resolve(ev)
        if type(ev) is Ack:
            largest_acked = max(largest_acked, ev.pns[-1])
        elif hasattr(ev, "pn"):
            sent_at[ev.pn] = ev.t
    lost = events[index]
    if any(pn not in sent_at for pn in lost.pns):
        return None
    # RFC 9002 §6.1: a packet is declared lost only once a later packet is acknowledged,
    # then when kPacketThreshold later packets are (§6.1.1, at that ACK) or its time
    # threshold expires (§6.1.2, the loss timer): the first instant either holds.
    newest = max(lost.pns)
    deadline = max(sent_at[pn] for pn in lost.pns) + loss_delay_us(ledger.rtt.smoothed, ledger.rtt.latest)
    largest, when = largest_acked, None
    if largest > newest:
        when = max(lost.t, deadline)
    for ev in events[index + 1:]:
        if when is not None and ev.t >= when:
            break
        if type(ev) is Ack:
            largest = max(largest, ev.pns[-1])
            if largest >= newest + K_PACKET_THRESHOLD:
                when = ev.t
                break
            if largest > newest and when is None:
                when = max(ev.t, deadline)
    if when is None:
        # No later packet is ever acknowledged: loss detection never declares it, so the
        # connection would not have (the packet stays in flight; its PC goes with it).
        drop = 2 if index + 1 < len(events) and type(events[index + 1]) is PersistentCongestion else 1
        return events[:index] + events[index + drop:]
    if when <= lost.t:
        return None                       # already late enough: not a timing problem
    moved = [lost._replace(t=when)]
    rest = events[:index] + events[index + 1:]
    if index + 1 < len(events) and type(events[index + 1]) is PersistentCongestion \
            and events[index + 1].t == lost.t:
        moved.append(PersistentCongestion(when))
        rest = events[:index] + events[index + 2:]
    # After every event up to that instant; an ACK at that same instant keeps coming after
    # the loss it revealed (docs/trace-format.md: a loss is written before its ACK).
    at = index
    while at < len(rest) and (rest[at].t < when or (rest[at].t == when and type(rest[at]) is not Ack)):
        at += 1
    return rest[:at] + moved + rest[at:]

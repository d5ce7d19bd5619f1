"""The ccdiff trace format: JSON Lines, a versioned header, then events.

Example (docs/trace-format.md has the full reference)::

    {"ccdiff_trace": 2, "max_datagram_size": 1200}
    {"t": 0, "ev": "sent", "pn": 0, "bytes": 1200}
    {"t": 1000, "ev": "app_idle"}
    {"t": 10000, "ev": "ack", "pns": [0], "ack_delay": 0}

Format 2 adds the application's own events: ``app_idle`` (a send found no
application data to send) and ``app_data`` (the application has data again).
Format 1 files, with per-packet ``app_limited`` flags, stay readable.

Parsing validates as it goes, so a trace that loads is causally consistent:
time never goes backwards, packet numbers increase, an ACK or a loss names
only packets that were sent and are still unacknowledged.  Every error names
the file, the line and what was expected.
"""
from __future__ import annotations

import json
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Union

from .reach import (DEFAULT_MAX_ACK_DELAY_US, loss_detection_failure, persistent_congestion_failure,
                    pto_failure, pto_period_us)
from .rtt import Rtt

TRACE_VERSION = 2                 # the newest format; a trace without app events is written as 1
TRACE_VERSIONS = (1, 2)
DEFAULT_MAX_DATAGRAM_SIZE = 1200
DEFAULT_INITIAL_RTT_US = 333_000  # RFC 9002 §6.2.2: kInitialRtt = 333 ms
MAX_PACKET_BYTES = 65_527         # RFC 9000 §18.2: max_udp_payload_size upper bound
MAX_TIME_US = 2**53               # well inside int64 and exact in a double
MAX_PN = 2**62 - 1                # RFC 9000 §17.1
MAX_ACK_DELAY_LIMIT_US = 16_383_000  # RFC 9000 §18.2: max_ack_delay values of 2^14 ms or more are invalid
# Caps checked before anything is expanded, so memory stays bounded by the work: one ACK
# or loss names at most MAX_PNS_PER_EVENT packets in total (each range alone was capped,
# the sum was not: 20 ranges of 1M packets took 1.59 GB before their error), and a line
# is read at most MAX_LINE_CHARS at a time (a file without newlines, /dev/zero, is refused
# at its first line instead of being read whole).
MAX_PNS_PER_EVENT = 1_000_000
MAX_LINE_CHARS = 8 << 20           # 1M packet numbers written one by one fit


class TraceError(Exception):
    """A malformed or impossible trace: where, and what was expected."""

    def __init__(self, source: str, line: int | None, reason: str):
        # line None: the file as a whole (it cannot be read); "path:0:" would point nowhere.
        super().__init__(f"{source}:{line}: {reason}" if line else f"{source}: {reason}")
        self.source, self.line, self.reason = source, line, reason


class Sent(NamedTuple):
    t: int
    pn: int
    bytes: int
    app_limited: bool = False


class Ack(NamedTuple):
    t: int
    pns: tuple  # newly acknowledged packet numbers, ascending
    ack_delay: int = 0
    ecn_ce: bool = False
    # The stack's own RTT sample for this ACK (µs, RFC 9002 §5.1 latest_rtt), where it
    # reported one (`ccdiff import` from a logged latest_rtt); None: the harness's, t - the
    # largest packet's send time.  Handed to adapters as Resolved.stack_rtt.
    rtt: int | None = None


class Lost(NamedTuple):
    t: int
    pns: tuple  # packets declared lost, ascending


class PersistentCongestion(NamedTuple):
    t: int


class AppIdle(NamedTuple):
    """Format 2: a send found no application data (the application is idle, RFC 9438 §5.8)."""
    t: int


class AppData(NamedTuple):
    """Format 2: the application has data to send again."""
    t: int


Event = Union[Sent, Ack, Lost, PersistentCongestion, AppIdle, AppData]
EVENT_NAMES = {Sent: "sent", Ack: "ack", Lost: "lost", PersistentCongestion: "persistent_congestion",
               AppIdle: "app_idle", AppData: "app_data"}
APP_EVENTS = (AppIdle, AppData)


@dataclass
class Header:
    max_datagram_size: int = DEFAULT_MAX_DATAGRAM_SIZE
    initial_rtt_us: int = DEFAULT_INITIAL_RTT_US
    name: str = ""
    comment: str = ""
    max_ack_delay: int = DEFAULT_MAX_ACK_DELAY_US  # the peer's, µs (RFC 9000 §18.2)
    version: int = 1                               # "ccdiff_trace"; 2 when it has app events


@dataclass
class Trace:
    header: Header
    events: list
    source: str = "<trace>"
    lines: list = field(default_factory=list)  # source line of each event
    # "strict": every event is one a real connection's loss detection makes (RFC 9002 §6.1,
    # §7.6.2, ack_delay <= max_ack_delay); "lenient" names the first line that is not
    # (lenient_reason).  None until judged (judge_reachability).
    reachability: str | None = None
    lenient_reason: str = ""

    def line_of(self, index: int) -> int:
        return self.lines[index] if index < len(self.lines) else 0

    @property
    def n_events(self) -> int:
        return len(self.events)

    def stream(self):
        """The events, one by one (what replay reads; a StreamedTrace reads its file)."""
        return iter(self.events)


_HEADER_FIELDS = {"ccdiff_trace", "max_datagram_size", "initial_rtt_us", "max_ack_delay", "name", "comment"}
_EVENT_FIELDS = {
    "sent": ({"t", "ev", "pn", "bytes"}, {"app_limited", "logged"}),
    "ack": ({"t", "ev", "pns"}, {"ack_delay", "ecn_ce", "rtt", "logged"}),
    "lost": ({"t", "ev", "pns"}, {"logged"}),
    "persistent_congestion": ({"t", "ev"}, {"logged"}),
    "app_idle": ({"t", "ev"}, {"logged"}),
    "app_data": ({"t", "ev"}, {"logged"}),
}
# "logged" (any event, optional): what the stack itself logged after this event, kept by
# `ccdiff import` from a qlog (ccdiff/qlog_import.py) for `ccdiff fidelity`.  Replay ignores it.
_LOGGED_FIELDS = {"cwnd", "ssthresh", "bytes_in_flight", "line", "record"}


def _check_logged(obj: dict, fail) -> None:
    logged = obj["logged"]
    if not isinstance(logged, dict):
        fail(f'"logged" must be an object with {", ".join(sorted(_LOGGED_FIELDS))}')
    for key, value in logged.items():
        if key not in _LOGGED_FIELDS:
            fail(f'unknown field "{key}" in "logged"; known: {", ".join(sorted(_LOGGED_FIELDS))}')
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            fail(f'"logged" field "{key}" must be an integer >= 0, got {json.dumps(value)}')


def _int(obj: dict, key: str, lo: int, hi: int, fail) -> int:
    value = obj[key]
    # bool is a subclass of int in Python; a trace saying true for a time is wrong.
    if not isinstance(value, int) or isinstance(value, bool):
        fail(f'"{key}" must be an integer, got {json.dumps(value)}')
    if not lo <= value <= hi:
        fail(f'"{key}" must be between {lo} and {hi}, got {value}')
    return value


def _bool(obj: dict, key: str, fail) -> bool:
    value = obj.get(key, False)
    if not isinstance(value, bool):
        fail(f'"{key}" must be true or false, got {json.dumps(value)}')
    return value


def _pns(obj: dict, fail) -> tuple:
    items = obj["pns"]
    if not isinstance(items, list) or not items:
        fail('"pns" must be a non-empty list of packet numbers or [lo, hi] ranges')
    _check_pns_total(items, fail)
    out = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= MAX_PN:
            out.append(item)
        elif (isinstance(item, list) and len(item) == 2
              and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_PN for x in item)):
            lo, hi = item
            if lo > hi:
                fail(f"range [{lo}, {hi}] in \"pns\" has lo > hi")
            if hi - lo > 1_000_000:
                fail(f"range [{lo}, {hi}] in \"pns\" is larger than 1000000 packets")
            out.extend(range(lo, hi + 1))
        else:
            fail(f'"pns" items must be packet numbers or [lo, hi] ranges, got {json.dumps(item)}')
    pns = tuple(sorted(set(out)))
    if len(pns) != len(out):
        fail('"pns" names a packet number twice')
    return pns


def _check_pns_total(items: list, fail) -> None:
    """Refuse an event naming more than MAX_PNS_PER_EVENT packets before expanding its ranges."""
    total = 0
    for item in items:
        if (isinstance(item, list) and len(item) == 2 and all(type(x) is int for x in item)
                and item[0] <= item[1]):
            total += item[1] - item[0] + 1
        else:
            total += 1   # a packet number, or an item the loop below rejects by name
        if total > MAX_PNS_PER_EVENT:
            fail(f'"pns" names more than {MAX_PNS_PER_EVENT} packets in one event')


class Causality:
    """Tracks packets so that impossible events are rejected at their line."""

    def __init__(self):
        # Every packet sent, in ~18 bytes each (arrays indexed by send order): as dicts and
        # sets of ints a 10-million-event trace's packets took most of a gigabyte.
        self.sent_pns = array("q")          # ascending (packet numbers increase)
        self.sent_ts = array("q")           # send time of each
        self.acked = bytearray()            # 1 where acknowledged
        self.lost = bytearray()             # 1 where declared lost
        self.lost_open: dict[int, int] = {}  # pn -> send time, declared lost and not acknowledged
        self.last_t = 0
        self.last_pn = -1
        self.last_event = None
        self.app_idle = False               # format 2: between app_idle and app_data
        self.start(Header())

    def start(self, header: Header) -> None:
        # The trace's own RFC 9002 §5 estimate, as the ledger computes it, for §7.6.2.
        self.rtt = Rtt(header.initial_rtt_us)
        self.max_ack_delay = header.max_ack_delay
        self.first_sample_t = None
        self.loss_batch: list = []          # (pn, sent) of the lost events at last_t
        self.pending_pc = None              # (t, reason, fail) of a PC awaiting its ACK
        self.largest_acked = -1
        self.pending_losses: list = []      # (line, Lost) at one time, awaiting their ACK
        self.outstanding = 0                # packets in flight: sent, neither acked nor lost
        self.last_send_t = 0                # RFC 9002 A.8: the PTO timer counts from here
        self.pto_count = 0                  # probes sent since the last ACK (§6.2.1 backoff)
        self.pto_deadline = None            # when the PTO timer expires; None: nothing in flight
        self.pto_period = self.pto_period_now()   # PTO x 2^pto_count, moved by ACKs and probes
        self.lenient_reason = ""            # the first line that makes the trace lenient
        self.event_index = -1               # of the event being checked
        self.probes: list = []              # indices of the sends the PTO timer made (probe_sends)

    def index(self, pn: int) -> int:
        """Position of packet pn in send order, -1 if it was never sent."""
        pns = self.sent_pns
        if not pns:
            return -1
        i = pn - pns[0]
        if 0 <= i < len(pns) and pns[i] == pn:   # contiguous numbering, the usual case
            return i
        i = bisect_left(pns, pn)
        return i if i < len(pns) and pns[i] == pn else -1

    def sent_at(self, pn: int) -> int:
        return self.sent_ts[self.index(pn)]

    def note_lenient(self, line: int, reason: str) -> None:
        if not self.lenient_reason:
            self.lenient_reason = f"line {line}: {reason}"

    def judge_losses(self) -> None:
        """Strictness of the pending losses: RFC 9002 §6.1 on the state now.

        Called after the ACK that revealed them, when one follows at the same time (the
        stack ran loss detection after taking that ACK, Appendix A.7), else as timer losses.
        """
        for line, ev in self.pending_losses:
            for pn in ev.pns:
                reason = loss_detection_failure(pn, self.sent_at(pn), ev.t, self.largest_acked,
                                                self.rtt.smoothed, self.rtt.latest)
                if reason:
                    self.note_lenient(line, reason)
                    break
        self.pending_losses = []

    def pc_failure(self):
        lost = sorted(self.lost_open.items())
        return persistent_congestion_failure(
            lost, {pn for pn, _ in self.loss_batch}, self.first_sample_t, self.rtt.smoothed,
            self.rtt.rttvar, self.max_ack_delay, self.acked_between)

    def settle_persistent_congestion(self, ev=None) -> None:
        """Judge a PC that failed as a timer loss once its next event is known.

        A loss declared by the timer is judged on the state before any later ACK.  A loss
        revealed by an ACK comes before that ACK in the trace (docs/trace-format.md), but
        the stack judged §7.6.2 after taking the ACK's RTT sample and acknowledgements
        (RFC 9002 Appendix A.7: OnAckReceived updates the RTT before
        DetectAndRemoveLostPackets): so an ACK at the same time gets a second chance.
        """
        t, reason, fail = self.pending_pc
        self.pending_pc = None
        if ev is not None:
            reason = self.pc_failure()
        if reason:
            fail(f"persistent congestion at t={t}: {reason}")

    def finish(self) -> None:
        if self.pending_pc:
            self.settle_persistent_congestion()
        if self.pending_losses:
            self.judge_losses()

    def acked_between(self, lo: int, hi: int) -> bool:
        i, j = bisect_right(self.sent_pns, lo), bisect_right(self.sent_pns, hi - 1)
        return self.acked.find(1, i, j) >= 0

    def check(self, ev, fail, line: int = 0) -> None:
        self.event_index += 1
        if ev.t < self.last_t:
            fail(f"time goes backwards: t={ev.t} after t={self.last_t}")
        kind = type(ev)
        if self.pto_deadline is not None and ev.t >= self.pto_deadline:
            self.check_pto(ev, line)
        loss_ack = False
        if self.pending_losses:
            loss_t = self.pending_losses[0][1].t
            loss_ack = kind is Ack and ev.t == loss_t
            if not loss_ack and not (kind in (Lost, PersistentCongestion) and ev.t == loss_t):
                self.judge_losses()
        revealing_ack = self.pending_pc is not None and kind is Ack and ev.t == self.pending_pc[0]
        if self.pending_pc is not None and not revealing_ack:
            self.settle_persistent_congestion()
        if kind is AppIdle or kind is AppData:
            self.check_app(ev, fail)
        elif kind is Sent:
            if ev.pn <= self.last_pn:
                fail(f"packet number {ev.pn} is not above the previous one ({self.last_pn}); "
                     "QUIC packet numbers increase (RFC 9000 §12.3)")
            self.sent_pns.append(ev.pn)
            self.sent_ts.append(ev.t)
            self.acked.append(0)
            self.lost.append(0)
            self.last_pn = ev.pn
            self.outstanding += 1
            self.last_send_t = ev.t
        elif kind is Ack:
            where = []
            for pn in ev.pns:
                i = self.index(pn)
                if i < 0:
                    fail(f"ACK of packet {pn}, which was never sent")
                if self.acked[i]:
                    fail(f"packet {pn} was already acknowledged; list only newly acknowledged packets")
                if self.sent_ts[i] >= ev.t:
                    fail(f"ACK at t={ev.t} of packet {pn} sent at t={self.sent_ts[i]}: "
                         "an ACK needs a positive round-trip time")
                where.append(i)
            for pn, i in zip(ev.pns, where):
                self.acked[i] = 1
                if self.lost[i]:
                    del self.lost_open[pn]
                else:
                    self.outstanding -= 1
            self.pto_count = 0                # RFC 9002 A.7: an ACK resets the backoff
            # RFC 9002 §5.1, as the ledger takes it: the largest acknowledged gives the sample.
            self.rtt.update(ev.t - self.sent_ts[where[-1]], ev.ack_delay)
            if self.first_sample_t is None:
                self.first_sample_t = ev.t
            self.largest_acked = max(self.largest_acked, ev.pns[-1])
            if ev.ack_delay > self.max_ack_delay:
                self.note_lenient(line, f"ack_delay {ev.ack_delay} us exceeds max_ack_delay "
                                        f"{self.max_ack_delay} us (RFC 9000 §18.2)")
            if revealing_ack:
                self.settle_persistent_congestion(ev)
            if loss_ack:
                self.judge_losses()
        elif kind is Lost:
            batch = []
            for pn in ev.pns:
                i = self.index(pn)
                if i < 0:
                    fail(f"loss of packet {pn}, which was never sent")
                if self.acked[i]:
                    fail(f"loss of packet {pn}, which was already acknowledged")
                if self.lost[i]:
                    fail(f"packet {pn} was already declared lost")
                batch.append((pn, self.sent_ts[i]))
            for pn, sent in batch:
                self.lost[self.index(pn)] = 1
                self.lost_open[pn] = sent
            self.outstanding -= len(ev.pns)
            if type(self.last_event) is not Lost or self.last_event.t != ev.t:
                self.loss_batch = []
            self.loss_batch += batch
            self.pending_losses.append((line, ev))
        elif kind is PersistentCongestion:
            prev = self.last_event
            if type(prev) is not Lost or prev.t != ev.t:
                fail('"persistent_congestion" must directly follow a "lost" event at the same time '
                     "(loss detection declares it, RFC 9002 §7.6)")
            reason = self.pc_failure()
            if reason:
                self.pending_pc = (ev.t, reason, fail)
        if kind is Ack:
            self.pto_period = self.pto_period_now()
        if kind is Sent or kind is Ack or kind is Lost:   # what arms, moves or stops the PTO timer
            self.pto_deadline = self.last_send_t + self.pto_period if self.outstanding > 0 else None
        self.last_t = ev.t
        self.last_event = ev

    def pto_period_now(self) -> int:
        """RFC 9002 §6.2.1 and Appendix A.8: PTO backed off by 2^pto_count."""
        return pto_period_us(self.rtt.smoothed, self.rtt.rttvar, self.max_ack_delay) << self.pto_count

    def check_pto(self, ev, line: int) -> None:
        """RFC 9002 §6.2: the PTO timer ends any silence while packets are in flight."""
        reason = pto_failure(ev.t, self.pto_deadline, self.last_send_t, self.outstanding)
        if reason:
            self.note_lenient(line, reason)
        elif type(ev) is Sent:
            self.probes.append(self.event_index)
            self.pto_count += 1               # this send is the probe (RFC 9002 A.9)
            self.pto_period = self.pto_period_now()

    def check_app(self, ev, fail) -> None:
        """Format 2 application events alternate: idle, data, idle, ...

        An application that has nothing to send cannot run out again, nor get "data again"
        while it has data.  Loss detection's "lost" + "persistent_congestion" pair is one
        step of the connection: no application event comes between them.
        """
        if type(ev) is AppIdle:
            if self.app_idle:
                fail('"app_idle" while the application is already idle (no "app_data" since)')
            self.app_idle = True
        else:
            if not self.app_idle:
                fail('"app_data" while the application is not idle (expected an "app_idle" before it)')
            self.app_idle = False


def _parse_header(obj, fail) -> Header:
    if not isinstance(obj, dict) or "ccdiff_trace" not in obj:
        fail('the first line must be the header, e.g. {"ccdiff_trace": 1, "max_datagram_size": 1200}')
    unknown = set(obj) - _HEADER_FIELDS
    if unknown:
        fail(f"unknown header field {sorted(unknown)[0]!r}; known: {', '.join(sorted(_HEADER_FIELDS))}")
    if obj["ccdiff_trace"] not in TRACE_VERSIONS or type(obj["ccdiff_trace"]) is not int:
        fail(f"unsupported trace version {json.dumps(obj['ccdiff_trace'])}; this ccdiff reads versions "
             f"{' and '.join(map(str, TRACE_VERSIONS))}")
    header = Header(version=obj["ccdiff_trace"])
    if "max_datagram_size" in obj:
        header.max_datagram_size = _int(obj, "max_datagram_size", 1200, MAX_PACKET_BYTES, fail)
    if "initial_rtt_us" in obj:
        header.initial_rtt_us = _int(obj, "initial_rtt_us", 1, 60_000_000, fail)
    if "max_ack_delay" in obj:
        header.max_ack_delay = _int(obj, "max_ack_delay", 0, MAX_ACK_DELAY_LIMIT_US, fail)
    for key in ("name", "comment"):
        if key in obj:
            if not isinstance(obj[key], str):
                fail(f'"{key}" must be a string')
            try:   # a lone surrogate ("\udcff") parses as JSON but no report can write it
                obj[key].encode("utf-8")
            except UnicodeEncodeError as exc:
                fail(f'"{key}" holds a lone surrogate at character {exc.start}: not Unicode text')
            setattr(header, key, obj[key])
    return header


def _parse_event(obj, fail, version: int = TRACE_VERSION):
    if not isinstance(obj, dict):
        fail(f"an event must be a JSON object, got {type(obj).__name__}")
    name = obj.get("ev")
    if name not in _EVENT_FIELDS:
        fail(f'unknown or missing "ev" {json.dumps(name)}; expected one of: {", ".join(_EVENT_FIELDS)}')
    required, optional = _EVENT_FIELDS[name]
    missing = required - set(obj)
    if missing:
        fail(f'"{name}" event is missing field "{sorted(missing)[0]}"')
    unknown = set(obj) - required - optional
    if unknown:
        fail(f'unknown field "{sorted(unknown)[0]}" in "{name}" event; '
             f"known: {', '.join(sorted(required | optional))}")
    t = _int(obj, "t", 0, MAX_TIME_US, fail)
    if "logged" in obj:
        _check_logged(obj, fail)
    if name in ("app_idle", "app_data"):
        if version < 2:
            fail(f'"{name}" is a format 2 event: the header must say "ccdiff_trace": 2')
        return AppIdle(t) if name == "app_idle" else AppData(t)
    if name == "sent":
        return Sent(t, _int(obj, "pn", 0, MAX_PN, fail), _int(obj, "bytes", 1, MAX_PACKET_BYTES, fail),
                    _bool(obj, "app_limited", fail))
    if name == "ack":
        delay = _int(obj, "ack_delay", 0, MAX_TIME_US, fail) if "ack_delay" in obj else 0
        rtt = _int(obj, "rtt", 1, MAX_TIME_US, fail) if "rtt" in obj else None
        return Ack(t, _pns(obj, fail), delay, _bool(obj, "ecn_ce", fail), rtt)
    if name == "lost":
        return Lost(t, _pns(obj, fail))
    return PersistentCongestion(t)


def read_lines(lines: Iterable[str], source: str, causality: "Causality"):
    """Parse and validate as a stream: yields the Header, then (line, event) for each event.

    Nothing is kept but what the causality checks need, so a trace of any length is read
    in bounded memory; causality.finish() after the last event completes the checks.
    """
    header = None
    lineno = 0
    for lineno, raw in enumerate(lines, start=1):
        def fail(reason, _line=lineno):
            raise TraceError(source, _line, reason)
        text = raw.strip()
        if not text:
            continue
        try:
            obj = json.loads(text)
            # A key given twice is JSON that means two things (json keeps the last): refused.
            # Counting '":' is cheap; only a line where the count differs is parsed again.
            if isinstance(obj, dict) and text.count('":') != len(obj):
                json.loads(text, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError as exc:
            fail(f"not valid JSON ({exc.msg} at column {exc.colno})")
        except RecursionError:
            fail("not valid JSON (nested too deeply)")
        except ValueError as exc:     # a number of thousands of digits, a duplicated key
            fail("not valid JSON for a trace (" + ("a number of more than 4300 digits" if "digits" in str(exc)
                                                    else str(exc)) + ")")
        if header is None:
            header = _parse_header(obj, fail)
            causality.start(header)
            yield header
            continue
        ev = _parse_event(obj, fail, header.version)
        causality.check(ev, fail, lineno)
        yield lineno, ev
    if header is None:
        raise TraceError(source, max(lineno, 1), "empty trace: expected a header line")


def _unique_keys(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the key {json.dumps(twice)} is given twice")
    return obj


def parse_lines(lines: Iterable[str], source: str = "<trace>") -> Trace:
    """Parse and validate a trace; raises TraceError naming source and line."""
    causality = Causality()
    return _collect(read_lines(lines, source, causality), causality, source)


def _collect(reader, causality: Causality, source: str) -> Trace:
    """The whole trace in memory, from read_lines or read_file."""
    header = next(reader)
    events, event_lines = [], []
    for lineno, ev in reader:
        events.append(ev)
        event_lines.append(lineno)
    causality.finish()
    return Trace(header, events, source, event_lines, *reachability_of(causality))


def reachability_of(causality: Causality) -> tuple:
    return ("lenient", causality.lenient_reason) if causality.lenient_reason else ("strict", "")


def judge_reachability(trace: Trace) -> Trace:
    """Fill trace.reachability for a trace built in memory (decoder, simulator); returns it."""
    if trace.reachability is None:
        causality = Causality()
        causality.start(trace.header)
        for index, ev in enumerate(trace.events):
            line = trace.line_of(index)
            def fail(reason, _line=line):
                raise TraceError(trace.source, _line, reason)
            causality.check(ev, fail, line)
        causality.finish()
        trace.reachability, trace.lenient_reason = reachability_of(causality)
    return trace


def probe_sends(trace: Trace) -> frozenset:
    """The indices of `trace`'s sends that the PTO timer made (RFC 9002 §6.2.4 probes), as
    the validator's causality pass finds them; the trace is valid (parsed or built so)."""
    causality = Causality()
    causality.start(trace.header)
    for index, ev in enumerate(trace.events):
        causality.check(ev, lambda reason: None, trace.line_of(index))
    return frozenset(causality.probes)


def parse_trace_text(text: str, source: str = "<string>") -> Trace:
    return parse_lines(text.splitlines(), source)


def load_trace(path: str) -> Trace:
    """Read a trace file; unreadable or non-UTF-8 files become TraceError too."""
    causality = Causality()
    return _collect(read_file(path, causality), causality, path)


def read_file(path: str, causality: Causality):
    """read_lines over a file: yields the Header, then (line, event); unreadable or
    non-UTF-8 files become TraceError too."""
    if "\0" in path:   # open() would raise ValueError, not OSError
        raise TraceError(path.replace("\0", "\\0"), None, "cannot read: the path contains a NUL byte")
    try:
        with open(path, encoding="utf-8") as fh:
            yield from read_lines(_bounded_lines(fh, path), path, causality)
    except OSError as exc:
        raise TraceError(path, None, f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        line, column = _first_non_utf8(path)
        raise TraceError(path, line, f"not UTF-8 text (byte {column} of the line)") from None


def _first_non_utf8(path: str) -> tuple:
    """(line, byte offset in it, 1-based) of the first byte that is not UTF-8: the decoder's
    own offset counts from its last buffer, not from the start of the file."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return number, exc.start + 1
    return None, 0


def _bounded_lines(fh, source: str):
    """The file's lines, each read with a length cap (bounded memory on any input)."""
    lineno = 0
    while True:
        line = fh.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        lineno += 1
        if len(line) > MAX_LINE_CHARS:
            raise TraceError(source, lineno, f"line longer than {MAX_LINE_CHARS} characters")
        yield line


def _ranges(pns: tuple) -> list:
    """Canonical pns: runs of two or more become [lo, hi]."""
    out, i = [], 0
    while i < len(pns):
        j = i
        while j + 1 < len(pns) and pns[j + 1] == pns[j] + 1:
            j += 1
        out.append(pns[i] if i == j else [pns[i], pns[j]])
        i = j + 1
    return out


def event_to_dict(ev) -> dict:
    kind = type(ev)
    if kind is Sent:
        d = {"t": ev.t, "ev": "sent", "pn": ev.pn, "bytes": ev.bytes}
        if ev.app_limited:
            d["app_limited"] = True
        return d
    if kind is Ack:
        d = {"t": ev.t, "ev": "ack", "pns": _ranges(ev.pns)}
        if ev.ack_delay:
            d["ack_delay"] = ev.ack_delay
        if ev.ecn_ce:
            d["ecn_ce"] = True
        if ev.rtt is not None:
            d["rtt"] = ev.rtt
        return d
    if kind is Lost:
        return {"t": ev.t, "ev": "lost", "pns": _ranges(ev.pns)}
    return {"t": ev.t, "ev": EVENT_NAMES[kind]}


def trace_version(events) -> int:
    """The oldest format that can hold these events: 1 unless there are application events."""
    return 2 if any(type(ev) in APP_EVENTS for ev in events) else 1


def header_to_dict(header: Header, version: int | None = None) -> dict:
    d = {"ccdiff_trace": version or header.version, "max_datagram_size": header.max_datagram_size}
    if header.initial_rtt_us != DEFAULT_INITIAL_RTT_US:
        d["initial_rtt_us"] = header.initial_rtt_us
    if header.max_ack_delay != DEFAULT_MAX_ACK_DELAY_US:
        d["max_ack_delay"] = header.max_ack_delay
    if header.name:
        d["name"] = header.name
    if header.comment:
        d["comment"] = header.comment
    return d


def dump_trace(trace: Trace) -> str:
    """Canonical text: the same trace always gives the same bytes."""
    version = trace_version(trace.events)
    rows = [header_to_dict(trace.header, version)] + [event_to_dict(ev) for ev in trace.events]
    return "".join(json.dumps(row, separators=(", ", ": ")) + "\n" for row in rows)

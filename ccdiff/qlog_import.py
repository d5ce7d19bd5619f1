"""`ccdiff import`: a qlog of a real connection becomes a ccdiff trace.

    >>> from ccdiff.qlog_import import import_qlog
    >>> summary = import_qlog("tests/fixtures/qlog/aioquic-cubic-random-loss.qlog", out_fh)

Input: qlog 0.3 JSON (one document, e.g. aioquic's QuicFileLogger) or JSON-SEQ
(``.sqlog``, RFC 7464 records, e.g. quiche's and ccdiff's own), with the qlog 0.3 names
(``transport:packet_sent``, ``transport:packet_received``, ``recovery:packet_lost``,
``recovery:metrics_updated``, ``recovery:congestion_state_updated``) or the current
draft's (``quic:packet_sent``, ``quic:recovery_metrics_updated``, ...).  Both are read
as a stream: a JSON document is walked value by value (each event decoded alone), so
memory follows the connection's packets in flight, not the file's size.

What becomes what (docs/trace-format.md "Imported from qlog" has the details):

- ``packet_sent`` of the application data space (1RTT, 0RTT) that is in flight (RFC
  9002 §2: ack-eliciting or carrying PADDING) -> ``sent`` (packet number, raw.length);
- an ACK frame in a ``packet_received`` of that space -> ``ack`` of the packets it
  newly acknowledges, its ack_delay, ``ecn_ce`` when its CE count grew (RFC 9002 Appendix B.7);
- ``packet_lost`` -> ``lost``; a loss logged within 1 ms (kGranularity) of an ACK and
  with nothing sent between is the loss that ACK revealed: written before it, at its
  time (the trace's rule), unless that ACK acknowledges a packet of those losses;
- an ACK's time: the stack's own clock where its logged RTT sample gives it
  (``ack_time_from_rtt``); nothing takes the state logged after a CONNECTION_CLOSE, nor
  a loss whose only record precedes the stack's reaction (bytes in flight unchanged);
- ``congestion_state_updated`` with trigger ``persistent_congestion`` -> the event;
  to/from ``application_limited`` -> ``app_idle`` / ``app_data``;
- ``metrics_updated``: the stack's own cwnd / ssthresh / bytes_in_flight, written beside
  each event as its optional ``logged`` field (with the qlog line and record number).

Initial and Handshake packets are left out (the trace has one packet number space);
every other event name is counted and reported with its first line, never silently
dropped.  A log that lacks what a trace needs fails with the field's name.
"""
from __future__ import annotations

import json
import re
import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from . import qlog_dialects as dialects
from .trace import (MAX_LINE_CHARS, MAX_PACKET_BYTES, Ack, AppData, AppIdle, Causality, Header, Lost,
                    PersistentCongestion, Sent, TraceError, event_to_dict, header_to_dict)

RS = "\x1e"
CHUNK = 1 << 16
GROUP_WINDOW_US = 1000        # RFC 9002 §6.1.2 kGranularity: a loss this close to an ACK is the loss it revealed
APP_SPACE = {"1RTT", "0RTT", "1rtt", "0rtt"}
# RFC 9002 §2: "All frames other than ACK, PADDING, and CONNECTION_CLOSE are considered
# ack-eliciting." and "Packets are considered in flight when they are ack-eliciting or contain a
# PADDING frame": a packet of ACK / CONNECTION_CLOSE frames only is not in flight.
NOT_IN_FLIGHT_FRAMES = dialects.NOT_IN_FLIGHT_FRAMES   # RFC 9002 §2
APP_DATA_FRAMES = {"stream", "datagram"}    # the application's data (picoquic: frames.c:3634, 3702)

# qlog 0.3 (draft-ietf-quic-qlog-quic-events-02/-03) and current draft (-08+) names.
KIND = {
    "transport:packet_sent": "sent", "quic:packet_sent": "sent",
    "transport:packet_received": "received", "quic:packet_received": "received",
    "recovery:packet_lost": "lost", "quic:packet_lost": "lost",
    "recovery:metrics_updated": "metrics", "quic:recovery_metrics_updated": "metrics",
    "recovery:congestion_state_updated": "state", "quic:congestion_state_updated": "state",
    "recovery:parameters_set": "recovery_parameters", "quic:recovery_parameters_set": "recovery_parameters",
    "transport:parameters_set": "transport_parameters", "quic:parameters_set": "transport_parameters",
    "security:key_retired": "key_discarded", "quic:key_discarded": "key_discarded",
    # a datagram's receipt, logged when it arrives, before its packets (aioquic connection.py:771,
    # picoquic's loglib): the time of the ACKs it carries ("The ACK's time", docs/qlog-import.md)
    "transport:datagrams_received": "datagram_received", "transport:datagram_received": "datagram_received",
    "quic:udp_datagrams_received": "datagram_received",
}
# Records a stack writes while it builds a burst of sends (aioquic: metrics_updated, packet_sent,
# datagrams_sent per datagram): any other record was written before the burst's clock read.
SEND_BURST_KINDS = {"sent", "metrics"}
SEND_BURST_NAMES = {"transport:datagrams_sent", "transport:datagram_sent", "quic:udp_datagrams_sent"}
# The metric names stacks log: qlog's, and aioquic's "cwnd" (quic/congestion/base.py get_log_data).
METRIC_ALIASES = {"congestion_window": "cwnd", "cwnd": "cwnd", "ssthresh": "ssthresh",
                  "bytes_in_flight": "bytes_in_flight"}


class QlogError(TraceError):
    """A malformed qlog, or one that lacks what a trace needs: file, line, reason."""


@dataclass
class Where:
    line: int
    record: int        # 1-based number of the event in the file (qlog has no other id)

    def text(self) -> str:
        return f"event {self.record}"


@dataclass
class Summary:
    """What the import did, for the terminal and tests."""
    records: int = 0
    events: int = 0
    sent: int = 0
    acks: int = 0
    lost: int = 0
    persistent_congestion: int = 0
    inferred_persistent_congestion: int = 0   # of those, seen only as the window's collapse
    app_events: int = 0
    logged: int = 0                        # trace events with the stack's own metrics beside them
    stale_logged: int = 0                  # loss events whose record the stack wrote before reacting: none kept
    closed_at: str = ""                    # where the connection closed: later metrics belong to no event
    skipped_spaces: dict = field(default_factory=dict)    # packet type -> packets left out
    not_imported: dict = field(default_factory=dict)      # event name -> [count, first line, first record]
    notes: list = field(default_factory=list)
    metrics_order: str = ""                # "before" / "after": where a send's own metrics are logged
    header: dict = field(default_factory=dict)
    reachability: str = ""
    lenient_reason: str = ""
    ignored_losses: int = 0                # packet_lost of a packet not in flight in the trace
    received: int = 0                      # packet_received records of the imported spaces
    received_without_frames: int = 0       # ... that log no frames (quinn 0.11: no ACK can be read)
    other_traces: int = 0                  # events of the file's other traces, left out
    stack_lost_packets: int = 0            # lost packets the stack's own metrics count (quiche)
    discarded_with_keys: int = 0           # Initial/Handshake packets never acknowledged nor lost: left out
    inferred: list = field(default_factory=list)   # what the import wrote that the log does not name (#34)

    def dropped(self) -> list:
        """What the import left out of the trace, one short phrase each (#34 item 2): the
        trace's header and the terminal both say it, so a partial import never passes as whole."""
        out = [f"{count} {ptype} packets" for ptype, count in sorted(self.skipped_spaces.items())]
        if self.ignored_losses:
            out.append(f"{self.ignored_losses} packet_lost of packets not in flight")
        if self.stale_logged:
            out.append(f"the stack's state after {self.stale_logged} loss event(s) (logged before it reacted)")
        if self.stack_lost_packets > self.lost:
            out.append(f"{self.stack_lost_packets - self.lost} packet losses the stack counted (its metrics' "
                       "lost packets) but logged no packet_lost for")
        if self.other_traces:
            out.append(f"{self.other_traces} events of the file's other traces")
        names = sorted(self.not_imported.items(), key=lambda item: item[1][1:])
        if names:
            shown = ", ".join(f"{name} x{count}" for name, (count, _, _) in names[:8])
            more = f" and {len(names) - 8} more names" if len(names) > 8 else ""
            out.append(f"events not imported: {shown}{more}")
        return out

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


# ---------------------------------------------------------------- reading records

def read_records(path: str):
    """Yields the header dict once (qlog_version, trace common_fields, configuration...),
    then (Where, event dict) for each event of the first trace, streaming."""
    if "\0" in path:
        raise QlogError(path.replace("\0", "\\0"), None, "cannot read: the path contains a NUL byte")
    try:
        fh = open(path, encoding="utf-8")
    except OSError as exc:
        raise QlogError(path, None, f"cannot read: {exc.strerror}") from None
    with fh:
        try:
            first = fh.read(1)
            while first and first in " \t\r\n":
                first = fh.read(1)
            if not first:
                raise QlogError(path, 1, "empty file: expected a qlog (JSON or JSON-SEQ)")
            if first == RS:
                yield from _read_seq(fh, path)
            elif first == "{":
                yield from _JsonWalk(fh, path).run()
            else:
                raise QlogError(path, 1, f"not a qlog: starts with {first!r}, expected '{{' (JSON) or the "
                                         "record separator 0x1E (JSON-SEQ, RFC 7464)")
        except UnicodeDecodeError as exc:
            raise QlogError(path, None, f"not UTF-8 text ({exc.reason})") from None


def _read_seq(fh, path: str):
    """JSON-SEQ: records start with RS; a record may span lines.  The first is the header."""
    buf, start_line, lineno, index, header_done = [], 1, 1, 0, False
    text_line = fh.readline(MAX_LINE_CHARS + 1)

    def decode(chunks, line, at_end):
        text = "".join(chunks)
        if len(text) > MAX_LINE_CHARS:
            raise QlogError(path, line, f"record longer than {MAX_LINE_CHARS} characters")
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            content = text.rstrip()
            if not content:
                raise QlogError(path, line, "empty JSON-SEQ record") from None
            if exc.pos >= len(content):     # named at the record's own last line, not the next one
                reason = "truncated record (the file ends inside it)" if at_end else \
                    "truncated record (the next record starts before this one's JSON closes)"
                raise QlogError(path, line + content.count("\n"), reason) from None
            raise QlogError(path, line + exc.lineno - 1,
                            f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        except RecursionError:
            raise QlogError(path, line, "not valid JSON (nested too deeply)") from None

    while True:
        if not text_line or RS in text_line:
            # every RS ends the record before it; a line may hold several records
            parts = text_line.split(RS) if text_line else [""]
            for part in parts[:-1] if text_line else parts:
                buf.append(part)
                obj = decode(buf, start_line, not text_line)
                if not header_done:
                    if not isinstance(obj, dict):
                        raise QlogError(path, start_line, "the first JSON-SEQ record must be the qlog header object")
                    header_done = True
                    trace = obj.get("trace") if isinstance(obj.get("trace"), dict) else {}
                    yield _header(obj, trace)
                else:
                    index += 1
                    yield Where(start_line, index), obj
                buf, start_line = [], lineno
            if not text_line:
                return
            buf = [parts[-1]]
        else:
            if len(text_line) > MAX_LINE_CHARS:
                raise QlogError(path, lineno, f"line longer than {MAX_LINE_CHARS} characters")
            buf.append(text_line)
        text_line = fh.readline(MAX_LINE_CHARS + 1)
        lineno += 1
        if sum(map(len, buf)) > MAX_LINE_CHARS:
            raise QlogError(path, start_line, f"record longer than {MAX_LINE_CHARS} characters")


def _header(doc: dict, trace: dict) -> dict:
    common = trace.get("common_fields") if isinstance(trace.get("common_fields"), dict) else {}
    config = trace.get("configuration") if isinstance(trace.get("configuration"), dict) else {}
    return {"qlog_version": doc.get("qlog_version") or doc.get("file_schema"),
            "title": doc.get("title") or trace.get("title") or "",
            "vantage_point": trace.get("vantage_point"),
            "time_format": common.get("time_format", "relative"),
            "time_units": config.get("time_units", "ms"),
            "time_offset": config.get("time_offset", 0),
            # qlog draft-00/-01 (picoquic's loglib): events are arrays named by event_fields
            "event_fields": trace.get("event_fields") if isinstance(trace.get("event_fields"), list) else None}


class _JsonWalk:
    """A qlog JSON document walked as a stream: objects are entered, ``traces`` and
    ``events`` arrays are iterated one element at a time, every other value is decoded
    whole (they are small).  Only the first trace's events are imported."""

    def __init__(self, fh, path: str):
        self.fh, self.path = fh, path
        self.buf, self.pos = "{", 0
        self.line, self.line_pos = 1, 0       # line of buf[line_pos]
        self.eof = False
        self.decoder = json.JSONDecoder()
        self.trace_index = -1
        self.doc: dict = {}
        self.events_read = 0

    # -- buffer
    def fill(self) -> bool:
        if self.eof:
            return False
        chunk = self.fh.read(CHUNK)
        if not chunk:
            self.eof = True
            return False
        if self.pos > CHUNK:                  # drop what is consumed, keep line counting right
            self.line_at(self.pos)
            self.buf, self.line_pos = self.buf[self.pos:], 0
            self.pos = 0
        self.buf += chunk
        return True

    def line_at(self, pos: int) -> int:
        """Line of buf[pos]; positions asked for only grow, so counting is incremental."""
        if pos > self.line_pos:
            self.line += self.buf.count("\n", self.line_pos, pos)
            self.line_pos = pos
        return self.line

    def fail(self, reason: str, pos: int | None = None):
        if reason.startswith("truncated") and self.events_read:
            # a one-line JSON document has only line 1: the event number locates the cut
            reason += f" (after event {self.events_read}, the last one read whole)"
        raise QlogError(self.path, self.line_at(self.pos if pos is None else pos), reason)

    def peek(self) -> str:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                self.fail("truncated: the file ends inside the JSON document")

    def expect(self, chars: str) -> str:
        ch = self.peek()
        if ch not in chars:
            self.fail(f"not valid JSON: expected {' or '.join(repr(c) for c in chars)}, got {ch!r}")
        self.pos += 1
        return ch

    def value(self):
        self.peek()
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.fill():
                    self._check_size()
                    continue
                # the file ended: a value cut at the end, or a string cut anywhere in it
                at_end = exc.pos >= len(self.buf.rstrip()) - 1 or exc.msg.startswith("Unterminated string")
                self.fail("truncated: the file ends inside a value" if at_end else
                          f"not valid JSON ({exc.msg})", exc.pos if not at_end else None)
            except RecursionError:
                self.fail("not valid JSON (nested too deeply)")
            if end >= len(self.buf) and self.fill():   # a number may go on in the next chunk
                continue
            start, self.pos = self.pos, end
            return obj, start

    def _check_size(self) -> None:
        if len(self.buf) - self.pos > MAX_LINE_CHARS:
            self.fail(f"one value is longer than {MAX_LINE_CHARS} characters")

    # -- structure
    def run(self):
        header = None
        index = 0
        for kind, item in self.walk_object(()):
            if kind == "event":
                if header is None:
                    header = _header(self.doc, self.doc.get("_trace", {}))
                    yield header
                index += 1
                self.events_read = index
                yield Where(self.line_at(item[1]), index), item[0]
            elif header is not None:      # an event of a later trace: counted, the caller says so
                header["other_trace_events"] = header.get("other_trace_events", 0) + 1
        if self.peek_end():
            self.fail("extra data after the JSON document")
        if header is None:
            yield _header(self.doc, self.doc.get("_trace", {}))

    def peek_end(self) -> bool:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf):
                return True
            if not self.fill():
                return False

    def walk_object(self, path: tuple):
        self.expect("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            if self.peek() != '"':
                self.fail("not valid JSON: expected a key string")
            key, _ = self.value()
            self.expect(":")
            ch = self.peek()
            if key == "traces" and ch == "[" and not path:
                yield from self.walk_array(("traces",))
            elif key == "trace" and ch == "{" and not path:     # a JSON document with one trace
                self.trace_index += 1
                yield from self.walk_object(("trace",))
            elif key == "events" and ch == "[" and path and path[0] in ("traces", "trace"):
                yield from self.walk_array(path + ("events",))
            else:
                obj, _ = self.value()
                if not path:
                    self.doc[key] = obj
                elif len(path) == 1 and self.trace_index == 0:
                    self.doc.setdefault("_trace", {})[key] = obj
            if self.expect(",}") == "}":
                return

    def walk_array(self, path: tuple):
        self.expect("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            if path == ("traces",):
                self.trace_index += 1
                if self.peek() != "{":
                    self.fail("a qlog trace must be a JSON object")
                yield from self.walk_object(path)
            else:
                obj, start = self.value()
                self._check_size()
                if self.trace_index == 0:
                    yield "event", (obj, start)
                else:
                    yield "other_trace", None
            if self.expect(",]") == "]":
                return


# ---------------------------------------------------------------- the importer

class _Space:
    """One packet number space (RFC 9000 §12.3): what it sent that may still be
    acknowledged, in its own numbers, and what each is in the trace."""

    def __init__(self):
        self.ackable: list = []     # its packet numbers sent and not acknowledged (lost ones too)
        self.sent: dict = {}        # its pn -> (trace pn, t, burst floor t), for the packets in ackable
        self.lost: set = set()      # declared lost and not acknowledged since
        self.last_pn = -1
        self.ce_count = 0


def space_key(ptype: str) -> str:
    return "application" if ptype in APP_SPACE else ptype.lower()


@dataclass
class _Group:
    """What one instant of loss detection produced: the losses, whether they established
    persistent congestion, and the ACK that revealed them (written after them, at its time)."""
    t: int
    where: Where
    lost: list = field(default_factory=list)     # (pn, Where)
    pc: bool = False
    timer: bool = False                          # picoquic: declared by its retransmission timer
    unlogged: bool = False                       # picoquic: no state dump after this ACK
    ack: Ack | None = None
    ack_where: Where | None = None
    floor: int = 0                  # the time of the last event written before the group
    rtt_sent_t: int | None = None   # the ACK's largest is newly acknowledged: its send time
    rtt_floor_t: int = 0            # ... and the last record before its send burst
    rtt_done: bool = False
    receipt: bool = False           # the ACK's time is its datagram's receipt record's
    cwnd_at_loss: int | None = None  # the stack's window as logged when the first loss was


class _Unit(list):
    """Trace events written together, with the stack's state after them (logged)."""
    logged: dict | None = None
    where: Where | None = None
    timer: bool = False
    unlogged: bool = False


class Importer:
    def __init__(self, path: str, write, summary: Summary, all_spaces: bool = False):
        self.path, self.write, self.summary = path, write, summary
        # all_spaces: Initial and Handshake packets too, renumbered in send order (the trace has
        # one packet number space); else the application space only, with the log's numbers.
        self.all_spaces = all_spaces
        self.spaces: dict = {}
        self.next_pn = 0
        self.causality = Causality()
        self.header = Header(version=2)
        self.header_written = False
        self.t0 = None
        self.last_t = 0
        self.unit_t = 0                       # the time of the latest event put in a unit
        self.scale = 1000                     # the log's time unit in µs
        self.clock = 0.0                      # time_format delta: the running sum
        self.state: dict = {}                 # the stack's metrics as logged so far
        self.state_before: dict = {}          # ... before the latest metrics record
        self.last_was_metrics = False
        self.saw_inflight_metrics = False
        self.order = ""                       # "before": a send's metrics precede its record
        self.pending: _Unit | None = None     # written once its logged state is known
        self.group = None                     # losses / PC / ACK of one instant being gathered
        self.app_idle = False
        self.last_cwnd = None                 # the stack's window as logged after the last unit
        # picoquic's loglib (title "picoquic") logs packet sizes without the AEAD tag and
        # ack_delay as the raw wire field; see picoquic_flavour().
        self.picoquic = False
        self.finished_streams: set = set()    # picoquic: streams whose FIN was sent
        self.size_overhead = 0
        self.ack_delay_exponent = 3           # RFC 9000 §18.2 default, until the peer says otherwise
        self.last_bif = None                  # ... and its bytes in flight
        self.closed = False
        self.multipath = False                # a frame of draft-ietf-quic-multipath was logged
        self.mds_logged = False               # a parameters_set stated max_datagram_size
        self.string_numbers = False           # qlog draft-00..02: numbers may be strings (qlog_dialects)
        self.stack_clock = False              # records stamped with the stack's own call time (ngtcp2)
        self.datagram_t: int | None = None    # the receipt record of the datagram being read, until a send
        self.other_t = 0                      # the latest record that is no part of a send burst

    # -- time
    def time_us(self, where: Where, ev: dict, fmt: dict) -> int:
        raw = ev.get("time")
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) or \
                abs(raw) > 1e18:         # NaN, Infinity and 1e400 parse as JSON numbers
            self.fail(where, f'"time" must be a finite number, got {json.dumps(raw)[:40]}')
        scale = self.scale = 1 if fmt["time_units"] == "us" else 1000
        if fmt["time_format"] == "delta":
            self.clock += raw
            raw = self.clock
        if self.t0 is None:
            self.t0 = raw
        # difference first, then scale: absolute times (ms since 1970) keep their µs digits
        t = round((raw - self.t0) * scale)
        if t < self.last_t:
            self.fail(where, f"time goes backwards: {raw} is before the previous event "
                             f"({self.t0 + self.last_t / scale})")
        self.last_t = t
        return t

    def fail(self, where: Where, reason: str):
        raise QlogError(self.path, where.line, f"{where.text()}: {reason}")

    # -- records
    def feed(self, where: Where, ev, fmt: dict) -> None:
        inferred = isinstance(ev, dict) and isinstance(ev.get("data"), dict) and ev["data"].get("ccdiff_inferred")
        self.summary.records += not inferred    # an ACK rebuilt from quinn's counters is no record
        if ev == []:
            # pcap2qlog's draft-01 output ends its events with an empty array (qvis sample
            # new_cid.qlog): no event, said once
            self.summary.note(f"an empty event array at line {where.line} (event {where.record}) skipped")
            return
        if isinstance(ev, list):
            ev = self.array_event(where, ev, fmt)
        if self.string_numbers:
            ev = dialects.numbers_from_strings(ev)
        if not isinstance(ev, dict):
            self.fail(where, f"an event must be a JSON object, got {type(ev).__name__}")
        name = ev.get("name")
        if not isinstance(name, str):
            self.fail(where, 'event has no "name" (e.g. "transport:packet_sent")')
        data = ev.get("data", {})
        if not isinstance(data, dict):
            self.fail(where, f'{name}: "data" must be an object')
        kind = KIND.get(dialects.canonical_name(name))
        # picoquic's loglib stamps some events it does not order (transport:packet_dropped
        # with 0 mid-trace, parameters_set after packets): their time is not read
        if not (self.picoquic and kind in (None, "transport_parameters", "recovery_parameters")):
            t = self.time_us(where, ev, fmt)
            if kind not in SEND_BURST_KINDS and dialects.canonical_name(name) not in SEND_BURST_NAMES:
                self.other_t = t
        if kind is None:
            entry = self.summary.not_imported.setdefault(name, [0, where.line, where.record])
            entry[0] += 1
            return
        if kind == "sent":
            self.on_sent(where, t, name, data)
        elif kind == "received":
            self.on_received(where, t, name, data)
        elif kind == "lost":
            self.on_lost(where, t, name, data)
        elif kind == "metrics":
            self.on_metrics(data)
        elif kind == "state":
            self.on_state(where, t, data)
        elif kind == "recovery_parameters":
            self.on_parameters(where, data, {"max_datagram_size": "max_datagram_size",
                                             "initial_rtt": "initial_rtt_us"})
        elif kind == "key_discarded":
            self.on_key_discarded(where, data)
        elif kind == "datagram_received":
            self.datagram_t = t
        elif kind == "transport_parameters":
            # qlog 0.3 "owner", the current draft "initiator" (quiche 0.30: quic:parameters_set)
            if data.get("owner", data.get("initiator")) == "remote":
                self.on_parameters(where, data, {"max_ack_delay": "max_ack_delay"})
                if self.picoquic:
                    exponent = data.get("ack_delay_exponent")
                    if isinstance(exponent, int) and not isinstance(exponent, bool) and 0 <= exponent <= 20:
                        self.ack_delay_exponent = exponent
                    self.on_parameters(where, data, {"max_packet_size": "max_datagram_size"})

    def array_event(self, where: Where, ev: list, fmt: dict) -> dict:
        """qlog draft-00/-01 (picoquic's loglib, loglib/qlog.c qlog_event_header): an event is
        an array named by the trace's event_fields, e.g. ["relative_time", "category",
        "event", "data"] -> {"time", "name": "category:event", "data"}."""
        fields = fmt.get("event_fields")
        if not fields:
            self.fail(where, "an event as an array needs the trace's event_fields (qlog draft-00/-01), "
                             "and this trace has none")
        if len(ev) != len(fields):
            self.fail(where, f"an event array has {len(ev)} items, event_fields names {len(fields)}")
        # draft-00 writers name the fields in capitals (quic-trace's converter, qvis's sample
        # quictrace_example_github.qlog: "CATEGORY", "EVENT_TYPE", "DATA")
        row = dict(zip((f.lower() if isinstance(f, str) else f for f in fields), ev))
        time = row.get("relative_time", row.get("time"))
        if "relative_time" not in row and "time" not in row:
            self.fail(where, 'event_fields has no "relative_time" (or "time"): the event has no time')
        name = dialects.array_row_name(row)
        if name is None:
            self.fail(where, 'event_fields names no "category" and "event" (or "event_type"): the event has no name')
        return {"time": time, "name": name, "data": row.get("data", {})}

    def picoquic_flavour(self) -> None:
        """picoquic's own qlog (loglib/qlog.c, picoquic 1.1.53.0), where it differs from qlog:
        - header.packet_size is the packet without its AEAD tag, while bytes in flight count
          it (picoquic_queue_for_retransmit adds length + checksum_overhead, sender.c:699,
          715): the trace's size is packet_size + 16 (AES-GCM and ChaCha20-Poly1305 tags,
          picoquic_aead_get_checksum_length, tls_api.c:2885);
        - an ACK frame's ack_delay is the wire field (qlog_ack_frame, loglib/qlog.c:1081), in
          units of 2^ack_delay_exponent us (frames.c:2621), not ms;
        - the datagram size the controller counts in is the path's send_mtu, which reaches
          the peer's max_packet_size with the first MTU probe: that is the header's
          max_datagram_size."""
        self.picoquic, self.size_overhead = True, 16
        self.summary.note("picoquic qlog: packet sizes + 16 (the AEAD tag bytes in flight count, sender.c:699), "
                          "ack_delay is the wire field x 2^ack_delay_exponent us (frames.c:2621)")

    def on_parameters(self, where: Where, data: dict, keys: dict) -> None:
        for key, attr in keys.items():
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if self.header_written:
                self.summary.note(f"{key} logged at line {where.line} after the first packet: not in the header")
                continue
            value = round(value * 1000) if attr != "max_datagram_size" else int(value)
            if attr == "max_datagram_size":
                value = min(max(value, 1200), MAX_PACKET_BYTES)
                self.mds_logged = True
            setattr(self.header, attr, value)

    def on_close(self, where: Where) -> None:
        """A CONNECTION_CLOSE sent or received: the events so far get the state logged
        until now.  What the stack logs after it describes the closing connection, not
        a trace event: aioquic discards its packet spaces (connection.py:1468-1474, 1537 ->
        recovery.py:176-181 discard_space -> on_packets_expired) and logs bytes in flight 0, which
        would otherwise be the last event's state."""
        if self.closed:
            return
        self.closed = True
        self.summary.closed_at = f"line {where.line}, event {where.record}"
        self.flush_group()
        self.finish_pending(self.state)

    def on_key_discarded(self, where: Where, data: dict) -> None:
        """RFC 9002 §6.4: with the Initial or Handshake keys go the packets still in flight
        in that space, neither acknowledged nor lost: a trace cannot say so, they stay in it."""
        key_type = str(data.get("key_type", ""))
        for key in ("initial", "handshake"):
            space = self.spaces.get(key)
            if key in key_type and space is not None:
                left = [pn for pn in space.sent if pn not in space.lost]
                if left:
                    self.summary.note(f"{len(left)} {key} packet(s) discarded in flight with the keys at line "
                                      f"{where.line} (RFC 9002 §6.4): they stay in flight in the trace")
                space.ackable, space.sent = [], {}

    def space(self, where: Where, name: str, data: dict) -> str:
        header = data.get("header") if isinstance(data.get("header"), dict) else {}
        ptype = header.get("packet_type", data.get("type", data.get("packet_type")))
        if ptype is None:
            self.summary.note("packets without a packet_type are taken as 1RTT")
            return "1RTT"
        if ptype == "UNKNOWN" and self.string_numbers:
            self.summary.note("packets of type UNKNOWN (quic-trace's draft-00 converter) are taken as 1RTT")
            return "1RTT"
        return str(ptype)

    def pn_of(self, where: Where, name: str, data: dict):
        header = data.get("header") if isinstance(data.get("header"), dict) else {}
        pn = header.get("packet_number", data.get("packet_number"))
        if isinstance(pn, bool) or not isinstance(pn, int) or pn < 0:
            self.fail(where, f"{name} has no packet number (data.header.packet_number), got {json.dumps(pn)}")
        return pn

    def skip_space(self, ptype: str) -> bool:
        if ptype in APP_SPACE or (self.all_spaces and ptype.lower() in ("initial", "handshake")):
            return False
        self.summary.skipped_spaces[ptype] = self.summary.skipped_spaces.get(ptype, 0) + 1
        return True

    def space_of(self, ptype: str) -> _Space:
        key = space_key(ptype)
        if key not in self.spaces:
            self.spaces[key] = _Space()
        return self.spaces[key]

    def on_sent(self, where: Where, t: int, name: str, data: dict) -> None:
        self.datagram_t = None                  # a packet received after a send is another datagram's
        if not self.order:
            # The first packet_sent tells where this stack logs a send's own metrics:
            # before the packet_sent record (aioquic: on_packet_sent logs, then the
            # connection logs packet_sent) or after it (ccdiff's writer, quiche).
            self.order = "before" if self.saw_inflight_metrics else "after"
            self.summary.metrics_order = self.order
        is_metrics_before = self.last_was_metrics
        self.last_was_metrics = False
        ptype = self.space(where, name, data)
        if self.skip_space(ptype):
            return
        if data.get("ccdiff_in_flight") is False:
            return                              # quinn: its counters did not grow (qlog_dialects.QuinnAcks)
        if data.get("ccdiff_discarded"):
            self.summary.discarded_with_keys += 1
            return                              # never acknowledged nor lost (qlog_dialects.DiscardedWithKeys)
        frames = data.get("frames")
        app_limited = False
        if isinstance(frames, list):
            types = {f.get("frame_type") for f in frames if isinstance(f, dict)}
            if types & dialects.MULTIPATH_FRAMES:
                self.multipath = True
            if "connection_close" in types:
                self.on_close(where)
            if types and types <= NOT_IN_FLIGHT_FRAMES:
                return                          # an ACK-only packet: not in flight (RFC 9002 §2)
            # picoquic: a packet without application data, sent while the window was open,
            # was prepared when the stream scheduler had none (sender.c:3307-3316 stamps
            # last_sender_limited_time); with the window full it is an ACK / control packet
            # of a cwnd-limited sender (sender.c:2601-2610), not app-limited
            window_open = self.state.get("bytes_in_flight", 0) < self.state.get("cwnd", 1 << 62)
            app_limited = self.picoquic and not (types & APP_DATA_FRAMES) and window_open
        elif "ccdiff_in_flight" not in data:
            self.summary.note("packet_sent without frames: every such packet is taken as in flight")
        if isinstance(data.get("ccdiff_app_limited"), bool):
            app_limited = data["ccdiff_app_limited"]    # the stack's own flag (QuicheAppLimited, ShimAppLimited)
        pn = self.pn_of(where, name, data)
        raw = data.get("raw") if isinstance(data.get("raw"), dict) else {}
        header = data.get("header") if isinstance(data.get("header"), dict) else {}
        size = dialects.packet_size(data, header, raw)
        if isinstance(size, bool) or not isinstance(size, int):
            self.fail(where, f"{name} of packet {pn} has no packet size: a trace needs data.raw.length "
                             "(or data.header.packet_size, or quinn's data.header.length)")
        size += self.size_overhead
        if not 1 <= size <= MAX_PACKET_BYTES:
            self.fail(where, f"{name} of packet {pn}: size {size} is outside 1..{MAX_PACKET_BYTES}")
        space = self.space_of(ptype)
        if pn <= space.last_pn:
            multipath = ("; the log has multipath frames (path_ack): packet numbers are per path "
                         "(draft-ietf-quic-multipath), and a trace holds one path" if self.multipath else "")
            self.fail(where, f"{name}: packet number {pn} is not above the previous one ({space.last_pn}); "
                             f"QUIC packet numbers increase (RFC 9000 §12.3){multipath}")
        space.last_pn = pn
        trace_pn = pn
        if self.all_spaces:
            trace_pn, self.next_pn = self.next_pn, self.next_pn + 1
        self.flush_group()
        self.unit_t = t
        unit = _Unit([(Sent(t, trace_pn, size, app_limited), where)])
        unit.where = where
        if self.order == "before" and is_metrics_before:
            self.finish_pending(self.state_before)
            unit.logged = dict(self.state)
            self.emit(unit)
        else:
            self.finish_pending(self.state)
            self.pending = unit
        space.ackable.append(pn)
        space.sent[pn] = (trace_pn, t, self.other_t)
        if self.picoquic and isinstance(frames, list):
            self.picoquic_app_state(where, frames)

    def picoquic_app_state(self, where: Where, frames: list) -> None:
        """picoquic logs no application-limited state: after the packet that carries a
        stream's FIN the stream scheduler has nothing left (sender.c:3313-3316 stamps
        last_sender_limited_time at the next send attempt) -> app_idle, until a packet
        carries data of a stream not finished yet -> app_data (written before that send)."""
        streams = [f for f in frames if isinstance(f, dict) and f.get("frame_type") == "stream"]
        for f in streams:
            if f.get("fin") is True:
                self.finished_streams.add(f.get("id"))
        unit = self.pending             # this send's, waiting for its metrics (picoquic logs them after)
        if unit is None or type(unit[0][0]) is not Sent:
            return
        if self.app_idle and any(f.get("id") not in self.finished_streams for f in streams):
            self.app_idle = False
            unit.insert(0, (AppData(self.last_t), where))     # written before this send
            self.summary.app_events += 1
        elif not self.app_idle and any(f.get("fin") is True for f in streams):
            self.app_idle = True
            unit.append((AppIdle(self.last_t), where))        # and after it
            self.summary.app_events += 1

    def on_received(self, where: Where, t: int, name: str, data: dict) -> None:
        self.last_was_metrics = False
        frames = data.get("frames")
        header = data.get("header") if isinstance(data.get("header"), dict) else {}
        if str(header.get("packet_type", "1RTT")) in APP_SPACE:     # counted for the no-ACK refusal
            self.summary.received += 1
            self.summary.received_without_frames += not isinstance(frames, list)
        if not isinstance(frames, list):
            return
        if any(isinstance(f, dict) and f.get("frame_type") == "connection_close" for f in frames):
            self.on_close(where)
        acks = [f for f in frames if isinstance(f, dict) and f.get("frame_type") == "ack"]
        implicit = self.picoquic and self.all_spaces
        if not acks and not implicit:
            return
        ptype = self.space(where, name, data)
        if self.skip_space(ptype):
            return
        # The ACK's time: its datagram's receipt, where the log has that record (below, and
        # "The ACK's time" in docs/qlog-import.md); never before an event already written.
        receipt = self.datagram_t is not None and not self.stack_clock
        t_ack = max(self.datagram_t, self.unit_t) if receipt else t
        for frame in acks:
            self.on_ack_frame(where, t_ack, name, frame, self.space_of(ptype), receipt)
        if implicit:
            self.implicit_ack(where, t, name, ptype)

    def implicit_ack(self, where: Where, t: int, name: str, ptype: str) -> None:
        """picoquic_implicit_handshake_ack (sender.c:1515-1545): a Handshake packet received
        acknowledges every Initial packet still in flight (packet.c:1798), the ready state
        (sender.c:2383-2384: the server's, reached before the client's first 1-RTT packet)
        the Handshake ones too; each is notified to the controller as an acknowledgement
        (sender.c:1535), so the trace says `ack`, with no ack delay.  picoquic logs nothing."""
        key = ptype.lower()
        spaces = ["initial"] if key == "handshake" else ["initial", "handshake"] if key in APP_SPACE else []
        for space_name in spaces:
            space = self.spaces.get(space_name)
            if space is None:
                continue
            left = [pn for pn in space.ackable if pn not in space.lost]
            if left:
                self.summary.note("picoquic: Initial / Handshake packets in flight when the next space's "
                                  "packets arrive are acknowledged implicitly (sender.c:1515), as acks")
                self.on_ack_frame(where, t, name, {"acked_ranges": [[pn, pn] for pn in left], "ack_delay": 0},
                                  space)

    def on_ack_frame(self, where: Where, t: int, name: str, frame: dict, space: _Space,
                     receipt: bool = False) -> None:
        ranges = frame.get("acked_ranges")
        if not isinstance(ranges, list):
            self.fail(where, f"{name}: ACK frame without acked_ranges")
        newly = []
        for item in ranges:
            if (isinstance(item, list) and 1 <= len(item) <= 2
                    and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in item)):
                lo, hi = item[0], item[-1]
            else:
                self.fail(where, f"{name}: acked_ranges items must be [lo, hi] or [pn], got {json.dumps(item)[:40]}")
            if lo > hi:
                self.fail(where, f"{name}: acked range [{lo}, {hi}] has lo > hi")
            i, j = bisect_left(space.ackable, lo), bisect_right(space.ackable, hi)
            newly.extend(space.ackable[i:j])
        delay = frame.get("ack_delay", 0)
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
            self.fail(where, f"{name}: ack_delay must be a number of ms >= 0, got {json.dumps(delay)[:40]}")
        ce = frame.get("ce", 0)
        ecn_ce = isinstance(ce, int) and not isinstance(ce, bool) and ce > space.ce_count
        if ecn_ce:
            space.ce_count = ce
        if not newly:
            return                               # acknowledges nothing new: no trace event
        newly = sorted(set(newly))
        largest = max(r[-1] for r in ranges)
        rtt_sent = space.sent[largest] if largest in newly and largest not in space.lost else None
        for pn in newly:
            if space.sent[pn][1] >= t:
                self.fail(where, f"{name}: ACK at {t} us of packet {pn} sent at {space.sent[pn][1]} us: "
                                 "an ACK needs a positive round-trip time (the log's clock resolution?)")
        for lo, hi in sorted(((r[0], r[-1]) for r in ranges), reverse=True):   # from the top: indices stay valid
            del space.ackable[bisect_left(space.ackable, lo):bisect_right(space.ackable, hi)]
        trace_pns = []
        for pn in newly:
            space.lost.discard(pn)
            trace_pns.append(space.sent.pop(pn)[0])
        # ack_delay: ms in qlog 0.3; in qlog draft-00..02 the trace's time_units (aioquic 0.8
        # writes configuration.time_units "us" and the delay in µs, logger.py encode_ack_frame)
        unit = self.scale if self.string_numbers else 1000
        delay_us = delay << self.ack_delay_exponent if self.picoquic and isinstance(delay, int) else round(delay * unit)
        ack = Ack(t, tuple(trace_pns), delay_us, ecn_ce)
        group = self.group
        # An ACK that acknowledges a packet of the group's losses did not reveal them (it
        # would have acknowledged that packet instead): those were the loss timer's, at
        # their own time (aioquic's timer loss logged just before an ACK of the same
        # packets, fixture aioquic-reno-reorder).
        # And an ACK the stack received after it had already reacted to the losses (its log
        # shows the window cut between the packet_lost and this packet_received) did not
        # reveal them either: the stack's own record order says the loss came first, at its
        # own time (aioquic's loss timer, recovery.py _on_loss_detection_timeout, logged
        # 0.2 ms before an ACK of other packets; applying the ACK first would grow Reno's
        # stash before the cut, reno.py:30-38).
        if (group and group.ack is None and t - group.t <= self.group_window()
                and not {pn for pn, _ in group.lost} & set(trace_pns)
                and not self.reacted_to(group)):
            group.ack, group.t, group.ack_where = ack, t, where   # the ACK that revealed the losses
        else:
            self.flush_group()
            self.finish_pending(self.state)     # the state the log shows when this ACK arrives
            self.group = group = _Group(t, where, ack=ack, ack_where=where, floor=self.unit_t)
        group.rtt_sent_t, group.rtt_floor_t = rtt_sent[1:] if rtt_sent else (None, 0)
        group.receipt = receipt
        # picoquic dumps its congestion state after a 1-RTT packet (packet.c:2028, in
        # picoquic_incoming_1rtt) or a send (sender.c:2771, 2895), never after an Initial or
        # Handshake one: what it logs next belongs to a later event, so nothing is compared
        if self.picoquic and space is not self.spaces.get("application"):
            group.unlogged = True

    def group_window(self) -> int:
        """How far apart a loss and the ACK that revealed it may be logged: kGranularity, or,
        where each record carries the stack's own call time (ngtcp2, qlog_dialects), the same
        instant: ngtcp2 logs the packet_lost records of an ACK's loss detection before that
        ACK's packet_received, at the same ts (ngtcp2_rtb.c:1398 during ngtcp2_conn.c:9787,
        the record at 9790), and a loss its timer declared at its own ts."""
        return 0 if self.stack_clock else GROUP_WINDOW_US

    def reacted_to(self, group: _Group) -> bool:
        """The stack logged its window cut after this group's losses and before now."""
        return group.cwnd_at_loss is not None and self.state.get("cwnd", group.cwnd_at_loss) < group.cwnd_at_loss

    def on_lost(self, where: Where, t: int, name: str, data: dict) -> None:
        self.last_was_metrics = False
        ptype = self.space(where, name, data)
        if self.skip_space(ptype):
            return
        space = self.space_of(ptype)
        qlog_pn = self.pn_of(where, name, data)
        if qlog_pn not in space.sent or qlog_pn in space.lost:
            self.summary.ignored_losses += 1
            self.summary.note(f"packet_lost of a packet not in flight in the trace (first: packet {qlog_pn}, "
                              f"line {where.line}) ignored")
            return
        space.lost.add(qlog_pn)
        pn = space.sent[qlog_pn][0]
        group = self.group
        if group and t - group.t <= self.group_window():
            group.lost.append((pn, where))      # revealed by its ACK (before or after): written before it
        else:
            self.flush_group()
            self.finish_pending(self.state)
            self.group = _Group(t, where, lost=[(pn, where)], floor=self.unit_t,
                                cwnd_at_loss=self.state.get("cwnd"))
        if self.picoquic and data.get("trigger") == "timer":
            self.group.timer = True
        # Lost packets stay ackable (a late ACK is a spurious loss, RFC 9438 §4.9).

    def on_state(self, where: Where, t: int, data: dict) -> None:
        trigger, new = data.get("trigger"), data.get("new")
        if trigger == "persistent_congestion":
            if self.group and self.group.lost:
                self.group.pc = True
            else:
                self.summary.note(f"persistent congestion at line {where.line} without a loss just before it: ignored")
        if self.picoquic:
            return      # picoquic's old/new are its controller's own state numbers (alg_observe, logwriter.c:1213)
        if new == "application_limited" and not self.app_idle:
            self.app_idle = True
            self.app_event(AppIdle(self.last_t), where)
        elif new not in (None, "application_limited") and self.app_idle:
            self.app_idle = False
            self.app_event(AppData(self.last_t), where)

    def app_event(self, ev, where: Where) -> None:
        self.flush_group()
        self.finish_pending(self.state)
        self.unit_t = ev.t
        unit = _Unit([(ev, where)])
        unit.where = where
        self.pending = unit
        self.summary.app_events += 1

    def on_metrics(self, data: dict) -> None:
        if "latest_rtt" in data:
            self.ack_time_from_rtt(data)
        self.state_before = dict(self.state)
        for key, value in data.items():
            name = METRIC_ALIASES.get(key)
            if name and isinstance(value, int) and not isinstance(value, bool):
                if value >= dialects.UNSET_U64:
                    self.state.pop(name, None)      # quiche logs an unset ssthresh as u64::MAX
                else:
                    self.state[name] = value
        lost = dialects.lost_packet_count(data)
        if lost is not None:
            self.summary.stack_lost_packets = lost
        if self.state.get("bytes_in_flight"):
            self.saw_inflight_metrics = True
        self.last_was_metrics = True

    def ack_time_from_rtt(self, data: dict) -> None:
        """The stack's own RTT sample for the ACK before this record, and the ACK's time.

        A stack takes an ACK's time when the datagram arrives and a packet's send time
        when its send loop starts, but its log stamps each record when it is written:
        aioquic passes the event loop's `now` to the controller (connection.py
        receive_datagram / datagrams_to_send, sent_time = now at 1616-1619), stamps its
        qlog with time.time() (logger.py:259), and logs packet_sent after building the
        whole burst (connection.py:1597): the logged send times lag 40-400 µs.  The
        controller's RTT sample is now - sent_time of the ACK's largest packet
        (recovery.py:299); where the stack logged it (latest_rtt right after the ACK whose
        largest packet it newly acknowledges), the raw sample is latest_rtt as logged (RFC
        9002 §5.1's) or latest_rtt + ack delay (aioquic logs it after §5.3's ack-delay
        adjustment, recovery.py:309-310), whichever is possible (min_rtt) and nearer the
        log's own difference.  A sample the log's times cannot hold is not taken: one more
        than 1 ms below the log's difference (a record is stamped after its stack read
        the clock, a send's the more so), or more than 1 ms above the ACK's time minus the
        last record before the packet's send burst (the stack read its send time after
        writing that record).  The burst's build time is the whole gap, several ms for a
        large burst in aioquic (its first flight's ACK: 16.8 ms sampled, 12.5 ms between
        the records).  The ACK carries the sample as `rtt` (the trace's field for the
        stack's sample: aioquic's slow-start exit and Cubic's W_cubic(t + rtt) read it,
        cubic.py:201-207, 116).

        Its time: the datagram's receipt record where the log has one (set in
        on_received); else that packet's send time + the raw sample, only within 1 ms of
        the log's time, never before an earlier event or after this record."""
        group = self.group
        if group is None or group.ack is None or group.rtt_sent_t is None or group.rtt_done:
            return
        group.rtt_done = True
        if self.stack_clock:
            return          # the record's time is the one the stack sampled with (qlog_dialects: ngtcp2)
        latest, min_rtt = data.get("latest_rtt"), data.get("min_rtt")
        if isinstance(latest, bool) or not isinstance(latest, (int, float)) or latest <= 0:
            return
        latest *= self.scale
        delay = min(group.ack.ack_delay, self.header.max_ack_delay)
        candidates = [latest]
        if delay:
            ok_min = isinstance(min_rtt, (int, float)) and not isinstance(min_rtt, bool)
            if ok_min and latest > min_rtt * self.scale + delay:
                candidates = []             # the raw sample was above min_rtt + delay: adjusted
            if not ok_min or latest > min_rtt * self.scale:
                candidates.append(latest + delay)
        logged_rtt = group.t - group.rtt_sent_t
        if latest == 1000 and logged_rtt < 1000:
            return          # aioquic's floor (max(latest_rtt, 1 ms), recovery.py:305), not the sample
        lo, hi = logged_rtt - GROUP_WINDOW_US, group.t - group.rtt_floor_t + GROUP_WINDOW_US
        best = min((r for r in candidates if lo <= r <= hi and round(r) >= 1),
                   key=lambda r: abs(r - logged_rtt), default=None)
        if best is None:
            return
        group.ack = group.ack._replace(rtt=round(best))
        if group.receipt or abs(best - logged_rtt) > GROUP_WINDOW_US:
            return
        t = max(group.floor, min(group.rtt_sent_t + round(best), self.last_t))
        if t > group.rtt_sent_t:
            group.t = t

    # -- writing
    def flush_group(self) -> None:
        group, self.group = self.group, None
        if not group:
            return
        t = self.unit_t = group.t
        events = []
        if group.lost:
            pns = sorted({pn for pn, _ in group.lost})
            events.append((Lost(t, tuple(pns)), group.lost[-1][1]))
            if group.pc:
                events.append((PersistentCongestion(t), group.lost[-1][1]))
        if group.ack is not None:
            ack = group.ack._replace(t=t)
            if ack.rtt is not None and ack.rtt == t - group.rtt_sent_t:
                ack = ack._replace(rtt=None)    # the trace's own difference says it: not repeated
            events.append((ack, group.ack_where))
        self.finish_pending(self.state)
        unit = _Unit(events)
        unit.where = group.where
        unit.timer = group.timer and not group.pc
        unit.unlogged = group.unlogged
        self.pending = unit

    def finish_pending(self, logged: dict) -> None:
        unit, self.pending = self.pending, None
        if unit is not None:
            unit.logged = {} if unit.unlogged else dict(logged)
            self.emit(unit)

    def emit(self, unit: _Unit) -> None:
        if not self.header_written:
            self.datagram_size_from_window()
            self.write("header", self.header)
            self.causality.start(self.header)
            self.header_written = True
        logged = {k: unit.logged[k] for k in ("cwnd", "ssthresh", "bytes_in_flight") if k in (unit.logged or {})}
        events = list(unit)
        kinds = {type(ev) for ev, _ in events}
        if (Lost in kinds and kinds <= {Lost, PersistentCongestion} and self.last_bif is not None
                and logged.get("bytes_in_flight") == self.last_bif):
            # A loss removes the packet's bytes from bytes in flight (RFC 9002 §6, A.10): a
            # record that still shows the same bytes was written before the stack reacted.
            # aioquic logs packet_lost and its metrics before the controller call, and for
            # a PTO's "loss" (congestion_event=False) nothing after on_packets_expired
            # (recovery.py _on_packets_lost, 555-582): the state after this event is unknown.
            logged = {}
            self.summary.stale_logged += 1
        elif "bytes_in_flight" in logged:
            self.last_bif = logged["bytes_in_flight"]
        # picoquic: losses of its retransmission timer are notified as timeouts
        # (loss_recovery.c:942, is_timer_expired), which is what the trace's
        # persistent_congestion means to the picoquic adapter: written when §7.6.2 holds
        collapsed = self.collapsed_to_floor(events, logged) or unit.timer
        index = 0
        while index < len(events):
            ev, where = events[index]

            def fail(reason, _where=where):
                raise QlogError(self.path, _where.line, f"{_where.text()}: the imported event breaks the trace "
                                                        f"rules: {reason}")
            # lenient reasons name the imported trace's line (header = line 1), as validate does
            self.causality.check(ev, fail, self.summary.events + 2)
            self.write("event", (ev, where, logged))
            self.count(ev, bool(logged))
            if collapsed and type(ev) is Lost:
                reason = self.causality.pc_failure()
                if reason:
                    what = ("picoquic's retransmission timer declared the losses" if unit.timer else
                            "the window fell to the minimum after the losses")
                    self.summary.note(f"{what} at line {where.line} "
                                      f"(event {where.record}) but RFC 9002 §7.6.2 does not hold on the trace "
                                      f"({reason}): no persistent_congestion written")
                else:
                    events.insert(index + 1, (PersistentCongestion(ev.t), where))
                    self.summary.inferred_persistent_congestion += 1
            index += 1
        if "cwnd" in logged:
            self.last_cwnd = logged["cwnd"]

    def datagram_size_from_window(self) -> None:
        """max_datagram_size, when the log does not state it, from the stack's first logged
        window: RFC 9002 §7.2's initial window is min(10 x max_datagram_size, max(14720,
        2 x max_datagram_size)), so a first window of 10 x s with 1200 <= s <= 1472 says s
        (quiche 0.30: 13,500 -> 1350; aioquic 0.8.8: 12,800 -> 1280)."""
        cwnd = self.state.get("cwnd")
        if self.mds_logged or not isinstance(cwnd, int) or cwnd % 10 or not 1200 <= cwnd // 10 <= 1472:
            return
        if cwnd // 10 != self.header.max_datagram_size:
            self.header.max_datagram_size = cwnd // 10
            self.summary.note(f"max_datagram_size not logged: {cwnd // 10}, from the first logged window "
                              f"({cwnd} = 10 x max_datagram_size, RFC 9002 §7.2)")

    def collapsed_to_floor(self, events: list, logged: dict) -> bool:
        """Persistent congestion the log shows only by its effect (aioquic logs no event for
        it): losses after which the stack's window is the minimum window, kMinimumWindow = 2 x
        max_datagram_size (RFC 9002 §7.2, §7.6.2), from a window that even a halving (Reno's
        loss reduction, RFC 9002 §7.3.2) would have left above it."""
        floor = 2 * self.header.max_datagram_size
        return (any(type(ev) is Lost for ev, _ in events)
                and not any(type(ev) is PersistentCongestion for ev, _ in events)
                and logged.get("cwnd") == floor and self.last_cwnd is not None and self.last_cwnd // 2 > floor)

    def count(self, ev, logged: bool) -> None:
        s = self.summary
        s.events += 1
        s.logged += logged
        kind = type(ev)
        if kind is Sent:
            s.sent += 1
        elif kind is Ack:
            s.acks += 1
        elif kind is Lost:
            s.lost += len(ev.pns)
        elif kind is PersistentCongestion:
            s.persistent_congestion += 1

    def finish(self) -> None:
        self.flush_group()
        self.finish_pending(self.state)
        if not self.header_written:
            raise QlogError(self.path, None, "no packet of the application data space (1RTT) was sent in this "
                                             "qlog: nothing to import (a trace needs transport:packet_sent)")
        if not self.summary.acks:
            # A controller grows and cuts only on acknowledgments (RFC 9002 §7): a trace of
            # sends alone would "replay" to a meaningless fidelity number, so refuse it.
            s = self.summary
            why = (f"; its {s.received_without_frames} packet_received record(s) log no frames (quinn 0.11 "
                   "logs none), so no acknowledgment can be read"
                   + (", and its bytes_in_flight / packets_in_flight never fell after one, so none can be "
                      "rebuilt from them" if self.stack_clock and not self.picoquic else "")
                   if s.received_without_frames else
                   f"; none of its {s.received} packet_received record(s) with frames carries an ack frame "
                   "(the log is the receiver's side? a trace needs the sender's)" if s.received else
                   "; it has no packet_received record")
            raise QlogError(self.path, None, f"no ACK of a packet sent in this qlog: nothing acknowledged "
                                             f"means nothing for a controller to react to{why}")
        s = self.summary
        if s.stack_lost_packets > s.lost:
            s.note(f"the stack's metrics count {s.stack_lost_packets} lost packets, the log names {s.lost} "
                   "(no packet_lost for the others, e.g. quiche 0.30): the trace lacks those losses, so the "
                   "adapter never reacts to them and fidelity after the first diverges for that reason")
        self.causality.finish()
        if not self.summary.logged:
            self.summary.note("no recovery:metrics_updated with cwnd / bytes_in_flight: the trace carries "
                              "none of the stack's own state (ccdiff fidelity needs it)")
        self.summary.header = header_to_dict(self.header, 2)
        reason = self.causality.lenient_reason
        self.summary.reachability = "lenient" if reason else "strict"
        self.summary.lenient_reason = reason


# What the import understands: qlog 0.x and the drafts' own names (a "9.9" would be a
# format it has never seen, read as if it were 0.3).
KNOWN_QLOG_VERSION = re.compile(r"^(0\.\d+(-draft-?\d+)?|draft-\d+|urn:ietf:params:qlog:.*)$")


def iter_import(path: str, summary: Summary | None = None, all_spaces: bool = False):
    """The import as a stream: yields ("header", Header) once, then ("event", (event,
    Where, logged)) for each trace event, logged being the stack's own metrics after it."""
    summary = summary if summary is not None else Summary()
    reader = read_records(path)
    fmt = next(reader)
    version = fmt["qlog_version"]
    if version is not None and not (isinstance(version, str) and KNOWN_QLOG_VERSION.match(version)):
        raise QlogError(path, 1, f"qlog version {json.dumps(version)[:40]}: this import reads qlog 0.x "
                                 "(qlog_version \"0.3\", \"0.4\", \"draft-NN\") and the current draft's "
                                 "file_schema (urn:ietf:params:qlog:...)")
    if fmt["time_units"] not in ("ms", "us"):
        raise QlogError(path, None, f'configuration.time_units {fmt["time_units"]!r}: expected "ms" or "us"')
    out: list = []
    importer = Importer(path, lambda kind, item: out.append((kind, item)), summary, all_spaces)
    title = fmt["title"] if isinstance(fmt["title"], str) else ""
    vantage = fmt["vantage_point"] if isinstance(fmt["vantage_point"], dict) else {}
    importer.header.name = title or path.rsplit("/", 1)[-1]
    if title == "picoquic":
        importer.picoquic_flavour()
    if dialects.stamps_on_stack_clock(vantage):
        importer.stack_clock = True
        importer.summary.note("ngtcp2 qlog: each record's time is the stack's own call time (ngtcp2_conn.c:87-93), "
                              "kept for ACKs; ack_delay and logged RTTs are whole ms (ngtcp2_qlog.c write_duration)")
    importer.string_numbers = dialects.strings_are_numbers(version)
    # A JSON document may put vantage_point after the events (aioquic does): not known yet then.
    seen = " ".join(str(vantage[k]) for k in ("name", "type") if k in vantage)
    importer.header.comment = (f"imported from qlog {fmt['qlog_version']} by ccdiff import"
                               f"{'; vantage ' + seen if seen else ''}; "
                               + ("all packet number spaces, renumbered in send order" if all_spaces else
                                  "application data space only"))
    def rescan():
        again = read_records(path)
        next(again)
        yield from again

    def quinn_fail(where, reason):
        raise QlogError(path, where.line, f"{where.text()}: {reason}")

    def dialects_of(records):
        """The records through each writer's reader (qlog_dialects), innermost first."""
        parts = (dialects.ShimKeys(), dialects.ShimAppLimited(), dialects.QuicheAppLimited(),
                 dialects.QuicheLosses(), dialects.QuinnAcks(rescan, quinn_fail))
        for part in parts:
            records = part.wrap(records)
        return parts, records

    if all_spaces:
        reader = dialects.DiscardedWithKeys(lambda: dialects_of(rescan())[1]).wrap(reader)
    (shim_keys, shim_app, quiche_app, quiche, quinn), records = dialects_of(reader)
    for where, ev in records:
        if quinn.active and not importer.stack_clock:
            importer.stack_clock = True
            importer.summary.note("quinn 0.11 qlog: no frames; ACKs rebuilt from its bytes_in_flight / "
                                  "packets_in_flight (the oldest packets in flight not declared lost, as an "
                                  "in-order path acknowledges them; qlog_dialects.QuinnAcks), ack_delay 0; "
                                  "each record's time is the now quinn was called with")
        importer.feed(where, ev, fmt)
        if out:
            yield from out
            out.clear()
    if version is None and not summary.records:
        raise QlogError(path, None, "not a qlog: a JSON document with no qlog_version (or file_schema) "
                                    "and no events in traces[0].events")
    def inferred(text: str, reader: str) -> None:
        """What the import wrote that the log does not name: in the trace's header, and noted."""
        summary.inferred.append(text)
        summary.note(f"{text} (qlog_dialects.{reader})")
    if quiche.inferred:
        inferred(f"quiche qlog: {quiche.inferred} packet_lost written from its cf_lost_packets counter (the "
                 "oldest packets sent before an acknowledged one, RFC 9002 §6.1)", "QuicheLosses")
    if summary.discarded_with_keys:
        inferred(f"{summary.discarded_with_keys} Initial/Handshake packet(s) never acknowledged nor lost left out: "
                 "discarded with their keys (RFC 9002 §6.4), they left the stack's bytes in flight without a "
                 "congestion event", "DiscardedWithKeys")
    if shim_keys.discards:
        summary.note(f"{shim_keys.discards} key discard(s) seen by the connection shim, filed before the datagram "
                     "that caused them: the packets then in flight left without an ACK (qlog_dialects.ShimKeys)")
    if shim_app.marks:
        inferred(f"{shim_app.marks} app-limited marks of the connection shim (the stack's own flag where a send "
                 "loop ended): its sends marked, app_idle / app_data where it changed", "ShimAppLimited")
    if quiche_app.quiche:
        how = ("its cf_app_limited flag" if quiche_app.flag is not None else
               "bytes in flight below the window before the next received datagram")
        inferred(f"quiche qlog: {quiche_app.marked} packets marked app-limited from {how} (a send loop that ran "
                 "out of data leaves quiche's app_limited set)", "QuicheAppLimited")
    for line, what in quiche.problems[:3]:
        summary.inferred.append(f"quiche qlog, line {line}: {what}")
        summary.note(f"quiche qlog, line {line}: {what}: the trace may lack or misplace that loss")
    if quinn.active:
        summary.note(f"quinn 0.11 qlog: {quinn.inferred_acks} ACKs rebuilt, {quinn.ack_only} packets not in "
                     "flight (no growth of its counters) left out")
    if fmt.get("other_trace_events"):
        summary.other_traces = fmt["other_trace_events"]
        summary.note(f"the file holds more than one trace: only the first was imported "
                     f"({fmt['other_trace_events']} events of the others left out)")
    importer.finish()
    yield from out


def trace_line(ev, where: Where, logged: dict) -> str:
    """One event of an imported trace: the canonical event plus its `logged` field."""
    row = event_to_dict(ev)
    row["logged"] = dict(logged, line=where.line, record=where.record)
    return json.dumps(row, separators=(", ", ": ")) + "\n"


def import_qlog(path: str, write, all_spaces: bool = False) -> Summary:
    """Stream the qlog at path into trace text, one line at a time through write(str).

    The events are spooled to a temporary file and the header written last, so that it
    can say what the import left out (known only at the end, #34 item 2); memory stays
    bounded by the spool, not the file."""
    import tempfile
    summary = Summary()
    header = None
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        for kind, item in iter_import(path, summary, all_spaces):
            if kind == "header":
                header = item
            else:
                spool.write(trace_line(*item))
        with_dropped(header, summary)
        write(json.dumps(header_to_dict(header, 2), separators=(", ", ": ")) + "\n")
        spool.seek(0)
        for line in spool:
            write(line)
    return summary


def with_dropped(header: Header, summary: Summary) -> None:
    """The header's comment says what the import left out of the trace, and what it wrote
    that the log does not name."""
    dropped = summary.dropped()
    if dropped:
        header.comment += "; left out: " + "; ".join(dropped)
    if summary.inferred:
        header.comment += "; inferred: " + "; ".join(summary.inferred)


class QlogTrace:
    """A qlog read as a trace, for replay and fidelity (duck-types StreamedTrace): the
    first pass imports and validates it whole, stream() imports it again as it goes.
    Holds one qlog line number per event (line_of), nothing else per event."""

    def __init__(self, path: str, all_spaces: bool = False):
        from array import array
        self.source, self.all_spaces = path, all_spaces
        self.summary = Summary()
        self._lines = array("q")
        self.header = None
        self.logged_metrics: set = set()      # the metrics the stack logs somewhere (fidelity)
        for kind, item in iter_import(path, self.summary, all_spaces):
            if kind == "header":
                self.header = item
            else:
                self._lines.append(item[1].line)
                self.logged_metrics.update(k for k in item[2] if item[2][k] is not None)
        self.n_events = len(self._lines)
        with_dropped(self.header, self.summary)
        self.reachability, self.lenient_reason = self.summary.reachability, self.summary.lenient_reason

    def line_of(self, index: int) -> int:
        return self._lines[index] if 0 <= index < self.n_events else 0

    def stream(self):
        for kind, item in iter_import(self.source, all_spaces=self.all_spaces):
            if kind == "event":
                yield item[0]

    def stream_logged(self):
        """(event, Where, logged) for each event: what fidelity compares."""
        for kind, item in iter_import(self.source, all_spaces=self.all_spaces):
            if kind == "event":
                yield item


def looks_like_qlog(path: str) -> bool:
    """By extension (.qlog, .sqlog), else by content: a JSON-SEQ record separator or a
    JSON document whose first key is a qlog one (a ccdiff trace starts {"ccdiff_trace")."""
    if path.endswith((".qlog", ".sqlog")):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(256).lstrip()
    except OSError:
        return False
    if head.startswith(b"\x1e"):
        return True
    return head.startswith(b"{") and b'"ccdiff_trace"' not in head[:64] and (
        b'"qlog_version"' in head or b'"qlog_format"' in head or b'"file_schema"' in head or b'"traces"' in head)


def describe(summary: Summary) -> list:
    """The terminal lines of an import: counts, what was left out and why."""
    s = summary
    lines = [f"{s.events} events ({s.sent} sent, {s.acks} acks, {s.lost} packets lost, "
             f"{s.persistent_congestion} persistent congestion"
             + (f" ({s.inferred_persistent_congestion} from the window's collapse)" if s.inferred_persistent_congestion
                else "") + f", {s.app_events} app events) from "
             f"{s.records} qlog events; {s.logged} with the stack's own metrics; {s.reachability}"
             + (f" ({s.lenient_reason})" if s.lenient_reason else "")]
    if s.metrics_order:
        lines.append(f"the stack logs a send's metrics {s.metrics_order} its packet_sent")
    for ptype, count in sorted(s.skipped_spaces.items()):
        lines.append(f"left out: {count} {ptype} packets (the trace holds the application data space)")
    shown = sorted(s.not_imported.items(), key=lambda item: item[1][1:])
    for name, (count, line, record) in shown[:20]:
        lines.append(f"not imported: {name} x{count} (first at line {line}, event {record}): "
                     "nothing a congestion trace holds")
    if len(shown) > 20:
        lines.append(f"not imported: {len(shown) - 20} more event names")
    if s.stale_logged:
        lines.append(f"{s.stale_logged} loss event(s) without the stack's metrics: the only record after the "
                     "packet_lost shows bytes in flight unchanged, i.e. written before the stack reacted")
    if s.closed_at:
        lines.append(f"the connection closed at {s.closed_at}: the metrics logged after it belong to no event")
    lines.extend(f"note: {n}" for n in s.notes)
    return lines

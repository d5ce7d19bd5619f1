"""qlog dialects: where older drafts and individual writers differ from qlog 0.3, mapped
onto what ccdiff/qlog_import.py reads (one rule per difference, each with its source).

- **Numbers as strings** (qlog draft-00 .. -02, draft-marx-qlog-main-schema-01 §3.3.3
  "uint64 ... as a string"): aioquic 2019 writes `"relative_time": "12"`, `"packet_number":
  "5"`, `"acked_ranges": [["0", "3"]]`, `"ack_delay": "25"` (aioquic 157437f,
  src/aioquic/quic/logger.py encode_ack_frame, QuicLoggerTrace.to_dict).  In files of those
  versions a decimal string where the importer needs a number is read as that number.
- **Events as arrays named by event_fields** with the event's name under `event` (draft-01,
  picoquic's loglib) or `event_type` (aioquic 2019: `["relative_time", "category",
  "event_type", "data"]`), or `type` (qlog 0.1's `fields`); categories and names in capitals
  (draft-00's `TRANSPORT` / `PACKET_SENT`) are lower-cased.
- **quic-trace's draft-00** (qvis sample quictrace_example_github.qlog): frame types in
  capitals (`ACK`), and received packets of type `UNKNOWN` (quic-trace records no packet
  type for them), read as 1-RTT, noted.
- **Old names**: `recovery:metric_update` (aioquic before 2019-08-23, qlog draft-00) is
  `recovery:metrics_updated`.
- **quiche 0.30** (its qlog crate, current draft names): `parameters_set` says `initiator`
  (not `owner`); an unset ssthresh is u64::MAX (no value); no `packet_lost` is logged, only
  a count (`cf_lost_packets.total` in `recovery_metrics_updated`), which the import reports;
  its losses are placed from that counter (QuicheLosses) and its app-limited sends from its
  `cf_app_limited` flag (QuicheAppLimited).
- **Key discards** are seldom logged: Initial / Handshake packets never acknowledged nor lost
  left with their keys (RFC 9002 §6.4) and are left out of an all-spaces import
  (DiscardedWithKeys).
- **ngtcp2** (lib/ngtcp2_qlog.c, 1.25.0; vantage_point name "ngtcp2"): qlog 0.3 names,
  JSON-SEQ, times relative to settings.initial_ts.  Every record is stamped with the ts
  of the call that wrote it (conn_update_timestamp, ngtcp2_conn.c:87-93), the same ts its
  recovery takes an RTT sample with (ngtcp2_conn_update_rtt): the ACK's record time is
  the stack's own, and rebuilding it from the logged latest_rtt (Importer.ack_time_from_rtt,
  for writers that stamp later than their controller reads the clock) would move it by the
  sample's truncation, since ngtcp2 writes times and durations as whole milliseconds
  (write_tstamp, write_duration: ts / NGTCP2_MILLISECONDS).  ccdiff's connection shim
  writes the times' microseconds back (implementations/ngtcp2/connection/shim.c); ack_delay
  and the logged RTTs stay whole milliseconds.  An ACK frame whose range is one packet
  is `[pn]` (write_ack_frame), as qlog allows.
- **The packet's size**: qlog 0.3 `raw.length`; drafts `header.packet_size`; quinn 0.11
  (qlog crate 0.15, quinn-proto src/connection/qlog.rs emit_packet_sent) `header.length`.
"""
from __future__ import annotations

import re

# qlog versions whose schema allowed numbers as strings (draft-marx-qlog-main-schema-00..02)
STRING_NUMBER_VERSION = re.compile(r"^draft-0[0-2]$")
_DECIMAL = re.compile(r"^-?\d+(\.\d+)?$")
# the fields the importer reads as numbers (data and its header / frames / metrics)
NUMERIC_KEYS = frozenset({
    "time", "relative_time", "packet_number", "packet_size", "length", "ack_delay", "ce",
    "cwnd", "congestion_window", "bytes_in_flight", "ssthresh", "latest_rtt", "min_rtt",
    "smoothed_rtt", "max_ack_delay", "max_datagram_size", "initial_rtt", "max_packet_size",
    "ack_delay_exponent"})
NAME_ALIASES = {"recovery:metric_update": "recovery:metrics_updated"}
EVENT_NAME_FIELDS = ("event", "event_type", "type")
# draft-ietf-quic-multipath's ACK frames (picoquic logs path_ack, its older mp_ack)
MULTIPATH_FRAMES = frozenset({"path_ack", "mp_ack"})
UNSET_U64 = (1 << 64) - 1      # quiche logs an ssthresh it has not set as u64::MAX (usize::MAX)


def strings_are_numbers(version) -> bool:
    return isinstance(version, str) and bool(STRING_NUMBER_VERSION.match(version))


def _number(text: str):
    return float(text) if "." in text else int(text)


def numbers_from_strings(value, key: str = ""):
    """A copy of value with the decimal strings at NUMERIC_KEYS (and in acked_ranges) as numbers."""
    if isinstance(value, dict):
        return {k: numbers_from_strings(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if key == "acked_ranges":
            return [[_number(x) if isinstance(x, str) and _DECIMAL.match(x) else x for x in item]
                    if isinstance(item, list) else item for item in value]
        return [numbers_from_strings(v) for v in value]
    if key in NUMERIC_KEYS and isinstance(value, str) and _DECIMAL.match(value):
        return _number(value)
    if key == "frame_type" and isinstance(value, str):
        return value.lower()            # draft-00 (quic-trace's converter): "ACK", "STREAM"
    return value


def array_row_name(row: dict) -> str | None:
    """category:event of an event array's fields, whichever name the writer used."""
    event = next((row[f] for f in EVENT_NAME_FIELDS if f in row), None)
    category = row.get("category")
    if not isinstance(event, str) or not isinstance(category, str):
        return None
    return canonical_name(f"{category.lower()}:{event.lower()}")


def canonical_name(name: str) -> str:
    return NAME_ALIASES.get(name, name)


def stamps_on_stack_clock(vantage) -> bool:
    """True for a writer whose record times are the time its own recovery used (ngtcp2):
    the ACK's time is the record's, not rebuilt from a logged RTT sample."""
    return isinstance(vantage, dict) and vantage.get("name") == "ngtcp2"


def packet_size(data: dict, header: dict, raw: dict):
    """The packet's size wherever its writer put it (None: nowhere)."""
    for value in (raw.get("length"), header.get("packet_size"), data.get("packet_size"), header.get("length")):
        if value is not None:
            return value
    return None


def lost_packet_count(metrics: dict):
    """The stack's own count of lost packets in a metrics record, where it logs one: quiche
    0.30's recovery_metrics_updated has cf_lost_packets {total, delta} (and logs no
    packet_lost), so the import can say how many losses the trace lacks."""
    value = metrics.get("cf_lost_packets")
    total = value.get("total") if isinstance(value, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) else None


# ---------------------------------------------------------------- quiche: losses from its counters

NOT_IN_FLIGHT_FRAMES = frozenset({"ack", "connection_close"})   # RFC 9002 §2: not ack-eliciting


def _in_flight(data: dict) -> bool:
    frames = data.get("frames")
    types = {f.get("frame_type") for f in frames if isinstance(f, dict)} if isinstance(frames, list) else set()
    return not (types and types <= NOT_IN_FLIGHT_FRAMES)


def _packet_space(data: dict) -> str:
    """initial, handshake or application, from a packet record (qlog 0.3's header, the
    drafts' packet_type / type)."""
    header = data.get("header") if isinstance(data.get("header"), dict) else {}
    ptype = str(header.get("packet_type", data.get("packet_type", data.get("type", "1RTT")))).lower()
    return ptype if ptype in ("initial", "handshake") else "application"


def _pn(data: dict):
    header = data.get("header") if isinstance(data.get("header"), dict) else {}
    pn = header.get("packet_number", data.get("packet_number"))
    return pn if isinstance(pn, int) and not isinstance(pn, bool) else None


def _delta(metrics: dict, key: str):
    value = metrics.get(key)
    delta = value.get("delta") if isinstance(value, dict) else None
    return delta if isinstance(delta, int) and not isinstance(delta, bool) else None


class QuicheLosses:
    """quiche's own qlog (0.26 and 0.30: recovery/congestion/recovery.rs, qlog_metrics) logs no
    packet_lost: the losses its detection declares show only as cf_lost_packets {total, delta}
    (and cf_lost_bytes) in the recovery_metrics_updated written after the ACK or the timer
    that declared them.  Without them a trace of a lossy connection has no loss, and the
    adapter never reacts (fidelity collapsed at the first one; future-recovery-start could
    not be judged on quiche's own events, docs/connection-mode.md).

    Which packets: RFC 9002 §6.1 declares a packet lost only if "it was sent prior to an
    acknowledged packet", by the packet or the time threshold, and both take the oldest first.
    So at a metrics record whose cf_lost_packets delta is n > 0, the n oldest packets of the
    space of the last ACK that are in flight, unacknowledged and below that space's largest
    acknowledged packet are the lost ones; cf_lost_bytes' delta, where logged, must be their
    sizes.  They are written as packet_lost records just before that metrics record, at its
    time (the importer then files each with the ACK that revealed it, or alone for a timer).
    Where the candidates are fewer than n, or the bytes disagree, the import says so (the
    trace then lacks or misplaces a loss).  A log with packet_lost records of its own is left
    as it is."""

    NAME = "quiche qlog"

    def __init__(self):
        self.flight: dict = {}             # space -> {pn: size} in flight, unacknowledged, in send order
        self.largest: dict = {}            # space -> largest acknowledged pn
        self.last_space = "application"    # of the last ACK frame read
        self.logs_losses = False
        self.inferred = 0
        self.problems: list = []           # (line, what) where the counters and the log disagree

    def wrap(self, records):
        for where, ev in records:
            data = ev.get("data") if isinstance(ev, dict) else None
            if not isinstance(data, dict):
                yield where, ev
                continue
            name = str(ev.get("name", ""))
            if name.endswith("packet_lost"):
                self.logs_losses = True
            elif name.endswith("packet_sent"):
                self._sent(data)
            elif name.endswith("packet_received"):
                self._received(data)
            elif name.endswith("metrics_updated") and not self.logs_losses:
                n = _delta(data, "cf_lost_packets")
                if n:
                    yield from ((where, lost) for lost in self._losses(where, ev, n, _delta(data, "cf_lost_bytes")))
            yield where, ev

    def _sent(self, data: dict) -> None:
        if not _in_flight(data):
            return
        header, raw = data.get("header") or {}, data.get("raw") or {}
        pn, size = _pn(data), packet_size(data, header, raw)
        if pn is not None and isinstance(size, int):
            self.flight.setdefault(_packet_space(data), {})[pn] = size

    def _received(self, data: dict) -> None:
        space = _packet_space(data)
        for frame in data.get("frames") or ():
            if not isinstance(frame, dict) or frame.get("frame_type") != "ack":
                continue
            self.last_space = space
            flight = self.flight.setdefault(space, {})
            for item in frame.get("acked_ranges") or ():
                if isinstance(item, list) and item and all(isinstance(x, int) for x in item):
                    lo, hi = item[0], item[-1]
                    self.largest[space] = max(self.largest.get(space, -1), hi)
                    for pn in [pn for pn in flight if lo <= pn <= hi]:
                        del flight[pn]

    def _losses(self, where, ev, n: int, nbytes) -> list:
        space = self.last_space
        flight = self.flight.get(space, {})
        candidates = sorted(pn for pn in flight if pn < self.largest.get(space, -1))[:n]
        if len(candidates) < n:
            self.problems.append((where.line, f"cf_lost_packets delta {n}, {len(candidates)} packet(s) sent "
                                              f"before an acknowledged one to place"))
        sizes = sum(flight[pn] for pn in candidates)
        if nbytes is not None and len(candidates) == n and nbytes != sizes:
            self.problems.append((where.line, f"cf_lost_bytes delta {nbytes}, the {n} oldest such packets "
                                              f"hold {sizes}"))
        ptype = {"initial": "initial", "handshake": "handshake"}.get(space, "1RTT")
        out = []
        for pn in candidates:
            del flight[pn]
            self.inferred += 1
            out.append({"time": ev.get("time"), "name": "quic:packet_lost",
                        "data": {"header": {"packet_type": ptype, "packet_number": pn},
                                 "trigger": "ccdiff: from cf_lost_packets (qlog_dialects.QuicheLosses)"}})
        return out


# ---------------------------------------------------------------- quiche: app-limited sends from its flag

class QuicheAppLimited:
    """quiche grows its window only on ACKs that find `Congestion.app_limited` false
    (cubic.rs / reno.rs on_packet_acked).  on_packet_sent sets it to bytes_in_flight +
    sent < cwnd (congestion/mod.rs:201); the application's loop of send() calls then ends
    on a full window, which clears it (lib.rs:4517), or with nothing to send, which leaves
    it (write_pkt_type's Done, lib.rs:8325).  A qlog has no record of how a loop ended, and
    without it the trace's packets are all cwnd-limited: the adapter then grows on every
    ACK where quiche grew on none of an app-limited stretch.

    quiche 0.30 logs the flag (`cf_app_limited` in recovery_metrics_updated, written when
    it changes: recovery/mod.rs QlogMetrics) after each send and after each received
    datagram (lib.rs:5532, 3509).  So the packets (in flight) sent between two received
    datagrams, one send loop or more, are marked app-limited (`ccdiff_app_limited`, read by
    the importer) when the flag is still true at the first metrics record after the next
    packet_received (ACK processing does not change it): the loop ran out of data with the
    window open, and the ACKs after it saw the flag set; a loop that ended on a full window
    cleared it, and its packets were sent cwnd-limited.  quiche 0.26 logs no flag (but its
    `cf_lost_packets` names it): they are marked app-limited when their bytes in flight, as
    logged before the next datagram came, are below the window (the loop that ended on a
    full window clears it a few dozen bytes earlier: not told apart).  Logs of other writers
    pass unchanged; records are held from a send to that decision (at most HOLD of them)."""

    HOLD = 4096

    def __init__(self):
        self.quiche = False     # a cf_ metric seen: quiche's own writer
        self.flag = None        # cf_app_limited as last logged
        self.window: dict = {}  # cwnd and bytes in flight as last logged
        self.held: list = []    # from the first undecided packet_sent on: (where, record, is a send)
        self.at_receipt = None  # (bytes in flight, cwnd) when a datagram came after them
        self.marked = 0

    def wrap(self, records):
        try:
            for where, ev in records:
                data = ev.get("data") if isinstance(ev, dict) else None
                name = str(ev.get("name", "")) if isinstance(ev, dict) and isinstance(data, dict) else ""
                is_send = name.endswith("packet_sent") and _in_flight(data)
                if name.endswith("metrics_updated"):
                    self._metrics(data)
                if is_send and self.at_receipt is not None:
                    yield from self._decide()           # no metrics record after that datagram
                if not self.held and not is_send:
                    yield where, ev
                    continue
                self.held.append((where, ev, is_send))
                if name.endswith("packet_received") and self.at_receipt is None:
                    self.at_receipt = (self.window.get("bif"), self.window.get("cwnd"))
                elif (self.at_receipt is not None and name.endswith("metrics_updated")) or len(self.held) >= self.HOLD:
                    yield from self._decide()
        except Exception:
            yield from self._decide()      # what it held reaches the importer before the error
            raise
        yield from self._decide()

    def _metrics(self, data: dict) -> None:
        if any(isinstance(k, str) and k.startswith("cf_") for k in data):
            self.quiche = True
        if isinstance(data.get("cf_app_limited"), bool):
            self.flag = data["cf_app_limited"]
        for key, name in (("bytes_in_flight", "bif"), ("congestion_window", "cwnd"), ("cwnd", "cwnd")):
            value = data.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                self.window[name] = value

    def _decide(self):
        held, self.held = self.held, []
        at_receipt, self.at_receipt = self.at_receipt, None
        if self.quiche and held:
            if self.flag is not None:
                marked = self.flag
            else:
                bif, cwnd = at_receipt or (self.window.get("bif"), self.window.get("cwnd"))
                marked = isinstance(bif, int) and isinstance(cwnd, int) and bif < cwnd
            for _, ev, is_send in held:
                if is_send:
                    ev["data"]["ccdiff_app_limited"] = marked
                    self.marked += marked
        for where, ev, _ in held:
            yield where, ev


# ---------------------------------------------------------------- a connection shim's app-limited marks

SHIM_APP_LIMITED = "ccdiff:app_limited"
NOT_APP_LIMITED_STATE = "ccdiff:not_app_limited"


class ShimAppLimited:
    """A connection shim that reads the stack's own app-limited flag where each send loop
    ends writes it to the qlog (`ccdiff:app_limited` {app_limited, written_by}: the quinn
    shim, from quinn-proto's Connection.app_limited, mod.rs:947, which decides whether the
    next ACKs grow the window and which quinn's qlog does not carry).  Each mark ends a
    loop: the packets sent since the previous mark are marked with it (`ccdiff_app_limited`,
    read by the importer), and where it changes, the trace's app events say so: app_idle
    after the loop's sends when the loop ran out of data with room in the window,
    app_data before them when it ended on the window or the pacer (trace-format.md: "the
    connection's send call found no application data to send").  The marks themselves are
    not passed on.  A log without marks passes unchanged; records are held from a send to
    the next mark (at most HOLD)."""

    HOLD = 4096

    def __init__(self):
        self.marks = 0
        self.idle = False           # an app_idle written and no app_data since
        self.held: list = []        # (where, record, is a send) from the first send after a mark

    def wrap(self, records):
        try:
            for where, ev in records:
                data = ev.get("data") if isinstance(ev, dict) else None
                name = str(ev.get("name", "")) if isinstance(ev, dict) and isinstance(data, dict) else ""
                if name == SHIM_APP_LIMITED and isinstance(data.get("app_limited"), bool):
                    self.marks += 1
                    yield from self._release((where, ev, data["app_limited"]))
                    continue
                is_send = name.endswith("packet_sent") and _in_flight(data)
                if not self.held and not is_send:
                    yield where, ev
                    continue
                self.held.append((where, ev, is_send))
                if len(self.held) >= self.HOLD:
                    yield from self._release(None)
        except Exception:
            yield from self._release(None)      # what it held reaches the importer before the error
            raise
        yield from self._release(None)

    def _state(self, where, ev, value: bool):
        self.idle = value
        return where, {"time": ev.get("time"), "name": "recovery:congestion_state_updated",
                       "data": {"new": "application_limited" if value else NOT_APP_LIMITED_STATE,
                                "trigger": "ccdiff: the connection shim's app-limited mark "
                                           "(qlog_dialects.ShimAppLimited)"}}

    def _release(self, mark):
        held, self.held = self.held, []
        if mark is None:
            yield from ((w, ev) for w, ev, _ in held)
            return
        where, ev, value = mark
        if not value and self.idle:
            yield self._state(held[0][0] if held else where, held[0][1] if held else ev, False)
        for w, record, is_send in held:
            if is_send:
                record["data"]["ccdiff_app_limited"] = value
            yield w, record
        if value and not self.idle:
            yield self._state(where, ev, True)


SHIM_KEYS_DISCARDED = "ccdiff:keys_discarded"
AFTER_A_DATAGRAM = ("packet_received", "metrics_updated", "packet_lost")


class ShimKeys:
    """A connection shim that sees the stack drop a packet number space's keys writes it
    to the qlog (`ccdiff:keys_discarded` {space}: the quinn shim, from quinn-proto's
    PacketSpace.crypto; discard_space takes the space's packets out of flight without a
    congestion event, RFC 9002 §6.4, and logs nothing).  The shim sees it after the call
    that did it, so after the records of that call: a received datagram (the Handshake keys,
    on HANDSHAKE_DONE) or a sent one (the Initial keys, when the first Handshake packet goes
    out).  It is filed as a qlog key_discarded record before them, where a reader of the
    stack's counters (QuinnAcks) must know it: the bytes in flight that fell there left with
    the keys, neither acknowledged nor lost."""

    def __init__(self):
        self.discards = 0
        self.held: list = []        # the records of the last call: a datagram received or sent

    def wrap(self, records):
        try:
            for where, ev in records:
                data = ev.get("data") if isinstance(ev, dict) else None
                name = str(ev.get("name", "")) if isinstance(ev, dict) and isinstance(data, dict) else ""
                if name == SHIM_KEYS_DISCARDED:
                    self.discards += 1
                    at = self.held[0] if self.held else (where, ev)
                    yield at[0], {"time": at[1].get("time"), "name": "quic:key_discarded",
                                  "data": {"key_type": f"client_{data.get('space')}_secret",
                                           "trigger": "ccdiff: the connection shim saw the keys go "
                                                      "(qlog_dialects.ShimKeys)"}}
                    yield from self._release()
                    continue
                sent = name.endswith("packet_sent")
                starts = name.endswith("packet_received") or (sent and not self._last_was_send())
                if starts:
                    yield from self._release()
                    self.held.append((where, ev))
                elif self.held and (sent or name.endswith(AFTER_A_DATAGRAM)):
                    self.held.append((where, ev))
                else:
                    yield from self._release()
                    yield where, ev
        except Exception:
            yield from self._release()      # what it held reaches the importer before the error
            raise
        yield from self._release()

    def _last_was_send(self) -> bool:
        return bool(self.held) and str(self.held[-1][1].get("name", "")).endswith("packet_sent")

    def _release(self):
        held, self.held = self.held, []
        yield from held


# ---------------------------------------------------------------- packets discarded with their keys

class DiscardedWithKeys:
    """RFC 9002 §6.4: when the Initial or Handshake keys are discarded, the packets of that
    space still in flight are removed from bytes in flight, and the controller is not told
    (quiche on_pkt_num_space_discarded, recovery.rs:843-868 in 0.30.0: bytes in flight less,
    no congestion call).  A trace has no such event: a packet kept in it is in flight to the
    end (quiche's own connection: the client's last Handshake packet, 111 bytes, so the
    adapter never saw an empty pipe and never shifted CUBIC's epoch over an idle period the
    stack did shift, docs/connection-mode.md).  Most writers log no key discard (quiche,
    ngtcp2), and one that does logs it after the packets were sent.

    So before the import, one pass over the log through the same dialect readers (quiche's
    losses from its counters, quinn's ACKs from its counters and the shim's key discards)
    finds the Initial and Handshake packets in flight that are never acknowledged nor
    declared lost; their packet_sent records are marked `ccdiff_discarded` and the importer
    leaves them out, as the stack's bytes in flight did once the keys went (during the
    handshake the trace's bytes in flight are that much lower: said in the import's
    notes)."""

    def __init__(self, chain):
        self.chain = chain          # the log again, through the same dialect readers
        self.gone: set = set()

    def scan(self) -> None:
        flight: dict = {"initial": set(), "handshake": set()}
        for _where, ev in self.chain():
            data = ev.get("data") if isinstance(ev, dict) else None
            if not isinstance(data, dict):
                continue
            name = str(ev.get("name", ""))
            space = _packet_space(data)
            if space == "application" or data.get("ccdiff_in_flight") is False:
                continue
            if name.endswith("packet_sent") and _in_flight(data) and _pn(data) is not None:
                flight[space].add(_pn(data))
            elif name.endswith("packet_lost") and _pn(data) is not None:
                flight[space].discard(_pn(data))
            elif name.endswith("packet_received"):
                for frame in data.get("frames") or ():
                    if isinstance(frame, dict) and frame.get("frame_type") == "ack":
                        for item in frame.get("acked_ranges") or ():
                            bounds = item if isinstance(item, list) else [item]
                            if bounds and all(isinstance(x, int) and not isinstance(x, bool) for x in bounds):
                                flight[space] -= set(range(bounds[0], bounds[-1] + 1))
        self.gone = {(space, pn) for space, pns in flight.items() for pn in pns}

    def wrap(self, records):
        self.scan()
        for where, ev in records:
            data = ev.get("data") if isinstance(ev, dict) and self.gone else None
            if isinstance(data, dict) and str(ev.get("name", "")).endswith("packet_sent") \
                    and (_packet_space(data), _pn(data)) in self.gone:
                data["ccdiff_discarded"] = True
            yield where, ev


# ---------------------------------------------------------------- quinn 0.11: ACKs from its counters

def looks_like_quinn_send(name: str, data: dict) -> bool:
    """quinn-proto 0.11's packet_sent (connection/qlog.rs emit_packet_sent): a header with
    the size in `length`, and neither frames nor raw."""
    header = data.get("header")
    return (name.endswith("packet_sent") and isinstance(header, dict) and "length" in header
            and "frames" not in data and "raw" not in data)


class QuinnAcks:
    """quinn-proto 0.11.19's own qlog (connection/qlog.rs) logs packet_sent (number, type,
    header.length), packet_received (number and type only: no frames, so no ACK ranges),
    packet_lost (number, type, size) and recovery:metrics_updated with only the fields that
    changed (paths.rs qlog_recovery_metrics), among them bytes_in_flight and
    packets_in_flight (the ack-eliciting packets in flight, `in_flight.ack_eliciting`).
    It writes a metrics record at the end of each transmit (mod.rs:939), of each received
    datagram (mod.rs:1154, 2049) and of each loss-detection timeout (mod.rs:1212), and only
    if something changed.  So:

    - a packet is in flight when the metrics after its transmit grew by its size and one
      packet (a datagram's packets: the one subset whose sizes and count make the growth);
      one with no growth (no metrics record before the next receipt) is not in flight: an
      ACK-only packet, marked so for the importer;
    - at a receipt's or timeout's metrics, the packets that left flight and are not among
      the packet_lost records before it were acknowledged (or, for Initial / Handshake,
      discarded with their keys).  Which ones: of the application space, the oldest
      packets in flight that this log never declares lost (read ahead: quinn removes a
      packet from flight once, acked or lost) - what an in-order path acknowledges -
      as many as the counters say; the rest from the Initial / Handshake packets in flight
      (acknowledged or discarded with their keys, RFC 9002 §6.4: quinn logs neither
      apart; both are written as acknowledged in their own space).
      Both counters must agree (bytes and packets) and the split be unique, else the
      import fails naming the record.  The ACK is written as a packet_received with an
      ack frame (ack_delay 0: quinn logs none) just before that metrics record, at its
      time, the `now` quinn was called with.

    A path that reorders packets breaks the "oldest first" rule without the counters
    always seeing it: the docs say so (docs/qlog-import.md)."""

    NAME = "quinn 0.11 qlog"

    def __init__(self, rescan, fail):
        self.rescan, self.fail = rescan, fail
        self.active = None                 # decided at the first packet_sent
        self.flight: dict = {}             # space -> {pn: size} in flight, in send order
        self.future_lost: dict = {}        # space -> pns this log declares lost (read ahead)
        self.sends: list = []              # (where, ev, space, pn, size) not yet decided
        self.lost: list = []               # (space, pn) logged since the last metrics
        self.since_metrics = False         # a received / lost record since the last metrics
        self.bytes, self.count = 0, 0      # the counters as logged so far
        self.inferred_acks = 0
        self.ack_only = 0
        self.discarded = [0, 0]            # bytes, packets taken out of flight with their keys (ShimKeys)
        self.smoothed = self.latest = None  # quinn's RTTs as last logged (s)

    @staticmethod
    def space(data: dict) -> str:
        header = data.get("header") if isinstance(data.get("header"), dict) else {}
        ptype = str(header.get("packet_type", "1RTT"))
        return "application" if ptype.lower() in ("1rtt", "0rtt") else ptype.lower()

    @staticmethod
    def pn(data: dict):
        header = data.get("header") if isinstance(data.get("header"), dict) else {}
        return header.get("packet_number")

    def read_ahead(self) -> None:
        for _, ev in self.rescan():
            if isinstance(ev, dict) and str(ev.get("name", "")).endswith("packet_lost"):
                data = ev.get("data") if isinstance(ev.get("data"), dict) else {}
                self.future_lost.setdefault(self.space(data), set()).add(self.pn(data))

    def wrap(self, records):
        for where, ev in records:
            if not isinstance(ev, dict) or not isinstance(ev.get("data"), dict):
                yield from self.flush_sends(None)
                yield where, ev
                continue
            name, data = str(ev.get("name", "")), ev["data"]
            if self.active is None and name.endswith("packet_sent"):
                self.active = looks_like_quinn_send(name, data)
                if self.active:
                    self.read_ahead()
            if not self.active:
                yield where, ev
                continue
            if name.endswith("packet_sent"):
                if self.since_metrics:
                    yield from self.flush_sends(None)
                    if not self.lost:
                        # a datagram that changed no counter (a late ACK of nothing new: quinn
                        # logs no metrics then), so this send's metrics are its own
                        self.since_metrics = False
                size = (data.get("header") or {}).get("length")
                self.sends.append((where, ev, self.space(data), self.pn(data), size if isinstance(size, int) else 0))
            elif name.endswith("metrics_updated"):
                nb = data.get("bytes_in_flight", self.bytes)
                nc = data.get("packets_in_flight", self.count)
                delay = self.ack_delay(data)
                if self.sends and not self.since_metrics:      # the end of a transmit
                    yield from self.flush_sends((nb - self.bytes, nc - self.count, where))
                else:                   # of a received datagram or a timeout: what left flight
                    yield from self.flush_sends(None)
                    for ack in self.acknowledged(where, ev, nb, nc, delay):
                        yield where, ack
                self.bytes, self.count = nb, nc
                self.lost, self.since_metrics = [], False
                yield where, ev
            else:
                yield from self.flush_sends(None)
                if name.endswith("key_discarded"):
                    key_type = str(data.get("key_type", ""))
                    for space in ("initial", "handshake"):
                        if space in key_type:
                            for size in self.flight.pop(space, {}).values():
                                self.discarded[0] += size
                                self.discarded[1] += 1
                if name.endswith("packet_lost"):
                    space, pn = self.space(data), self.pn(data)
                    self.lost.append((space, pn))
                    self.since_metrics = True
                elif name.endswith("packet_received"):
                    self.since_metrics = True
                yield where, ev
        yield from self.flush_sends(None)

    def flush_sends(self, growth):
        """The buffered sends, each marked in flight or not: growth = (bytes, packets, where)
        of the metrics after their transmit, None when none came (nothing grew)."""
        sends, self.sends = self.sends, []
        if not sends:
            return
        db, dc, where = growth if growth else (0, 0, None)
        if growth:
            # keys dropped in this transmit (ShimKeys filed it before): their packets left flight
            (gone_b, gone_c), self.discarded = self.discarded, [0, 0]
            db, dc = db + gone_b, dc + gone_c
        chosen = _subset([s[4] for s in sends], dc, db)
        if chosen is None:
            self.fail(where or sends[-1][0], f"{self.NAME}: bytes_in_flight grew {db} and packets_in_flight {dc} "
                      f"after {len(sends)} packet_sent record(s) of sizes {[s[4] for s in sends]}: no set of "
                      "them makes that growth, so which packets are in flight cannot be told")
        for i, (w, ev, space, pn, size) in enumerate(sends):
            in_flight = i in chosen
            if in_flight:
                self.flight.setdefault(space, {})[pn] = size
            else:
                self.ack_only += 1
            ev = dict(ev, data=dict(ev["data"], ccdiff_in_flight=in_flight))
            yield w, ev

    def ack_delay(self, data: dict) -> float:
        """The ACK delay quinn took off its RTT sample, in ms, from the RTT it logged: its
        update is smoothed' = (7 smoothed + adjusted) / 8 with adjusted = latest - ack_delay
        where min + ack_delay <= latest, else latest (paths.rs:335-354), so ack_delay =
        latest - (8 smoothed' - 7 smoothed).  quinn logs RTTs in seconds (f32) and only what
        changed; 0 where no sample was taken or nothing says otherwise.  Without it the
        adapter's smoothed RTT, which quinn's CUBIC reads (W_cubic(t + rtt)), left quinn's."""
        latest, smoothed = data.get("latest_rtt"), data.get("smoothed_rtt")
        numbers = [v for v in (latest, smoothed) if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numbers) != sum(v is not None for v in (latest, smoothed)):
            return 0.0
        before = self.smoothed
        if smoothed is not None:
            self.smoothed = smoothed
        if latest is not None:
            self.latest = latest
        if before is None or latest is None or self.latest is None:
            return 0.0
        delay = self.latest - (8 * self.smoothed - 7 * before)
        return round(delay * 1000, 3) if delay > 5e-7 else 0.0

    def acknowledged(self, where, ev, nb: int, nc: int, delay: float = 0.0):
        lost_b = lost_c = 0
        for space, pn in self.lost:
            size = self.flight.get(space, {}).pop(pn, None)
            if size is not None:
                lost_b, lost_c = lost_b + size, lost_c + 1
        (gone_b, gone_c), self.discarded = self.discarded, [0, 0]
        db, dc = self.bytes - nb - lost_b - gone_b, self.count - nc - lost_c - gone_c
        if db == 0 and dc == 0:
            return []
        app = self.flight.get("application", {})
        never_lost = self.future_lost.get("application", set())
        candidates = [pn for pn in app if pn not in never_lost]
        others = [(space, pn, size) for space, pns in self.flight.items() if space != "application"
                  for pn, size in pns.items()]
        solutions = []
        prefix = 0
        for k in range(0, min(dc, len(candidates)) + 1):
            if k:
                prefix += app[candidates[k - 1]]
            rest = _subset([o[2] for o in others], dc - k, db - prefix)
            if rest is not None:
                solutions.append((k, rest))
        if len(solutions) != 1:
            why = "no set of the packets in flight" if not solutions else f"{len(solutions)} different sets"
            self.fail(where, f"{self.NAME}: after the packet_received / packet_lost record(s) before it, "
                      f"bytes_in_flight fell {db} and packets_in_flight {dc} beyond the logged losses; "
                      f"{why} (the oldest application packets not declared lost, then Initial / Handshake "
                      "ones) make that fall, so the acknowledged packets cannot be told")
        k, rest = solutions[0]
        by_space = {}
        for i in sorted(rest):
            space, pn, _ = others[i]
            self.flight[space].pop(pn)
            by_space.setdefault(space, []).append(pn)
        acked = candidates[:k]
        for pn in acked:
            app.pop(pn)
        if acked:
            by_space["application"] = acked
        records = []
        for space, pns in by_space.items():
            self.inferred_acks += space == "application"
            ranges, lo = [], pns[0]
            for a, b in zip(pns, pns[1:] + [None]):
                if b != a + 1:
                    ranges.append([lo, a])
                    lo = b
            ptype = "1RTT" if space == "application" else space
            records.append({"time": ev.get("time"), "name": "transport:packet_received",
                            "data": {"header": {"packet_type": ptype}, "ccdiff_inferred": True,
                                     "frames": [{"frame_type": "ack", "acked_ranges": ranges,
                                                 "ack_delay": delay if space == "application" else 0}]}})
        return records


def _subset(sizes: list, count: int, total: int):
    """The indices of the one subset of sizes with that count and total (preferring later
    packets), or None.  Small: a datagram's packets, or the Initial / Handshake in flight."""
    from itertools import combinations
    if count < 0 or total < 0 or count > len(sizes):
        return None
    if len(sizes) > 16:
        return None
    for combo in sorted(combinations(range(len(sizes)), count), key=lambda c: [-i for i in reversed(c)]):
        if sum(sizes[i] for i in combo) == total:
            return set(combo)
    return None

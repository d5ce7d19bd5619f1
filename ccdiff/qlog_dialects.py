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
  a count (`cf_lost_packets.total` in `recovery_metrics_updated`), which the import reports.
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

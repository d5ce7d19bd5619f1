"""qlog for one replayed run: JSON-SEQ (.sqlog), QUIC event definitions.

Follows draft-ietf-quic-qlog-main-schema (sequential file: RFC 7464 record
separator before every record, a header record first) and
draft-ietf-quic-qlog-quic-events:

* quic:packet_sent / quic:packet_received (ACK frame) / quic:packet_lost come
  from the trace, so they are the same for every stack run on it;
* quic:recovery_metrics_updated and quic:congestion_state_updated come from
  the stack's snapshot after each event;
* ccdiff:cc_state_updated (a namespaced extension event, main schema §6)
  carries what the QUIC events have no field for: the recovery and CUBIC
  epoch start, W_max and K -- the values the death spiral is made of.

Metrics are logged after every event, not only when they change (the quic
events draft allows repeating unchanged values), so two runs' qlogs differ
at an event exactly when their snapshots after it differ.  Times are
milliseconds relative to the start of the trace.
"""
from __future__ import annotations

import json

from ..ledger import ACKED, LOST, PERSISTENT_CONGESTION, SENT

RS = b"\x1e"
PHASE_NAMES = {"slow_start": "slow_start", "congestion_avoidance": "congestion_avoidance",
               "recovery": "recovery", "app_limited": "application_limited", "unknown": "unknown"}


def _ms(us):
    return None if us is None else us / 1000


def header_record(title: str, description: str, vantage: str) -> dict:
    return {
        # qvis and older tools read qlog_version/qlog_format; current main-schema
        # tools read file_schema/serialization_format (main schema §3, §5).
        "qlog_version": "0.3",
        "qlog_format": "JSON-SEQ",
        "file_schema": "urn:ietf:params:qlog:file:sequential",
        "serialization_format": "application/qlog+json-seq",
        "title": title,
        "description": description,
        "trace": {
            "title": title,
            "vantage_point": {"name": vantage, "type": "client"},
            "common_fields": {"time_format": "relative_to_epoch",
                              "reference_time": {"clock_type": "monotonic", "epoch": "unknown"}},
            "event_schemas": ["urn:ietf:params:qlog:events:quic"],
        },
    }


def _ranges(pns) -> list:
    out = []
    for pn in pns:
        if out and out[-1][1] == pn - 1:
            out[-1][1] = pn
        else:
            out.append([pn, pn])
    return out


def _packet_records(raw, ev, time) -> list:
    kind = ev.kind
    if kind == SENT:
        pn, _, size, _ = ev.packets[0]
        return [{"time": time, "name": "quic:packet_sent",
                 "data": {"header": {"packet_type": "1RTT", "packet_number": pn}, "raw": {"length": size}}}]
    if kind == ACKED:
        frame = {"frame_type": "ack", "ack_delay": _ms(raw.ack_delay), "acked_ranges": _ranges(raw.pns)}
        if raw.ecn_ce:
            frame["ce"] = 1
        return [{"time": time, "name": "quic:packet_received",
                 "data": {"header": {"packet_type": "1RTT"}, "frames": [frame]}}]
    if kind == LOST:
        return [{"time": time, "name": "quic:packet_lost",
                 "data": {"header": {"packet_type": "1RTT", "packet_number": pn}}} for pn in raw.pns]
    return []


def _metrics(ev, snap) -> dict:
    latest, smoothed, rttvar, min_rtt = ev.rtt
    data = {"min_rtt": _ms(min_rtt), "smoothed_rtt": _ms(smoothed), "latest_rtt": _ms(latest),
            "rtt_variance": _ms(rttvar), "congestion_window": snap.cwnd,
            "bytes_in_flight": snap.bytes_in_flight}
    if snap.ssthresh is not None:
        data["ssthresh"] = snap.ssthresh
    return data


def _cc_state(snap) -> dict:
    return {"recovery_start": _ms(snap.recovery_start_us), "epoch_start": _ms(snap.epoch_start_us),
            "w_max": snap.w_max, "k": _ms(snap.k_us)}


def records_by_event(trace, resolved, snapshots) -> list:
    """One list of qlog event records per trace event (the qlog minus its header)."""
    out = []
    previous = "slow_start"
    for index, (raw, ev) in enumerate(zip(trace.events, resolved)):
        time = _ms(raw.t)
        records = _packet_records(raw, ev, time)
        if index < len(snapshots):
            snap = snapshots[index]
            phase = PHASE_NAMES.get(snap.phase, snap.phase)
            trigger = "persistent_congestion" if ev.kind == PERSISTENT_CONGESTION else \
                "ECN" if ev.kind == ACKED and ev.ecn_ce else None
            if phase != previous or trigger:
                data = {"old": previous, "new": phase}
                if trigger:
                    data["trigger"] = trigger
                records.append({"time": time, "name": "quic:congestion_state_updated", "data": data})
            previous = phase
            records.append({"time": time, "name": "quic:recovery_metrics_updated", "data": _metrics(ev, snap)})
            records.append({"time": time, "name": "ccdiff:cc_state_updated", "data": _cc_state(snap)})
        out.append(records)
    return out


def encode(record: dict) -> bytes:
    return RS + json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def write_sqlog(path, header: dict, per_event: list) -> None:
    with open(path, "wb") as out:
        out.write(encode(header))
        for records in per_event:
            for record in records:
                out.write(encode(record))


def read_sqlog(path) -> list:
    """Parse a JSON-SEQ file (RFC 7464): every record starts with RS and is one JSON text."""
    data = open(path, "rb").read()
    if not data.startswith(RS):
        raise ValueError(f"{path}: a JSON-SEQ file starts with the record separator 0x1E")
    return [json.loads(chunk) for chunk in data.split(RS)[1:]]

"""qlog for one replayed run: JSON-SEQ (.sqlog), in one of two schemas.

``"0.3"`` (the default) is what qvis reads today: qlog_version "0.3" with
qlog_format "JSON-SEQ" (draft-ietf-quic-qlog-main-schema-02/-03, the version
quiche's qlog crate writes) and the event names of
draft-ietf-quic-qlog-quic-events-02/-03.  qvis's congestion graph looks events
up as ``transport:packet_sent``, ``transport:packet_received``,
``recovery:packet_lost`` and ``recovery:metrics_updated``
(quiclog/qvis, CongestionGraphD3Renderer.ts), so any other name -- the newer
``quic:`` ones included -- gives it an empty graph.  Only that version's header
fields are written: qvis's loader (QlogLoaderV2) accepts "0.3" and takes
``common_fields.time_format`` "relative" with a numeric ``reference_time``.

``"draft"`` (``--qlog-schema draft``) is the current draft's form:
``file_schema``/``serialization_format`` header
(draft-ietf-quic-qlog-main-schema-09+) and the ``quic:`` names
(draft-ietf-quic-qlog-quic-events-08+, e.g. ``quic:recovery_metrics_updated``).
The two schemas carry the same events and fields; only names and the header
differ.

Events:

* ``packet_sent`` / ``packet_received`` (one ACK frame) / ``packet_lost`` come
  from the trace, so they are the same for every stack run on it;
  ``packet_lost`` carries the ``trigger`` RFC 9002 §6.1 gives it (the trace
  does not say): ``reordering_threshold`` when the largest acknowledged packet
  is kPacketThreshold (3) or more above it, ``time_threshold`` when a later
  packet but fewer than that is acknowledged, ``pto_expired`` when no later
  packet is (§6.1 would not declare it; a stack that did did so on a timer);
* ``parameters_set`` (recovery) once, before the first event: thresholds
  ccdiff's loss model assumes (RFC 9002 §6.1, §7.6.1), the trace's datagram
  size and initial RTT, the stack's initial and minimum window and its
  loss reduction factor;
* ``metrics_updated`` and ``congestion_state_updated`` come from the stack's
  snapshot after each event, logged on change only (the quic-events drafts
  allow repeating unchanged metrics but prefer logging actual updates; qvis
  steps its lines between records): a metrics record holds just the
  fields that changed since the last one, and a field first appears once it
  exists (no RTT before the first RTT sample, no ssthresh before the stack has
  one);
* ``ccdiff:cc_state_updated`` (a namespaced extension event, main schema §6)
  carries what the QUIC events have no field for -- the recovery and CUBIC
  epoch start, W_max and K, the values the death spiral is made of -- also on
  change only; ``null`` says a value the stack had is gone (e.g. no recovery
  period any more).

So replaying the records gives the state after every event, and two runs'
qlogs differ exactly where their snapshots do.  Times are milliseconds from
the start of the trace.
"""
from __future__ import annotations

import json

from ..output import atomic_file
from ..ledger import ACKED, LOST, PERSISTENT_CONGESTION, SENT
from ..trace import Ack, Lost, Sent
from ..reach import K_GRANULARITY_US, K_PACKET_THRESHOLD, K_PERSISTENT_CONGESTION_THRESHOLD, K_TIME_THRESHOLD

RS = b"\x1e"
PHASE_NAMES = {"slow_start": "slow_start", "congestion_avoidance": "congestion_avoidance",
               "recovery": "recovery", "app_limited": "application_limited", "unknown": "unknown"}

SCHEMAS = ("0.3", "draft")
DEFAULT_SCHEMA = "0.3"          # ccdiff/cli_help.py QLOG_SCHEMAS lists the same, for --qlog-schema
# Event names per schema: qlog 0.3 = draft-ietf-quic-qlog-quic-events-02/-03 (category:event),
# draft = draft-ietf-quic-qlog-quic-events-08 and later (all in the quic namespace).
NAMES = {
    "0.3": {"packet_sent": "transport:packet_sent", "packet_received": "transport:packet_received",
            "packet_lost": "recovery:packet_lost", "metrics_updated": "recovery:metrics_updated",
            "congestion_state_updated": "recovery:congestion_state_updated",
            "parameters_set": "recovery:parameters_set"},
    "draft": {"packet_sent": "quic:packet_sent", "packet_received": "quic:packet_received",
              "packet_lost": "quic:packet_lost", "metrics_updated": "quic:recovery_metrics_updated",
              "congestion_state_updated": "quic:congestion_state_updated",
              "parameters_set": "quic:recovery_parameters_set"},
}
CC_STATE = "ccdiff:cc_state_updated"
METRIC_FIELDS = ("min_rtt", "smoothed_rtt", "latest_rtt", "rtt_variance", "congestion_window",
                 "bytes_in_flight", "ssthresh")
CC_STATE_FIELDS = ("recovery_start", "epoch_start", "w_max", "k")


def check_schema(schema: str) -> str:
    if schema not in NAMES:
        raise ValueError(f"unknown qlog schema {schema!r} (expected one of {', '.join(SCHEMAS)})")
    return schema


def _ms(us):
    """Microseconds -> milliseconds; whole milliseconds as integers (shorter files, same value)."""
    if us is None:
        return None
    return us // 1000 if us % 1000 == 0 else us / 1000


def header_record(title: str, description: str, vantage: str, schema: str = DEFAULT_SCHEMA) -> dict:
    check_schema(schema)
    vantage_point = {"name": vantage, "type": "client"}
    if schema == "0.3":
        # qlog 0.3 (main-schema-02/-03) QlogFileSeq / TraceSeq: reference_time is a number
        # (ms since the Unix epoch) and time_format one of absolute/relative/delta.  A trace has
        # no wall clock: reference_time 0 and "relative" make `time` ms since the trace started.
        return {"qlog_version": "0.3", "qlog_format": "JSON-SEQ", "title": title,
                "description": description,
                "trace": {"title": title, "vantage_point": vantage_point,
                          "common_fields": {"reference_time": 0, "time_format": "relative",
                                            "protocol_type": ["QUIC"]}}}
    # Current main schema (draft-ietf-quic-qlog-main-schema-09+ §5, §7): no qlog_version or
    # qlog_format; a monotonic clock with an unknown epoch.
    return {"file_schema": "urn:ietf:params:qlog:file:sequential",
            "serialization_format": "application/qlog+json-seq",
            "title": title, "description": description,
            "trace": {"title": title, "vantage_point": vantage_point,
                      "common_fields": {"time_format": "relative_to_epoch",
                                        "reference_time": {"clock_type": "monotonic", "epoch": "unknown"}},
                      "event_schemas": ["urn:ietf:params:qlog:events:quic"]}}


def recovery_parameters(trace, resolved, snapshots, family: str = "cubic",
                        min_window_datagrams: int | None = None) -> dict:
    """The parameters_set data: what is known of the run's recovery parameters.

    reordering/time threshold, granularity and persistent congestion threshold are
    the RFC 9002 values ccdiff's loss model (ccdiff/reach.py) assumes; the datagram
    size and initial RTT are the trace header's.  The initial window is the stack's
    window after the first event when that is a send (sending does not change the
    window); the minimum window is the stack profile's floor; the loss reduction
    factor is RFC 9438 §4.6's beta for CUBIC, RFC 9002 §7.3.2's 1/2 for Reno.
    """
    header = trace.header
    num, den = K_TIME_THRESHOLD
    data = {"reordering_threshold": K_PACKET_THRESHOLD, "time_threshold": num / den,
            "timer_granularity": K_GRANULARITY_US // 1000, "initial_rtt": _ms(header.initial_rtt_us),
            "max_datagram_size": header.max_datagram_size}
    if snapshots and resolved and resolved[0].kind == SENT:
        data["initial_congestion_window"] = snapshots[0].cwnd
    if min_window_datagrams is not None:
        data["minimum_congestion_window"] = max(min_window_datagrams, 2) * header.max_datagram_size
    data["loss_reduction_factor"] = 0.7 if family == "cubic" else 0.5
    data["persistent_congestion_threshold"] = K_PERSISTENT_CONGESTION_THRESHOLD
    return data


def _ranges(pns) -> list:
    out = []
    for pn in pns:
        if out and out[-1][1] == pn - 1:
            out[-1][1] = pn
        else:
            out.append([pn, pn])
    return out


def loss_triggers(trace) -> dict:
    """Event index of each loss -> {pn: trigger}, derived as RFC 9002 §6.1 would declare it.

    A loss an ACK reveals comes before that ACK at the same time (docs/trace-format.md),
    so the largest acknowledged counts the ACK that follows the loss at its time.
    """
    events = trace.events
    out, largest = {}, -1
    for index, ev in enumerate(events):
        kind = type(ev)
        if kind is Ack:
            largest = max(largest, max(ev.pns))
        elif kind is Lost:
            seen = largest
            j = index + 1
            while j < len(events) and events[j].t == ev.t and type(events[j]) is not Sent:
                if type(events[j]) is Ack:
                    seen = max(seen, max(events[j].pns))
                    break
                j += 1
            out[index] = {pn: "reordering_threshold" if seen >= pn + K_PACKET_THRESHOLD else
                          "time_threshold" if seen > pn else "pto_expired" for pn in ev.pns}
    return out


def _packet_records(raw, ev, time, names, triggers, ce_count: int = 0) -> list:
    kind = ev.kind
    if kind == SENT:
        pn, _, size, _ = ev.packets[0]
        # qvis sizes a packet by raw.length (it rewrites header.packet_size with a warning).
        return [{"time": time, "name": names["packet_sent"],
                 "data": {"header": {"packet_type": "1RTT", "packet_number": pn}, "raw": {"length": size}}}]
    if kind == ACKED:
        frame = {"frame_type": "ack", "acked_ranges": _ranges(raw.pns)}
        if raw.ack_delay:            # optional in the AckFrame; absent means none reported
            frame["ack_delay"] = _ms(raw.ack_delay)
        if raw.ecn_ce:
            # The ACK frame's ECN counts are cumulative (RFC 9000 §19.3.2): each CE mark raises
            # it by one, so a reader (ccdiff import) sees every increase (RFC 9002 Appendix B.7).
            frame["ce"] = ce_count
        return [{"time": time, "name": names["packet_received"],
                 "data": {"header": {"packet_type": "1RTT"}, "frames": [frame]}}]
    if kind == LOST:
        return [{"time": time, "name": names["packet_lost"],
                 "data": {"header": {"packet_type": "1RTT", "packet_number": pn}, "trigger": triggers[pn]}}
                for pn in raw.pns]
    return []


def _metrics(ev, snap, sampled: bool) -> dict:
    """Every metric that exists after this event (None: not yet, or not reported)."""
    data = dict.fromkeys(METRIC_FIELDS)
    if sampled:                       # RFC 9002 §5: no RTT values before the first sample
        latest, smoothed, rttvar, min_rtt = ev.rtt
        data.update(min_rtt=_ms(min_rtt), smoothed_rtt=_ms(smoothed), latest_rtt=_ms(latest),
                    rtt_variance=_ms(rttvar))
    data.update(congestion_window=snap.cwnd, bytes_in_flight=snap.bytes_in_flight, ssthresh=snap.ssthresh)
    return data


def _cc_state(snap) -> dict:
    return {"recovery_start": _ms(snap.recovery_start_us), "epoch_start": _ms(snap.epoch_start_us),
            "w_max": snap.w_max, "k": _ms(snap.k_us)}


def _changed(now: dict, last: dict, clear: bool) -> dict:
    """Fields of now that differ from last.  A value that is gone is written as null when
    clear (the extension event), else left out (a qlog metric has no "unset" value)."""
    out = {}
    for key, value in now.items():
        if value != last.get(key) and (value is not None or (clear and key in last)):
            out[key] = value
    return out


def records_by_event(trace, resolved, snapshots, schema: str = DEFAULT_SCHEMA,
                     parameters: dict | None = None) -> list:
    """One list of qlog event records per trace event (the qlog minus its header).

    parameters_set goes with the first event.  Metrics, congestion state and the
    ccdiff extension are logged only when they change.
    """
    names = NAMES[check_schema(schema)]
    triggers = loss_triggers(trace)
    out = []
    previous = "slow_start"       # RFC 9002 §7.3.1: a sender starts in slow start
    metrics, cc_state = {}, {}    # what the file has said so far
    sampled = False
    ce_count = 0
    for index, (raw, ev) in enumerate(zip(trace.events, resolved)):
        time = _ms(raw.t)
        ce_count += ev.kind == ACKED and bool(raw.ecn_ce)
        records = []
        if index == 0:
            data = parameters if parameters is not None else recovery_parameters(trace, resolved, snapshots)
            records.append({"time": time, "name": names["parameters_set"], "data": data})
        records += _packet_records(raw, ev, time, names, triggers.get(index), ce_count)
        sampled = sampled or ev.kind == ACKED   # the ledger takes a sample from every ACK
        if index < len(snapshots):
            snap = snapshots[index]
            phase = PHASE_NAMES.get(snap.phase, snap.phase)
            trigger = "persistent_congestion" if ev.kind == PERSISTENT_CONGESTION else \
                "ECN" if ev.kind == ACKED and ev.ecn_ce else None
            if phase != previous or trigger:
                data = {"old": previous, "new": phase}
                if trigger:
                    data["trigger"] = trigger
                records.append({"time": time, "name": names["congestion_state_updated"], "data": data})
            previous = phase
            now = _metrics(ev, snap, sampled)
            changed = _changed(now, metrics, clear=False)
            if changed:
                records.append({"time": time, "name": names["metrics_updated"], "data": changed})
                metrics.update(changed)
            now = _cc_state(snap)
            changed = _changed(now, cc_state, clear=True)
            if changed:
                records.append({"time": time, "name": CC_STATE, "data": changed})
                cc_state.update(changed)
        out.append(records)
    return out


def encode(record: dict) -> bytes:
    return RS + json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def write_sqlog(path, header: dict, per_event: list) -> None:
    """Written whole or not at all (ccdiff/output.py)."""
    with atomic_file(path) as out:
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

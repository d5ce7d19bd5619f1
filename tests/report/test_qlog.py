"""qlog files: what qvis reads, structure against a schema written from the qlog versions, faithfulness.

The default file is qlog 0.3 with the transport:/recovery: names qvis's
congestion graph looks up; every event name and field ccdiff writes by default
is checked against the list of what that graph reads.  Metrics and state are
logged on change only, so replaying a file's records gives the state after
every event: the oracle's and a stack's qlog of the same trace describe
exactly the states their snapshots hold, and differ exactly where those do.
"""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from ccdiff.cli import main
from ccdiff.ledger import Ledger
from ccdiff.replay import replay
from ccdiff.report.qlog import (CC_STATE, NAMES, PHASE_NAMES, RS, encode, header_record, loss_triggers,
                                read_sqlog, recovery_parameters, records_by_event, write_sqlog)
from ccdiff.trace import load_trace, parse_trace_text

from .conftest import DEATH_SPIRAL, ROOT

SCHEMA = json.loads((Path(__file__).parent / "qlog_schema.json").read_text())
EXAMPLES = sorted((ROOT / "examples").glob("*.jsonl"))

# qvis's qlog 0.3 congestion-graph input: the event names and data fields
# CongestionGraphD3Renderer.ts (quiclog/qvis, visualizations/src/components/congestiongraph/renderer,
# parseQlog) reads.  A sent packet without raw.length is dropped ("invalid size"); header.packet_size
# is the pre-0.3 field, which qvis's loader rewrites to raw.length with an alert, so ccdiff writes
# raw.length only.  ACK frames in packet_received link to the sent packets they acknowledge; a lost
# packet is matched to its sent packet by (header.packet_type, header.packet_number).  Of
# metrics_updated the graph draws congestion_window (or cwnd), bytes_in_flight, min_rtt,
# smoothed_rtt and latest_rtt.
QVIS_CONGESTION_GRAPH = {
    "transport:packet_sent": {"header.packet_type", "header.packet_number", "raw.length"},
    "transport:packet_received": {"header.packet_type", "frames[].frame_type", "frames[].acked_ranges"},
    "recovery:packet_lost": {"header.packet_type", "header.packet_number"},
    "recovery:metrics_updated": {"congestion_window", "bytes_in_flight", "min_rtt", "smoothed_rtt",
                                 "latest_rtt"},
}
# What else the default file holds: qlog 0.3 fields and events (draft-ietf-quic-qlog-quic-events-02/-03)
# that the congestion graph passes over and other qvis views show (the sequence diagram prints
# ssthresh, recovery:parameters_set and recovery:congestion_state_updated), plus ccdiff's own
# namespaced extension (main schema §6), which qvis lists as an unknown event.
QLOG_03_NOT_GRAPHED = {
    "transport:packet_received": {"frames[].ack_delay", "frames[].ce"},
    "recovery:packet_lost": {"trigger"},
    "recovery:metrics_updated": {"ssthresh", "rtt_variance"},
    "recovery:congestion_state_updated": {"old", "new", "trigger"},
    "recovery:parameters_set": {"reordering_threshold", "time_threshold", "timer_granularity", "initial_rtt",
                                "max_datagram_size", "initial_congestion_window",
                                "minimum_congestion_window", "loss_reduction_factor",
                                "persistent_congestion_threshold"},
    CC_STATE: {"recovery_start", "epoch_start", "w_max", "k"},
}
RTT_FIELDS = {"min_rtt", "smoothed_rtt", "latest_rtt", "rtt_variance"}
MB = 1_000_000


def _validator(name):
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": SCHEMA["$defs"]})


def _qlogs(report):
    folder = report["out"] / "qlog" / "death-spiral"
    return folder / "quiche-0.26.0.sqlog", folder / "oracle.sqlog"


def _fields(data, prefix="") -> set:
    """Dotted paths of every leaf field; list items as name[] (acked_ranges stays a leaf)."""
    out = set()
    for key, value in data.items():
        path = prefix + key
        if isinstance(value, dict):
            out |= _fields(value, path + ".")
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for item in value:
                out |= _fields(item, path + "[].")
        else:
            out.add(path)
    return out


def _run(trace_path, spec, schema="0.3"):
    trace = load_trace(str(trace_path))
    ledger = Ledger(trace.header)
    resolved = [ledger.resolve(ev) for ev in trace.events]
    run = replay(trace, [spec]).runs[spec]
    params = recovery_parameters(trace, resolved, run.snapshots, run.target.family,
                                 run.profile.min_window_datagrams)
    return trace, resolved, run, records_by_event(trace, resolved, run.snapshots, schema, params)


def test_json_seq_framing_and_schema(death_report):
    header_check, event_check = _validator("header_0.3"), _validator("event")
    for path in _qlogs(death_report):
        data = path.read_bytes()
        chunks = data.split(RS)
        assert chunks[0] == b"" and all(c.endswith(b"\n") for c in chunks[1:])   # RFC 7464 framing
        records = read_sqlog(path)
        header_check.validate(records[0])
        assert records[0]["qlog_version"] == "0.3" and records[0]["qlog_format"] == "JSON-SEQ"
        assert records[0]["trace"]["common_fields"] == {"reference_time": 0, "time_format": "relative",
                                                        "protocol_type": ["QUIC"]}
        names = set()
        for record in records[1:]:
            event_check.validate(record)
            names.add(record["name"])
        assert set(NAMES["0.3"].values()) <= names
        times = [r["time"] for r in records[1:]]
        assert times == sorted(times) and times[0] == 0


def test_default_qlog_is_what_qvis_congestion_graph_reads(death_report):
    """Every name and field of the default file is one qvis's congestion graph reads, or a qlog 0.3
    field or event listed above that it passes over; everything the graph reads is there."""
    for path in _qlogs(death_report):
        written: dict = {}
        for record in read_sqlog(path)[1:]:
            written.setdefault(record["name"], set()).update(_fields(record["data"]))
        for name, fields in written.items():
            allowed = QVIS_CONGESTION_GRAPH.get(name, set()) | QLOG_03_NOT_GRAPHED.get(name, set())
            assert name in QVIS_CONGESTION_GRAPH or name in QLOG_03_NOT_GRAPHED, name
            assert fields <= allowed, (name, fields - allowed)
        for name, fields in QVIS_CONGESTION_GRAPH.items():   # the graph is not empty
            assert fields <= written[name], (name, fields - written[name])
        assert not any(n.startswith("quic:") for n in written)
        # qvis picks its loader from the first 1024 characters (FileLoader.GuesstimateFileTypeFromHeader)
        # and links ACKed and lost packets to sent ones by (packet_type, packet_number).
        head = path.read_bytes()[:1024]
        assert b'"qlog_version":"0.3"' in head and b'"qlog_format":"JSON-SEQ"' in head
        records = read_sqlog(path)[1:]
        sent = {(r["data"]["header"]["packet_type"], r["data"]["header"]["packet_number"])
                for r in records if r["name"] == "transport:packet_sent" and r["data"]["raw"]["length"] > 0}
        for r in records:
            if r["name"] == "recovery:packet_lost":
                assert (r["data"]["header"]["packet_type"], r["data"]["header"]["packet_number"]) in sent
            if r["name"] == "transport:packet_received":
                for frame in r["data"]["frames"]:
                    for lo, hi in frame["acked_ranges"]:
                        assert all((r["data"]["header"]["packet_type"], pn) in sent for pn in range(lo, hi + 1))


def test_schema_check_can_fail():
    """The schema is strict enough to reject what a careless writer would emit."""
    check = _validator("event")
    bad = [{"time": 1.0, "name": "recovery_metrics_updated", "data": {}},                 # no namespace
           {"time": 1.0, "name": "recovery:metrics_updated", "data": {"cwnd": 2400}},   # not a 0.3 field
           {"time": 1.0, "name": "recovery:metrics_updated", "data": {}},               # nothing changed
           {"time": 1.0, "name": "quic:recovery_metrics_updated", "data": {"cwnd": 2400}},
           {"time": 1.0, "name": "recovery:congestion_state_updated", "data": {"new": "app_limited"}},
           {"time": 1.0, "name": "recovery:packet_lost", "data": {"header": {"packet_type": "1RTT"}}},
           {"time": 1.0, "name": "recovery:packet_lost",                                  # no trigger
            "data": {"header": {"packet_type": "1RTT", "packet_number": 1}}},
           {"time": 1.0, "name": "recovery:parameters_set", "data": {"k_packet_threshold": 3}},
           {"time": -1, "name": "transport:packet_sent",
            "data": {"header": {"packet_type": "1RTT", "packet_number": 1}}}]
    for record in bad:
        with pytest.raises(jsonschema.ValidationError):
            check.validate(record)
    mixed = {"qlog_version": "0.3", "qlog_format": "JSON-SEQ",   # what issue 15 found: two versions in one
             "file_schema": "urn:ietf:params:qlog:file:sequential",
             "trace": {"vantage_point": {"type": "client"},
                       "common_fields": {"time_format": "relative", "reference_time": 0}}}
    for name in ("header_0.3", "header_draft"):
        with pytest.raises(jsonschema.ValidationError):
            _validator(name).validate(mixed)


@pytest.mark.parametrize("spec", ["quiche@0.26.0", "ngtcp2@1.25.0", "picoquic@1.1.53.0"])
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_qlog_size(example, spec, tmp_path):
    """Every example's qlog is under 1 MB (issue 15), with every packet in it.  Metrics and
    state only on change keep the file to the trace's packet events plus little: the death
    spiral is 36 kB (63 kB when metrics were logged after every event), idle-restart
    0.90-0.93 MB (its 2,709 sends and 1,369 ACKs alone are 0.57 MB at the fields qvis reads;
    the 9,582-event version before it was 2.1 MB and could not fit, docs/reports.md)."""
    trace, resolved, run, per_event = _run(example, spec)
    file = tmp_path / "run.sqlog"
    write_sqlog(file, header_record("t", "d", "v"), per_event)
    assert file.stat().st_size < MB
    assert sum(1 for g in per_event for r in g if r["name"] == "recovery:metrics_updated") <= len(trace.events)


def test_metrics_only_on_change_and_only_once_they_exist():
    _, resolved, run, per_event = _run(DEATH_SPIRAL, "quiche@0.26.0")
    records = [r for g in per_event for r in g]
    logged, state, seen_ack = {}, {}, False
    for record in records:
        data = record["data"]
        if record["name"] == "transport:packet_received":
            seen_ack = True
        if record["name"] == "recovery:metrics_updated":
            assert data, "an empty metrics record"
            for key, value in data.items():
                assert logged.get(key) != value, f"{key} repeated unchanged at t={record['time']}"
            if not seen_ack:     # no RTT sample yet (RFC 9002 §5)
                assert not RTT_FIELDS & set(data), data
            logged.update(data)
        if record["name"] == CC_STATE:
            for key, value in data.items():
                assert key not in state or state[key] != value, (key, value)
                assert value is not None or key in state, f"{key} cleared before it was ever set"
            state.update(data)
    first_metrics = next(r for r in records if r["name"] == "recovery:metrics_updated")
    assert "min_rtt" not in first_metrics["data"] and "ssthresh" not in first_metrics["data"]
    assert {"min_rtt", "smoothed_rtt", "latest_rtt", "ssthresh"} <= set(logged)
    # Far fewer records than events: the per-event logging wrote one per event.
    assert sum(r["name"] == CC_STATE for r in records) < len(per_event) // 2


def test_packet_lost_has_the_rfc9002_trigger():
    # pn 0..5 sent; 5 is acknowledged with the loss of 0 (5 >= 0 + 3: packet threshold) and of 3
    # (one packet above: the time threshold); 6 is lost with nothing later acknowledged.
    text = "\n".join([json.dumps({"ccdiff_trace": 1, "max_datagram_size": 1200})] +
                     [json.dumps({"t": 0, "ev": "sent", "pn": pn, "bytes": 1200}) for pn in range(7)] +
                     [json.dumps({"t": 50000, "ev": "lost", "pns": [0, 3]}),
                      json.dumps({"t": 50000, "ev": "ack", "pns": [[1, 2], [4, 5]]}),
                      json.dumps({"t": 900000, "ev": "lost", "pns": [6]})])
    triggers = loss_triggers(parse_trace_text(text))
    assert triggers == {7: {0: "reordering_threshold", 3: "time_threshold"}, 9: {6: "pto_expired"}}
    _, _, _, per_event = _run(DEATH_SPIRAL, "quiche@0.26.0")
    lost = [r for g in per_event for r in g if r["name"] == "recovery:packet_lost"]
    assert lost and all(r["data"]["trigger"] in ("reordering_threshold", "time_threshold", "pto_expired")
                        for r in lost)
    # The death spiral's first loss (pn 0 at t=10 ms) comes with the ACK of 1..3.
    assert lost[0]["data"] == {"header": {"packet_type": "1RTT", "packet_number": 0},
                               "trigger": "reordering_threshold"}


def test_parameters_set_once_at_the_start(death_report):
    for path in _qlogs(death_report):
        records = read_sqlog(path)[1:]
        params = [r for r in records if r["name"] == "recovery:parameters_set"]
        assert len(params) == 1 and records[0] == params[0]
        assert params[0]["data"] == {"reordering_threshold": 3, "time_threshold": 1.125, "timer_granularity": 1,
                                     "initial_rtt": 333, "max_datagram_size": 1200,
                                     "initial_congestion_window": 12000, "minimum_congestion_window": 2400,
                                     "loss_reduction_factor": 0.7, "persistent_congestion_threshold": 3}


def test_draft_schema_behind_the_option(death_report, tmp_path):
    """`--qlog-schema draft`: the same records under the current draft's quic: names and header."""
    out = tmp_path / "draft"
    assert main(["report", str(death_report["json"]), "--out", str(out), "--qlog-schema", "draft"]) == 1
    rename = {v: NAMES["draft"][k] for k, v in NAMES["0.3"].items()}
    header_check, event_check = _validator("header_draft"), _validator("event")
    for default in _qlogs(death_report):
        draft = read_sqlog(out / "qlog" / "death-spiral" / default.name)
        header_check.validate(draft[0])
        for record in draft[1:]:
            event_check.validate(record)
        expected = [dict(r, name=rename.get(r["name"], r["name"])) for r in read_sqlog(default)[1:]]
        assert draft[1:] == expected
        assert any(r["name"] == "quic:recovery_metrics_updated" for r in draft[1:])
    with pytest.raises(SystemExit) as exit_:
        main(["report", str(death_report["json"]), "--out", str(tmp_path / "x"), "--qlog-schema", "0.2"])
    assert exit_.value.code == 2


def _state_after_each_event(per_event):
    """What the qlog says the controller state is after each event (on-change records replayed)."""
    state = {"phase": "slow_start", "cwnd": None, "ssthresh": None, "bytes_in_flight": None,
             "recovery_start": None, "epoch_start": None, "w_max": None, "k": None}
    out = []
    for group in per_event:
        for record in group:
            data = record["data"]
            if record["name"] == "recovery:metrics_updated":
                for ours, theirs in (("cwnd", "congestion_window"), ("ssthresh", "ssthresh"),
                                     ("bytes_in_flight", "bytes_in_flight")):
                    if theirs in data:
                        state[ours] = data[theirs]
            elif record["name"] == "recovery:congestion_state_updated":
                assert data["old"] == state["phase"]
                state["phase"] = data["new"]
            elif record["name"] == CC_STATE:
                state.update(data)
        out.append(dict(state))
    return out


def _as_qlog_state(snap):
    ms = lambda us: None if us is None else us / 1000   # noqa: E731
    return {"cwnd": snap.cwnd, "ssthresh": snap.ssthresh, "bytes_in_flight": snap.bytes_in_flight,
            "phase": PHASE_NAMES[snap.phase], "recovery_start": ms(snap.recovery_start_us),
            "epoch_start": ms(snap.epoch_start_us), "w_max": snap.w_max, "k": ms(snap.k_us)}


def test_oracle_and_stack_qlogs_differ_exactly_where_snapshots_differ(death_report):
    stack_file, oracle_file = _qlogs(death_report)
    trace = load_trace(str(DEATH_SPIRAL))
    ledger = Ledger(trace.header)
    resolved = [ledger.resolve(ev) for ev in trace.events]
    result = replay(trace, ["quiche@0.26.0", "oracle"])
    stack_snaps, oracle_snaps = result.runs["quiche@0.26.0"].snapshots, result.runs["oracle"].snapshots
    assert len(stack_snaps) == len(oracle_snaps) == 132
    groups = {}
    for label, file in (("quiche@0.26.0", stack_file), ("oracle", oracle_file)):
        run = result.runs[label]
        groups[label] = records_by_event(trace, resolved, run.snapshots, "0.3", recovery_parameters(
            trace, resolved, run.snapshots, run.target.family, run.profile.min_window_datagrams))
        # The file is these records, in this order: the per-event split below is the file's.
        assert read_sqlog(file)[1:] == [r for g in groups[label] for r in g]
    stack_groups, oracle_groups = groups["quiche@0.26.0"], groups["oracle"]
    # Packet events come from the trace: the same in both files, event by event.
    packets = set(QVIS_CONGESTION_GRAPH) - {"recovery:metrics_updated"}
    for mine, theirs in zip(stack_groups, oracle_groups):
        assert [r for r in mine if r["name"] in packets] == [r for r in theirs if r["name"] in packets]
    # Each file's state after every event, replaying its on-change records, is its run's snapshot ...
    stack_states, oracle_states = _state_after_each_event(stack_groups), _state_after_each_event(oracle_groups)
    assert stack_states == [_as_qlog_state(s) for s in stack_snaps]
    assert oracle_states == [_as_qlog_state(s) for s in oracle_snaps]
    # ... so the files disagree at exactly the events where the snapshots disagree.
    qlog_diff = [i for i, (a, b) in enumerate(zip(stack_states, oracle_states)) if a != b]
    snap_diff = [i for i, (a, b) in enumerate(zip(stack_snaps, oracle_snaps)) if a != b]
    assert qlog_diff == snap_diff and snap_diff
    # The metrics alone differ exactly where cwnd/ssthresh/bytes in flight differ (quiche and the
    # oracle agree on those for the first events, not on W_max or the epoch).
    window = lambda states: [(s["cwnd"], s["ssthresh"], s["bytes_in_flight"]) for s in states]  # noqa: E731
    snap_window = lambda snaps: [(s.cwnd, s.ssthresh, s.bytes_in_flight) for s in snaps]  # noqa: E731
    metric_diff = [i for i, (a, b) in enumerate(zip(window(stack_states), window(oracle_states))) if a != b]
    assert metric_diff == [i for i, (a, b) in enumerate(zip(snap_window(stack_snaps), snap_window(oracle_snaps)))
                           if a != b]
    assert 0 < len(metric_diff) < len(stack_snaps)    # both agreeing and disagreeing stretches
    # The death spiral is in the qlog: the stack's recovery start lies after the event's time.
    first = next(i for i, s in enumerate(stack_states) if s["recovery_start"] is not None
                 and s["recovery_start"] > trace.events[i].t / 1000)
    assert first == 40

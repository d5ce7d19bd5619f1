"""qlog files: structure against a schema written from the qlog drafts, and faithfulness.

The oracle's qlog and a stack's qlog of the same trace must differ exactly
where their snapshots differ: the packet events (from the trace) are
identical, and the state each file describes after every event equals that
run's snapshot.
"""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from ccdiff.report.qlog import PHASE_NAMES, RS, read_sqlog
from ccdiff.replay import replay
from ccdiff.trace import load_trace

from .conftest import DEATH_SPIRAL

SCHEMA = json.loads((Path(__file__).parent / "qlog_schema.json").read_text())
PACKET_EVENTS = {"quic:packet_sent", "quic:packet_received", "quic:packet_lost"}


def _validator(name):
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": SCHEMA["$defs"]})


def _qlogs(report):
    folder = report["out"] / "qlog" / "death-spiral"
    return folder / "quiche-0.26.0.sqlog", folder / "oracle.sqlog"


def test_json_seq_framing_and_schema(death_report):
    header_check, event_check = _validator("header"), _validator("event")
    for path in _qlogs(death_report):
        data = path.read_bytes()
        chunks = data.split(RS)
        assert chunks[0] == b"" and all(c.endswith(b"\n") for c in chunks[1:])   # RFC 7464 framing
        records = read_sqlog(path)
        header_check.validate(records[0])
        assert records[0]["qlog_format"] == "JSON-SEQ"
        names = set()
        for record in records[1:]:
            event_check.validate(record)
            names.add(record["name"])
        assert {"quic:recovery_metrics_updated", "quic:congestion_state_updated", "quic:packet_lost",
                "quic:packet_sent", "quic:packet_received"} <= names
        times = [r["time"] for r in records[1:]]
        assert times == sorted(times) and times[0] == 0.0


def test_schema_check_can_fail():
    """The schema is strict enough to reject what a careless writer would emit."""
    check = _validator("event")
    bad = [{"time": 1.0, "name": "recovery_metrics_updated", "data": {}},                 # no namespace
           {"time": 1.0, "name": "quic:recovery_metrics_updated", "data": {"cwnd": 2400}},  # wrong field
           {"time": 1.0, "name": "quic:congestion_state_updated", "data": {"new": "app_limited"}},
           {"time": 1.0, "name": "quic:packet_lost", "data": {"header": {"packet_type": "1RTT"}}},
           {"time": -1, "name": "quic:packet_sent", "data": {"header": {"packet_type": "1RTT", "packet_number": 1}}}]
    for record in bad:
        with pytest.raises(jsonschema.ValidationError):
            check.validate(record)


def _per_event(records):
    """Split a qlog's events per trace event: each event's records end with ccdiff:cc_state_updated."""
    groups, current = [], []
    for record in records[1:]:
        current.append(record)
        if record["name"] == "ccdiff:cc_state_updated":
            groups.append(current)
            current = []
    assert current == []
    return groups


def _state_after_each_event(groups):
    """What the qlog says the controller state is after each event."""
    state, out = {"phase": "slow_start"}, []
    for group in groups:
        for record in group:
            data = record["data"]
            if record["name"] == "quic:recovery_metrics_updated":
                state.update(cwnd=data["congestion_window"], ssthresh=data.get("ssthresh"),
                             bytes_in_flight=data["bytes_in_flight"])
            elif record["name"] == "quic:congestion_state_updated":
                assert data["old"] == state["phase"]
                state["phase"] = data["new"]
            elif record["name"] == "ccdiff:cc_state_updated":
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
    result = replay(load_trace(str(DEATH_SPIRAL)), ["quiche@0.26.0", "oracle"])
    stack_snaps, oracle_snaps = result.runs["quiche@0.26.0"].snapshots, result.runs["oracle"].snapshots
    stack_groups, oracle_groups = _per_event(read_sqlog(stack_file)), _per_event(read_sqlog(oracle_file))
    assert len(stack_groups) == len(oracle_groups) == len(stack_snaps) == 132
    # Packet events come from the trace: the same in both files, event by event.
    for mine, theirs in zip(stack_groups, oracle_groups):
        assert [r for r in mine if r["name"] in PACKET_EVENTS] == [r for r in theirs if r["name"] in PACKET_EVENTS]
    # Each file's state after every event is its run's snapshot ...
    stack_states, oracle_states = _state_after_each_event(stack_groups), _state_after_each_event(oracle_groups)
    assert stack_states == [_as_qlog_state(s) for s in stack_snaps]
    assert oracle_states == [_as_qlog_state(s) for s in oracle_snaps]
    # ... so the files disagree at exactly the events where the snapshots disagree.
    qlog_diff = [i for i, (a, b) in enumerate(zip(stack_states, oracle_states)) if a != b]
    snap_diff = [i for i, (a, b) in enumerate(zip(stack_snaps, oracle_snaps)) if a != b]
    assert qlog_diff == snap_diff and snap_diff
    # The metrics records alone differ exactly where cwnd/ssthresh/bytes in flight differ
    # (quiche and the oracle agree on those for the first events, not on W_max or the epoch).
    metrics = lambda groups: [next(r["data"] for r in g if r["name"] == "quic:recovery_metrics_updated")  # noqa: E731
                              for g in groups]
    window = lambda snaps: [(s.cwnd, s.ssthresh, s.bytes_in_flight) for s in snaps]  # noqa: E731
    metric_diff = [i for i, (a, b) in enumerate(zip(metrics(stack_groups), metrics(oracle_groups))) if a != b]
    assert metric_diff == [i for i, (a, b) in enumerate(zip(window(stack_snaps), window(oracle_snaps))) if a != b]
    assert 0 < len(metric_diff) < len(stack_snaps)    # both agreeing and disagreeing stretches
    # The death spiral is in the qlog: the stack's recovery start lies after the event's time.
    first = next(i for i, g in enumerate(stack_groups) if stack_states[i]["recovery_start"] is not None
                 and stack_states[i]["recovery_start"] > g[-1]["time"])
    assert first == 40

"""Trace format 2: the application's own events (app_idle, app_data) and what each stack does with them.

A format 1 trace guessed per packet how the stack marks app-limited sending; format 2 says
what the application did, and each adapter does what its connection does (docs/adapters.md,
ABI 3).  These tests fail on the format 1 code: it refuses version 2 and the two events.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccdiff.ledger import APP_DATA, APP_IDLE, SENT, Ledger
from ccdiff.replay import replay
from ccdiff.trace import AppData, AppIdle, Header, TraceError, dump_trace, load_trace, parse_trace_text

ROOT = Path(__file__).resolve().parent.parent
IDLE_RESTART = ROOT / "examples" / "idle-restart.jsonl"


def text(version: int, *events: dict) -> str:
    rows = [{"ccdiff_trace": version, "max_datagram_size": 1200}, *events]
    return "".join(json.dumps(r) + "\n" for r in rows)


SEND = {"t": 0, "ev": "sent", "pn": 0, "bytes": 1200}
IDLE = {"t": 5, "ev": "app_idle"}
DATA = {"t": 9, "ev": "app_data"}


def test_format_2_reads_app_events_and_writes_them_back_byte_for_byte():
    source = text(2, SEND, IDLE, DATA, {"t": 10, "ev": "sent", "pn": 1, "bytes": 1200})
    trace = parse_trace_text(source)
    assert [type(ev) for ev in trace.events][1:3] == [AppIdle, AppData]
    again = dump_trace(trace)
    assert json.loads(again.splitlines()[0])["ccdiff_trace"] == 2
    assert dump_trace(parse_trace_text(again)) == again


def test_a_trace_without_app_events_is_still_written_as_format_1():
    assert json.loads(dump_trace(parse_trace_text(text(2, SEND))).splitlines()[0])["ccdiff_trace"] == 1


@pytest.mark.parametrize("version, events, line, reason", [
    (1, [SEND, IDLE], 3, 'is a format 2 event: the header must say "ccdiff_trace": 2'),
    (2, [SEND, IDLE, {"t": 6, "ev": "app_idle"}], 4, '"app_idle" while the application is already idle'),
    (2, [SEND, DATA], 3, '"app_data" while the application is not idle'),
    (2, [SEND, {"t": 5, "ev": "app_idle", "x": 1}], 3, 'unknown field "x" in "app_idle" event'),
    (3, [SEND], 1, "unsupported trace version 3; this ccdiff reads versions 1 and 2"),
])
def test_bad_app_events_name_the_line_and_the_rule(version, events, line, reason):
    with pytest.raises(TraceError) as err:
        parse_trace_text(text(version, *events), "t.jsonl")
    assert err.value.line == line and reason in err.value.reason


def test_app_events_never_make_a_trace_lenient():
    assert parse_trace_text(text(2, SEND, IDLE, DATA)).reachability == "strict"


def test_the_ledger_passes_them_on_and_marks_packets_sent_while_idle_app_limited():
    ledger = Ledger(Header())
    trace = parse_trace_text(text(2, SEND, IDLE, {"t": 7, "ev": "sent", "pn": 1, "bytes": 1200}, DATA,
                                  {"t": 10, "ev": "sent", "pn": 2, "bytes": 1200}))
    resolved = [ledger.resolve(ev) for ev in trace.events]
    assert [r.kind for r in resolved] == [SENT, APP_IDLE, SENT, APP_DATA, SENT]
    assert [r.app_limited for r in resolved if r.kind == SENT] == [False, True, False]
    assert resolved[1].bytes_in_flight == resolved[1].bytes_in_flight_after == 1200


def rows_of(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def as_text(rows: list, keep_app_events: bool) -> str:
    """The trace without per-packet app_limited guesses; with or without the application's events."""
    out = []
    for row in rows:
        row = {k: v for k, v in row.items() if k != "app_limited"}
        if "ccdiff_trace" in row and not keep_app_events:
            row["ccdiff_trace"] = 1
        if keep_app_events or row.get("ev") not in ("app_idle", "app_data"):
            out.append(row)
    return "".join(json.dumps(r) + "\n" for r in out)


def cwnds_at_packet_events(text_: str, spec: str) -> list:
    """The stack's windows at the trace's non-application events, in order."""
    trace = parse_trace_text(text_, spec)
    (run,) = replay(trace, [spec], check=False).runs.values()
    return [s.cwnd for ev, s in zip(trace.events, run.snapshots) if type(ev) not in (AppIdle, AppData)]


@pytest.fixture(scope="module")
def idle_restart_sim(tmp_path_factory) -> list:
    """The closed-loop idle-restart scenario, seed 0: eight bursts with idle periods between."""
    import subprocess
    import sys
    path = tmp_path_factory.mktemp("sim") / "idle-restart.jsonl"
    subprocess.run([sys.executable, "-m", "ccdiff", "sim", "idle-restart", "--seed", "0", "--stack", "oracle",
                    "--no-controls", "--trace", str(path)], cwd=ROOT, check=True, capture_output=True)
    return rows_of(path)


@pytest.mark.parametrize("spec, reacts", [("ngtcp2", True), ("picoquic", True), ("quiche@0.30.0", False)])
def test_each_adapter_does_what_its_connection_does_on_app_idle(idle_restart_sim, spec, reacts):
    """The same closed-loop trace, its per-packet app_limited guesses removed, with and
    without the application's events.  ngtcp2 marks the connection app-limited
    (ngtcp2_conn.c 12123-12129), so packets sent after an idle start are app-limited and
    its CUBIC freezes on their ACKs (ngtcp2_cc.c 402-408); picoquic sets
    last_sender_limited_time, which gates its CUBIC's growth and epoch (cubic.c 261-292):
    both windows differ.  quiche's send loop only clears app_limited, which its send hook
    does on every packet anyway (congestion/mod.rs): the same windows, event for event."""
    from ccdiff.build import ensure_built
    ensure_built(spec)
    assert any(row.get("ev") == "app_idle" for row in idle_restart_sim)
    with_events = cwnds_at_packet_events(as_text(idle_restart_sim, True), spec)
    without = cwnds_at_packet_events(as_text(idle_restart_sim, False), spec)
    assert len(with_events) == len(without)
    assert (with_events != without) is reacts
    first_idle = next(i for i, row in enumerate(idle_restart_sim) if row.get("ev") == "app_idle") - 1
    assert with_events[:first_idle] == without[:first_idle]   # nothing differs before it


def test_the_idle_restart_example_declares_its_idle_period_and_is_strict():
    trace = load_trace(str(IDLE_RESTART))
    assert trace.reachability == "strict"
    kinds = [type(ev) for ev in trace.events if type(ev) in (AppIdle, AppData)]
    assert kinds == [AppIdle, AppData, AppIdle]

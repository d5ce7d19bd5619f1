"""qlog from anyone (#34): an import that cannot yield a usable trace says why and exits 2;
a partial import says what it left out; losses and ACKs in the stack's own record order."""
from __future__ import annotations

import json
from pathlib import Path

from ccdiff.cli import main
from ccdiff.qlog_import import import_qlog
from ccdiff.replay import replay
from ccdiff.trace import load_trace
from tests.test_qlog_import import _acked, _lost, _metrics, _qlog, _sent


def _err(capsys) -> str:
    return capsys.readouterr().err


def _import(path) -> list:
    out = []
    import_qlog(str(path), out.append)
    return [json.loads(line) for line in "".join(out).splitlines()]


def test_an_import_with_no_ack_exits_2_saying_why(tmp_path, capsys):
    path = _qlog(tmp_path, [_sent(0, 0), _sent(1, 1), _metrics(1, 12000, 2400)])
    out = tmp_path / "x.jsonl"
    assert main(["import", str(path), "-o", str(out)]) == 2
    err = _err(capsys)
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: no ACK of a packet sent")
    assert "no packet_received record" in err
    assert not out.exists()                               # nothing half written


def test_an_import_whose_received_packets_log_no_frames_names_that(tmp_path, capsys):
    # quinn 0.11's writer: packet_received without frames, so no acknowledgment to read
    received = (5, "transport:packet_received", {"header": {"packet_type": "1RTT", "packet_number": 0}})
    path = _qlog(tmp_path, [_sent(0, 0), received, _sent(6, 1)])
    assert main(["import", str(path)]) == 2
    err = _err(capsys)
    assert "1 packet_received record(s) log no frames" in err


def test_fidelity_refuses_a_log_without_acks(tmp_path, capsys):
    path = _qlog(tmp_path, [_sent(0, 0), _sent(1, 1), _metrics(1, 12000, 2400)])
    assert main(["fidelity", str(path), "--stack", "oracle"]) == 2
    assert "no ACK of a packet sent" in _err(capsys)


def test_the_header_says_what_the_import_left_out(tmp_path):
    path = _qlog(tmp_path, [
        (0, "transport:packet_sent", {"header": {"packet_type": "initial", "packet_number": 0},
                                      "raw": {"length": 1200}, "frames": [{"frame_type": "crypto"}]}),
        _sent(1, 0), (2, "transport:datagrams_sent", {"count": 1}), _acked(20, [[0, 0]]),
        _lost(21, 7)])                                    # packet 7 was never sent
    header = _import(path)[0]
    assert header["comment"].endswith("; left out: 1 initial packets; 1 packet_lost of packets not in flight; "
                                      "events not imported: transport:datagrams_sent x1")


def test_a_loss_the_stack_reacted_to_before_the_ack_keeps_its_own_time(tmp_path):
    """aioquic-reno-timer-loss: the loss timer declares packet 1 lost and the window is cut
    (logged) 0.2 ms before an ACK of packet 2 arrives: the stack applied the loss first."""
    path = _qlog(tmp_path, [
        _sent(0, 0), _sent(1, 1), _sent(2, 2), _acked(12, [[0, 0]]), _metrics(12, 13200, 2400),
        _lost(30.0, 1), _metrics(30.0, 13200, 2400), _metrics(30.01, 6600, 1200),
        _acked(30.2, [[0, 0], [2, 2]]), _metrics(30.2, 6600, 0)])
    events = [e for e in _import(path)[1:]]
    assert [(e["ev"], e["t"]) for e in events[-2:]] == [("lost", 30000), ("ack", 30200)]


def test_fidelity_counts_a_point_where_only_the_stack_has_a_value(tmp_path):
    """The stack logged an ssthresh where the adapter has none: that point is compared, it
    disagrees, and it is the first divergence (it was skipped before #34 item 4)."""
    from ccdiff.fidelity import fidelity
    path = _qlog(tmp_path, [
        _metrics(0, 12000, 1200), _sent(0, 0), _metrics(0.01, 12000, 2400), _sent(0.01, 1),
        _acked(20, [[0, 1]]), _metrics(20, 14400, 0, ssthresh=50000)])
    result = fidelity(str(path), "oracle", keep_series=False)
    ssthresh = result["metrics"]["ssthresh"]
    assert (ssthresh["compared"], ssthresh["agree"], ssthresh["one_sided"]) == (1, 0, 1)
    d = result["first_divergence"]
    assert (d["kind"], d["adapter"], d["logged"]) == ("ack", None, 50000)


def test_fidelity_gives_exact_and_near_rates(tmp_path):
    from ccdiff.fidelity import fidelity
    path = _qlog(tmp_path, [
        _metrics(0, 12000, 1200), _sent(0, 0), _metrics(0.01, 12000, 2400), _sent(0.01, 1),
        _acked(20, [[0, 1]]), _metrics(20, 14401, 0)])          # the oracle: 14400, one byte apart
    cwnd = fidelity(str(path), "oracle", keep_series=False)["metrics"]["cwnd"]
    assert (cwnd["compared"], cwnd["agree"], cwnd["within_1pct"], cwnd["within_datagram"]) == (3, 2, 3, 3)


def test_the_wrong_algorithm_is_said_before_any_number(capsys):
    """picoquic's NewReno connection through the picoquic (CUBIC) adapter: 45.3% of cwnd
    points agree, and the first line says why; through picoquic-reno no warning."""
    from pathlib import Path

    from ccdiff.build import ensure_built
    qlog = str(Path(__file__).resolve().parent / "fixtures/qlog/picoquic-reno-random-loss.qlog")
    ensure_built("picoquic")
    assert main(["fidelity", qlog, "--stack", "picoquic"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("warning: the stack's own log looks like NewReno (4 of 5 window cuts at losses "
                             "are x0.5, RFC 9002 §7.3.2), the adapter of picoquic like no cut at loss")
    main(["fidelity", qlog, "--stack", "picoquic-reno"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("algorithm: the log looks like NewReno") and not any("warning" in o for o in out)


DRAFT01 = Path(__file__).resolve().parent / "fixtures/qlog/aioquic-draft01-reno-random-loss.qlog"


def test_a_draft01_qlog_with_numbers_as_strings_imports():
    """aioquic 0.8.8's own qlog (make_fixtures.py draft01-reno-random-loss): qlog draft-01,
    events as arrays named by event_fields with "event_type", every number a string."""
    head = DRAFT01.read_text()[:400]
    assert '"qlog_version": "draft-01"' in head and '"event_type"' in head and '["0", "transport"' in head
    summary = import_qlog(str(DRAFT01), lambda _: None)
    assert (summary.events, summary.sent, summary.acks, summary.lost) == (162, 113, 44, 5)
    assert summary.logged == 162 and summary.metrics_order == "before"


def test_draft00_names_in_capitals_and_metric_update(tmp_path):
    """qlog draft-00 (aioquic before 2019-08-23): TRANSPORT / PACKET_SENT in capitals under
    "event", recovery:metric_update for the metrics, numbers as strings, times in ms."""
    doc = {"qlog_version": "draft-00", "traces": [{
        "event_fields": ["relative_time", "category", "event", "data"],
        "events": [
            ["0", "TRANSPORT", "PACKET_SENT", {"packet_type": "1RTT", "header": {"packet_number": "0",
                                                                                 "packet_size": "1200"},
                                                "frames": [{"frame_type": "stream"}]}],
            ["0", "RECOVERY", "METRIC_UPDATE", {"cwnd": "12000", "bytes_in_flight": "1200"}],
            ["20", "TRANSPORT", "PACKET_RECEIVED", {"packet_type": "1RTT", "header": {"packet_number": "0"},
                                                    "frames": [{"frame_type": "ack", "ack_delay": "1",
                                                                "acked_ranges": [["0", "0"]]}]}],
            ["20", "recovery", "metric_update", {"cwnd": "13200", "bytes_in_flight": "0"}]]}]}
    path = tmp_path / "d0.qlog"
    path.write_text(json.dumps(doc))
    rows = _import(path)
    assert [(r["ev"], r["t"], r["logged"].get("cwnd")) for r in rows[1:]] == [("sent", 0, 12000), ("ack", 20000, 13200)]
    assert rows[2]["ack_delay"] == 1000


def test_quinn_packet_size_in_header_length_and_no_frames_exits_2_saying_so(tmp_path, capsys):
    """quinn-proto 0.11.19 (connection/qlog.rs): packet_sent has header.length and no frames,
    packet_received has no frames: the size is read, then the import says why it stops."""
    def sent(t, pn):
        return (t, "quic:packet_sent", {"header": {"packet_type": "1RTT", "packet_number": pn, "length": 1200}})
    received = (15, "quic:packet_received", {"header": {"packet_type": "1RTT", "packet_number": 0}})
    def metrics(t, n):
        return (t, "quic:recovery_metrics_updated", {"bytes_in_flight": 1200 * n, "packets_in_flight": n})
    # its counters grow with each send and never fall: no ACK can be rebuilt from them
    path = _qlog(tmp_path, [sent(0, 0), metrics(0, 1), sent(1, 1), metrics(1, 2), received,
                            (15, "quic:recovery_metrics_updated", {"congestion_window": 14400})])
    assert main(["import", str(path)]) == 2
    err = _err(capsys)
    assert "no ACK of a packet sent" in err and "log no frames (quinn 0.11 logs none)" in err
    assert "never fell after one, so none can be rebuilt" in err


def test_quiche_dialect_initiator_unset_ssthresh_window_size_and_uncounted_losses(tmp_path, capsys):
    """quiche 0.30's own qlog (ccdiff sim --mode connection --qlog): parameters_set by
    initiator, ssthresh u64::MAX while unset, no max_datagram_size (the first window
    13,500 = 10 x 1350), and losses only counted (cf_lost_packets), never logged."""
    params = (0, "quic:parameters_set", {"initiator": "remote", "max_ack_delay": 20})
    path = _qlog(tmp_path, [
        params,
        (0, "quic:packet_sent", {"header": {"packet_type": "1RTT", "packet_number": 0}, "raw": {"length": 1350},
                                 "frames": [{"frame_type": "stream"}]}),
        (0, "quic:recovery_metrics_updated", {"congestion_window": 13500, "bytes_in_flight": 1350,
                                              "ssthresh": (1 << 64) - 1}),
        _acked(20, [[0, 0]]),
        (20, "quic:recovery_metrics_updated", {"congestion_window": 14850, "bytes_in_flight": 0,
                                               "cf_lost_packets": {"total": 2, "delta": 2}})])
    rows = _import(path)
    header = rows[0]
    assert (header["max_datagram_size"], header["max_ack_delay"]) == (1350, 20000)
    assert "ssthresh" not in rows[1]["logged"]
    assert "2 packet losses the stack counted (its metrics' lost packets) but logged no packet_lost for" \
        in header["comment"]
    assert main(["import", str(path)]) == 0
    assert "the stack's metrics count 2 lost packets, the log names 0" in capsys.readouterr().err


def test_quiche_losses_are_read_from_its_counters(tmp_path, capsys):
    """quiche logs no packet_lost, only cf_lost_packets {total, delta} (and cf_lost_bytes) in
    the metrics after the ACK or the timer that declared them.  RFC 9002 §6.1 declares only
    packets sent before an acknowledged one, oldest first: those are the lost ones
    (qlog_dialects.QuicheLosses), written as the trace's losses -- the one an ACK revealed
    before that ACK at its time, a timer's at its own time."""
    def sent(t, pn):
        return (t, "quic:packet_sent", {"header": {"packet_type": "1RTT", "packet_number": pn},
                                        "raw": {"length": 1350}, "frames": [{"frame_type": "stream"}]})

    def metrics(t, cwnd, bif, lost=0, lost_bytes=None, total=0):
        data = {"congestion_window": cwnd, "bytes_in_flight": bif, "cf_lost_packets": {"total": total, "delta": lost}}
        if lost_bytes is not None:
            data["cf_lost_bytes"] = {"total": lost_bytes, "delta": lost_bytes}
        return (t, "quic:recovery_metrics_updated", data)
    path = _qlog(tmp_path, [
        (0, "quic:parameters_set", {"initiator": "remote", "max_ack_delay": 20}),
        *[sent(0, pn) for pn in range(6)], metrics(0, 13500, 8100),
        _acked(20, [[1, 4]]), metrics(20, 9450, 0, lost=1, lost_bytes=1350, total=1),   # 0: 4 below the largest
        *[sent(21, pn) for pn in (6, 7, 8)], metrics(21, 9450, 5400),
        _acked(30, [[7, 7]]), metrics(30, 9450, 4050),
        metrics(45, 6615, 1350, lost=2, total=3)])          # a timer: 5 and 6, sent before 7; not 8
    rows = _import(path)
    events = [(r["t"], r["ev"], r.get("pns")) for r in rows[1:] if r["ev"] in ("lost", "ack")]
    assert events == [(20000, "lost", [0]), (20000, "ack", [[1, 4]]), (30000, "ack", [7]),
                      (45000, "lost", [[5, 6]])], events
    assert "quiche qlog: 3 packet_lost written from its cf_lost_packets counter" in rows[0]["comment"]
    assert "the log names" not in rows[0]["comment"]
    # More counted than can be placed (nothing acknowledged after them): said, not invented.
    bad = _qlog(tmp_path, [sent(0, 0), sent(0, 1), metrics(0, 13500, 2700), _acked(20, [[0, 0]]),
                           metrics(20, 9450, 0, lost=2, total=2)], name="bad.sqlog")
    header = _import(bad)[0]
    assert "cf_lost_packets delta 2, 0 packet(s) sent before an acknowledged one to place" in header["comment"]


def test_quiche_app_limited_sends_are_read_from_its_flag(tmp_path):
    """quiche keeps app_limited as on_packet_sent set it when a send loop runs out of data
    and clears it when the loop ends on a full window (lib.rs:8325, 4517); 0.30 logs the
    flag (cf_app_limited) when it changes.  The sends before an ACK are marked with the
    flag that ACK saw (qlog_dialects.QuicheAppLimited).  A quiche 0.26 log (cf_lost_packets,
    no flag): marked when their bytes in flight, before the next datagram, are below the
    window.  Another writer's log: nothing marked."""
    def metrics(t, cwnd, bif, **extra):
        return _metrics(t, cwnd, bif, cf_lost_packets={"total": 0, "delta": 0}, **extra)
    flagged = _qlog(tmp_path, [
        _sent(0, 0), metrics(0, 12000, 1200, cf_app_limited=True), _sent(0, 1), _sent(0, 2),
        _metrics(0, 12000, 3600),
        _acked(20, [[0, 2]]), _metrics(20, 12000, 0),          # nothing sent since: still app-limited
        *[_sent(21, pn) for pn in range(3, 13)], _metrics(21, 12000, 12000, cf_app_limited=False),
        _acked(40, [[3, 4]]), _metrics(40, 14400, 9600),
        _sent(41, 13), _metrics(41, 14400, 10800, cf_app_limited=True),
        _acked(60, [[5, 5]]), _metrics(60, 14400, 9600, cf_app_limited=False)])   # a full window's clear
    rows = [r for r in _import(flagged)[1:] if r["ev"] == "sent"]
    assert [r["pn"] for r in rows if r.get("app_limited")] == [0, 1, 2], rows
    assert "quiche qlog: 3 packets marked app-limited from its cf_app_limited flag" in _import(flagged)[0]["comment"]
    old = _qlog(tmp_path, [
        _sent(0, 0), _sent(0, 1), metrics(0, 12000, 2400), _acked(20, [[0, 1]]), metrics(20, 12000, 0),
        *[_sent(21, pn) for pn in range(2, 12)], metrics(21, 12000, 12000), _acked(40, [[2, 3]]),
        metrics(40, 14400, 9600)], name="old.sqlog")
    rows = [r for r in _import(old)[1:] if r["ev"] == "sent"]
    assert [r["pn"] for r in rows if r.get("app_limited")] == [0, 1], rows
    other = _qlog(tmp_path, [_sent(0, 0), _sent(0, 1), _metrics(0, 12000, 2400), _acked(20, [[0, 1]]),
                             _metrics(20, 12000, 0)], name="other.sqlog")
    header, *events = _import(other)
    assert not any(r.get("app_limited") for r in events) and "app-limited" not in header["comment"]


def test_handshake_packets_never_acknowledged_nor_lost_leave_with_their_keys(tmp_path):
    """RFC 9002 §6.4: a Handshake packet still in flight when its keys go leaves bytes in flight
    with no congestion event (quiche on_pkt_num_space_discarded).  Kept in the trace, it stayed
    in flight to the end: the trace's pipe never emptied, so the adapter never shifted CUBIC's
    epoch over an idle period the stack did (quiche's own connection, idle-restart seed 0).
    With --all-spaces it is left out (qlog_dialects.DiscardedWithKeys), and said."""
    def sent(t, pn, ptype, size=1200):
        return (t, "transport:packet_sent", {"header": {"packet_type": ptype, "packet_number": pn},
                                             "raw": {"length": size}, "frames": [{"frame_type": "crypto"}]})

    def acked(t, ptype, ranges):
        return (t, "transport:packet_received", {"header": {"packet_type": ptype, "packet_number": 0},
                                                 "frames": [{"frame_type": "ack", "acked_ranges": ranges}]})
    path = _qlog(tmp_path, [
        sent(0, 0, "initial"), _metrics(0, 12000, 1200), acked(20, "initial", [[0, 0]]), _metrics(20, 12000, 0),
        sent(21, 0, "handshake", 111), _metrics(21, 12000, 111),             # never acknowledged: discarded
        _sent(21, 0), _metrics(21, 12000, 1311), _acked(41, [[0, 0]]), _metrics(41, 12000, 0),
        _sent(500, 1), _metrics(500, 12000, 1200), _acked(520, [[1, 1]]), _metrics(520, 12000, 0)])
    out = tmp_path / "all.jsonl"
    assert main(["import", "--all-spaces", str(path), "-o", str(out)]) == 0
    header, *events = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(e["ev"], e.get("bytes")) for e in events if e["ev"] == "sent"] == [("sent", 1200)] * 3
    assert "1 Initial/Handshake packet(s) never acknowledged nor lost left out" in header["comment"]
    trace = load_trace(str(out))
    assert trace.reachability == "strict", trace.lenient_reason     # the pipe empties before the pause


def test_a_connection_shim_s_app_limited_and_key_discard_marks(tmp_path):
    """quinn logs neither its app-limited flag nor its key discards; its connection shim reads
    both (Connection.app_limited where a send loop ends, PacketSpace.crypto after each call)
    and writes them as its own records.  The import marks the loop's sends and writes
    app_idle / app_data where the flag changes (qlog_dialects.ShimAppLimited), and files a
    key discard before the datagram that caused it, so the Handshake packet that left flight
    with its keys is not read as acknowledged (ShimKeys, QuinnAcks) and is left out
    (DiscardedWithKeys).  Without them the adapter grew on the Initial's ACK (quinn was
    app-limited) and on the Handshake packet's bytes: quinn tail-loss seed 0, cwnd exact
    1.5% -> 100%."""
    def sent(t, ptype, pn, size):
        return (t, "transport:packet_sent", {"header": {"packet_type": ptype, "packet_number": pn, "length": size}})

    def metrics(t, bif, count, cwnd=12000):
        return (t, "recovery:metrics_updated", {"congestion_window": cwnd, "bytes_in_flight": bif,
                                                "packets_in_flight": count})

    def mark(t, value):
        return (t, "ccdiff:app_limited", {"app_limited": value, "written_by": "ccdiff connection shim"})

    def received(t):
        return (t, "transport:packet_received", {"header": {"packet_type": "1RTT", "packet_number": 0}})
    path = _qlog(tmp_path, [
        sent(0, "initial", 0, 1200), metrics(0, 1200, 1), mark(0, True),
        received(20), metrics(20, 0, 0),
        sent(20, "handshake", 0, 102), metrics(20, 102, 1), sent(20, "1RTT", 0, 1200), metrics(20, 1302, 2),
        sent(20, "1RTT", 1, 1200), metrics(20, 2502, 3), mark(20, False),
        received(40), metrics(40, 1200, 1, cwnd=13200),
        (40, "ccdiff:keys_discarded", {"space": "handshake", "written_by": "ccdiff connection shim"}),
        received(41), metrics(41, 0, 0, cwnd=14400)])
    out = tmp_path / "all.jsonl"
    assert main(["import", "--all-spaces", str(path), "-o", str(out)]) == 0
    header, *events = [json.loads(line) for line in out.read_text().splitlines()]
    shape = [(e["ev"], e.get("pn", e.get("pns")), e.get("app_limited", False)) for e in events]
    assert shape == [("sent", 0, True), ("app_idle", None, False), ("ack", [0], False),
                     ("app_data", None, False), ("sent", 1, False), ("sent", 2, False),
                     ("ack", [1], False), ("ack", [2], False)], shape
    assert "2 app-limited marks of the connection shim" in header["comment"]
    assert "1 Initial/Handshake packet(s) never acknowledged nor lost left out" in header["comment"]
    # the Initial's ACK grows nothing (app-limited), the discarded packet's 102 bytes never count
    result = replay(load_trace(str(out)), ["quinn@0.11.19"], check=False)
    assert [s.cwnd for s in next(iter(result.runs.values())).snapshots][-1] == 14400


def test_keys_dropped_while_sending_are_filed_before_that_datagram(tmp_path):
    """quinn drops its Initial keys when its first Handshake packet goes out, in the middle
    of a transmit: the datagram's counters fell by the Initial packet still in flight while
    they grew by the new ones (quinn death-spiral seed 3: "grew -48 ... after packets of
    sizes [48, 102, 1200]", the import failed).  The shim's mark, written after that call,
    is filed before its datagram (ShimKeys) and QuinnAcks counts the discard."""
    def sent(t, ptype, pn, size):
        return (t, "transport:packet_sent", {"header": {"packet_type": ptype, "packet_number": pn, "length": size}})

    def metrics(t, bif, count):
        return (t, "recovery:metrics_updated", {"congestion_window": 12000, "bytes_in_flight": bif,
                                                "packets_in_flight": count})
    path = _qlog(tmp_path, [
        sent(0, "initial", 0, 1200), metrics(0, 1200, 1),
        (20, "transport:packet_received", {"header": {"packet_type": "initial", "packet_number": 0}}),
        sent(20, "initial", 1, 48), sent(20, "handshake", 0, 102), sent(20, "1RTT", 0, 1200),
        metrics(20, 1302, 2),
        (20, "ccdiff:keys_discarded", {"space": "initial", "written_by": "ccdiff connection shim"}),
        (40, "transport:packet_received", {"header": {"packet_type": "1RTT", "packet_number": 1}}),
        metrics(40, 102, 1)])
    out = tmp_path / "all.jsonl"
    assert main(["import", "--all-spaces", str(path), "-o", str(out)]) == 0
    header, *events = [json.loads(line) for line in out.read_text().splitlines()]
    # the 1-RTT packet is in flight (read as not, the 102-byte one as in flight, before); the
    # Handshake packet, never acknowledged, left with its keys too (DiscardedWithKeys)
    assert [(e["ev"], e.get("bytes", e.get("pns"))) for e in events] == [("sent", 1200), ("ack", [0])], events


def test_a_quinn_datagram_that_changed_no_counter_is_not_an_ack(tmp_path):
    """quinn logs metrics only for what changed: a reordered ACK of nothing new leaves no
    metrics record, and the next send's own metrics (its bytes in flight up by its size)
    were read as that datagram's (a fall of -1,200 bytes: the import failed, quinn
    reordering seed 1).  And the ACK delay quinn subtracted, which its qlog (no frames)
    does not show, is read back from its RTT update: without it the adapter's smoothed RTT,
    which quinn's CUBIC reads, left quinn's (death-spiral seed 0: 1.3% -> 100% exact)."""
    def sent(t, pn):
        return (t, "transport:packet_sent", {"header": {"packet_type": "1RTT", "packet_number": pn, "length": 1200}})

    def metrics(t, bif, count):
        return (t, "recovery:metrics_updated", {"congestion_window": 12000, "bytes_in_flight": bif,
                                                "packets_in_flight": count})

    def received(t):
        return (t, "transport:packet_received", {"header": {"packet_type": "1RTT", "packet_number": 0}})
    def rtt(record, latest, smoothed):       # quinn logs RTTs in seconds
        return record[:2] + (dict(record[2], latest_rtt=latest, smoothed_rtt=smoothed),)
    path = _qlog(tmp_path, [sent(0, 0), metrics(0, 1200, 1), sent(0, 1), metrics(0, 2400, 2),
                            received(20), rtt(metrics(20, 1200, 1), 0.020, 0.020), received(21), sent(22, 2),
                            metrics(22, 2400, 2), received(40), rtt(metrics(40, 0, 0), 0.022, 0.020)])
    rows = _import(path)[1:]
    assert [(r["ev"], r.get("pn", r.get("pns"))) for r in rows] == [
        ("sent", 0), ("sent", 1), ("ack", [0]), ("sent", 2), ("ack", [[1, 2]])], rows
    # The peer's ACK delay quinn took off its sample, from its own RTT update (paths.rs:335-354):
    # smoothed stayed 20 ms on a 22 ms sample, so 2 ms of it was the peer's delay.
    assert [r.get("ack_delay", 0) for r in rows if r["ev"] == "ack"] == [0, 2000], rows


def test_a_log_with_frames_is_not_said_to_lack_them():
    """The note "packet_sent without frames" is for logs without frames (quinn's): the
    app-limited mark of the stack's own flag, read after the frames, once made every import
    say it (quiche's, aioquic's)."""
    summary = import_qlog(str(Path(__file__).parent / "fixtures" / "qlog" / "aioquic-cubic-idle.qlog"),
                          lambda *_: None)
    assert not any("without frames" in note for note in summary.notes), summary.notes


def test_quic_trace_draft00_capitals_unknown_type_and_pcap2qlog_empty_event(tmp_path):
    """qvis's samples: quic-trace's draft-00 converter names event_fields, categories and
    frame types in capitals and received packets UNKNOWN; pcap2qlog ends with []."""
    doc = {"qlog_version": "draft-00", "traces": [{
        "configuration": {"time_units": "us"},
        "event_fields": ["relative_time", "CATEGORY", "EVENT_TYPE", "TRIGGER", "DATA"],
        "events": [
            ["0", "TRANSPORT", "PACKET_SENT", "DEFAULT", {"packet_type": "1RTT", "header": {
                "packet_number": "1", "packet_size": 1350}, "frames": [{"frame_type": "STREAM"}]}],
            ["20000", "TRANSPORT", "PACKET_RECEIVED", "DEFAULT", {"packet_type": "UNKNOWN", "header": {
                "packet_number": "1", "packet_size": 0}, "frames": [{"frame_type": "ACK", "acked_ranges": [[1, 1]],
                                                                     "ack_delay": 0}]}],
            []]}]}
    path = tmp_path / "qt.qlog"
    path.write_text(json.dumps(doc))
    out = []
    summary = import_qlog(str(path), out.append)
    rows = [json.loads(line) for line in out]
    assert [(r["ev"], r["t"]) for r in rows[1:]] == [("sent", 0), ("ack", 20000)]
    assert "an empty event array at line 1 (event 3) skipped" in summary.notes


def test_a_multipath_log_is_named_as_such(tmp_path, capsys):
    """picoquic's public binlog_ref.qlog shape: path_ack frames, then packet numbers that
    restart (another path's): the refusal says multipath, not only 'not above'."""
    path = _qlog(tmp_path, [_sent(0, 0), _sent(1, 5, frames=("path_ack", "stream")), _sent(2, 0)])
    assert main(["import", str(path)]) == 2
    err = _err(capsys)
    assert err.count("\n") == 1 and "packet number 0 is not above the previous one (5)" in err
    assert "the log has multipath frames (path_ack)" in err


def test_validate_reads_a_qlog_as_its_import(capsys):
    qlog = str(Path(__file__).resolve().parent / "fixtures/qlog/aioquic-cubic-idle.qlog")
    assert main(["validate", qlog]) == 0
    assert capsys.readouterr().out.startswith(f"{qlog}: ok, a qlog: imported as 161 events, max_datagram_size 1200")


def test_json_that_is_not_a_qlog_says_so(tmp_path, capsys):
    path = tmp_path / "x.json"
    path.write_text('{"a": 1}')
    assert main(["import", str(path)]) == 2
    assert _err(capsys) == f"error: {path}: not a qlog: a JSON document with no qlog_version (or file_schema) " \
                           "and no events in traces[0].events\n"


def test_a_truncated_one_line_qlog_names_the_event(tmp_path, capsys):
    """aioquic writes its JSON document on one line: the event number locates the cut."""
    text = (Path(__file__).resolve().parent / "fixtures/qlog/aioquic-cubic-idle.qlog").read_text()
    bad = tmp_path / "cut.qlog"
    bad.write_text(text[: len(text) // 2])
    assert main(["import", str(bad)]) == 2
    assert _err(capsys) == (f"error: {bad}:1: truncated: the file ends inside a value "
                            "(after event 273, the last one read whole)\n")


def test_a_real_quinn_qlog_imports_with_acks_rebuilt_from_its_counters(tmp_path, capsys):
    """tests/fixtures/qlog/quinn-cubic-tail-loss.qlog: quinn-proto 0.11.19's own qlog
    (feature qlog, written by its connection shim; provenance beside it).  quinn logs no
    frames; the ACKs come from its bytes_in_flight / packets_in_flight falls
    (qlog_dialects.QuinnAcks), and the trace's bytes in flight then equal quinn's own."""
    from pathlib import Path
    path = Path(__file__).parent / "fixtures" / "qlog" / "quinn-cubic-tail-loss.qlog"
    out = tmp_path / "q.jsonl"
    assert main(["import", str(path), "-o", str(out)]) == 0
    err = _err(capsys)
    assert "223 events (165 sent, 57 acks, 36 packets lost" in err and "strict" in err
    assert "quinn 0.11 qlog: 57 ACKs rebuilt" in err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    acks = [r for r in rows[1:] if r["ev"] == "ack"]
    assert len(acks) == 57 and all(r.get("ack_delay", 0) == 0 for r in acks)

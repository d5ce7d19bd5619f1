"""Real picoquic qlogs: picoquic 1.1.53.0's own demo server (picoquicfirst/picoquicdemo.c),
built from the pinned aiopquic sdist, through the relay (tests/fixtures/qlog/
make_picoquic_fixtures.py).  Import and validate each; the picoquic adapter's fidelity on
them is pinned (docs/qlog-import.md has the table and the cause of each divergence), so a
regression in the adapter or in the importer's reading of picoquic's qlog fails here.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccdiff.cli import main
from ccdiff.fidelity import fidelity
from ccdiff.qlog_import import import_qlog
from ccdiff.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
QLOG = ROOT / "tests" / "fixtures" / "qlog"
FIXTURES = sorted(QLOG.glob("picoquic-*.qlog"))
PICOQUIC_CWIN_MINIMUM = 2 * 1536            # picoquic_internal.h:93

# fixture -> (spec, trace events, settled points, cwnd agree, cwnd compared,
#             first cwnd divergence (trace event index, t_us, logged value) or None)
# measured 2026-11-24 (docs/qlog-import.md); bytes in flight agree at every compared point.
EXPECTED = {
    "picoquic-cubic-random-loss": ("picoquic", 367, 245, 244, 244, None),
    "picoquic-cubic-sequential": ("picoquic", 305, 238, 237, 237, None),
    # picoquic's retransmission timer declares one packet lost and notifies a timeout
    # (loss_recovery.c:941-942): cwin = PICOQUIC_CWIN_MINIMUM (cubic.c:181-182,
    # newreno.c:59-60); the trace has no timer loss and §7.6.2 refuses persistent congestion
    "picoquic-cubic-blackout": ("picoquic", 335, 231, 107, 230, (144, 82378, PICOQUIC_CWIN_MINIMUM)),
    "picoquic-reno-random-loss": ("picoquic-reno", 398, 300, 296, 298, (396, 225594, PICOQUIC_CWIN_MINIMUM)),
    # the 100 ms blackout: the same timer loss, then the server never sends again (below)
    "picoquic-cubic-blackout-stall": ("picoquic", 133, 88, 86, 87, (132, 78886, PICOQUIC_CWIN_MINIMUM)),
    # sends paced out with the window open: cwnd_limited=window (picoquic's own rule, sender.c:704)
    "picoquic-reno-reorder": ("picoquic-reno:cwnd_limited=window", 316, 246, 245, 245, None),
}


def test_the_fixtures_are_there_and_small():
    assert {p.stem for p in FIXTURES} == set(EXPECTED)
    assert all(p.stat().st_size < 300_000 for p in FIXTURES)
    for path in FIXTURES:       # picoquic's own flavour: qlog draft-00, events as arrays, us
        head = path.read_text()[:600]
        assert '"qlog_version": "draft-00"' in head and '"title": "picoquic"' in head
        assert '"event_fields": ["relative_time", "category", "event", "data"]' in head


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_each_picoquic_fixture_imports_and_validates(fixture, tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    assert main(["import", str(fixture), "-o", str(out)]) == 0
    assert main(["validate", str(out)]) == 0
    text = capsys.readouterr()
    assert ": ok, " in text.out
    assert "picoquic qlog: packet sizes + 16" in text.err
    trace = load_trace(str(out))
    assert trace.header.max_datagram_size == 1440       # the peer's max_packet_size, reached by the MTU probe
    kinds = [type(ev).__name__ for ev in trace.events]
    assert kinds.count("Sent") > 100 and "Ack" in kinds
    # the server's download ends with its FIN: the application is idle after it
    assert ("AppIdle" in kinds) == ("stall" not in fixture.stem)
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert sum("cwnd" in row["logged"] for row in rows) > 0.9 * len(rows)


def test_sizes_count_the_aead_tag_and_ack_delay_is_scaled():
    """packet_size + 16 is what picoquic's bytes in flight count: the logged bytes in flight
    grow by exactly the trace's size at each send; ack_delay is the wire field x 2^3 us."""
    fixture = QLOG / "picoquic-cubic-random-loss.qlog"
    lines = []
    import_qlog(str(fixture), lines.append)
    rows = [json.loads(line) for line in lines[1:]]
    rows = rows[5:]                                         # past the handshake's (Initial / Handshake left out)
    sends = [(a, b) for a, b in zip(rows, rows[1:]) if a["ev"] == b["ev"] == "sent"]
    assert len(sends) > 50
    assert all(b["logged"]["bytes_in_flight"] - a["logged"]["bytes_in_flight"] == b["bytes"] for a, b in sends[:50])
    events = json.loads(fixture.read_text())["traces"][0]["events"]
    wire = [f["ack_delay"] for e in events if e[2] == "packet_received" and e[3].get("packet_type") == "1RTT"
            for f in e[3].get("frames", []) if f.get("frame_type") == "ack" and f.get("ack_delay")]
    delays = [row["ack_delay"] for row in rows if row["ev"] == "ack" and row.get("ack_delay")]
    assert delays and set(delays) <= {w << 3 for w in wire}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_picoquic_adapter_fidelity_on_its_own_connections(name):
    from ccdiff.build import ensure_built
    spec, events, points, agree, compared, first = EXPECTED[name]
    ensure_built(spec)
    result = fidelity(str(QLOG / f"{name}.qlog"), spec, keep_series=False)
    assert result["error"] is None
    assert (result["events"], result["points"]) == (events, points)
    cwnd, bif = result["metrics"]["cwnd"], result["metrics"]["bytes_in_flight"]
    assert cwnd["compared"] == compared and cwnd["agree"] >= agree
    assert bif["agree"] == bif["compared"] == compared          # the ledger follows picoquic's accounting
    d = cwnd["first_divergence"]
    if first is None:
        assert d is None
    else:
        assert (d["event"], d["t_us"], d["logged"]) == first
        assert d["adapter"] > d["logged"]                   # the adapter never saw the timeout


def test_without_cwnd_limited_window_reno_reorder_diverges_at_the_first_paced_ack():
    """The default contract (a send without app_limited is cwnd-limited) stamps
    last_cwin_blocked_time on every send; picoquic's sender paces with the window open and
    stamps only when bytes_in_transit >= cwin (sender.c:704), so slow start does not grow."""
    from ccdiff.build import ensure_built
    ensure_built("picoquic-reno")
    result = fidelity(str(QLOG / "picoquic-reno-reorder.qlog"), "picoquic-reno", keep_series=False)
    d = result["metrics"]["cwnd"]["first_divergence"]
    assert (d["event"], d["t_us"], d["kind"], d["logged"]) == (15, 49726, "ack", 15360)


def test_the_blackout_stall_is_in_the_fixture():
    """picoquic 1.1.53.0's demo server after a 100 ms blackout: one packet lost by its timer,
    the path MTU reset, cwnd 3072, one packet sent -- and nothing more, with 56 packets in
    flight, until the idle timeout (2 s here) closes the connection."""
    events = json.loads((QLOG / "picoquic-cubic-blackout-stall.qlog").read_text())["traces"][0]["events"]
    sent = [e[0] for e in events if e[2] == "packet_sent"]
    lost = [e for e in events if e[2] == "packet_lost"]
    assert [e[3]["trigger"] for e in lost] == ["timer"]
    assert sent[-1] == lost[0][0]                        # the last send is the timer's retransmission
    assert events[-1][0] - sent[-1] > 1_900_000          # then silence until the idle close
    inflight = [e[3]["bytes_in_flight"] for e in events if e[2] == "metrics_updated" and "bytes_in_flight" in e[3]]
    assert inflight[-1] > 50 * 1440
    assert any("Reset path 0 MTU" in e[3].get("message", "") for e in events if e[2] == "message")


def test_timer_losses_are_said(capsys):
    fixture = QLOG / "picoquic-cubic-blackout.qlog"
    assert main(["import", str(fixture), "-o", "/dev/null", "--all-spaces"]) == 0
    err = capsys.readouterr().err
    assert "picoquic's retransmission timer declared the losses" in err
    assert "RFC 9002 §7.6.2 does not hold" in err


def test_the_adapter_option_is_checked():
    from ccdiff.build import ensure_built
    from ccdiff.stacks import load_recipes, open_controller, resolve
    ensure_built("picoquic")
    with pytest.raises(Exception, match="cwnd_limited"):
        open_controller(resolve("picoquic:cwnd_limited=sometimes", load_recipes()), 1440, 100000)


def _build_tools() -> list:
    missing = [t for t in ("cmake", "make", "cc", "c++", "pkg-config") if shutil.which(t) is None]
    if not Path("/usr/include/openssl/ssl.h").exists():
        missing.append("libssl-dev")
    return missing


@pytest.mark.skipif(bool(_build_tools()), reason=f"needs {', '.join(_build_tools())} to build picoquicdemo "
                    "(setup/install.sh system qlog)")
def test_generator_builds_picoquicdemo_and_makes_a_real_qlog(tmp_path):
    """The build is cached under $CCDIFF_BUILD_DIR/picoquic-demo (a few minutes once, at -j 1);
    then one small connection through the relay, imported and validated."""
    done = subprocess.run([sys.executable, str(QLOG / "make_picoquic_fixtures.py"), "--out", str(tmp_path),
                           "--only", "cubic-random-loss", "--size", "100000"],
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-2000:]
    made = tmp_path / "picoquic-cubic-random-loss.qlog"
    assert made.stat().st_size > 10_000
    out = tmp_path / "t.jsonl"
    assert main(["import", str(made), "-o", str(out)]) == 0
    assert main(["validate", str(out)]) == 0


@pytest.mark.parametrize("fields, event, reason", [
    (None, '[0, "transport", "packet_sent", {}]', "needs the trace's event_fields"),
    ('["relative_time", "category", "event", "data"]', '[0, "transport", "packet_sent"]',
     "an event array has 3 items, event_fields names 4"),
    ('["category", "event", "data"]', '["transport", "packet_sent", {}]', 'has no "relative_time"'),
])
def test_a_bad_array_event_exits_2_with_the_line(tmp_path, capsys, fields, event, reason):
    head = '{"qlog_version": "draft-00", "title": "picoquic", "traces": [{'
    head += f'"event_fields": {fields}, ' if fields else ""
    path = tmp_path / "bad.qlog"
    path.write_text(head + '"configuration": {"time_units": "us"},\n"events": [\n' + event + "]}]}\n")
    assert main(["import", str(path), "-o", str(tmp_path / "t.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "bad.qlog:3: event 1" in err and reason in err
    assert not (tmp_path / "t.jsonl").exists()

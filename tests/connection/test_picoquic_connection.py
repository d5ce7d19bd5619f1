"""picoquic's connection shim (implementations/picoquic/connection/): picoquic's own client and
server over ccdiff's path in picoquic's simulated-time mode, its state read from the
connection's path and its controller's own state.  Built on first use like every shim
(about 25 s at -j1: picotls and picoquic's core library with cmake, against OpenSSL)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ccdiff.connection import run_connection
from ccdiff.errors import SetupError
from ccdiff.qlog_import import QlogTrace
from ccdiff.sim.scenario import load_scenario

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None or not Path("/usr/include/openssl/ssl.h").exists(),
                                reason="picoquic's shim needs cmake and libssl-dev")

DEATH = load_scenario("death-spiral")
SMALL = DEATH.with_params(bytes=400_000, deadline_us=5_000_000)


def test_picoquic_same_scenario_and_seed_give_a_byte_identical_record():
    a = run_connection(SMALL, "picoquic", 7)
    b = run_connection(SMALL, "picoquic", 7)
    assert a.record_text() == b.record_text()
    assert a.metrics == b.metrics and a.status == b.status == "pass"
    assert a.metrics["delivered_bytes"] == 400_000
    assert {r["from"] for r in a.records if "from" in r} == {"client", "server"}


def test_picoquic_death_spiral_completes_and_its_state_is_the_stack_s():
    result = run_connection(DEATH, "picoquic", 1)
    assert result.status == "pass", result.reasons
    states = [r for r in result.records if "cwnd" in r]
    # picoquic's own initial window: PICOQUIC_CWIN_INITIAL = 10 x PICOQUIC_MAX_PACKET_SIZE
    # (1536) = 15,360 bytes whatever the datagram size (picoquic_internal.h:92).
    assert states[0]["cwnd"] == 15_360
    assert all(s["bytes_in_flight"] is not None for s in states)
    # ssthresh is the controller's own (picoquic_cubic_state_t), unknown until the first event.
    assert states[0]["ssthresh"] is None and any(s["ssthresh"] is not None for s in states)
    # In recovery: picoquic's own packet-number rule (recovery_sequence > highest acked).
    assert any(s["in_recovery"] == 1 for s in states) and states[-1]["in_recovery"] == 0
    assert any(b["cwnd"] < a["cwnd"] for a, b in zip(states, states[1:]))
    assert result.metrics["packets_lost"] > 0
    assert result.metrics["recovery_transitions"] > 0
    # Every full datagram is the scenario's size (send_mtu = mds from the start).
    sizes = {r["size"] for r in result.records if r.get("from") == "client"}
    assert max(sizes) == DEATH.max_datagram_size


def test_picoquic_reno_and_bad_options():
    reno = run_connection(SMALL, "picoquic-reno", 2)
    assert reno.status == "pass", reno.reasons
    with pytest.raises(SetupError, match="unknown option \"bogus\""):
        run_connection(SMALL, "picoquic:bogus=1", 1)
    with pytest.raises(SetupError, match="cwnd_limited is an option of picoquic's adapter"):
        run_connection(SMALL, "picoquic:cwnd_limited=flag", 1)


# ---------------------------------------------------------------- its own qlog (qlog=PATH)

# idle-restart with the first burst's loss at 10% (picoquic's slow-start loss filter lets the
# catalog's 2% pass: its CUBIC never leaves slow start there, ssthresh never set on 10 seeds)
# and 3 s between 4 bursts, so the restart is past K on W_cubic's curve
# (docs/connection-mode.md, "picoquic's own events, judged").
IDLE_LONG = load_scenario("idle-restart").with_params(
    loss_schedule=[[600_000, 0.1]], period_us=3_000_000, bursts=4, deadline_us=20_000_000, max_stall_us=4_000_000)


def test_picoquic_qlog_is_its_own_in_virtual_time_byte_identical_and_imports_with_acks(tmp_path):
    a, b = tmp_path / "a.qlog", tmp_path / "b.qlog"
    result = run_connection(SMALL, "picoquic", 7, qlog=str(a))
    run_connection(SMALL, "picoquic", 7, qlog=str(b))
    assert result.status == "pass", result.reasons
    # Connection IDs and reset tokens are seeded by the shim: nothing of OpenSSL's generator
    # or the machine's clock reaches picoquic-log's text.
    assert a.read_bytes() == b.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.qlog", "b.qlog"]   # its folder removed
    doc = json.loads(a.read_text())                       # closed ("]}]}") when the client was freed
    (trace,) = doc["traces"]
    assert trace["vantage_point"]["type"] == "client" and trace["configuration"] == {"time_units": "us"}
    # reference_time is picoquic's start_time: the simulated clock's base, not a wall clock.
    assert trace["common_fields"]["reference_time"] == "259201234567"
    times = [e[0] for e in trace["events"]]
    assert times == sorted(times) and times[0] == 0 and max(times) <= result.metrics["end_us"]
    names = {(e[1], e[2]) for e in trace["events"]}
    assert {("transport", "packet_sent"), ("transport", "packet_received"), ("recovery", "metrics_updated"),
            ("recovery", "packet_lost")} <= names
    # Every packet logged (use_long_log), not only picoquic's first 100.
    sent = sum(1 for e in trace["events"] if e[2] == "packet_sent")
    assert sent >= result.metrics["datagrams_sent"] - 5
    imported = QlogTrace(str(a))
    s = imported.summary
    assert imported.n_events > 0 and s.acks > 0 and s.sent > 0 and s.lost > 0 and s.logged > 0
    assert s.header["max_datagram_size"] == SMALL.max_datagram_size


def test_picoquic_qlog_is_the_client_s_only():
    from ccdiff.connection.shim import open_shim
    from ccdiff.connection.build import ensure_shim
    from ccdiff.stacks import resolve
    new = open_shim(ensure_shim(resolve("picoquic")))
    with pytest.raises(Exception, match="qlog is the client's"):
        new(True, 0, 1, "mds=1200;qlog=/tmp/never.qlog")


def test_picoquic_own_window_makes_the_uncapped_w_cubic_step(tmp_path):
    """picoquic's W_cubic after idle (profile: epoch-reset-to-last-app-limited), on its own
    events: after 2.75 s idle the first ACK (25,255 bytes) grows picoquic's own logged window
    106,246 -> 121,397, more than RFC 9438's bound of half the bytes acknowledged plus one
    datagram; the adapter fed those events flags the same event, 21 bytes off
    (implementations/picoquic/profile.toml [[reached]] ca-growth-bound)."""
    from ccdiff.connection.confirm import judge_qlog
    qlog = tmp_path / "own.qlog"
    assert run_connection(IDLE_LONG, "picoquic", 0, qlog=str(qlog)).status == "pass"
    judged = judge_qlog(str(qlog), "picoquic")
    (found,) = [f for f in judged["findings"] if f["invariant"] == "ca-growth-bound"]
    assert found["status"] == "violation" and found["event"] == 320 and found["t_us"] == 3_044_032
    assert found["own_window"]["event"] == 320
    assert "grew cwnd by 15151 for 25255 bytes acknowledged" in found["own_window"]["detail"]
    assert found["logged_step"]["stack"] == [106246, 121397]
    assert judged["fidelity"]["cwnd"]["agreement"] > 0      # measured, low (docs/connection-mode.md)


def test_on_the_catalog_s_idle_restart_picoquic_never_leaves_slow_start():
    """Why the catalog's idle-restart cannot reach the idle finding by picoquic's own
    connection: its CUBIC ignores the 2% loss in slow start (cubic.c:316-326, the filter
    that backs off only after repeated losses), ssthresh is never set, and the idle rules
    judge congestion avoidance only."""
    result = run_connection(load_scenario("idle-restart"), "picoquic", 3)
    assert result.status == "pass" and result.metrics["packets_lost"] > 0
    assert all(r["ssthresh"] is None for r in result.records if "cwnd" in r)

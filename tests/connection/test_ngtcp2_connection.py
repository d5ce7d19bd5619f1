"""ngtcp2's connection shim (implementations/ngtcp2/connection/): ngtcp2's own client and
server (ngtcp2_conn) over ccdiff's path, in nanosecond virtual time, its state read from
ngtcp2_conn_get_conn_info and its controller's recovery start.  Built on first use like
every shim (about 5 s with gcc: ngtcp2's lib/ and crypto/shared.c, against Debian's GnuTLS)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from ccdiff.connection import run_connection
from ccdiff.errors import SetupError
from ccdiff.qlog_import import QlogTrace
from ccdiff.sim.scenario import load_scenario


def _gnutls() -> bool:
    if shutil.which("pkg-config") is None:
        return False
    return subprocess.run(["pkg-config", "--atleast-version=3.7.2", "gnutls"]).returncode == 0


pytestmark = pytest.mark.skipif(not _gnutls(), reason="ngtcp2's shim needs pkg-config and libgnutls28-dev (>= 3.7.2)")

DEATH = load_scenario("death-spiral")
SMALL = DEATH.with_params(bytes=400_000, deadline_us=5_000_000)


def test_ngtcp2_same_scenario_and_seed_give_a_byte_identical_record():
    a = run_connection(SMALL, "ngtcp2", 7)
    b = run_connection(SMALL, "ngtcp2", 7)
    assert a.record_text() == b.record_text()
    assert a.metrics == b.metrics and a.status == b.status == "pass"
    assert a.metrics["delivered_bytes"] == 400_000
    assert {r["from"] for r in a.records if "from" in r} == {"client", "server"}


def test_ngtcp2_death_spiral_completes_and_its_state_is_the_stack_s():
    result = run_connection(DEATH, "ngtcp2", 1)
    assert result.status == "pass", result.reasons
    states = [r for r in result.records if "cwnd" in r]
    # ngtcp2's own initial window: ngtcp2_cc_compute_initcwnd(mds) = min(10 x 1350,
    # max(2 x 1350, 14720)) = 13,500 bytes (lib/ngtcp2_cc.c).
    assert states[0]["cwnd"] == 13_500
    assert all(s["bytes_in_flight"] is not None for s in states)
    # ssthresh from ngtcp2_conn_get_conn_info: unknown (UINT64_MAX) until the first event.
    assert states[0]["ssthresh"] is None and any(s["ssthresh"] is not None for s in states)
    # In recovery: ngtcp2's own rule (largest acknowledged packet sent at or before the
    # recovery start, ngtcp2_cc.c in_congestion_recovery).
    assert any(s["in_recovery"] == 1 for s in states) and states[-1]["in_recovery"] == 0
    assert any(b["cwnd"] < a["cwnd"] for a, b in zip(states, states[1:]))
    assert result.metrics["packets_lost"] > 0
    assert result.metrics["recovery_transitions"] > 0
    # Every full datagram is the scenario's size (no PMTUD, no payload shaping).
    sizes = {r["size"] for r in result.records if r.get("from") == "client"}
    assert max(sizes) == DEATH.max_datagram_size


def test_ngtcp2_reno_and_bad_options():
    reno = run_connection(SMALL, "ngtcp2-reno", 2)
    assert reno.status == "pass", reno.reasons
    with pytest.raises(SetupError, match="unknown option \"bogus\""):
        run_connection(SMALL, "ngtcp2:bogus=1", 1)
    with pytest.raises(SetupError, match="cc=bbr"):
        run_connection(SMALL, "ngtcp2:cc=bbr", 1)


# ---------------------------------------------------------------- its own qlog (qlog=PATH)

IDLE = load_scenario("idle-restart")


def _records(path) -> list:
    text = path.read_text()
    assert text.startswith("\x1e{") and text.endswith("\n")
    return [json.loads(r) for r in text.split("\x1e")[1:]]


def test_ngtcp2_qlog_is_its_own_in_virtual_time_byte_identical_and_imports_with_acks(tmp_path):
    a, b = tmp_path / "a.qlog", tmp_path / "b.qlog"
    result = run_connection(SMALL, "ngtcp2", 7, qlog=str(a))
    run_connection(SMALL, "ngtcp2", 7, qlog=str(b))
    assert result.status == "pass", result.reasons
    assert a.read_bytes() == b.read_bytes()            # nothing of the machine's clock or randomness
    header, *events = _records(a)
    assert header["trace"]["vantage_point"] == {"name": "ngtcp2", "type": "client"}
    (params,) = [e for e in events if e["name"] == "recovery:parameters_set"]
    assert params["data"] == {"max_datagram_size": SMALL.max_datagram_size, "initial_rtt": 333,
                              "written_by": "ccdiff connection shim"}
    times = [e["time"] for e in events]
    assert times == sorted(times) and times[0] == 0
    # ngtcp2 writes whole ms (ngtcp2_qlog.c write_tstamp); the shim adds the µs it dropped:
    # every time is a whole µs, and some are not whole ms.
    assert all(abs(t * 1000 - round(t * 1000)) < 1e-6 for t in times)
    assert any(t != int(t) for t in times)
    assert max(times) * 1000 <= result.metrics["end_us"]
    names = {e["name"] for e in events}
    assert {"transport:packet_sent", "transport:packet_received", "recovery:metrics_updated"} <= names
    trace = QlogTrace(str(a))
    summary = trace.summary
    assert trace.n_events > 0 and summary.acks > 0 and summary.sent > 0 and summary.logged > 0
    # Cut before the first ACK the client received: `ccdiff import` refuses it (exit 2) and
    # says why, never a trace without ACKs.
    lines = a.read_text().split("\n")       # (str.splitlines would split at the RS too)
    first_ack = next(i for i, line in enumerate(lines) if '"transport:packet_received"' in line
                     and '"frame_type":"ack"' in line and '"packet_type":"1RTT"' in line)
    cut = tmp_path / "cut.qlog"
    cut.write_text("\n".join(lines[:first_ack]) + "\n")
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "import", str(cut), "-o", str(tmp_path / "t.jsonl")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "no ACK" in proc.stderr, proc.stderr


def test_ngtcp2_own_window_makes_the_idle_inflation_step(tmp_path):
    """idle-restart seed 3: ngtcp2's own connection, its own qlog, judged.  The shim logs the
    app-limited periods ngtcp2's rate sampler has (none spans this restart), the import keeps
    each ACK at ngtcp2's own time and each loss with the ACK logged at the same instant, and
    the idle-inflation rule flags ngtcp2's own logged window at the event the adapter's
    replay flags (implementations/ngtcp2/profile.toml [[reached]])."""
    from ccdiff.connection.confirm import judge_qlog
    qlog = tmp_path / "own.qlog"
    assert run_connection(IDLE, "ngtcp2", 3, qlog=str(qlog)).status == "pass"
    states = [e["data"] for e in _records(qlog)[1:] if e["name"] == "recovery:congestion_state_updated"]
    assert states and all(s["written_by"] == "ccdiff connection shim" for s in states)
    assert [s["new"] == "application_limited" for s in states] == [i % 2 == 0 for i in range(len(states))]
    judged = judge_qlog(str(qlog), "ngtcp2")
    (found,) = [f for f in judged["findings"] if f["invariant"] == "idle-inflation"]
    assert found["status"] == "violation" and found["event"] == 1508
    assert found["own_window"]["event"] == 1508
    assert "grew cwnd 47266 -> 57517" in found["own_window"]["detail"]
    assert judged["fidelity"]["cwnd"]["agreement"] > 0      # measured, not exact (docs/connection-mode.md)


def test_on_tail_loss_the_ngtcp2_adapter_reproduces_its_own_connection_exactly(tmp_path):
    """bench/connection_fidelity.py, 2026-11-28: on tail-loss the ngtcp2 adapter, fed the
    events of ngtcp2's own connection, gives the window ngtcp2 logged at every settled point
    (100.0% of 771 over 10 seeds; docs/connection-mode.md) -- losses, the ACKs that reveal
    them and the app-limited marks all read as ngtcp2 had them."""
    from ccdiff.fidelity import fidelity
    qlog = tmp_path / "own.qlog"
    assert run_connection(load_scenario("tail-loss"), "ngtcp2", 0, qlog=str(qlog)).status == "pass"
    cwnd = fidelity(str(qlog), "ngtcp2", keep_series=False)["metrics"]["cwnd"]
    assert cwnd["compared"] > 50 and cwnd["agreement"] == 1.0, cwnd

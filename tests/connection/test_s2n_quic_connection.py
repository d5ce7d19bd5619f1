"""s2n-quic's connection shim (implementations/s2n-quic/connection/): s2n-quic 1.91.0's own
client and server (rustls with aws-lc-rs), each endpoint driven through s2n-quic's public I/O
provider trait one datagram at a time on ccdiff's virtual clock, its controller's state read
from s2n's own CUBIC.  Built on first use like every shim (about 2-4 minutes: aws-lc-sys)."""
from __future__ import annotations

import shutil

import pytest

from ccdiff.connection import run_connection
from ccdiff.errors import SetupError
from ccdiff.sim.scenario import load_scenario

pytestmark = pytest.mark.skipif(shutil.which("cargo") is None, reason="s2n-quic's shim needs cargo")

DEATH = load_scenario("death-spiral")
SMALL = DEATH.with_params(bytes=400_000, deadline_us=5_000_000)


def test_s2n_quic_same_scenario_and_seed_give_a_byte_identical_record():
    """Every random value s2n-quic and rustls draw (connection IDs, reset tokens, the TLS
    random and the X25519 key) comes from the seed: a second run is the same bytes; another
    seed is another connection."""
    a = run_connection(SMALL, "s2n-quic", 7)
    b = run_connection(SMALL, "s2n-quic", 7)
    assert a.record_text() == b.record_text()
    assert a.metrics == b.metrics and a.status == b.status == "pass"
    assert a.metrics["delivered_bytes"] == 400_000
    assert {r["from"] for r in a.records if "from" in r} == {"client", "server"}
    assert run_connection(SMALL, "s2n-quic", 8).record_text() != a.record_text()


def test_s2n_quic_death_spiral_completes_and_its_state_is_the_stack_s():
    result = run_connection(DEATH, "s2n-quic", 1)
    assert result.status == "pass", result.reasons
    states = [r for r in result.records if "cwnd" in r]
    # s2n-quic's own initial window: 10 x the datagram size (1,350 here), below its
    # 14,720-byte cap (s2n-quic-core recovery/cubic.rs, RFC 9002 §7.2).
    assert states[0]["cwnd"] == 10 * DEATH.max_datagram_size
    assert all(s["bytes_in_flight"] is not None for s in states)
    assert any(s["in_recovery"] == 1 for s in states) and states[-1]["in_recovery"] == 0
    assert any(b["cwnd"] < a["cwnd"] for a, b in zip(states, states[1:]))
    assert result.metrics["packets_lost"] > 0
    # Every full datagram is the scenario's size (the MTU fixed at mds + 28, probing off).
    sizes = {r["size"] for r in result.records if r.get("from") == "client"}
    assert max(sizes) == DEATH.max_datagram_size


def test_s2n_quic_refuses_reno_and_unknown_options_by_name():
    with pytest.raises(SetupError, match="reno"):
        run_connection(SMALL, "s2n-quic:cc=reno", 1)
    with pytest.raises(SetupError, match="bogus"):
        run_connection(SMALL, "s2n-quic:bogus=1", 1)


def test_s2n_quic_s_qlog_is_deterministic_and_the_adapter_follows_its_own_window(tmp_path):
    """s2n-quic writes no qlog of its own: the shim's writer logs the client's packets, the
    ACK frames' ranges, losses and s2n's own recovery metrics from s2n's event subscriber, and
    the flag s2n gave its controller for each send (ccdiff:app_limited).  The same seed gives
    the same bytes, and every point of the adapter's window, fed those events, is the one
    s2n logged (docs/connection-mode.md, 2026-11-29: tail-loss 100% on seeds 0-2)."""
    from ccdiff.fidelity import fidelity
    tail = load_scenario("tail-loss")
    a, b = tmp_path / "a.qlog", tmp_path / "b.qlog"
    assert run_connection(tail, "s2n-quic", 0, qlog=str(a)).status == "pass"
    assert run_connection(tail, "s2n-quic", 0, qlog=str(b)).status == "pass"
    assert a.read_bytes() == b.read_bytes()
    cwnd = fidelity(str(a), "s2n-quic", keep_series=False)["metrics"]["cwnd"]
    assert cwnd["compared"] >= 15 and cwnd["agreement"] == 1.0, cwnd

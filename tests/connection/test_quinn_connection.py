"""quinn's connection shim (implementations/quinn/connection/): quinn-proto's own client and
server over ccdiff's path, its state read through its API (and facade.py's read-only
accessors).  Built on first use like every shim (about a minute: rustls and ring)."""
from __future__ import annotations

import shutil

import pytest

from ccdiff.connection import run_connection
from ccdiff.errors import SetupError
from ccdiff.sim.scenario import load_scenario

pytestmark = pytest.mark.skipif(shutil.which("cargo") is None, reason="quinn's shim needs cargo")

DEATH = load_scenario("death-spiral")
SMALL = DEATH.with_params(bytes=400_000, deadline_us=5_000_000)


def test_quinn_same_scenario_and_seed_give_a_byte_identical_record():
    a = run_connection(SMALL, "quinn", 7)
    b = run_connection(SMALL, "quinn", 7)
    assert a.record_text() == b.record_text()
    assert a.metrics == b.metrics and a.status == b.status == "pass"
    assert a.metrics["delivered_bytes"] == 400_000
    assert {r["from"] for r in a.records if "from" in r} == {"client", "server"}


def test_quinn_death_spiral_completes_and_its_state_is_the_stack_s():
    result = run_connection(DEATH, "quinn", 1)
    assert result.status == "pass", result.reasons
    states = [r for r in result.records if "cwnd" in r]
    # quinn's own initial window: 14720.clamp(2 x 1200, 10 x 1200) = 12,000 bytes whatever
    # the MTU (congestion/cubic.rs CubicConfig::default), not RFC 9002's 10 x 1350.
    assert states[0]["cwnd"] == 12_000
    assert all(s["bytes_in_flight"] is not None for s in states)
    assert any(s["in_recovery"] == 1 for s in states) and states[-1]["in_recovery"] == 0
    assert any(b["cwnd"] < a["cwnd"] for a, b in zip(states, states[1:]))
    assert result.metrics["packets_lost"] > 0
    # Every full datagram is the scenario's size (initial_mtu = mds, MTU discovery off).
    sizes = {r["size"] for r in result.records if r.get("from") == "client"}
    assert max(sizes) == DEATH.max_datagram_size


def test_quinn_reno_and_bad_options():
    assert run_connection(SMALL, "quinn-reno", 2).status == "pass"
    with pytest.raises(SetupError, match="unknown option \"bogus\""):
        run_connection(SMALL, "quinn:bogus=1", 1)


def test_on_death_spiral_the_quinn_adapter_reproduces_its_own_connection_exactly(tmp_path):
    """The quinn shim's own records make the import exact: the datagram size quinn's
    controllers count with (recovery:parameters_set: the path's 1,350 bytes, not the 1,200
    quinn's first window suggests; 0.2% exact without it), its app-limited flag where each
    send loop ends, and its key discards -- every settled point of the adapter's window is
    the one quinn logged (docs/connection-mode.md, 2026-11-29)."""
    from ccdiff.fidelity import fidelity
    qlog = tmp_path / "own.qlog"
    assert run_connection(DEATH, "quinn", 0, qlog=str(qlog)).status == "pass"
    cwnd = fidelity(str(qlog), "quinn", keep_series=False)["metrics"]["cwnd"]
    assert cwnd["compared"] > 50 and cwnd["agreement"] == 1.0, cwnd

"""quiche's connection shim (implementations/quiche/connection/): quiche's own client and
server, its clock read through the build-time facade, over ccdiff's path.

The seed's headline, reproduced by the real stack (issue #31): on Cloudflare's own
setup (death-spiral-loopback) quiche's connection with the idle-restart code of quiche
< 0.28 pins its window at the two-datagram floor and misses the deadline, and the fix
(RecoveryConfig.enable_cubic_idle_restart_fix) completes the same seed.  One build,
quiche 0.30.0, holds both: its idle_fix switch is the fix alone.  The 100-seed table
of 0.26.0, 0.26.1 and 0.30.0 is bench/bench_connection.py's (docs/connection-mode.md)."""
from __future__ import annotations

import shutil

import pytest

from ccdiff.connection import run_connection
from ccdiff.sim.scenario import load_scenario

pytestmark = pytest.mark.skipif(shutil.which("cargo") is None, reason="quiche's shim needs cargo")

LOOPBACK = load_scenario("death-spiral-loopback")


def test_without_the_idle_fix_quiche_s_own_connection_spirals_and_with_it_completes():
    spiral = run_connection(LOOPBACK, "quiche@0.30.0:idle_fix=off", 4, record=False)
    assert spiral.status == "fail"
    assert spiral.reasons[0].startswith("deadline: ") and spiral.metrics["delivered_bytes"] < 3_000_000
    # Cloudflare's picture: the window at 2 x 1350 bytes for most of the 10 s.
    assert spiral.metrics["min_window_us"] > 8_000_000
    fixed = run_connection(LOOPBACK, "quiche@0.30.0", 4, record=False)
    reno = run_connection(LOOPBACK, "quiche-reno@0.30.0", 4, record=False)
    assert fixed.status == reno.status == "pass"
    assert fixed.metrics["completion_us"] < 4_000_000 and fixed.metrics["min_window_us"] < 2_000_000


def test_quiche_same_scenario_and_seed_give_a_byte_identical_record():
    small = LOOPBACK.with_params(bytes=500_000)
    a = run_connection(small, "quiche@0.30.0", 3)
    b = run_connection(small, "quiche@0.30.0", 3)
    assert a.record_text() == b.record_text() and a.metrics == b.metrics
    assert a.metrics["delivered_bytes"] == 500_000
    assert {r["from"] for r in a.records if "from" in r} == {"client", "server"}

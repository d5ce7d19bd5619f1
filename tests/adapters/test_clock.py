"""The realistic clock: every adapter runs at stack time = clock base + trace time.

Real applications pass their stack a monotonic clock counted from boot
(ccdiff_adapter.h, docs/adapters.md "Clock").  A verdict must not depend on the
base, and snapshots must report trace time whatever the base.  With ngtcp2's
clock near 0 (the adapter's old mapping, base 1 us here), its CUBIC congestion
avoidance without an epoch after persistent congestion produced a window below
the minimum that no real connection shows; these tests pin both sides.
"""
from __future__ import annotations

import pytest

from ccdiff.build import ensure_built
from ccdiff.clock import DEFAULT_CLOCK_BASE_US, ENV_VAR, clock_base_us
from ccdiff.errors import SetupError
from ccdiff.paths import project_root
from ccdiff.replay import replay
from ccdiff.sim import simulate
from ccdiff.sim.scenario import load_scenario
from ccdiff.stacks import load_recipes
from ccdiff.trace import PersistentCongestion, load_trace

# Every stack folder at every pinned version, and each of its aliases (its Reno) at its
# default version: from the folders, so a new stack is in without an edit here.
STACKS = [f"{name}@{version}" for name, recipe in load_recipes().items() for version in recipe.versions] + \
         [f"{alias}@{recipe.default_version}" for recipe in load_recipes().values() for alias in recipe.aliases]
# Seconds, days (the default) and weeks of uptime, each with odd microseconds.
BASES = [17_000_003, DEFAULT_CLOCK_BASE_US, 14 * 86_400_000_000 + 11]
EXAMPLES = ["death-spiral.jsonl", "idle-restart.jsonl"]


@pytest.fixture(scope="module", autouse=True)
def built():
    for spec in STACKS:
        ensure_built(spec)


@pytest.fixture(scope="module")
def death_spiral_seed2():
    """The closed-loop death-spiral trace of seed 2 (persistent congestion included)."""
    result = simulate(load_scenario("death-spiral"), "ngtcp2@1.25.0", 2, record=True)
    assert any(isinstance(ev, PersistentCongestion) for ev in result.trace.events)
    return result.trace


def replay_at(monkeypatch, trace, spec, base):
    monkeypatch.setenv(ENV_VAR, str(base))
    res = replay(trace, [spec])
    run = res.runs[spec]
    assert run.error is None, run.error
    return run.snapshots, sorted((f.invariant, f.event_index) for f in res.findings if f.stack == spec)


@pytest.mark.parametrize("spec", STACKS)
@pytest.mark.parametrize("example", EXAMPLES)
def test_same_trace_same_snapshots_under_every_base(monkeypatch, spec, example):
    trace = load_trace(str(project_root() / "examples" / example))
    first = replay_at(monkeypatch, trace, spec, BASES[0])
    for base in BASES[1:]:
        assert replay_at(monkeypatch, trace, spec, base) == first, f"base {base} us changed {spec}"


@pytest.mark.parametrize("spec", STACKS)
def test_persistent_congestion_trace_same_under_every_base(monkeypatch, spec, death_spiral_seed2):
    first = replay_at(monkeypatch, death_spiral_seed2, spec, BASES[0])
    for base in BASES[1:]:
        assert replay_at(monkeypatch, death_spiral_seed2, spec, base) == first


@pytest.mark.parametrize("spec", STACKS)
def test_snapshots_report_trace_time(monkeypatch, spec, death_spiral_seed2):
    """Recovery starts and epochs are trace times: never beyond the trace's last event."""
    snaps, _ = replay_at(monkeypatch, death_spiral_seed2, spec, DEFAULT_CLOCK_BASE_US)
    last_t = death_spiral_seed2.events[-1].t
    times = [t for s in snaps for t in (s.recovery_start_us, s.epoch_start_us) if t is not None]
    assert times, "the stack reports no recovery start nor epoch"
    assert max(times) <= last_t and min(times) > -DEFAULT_CLOCK_BASE_US // 2


def test_ngtcp2_death_spiral_minimum_violation_was_the_clocks(monkeypatch, death_spiral_seed2):
    """Seed 2: cwnd-below-minimum only with ngtcp2's clock near 0; at an uptime-like base what
    is left is the code defect behind it, named: congestion avoidance with no epoch after
    persistent congestion (one ACK, event 238; RFC 9438 §4.8)."""
    _, near_zero = replay_at(monkeypatch, death_spiral_seed2, "ngtcp2@1.25.0", 1)
    _, realistic = replay_at(monkeypatch, death_spiral_seed2, "ngtcp2@1.25.0", DEFAULT_CLOCK_BASE_US)
    assert "cwnd-below-minimum" in {name for name, _ in near_zero}
    assert realistic == [("ca-without-epoch", 238)]


def test_clock_base_override_is_checked(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert clock_base_us() == DEFAULT_CLOCK_BASE_US
    monkeypatch.setenv(ENV_VAR, "604800000007")
    assert clock_base_us() == 604_800_000_007
    for bad in ("0", "-5", "12s", str(400 * 365 * 86_400_000_000)):
        monkeypatch.setenv(ENV_VAR, bad)
        with pytest.raises(SetupError, match=ENV_VAR):
            clock_base_us()

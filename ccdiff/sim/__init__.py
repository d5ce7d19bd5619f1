"""Closed-loop simulation: a seeded, virtual-time network where each controller gates its own sends.

    from ccdiff.sim import load_scenario, simulate
    result = simulate(load_scenario("death-spiral"), "quiche@0.26.0", seed=7)
    result.status, result.metrics["completion_us"], result.trace_text()

Modules: scenario (the TOML catalog under scenarios/), network (loss model,
drop-tail bottleneck), recovery (RFC 9002 loss detection shared by every
controller), engine (the event loop and the shared replay path).
"""
from .engine import SimResult, simulate
from .recovery import LossDetection
from .scenario import Scenario, available_scenarios, load_scenario, parse_scenario

__all__ = ["simulate", "SimResult", "LossDetection", "Scenario", "load_scenario", "parse_scenario",
           "available_scenarios"]

"""Connection-mode throughput: a stack's own client and server, seeds of one scenario, one core.

    CCDIFF_BUILD_DIR=... python3 bench/bench_connection.py [--scenario death-spiral-loopback]
                                                           [--seeds 100] [--stacks quiche@0.26.0,...]

For each stack with a connection shim (docs/connection-mode.md): runs, passes,
CPU and wall seconds, runs per CPU second, and the ratio of simulated time (each
run's end: completion or deadline) to wall time on one core — against Cloudflare's
real-time form of the death-spiral test (~10 s per run) as well.  The default is the
seed's headline: quiche 0.26.0's own connection on Cloudflare's setup
(death-spiral-loopback) beside 0.26.1 and 0.30.0 (the fix), 0.30.0 with the fix off,
and Reno; then quinn, picoquic, ngtcp2 and aioquic.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ccdiff.connection import run_connection      # noqa: E402
from ccdiff.sim.scenario import load_scenario     # noqa: E402

CLOUDFLARE_S_PER_RUN = 10
# The seed's headline first (quiche before and after the idle-restart fix, and Reno),
# then every other stack with a connection shim.
DEFAULT_STACKS = ("quiche@0.26.0", "quiche@0.26.1", "quiche@0.30.0", "quiche@0.30.0:idle_fix=off",
                  "quiche-reno@0.26.0", "quinn", "picoquic", "ngtcp2", "aioquic", "s2n-quic")
DEFAULT_SCENARIO = "death-spiral-loopback"


def measure(stack: str, scenario_name: str, seeds: int) -> dict:
    scenario = load_scenario(scenario_name)
    run_connection(scenario.with_params(bytes=10_000), stack, 0, record=False)   # build + import, untimed
    cpu0, wall0 = time.process_time(), time.perf_counter()
    passed = simulated_us = 0
    for seed in range(seeds):
        result = run_connection(scenario, stack, seed, record=False)
        passed += result.status == "pass"
        simulated_us += result.metrics["end_us"]
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {"stack": stack, "scenario": scenario_name, "runs": seeds, "passed": passed, "cpu_s": cpu,
            "wall_s": wall, "runs_per_cpu_s": seeds / max(cpu, 1e-9),
            "simulated_s": simulated_us / 1e6, "realtime_ratio": simulated_us / 1e6 / max(wall, 1e-9),
            "cloudflare_ratio": seeds * CLOUDFLARE_S_PER_RUN / max(wall, 1e-9)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--stacks", default=",".join(DEFAULT_STACKS))
    args = parser.parse_args()
    print(f"{'stack':28} {'runs':>5} {'passed':>7} {'cpu s':>7} {'wall s':>7} {'runs/cpu-s':>11} "
          f"{'x real time':>12} {'x Cloudflare':>13}")
    for stack in args.stacks.split(","):
        r = measure(stack, args.scenario, args.seeds)
        print(f"{stack:28} {r['runs']:5} {r['passed']:7} {r['cpu_s']:7.1f} {r['wall_s']:7.1f} "
              f"{r['runs_per_cpu_s']:11.2f} {r['realtime_ratio']:12.1f} {r['cloudflare_ratio']:13.1f}")


if __name__ == "__main__":
    main()

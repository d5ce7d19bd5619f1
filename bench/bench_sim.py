"""Closed-loop simulator throughput: seeds of one scenario per stack, one core.

    CCDIFF_BUILD_DIR=... python3 bench/bench_sim.py [--scenario death-spiral] [--seeds 10] [--stacks a,b]

For each stack: CPU seconds (time.process_time, robust on a shared machine),
wall seconds, events (trace events: sent + ack + lost + persistent congestion,
each through ledger, controller and every invariant) and events per CPU
second.  The last line extrapolates to the 100-seed matrix on 2 cores.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ccdiff.conform import default_stacks, with_controls   # noqa: E402
from ccdiff.sim import load_scenario, simulate              # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", default="death-spiral")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--stacks", default="")
    args = parser.parse_args()
    scenario = load_scenario(args.scenario)
    stacks = with_controls(args.stacks.split(",") if args.stacks else default_stacks())
    total_cpu = total_events = 0
    print(f"{'stack':26} {'cpu s':>7} {'wall s':>7} {'events':>9} {'events/cpu-s':>13} {'passed':>7}")
    for stack in stacks:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        events = passed = 0
        for seed in range(args.seeds):
            result = simulate(scenario, stack, seed, record=False)
            events += result.metrics["events"]
            passed += result.status == "pass"
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        total_cpu += cpu
        total_events += events
        print(f"{stack:26} {cpu:7.2f} {wall:7.2f} {events:9d} {events / cpu:13.0f} {passed:3d}/{args.seeds}")
    print(f"{'all':26} {total_cpu:7.2f} {'':7} {total_events:9d} {total_events / total_cpu:13.0f}")
    print(f"extrapolated: 100 seeds x {len(stacks)} stacks = {total_cpu * 100 / args.seeds:.0f} CPU s, "
          f"~{total_cpu * 100 / args.seeds / 2:.0f} s wall on 2 idle cores")


if __name__ == "__main__":
    main()

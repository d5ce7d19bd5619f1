"""stuck-at-minimum's calibration (issue #30): for each stack and seed of a scenario, the most
smoothed round trips the window stays pinned near the floor with the window full and 8
packets acknowledged, as the checker counts them with no threshold.

    python3 bench/stuck_calibration.py death-spiral linux@6.1 linux@6.12 quiche@0.26.0 [--seeds 10]

The threshold (ccdiff/invariants.py STUCK_ROUND_TRIPS) must sit well above the slowest
correct controller's worst seed and well below a real spiral (docs/detection-power.md).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ccdiff import invariants                   # noqa: E402
from ccdiff.sim import load_scenario, simulate  # noqa: E402


def pinned_round_trips(scenario, spec: str, seed: int) -> float:
    peak = [0.0]
    judge = invariants.Checker.judge_step

    def counting(self, index, ev, before, after, truth):
        judge(self, index, ev, before, after, truth)
        if self.post_signal_acked >= invariants.STUCK_PACKETS:
            peak[0] = max(peak[0], self.stuck_rtts)
    saved = invariants.STUCK_ROUND_TRIPS
    invariants.Checker.judge_step, invariants.STUCK_ROUND_TRIPS = counting, float("inf")
    try:
        simulate(scenario, spec, seed)
    finally:
        invariants.Checker.judge_step, invariants.STUCK_ROUND_TRIPS = judge, saved
    return peak[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario")
    parser.add_argument("stacks", nargs="+")
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    scenario = load_scenario(args.scenario)
    print(f"| stack | round trips pinned, seeds 0-{args.seeds - 1} (threshold {invariants.STUCK_ROUND_TRIPS:g}) |")
    print("|---|---|")
    for spec in args.stacks:
        values = [pinned_round_trips(scenario, spec, seed) for seed in range(args.seeds)]
        print(f"| {spec} | {', '.join(f'{v:.1f}' for v in values)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

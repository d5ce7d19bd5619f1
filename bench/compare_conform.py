#!/usr/bin/env python3
"""Compare two `ccdiff conform` runs (their summary.json): pass rates per stack x scenario,
violation counts per stack x invariant, and every case whose status changed.

    python3 bench/compare_conform.py OLD/summary.json NEW/summary.json

Used to re-judge the conform matrix when the verdict rules change (docs/closed-loop-results.md).
"""
import collections
import json
import sys


def cases(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return {(c["stack"], c["scenario"], c["seed"]): c for c in json.load(fh)["cases"]}


def passed(runs: dict, stack: str, scenario: str) -> int:
    return sum(c["status"] == "pass" for k, c in runs.items() if k[:2] == (stack, scenario))


def violations(case: dict) -> list:
    return sorted({f["invariant"] for f in case["findings"] if f.get("status") == "violation"})


def main(old_path: str, new_path: str) -> None:
    old, new = cases(old_path), cases(new_path)
    stacks = sorted({k[0] for k in new})
    scenarios = sorted({k[1] for k in new})
    print("| stack | " + " | ".join(scenarios) + " | total |")
    print("|---" * (len(scenarios) + 2) + "|")
    for stack in stacks:
        cells, total_old, total_new = [], 0, 0
        for scenario in scenarios:
            a, b = passed(old, stack, scenario), passed(new, stack, scenario)
            total_old, total_new = total_old + a, total_new + b
            cells.append(f"{a}→{b}" if a != b else str(b))
        print(f"| {stack} | " + " | ".join(cells) + f" | {total_old}→{total_new} |")
    counts = [collections.Counter((k[0], inv) for k, c in runs.items() for inv in violations(c))
              for runs in (old, new)]
    print("\nruns with a violation, old -> new:")
    for key in sorted(set(counts[0]) | set(counts[1])):
        if counts[0][key] != counts[1][key]:
            print(f"  {key[0]} {key[1]}: {counts[0][key]} -> {counts[1][key]}")
    print("\ncases whose status changed:")
    for key in sorted(new):
        if key in old and old[key]["status"] != new[key]["status"]:
            print(f"  {key}: {old[key]['status']} {violations(old[key])} -> "
                  f"{new[key]['status']} {violations(new[key])}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

"""Each connection-mode stack's own connections over the catalog: fidelity and findings.

    CCDIFF_BUILD_DIR=... python3 bench/connection_fidelity.py [--seeds 10] [--stacks aioquic]
                                                              [--scenarios a,b] [--out DIR]

For every scenario and seed, the stack's own client and server run (ccdiff sim
--mode connection --qlog), the client's qlog is imported and replayed through
the stack's adapter and every invariant (ccdiff/connection/confirm.py).  Printed
per scenario: runs passed, the adapter's exact-match rate of cwnd against the
window the stack logged (points agreeing / points compared, over the seeds), the
worst single-run rate, and each invariant violated with the seeds that reach it,
those where the stack's own logged window makes the same step, and those where the
same invariant flags the stack's own logged window at that event (own_window):
the tables of docs/connection-mode.md, "Fidelity and confirmations".
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ccdiff.connection import run_connection               # noqa: E402
from ccdiff.connection.confirm import judge_qlog           # noqa: E402
from ccdiff.sim.scenario import available_scenarios, load_scenario   # noqa: E402


def measure(stack: str, scenario_name: str, seeds: int, work: Path) -> dict:
    scenario = load_scenario(scenario_name)
    row = {"stack": stack, "scenario": scenario_name, "runs": seeds, "passed": 0, "agree": 0, "compared": 0,
           "worst": None, "violations": {}, "confirmed": {}, "own_window": {}, "errors": []}
    for seed in range(seeds):
        qlog = work / f"{scenario_name}-{seed}.qlog"
        result = run_connection(scenario, stack, seed, record=False, qlog=str(qlog))
        row["passed"] += result.status == "pass"
        try:
            judged = judge_qlog(str(qlog), stack)
        except Exception as exc:        # an import the importer refuses: say which, go on
            row["errors"].append(f"seed {seed}: {type(exc).__name__}: {exc}")
            continue
        cwnd = judged["fidelity"]["cwnd"]
        if cwnd["compared"]:
            row["compared"] += cwnd["compared"]
            row["agree"] += round(cwnd["agreement"] * cwnd["compared"])
            if row["worst"] is None or cwnd["agreement"] < row["worst"]:
                row["worst"] = cwnd["agreement"]
        for f in judged["findings"]:
            if f["status"] == "violation":
                row["violations"].setdefault(f["invariant"], []).append(seed)
                if f["logged_step"]["confirmed"]:
                    row["confirmed"].setdefault(f["invariant"], []).append(seed)
                own = f.get("own_window")
                if own is not None and own["event"] == f["event"]:
                    row["own_window"].setdefault(f["invariant"], []).append(seed)
        qlog.unlink(missing_ok=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--stacks", default="aioquic")
    parser.add_argument("--scenarios", default="")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON there")
    args = parser.parse_args()
    names = args.scenarios.split(",") if args.scenarios else available_scenarios()
    rows = []
    print("| stack | scenario | passed | cwnd exact match (all seeds) | worst seed | violations reached (seeds) |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="ccdiff-connection-fidelity-") as work:
        for stack in args.stacks.split(","):
            for name in names:
                r = measure(stack, name, args.seeds, Path(work))
                rows.append(r)
                rate = f"{r['agree'] / r['compared']:.1%} of {r['compared']:,}" if r["compared"] else "—"
                worst = f"{r['worst']:.1%}" if r["worst"] is not None else "—"
                found = "; ".join(f"{k} (seeds {', '.join(map(str, v))}; the stack's own log makes the same step "
                                  f"on {len(r['confirmed'].get(k, []))}; the same invariant flags its own logged "
                                  f"window at the same event on {len(r['own_window'].get(k, []))})"
                                  for k, v in sorted(r["violations"].items()))
                errors = f" — {len(r['errors'])} not imported: {r['errors'][0]}" if r["errors"] else ""
                print(f"| {stack} | {name} | {r['passed']}/{r['runs']} | {rate} | {worst} | {found or 'none'}"
                      f"{errors} |", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "connection-fidelity.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()

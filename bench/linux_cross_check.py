#!/usr/bin/env python3
"""The oracle-vs-Linux cross-check (docs/linux-cross-check.md): windows step by step, in segments.

For every scenario of the catalog (scenarios/*.toml) x N seeds, the closed-loop simulator
runs the RFC 9438 oracle; that one trace is then replayed, open loop, through the oracle
and through Linux's tcp_cubic (each configuration given), and after every ACK the two
windows are compared in segments of the trace's datagram size.  Per scenario and stack:

  agree     ACK steps where |cwnd_linux - cwnd_oracle| <= 1 segment (Linux counts whole
            segments, the oracle bytes: one segment is the resolution of the comparison)
  within10  ACK steps within 10 % of the oracle's window
  ratio     median of cwnd_linux / cwnd_oracle over ACK steps (> 1: Linux above)
  first     where each seed's first disagreement (> 1 segment) happens, by cause; the
            cause is read off the two snapshots there (classify())

and linux@6.1 against linux@6.12: the number of events where any snapshot field differs.

    python3 bench/linux_cross_check.py                 # 10 seeds, the table on stdout
    python3 bench/linux_cross_check.py --seeds 10 --json bench/results/linux-cross-check.json
    python3 bench/linux_cross_check.py --driver linux@6.12:hystart=off   # Linux's own sends

Deterministic: same catalog, seeds and builds, same bytes out.  Exit 2 with one line when
a stack is not built (ccdiff build linux@6.1 linux@6.12).
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ccdiff.build import ensure_built            # noqa: E402
from ccdiff.errors import SetupError             # noqa: E402
from ccdiff.replay import replay                 # noqa: E402
from ccdiff.sim.engine import simulate           # noqa: E402
from ccdiff.sim.scenario import available_scenarios, load_scenario  # noqa: E402
from ccdiff.trace import Ack, Lost, PersistentCongestion, Sent  # noqa: E402

DEFAULT_STACKS = ["linux@6.12:hystart=off", "linux@6.12"]
OLD, NEW = "linux@6.1", "linux@6.12"

CAUSES = {
    "hystart": "HyStart ended slow start without a loss (profile hystart)",
    "slow-start": "slow start counted in segments per ACK (profile packet-counting)",
    "reduction": "a reduction: ssthresh = 717/1024 of whole segments rounded down, or no second reduction inside Linux's recovery (profiles packet-counting, recovery-until-high-seq)",
    "recovery": "Linux still in Recovery until high_seq, or out of the same recovery later, so its epoch began later (profile recovery-until-high-seq)",
    "timeout": "persistent congestion as tcp_enter_loss: 1 segment, no second ssthresh (profile rto-loss-window)",
    "app-limited": "Linux grows while tcp_is_cwnd_limited holds, the oracle not on app-limited packets (profile cwnd-limited-per-window)",
    "idle": "the idle shift measured from the last send (profile idle-from-last-send)",
    "avoidance": "congestion avoidance: cnt steps, tcp_friendliness, epoch per jiffy (profiles packet-counting, tcp-friendliness-estimate)",
}


def classify(events, index, oracle, linux, mds) -> str:
    """The cause of a first disagreement at ACK `index`, from the snapshots around it."""
    o, x = oracle[index], linux[index]
    if x.ssthresh is not None and o.ssthresh is None:
        return "hystart"
    recent = range(max(0, index - 8), index + 1)
    if any(isinstance(events[i], PersistentCongestion) for i in recent):
        return "timeout"
    if any(isinstance(events[i], Lost) for i in recent) or \
            (o.ssthresh is not None and x.ssthresh is not None and abs(o.ssthresh - x.ssthresh) >= mds / 2):
        return "reduction"
    if o.phase == "app_limited" or x.phase == "app_limited":
        return "app-limited"
    if (o.phase == "recovery") != (x.phase == "recovery"):
        return "recovery"
    if o.epoch_start_us is not None and x.epoch_start_us is not None and \
            x.epoch_start_us - o.epoch_start_us > 1_000_000 // 250 and \
            o.recovery_start_us == x.recovery_start_us:
        return "recovery"        # the same recovery, left later: the epoch began later
    # an idle restart shortly before: a send that found nothing in flight after a gap
    for i in range(max(1, index - 64), index + 1):
        ev = events[i]
        if isinstance(ev, Sent) and oracle[i - 1].bytes_in_flight == 0 and ev.t - events[i - 1].t > 0 \
                and x.epoch_start_us is not None:
            return "idle"
    if o.phase == "slow_start" and x.phase in ("slow_start", "app_limited") and o.ssthresh is None:
        return "slow-start"
    return "avoidance"


def compare(trace, specs):
    result = replay(trace, ["oracle"] + specs, check=False)
    for spec in ["oracle"] + specs:
        if result.runs[spec].error:
            raise SetupError(f"{spec}: {result.runs[spec].error}")
    return result


def run(seeds: int, stacks: list, driver: str = "oracle") -> dict:
    for spec in sorted({s.split(":")[0] for s in stacks} | {OLD, NEW}):
        ensure_built(spec)
    rows = {}
    for name in available_scenarios():
        scenario = load_scenario(name)
        mds = scenario.max_datagram_size
        per = {s: {"steps": 0, "agree": 0, "within10": 0, "ratios": [], "first": collections.Counter(),
                   "seeds_all_agree": 0} for s in stacks}
        version_diffs = 0
        for seed in range(seeds):
            sim = simulate(scenario, driver, seed, record=True, check=False)
            trace = sim.trace
            result = compare(trace, sorted(set(stacks) | {OLD, NEW}))
            events = trace.events
            oracle = result.runs["oracle"].snapshots
            version_diffs += sum(a != b for a, b in zip(result.runs[OLD].snapshots, result.runs[NEW].snapshots))
            for spec in stacks:
                linux = result.runs[spec].snapshots
                p, first = per[spec], None
                for i, ev in enumerate(events):
                    if not isinstance(ev, Ack) or not ev.pns:
                        continue
                    o, x = oracle[i].cwnd, linux[i].cwnd
                    p["steps"] += 1
                    diff = abs(x - o) / mds
                    if diff <= 1:
                        p["agree"] += 1
                    elif first is None:
                        first = i
                    if abs(x - o) <= 0.1 * o:
                        p["within10"] += 1
                    p["ratios"].append(x / o)
                if first is None:
                    p["seeds_all_agree"] += 1
                else:
                    p["first"][classify(events, first, oracle, linux, mds)] += 1
        rows[name] = {"version_diffs": version_diffs, "stacks": {
            s: {"ack_steps": p["steps"],
                "agree": round(p["agree"] / p["steps"], 4) if p["steps"] else None,
                "within10": round(p["within10"] / p["steps"], 4) if p["steps"] else None,
                "median_ratio": round(statistics.median(p["ratios"]), 4) if p["ratios"] else None,
                "seeds_all_agree": p["seeds_all_agree"],
                "first_disagreement": dict(sorted(p["first"].items()))}
            for s, p in per.items()}}
    return {"seeds": seeds, "driver": driver, "stacks": stacks, "causes": CAUSES, "scenarios": rows}


def markdown(doc: dict) -> str:
    out = [f"Traces sent by {doc['driver']} in closed loop, {doc['seeds']} seeds per scenario; windows "
           "compared after every ACK, in segments.", ""]
    out.append("| scenario | stack | ACK steps | agree (±1 seg) | within 10 % | median linux/oracle | "
               "seeds agreeing throughout | first disagreement: cause (seeds) | 6.1 vs 6.12 steps differing |")
    out.append("|---|---|---:|---:|---:|---:|---:|---|---:|")
    for name, row in doc["scenarios"].items():
        for n, (spec, s) in enumerate(row["stacks"].items()):
            causes = ", ".join(f"{c} {k}" for c, k in s["first_disagreement"].items()) or "-"
            out.append(f"| {name if n == 0 else ''} | {spec} | {s['ack_steps']} | {100 * s['agree']:.1f} % | "
                       f"{100 * s['within10']:.1f} % | {s['median_ratio']:.3f} | {s['seeds_all_agree']}/{doc['seeds']} | "
                       f"{causes} | {row['version_diffs'] if n == 0 else ''} |")
    out += ["", "Causes:", ""] + [f"- `{k}`: {v}" for k, v in doc["causes"].items()]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--stack", action="append", help=f"Linux configurations (default: {DEFAULT_STACKS})")
    parser.add_argument("--json", help="also write the numbers as JSON to this file")
    parser.add_argument("--driver", default="oracle",
                        help="the stack whose closed-loop sends make the traces (default: oracle; "
                             "e.g. linux@6.12:hystart=off for Linux's own send pattern)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        print("linux_cross_check: --seeds must be >= 1", file=sys.stderr)
        return 2
    try:
        doc = run(args.seeds, args.stack or DEFAULT_STACKS, args.driver)
    except SetupError as exc:
        print(f"linux_cross_check: {exc}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    sys.stdout.write(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Adapter overhead: events/s through an adapter's C ABI vs the bare controller.

    python3 bench/bench_adapters.py [--events N] [--python-events N] [--reps R] [--reno]

One table, measured in one run, per stack (quiche, ngtcp2, picoquic):

  adapter    a C driver calling the adapter .so's ccd_step in a tight loop
             over a pre-built array of resolved ccd_event structs (no Python);
  bare       the same controller calls without the adapter, in the stack's
             language: C loops calling ngtcp2_cc / picoquic alg_notify, a Rust
             loop calling quiche's congestion functions through the adapter's
             facade (quiche::ccdiff_internal), each compiled from the same
             sources with the adapter's flags;
  ratio      bare events/s / adapter events/s (goal: <= 2, the adapter costs
             no more than twice the bare controller);
  +ns/event  what the adapter adds per event, 1e9/adapter - 1e9/bare;
  python     ccdiff's own path, NativeController.step via ctypes (context).

The event stream is bench_oracle.make_stream (ACK-clocked bulk flow, ~0.5%
loss, idle gaps), resolved once by ccdiff's ledger and written to a binary
file (format: bench/adapter_overhead/events.h) that every native driver
reads.  Each native figure is the fastest of --reps runs, each on a fresh
controller; "same end state" checks that bare and adapter finish with the
same cwnd and ssthresh.  What the bare loops leave out is written at the top
of each file in bench/adapter_overhead/.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_oracle import MDS, make_stream        # noqa: E402
from ccdiff.ledger import Ledger                  # noqa: E402
from ccdiff.native import NativeController        # noqa: E402
from ccdiff.paths import build_dir                # noqa: E402
from ccdiff.stacks import load_recipes            # noqa: E402
from ccdiff.trace import Header                   # noqa: E402

HERE = ROOT / "bench" / "adapter_overhead"
# (row label, stack, version, adapter options, bare driver, bare argument)
ROWS = [
    ("quiche@0.30.0", "quiche", "0.30.0", "", "quiche_bare", "cubic"),
    ("ngtcp2@1.25.0", "ngtcp2", "1.25.0", "", "ngtcp2_bare", "cubic"),
    ("picoquic@1.1.53.0", "picoquic", "1.1.53.0", "", "picoquic_bare", "cubic"),
]
RENO_ROWS = [
    ("quiche-reno@0.30.0", "quiche", "0.30.0", "cc=reno", "quiche_bare", "reno"),
    ("ngtcp2-reno@1.25.0", "ngtcp2", "1.25.0", "cc=reno", "ngtcp2_bare", "reno"),
    ("picoquic-reno@1.1.53.0", "picoquic", "1.1.53.0", "cc=newreno", "picoquic_bare", "newreno"),
]
EVENT = struct.Struct("<IIqQIIq4q")   # 72 bytes, see events.h
PACKET = struct.Struct("<QqII")       # 24 bytes
GOAL_RATIO = 2                        # issue 3: the adapter costs at most twice the bare controller


def resolved_stream(n: int) -> list:
    header = Header(MDS)
    ledger = Ledger(header)
    return [ledger.resolve(ev) for ev in make_stream(n)]


def write_events(resolved: list, path: Path) -> None:
    records, packets = [], []
    for ev in resolved:
        flags = (1 if ev.app_limited else 0) | (2 if ev.ecn_ce else 0)
        records.append(EVENT.pack(ev.kind, flags, ev.t, ev.bytes_in_flight, len(ev.packets),
                                  len(ev.spurious), ev.ack_delay, *ev.rtt))
        for pn, sent, size, app_limited in (*ev.packets, *ev.spurious):
            packets.append(PACKET.pack(pn, sent, size, int(app_limited)))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(b"CCDEVT01" + struct.pack("<QQ", len(records), len(packets)))
        fh.write(b"".join(records))
        fh.write(b"".join(packets))


def ensure_built(rows, out: Path) -> dict:
    """Build any missing adapter (ccdiff build), then the drivers; returns the stacks' source trees."""
    recipes = load_recipes()
    for _, stack, version, *_ in rows:
        if not recipes[stack].library(version).exists():
            subprocess.run([sys.executable, "-m", "ccdiff", "build", f"{stack}@{version}"], cwd=ROOT, check=True)

    def src(stack: str, version: str) -> Path:
        return recipes[stack].build_folder(version) / "src" / recipes[stack].versions[version]["subdir"]

    versions = {stack: version for _, stack, version, *_ in rows}
    env = dict(os.environ)   # build.sh builds the bare driver of each stack named here
    if "ngtcp2" in versions:
        env.update(NGTCP2_SRC=str(src("ngtcp2", versions["ngtcp2"])),
                   NGTCP2_GEN=str(recipes["ngtcp2"].build_folder(versions["ngtcp2"]) / "gen"))
    if "picoquic" in versions:
        env.update(PICOQUIC_SRC=str(src("picoquic", versions["picoquic"])))
    if "quiche" in versions:
        env.update(QUICHE_TREE=str(recipes["quiche"].build_folder(versions["quiche"]) / "work" / "tree"))
    subprocess.run(["bash", str(HERE / "build.sh"), str(out)], env=env, check=True)
    return recipes


def run_json(cmd: list) -> dict:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{cmd[0]} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def python_path(library: Path, options: str, resolved: list) -> float:
    ctl = NativeController(str(library), MDS, Header(MDS).initial_rtt_us, options)
    step = ctl.step
    started = time.perf_counter()
    for ev in resolved:
        step(ev)
    elapsed = time.perf_counter() - started
    ctl.close()
    return len(resolved) / elapsed


def measure(rows, events: int, python_events: int, reps: int) -> list:
    """One dict per row: bare and adapter events/s (fastest of reps), their ratio, the
    ctypes path, and whether both loops end in the same state."""
    out = build_dir() / "bench" / "adapter_overhead"
    recipes = ensure_built(rows, out)
    resolved = resolved_stream(max(events, python_events))
    events_file = out / f"events-{events}.bin"
    write_events(resolved[:events], events_file)
    results = []
    for label, stack, version, options, bare_bin, bare_arg in rows:
        library = recipes[stack].library(version)
        adapter = run_json([out / "adapter_loop", library, events_file, reps, options])
        bare = run_json([out / bare_bin, events_file, reps, bare_arg])
        results.append({
            "stack": label, "bare": bare["events_per_s"], "adapter": adapter["events_per_s"],
            "ratio": bare["events_per_s"] / adapter["events_per_s"],
            "extra_ns": 1e9 / adapter["events_per_s"] - 1e9 / bare["events_per_s"],
            "python": python_path(library, options, resolved[:python_events]),
            "same_end_state": (bare["cwnd"], bare["ssthresh"]) == (adapter["cwnd"], adapter["ssthresh"]),
            "cwnd": (bare["cwnd"], adapter["cwnd"])})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="events for the native loops")
    parser.add_argument("--python-events", type=int, default=100_000, help="events for the ctypes path")
    parser.add_argument("--reps", type=int, default=10, help="native runs per figure; the fastest counts")
    parser.add_argument("--reno", action="store_true", help="add the Reno/NewReno variants")
    args = parser.parse_args()

    rows = ROWS + (RENO_ROWS if args.reno else [])
    results = measure(rows, args.events, args.python_events, args.reps)
    print(f"{args.events:,} events (native, best of {args.reps}), {args.python_events:,} (Python); "
          f"ACK-clocked bulk flow, ~0.5% loss; events/s")
    head = (f"{'stack':<24}{'bare':>12}{'adapter':>12}{'bare/adapter':>14}{'goal <=2x':>11}"
            f"{'+ns/event':>11}{'Python ctypes':>15}{'same end state':>16}")
    print(head)
    print("-" * len(head))
    for r in results:
        same = "yes" if r["same_end_state"] else "NO (cwnd %d/%d)" % r["cwnd"]
        print(f"{r['stack']:<24}{r['bare']:>12,.0f}{r['adapter']:>12,.0f}{r['ratio']:>13.2f}x"
              f"{'met' if r['ratio'] <= GOAL_RATIO else 'NOT met':>11}{r['extra_ns']:>11.1f}{r['python']:>15,.0f}"
              f"{same:>16}")


if __name__ == "__main__":
    main()

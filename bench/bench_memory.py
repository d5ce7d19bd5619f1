"""Peak memory of validate, replay (oracle) and matrix (every built stack) on big traces.

    python3 bench/bench_memory.py [--events 1000000 10000000] [--root CHECKOUT] [--work DIR]

Each trace is bench_oracle's stream (ACK-clocked bulk flow, random loss, idle gaps)
written to WORK/memory-N.jsonl, deterministically (same N, same bytes), once.
Each command runs as `python -m ccdiff ...` in its own child of this process; its
peak RSS is that child's ru_maxrss from wait4 (the child alone, not the largest child
so far as RUSAGE_CHILDREN would give).  --root runs another checkout's ccdiff (a
"before" figure from main).  Goal (issue 22): each under 500 MB on 10 M events.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_oracle import MDS, iter_stream          # noqa: E402
from ccdiff.trace import Header, event_to_dict, header_to_dict  # noqa: E402

GOAL_MB = 500
COMMANDS = {   # name -> ccdiff arguments after the trace path
    "validate": lambda path: ["validate", path],
    "replay oracle": lambda path: ["replay", path, "--stack", "oracle"],
    "matrix (every built stack)": lambda path: ["matrix", path],
}


def write_trace(path: Path, n_events: int) -> Path:
    """bench_oracle's first n_events events as a trace file; kept if already written."""
    if path.exists():
        return path
    partial = path.with_suffix(".partial")
    with open(partial, "w") as out:
        out.write(json.dumps(header_to_dict(Header(MDS), 1), separators=(", ", ": ")) + "\n")
        for ev in iter_stream(n_events):
            out.write(json.dumps(event_to_dict(ev), separators=(", ", ": ")) + "\n")
    partial.rename(path)
    return path


def peak(args: list, root: Path) -> dict:
    """Exit code, wall time and peak RSS (MB) of `python -m ccdiff ARGS` run from root."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "ccdiff", *args], cwd=root, stdout=subprocess.DEVNULL,
                                 stderr=err, env=dict(os.environ, PYTHONPATH=str(root)))
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        err.seek(0)
        tail = err.read().decode(errors="replace").strip().splitlines()[-1:]
    # exit 0 or 1 (findings) is a run; 2 or a signal is not
    return {"exit": child.returncode, "wall_s": wall, "peak_mb": usage.ru_maxrss * 1024 / 1e6,
            "stderr": tail[0] if tail else ""}


def measure(event_counts: list, root: Path = ROOT, work: Path | None = None, only=None) -> list:
    work = Path(work or tempfile.gettempdir())
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in event_counts:
        path = write_trace(work / f"memory-{n}.jsonl", n)
        for name, command in COMMANDS.items():
            if only and name.split()[0] not in only:
                continue
            r = peak(command(str(path)), root)
            rows.append(dict(r, command=name, events=n))
            print(f"bench_memory: {name}, {n:,} events: {r['peak_mb']:.0f} MB, {r['wall_s']:.0f} s, "
                  f"exit {r['exit']}", file=sys.stderr, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--root", type=Path, default=ROOT, help="the ccdiff checkout to measure")
    parser.add_argument("--work", type=Path, default=None, help="where the traces are written (default: TMPDIR)")
    parser.add_argument("--only", nargs="+", choices=["validate", "replay", "matrix"])
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    rows = measure(args.events, args.root.resolve(), args.work, args.only)
    print(f"{'command':<30}{'events':>12}{'peak MB':>10}{'wall s':>9}  exit")
    for r in rows:
        print(f"{r['command']:<30}{r['events']:>12,}{r['peak_mb']:>10.0f}{r['wall_s']:>9.0f}  {r['exit']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["exit"] in (0, 1) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

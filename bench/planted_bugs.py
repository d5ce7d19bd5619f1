"""Which planted bugs do the example traces see?  (issue #21: detection power)

Each planted bug is one change to a pinned C stack's controller source, unpacked from
its sha256-checked registry archive into a scratch folder and built with
`ccdiff build STACK --source DIR` into a scratch build folder (the pinned builds are
never touched).  Every example trace is replayed through the pristine pinned build and
through the mutant; a mutant is

- `caught` when the mutant has a violation (stack, trace, invariant) the pristine build
  does not have;
- `visible` when the snapshots differ but no new violation says so (a blind spot);
- `identical` when every snapshot on every example is byte-identical (the examples never
  reach the changed code).

    python3 bench/planted_bugs.py [--traces examples/*.jsonl] [--work DIR] [--json OUT]

Prints one table; --json writes the same rows.  Exit 0 when it ran (whatever it found),
2 when it could not (a planted change that no longer applies, a failed build).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ccdiff.build import ensure_built, fetch, unpack  # noqa: E402
from ccdiff.stacks import load_recipes                # noqa: E402


@dataclass(frozen=True)
class Planted:
    name: str
    stack: str
    file: str          # inside the stack's source tree (stack.toml's subdir)
    old: str           # "\n" stands for the file's own line ending
    new: str
    why: str           # the realistic slip it stands for, and what should catch it
    control: bool = False   # no change: the copy-and-build path alone, which must be identical


PLANTED = (
    # ngtcp2 1.25.0, lib/ngtcp2_cc.c (tests/test_planted_bugs.py runs these through conform).
    Planted("ngtcp2-beta-0.5", "ngtcp2", "lib/ngtcp2_cc.c",
            "  cstat->ssthresh = cstat->cwnd * 7 / 10;", "  cstat->ssthresh = cstat->cwnd * 5 / 10;",
            "beta 0.5 instead of 0.7 (ngtcp2_cc.c:501): excess-reduction"),
    Planted("ngtcp2-no-recovery-check", "ngtcp2", "lib/ngtcp2_cc.c",
            "  if (ack->bytes_delivered == 0 ||\n      in_congestion_recovery(cstat, ack->largest_pkt_sent_ts)) {",
            "  if (ack->bytes_delivered == 0) {",
            "grows on ACKs of packets sent before the recovery start (ngtcp2_cc.c:320-321): growth-in-recovery"),
    # picoquic 1.1.53.0, picoquic/cubic.c.
    Planted("picoquic-beta-0.5", "picoquic", "picoquic/cubic.c",
            "    cubic_state->K = cubic_root(cubic_state->W_max*(1.0 - PICOQUIC_CUBIC_BETA_ECN) / PICOQUIC_CUBIC_C);",
            "    cubic_state->K = cubic_root(cubic_state->W_max*(1.0 - 0.5) / PICOQUIC_CUBIC_C);",
            "K from beta 0.5 (cubic.c:138): the window after a loss, W_cubic(0) = W_max - C*K^3, "
            "halves instead of 3/4: excess-reduction"),
    Planted("picoquic-no-recovery-check", "picoquic", "picoquic/cubic.c",
            "                        if (ack_state->lost_packet_number >= cubic_state->recovery_sequence &&\n",
            "                        if (\n",
            "every loss re-enters recovery, also losses of packets sent before it started "
            "(cubic.c:333): excess-reduction on repeated losses in one recovery period"),
    Planted("picoquic-ecn-ignored", "picoquic", "picoquic/cubic.c",
            "                        if (ack_state->lost_packet_number >= cubic_state->recovery_sequence &&\n"
            "                            (notification == picoquic_congestion_notification_ecn_ec ||\n",
            "                        if (ack_state->lost_packet_number >= cubic_state->recovery_sequence &&\n"
            "                            (\n",
            "ECN-CE in congestion avoidance no longer reduces (cubic.c:334): missing-reduction"),
    Planted("picoquic-grows-app-limited", "picoquic", "picoquic/cubic.c",
            "                    case picoquic_cubic_alg_congestion_avoidance:\n"
            "                        if (path_x->last_time_acked_data_frame_sent > path_x->last_sender_limited_time) {",
            "                    case picoquic_cubic_alg_congestion_avoidance:\n"
            "                        if (1) {",
            "congestion avoidance grows on ACKs of app-limited data (cubic.c:287): growth-while-app-limited"),
    Planted("picoquic-control", "picoquic", "picoquic/cubic.c",
            "static void cubic_notify(", "static void cubic_notify(",
            "no change (the control): what a mutant shows comes from its one change", control=True),
)


def ccdiff(*args, build_dir: Path | None = None, timeout: int = 1200) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if build_dir is not None:
        env["CCDIFF_BUILD_DIR"] = str(build_dir)
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


class Failed(Exception):
    pass


def pristine_tree(stack: str, work: Path) -> tuple[str, Path]:
    recipe = load_recipes()[stack]
    version = recipe.default_version
    pin = recipe.versions[version]
    ensure_built(f"{stack}@{version}")
    folder = work / f"{stack}-src"
    if not folder.exists():
        unpack(fetch(pin["url"], pin["sha256"]), folder)
    return f"{stack}@{version}", folder / pin["subdir"]


def plant(tree: Path, bug: Planted) -> None:
    path = tree / bug.file
    text = path.read_bytes().decode()
    eol = "\r\n" if "\r\n" in text else "\n"
    old, new = bug.old.replace("\n", eol), bug.new.replace("\n", eol)
    if text.count(old) != 1:
        raise Failed(f"{bug.name}: {bug.file}: the planted change no longer applies ({text.count(old)} matches)")
    path.write_bytes(text.replace(old, new).encode())


def build_mutant(bug: Planted, source: Path, work: Path) -> tuple[str, Path]:
    tree = work / bug.name
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(source, tree)
    plant(tree, bug)
    build_dir = work / "build"
    done = ccdiff("build", bug.stack, "--source", str(tree), build_dir=build_dir)
    if done.returncode != 0:
        raise Failed(f"{bug.name}: build failed:\n{done.stdout}{done.stderr}")
    library = Path(done.stdout.strip().splitlines()[-1])
    return f"{bug.stack}@{library.parent.name}", build_dir


# Runs in a child process: CCDIFF_BUILD_DIR (where a mutant was built) is read at import.
REPLAY = """
import hashlib, json, sys
from ccdiff.replay import replay
from ccdiff.trace import load_trace
spec, traces = sys.argv[1], sys.argv[2:]
rows = {}
for path in traces:
    result = replay(load_trace(path), [spec])
    run = result.runs[spec]
    if run.error:
        raise SystemExit(f"{spec} on {path}: {run.error}")
    digest = hashlib.sha256(repr(run.snapshots).encode()).hexdigest()
    rows[path.rsplit("/", 1)[-1]] = {
        "violations": sorted({f.invariant for f in result.findings if f.stack == spec and f.status == "violation"}),
        "snapshots": digest}
print(json.dumps(rows))
"""


def snapshots_and_verdicts(spec: str, traces: list, build_dir: Path | None) -> dict:
    """{trace name: {"violations": [invariant], "snapshots": sha256 of every snapshot}}."""
    env = dict(os.environ)
    if build_dir is not None:
        env["CCDIFF_BUILD_DIR"] = str(build_dir)
    done = subprocess.run([sys.executable, "-c", REPLAY, spec, *traces], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise Failed(f"replay {spec}: exit {done.returncode}:\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout)


def judge(pristine: dict, mutant: dict) -> dict:
    new = {name: sorted(set(mutant[name]["violations"]) - set(pristine[name]["violations"]))
           for name in pristine}
    new = {name: inv for name, inv in new.items() if inv}
    differs = sorted(name for name in pristine if mutant[name]["snapshots"] != pristine[name]["snapshots"])
    verdict = "caught" if new else "visible" if differs else "identical"
    return {"verdict": verdict, "new_violations": new, "traces_that_differ": differs}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", nargs="+", default=sorted(glob.glob(str(ROOT / "examples" / "*.jsonl"))))
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temporary one, removed)")
    parser.add_argument("--only", nargs="*", help="planted bug names (default: all, with the control)")
    parser.add_argument("--json", type=Path, help="write the rows as JSON")
    args = parser.parse_args(argv)
    bugs = [b for b in PLANTED if not args.only or b.name in args.only]
    with tempfile.TemporaryDirectory(prefix="ccdiff-planted-") as scratch:
        work = args.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        rows, baselines = [], {}
        try:
            for bug in bugs:
                spec, source = pristine_tree(bug.stack, work)
                if spec not in baselines:
                    baselines[spec] = snapshots_and_verdicts(spec, args.traces, None)
                mutant_spec, build_dir = build_mutant(bug, source, work)
                result = judge(baselines[spec], snapshots_and_verdicts(mutant_spec, args.traces, build_dir))
                rows.append({"planted": bug.name, "stack": spec, "why": bug.why, "control": bug.control, **result})
                print(f"{bug.name:28} {result['verdict']:9} new: {result['new_violations'] or '-'}; "
                      f"differs on {len(result['traces_that_differ'])} of {len(args.traces)} traces", flush=True)
        except Failed as err:
            print(f"planted_bugs: error: {err}", file=sys.stderr)
            return 2
    planted = [r for r in rows if not r["control"]]
    caught = sum(r["verdict"] == "caught" for r in planted)
    print(f"{caught} of {len(planted)} planted bugs caught by {len(args.traces)} traces")
    for row in rows:
        if row["control"] and row["verdict"] != "identical":
            print(f"planted_bugs: error: the control {row['planted']} is {row['verdict']}: the build path "
                  f"itself changes the verdicts", file=sys.stderr)
            return 2
    if args.json:
        args.json.write_text(json.dumps({"traces": [Path(t).name for t in args.traces], "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

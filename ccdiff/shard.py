"""`ccdiff conform --shard K/N`: one deterministic part of the stack x scenario x seed matrix.

The matrix is ordered the same way on every machine (scenarios as given, then stacks as
given with their Reno controls, then seeds: `matrix_order`), and case i belongs to shard
(i mod N) + 1.  Round-robin over that order spreads every scenario -- the death spiral's
10 MB download costs far more than an idle restart -- over all N shards, so the shards
take about as long as each other without anyone measuring anything.

A shard folder is an ordinary conform OUT (summary.json of its own cases, junit.xml,
index.html, traces/, cases.jsonl) plus `shard.json`, written last and by atomic rename:

  {"schema": "ccdiff-shard/1", "shard": {"index": K, "count": N},
   "run": {"ccdiff": ..., "arguments": {...}, "scenario_files": [[name, sha256], ...],
           "stack_builds": [[label, identity], ...]},
   "cases": <number of cases>, "summary_sha256": ..., "traces": {relative path: sha256}}

"run" is what every shard of one nightly must share (`ccdiff merge` compares it); the
rest lets merge check that the folder holds what the shard wrote and nothing half-done.
A run into OUT removes OUT/shard.json before it starts: a folder without it is a shard
that did not finish (killed, out of disk), and merge refuses it.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
from pathlib import Path

from .errors import SetupError
from .output import write_text_atomic

SCHEMA = "ccdiff-shard/1"
MARKER = "shard.json"
MAX_SHARDS = 10_000


def parse_shard(text: str) -> tuple[int, int]:
    """'2/3' -> (2, 3): 1-based K of N shards."""
    found = re.fullmatch(r"\s*(\d{1,6})\s*/\s*(\d{1,6})\s*", text or "")
    if not found:
        raise SetupError(f"--shard {text!r}: expected K/N, e.g. 2/3 (the second of three shards)")
    k, n = int(found.group(1)), int(found.group(2))
    if not 1 <= n <= MAX_SHARDS or not 1 <= k <= n:
        raise SetupError(f"--shard {text!r}: expected 1 <= K <= N <= {MAX_SHARDS}")
    return k, n


def matrix_order(n_scenarios: int, n_stacks: int, seeds: list) -> list:
    """(scenario index, stack index, seed) of every case, in the one order shards share."""
    return [(s, t, seed) for s in range(n_scenarios) for t in range(n_stacks) for seed in seeds]


def in_shard(case_index: int, shard: tuple[int, int] | None) -> bool:
    """Round-robin: case i is shard (i mod N) + 1's.  No shard: every case."""
    return shard is None or case_index % shard[1] == shard[0] - 1


def sha256_file(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def scenario_file_sha256(scenario) -> str:
    """The bytes the scenario was read from (a catalog name or a .toml path)."""
    try:
        return sha256_file(scenario.source)
    except OSError as exc:
        raise SetupError(f"{scenario.source}: cannot read: {exc.strerror or exc}") from None


def build_identity(target) -> str:
    """What a stack's build is, the same on two runners that built the same thing (see
    build_info_identity).  The oracles are ccdiff's own code (the "ccdiff" field covers
    them); a stack served by a container (CCDIFF_REMOTE_<STACK>) is what its server's
    `hello` reports of the build (ccdiff/serve.py)."""
    if target.kind != "native":
        return target.kind
    from .remote import hello
    served = hello(target.recipe.name)
    if served is not None:
        builds = served.get("builds") if isinstance(served.get("builds"), dict) else {}
        found = (builds.get(target.recipe.name) or {}).get(target.version)
        return f"served:{found if isinstance(found, str) else 'unrecorded'}"
    return build_info_identity(target.recipe, target.version)


def build_info_identity(recipe, version: str) -> str:
    """sha256 of build-info.json (upstream url and sha256, recipe digest, probed features,
    vcs) without the build's duration, which differs between two builds of the same thing."""
    info = recipe.build_folder(version) / "build-info.json"
    try:
        doc = json.loads(info.read_text())
    except (OSError, ValueError):
        return "unrecorded"      # built before build-info.json existed: cannot be told apart
    if isinstance(doc, dict):
        doc.pop("seconds", None)
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def run_identity(stacks: list, scenarios: list, seeds: list, *, traces: str,
                 timeout_s: float | None, report: bool, qlog_schema: str, mode: str = "closed-loop") -> dict:
    """What every shard of one run must share.  The merge takes report and qlog_schema
    from here: it builds the reports the unsharded run would have built."""
    from .labels import labelled_target
    from .provenance import ccdiff_version
    from .stacks import load_recipes
    recipes = load_recipes()
    targets = [labelled_target(item, recipes) for item in stacks]
    return {
        "ccdiff": ccdiff_version(),
        "arguments": {"stacks": list(stacks), "scenarios": [s.name for s in scenarios], "seeds": list(seeds),
                      "traces": traces, "timeout": timeout_s, "report": bool(report), "qlog_schema": qlog_schema,
                      **({"mode": mode} if mode != "closed-loop" else {})},
        "scenario_files": [[s.name, scenario_file_sha256(s)] for s in scenarios],
        "stack_builds": [[t.label, build_identity(t)] for t in targets],
    }


def clear_marker(out_dir) -> None:
    """Before a run writes into OUT: from now on, until write_marker, OUT is not a finished shard."""
    path = Path(out_dir) / MARKER
    with contextlib.suppress(OSError):
        if path.is_file() and not path.is_symlink():
            path.unlink()


def write_marker(out_dir, shard: tuple[int, int], run: dict, summary: dict) -> Path:
    """OUT/shard.json, the last file a shard writes (atomic rename): the record of what the
    folder holds, checked by `ccdiff merge`."""
    out = Path(out_dir)
    traces = {}
    for case in summary["cases"]:
        if case.get("trace"):
            traces[case["trace"]] = sha256_file(out / case["trace"])
    doc = {"schema": SCHEMA, "shard": {"index": shard[0], "count": shard[1]}, "run": run,
           "cases": len(summary["cases"]), "summary_sha256": sha256_file(out / "summary.json"),
           "traces": dict(sorted(traces.items()))}
    write_text_atomic(out / MARKER, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return out / MARKER

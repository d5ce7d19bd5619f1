"""`ccdiff merge DIR... --out OUT`: the shards of one `conform --shard K/N` run, joined.

Each shard folder's shard.json (ccdiff/shard.py) says what it is.  Before writing
anything, merge checks that the folders are the N shards of one run, each exactly once:
the same arguments, scenario files, stack builds and ccdiff; every K of 1..N present
once; each folder finished (shard.json present) and unchanged since (summary.json and
every trace match the hashes shard.json recorded); its cases exactly those round-robin
gives its K; and OUT none of the inputs (merge never writes into them).  Any of these
is an error with a one-line reason (exit 2).

The joined case results then go through the same summarize / write_outputs /
report_failures as an unsharded run: the simulator is deterministic, so summary.json,
junit.xml, index.html, traces/ and report/ are byte-identical to those of `conform` with
the same arguments and the same --out.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .errors import SetupError
from .output import atomic_file, read_json_input
from .shard import MARKER, SCHEMA, in_shard, matrix_order, sha256_file

# What a trace path in a summary may look like: conform writes traces/<scenario>/<stack>/seed-N.jsonl
# with both names through labels.folder_name.
# A case's trace, or in connection mode its record (seed-N.connection.jsonl, ccdiff/conform.py).
_TRACE = re.compile(r"traces/[A-Za-z0-9@._-]+/[A-Za-z0-9@._-]+/seed-\d+(\.connection)?\.jsonl")
_SUMMARY_LIMIT = 256 << 20
# shard.json's "run", by key: how a difference is named in the refusal.
_RUN_PARTS = {"arguments": "arguments", "scenario_files": "scenario files", "stack_builds": "stack builds",
              "ccdiff": "ccdiff versions"}


@dataclass
class Shard:
    folder: Path
    index: int
    count: int
    run: dict
    cases: list
    traces: dict = field(default_factory=dict)


@dataclass
class Merged:
    shards: list
    run: dict
    summary: dict

    def copy_traces(self, folder) -> None:
        """Every shard's traces into OUT/traces, same relative paths; folder: OUT, an open
        OutputFolder (each trace written whole to a temporary file and renamed: a symlink in
        OUT is replaced, never followed)."""
        for shard in self.shards:
            for rel in shard.traces:
                with atomic_file(folder.claim(rel)) as dst, open(shard.folder / rel, "rb") as src:
                    while block := src.read(1 << 20):
                        dst.write(block)


def _refuse(message: str):
    raise SetupError(f"merge: {message}")


def _regular_file(path: Path) -> bool:
    """A file, not a symlink (a link could make merge read, and copy, anything)."""
    return path.is_file() and not path.is_symlink()


def load_shard(folder: str) -> Shard:
    where = Path(folder)
    if not where.is_dir():
        _refuse(f"{folder}: not a folder (expected the --out of `ccdiff conform --shard K/N`)")
    marker = where / MARKER
    if not _regular_file(marker):
        if any((where / name).exists() for name in ("cases.jsonl", "summary.json", "traces")):
            _refuse(f"{folder}: half-written shard: no {MARKER} (the run did not finish; run the same "
                    "`ccdiff conform --shard K/N` again to complete it)")
        _refuse(f"{folder}: not a shard folder: no {MARKER}")
    doc = read_json_input(marker, "shard record")
    try:
        if doc["schema"] != SCHEMA:
            _refuse(f"{marker}: schema {doc['schema']!r}, expected {SCHEMA}")
        index, count = doc["shard"]["index"], doc["shard"]["count"]
        run, want_summary, traces = doc["run"], doc["summary_sha256"], doc["traces"]
        if not (type(index) is int and type(count) is int and 1 <= index <= count):
            raise TypeError("shard")
        if not (isinstance(run, dict) and isinstance(traces, dict) and isinstance(want_summary, str)):
            raise TypeError("run")
        arguments = run["arguments"]
        for key in ("stacks", "scenarios", "seeds"):
            if not isinstance(arguments[key], list):
                raise TypeError(key)
    except (KeyError, TypeError) as exc:
        _refuse(f"{marker}: not a shard record (bad or missing {exc})")
    summary_path = where / "summary.json"
    if not _regular_file(summary_path) or sha256_file(summary_path) != want_summary:
        _refuse(f"{folder}: summary.json is missing or not the one {MARKER} recorded (half-written or "
                "edited since the shard finished)")
    summary = read_json_input(summary_path, "conform summary", _SUMMARY_LIMIT)
    cases = summary.get("cases") if isinstance(summary, dict) else None
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        _refuse(f"{summary_path}: not a conform summary (no list of cases)")
    for rel, digest in traces.items():
        if not _TRACE.fullmatch(rel) or ".." in PurePosixPath(rel).parts:
            _refuse(f"{marker}: refusing trace path {rel!r} (expected traces/<scenario>/<stack>/seed-N[.connection].jsonl)")
        if not _regular_file(where / rel) or sha256_file(where / rel) != digest:
            _refuse(f"{folder}: {rel} is missing or not the trace {MARKER} recorded")
    named = {c.get("trace") for c in cases if c.get("trace") is not None}
    if named != set(traces):
        _refuse(f"{folder}: summary.json and {MARKER} name different traces")
    return Shard(where, index, count, run, cases, traces)


def check_same_run(shards: list) -> None:
    first = shards[0]
    for shard in shards[1:]:
        for key, what in _RUN_PARTS.items():
            if shard.run.get(key) != first.run.get(key):
                _refuse(f"shards made with different {what}: {first.folder} and {shard.folder} "
                        f"({_difference(first.run.get(key), shard.run.get(key))})")
        if shard.run != first.run:
            _refuse(f"shards of different runs: {first.folder} and {shard.folder}")


def _difference(a, b) -> str:
    """The first thing that differs, short enough for one line."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return f"{key}: {_short(a.get(key))} vs {_short(b.get(key))}"
    if isinstance(a, list) and isinstance(b, list):
        for x, y in zip(a, b):
            if x != y:
                return f"{_short(x)} vs {_short(y)}"
        return f"{len(a)} vs {len(b)} entries"
    return f"{_short(a)} vs {_short(b)}"


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=True)
    return text if len(text) <= 120 else text[:117] + "..."


def check_complete(shards: list) -> int:
    """Every K of 1..N exactly once; returns N."""
    counts = sorted({s.count for s in shards})
    if len(counts) > 1:
        _refuse(f"shards of different N: {', '.join(f'{s.folder} is {s.index}/{s.count}' for s in shards)}")
    count = counts[0]
    seen: dict = {}
    for shard in shards:
        if shard.index in seen:
            _refuse(f"shard {shard.index}/{count} given twice: {seen[shard.index]} and {shard.folder}")
        seen[shard.index] = shard.folder
    missing = [k for k in range(1, count + 1) if k not in seen]
    if missing:
        _refuse(f"shard{'s' if len(missing) > 1 else ''} {', '.join(f'{k}/{count}' for k in missing)} "
                f"missing (given: {', '.join(f'{k}/{count}' for k in sorted(seen))})")
    return count


def check_out(out_dir: str, folders: list) -> None:
    """OUT is none of the inputs, inside none of them, and holds none of them."""
    out = _resolved(out_dir, "--out")
    for folder in folders:
        where = _resolved(folder, "the input")
        if out == where or where in out.parents or out in where.parents:
            _refuse(f"--out {out_dir} {'is' if out == where else 'overlaps'} the input {folder}: "
                    "merge never writes into its inputs")


def _resolved(path: str, what: str) -> Path:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError) as exc:      # a symlink loop
        _refuse(f"{what} {path}: cannot resolve it ({exc})")


def check_cases(shard: Shard, arguments: dict) -> None:
    """Exactly the cases round-robin gives shard K of the recorded matrix, each once."""
    scenarios, stacks, seeds = arguments["scenarios"], arguments["stacks"], arguments["seeds"]
    labels = [label for label, _ in shard.run["stack_builds"]]
    want = sorted((scenarios[s], labels[t], seed)
                  for i, (s, t, seed) in enumerate(matrix_order(len(scenarios), len(stacks), seeds))
                  if in_shard(i, (shard.index, shard.count)))
    try:
        have = sorted((c["scenario"], c["stack"], c["seed"]) for c in shard.cases)
    except (KeyError, TypeError):
        _refuse(f"{shard.folder}/summary.json: a case without scenario, stack and seed")
    if have != want:
        _refuse(f"{shard.folder}: its cases are not those of shard {shard.index}/{shard.count} of its "
                f"matrix ({len(have)} cases, expected {len(want)})")


def check_here(run: dict, check_builds: bool) -> None:
    """The merge's reports are built by this ccdiff with this machine's stacks and catalog:
    refuse when they are not what the shards ran."""
    from .provenance import ccdiff_version
    if run["ccdiff"] != ccdiff_version():
        _refuse(f"the shards were made by ccdiff {run['ccdiff']}, this is {ccdiff_version()}: merge with "
                "the ccdiff that ran them")
    if not check_builds or not run["arguments"].get("report"):
        return
    from .labels import labelled_target
    from .shard import build_identity
    from .sim.scenario import catalog_path
    from .stacks import load_recipes
    recipes = load_recipes()
    for (label, identity), item in zip(run["stack_builds"], run["arguments"]["stacks"]):
        here = build_identity(labelled_target(item, recipes))
        if here != identity:
            _refuse(f"{label} here is not the build the shards ran (the reports replay failing traces "
                    "through it): build the same release here, or merge with --no-report")
    for name, digest in run["scenario_files"]:
        catalog = catalog_path(name)
        if catalog is not None and sha256_file(catalog) != digest:
            _refuse(f"{catalog} here differs from the scenario file the shards ran (the reports rerun "
                    "catalog scenarios): merge in the checkout that made the shards")


def merge_shards(folders: list, out_dir: str, check_builds: bool = True) -> Merged:
    """Check the shards (every refusal a SetupError, before anything is written) and join them."""
    from .conform import summarize
    check_out(out_dir, folders)
    shards = [load_shard(folder) for folder in folders]
    check_same_run(shards)
    check_complete(shards)
    run = shards[0].run
    blamed = shards[0]                  # the shard whose records are being read: the one named
    try:
        for blamed in shards:
            check_cases(blamed, run["arguments"])
        blamed = shards[0]              # the run's arguments and builds are the first shard's
        check_here(run, check_builds)
        arguments = run["arguments"]
        labels = [label for label, _ in run["stack_builds"]]
        cases = []
        for blamed in sorted(shards, key=lambda s: s.index):
            cases += blamed.cases
        summary = summarize(labels, arguments["scenarios"], arguments["seeds"], cases)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        _refuse(f"{blamed.folder}/{MARKER} (or its summary.json): not a shard record "
                f"({type(exc).__name__}: {exc})")
    from .shard import clear_marker
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    clear_marker(out_dir)          # OUT may have been a shard once: it is a merge now
    return Merged(shards, run, summary)

"""`ccdiff conform`: every stack through every scenario with every seed, in closed loop.

Each case (stack x scenario x seed) runs in a worker process that opens its
own controller; a case that crashes its worker (a segfault in a stack) is an
error for that case only and the worker is replaced.  Results are written as

  summary.json   stable schema, sorted keys, no timestamps or wall times:
                 two runs with the same arguments are byte-identical
  junit.xml      one test case per stack x scenario
  traces/        the replayable trace of every failing case
                 (`ccdiff replay traces/<scenario>/<stack>/seed-N.jsonl --stack <stack>`)
  index.html     the overview: pass rate, completion and impact per stack x scenario,
                 each failing seed linked to its finding page (ccdiff/report/overview.py)
  report/<stack>/  the HTML report of each failing stack
  shard.json     with --shard K/N only, written last: what this part of the matrix is
                 (ccdiff/shard.py); `ccdiff merge` joins the N parts (ccdiff/merge.py)

Every scenario also runs the Reno controls: oracle-reno and the Reno alias of
each stack.  Exit codes: 0 all pass, 1 failures, 2 errors.
"""
from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import shlex
import signal
import statistics
import tempfile
import time
import traceback
from collections import deque
from pathlib import Path
from xml.etree import ElementTree as ET

from .errors import SetupError
from .labels import folder_name, labelled_target, split_label
from .limits import over_memory
from .outdir import held
from .output import write_text_atomic, xml_safe
from .stacks import load_recipes, resolve

SCHEMA = "ccdiff-conform/1"
# delivered_bytes and total_bytes: the impact of a run that missed its deadline (the
# overview shows "2.34 MB of 10 MB delivered" from metrics_late).
SUMMARY_METRICS = ("completion_us", "min_window_us", "recovery_transitions", "goodput_bytes_per_s",
                   "max_cwnd", "ptos", "persistent_congestions", "events", "delivered_bytes", "total_bytes")
# What conform writes into OUT is recorded in OUT's manifest (ccdiff/outdir.py): a later run
# removes what an earlier one wrote and it does not write again (a trace of a case that passes
# now, the report of a stack that passes now), and never touches anything else.


def with_controls(specs: list, recipes: dict | None = None) -> list:
    """specs plus the Reno controls: oracle-reno and each native stack's Reno alias (same version)."""
    recipes = load_recipes() if recipes is None else recipes
    out = list(dict.fromkeys(specs))
    controls = ["oracle-reno"]
    for spec in specs:
        target = resolve(split_label(spec)[1], recipes)
        if target.kind == "native":
            for alias in sorted(target.recipe.aliases):
                controls.append(f"{alias}@{target.version}" if target.spec.version else alias)
    for control in controls:
        label = resolve(control, recipes).label
        if all(labelled_target(s, recipes).label != label for s in out):
            out.append(control)
    return out


def default_stacks() -> list:
    from .matrix import default_specs
    return default_specs()


def unique_folders(names: list, what: str, fix: str) -> None:
    """Every stack and every scenario names its own folder (OUT/traces/<scenario>/<stack>,
    OUT/report/<stack>) and its own summary cells: a name given twice, or two names that
    folder_name makes one ('x y' and 'x_y'), would overwrite each other's traces and merge their
    cells.  Refused, with both names."""
    seen: dict = {}
    for name in names:
        if not isinstance(name, str):
            raise SetupError(f"a {what} name must be a string, not {name!r}")
        folder = folder_name(name)
        if folder in seen:
            other = seen[folder]
            same = "is given twice" if other == name else f"and {other!r} would share the folder {folder!r}"
            raise SetupError(f"{what} {name!r} {same}; {fix}")
        seen[folder] = name


# -- the worker ----------------------------------------------------------------
_WORKER_RECIPES: dict = {}


def _run_case(case: tuple) -> dict:
    from .sim import simulate
    index, scenario, item, seed, trace_dir, keep, mode = case
    try:
        if not _WORKER_RECIPES:
            _WORKER_RECIPES.update(load_recipes())
        target = labelled_target(item, _WORKER_RECIPES)
        if mode == "connection":
            return _connection_case(scenario, target, split_label(item)[1], seed, trace_dir, keep)
        else:
            result = simulate(scenario, target, seed, record=keep != "none")
            text = result.trace_text if result.trace is not None else None
    except SetupError as exc:
        return {"status": "error", "reasons": [f"setup: {exc}"], "metrics": {}, "findings": [], "mode": mode}
    except Exception as exc:   # a harness bug: report it, keep the run going
        last = traceback.format_exception(exc)[-3:]
        return {"status": "error", "reasons": ["exception: " + "".join(last).strip()], "metrics": {},
                "findings": [], "mode": mode}
    doc = dict(result.to_dict(), mode=mode)
    doc.setdefault("findings", [])
    if text is not None and trace_dir and (keep == "all" or result.status != "pass"):
        try:
            doc["trace"] = _keep(trace_dir, scenario, result.stack, f"seed-{seed}.jsonl", text())
        except _Unwritable as exc:
            return {"status": "error", "reasons": [str(exc)], "metrics": {}, "findings": [], "mode": mode}
    return doc


class _Unwritable(Exception):
    """The harness's disk, not the stack: the case is an error that says so."""


def _keep(trace_dir: str, scenario, stack: str, name: str, text: str) -> str:
    """Write a case's file under OUT/traces/<scenario>/<stack>/; its path relative to OUT."""
    rel = Path("traces") / folder_name(scenario.name) / folder_name(stack) / name
    path = Path(trace_dir) / rel
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
    except (OSError, SetupError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise _Unwritable(f"harness: cannot write the trace {rel}: {why}") from None
    return str(rel)


def _connection_case(scenario, target, spec: str, seed: int, trace_dir, keep: str) -> dict:
    """One stack's own connection (docs/connection-mode.md), its outcome judged as the seed's
    test judges it, and its own events -- the client's qlog, imported -- through the adapter
    and every invariant (ccdiff/connection/confirm.py), recorded as `own_events` beside the
    verdict, with the one command that shows them again.  The qlog itself is not kept: the
    stack's connection IDs in it are random (aioquic's), so it is not byte for byte the same
    from one run to the next, and the command writes it again.  spec: the stack's SPEC, which
    the adapter replay and the command name (a `NAME=SPEC` item's target carries NAME)."""
    from .connection import run_connection
    from .connection.confirm import case_own_events, judge_qlog
    with tempfile.TemporaryDirectory(prefix="ccdiff-own-events-") as work:
        qlog = Path(work) / "client.qlog"
        result = run_connection(scenario, target, seed, record=keep != "none", qlog=str(qlog))
        doc = dict(result.to_dict(), mode="connection")
        doc.setdefault("findings", [])
        if qlog.is_file() and result.status != "error":
            try:
                doc["own_events"] = case_own_events(judge_qlog(str(qlog), spec))
            except Exception as exc:   # a log the importer refuses, or ccdiff's own slip: said, and
                # the connection's verdict, which does not rest on it, stands
                doc["own_events"] = {"error": f"{type(exc).__name__}: {exc}"}
            doc["own_events"]["command"] = replay_command(scenario, spec, seed, "connection") + \
                f" --qlog {shlex.quote(f'seed-{seed}.qlog')}"
    if trace_dir and result.records and (keep == "all" or doc["status"] != "pass"):
        # The record (docs/connection-mode.md) is not a replayable trace: its own name says
        # so, and the reports leave it out.
        try:
            doc["trace"] = _keep(trace_dir, scenario, result.stack, f"seed-{seed}.connection.jsonl",
                                 result.record_text())
        except _Unwritable as exc:
            return {"status": "error", "reasons": [str(exc)], "metrics": {}, "findings": [], "mode": "connection"}
    return doc


def _worker(conn) -> None:
    """One worker process: cases in, results out, over its own pipe (no shared locks a
    crashing process could leave held).  It dies with the parent, even a SIGKILLed one (no
    orphan goes on simulating), and leaves Ctrl-C to the parent, which says what is kept."""
    from .isolation import die_with_parent
    die_with_parent(signal.SIGKILL)()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getppid() == 1:                 # the parent died before prctl took effect
        return
    while True:
        try:
            case = conn.recv()
        except (EOFError, OSError):       # the parent is gone
            return
        if case is None:
            return
        conn.send((case[0], _run_case(case)))


class _Pool:
    """Worker processes, one pipe each; a worker that dies costs only its current case."""

    def __init__(self, jobs: int, timeout_s: float | None, memory_mib: int | None = None):
        self.ctx = multiprocessing.get_context("spawn")
        self.jobs = jobs
        self.timeout_s = timeout_s
        self.memory_mib = memory_mib      # a worker above it is killed (ccdiff/limits.py)

    def _spawn(self) -> dict:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child,), daemon=True)
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "case": None, "started": 0.0}

    def run(self, cases: list, on_result) -> None:
        from multiprocessing.connection import wait
        todo = deque(cases)
        finished = []

        def feed(worker) -> bool:
            if todo:
                case = todo.popleft()
                worker["conn"].send(case)
                worker["case"], worker["started"] = case[0], time.monotonic()
                return True
            worker["conn"].send(None)
            worker["case"] = None
            finished.append(worker)
            return False

        active = []
        for _ in range(min(self.jobs, len(cases))):
            worker = self._spawn()
            if feed(worker):
                active.append(worker)
        while active:
            ready = set(wait([w["conn"] for w in active] + [w["proc"].sentinel for w in active], timeout=0.5))
            now = time.monotonic()
            for worker in list(active):
                conn, proc = worker["conn"], worker["proc"]
                result = None
                if conn in ready:
                    try:
                        result = conn.recv()
                    except (EOFError, OSError):
                        result = None
                if result is not None:
                    on_result(*result)
                    if not feed(worker):
                        active.remove(worker)
                    continue
                timed_out = self.timeout_s and now - worker["started"] > self.timeout_s
                resident = over_memory(proc.pid, self.memory_mib) if proc.sentinel not in ready else None
                if proc.sentinel not in ready and conn not in ready and not timed_out and resident is None:
                    continue
                if timed_out or resident is not None:
                    proc.kill()          # our own worker, by its handle
                proc.join(timeout=5)
                why = (f"timeout: case took longer than {self.timeout_s} s" if timed_out else
                       f"memory: the case's process held {resident:.0f} MiB, above the bound of "
                       f"{self.memory_mib} MiB (--memory-limit)" if resident is not None else
                       f"crash: worker died (exit code {proc.exitcode})")
                on_result(worker["case"], {"status": "error", "reasons": [why], "metrics": {}, "findings": []})
                conn.close()
                active.remove(worker)
                if todo:
                    replacement = self._spawn()
                    if feed(replacement):
                        active.append(replacement)
        for worker in finished:
            worker["proc"].join(timeout=5)
            worker["conn"].close()


# -- the matrix ----------------------------------------------------------------
def run_conform(stacks: list, scenarios: list, seeds: list, out_dir=None, jobs: int = 2,
                keep_traces: str = "failing", timeout_s: float | None = None, progress=None,
                fresh: bool = False, shard: tuple[int, int] | None = None, mode: str = "closed-loop",
                memory_mib: int | None = None) -> dict:
    """Run the matrix, or with shard=(K, N) its K-th of N parts (ccdiff/shard.py); returns
    the summary document of the cases run (see write_outputs).  out_dir: None (no journal,
    no traces), a folder path, or the OutputFolder the CLI holds (ccdiff/outdir.py).
    mode "connection": each stack with a connection shim runs its own client and server
    (ccdiff/connection/); the others (the oracle and the Reno control) run the closed loop
    beside them, as `sim --mode connection` shows them."""
    if out_dir is None:
        return _run_conform(stacks, scenarios, seeds, None, jobs, keep_traces, timeout_s, progress, fresh, shard,
                            mode, memory_mib)
    with held(out_dir) as folder:
        return _run_conform(stacks, scenarios, seeds, folder, jobs, keep_traces, timeout_s, progress, fresh, shard,
                            mode, memory_mib)


def case_mode(mode: str, target) -> str:
    """The drive of one stack in a run of `mode`: a connection-mode run drives a stack with a
    connection shim through its own connection and every other (the oracle, the controls)
    through the closed loop."""
    if mode != "connection":
        return "closed-loop"
    from .connection.build import supports_connection
    return "connection" if supports_connection(target) else "closed-loop"


def _run_conform(stacks, scenarios, seeds, folder, jobs, keep_traces, timeout_s, progress, fresh, shard,
                 mode="closed-loop", memory_mib=None) -> dict:
    out_dir = str(folder.root) if folder is not None else None
    recipes = load_recipes()
    targets = [labelled_target(item, recipes) for item in stacks]
    labels = [t.label for t in targets]
    unique_folders(labels, "stack", "rename one (NAME=SPEC)")
    unique_folders([s.name for s in scenarios], "scenario",
                   "rename one (its file's `name`), or leave out the copy of a catalog scenario")
    from .remote import remote_address
    from .build import unusable_build
    for target in targets:   # fail early, in the parent, with the fixing command
        if target.kind != "native" or remote_address(target.recipe.name) is not None:
            continue
        if not target.recipe.library(target.version).exists():
            raise SetupError(f"{target.recipe.name}@{target.version} is not built; run: "
                             f"ccdiff build {target.recipe.name}@{target.version}")
        reason = None if target.version.startswith(("local-", "git-")) else \
            unusable_build(target.recipe, target.version)
        if reason:
            raise SetupError(reason)
    modes = [case_mode(mode, target) for target in targets]
    if "connection" in modes:       # built once here, never by two workers at once
        from .connection.build import ensure_shim
        for target, drive in zip(targets, modes):
            if drive == "connection":
                ensure_shim(target)
    from .shard import in_shard, matrix_order
    cases, keys = [], []
    # The whole matrix, in the order every shard shares; a shard keeps its own indices.
    for index, (s, t, seed) in enumerate(matrix_order(len(scenarios), len(stacks), seeds)):
        keys.append((scenarios[s].name, labels[t], seed))
        cases.append((index, scenarios[s], stacks[t], seed, out_dir, keep_traces, modes[t]))
    mine = [i for i in range(len(cases)) if in_shard(i, shard)]
    results = [None] * len(cases)
    if out_dir:          # from here on OUT is not a finished shard until write_marker
        from .shard import clear_marker
        clear_marker(out_dir)
    if folder is not None:
        folder.claim("cases.jsonl")      # the journal, written case by case from here on
    journal = Journal(out_dir, fresh) if out_dir else None
    prints = {i: _fingerprint(cases[i][1], cases[i][2], targets[labels.index(keys[i][1])], cases[i][3], keep_traces,
                              cases[i][6])
              for i in mine}
    todo = []
    for case, fingerprint in ((cases[i], prints[i]) for i in mine):
        kept = journal.get(fingerprint) if journal else None
        if kept is not None and kept.get("trace") and not (Path(out_dir) / kept["trace"]).is_file():
            kept = None            # the trace it claims was removed since: run it again
        if kept is None:
            todo.append(case)
        else:                      # finished by an earlier, interrupted run of the same matrix
            results[case[0]] = kept
            if kept.get("trace"):
                folder.adopt(kept["trace"])
            if progress:
                progress(kept)

    def on_result(index, doc):
        scenario, label, seed = keys[index]
        doc.update(scenario=scenario, stack=label, seed=seed)
        if doc["status"] == "error":   # a crash, hang or exception: the one command that redoes it
            doc["replay"] = replay_command(cases[index][1], split_label(cases[index][2])[1], seed, cases[index][6])
        results[index] = doc
        if folder is not None and doc.get("trace"):
            folder.adopt(doc["trace"])       # written by the worker, recorded as ccdiff's here
        if journal and doc["status"] != "error":
            journal.add(prints[index], doc)
        if progress:
            progress(doc)

    try:
        _Pool(max(1, jobs), timeout_s, memory_mib).run(todo, on_result)
    finally:
        if journal:
            journal.close()
    return summarize(labels, [s.name for s in scenarios], seeds, [results[i] for i in mine])


def replay_command(scenario, spec: str, seed: int, mode: str = "closed-loop") -> str:
    """`ccdiff sim` of one case: the simulator is deterministic, so this reruns it exactly,
    crash or hang included (under a debugger, if need be)."""
    from .sim.scenario import catalog_path
    catalog = catalog_path(scenario.name)
    where = scenario.name if catalog is not None and scenario.source and \
        Path(scenario.source).resolve() == catalog.resolve() else scenario.source
    connection = " --mode connection" if mode == "connection" else ""
    return f"ccdiff sim {shlex.quote(where)}{connection} --stack {shlex.quote(spec)} --seed {seed}"


class Journal:
    """DIR/cases.jsonl: every finished case, appended and flushed as it arrives.

    A run that is interrupted (Ctrl-C, a kill, a crash of the machine) loses no
    finished case: the same command run again finds them here and runs only the
    rest.  A case is reused only if its fingerprint -- scenario parameters,
    stack spec, seed, ccdiff version, the adapter build -- is unchanged; a torn
    last line is ignored.  Errors are not kept, so they are retried.
    """

    def __init__(self, out_dir: str, fresh: bool = False):
        self.path = Path(out_dir) / "cases.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.kept: dict = {}
        if fresh:
            self.path.unlink(missing_ok=True)
        elif self.path.exists():
            text = self.path.read_text(errors="replace")
            if text and not text.endswith("\n"):        # torn by a kill: drop the partial line
                text = text[:text.rfind("\n") + 1]
                self.path.write_text(text)
            for line in text.splitlines():
                try:
                    entry = json.loads(line)
                    self.kept[entry["fingerprint"]] = entry["case"]
                except (ValueError, KeyError, TypeError):
                    continue
        self.fh = open(self.path, "a", encoding="utf-8")

    def get(self, fingerprint: str):
        return self.kept.get(fingerprint)

    def add(self, fingerprint: str, doc: dict) -> None:
        self.fh.write(json.dumps({"fingerprint": fingerprint, "case": doc}, sort_keys=True) + "\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())

    def close(self) -> None:
        self.fh.close()


def _fingerprint(scenario, item: str, target, seed: int, keep_traces: str = "failing",
                 mode: str = "closed-loop") -> str:
    """Everything that changes a case's outputs: scenario, stack spec, seed, ccdiff version,
    the adapter build (and in connection mode the shim's), --traces (a case run with
    --traces none wrote no trace) and the drive."""
    from dataclasses import astuple, replace
    from . import __version__
    build = ""
    if target.kind == "native":
        info = target.recipe.build_folder(target.version) / "build-info.json"
        build = info.read_text() if info.exists() else ""
    text = repr((astuple(replace(scenario, source="")), item, seed, __version__, build, keep_traces))
    if mode == "connection":     # a closed-loop run's journal never answers for a connection run
        shim = target.recipe.build_folder(target.version) / "connection" / "build-info.json"
        # "own events": its qlog judged too (a journal from before that never did answers no more)
        text += repr(("connection", "own events", shim.read_text() if shim.exists() else ""))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _stats(values: list) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"min": min(values), "median": statistics.median_low(values), "max": max(values)}


def summarize(labels: list, scenario_names: list, seeds: list, results: list) -> dict:
    cells = []
    by_cell = {}
    for doc in results:
        by_cell.setdefault((doc["stack"], doc["scenario"]), []).append(doc)
    for scenario in scenario_names:
        for label in labels:
            docs = sorted(by_cell.get((label, scenario), []), key=lambda d: d["seed"])
            passed = sum(d["status"] == "pass" for d in docs)
            failed = sum(d["status"] == "fail" for d in docs)
            errors = sum(d["status"] == "error" for d in docs)
            why = {}
            for d in docs:
                for kind in sorted({r.split(":")[0].split(" ")[0] for r in d["reasons"]}):
                    why[kind] = why.get(kind, 0) + 1
            completed = sum(1 for d in docs if d["metrics"].get("completion_us") is not None)
            cells.append({
                "stack": label, "scenario": scenario, "runs": len(docs), "passed": passed,
                "failed": failed, "errors": errors,
                "pass_rate": round(passed / len(docs), 4) if docs else None,
                "completed": completed, "failure_reasons": why,
                "failing_seeds": [d["seed"] for d in docs if d["status"] != "pass"],
                "metrics": {m: _stats([d["metrics"].get(m) for d in docs]) for m in SUMMARY_METRICS},
                "metrics_failing": {m: _stats([d["metrics"].get(m) for d in docs if d["status"] != "pass"])
                                    for m in SUMMARY_METRICS},
                # the runs that missed the deadline (e.g. the death spiral's pinned window)
                "metrics_late": {m: _stats([d["metrics"].get(m) for d in docs
                                            if d["status"] == "fail" and d["metrics"].get("completion_us") is None])
                                 for m in SUMMARY_METRICS},
            })
    cases = sorted(results, key=lambda d: (d["scenario"], labels.index(d["stack"]), d["seed"]))
    totals = {k: sum(c[k] for c in cells) for k in ("runs", "passed", "failed", "errors")}
    # The one vocabulary (issue #30): of the violations, those that are bug reports on a strict
    # trace (status new or not checked upstream); known, fixed, consequences, lenient apart.
    totals["strict_new_findings"] = sum(1 for d in results for f in d.get("findings", [])
                                        if f.get("status") == "violation" and f.get("reachability") != "lenient"
                                        and f.get("upstream_kind") in ("new", "unchecked"))
    summary = {"schema": SCHEMA, "stacks": labels, "scenarios": scenario_names, "seeds": list(seeds),
               "totals": totals, "cells": cells, "cases": cases}
    modes = {d["stack"]: d.get("mode", "closed-loop") for d in results}
    if "connection" in modes.values():   # conform --mode connection: how each stack was driven
        summary["modes"] = {label: modes.get(label, "closed-loop") for label in labels}
        summary["own_events"] = own_events_summary(cases)
    return summary


def own_events_summary(cases: list) -> list:
    """Per stack and scenario of a connection-mode run: the violations its own events gave
    (its qlog through the adapter and every invariant) that its own logged window confirms,
    with the seeds, and the adapter's cwnd exact-match rate over the runs judged.  Evidence of
    reach, beside the verdicts, not a verdict (ccdiff/connection/confirm.py case_own_events)."""
    rows: dict = {}
    for case in cases:
        own = case.get("own_events")
        if own is None:
            continue
        row = rows.setdefault((case["stack"], case["scenario"]), {
            "stack": case["stack"], "scenario": case["scenario"], "judged": 0, "errors": 0,
            "cwnd_agree": 0, "cwnd_compared": 0, "confirmed": {}, "adapter_only": {}})
        if "error" in own:
            row["errors"] += 1
            continue
        row["judged"] += 1
        if own.get("cwnd_compared"):
            row["cwnd_compared"] += own["cwnd_compared"]
            row["cwnd_agree"] += round(own["cwnd_exact"] * own["cwnd_compared"])
        for key in ("confirmed", "adapter_only"):
            for f in own[key]:
                if f["status"] == "violation":
                    seeds = row[key].setdefault(f["invariant"], [])
                    if case["seed"] not in seeds:
                        seeds.append(case["seed"])
    return [rows[key] for key in sorted(rows)]


def compare(summary: dict, baseline: dict, tolerance: float = 0.05) -> list:
    """Regressions against an earlier summary, one dict each, sorted.

    The simulator is deterministic, so a seed that passed in the baseline and fails
    now is a change, never noise: every such seed is a regression ("new-failure").
    Where the seed sets differ, a cell whose pass rate dropped by more than
    `tolerance` is one too ("pass-rate-drop").  Cells only in one summary are
    ignored (a new stack or scenario is not a regression).
    """
    check_baseline(baseline)
    before = {(c["stack"], c["scenario"], c["seed"]): c["status"] for c in baseline["cases"]}
    cells_before = {(c["stack"], c["scenario"]): c for c in baseline["cells"]}
    out = []
    for case in summary["cases"]:
        key = (case["stack"], case["scenario"], case["seed"])
        if before.get(key) == "pass" and case["status"] != "pass":
            out.append({"kind": "new-failure", "stack": key[0], "scenario": key[1], "seed": key[2],
                        "detail": "; ".join(case["reasons"][:2])})
    for cell in summary["cells"]:
        old = cells_before.get((cell["stack"], cell["scenario"]))
        if not old or old["pass_rate"] is None or cell["pass_rate"] is None:
            continue
        drop = old["pass_rate"] - cell["pass_rate"]
        if drop > tolerance and not any(r["stack"] == cell["stack"] and r["scenario"] == cell["scenario"]
                                        for r in out):
            out.append({"kind": "pass-rate-drop", "stack": cell["stack"], "scenario": cell["scenario"],
                        "seed": None, "detail": f"pass rate {old['pass_rate']:.0%} -> {cell['pass_rate']:.0%}"})
    return sorted(out, key=lambda r: (r["scenario"], r["stack"], r["kind"], r["seed"] if r["seed"] is not None else -1))


# What compare reads of a baseline summary, each field with the types it may have: checked
# whole before a run starts, so a bad --baseline never costs a run and then a traceback.
_BASELINE_CASE = {"stack": (str,), "scenario": (str,), "seed": (int,), "status": (str,)}
_BASELINE_CELL = {"stack": (str,), "scenario": (str,), "pass_rate": (int, float, type(None))}


def check_baseline(baseline) -> None:
    """SetupError naming the first field of a baseline summary.json compare cannot read."""
    if not isinstance(baseline, dict) or baseline.get("schema") != SCHEMA:
        found = baseline.get("schema") if isinstance(baseline, dict) else type(baseline).__name__
        raise SetupError(f"baseline has schema {found!r}, expected {SCHEMA}")
    for key, fields in (("cases", _BASELINE_CASE), ("cells", _BASELINE_CELL)):
        items = baseline.get(key)
        if not isinstance(items, list):
            raise SetupError(f"baseline is not a ccdiff summary: \"{key}\" is not a list")
        for n, item in enumerate(items):
            if not isinstance(item, dict):
                raise SetupError(f"baseline {key}[{n}]: expected an object, found {type(item).__name__}")
            for name, types in fields.items():
                value = item.get(name)
                if not isinstance(value, types) or isinstance(value, bool) or \
                        (isinstance(value, float) and not math.isfinite(value)):
                    raise SetupError(f"baseline {key}[{n}].{name}: expected "
                                     f"{' or '.join('null' if t is type(None) else t.__name__ for t in types)}, "
                                     f"found {json.dumps(value)[:40]}")


def exit_code(summary: dict) -> int:
    totals = summary["totals"]
    return 2 if totals["errors"] else 1 if totals["failed"] else 0


def write_outputs(summary: dict, out_dir) -> None:
    """summary.json, junit.xml and the overview; out_dir: OUT's OutputFolder or its path."""
    with held(out_dir) as folder:
        # Atomically (ccdiff/outdir.py): a CI job never reads half a summary.
        folder.write_text("summary.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
        folder.write_bytes("junit.xml", junit_xml(summary))
        # The overview too, on every run, so OUT never holds one from an earlier run; it links
        # the report pages that exist now (call write_overview again after report_failures).
        write_overview(summary, folder)


def write_overview(summary: dict, out_dir) -> Path:
    """OUT/index.html (ccdiff/report/overview.py); returns its path."""
    from .report.overview import OVERVIEW, write_overview as write
    with held(out_dir) as folder:
        folder.claim(OVERVIEW)
        return write(summary, folder.root)


def junit_xml(summary: dict) -> bytes:
    """One <testcase> per stack x scenario (classname = scenario, name = stack)."""
    by_cell = {}
    for case in summary["cases"]:
        by_cell.setdefault((case["stack"], case["scenario"]), []).append(case)
    totals = summary["totals"]
    failures = sum(1 for c in summary["cells"] if c["failed"] and not c["errors"])
    errors = sum(1 for c in summary["cells"] if c["errors"])
    suite = ET.Element("testsuite", name="ccdiff conform", tests=str(len(summary["cells"])),
                       failures=str(failures), errors=str(errors))
    for cell in summary["cells"]:
        tc = ET.SubElement(suite, "testcase", classname=f"conform.{cell['scenario']}", name=cell["stack"])
        bad = [c for c in by_cell.get((cell["stack"], cell["scenario"]), []) if c["status"] != "pass"]
        if not bad:
            continue
        lines = [f"seed {c['seed']} {c['status']}: " + "; ".join(c["reasons"][:3])
                 + (f" [trace: {c['trace']}]" if c.get("trace") else "") for c in bad]
        tag = "error" if cell["errors"] else "failure"
        el = ET.SubElement(tc, tag, message=f"{len(bad)}/{cell['runs']} seeds did not pass "
                                            f"({', '.join(sorted(cell['failure_reasons']))})")
        el.text = "\n".join(lines)
    ET.SubElement(suite, "system-out").text = (f"{totals['runs']} runs: {totals['passed']} passed, "
                                               f"{totals['failed']} failed, {totals['errors']} errors")
    ET.indent(suite)
    return ET.tostring(xml_safe(suite), encoding="utf-8", xml_declaration=True) + b"\n"


def print_summary(console, summary: dict) -> None:
    from .report_terminal import INDENT, print_wrapped
    _print_pass_rates(console, summary)
    _print_medians(console, summary)
    shown = set()
    for case in summary["cases"]:                   # the first error of each stack x scenario
        cell = (case["stack"], case["scenario"])
        if case["status"] == "error" and case.get("replay") and cell not in shown:
            shown.add(cell)
            print_wrapped(console, f"error {case['stack']} {case['scenario']} seed {case['seed']}: "
                                   f"{case['reasons'][0]}", style="bold red")
            print_wrapped(console, f"replay: {case['replay']}", first=INDENT, indent=INDENT * 2)
    t = summary["totals"]
    console.print(f"{t['runs']} runs: [green]{t['passed']} passed[/], [red]{t['failed']} failed[/], "
                  f"{t['errors']} errors")
    if t["failed"]:
        print_wrapped(console, f"of the violations, {t.get('strict_new_findings', 0)} are strict and new (new or "
                               "not checked upstream: bug reports to check); the rest are known or fixed upstream, "
                               "consequences, or on lenient traces (each finding's upstream_status in summary.json)")
    _print_own_events(console, summary.get("own_events", []))


def _print_own_events(console, rows: list) -> None:
    """conform --mode connection: what the stacks' own events showed, beside the verdicts."""
    from .report_terminal import INDENT, print_wrapped
    if not rows:
        return
    print_wrapped(console, "the stacks' own events (each run's qlog through its adapter and every invariant; "
                           "evidence of reach, not verdicts: docs/connection-mode.md):")
    for row in rows:
        rate = (f"cwnd exact {row['cwnd_agree'] / row['cwnd_compared']:.1%} of {row['cwnd_compared']:,} points"
                if row["cwnd_compared"] else "no cwnd compared")
        parts = [f"{row['judged']} run(s) judged, {rate}"]
        if row["errors"]:
            parts.append(f"{row['errors']} qlog(s) not imported (own_events.error in summary.json)")
        for key, words in (("confirmed", "its own logged window confirms"), ("adapter_only", "the adapter's only")):
            if row[key]:
                parts.append(f"{words}: " + ", ".join(f"{inv} (seeds {', '.join(map(str, seeds))})"
                                                      for inv, seeds in sorted(row[key].items())))
        print_wrapped(console, f"{row['stack']} on {row['scenario']}: " + "; ".join(parts),
                      first=INDENT, indent=INDENT * 2)


def _pass_rate_cell(c: dict) -> str:
    colour = "green" if c["passed"] == c["runs"] else "red" if c["passed"] == 0 else "yellow"
    text = f"[{colour}]{c['passed']}/{c['runs']}[/]"
    if c["errors"]:
        text += f" [bold red]E{c['errors']}[/]"
    late = c["runs"] - c["completed"]
    if late:
        text += f" [dim]({late} late)[/]"
    return text


def _print_pass_rates(console, summary: dict) -> None:
    """Stacks x scenarios.  Scenario columns are numbered, with a legend, when their names
    do not fit the console, and split over several tables when even that does not fit: a
    cut name ("death-s…") or a cut cell would leave the grid unreadable."""
    from rich.table import Table
    from .report_terminal import column_chunks, column_keys, name_column, plain_width, print_wrapped
    cells = {(c["stack"], c["scenario"]): c for c in summary["cells"]}
    stacks, scenarios = summary["stacks"], summary["scenarios"]
    text = {(label, name): _pass_rate_cell(cells[(label, name)]) for label in stacks for name in scenarios}
    modes = summary.get("modes", {})
    if modes:        # conform --mode connection: which rows are the stacks' own connections
        shown = {label: f"{label} (own connection)" if modes.get(label) == "connection" else
                 f"{label} (closed loop)" for label in stacks}
        text = {(shown[label], name): value for (label, name), value in text.items()}
        stacks = [shown[label] for label in stacks]
    cell_width = max(plain_width(t) for t in text.values())
    longest_stack = max(len(label) for label in stacks + ["stack"])
    headers, legend = column_keys(scenarios, longest_stack, cell_width, console.width)
    widths = [max(len(h), cell_width) for h in headers]
    print_wrapped(console, f"conformance: pass rate over {len(summary['seeds'])} seeds (passed/runs; "
                           "late = missed the deadline; E = errors)")
    for chunk in column_chunks(longest_stack, widths, console.width):
        table = Table()
        name_column(table, "stack", stacks)
        for i in chunk:
            table.add_column(headers[i], justify="center", min_width=widths[i])
        for label in stacks:
            table.add_row(label, *(text[(label, scenarios[i])] for i in chunk))
        console.print(table)
    if legend:
        console.print(f"scenarios:\n{legend}", markup=False, highlight=False)


def _print_medians(console, summary: dict) -> None:
    """One row per stack, grouped under a row per scenario; why a cell does not pass goes
    below the table, one wrapped line each, so invariant names are never cut."""
    from rich.table import Table
    from .report_terminal import name_column, print_wrapped
    from .units import duration
    print_wrapped(console, "per scenario and stack, medians over all seeds (in brackets: over the runs "
                           "that missed the deadline). done: runs that completed before the deadline; "
                           "time: completion time; at floor: time spent at the minimum window; "
                           "transitions: entries into and exits from recovery")
    table = Table()
    by_scenario: dict = {}
    for c in summary["cells"]:
        by_scenario.setdefault(c["scenario"], []).append(c)
    name_column(table, "scenario / stack", list(by_scenario) + [f"  {c['stack']}" for c in summary["cells"]])
    for header in ("done", "time", "at floor", "transitions"):
        table.add_column(header, justify="right")

    def median(stats, show):
        return "-" if not stats else show(stats["median"])

    def count(value):
        return f"{value:.0f}"

    for scenario, group in by_scenario.items():
        table.add_row(scenario, style="bold")
        for n, c in enumerate(group, 1):
            m, late = c["metrics"], c["metrics_late"]

            def with_late(key, show):
                return median(m[key], show) + (f" [{median(late[key], show)}]" if late[key] else "")
            table.add_row(f"  {c['stack']}", f"{c['completed']}/{c['runs']}", median(m["completion_us"], duration),
                          with_late("min_window_us", duration), with_late("recovery_transitions", count),
                          end_section=n == len(group))
    console.print(table, markup=False)
    failing = [c for c in summary["cells"] if c["failure_reasons"]]
    if failing:
        console.print("why not passing (invariant or criterion: runs):")
    for c in failing:
        print_wrapped(console, f"{c['stack']} on {c['scenario']}: {_top_reasons(c['failure_reasons'], 99)}",
                      first="  ", indent="      ")


def _top_reasons(reasons: dict, top: int = 3) -> str:
    ranked = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} {v}" for k, v in ranked[:top])
    return (text + (f" +{len(ranked) - top} more" if len(ranked) > top else "")) or "-"


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# -- the report at the end of a run ---------------------------------------------
def report_failures(summary: dict, folder, stacks: list, qlog_schema: str = "0.3", jobs: int = 1) -> list:
    """One HTML report per failing stack (OUT/report/<stack>/), from the first failing
    seed of each scenario: its closed-loop trace replayed open loop, plots, finding.md,
    qlog (qlog_schema "0.3" or "draft"), and on each finding page the impact: the stack's
    run beside the oracle's and the Reno control's own closed loops on the same scenario
    and seed (ccdiff/report/impact.py).  folder: OUT, an OutputFolder (ccdiff/outdir.py)
    or its path.  jobs: stacks whose reports are built at once, each in its own process
    (the same files as one by one).  Returns the report folders written."""
    with held(folder) as folder:
        return _report_failures(summary, folder, stacks, qlog_schema, jobs)


def _report_failures(summary: dict, folder, stacks: list, qlog_schema: str, jobs: int = 1) -> list:
    from .report.overview import OVERVIEW
    spec_of = {}
    for item in stacks:
        label, spec = split_label(item)
        spec_of[label or spec] = spec
    first: dict = {}
    for case in summary["cases"]:
        if case["status"] == "fail" and case.get("trace") and case.get("mode") != "connection":
            first.setdefault((case["stack"], case["scenario"]), case)
    plans = []
    for label in dict.fromkeys(stack for stack, _ in first):
        cases = [case for (stack, _), case in sorted(first.items()) if stack == label]
        traces = [str(folder.root / case["trace"]) for case in cases]
        # Every conform trace is called seed-N.jsonl (one folder per scenario and stack):
        # name each by its scenario and seed, so finding ids read
        # death-spiral-seed-0--quiche-0.26.0--... and never seed-0-2--...
        names = {path: f"{case['scenario']}-seed-{case['seed']}" for path, case in zip(traces, cases)}
        cells = [c for c in summary["cells"] if c["stack"] == label]
        closed_loop = {"stack": label, "passed": sum(c["passed"] for c in cells),
                       "runs": sum(c["runs"] for c in cells), "scenarios": [c["scenario"] for c in cells],
                       "seeds": len(summary["seeds"]),
                       "overview": "../../" + OVERVIEW}
        plans.append((label, spec_of.get(label, label), traces, names, closed_loop))
    from .report.impact import ClosedLoopRuns
    # The oracle's and the Reno control's own closed loops (each finding page's Impact
    # section), run once per scenario and seed for every stack's report (per process).
    _REPORTING.update(folder=folder, qlog_schema=qlog_schema, closed_loop_runs=ClosedLoopRuns())
    try:
        if jobs <= 1 or len(plans) < 2:
            done = [_stack_report(plan) for plan in plans]
        else:
            # A stack's report takes minutes for some (ddmin over long traces), seconds for
            # others: a process each, `jobs` at once.  Forked, a child sees the open folder
            # (_REPORTING); it names back what it wrote, which the parent records as this run's.
            from concurrent.futures import ProcessPoolExecutor
            with ProcessPoolExecutor(min(jobs, len(plans)), mp_context=multiprocessing.get_context("fork"),
                                     initializer=_report_child) as pool:
                done = list(pool.map(_stack_report, plans))
            for _, claimed in done:
                for rel in claimed:
                    folder.adopt(rel)
    finally:
        _REPORTING.clear()
    return [root for root, _ in done if root is not None]


_REPORTING: dict = {}    # the report being written: folder, qlog_schema, closed_loop_runs


def _report_child() -> None:
    """A report process draws its plots itself: the processes are already one per core."""
    from .report import plots
    plots.MAX_WORKERS = 1


def _stack_report(plan: tuple) -> tuple:
    """One stack's report: (its folder or None when nothing is reported, the files written)."""
    from .matrix import run_matrix
    from .report import build_report
    folder = _REPORTING["folder"]
    label, spec, traces, names, closed_loop = plan
    before = folder.written
    doc = run_matrix(traces, [spec])
    if not doc["findings"]:
        return None, []       # failed on the deadline alone: the pass-rate table says so
    part = folder.sub(f"report/{folder_name(label)}")
    build_report(doc, part, names=names, closed_loop=closed_loop, qlog_schema=_REPORTING["qlog_schema"],
                 closed_loop_runs=_REPORTING["closed_loop_runs"])
    return part.root, sorted(folder.written - before)

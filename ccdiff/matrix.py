"""`ccdiff matrix`: every trace through every stack; a stack x invariant matrix.

Cells count the traces on which a stack violated an invariant ("3") or showed
a documented deviation ("d2"); "." is clean.  The JSON form keeps every
finding with its trace.
"""
from __future__ import annotations

from .invariants import CATALOG
from .replay import finding_dicts, reachability_fields, replay
from .stacks import available
from .trace_stream import open_trace


def default_specs() -> list:
    """The oracles and every built default version (stack.toml's pins, here or in a container),
    each with its Reno alias; releases built by name and checkout builds only when named."""
    specs = []
    for row in available():
        if row["built"] and row.get("default", True):
            specs.append(row["stack"] + (f"@{row['version']}" if row["version"] else ""))
    return specs


def run_matrix(trace_paths: list, specs: list, progress=None, compare: tuple = ()) -> dict:
    """compare: (candidate, baseline) label pairs (ccdiff/baseline.py) whose snapshots are
    compared on every trace: "differences" lists each trace where they part, and where."""
    cells: dict = {}      # (stack, invariant) -> {"violation": n, "deviation": n}
    findings, errors, reach, differences = [], [], [], []
    for path in trace_paths:
        # Each trace validated, then replayed from its file: memory bounded whatever its length.
        result = replay(open_trace(path), specs, keep_snapshots=False, compare=compare)
        reach.append({"trace": path, **reachability_fields(result.trace)})
        for label, index in result.first_difference.items():
            if index is not None:
                differences.append({"stack": label, "trace": path, "event": index,
                                    "line": result.trace.line_of(index)})
        for finding, as_dict in zip(result.findings, finding_dicts(result)):
            cell = cells.setdefault((finding.stack, finding.invariant), {"violation": 0, "deviation": 0})
            cell[finding.status] += 1
            findings.append(dict(as_dict, trace=path))
        for label, run in result.runs.items():
            if run.error:
                errors.append({"stack": label, "trace": path, "error": run.error})
        if progress:
            progress(path)
    return {"traces": list(trace_paths), "stacks": list(specs),
            "invariants": [i for i in CATALOG if any(k[1] == i for k in cells)],
            "cells": [{"stack": s, "invariant": i, **v} for (s, i), v in sorted(cells.items())],
            "findings": findings, "errors": errors, "reachability": reach,
            **({"differences": differences} if compare else {})}


def print_matrix(console, matrix: dict) -> None:
    """Stacks x invariants.  Invariant columns are numbered, with a legend, when their
    names do not fit the console, and split over several tables when even that does not."""
    from rich.table import Table
    from .report_terminal import column_chunks, column_keys, name_column, print_wrapped
    invariants = matrix["invariants"]
    cells = {(c["stack"], c["invariant"]): c for c in matrix["cells"]}
    print_wrapped(console, f"conformance matrix: {len(matrix['traces'])} traces (n = traces with a "
                           "violation, dn = documented deviation)")
    text = {}
    for stack in matrix["stacks"]:
        for inv in invariants:
            cell = cells.get((stack, inv))
            text[(stack, inv)] = ("[dim].[/]" if cell is None else f"[bold red]{cell['violation']}[/]"
                                  if cell["violation"] else f"[yellow]d{cell['deviation']}[/]")
    longest_stack = max(len(s) for s in matrix["stacks"] + ["stack"])
    headers, legend = column_keys(invariants, longest_stack, 3, console.width)
    widths = [max(len(h), 3) for h in headers]
    for chunk in column_chunks(longest_stack, widths, console.width) if invariants else [[]]:
        table = Table()
        name_column(table, "stack", matrix["stacks"])
        for i in chunk:
            table.add_column(headers[i], justify="center", min_width=widths[i])
        for stack in matrix["stacks"]:
            table.add_row(stack, *(text[(stack, invariants[i])] for i in chunk))
        console.print(table)
    if legend:
        console.print(f"invariants:\n{legend}", markup=False, highlight=False)
    for error in matrix["errors"]:
        print_wrapped(console, f"error {error['stack']} on {error['trace']}: {error['error']}", style="red")

"""`ccdiff matrix`: every trace through every stack; a stack x invariant matrix.

Cells count the traces on which a stack violated an invariant ("3") or showed
a documented deviation ("d2"); "." is clean.  The JSON form keeps every
finding with its trace.
"""
from __future__ import annotations

from .invariants import CATALOG
from .replay import finding_dicts, reachability_fields, replay
from .stacks import available
from .trace import load_trace


def default_specs() -> list:
    """The oracles and every built stack version, with its Reno alias."""
    specs = []
    for row in available():
        if row["built"]:
            specs.append(row["stack"] + (f"@{row['version']}" if row["version"] else ""))
    return specs


def run_matrix(trace_paths: list, specs: list, progress=None) -> dict:
    cells: dict = {}      # (stack, invariant) -> {"violation": n, "deviation": n}
    findings, errors, reach = [], [], []
    for path in trace_paths:
        result = replay(load_trace(path), specs)
        reach.append({"trace": path, **reachability_fields(result.trace)})
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
            "findings": findings, "errors": errors, "reachability": reach}


def print_matrix(console, matrix: dict) -> None:
    from rich.table import Table
    invariants = matrix["invariants"]
    cells = {(c["stack"], c["invariant"]): c for c in matrix["cells"]}
    table = Table(title=f"conformance matrix: {len(matrix['traces'])} traces "
                        "(n = traces with a violation, dn = documented deviation)", title_justify="left")
    table.add_column("stack")
    for inv in invariants:
        # One word per line keeps a dozen invariant columns readable in 120 columns.
        table.add_column(inv.replace("-", "-\n"), justify="center")
    for stack in matrix["stacks"]:
        row = [stack]
        for inv in invariants:
            cell = cells.get((stack, inv))
            if cell is None:
                row.append("[dim].[/]")
            elif cell["violation"]:
                row.append(f"[bold red]{cell['violation']}[/]")
            else:
                row.append(f"[yellow]d{cell['deviation']}[/]")
        table.add_row(*row)
    console.print(table)
    for error in matrix["errors"]:
        console.print(f"[red]error[/] {error['stack']} on {error['trace']}: {error['error']}")

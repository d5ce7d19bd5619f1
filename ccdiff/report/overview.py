"""OUT/index.html of `ccdiff conform`: one page over the whole closed-loop run.

The pass-rate matrix (stack x scenario) from summary.json, with each cell's
median completion time and, for runs that missed the deadline, the bytes they
delivered (the impact a maintainer weighs first); every failing seed links to
its finding page under OUT/report/<stack>/ when that report has one, else to
its trace.  Only summary.json and the per-stack reports' own summary.json are
read, so the page is a pure function of the run: no timestamps, byte-identical
for the same arguments.
"""
from __future__ import annotations

import json
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from ..provenance import ccdiff_version
from ..labels import folder_name
from ..output import write_text_atomic
from ..units import duration, size

OVERVIEW = "index.html"         # OUT/index.html; conform claims it in OUT's manifest (ccdiff/outdir.py)


def _environment() -> Environment:
    # Stack labels and failure reasons come from the command line and the stacks:
    # always escaped, as in the other report pages.
    return Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True,
                       undefined=StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                       lstrip_blocks=True)


def _findings_by_trace(out: Path, label: str) -> dict:
    """case trace (relative to OUT) -> finding pages, violations first, for one stack's report.
    The report names traces as conform handed them over (OUT/traces/...), so match the
    tail; a report folder left without its summary.json has no links."""
    folder = out / "report" / folder_name(label)
    try:
        doc = json.loads((folder / "summary.json").read_text(errors="replace"))
        findings = doc["findings"] if isinstance(doc, dict) else []
    except (OSError, ValueError, KeyError):
        return {}
    pages: dict = {}
    for f in sorted((f for f in findings if isinstance(f, dict)),
                    key=lambda f: (f.get("status") != "violation", f.get("event_index", 0), str(f.get("id")))):
        trace, page = f.get("trace"), f.get("page")
        if not isinstance(trace, str) or not isinstance(page, str):
            continue
        parts = Path(trace).as_posix().split("/")
        if "traces" in parts:
            rel = "/".join(parts[len(parts) - 1 - parts[::-1].index("traces"):])
            pages.setdefault(rel, []).append({"href": f"report/{folder_name(label)}/{page}", "id": f.get("id"),
                                              "invariant": f.get("invariant"), "status": f.get("status")})
    return pages


def _seed_link(out: Path, case: dict, pages: dict) -> dict:
    """A failing seed: its first finding page if the stack's report has one and it exists,
    else its trace file, else (an error without a trace) no link."""
    found = [p for p in pages.get(case.get("trace"), []) if (out / p["href"]).is_file()]
    reasons = case.get("reasons") or [""]
    reason = reasons[0]
    if found:   # the hover text describes the linked finding, not the case's first reason (a deadline)
        first = found[0]
        detail = next((r for r in reasons if r.startswith(str(first["invariant"]))), reason)
        return {"seed": case["seed"], "href": first["href"], "kind": "finding",
                "title": f"{first['status']}: {detail}", "id": first["id"]}
    if case.get("trace") and (out / case["trace"]).is_file():
        return {"seed": case["seed"], "href": case["trace"], "kind": "trace", "title": reason, "id": None}
    return {"seed": case["seed"], "href": None, "kind": case["status"], "title": reason, "id": None}


def _median(stats) -> float | None:
    return stats["median"] if isinstance(stats, dict) else None


def overview_context(summary: dict, out: Path) -> dict:
    cells = {(c["stack"], c["scenario"]): c for c in summary["cells"]}
    by_cell: dict = {}
    for case in summary["cases"]:
        if case["status"] != "pass":
            by_cell.setdefault((case["stack"], case["scenario"]), []).append(case)
    rows = []
    for label in summary["stacks"]:
        pages = _findings_by_trace(out, label)
        report = f"report/{folder_name(label)}/index.html"
        row = {"stack": label, "report": report if (out / report).is_file() else None, "cells": []}
        for scenario in summary["scenarios"]:
            c = cells.get((label, scenario))
            if not c or not c["runs"]:
                row["cells"].append(None)
                continue
            rate = c["passed"] / c["runs"]
            late = c["runs"] - c["completed"]
            late_metrics = c.get("metrics_late", {})
            delivered, total = _median(late_metrics.get("delivered_bytes")), _median(c["metrics"].get("total_bytes"))
            row["cells"].append({
                "scenario": scenario, "passed": c["passed"], "runs": c["runs"], "errors": c["errors"],
                # three classes, each with its own symbol: colour only helps
                "class": "pass-all" if rate == 1 else "pass-none" if c["passed"] == 0 else "pass-some",
                "percent": f"{rate:.0%}", "completed": c["completed"], "late": late,
                "completion": duration(_median(c["metrics"]["completion_us"])),
                "delivered": size(delivered) if delivered is not None else None,
                "total": size(total) if total is not None else None,
                "seeds": [_seed_link(out, case, pages) for case in by_cell.get((label, scenario), [])],
            })
        rows.append(row)
    return {"summary": summary, "rows": rows, "version": ccdiff_version()}


def write_overview(summary: dict, out_dir) -> Path:
    """Write OUT/index.html (atomically, like summary.json); returns its path."""
    out = Path(out_dir)
    page = _environment().get_template("conform.html").render(**overview_context(summary, out))
    write_text_atomic(out / OVERVIEW, page)
    return out / OVERVIEW

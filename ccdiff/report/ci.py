"""junit.xml and summary.json: the report for CI systems.

Stable and sorted: one JUnit test case per (stack, trace, invariant) in
catalog order, so the same findings give byte-identical files.  A violation
is a <failure>, a stack that errored on a trace is an <error>, a documented
deviation passes with the deviation in <system-out>.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from ..output import xml_safe
from ..provenance import ccdiff_version
from ..invariants import CATALOG
from . import causes


def summary(runs, views) -> dict:
    stacks = runs[0].stacks if runs else []
    per_stack = {}
    for label in stacks:
        failing = {v.trace_path for v in views if v.label == label and v.finding.status == "violation"}
        errored = {r.path for r in runs if r.result.runs[label].error}
        per_stack[label] = {
            "traces": len(runs),
            "passed": sum(1 for r in runs if r.path not in failing and r.path not in errored),
            "violations": sum(1 for v in views if v.label == label and v.finding.status == "violation"),
            "deviations": sum(1 for v in views if v.label == label and v.finding.status == "deviation"),
            "errors": len(errored),
        }
    return {
        "ccdiff_report": 1,
        "ccdiff_version": ccdiff_version(),
        "traces": [r.path for r in runs],
        "stacks": list(stacks),
        "totals": {"findings": len(views),
                   "violations": sum(1 for v in views if v.finding.status == "violation"),
                   "deviations": sum(1 for v in views if v.finding.status == "deviation"),
                   **causes.totals(views)},
        "per_stack": per_stack,
        # report: the finding.md that reports it (its root cause's primary page); role:
        # primary / occurrence / consequence ("" for a deviation), report/causes.py.
        "findings": [dict(v.finding.to_dict(), id=v.id, trace=v.trace_path,
                          page=f"findings/{v.id}/index.html",
                          report=f"findings/{causes.report_id(v)}/finding.md", role=causes.role(v),
                          root_cause=causes.report_id(v) if v.finding.status == "violation" else "")
                     for v in sorted(views, key=lambda v: v.id)],
    }


def summary_text(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def junit_bytes(runs, views) -> bytes:
    by_key = {(v.label, v.trace_path, v.finding.invariant): v for v in views}
    root = ET.Element("testsuites", name="ccdiff")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for label in (runs[0].stacks if runs else []):
        suite = ET.SubElement(root, "testsuite", name=label)
        counts = {"tests": 0, "failures": 0, "errors": 0}
        for run in sorted(runs, key=lambda r: r.path):
            error = run.result.runs[label].error
            for inv in CATALOG:
                case = ET.SubElement(suite, "testcase", classname=f"{label}.{run.path}", name=inv)
                counts["tests"] += 1
                view = by_key.get((label, run.path, inv))
                if inv == "adapter-error" and error:
                    ET.SubElement(case, "error", message=error).text = error
                    counts["errors"] += 1
                elif view is not None and view.finding.status == "violation":
                    f = view.finding
                    ET.SubElement(case, "failure", message=f"{inv} at event {f.event_index} (line {f.line}, "
                                  f"t={f.t_us} us), x{f.count}", type=inv).text = \
                        f"{f.detail}\nreport: findings/{causes.report_id(view)}/finding.md"
                    counts["failures"] += 1
                elif view is not None:
                    ET.SubElement(case, "system-out").text = f"documented deviation: {view.finding.detail}"
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(xml_safe(root), encoding="utf-8", xml_declaration=True) + b"\n"

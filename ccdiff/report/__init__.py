"""Reports: HTML matrix and finding pages, Markdown bug reports, qlog, JUnit (docs/reports.md)."""
from __future__ import annotations


def build_report(doc, out, base="."):
    """Write a report folder from a findings document (the JSON of `ccdiff replay/matrix --json`)."""
    from pathlib import Path
    from .build import build_report as _build
    return _build(doc, Path(out), Path(base))


def report_from_file(path, out):
    from .build import report_from_file as _from_file
    return _from_file(path, out)

"""Reports: HTML matrix and finding pages, Markdown bug reports, qlog, JUnit (docs/reports.md)."""
from __future__ import annotations

from pathlib import Path

from ..errors import SetupError


def _builder():
    try:
        from . import build
    except ImportError as exc:   # a clean machine without the report dependencies
        raise SetupError(f"ccdiff report needs Jinja2 and matplotlib ({exc}); run: "
                         "pip install 'Jinja2>=3.1' 'matplotlib>=3.7'") from None
    return build


def build_report(doc, out, base=".", **options):
    """Write a report folder from a findings document (the JSON of `ccdiff replay/matrix --json`);
    options: names, closed_loop, qlog_schema ("0.3" for qvis, the default, or "draft";
    ccdiff/report/build.py and qlog.py).  out: a folder, or a part of an open OutputFolder."""
    return _builder().build_report(doc, out if hasattr(out, "claim") else Path(out), Path(base), **options)


def report_from_file(path, out, qlog_schema="0.3"):
    return _builder().report_from_file(path, out, qlog_schema)

"""The end of a fuzz run, `ccdiff fuzz` and `ccdiff fuzz triage` alike: every stored finding
judged (verdicts.py), the summary and exit code, and the HTML report of the folder."""
from __future__ import annotations

import sys

from ..errors import SetupError
from .triage import folder_lock
from .verdicts import record, summarize, verdicts


def require_built(target) -> None:
    """The ordinary library triage replays through: a release is built if missing or stale;
    a checkout must have been built with `ccdiff build STACK --source DIR`."""
    from ..build import ensure_built, is_checkout_version
    if is_checkout_version(target.version):
        if not target.recipe.library(target.version).exists():
            raise SetupError(f"{target.label}: not built; build the checkout first with "
                             f"`ccdiff build {target.recipe.name} --source DIR` (it is named after it)")
        return
    ensure_built(target)


def conclude(triage, new: list, args) -> int:
    """Every stored finding's verdict (fuzzing/verdicts.py) into its finding.json and the
    summary, the report, and the exit code: 1 only for a strict bug report.  Workers on one
    findings folder finish together: one concludes at a time (triage.folder_lock), from what
    is stored on disk by then, while no other replaces a finding it is replaying."""
    with folder_lock(triage.folder):
        triage.reload()
        new = [triage.stored.get(stored.signature.key, stored) for stored in new]   # as stored now
        found = verdicts(triage)
        record(triage, found)
        code = summarize(triage, found, new)
        if triage.stored and not args.no_report:
            _write_report(triage, args.qlog_schema)
    return code


def write_report(triage, qlog_schema: str = "0.3") -> None:
    """Every stored reproducer of this stack in one HTML report (docs/reports.md), so the
    last worker's report holds every worker's findings."""
    with folder_lock(triage.folder):
        _write_report(triage, qlog_schema)


def _write_report(triage, qlog_schema: str) -> None:
    import contextlib
    import shutil
    from ..isolation import isolated
    from ..matrix import run_matrix
    from ..report import build_report
    traces = sorted(str(path) for path in triage.folder.glob("[!.]*/reproducer.jsonl"))
    # A stored native crash would crash this process again: its replays (the matrix and
    # the report's own) then go through an isolated adapter, where the crash is the
    # stack's adapter-error finding.
    crashes = any(triage.folder.glob("native-crash--*/reproducer.jsonl"))
    with isolated() if crashes else contextlib.nullcontext():
        doc = run_matrix(traces, [triage.spec])
        if doc["findings"]:
            folder = triage.folder / "report"
            if folder.exists():
                shutil.rmtree(folder)
            build_report(doc, folder, qlog_schema=qlog_schema)
            print(f"report: {folder / 'index.html'}", file=sys.stderr)


__all__ = ["conclude", "require_built", "write_report"]

"""Read a findings document and replay its traces to get the snapshots back.

A findings document is what `ccdiff replay --json` or `ccdiff matrix --json`
writes.  It keeps findings, not snapshots: replay is deterministic, so the
report re-runs each trace on the same stack specs (plus the reference oracle
the stacks were compared with) and checks that the re-run reproduces the
stored findings exactly -- a changed trace or stack is an error, not a
silently different report.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SetupError
from ..output import read_json_input
from ..ledger import Ledger
from ..replay import REFERENCE, replay
from ..stacks import load_recipes, resolve
from ..trace_stream import load_any


@dataclass
class TraceRun:
    """One trace replayed on every stack of the document."""
    path: str                 # as written in the findings document
    file: Path                # where it was found
    trace: object             # ccdiff.trace.Trace
    result: object            # ReplayResult, with the reference oracles visible
    resolved: list            # ledger-resolved events (RTT values for qlog)
    stacks: list              # labels of the document's stacks, in order
    findings: list = field(default_factory=list)   # Finding of the document's stacks
    lines: list = field(default_factory=list)      # the trace file's text lines (line 1 = header)


def read_document(path: str) -> dict:
    doc = read_json_input(path, "findings document")
    if not isinstance(doc, dict) or not isinstance(doc.get("findings"), list) or \
            not ("trace" in doc or "traces" in doc):
        raise SetupError(f"{path}: not a findings document (expected the JSON written by "
                         "`ccdiff replay --json` or `ccdiff matrix --json`)")
    return doc


def trace_plan(doc: dict) -> tuple[list, list]:
    """(trace paths, stack specs) of a replay or a matrix document."""
    if "traces" in doc:                       # ccdiff matrix --json
        traces, specs = doc["traces"], doc.get("stacks")
    else:                                     # ccdiff replay --json
        traces = [doc["trace"]]
        specs = doc.get("specs") or [s.get("stack") for s in doc.get("stacks", [])]
    if not (isinstance(traces, list) and traces and all(isinstance(t, str) for t in traces)):
        raise SetupError("findings document names no trace files")
    if not (isinstance(specs, list) and specs and all(isinstance(s, str) for s in specs)):
        raise SetupError("findings document names no stacks")
    return traces, specs


def find_trace(path: str, base: Path) -> Path:
    candidate = Path(path)
    for option in (candidate, base / candidate):
        if option.is_file():
            return option
    raise SetupError(f"trace {path} from the findings document not found (looked in the current "
                     f"folder and in {base})")


def _key(f: dict) -> tuple:
    return (f["stack"], f["invariant"], f["status"], f["event_index"], f["count"])


def load_runs(doc: dict, base: Path) -> list[TraceRun]:
    traces, specs = trace_plan(doc)
    recipes = load_recipes()
    targets = [resolve(spec, recipes) for spec in specs]
    labels = [t.label for t in targets]
    refs = sorted({REFERENCE[t.family] for t in targets if t.kind == "native"} - set(labels))
    stored = {}
    for f in doc["findings"]:
        try:
            stored.setdefault(f.get("trace", traces[0]), []).append(_key(f))
        except (KeyError, TypeError, AttributeError):
            raise SetupError(f"malformed finding in the findings document: {f!r:.200}") from None
    runs = []
    for path in traces:
        file = find_trace(path, base)
        trace = load_any(str(file))   # a trace, or a qlog (ccdiff replay took it directly)
        result = replay(trace, specs + refs)
        mine = [f for f in result.findings if f.stack in labels]
        again = sorted(_key(f.to_dict()) for f in mine)
        if again != sorted(stored.get(path, [])):
            raise SetupError(f"replaying {path} on {', '.join(labels)} does not reproduce the findings "
                             "in the document: the trace or a stack changed since it was written; "
                             "re-run ccdiff replay/matrix")
        ledger = Ledger(trace.header)
        resolved = [ledger.resolve(ev) for ev in trace.events]
        lines = file.read_text().splitlines()
        runs.append(TraceRun(path, file, trace, result, resolved, labels, mine, lines))
    return runs

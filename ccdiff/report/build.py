"""`ccdiff report`: a findings document -> a folder of HTML, Markdown, qlog, JUnit.

Layout (docs/reports.md):

    index.html                   the stack x invariant matrix, every finding listed
    summary.json, junit.xml      for CI systems
    traces/<trace>.jsonl         copies of the traces that have findings
    qlog/<trace>/<stack>.sqlog   the stack's and the oracle's runs, JSON-SEQ qlog
    plots/<trace>/<stack>.png    each run a finding comes from, over time, findings marked
    findings/<id>/index.html     one page per finding (+ window.png, a zoom, for long runs)
    findings/<id>/finding.md     the upstream bug report
"""
from __future__ import annotations

import re
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from ..errors import SetupError
from ..outdir import OutputFolder
from ..provenance import ccdiff_version
from ..invariants import CATALOG
from ..stacks import load_recipes, resolve
from . import causes, ci, qlog
from .context import FindingView, describe, reference_of, slug
from .impact import ClosedLoopRuns, impact
from .load import load_runs, read_document
from .plots import draw_all, run_job, window_job

def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                      # Everything from a trace or a stack is untrusted: HTML is always escaped.
                      autoescape=lambda name: bool(name) and name.endswith(".html"),
                      undefined=StrictUndefined, keep_trailing_newline=True,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["md_code"] = md_code
    env.filters["md_fence"] = md_fence
    env.filters["md_pieces"] = md_pieces
    env.filters["html_pieces"] = html_pieces
    env.filters["ms"] = lambda us: "-" if us is None else f"{us / 1000:g} ms"
    return env


def md_code(text) -> str:
    """Inline Markdown code span that no backtick inside the text can close early."""
    text = str(text).replace("\n", " ")
    run = max((len(r) for r in _backtick_runs(text)), default=0)
    fence = "`" * (run + 1)
    return f"{fence} {text} {fence}" if run else f"`{text}`"


def _backtick_runs(text: str) -> list:
    runs, current = [], ""
    for ch in text:
        if ch == "`":
            current += ch
        elif current:
            runs.append(current)
            current = ""
    return runs + ([current] if current else [])


def md_pieces(pieces) -> str:
    """Text with permalinks (ccdiff/provenance.py link_code) as Markdown: links as
    [`cubic.rs:151-176`](url), the prose between them as text that cannot open markup."""
    return "".join(f"[{md_code(p['text'])}]({p['url']})" if p["url"] else
                   re.sub(r"([\\`*\[\]<>|])", r"\\\1", p["text"]) for p in pieces)


def html_pieces(pieces) -> Markup:
    """The same as HTML: every text escaped, links as <a href>."""
    return Markup("").join(Markup('<a href="{}">{}</a>').format(p["url"], p["text"]) if p["url"]
                           else escape(p["text"]) for p in pieces)


def md_fence(text: str, info: str = "") -> str:
    """A fenced code block longer than any backtick run in the text."""
    run = max((len(r) for r in _backtick_runs(text)), default=0)
    fence = "`" * max(3, run + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def _views(runs, names: dict | None = None) -> list:
    recipes = load_recipes()
    targets = {}
    views, used = [], set()
    trace_slugs = _trace_slugs(runs, names)
    for run in runs:
        for finding in run.findings:
            target = targets.setdefault(finding.stack, resolve(finding.stack, recipes))
            base = f"{trace_slugs[run.path]}--{slug(finding.stack)}--{finding.invariant}"
            fid, n = base, 2
            while fid in used:
                fid, n = f"{base}-{n}", n + 1
            used.add(fid)
            views.append(FindingView(fid, finding, run, finding.stack, target, reference_of(target),
                                     CATALOG[finding.invariant]))
    for view in views:
        view.siblings = [v for v in views if v.run is view.run and v.label == view.label and v is not view]
    causes.assign(views)
    return views


def _trace_slugs(runs, names: dict | None = None) -> dict:
    """A file-name-safe, unique name per trace: the file's stem, or names[path] when the
    caller knows better (conform's traces are all called seed-N.jsonl, one folder per
    scenario; without the scenario, ids came out as seed-0-2--... and lost it)."""
    out, used = {}, set()
    names = names or {}
    for run in runs:
        base = slug(names.get(run.path) or Path(run.path).stem)
        name, n = base, 2
        while name in used:
            name, n = f"{base}-{n}", n + 1
        used.add(name)
        out[run.path] = name
    return out


def _write_qlogs(dest, runs, views, trace_slugs, schema: str = qlog.DEFAULT_SCHEMA) -> dict:
    """qlog of every run a finding comes from, and of its reference oracle: (trace, label) -> path.
    schema: "0.3" (what qvis plots) or "draft" (ccdiff/report/qlog.py)."""
    wanted = sorted({(v.run.path, v.label) for v in views} |
                    {(v.run.path, v.reference) for v in views if v.reference})
    by_path = {r.path: r for r in runs}
    written = {}
    for path, label in wanted:
        run = by_path[path]
        rel = f"qlog/{trace_slugs[path]}/{slug(label)}.sqlog"
        file = dest.claim(rel)
        title = f"ccdiff replay of {path} on {label}"
        header = qlog.header_record(title, f"trace {run.trace.header.name or path}: "
                                    f"{run.trace.header.comment}".strip(), f"ccdiff {ccdiff_version()}: {label}",
                                    schema)
        stack_run = run.result.runs[label]
        parameters = qlog.recovery_parameters(run.trace, run.resolved, stack_run.snapshots,
                                              stack_run.target.family, stack_run.profile.min_window_datagrams)
        qlog.write_sqlog(file, header, qlog.records_by_event(run.trace, run.resolved, stack_run.snapshots,
                                                              schema, parameters))
        written[(path, label)] = rel
    return written


def build_report(doc: dict, out, base: Path = Path("."), names: dict | None = None,
                 closed_loop: dict | None = None, qlog_schema: str = qlog.DEFAULT_SCHEMA,
                 closed_loop_runs: ClosedLoopRuns | None = None, inputs=()) -> dict:
    """Write the report folder; returns summary.json's content.

    out: a folder path, or a part of an OutputFolder a caller holds (conform's
    report/<stack>/): every file goes through ccdiff/outdir.py, so a report never
    overwrites or deletes what ccdiff did not write, nor its own inputs (the traces it
    replays, `inputs`: the findings document).  names: trace path -> the name its finding
    ids, plots and qlog folders use (default: the file's stem).  closed_loop: set by
    `ccdiff conform`, whose traces are failing seeds of a closed-loop run of one stack:
    {"stack", "passed", "runs", "seeds", "scenarios", "overview"} -- the page then says so,
    counts in seeds and links back to the overview.  qlog_schema: "0.3" (what qvis reads,
    the default) or "draft" (ccdiff/report/qlog.py).  closed_loop_runs: the oracle's and the
    Reno control's own closed-loop runs, shared by several builds (conform's per-stack
    reports); a build keeps its own otherwise.  A finding on a closed-loop trace ("SCENARIO
    seed=N") gets an Impact section and those runs' cwnd in its plots
    (ccdiff/report/impact.py)."""
    qlog.check_schema(qlog_schema)
    if hasattr(out, "claim"):
        return _build(doc, out, base, names, closed_loop, qlog_schema, closed_loop_runs)
    from .load import find_trace, trace_plan
    traces = []
    for path in trace_plan(doc)[0]:
        try:
            traces.append(find_trace(path, base))
        except SetupError:   # load_runs says what is missing, with the fix
            continue
    with OutputFolder(out, "--report/--out", inputs=[*traces, *inputs]) as folder:
        data = _build(doc, folder, base, names, closed_loop, qlog_schema, closed_loop_runs)
        folder.finish()
    return data


def _build(doc, dest, base, names, closed_loop, qlog_schema, closed_loop_runs) -> dict:
    runs = load_runs(doc, base)
    views = _views(runs, names)
    trace_slugs = _trace_slugs(runs, names)
    env = _environment()
    traces_out = {}
    for run in runs:
        if any(v.run is run for v in views):
            rel = f"traces/{trace_slugs[run.path]}.jsonl"
            dest.copy_file(run.file, rel)
            traces_out[run.path] = rel
    qlogs = _write_qlogs(dest, runs, views, trace_slugs, qlog_schema)
    closed_loop_runs = closed_loop_runs if closed_loop_runs is not None else ClosedLoopRuns()
    impacts = {id(view): impact(view, closed_loop_runs) for view in views}
    timelines, jobs = {}, []
    for view in views:     # one plot per run, shared by that run's findings
        key = (view.trace_path, view.label)
        if key not in timelines:
            rel = f"plots/{trace_slugs[view.trace_path]}/{slug(view.label)}.png"
            jobs.append(run_job(dest.claim(rel), [view] + view.siblings, impacts[id(view)].get("series", ())))
            timelines[key] = rel
    finding_tpl, md_tpl = env.get_template("finding.html"), env.get_template("finding.md")
    for view in views:
        folder = f"findings/{view.id}"
        ctx = describe(view, impact_of=impacts[id(view)])
        plots = [{"file": "../../" + timelines[(view.trace_path, view.label)], "caption": "the whole run"}]
        zoom = window_job(dest.root / folder, view, impacts[id(view)].get("series", ()))
        if zoom:
            dest.claim(f"{folder}/window.png")
            jobs.append(zoom[0])
            plots.append(zoom[1])
        ctx.update(plots=plots, trace_file=traces_out[view.trace_path],
                   qlog_stack=qlogs[(view.trace_path, view.label)],
                   qlog_oracle=qlogs.get((view.trace_path, view.reference)), version=ccdiff_version())
        dest.write_text(f"{folder}/index.html", finding_tpl.render(root="../../", **ctx))
        dest.write_text(f"{folder}/finding.md", md_tpl.render(**ctx))
    draw_all(jobs)
    data = ci.summary(runs, views)
    dest.write_text("index.html", env.get_template("index.html").render(
        root="", matrix=_matrix(runs, views), summary=data, causes=causes.totals(views), runs=runs, version=ccdiff_version(),
        closed_loop=closed_loop, conform_overview=None if closed_loop else sibling_overview(dest.root)))
    dest.write_bytes("junit.xml", ci.junit_bytes(runs, views))
    # Last: a summary.json beside the pages says the report is whole.
    dest.write_text("summary.json", ci.summary_text(data))
    return data


def sibling_overview(out: Path) -> str | None:
    """`make run` writes the examples' report to reports/html and conform to reports/conform:
    when a conform overview sits beside the report folder, the report links it (relative, so
    the pair can be moved or served together by `ccdiff serve-reports reports`)."""
    return "../conform/index.html" if (Path(out).parent / "conform" / "index.html").is_file() else None


def _matrix(runs, views) -> dict:
    stacks = runs[0].stacks if runs else []
    cells = {}
    for view in views:
        cells.setdefault((view.label, view.finding.invariant), []).append(view)
    invariants = [inv for inv in CATALOG if any(k[1] == inv for k in cells)]
    rows = []
    for label in stacks:
        row = []
        for inv in invariants:
            found = cells.get((label, inv), [])
            bad = [v for v in found if v.finding.status == "violation"]
            row.append({"invariant": inv, "views": found, "violations": len(bad),
                        "deviations": len(found) - len(bad), "anchor": f"cell-{slug(label)}--{inv}"})
        errors = [r.path for r in runs if r.result.runs[label].error]
        failing = {v.trace_path for v in views if v.label == label and v.finding.status == "violation"}
        passed = sum(1 for r in runs if r.path not in failing and r.path not in errors)
        rows.append({"stack": label, "cells": row, "passed": passed, "total": len(runs), "errors": errors})
    return {"invariants": [CATALOG[i] for i in invariants], "rows": rows,
            "groups": [(f"cell-{slug(k[0])}--{k[1]}", k, v) for k, v in sorted(cells.items())]}


def report_from_file(path: str, out: str, qlog_schema: str = qlog.DEFAULT_SCHEMA) -> dict:
    return build_report(read_document(path), Path(out), base=Path(path).resolve().parent,
                        qlog_schema=qlog_schema, inputs=[path])

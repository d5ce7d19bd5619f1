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
import shutil
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from ..errors import SetupError
from ..provenance import ccdiff_version
from ..invariants import CATALOG
from ..stacks import load_recipes, resolve
from . import ci, qlog
from .context import FindingView, describe, reference_of, slug
from .impact import ClosedLoopRuns, impact
from .load import load_runs, read_document
from .plots import draw_all, run_job, window_job

OWNED = ("findings", "plots", "qlog", "traces", "index.html", "summary.json", "junit.xml")


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


def _prepare_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise SetupError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / "summary.json").is_file() or b'"ccdiff_report"' not in (out / "summary.json").read_bytes():
            raise SetupError(f"--out {out}: folder is not empty and holds no earlier ccdiff report; "
                             "choose an empty or new folder")
        for name in OWNED:   # an earlier report: replace it whole, no stale pages
            path = out / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    out.mkdir(parents=True, exist_ok=True)


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


def _write_qlogs(out: Path, runs, views, trace_slugs, schema: str = qlog.DEFAULT_SCHEMA) -> dict:
    """qlog of every run a finding comes from, and of its reference oracle: (trace, label) -> path.
    schema: "0.3" (what qvis plots) or "draft" (ccdiff/report/qlog.py)."""
    wanted = sorted({(v.run.path, v.label) for v in views} |
                    {(v.run.path, v.reference) for v in views if v.reference})
    by_path = {r.path: r for r in runs}
    written = {}
    for path, label in wanted:
        run = by_path[path]
        folder = out / "qlog" / trace_slugs[path]
        folder.mkdir(parents=True, exist_ok=True)
        file = folder / f"{slug(label)}.sqlog"
        title = f"ccdiff replay of {path} on {label}"
        header = qlog.header_record(title, f"trace {run.trace.header.name or path}: "
                                    f"{run.trace.header.comment}".strip(), f"ccdiff {ccdiff_version()}: {label}",
                                    schema)
        stack_run = run.result.runs[label]
        parameters = qlog.recovery_parameters(run.trace, run.resolved, stack_run.snapshots,
                                              stack_run.target.family, stack_run.profile.min_window_datagrams)
        qlog.write_sqlog(file, header, qlog.records_by_event(run.trace, run.resolved, stack_run.snapshots,
                                                              schema, parameters))
        written[(path, label)] = file.relative_to(out).as_posix()
    return written


def build_report(doc: dict, out: Path, base: Path = Path("."), names: dict | None = None,
                 closed_loop: dict | None = None, qlog_schema: str = qlog.DEFAULT_SCHEMA,
                 closed_loop_runs: ClosedLoopRuns | None = None) -> dict:
    """Write the report folder; returns summary.json's content.

    names: trace path -> the name its finding ids, plots and qlog folders use (default:
    the file's stem).  closed_loop: set by `ccdiff conform`, whose traces are failing seeds
    of a closed-loop run of one stack: {"stack", "passed", "runs", "seeds", "scenarios",
    "overview"} -- the page then says so, counts in seeds and links back to the overview.
    qlog_schema: "0.3" (what qvis reads, the default) or "draft" (ccdiff/report/qlog.py).
    closed_loop_runs: the oracle's and the Reno control's own closed-loop runs, shared by
    several builds (conform's per-stack reports); a build keeps its own otherwise.  A finding
    on a closed-loop trace ("SCENARIO seed=N") gets an Impact section and those runs' cwnd
    in its plots (ccdiff/report/impact.py)."""
    qlog.check_schema(qlog_schema)
    runs = load_runs(doc, base)
    out = Path(out)
    _prepare_out(out)
    views = _views(runs, names)
    trace_slugs = _trace_slugs(runs, names)
    env = _environment()
    traces_out = {}
    for run in runs:
        if any(v.run is run for v in views):
            (out / "traces").mkdir(exist_ok=True)
            dest = out / "traces" / f"{trace_slugs[run.path]}.jsonl"
            shutil.copyfile(run.file, dest)
            traces_out[run.path] = dest.relative_to(out).as_posix()
    qlogs = _write_qlogs(out, runs, views, trace_slugs, qlog_schema)
    closed_loop_runs = closed_loop_runs if closed_loop_runs is not None else ClosedLoopRuns()
    impacts = {id(view): impact(view, closed_loop_runs) for view in views}
    timelines, jobs = {}, []
    for view in views:     # one plot per run, shared by that run's findings
        key = (view.trace_path, view.label)
        if key not in timelines:
            file = out / "plots" / trace_slugs[view.trace_path] / f"{slug(view.label)}.png"
            file.parent.mkdir(parents=True, exist_ok=True)
            jobs.append(run_job(file, [view] + view.siblings, impacts[id(view)].get("series", ())))
            timelines[key] = file.relative_to(out).as_posix()
    finding_tpl, md_tpl = env.get_template("finding.html"), env.get_template("finding.md")
    for view in views:
        folder = out / "findings" / view.id
        folder.mkdir(parents=True)
        ctx = describe(view, impact_of=impacts[id(view)])
        plots = [{"file": "../../" + timelines[(view.trace_path, view.label)], "caption": "the whole run"}]
        zoom = window_job(folder, view, impacts[id(view)].get("series", ()))
        if zoom:
            jobs.append(zoom[0])
            plots.append(zoom[1])
        ctx.update(plots=plots, trace_file=traces_out[view.trace_path],
                   qlog_stack=qlogs[(view.trace_path, view.label)],
                   qlog_oracle=qlogs.get((view.trace_path, view.reference)), version=ccdiff_version())
        (folder / "index.html").write_text(finding_tpl.render(root="../../", **ctx))
        (folder / "finding.md").write_text(md_tpl.render(**ctx))
    draw_all(jobs)
    data = ci.summary(runs, views)
    ci.write_summary(out / "summary.json", data)
    ci.write_junit(out / "junit.xml", runs, views)
    (out / "index.html").write_text(env.get_template("index.html").render(
        root="", matrix=_matrix(runs, views), summary=data, runs=runs, version=ccdiff_version(),
        closed_loop=closed_loop, conform_overview=None if closed_loop else sibling_overview(out)))
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
                        qlog_schema=qlog_schema)

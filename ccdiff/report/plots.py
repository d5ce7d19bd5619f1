"""Per-finding plots: the stack and its reference oracle over time, violation marked.

matplotlib with the Agg backend, PNG with the Software/date metadata removed,
so the same input gives byte-identical files (tested).  The styles differ by
line style and marker as well as colour, so the plots read in grayscale.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from ..snapshot import PHASES  # noqa: E402

# Titles and legends carry user-chosen names (trace paths, stack labels): a `$...$` in one
# is text, not mathtext (which raised on `$\\x$` and stopped the report).
plt.rcParams["text.parse_math"] = False

STACK_STYLE = dict(color="#b2182b", linestyle="-", linewidth=1.6)
ORACLE_STYLE = dict(color="#2166ac", linestyle="--", linewidth=1.4)
PNG_METADATA = {"Software": None}   # no version/date stamp: deterministic bytes
WINDOW_EVENTS = 60                  # runs longer than 4x this get a zoomed plot too
WINDOW_INSTANTS = (40, 20)          # distinct event times shown before / after the violation


def _series(snapshots, name, lo, hi, scale=1.0):
    out = []
    for snap in snapshots[lo:hi]:
        value = getattr(snap, name)
        out.append(value / scale if isinstance(value, (int, float)) and scale != 1.0 else value)
    return out


def _plot_pair(ax, xs, mine, theirs, label, stack, oracle):
    ax.step(xs, [float("nan") if v is None else v for v in mine], where="post",
            label=f"{stack} {label}", **STACK_STYLE)
    if theirs is not None:
        ax.step(xs, [float("nan") if v is None else v for v in theirs], where="post",
                label=f"{oracle} {label}", **ORACLE_STYLE)


@dataclass
class PlotJob:
    """Plain data for one PNG, so plots can be drawn in worker processes."""
    path: str
    title: str
    stack: str
    oracle: str
    times_us: list
    stack_snaps: list
    oracle_snaps: list | None
    marks: list            # (t_us, invariant, event_index)


def job_for(path, view, marks, lo: int = 0, hi: int | None = None) -> PlotJob:
    """Events lo..hi-1 of the finding's run; marks: the findings to draw."""
    stack_snaps = view.stack_run.snapshots
    oracle_snaps = view.oracle_run.snapshots if view.oracle_run else None
    hi = min(hi if hi is not None else len(stack_snaps), len(stack_snaps))
    return PlotJob(str(path), f"{view.label} vs {view.reference or 'no oracle'} — {view.trace_path}",
                   view.label, view.reference or "", [ev.t for ev in view.run.trace.events[lo:hi]],
                   stack_snaps[lo:hi], oracle_snaps[lo:hi] if oracle_snaps else None,
                   [(f.t_us, f.invariant, f.event_index) for f in marks])


def plot_run(job: PlotJob) -> None:
    stack_snaps, oracle_snaps = job.stack_snaps, job.oracle_snaps
    lo, hi = 0, len(stack_snaps)
    xs = [t / 1000 for t in job.times_us]
    stack, oracle = job.stack, job.oracle

    def both(name, scale=1.0):
        return (_series(stack_snaps, name, lo, hi, scale),
                _series(oracle_snaps, name, lo, hi, scale) if oracle_snaps else None)

    with plt.rc_context({"font.size": 8, "axes.grid": True, "grid.alpha": 0.3,
                         "svg.hashsalt": "ccdiff", "path.simplify": True}):
        fig, axes = plt.subplots(4, 1, figsize=(9, 8.4), sharex=True, dpi=100,
                                 gridspec_kw={"height_ratios": [3, 1.4, 1.1, 2]})
        ax = axes[0]
        _plot_pair(ax, xs, *both("cwnd"), "cwnd", stack, oracle)
        mine, theirs = both("ssthresh")
        ax.step(xs, [float("nan") if v is None else v for v in mine], where="post", color="#b2182b",
                linestyle=":", linewidth=1.2, label=f"{stack} ssthresh")
        if theirs is not None:
            ax.step(xs, [float("nan") if v is None else v for v in theirs], where="post",
                    color="#2166ac", linestyle="-.", linewidth=1.0, label=f"{oracle} ssthresh")
        ax.set_ylabel("bytes")
        ax.set_title(job.title, fontsize=9)
        ax.legend(loc="upper left", fontsize=7, ncol=2)

        ax = axes[1]
        _plot_pair(ax, xs, *both("bytes_in_flight"), "bytes in flight", stack, oracle)
        ax.set_ylabel("in flight")
        ax.legend(loc="upper left", fontsize=7, ncol=2)

        ax = axes[2]
        mine, theirs = both("phase")
        code = {p: i for i, p in enumerate(PHASES)}
        _plot_pair(ax, xs, [code.get(p, 0) for p in mine],
                   [code.get(p, 0) + 0.08 for p in theirs] if theirs else None, "phase", stack, oracle)
        ax.set_yticks(range(len(PHASES)), [p.replace("_", " ") for p in PHASES], fontsize=6)
        ax.set_ylim(-0.5, len(PHASES) - 0.5)

        ax = axes[3]
        for name, marker in (("recovery_start_us", "o"), ("epoch_start_us", "x")):
            mine, theirs = both(name, 1000.0)
            short = name.split("_")[0]
            ax.plot(xs, [float("nan") if v is None else v for v in mine], linestyle="none", marker=marker,
                    markersize=3.5, color="#b2182b", label=f"{stack} {short} start")
            if theirs is not None:
                ax.plot(xs, [float("nan") if v is None else v for v in theirs], linestyle="none",
                        marker="+" if marker == "x" else "s", markersize=3.5, markerfacecolor="none",
                        color="#2166ac", label=f"{oracle} {short} start")
        if xs:
            ax.plot([xs[0], xs[-1]], [xs[0], xs[-1]], color="black", linewidth=0.8, linestyle="-",
                    label="now (above = in the future)")
        ax.set_ylabel("start time (ms)")
        ax.set_xlabel("trace time (ms)")
        ax.legend(loc="upper left", fontsize=7, ncol=3)

        for n, (t_us, invariant, event_index) in enumerate(job.marks):
            t_mark = t_us / 1000
            for ax in axes:
                ax.axvline(t_mark, color="black", linestyle=(0, (4, 2, 1, 2)), linewidth=1.2)
            right_half = bool(xs) and t_mark > (xs[0] + xs[-1]) / 2
            axes[0].annotate(f"{invariant} (event {event_index})",
                             xy=(t_mark, 0.55 - 0.12 * n), xycoords=("data", "axes fraction"),
                             xytext=(-6 if right_half else 6, 0), textcoords="offset points", fontsize=7,
                             ha="right" if right_half else "left",
                             bbox=dict(boxstyle="round", fc="white", ec="black", lw=0.6))
        fig.align_ylabels(axes)
        # Fixed margins instead of tight_layout(): one draw less per plot.
        fig.subplots_adjust(left=0.15, right=0.98, top=0.96, bottom=0.06, hspace=0.12)
        fig.savefig(job.path, format="png", metadata=PNG_METADATA)
        plt.close(fig)


def window(events, index: int) -> tuple:
    """Event range around index covering WINDOW_INSTANTS distinct times either side.

    Counted in distinct times, not events: a burst of a hundred sends at one
    instant would otherwise fill the whole window with a single x value.
    """
    before, after = WINDOW_INSTANTS
    lo, seen = index, {events[index].t}
    while lo > 0 and (len(seen) <= before or events[lo - 1].t == events[lo].t):
        lo -= 1
        seen.add(events[lo].t)
    hi, seen = index + 1, {events[index].t}
    while hi < len(events) and (len(seen) <= after or events[hi].t == events[hi - 1].t):
        seen.add(events[hi].t)
        hi += 1
    return lo, hi


def run_job(path, views) -> PlotJob:
    """The whole run of one stack on one trace, every finding of the run marked."""
    return job_for(path, views[0], [v.finding for v in views])


def window_job(folder, view) -> tuple | None:
    """For long runs, a zoom on this finding's violation: (job, {"file", "caption"})."""
    n = len(view.stack_run.snapshots)
    if n <= 4 * WINDOW_EVENTS:
        return None
    lo, hi = window(view.run.trace.events[:n], view.finding.event_index)
    return (job_for(folder / "window.png", view, [view.finding], lo, hi),
            {"file": "window.png", "caption": f"events {lo}–{hi - 1} around the violation"})


def draw_all(jobs: list) -> None:
    """Draw every plot; in worker processes when there are many (output is the same either way)."""
    workers = min(os.cpu_count() or 1, 8)
    if len(jobs) < 4 or workers < 2:
        for job in jobs:
            plot_run(job)
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        for _ in pool.map(plot_run, jobs, chunksize=max(1, len(jobs) // (4 * workers))):
            pass

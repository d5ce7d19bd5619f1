"""Per-finding plots: the stack and its reference oracle over time, violation marked.

matplotlib with the Agg backend, PNG with the Software/date metadata removed,
so the same input gives byte-identical files (tested).  The styles differ by
line style and marker as well as colour, so the plots read in grayscale.

What each plot shows is computed by small pure functions (start offsets, the
symlog threshold and limits, byte units, the zoom window) that the tests check
with exact values; the drawing functions only place what those return.
"""
from __future__ import annotations

import bisect
import io
import math
import multiprocessing
import os
import textwrap
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator  # noqa: E402

from ..output import write_bytes_atomic  # noqa: E402
from ..snapshot import PHASES  # noqa: E402
from ..streams import printable  # noqa: E402
from ..units import duration  # noqa: E402

# Titles and legends carry user-chosen names (trace paths, stack labels): a `$...$` in one
# is text, not mathtext (which raised on `$\\x$` and stopped the report).
plt.rcParams["text.parse_math"] = False

STACK_STYLE = dict(color="#b2182b", linestyle="-", linewidth=1.6)
ORACLE_STYLE = dict(color="#2166ac", linestyle="--", linewidth=1.4)
MARK_STYLE = dict(color="black", linestyle=(0, (4, 2, 1, 2)), linewidth=1.2)
# The oracle's and the Reno control's own closed loops (ccdiff/report/impact.py), on the
# window panel: their own colours and dash patterns, distinct in grayscale from the above.
CLOSED_LOOP_STYLES = (dict(color="#1b7837", linestyle=(0, (1, 1.2)), linewidth=1.5),
                      dict(color="#762a83", linestyle=(0, (6, 1.5, 1, 1.5, 1, 1.5)), linewidth=1.2))
PNG_METADATA = {"Software": None}   # no version/date stamp: deterministic bytes
FIGSIZE = (11, 8.4)                 # inches at 100 dpi: 1100 x 840 px
AXES_RIGHT = 0.74                   # the legends live in the right quarter, off the data
LEGEND_WRAP = 30                    # characters per legend line (long stack specs wrap)
WINDOW_EVENTS = 60                  # runs longer than 4x this get a zoomed plot too
WINDOW_RTTS = 3                     # the zoom shows this many smoothed RTTs either side
WINDOW_INSTANTS = (40, 20)          # without an RTT sample: distinct event times before / after


# ---------------------------------------------------------------- data (pure, tested)

def start_offsets_ms(times_us, starts_us) -> list:
    """(start - now) in ms for each event: positive = the start lies in the future.

    Plotting the start itself against a "now" diagonal put a 10 ms future start
    on a 350 ms axis; the difference puts it 10 ms above a zero line.
    """
    return [None if s is None else (s - t) / 1000 for t, s in zip(times_us, starts_us)]


def nice_floor(x: float) -> float:
    """The largest 1-2-5 step (…, 0.5, 1, 2, 5, 10, …) not above x > 0."""
    exp = math.floor(math.log10(x))
    for step in (5, 2, 1):
        value = step * 10.0 ** exp
        if value <= x * (1 + 1e-9):
            return float(f"{value:.12g}")   # 0.30000000000000004 would show in tick labels
    return float(f"{10.0 ** exp:.12g}")


def offset_linthresh(offsets, rtt_ms: float | None) -> float:
    """Where the start-offset axis turns from linear to logarithmic, in ms.

    A symlog axis, not a clipped one: how far in the past an epoch lies is itself
    a finding (picoquic's high-bdp epoch sits 8000 ms back), so clipping would
    hide it, while a linear axis down to -8000 ms flattens a +10 ms future start
    to a pixel.  The threshold is the smallest future offset (so every future
    point sits at least one linear unit above the zero line, however far back
    the past goes), else one smoothed RTT, rounded down to a 1-2-5 step;
    1 µs (the traces' resolution) at least.
    """
    future = [v for v in offsets if v is not None and v > 0]
    base = min(future) if future else (rtt_ms or 1.0)
    return nice_floor(max(base, 0.001))


def offset_limits(offsets, linthresh: float) -> tuple:
    """y limits: both sides of zero always shown (an empty future half says "never in the
    future"), 40% headroom beyond the extremes (a factor: the axis is logarithmic there)."""
    values = [v for v in offsets if v is not None]
    lo, hi = min(values + [-linthresh]), max(values + [linthresh])
    return lo * 1.4, hi * 1.4


def offset_ticks(lo: float, hi: float, linthresh: float, per_side: int = 3) -> list:
    """0, ±linthresh and powers of ten of it out to the limits, at most per_side each side
    (thinned from the outside in, so the decade of the farthest point keeps its label)."""
    ticks = [0.0]
    for sign, edge in ((-1, -lo), (1, hi)):
        decades = []
        value = linthresh
        while value <= edge:
            decades.append(value)
            value *= 10
        stride = max(1, math.ceil(len(decades) / per_side))
        ticks += [sign * float(f"{v:.12g}") for v in decades[::-1][::stride]]
    return sorted(ticks)


def plain_number(value: float) -> str:
    """12, 0.5, 11050: never an exponent or an offset."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def offset_label(value: float, _pos=None) -> str:
    """Tick labels of the start-offset axis: "now" at zero, a sign on future offsets."""
    if value == 0:
        return "now"
    return ("+" if value > 0 else "") + plain_number(value)


def byte_unit(max_bytes: float) -> tuple:
    """(divisor, unit) for one axis: kB up to a megabyte, then MB (SI, as ccdiff.units)."""
    return (1_000_000, "MB") if max_bytes >= 1_000_000 else (1_000, "kB")


def byte_label(value: float, unit: tuple) -> str:
    """A tick in the axis's unit: "2.4 kB", "1.5 MB", "0"."""
    return "0" if value == 0 else f"{plain_number(value / unit[0])} {unit[1]}"


def byte_formatter(*series) -> FuncFormatter:
    """One unit for every tick of an axis, from the largest value drawn on it."""
    values = [v for s in series if s for v in s if v is not None]
    unit = byte_unit(max(values, default=0))
    return FuncFormatter(lambda value, _pos: byte_label(value, unit))


def rtt_at(resolved, index: int) -> int | None:
    """The smoothed RTT (µs) controllers saw at event index; None before the first sample
    (ledger rtt = (latest, smoothed, rttvar, min); latest is 0 until an ACK gave one)."""
    if not resolved or index >= len(resolved):
        return None
    latest, smoothed = resolved[index].rtt[:2]
    return smoothed if latest > 0 else None


def rtt_window(times_us, index: int, rtt_us: int, rtts: int = WINDOW_RTTS) -> tuple:
    """(lo, hi, t0, t1): rtts smoothed RTTs either side of event index, in trace time.

    Centred on the violation in time, not in events: after an 8 s idle the events
    before it are seconds away, and a window of events covered the whole idle.
    lo..hi-1 also takes the last event before t0 and the first after t1, so the
    state entering and leaving the window is drawn up to its edges.
    """
    t = times_us[index]
    t0, t1 = max(t - rtts * rtt_us, times_us[0]), min(t + rtts * rtt_us, times_us[-1])
    lo = max(bisect.bisect_left(times_us, t0) - 1, 0)
    hi = min(bisect.bisect_right(times_us, t1) + 1, len(times_us))
    return lo, hi, t0, t1


def window(events, index: int) -> tuple:
    """Event range around index covering WINDOW_INSTANTS distinct times either side.

    The fallback when no RTT sample exists yet.  Counted in distinct times, not
    events: a burst of a hundred sends at one instant would otherwise fill the
    whole window with a single x value.
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


def clip_steps(times_us, values, t0: float, t1: float) -> tuple:
    """A step series (drawn where="post") cut to [t0, t1]: the value in effect at t0 starts
    at t0, and a series that goes on past t1 is carried to t1 (a run that ended inside the
    window ends where it ended)."""
    first = bisect.bisect_right(times_us, t0)
    last = bisect.bisect_right(times_us, t1)
    times, out = list(times_us[first:last]), list(values[first:last])
    if first > 0:
        times.insert(0, t0)
        out.insert(0, values[first - 1])
    if last < len(times_us) and out:
        times.append(t1)
        out.append(out[-1])
    return times, out


def closed_loop_lines(job) -> list:
    """What the window panel draws of the controls' own closed loops, one dict per run:
    {"label" (legend text, one line: "oracle own loop, 3.38 s"), "x_ms", "y"}; within the
    zoom's time range when it has one."""
    lines = []
    for series in job.closed_loop:
        times, cwnd = series["times_us"], series["cwnd"]
        if job.xlim_us is not None:
            times, cwnd = clip_steps(times, cwnd, *job.xlim_us)
        elif job.clip_us is not None:
            times, cwnd = clip_steps(times, cwnd, *job.clip_us)
        lines.append({"label": f"{series['label']} own loop, {series['note']}",
                      "x_ms": [t / 1000 for t in times], "y": list(cwnd)})
    return lines


def badge_groups(marks_ms, span_ms: float, min_gap: float = 0.02) -> list:
    """Findings closer than min_gap of the x span share one numbered badge: [(x, "1, 2"), ...].

    Two findings at (nearly) the same instant (ngtcp2's idle inflation at 10.1 s
    and the divergence it causes 50 ms later) would print their numbers on top of
    each other.
    """
    groups = []
    for n, x in enumerate(marks_ms, 1):
        if groups and abs(x - groups[-1][0]) <= min_gap * max(span_ms, 1e-9):
            groups[-1][1].append(str(n))
        else:
            groups.append((x, [str(n)]))
    return [(x, ", ".join(numbers)) for x, numbers in groups]


# ---------------------------------------------------------------- jobs

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
    rtt_us: int | None = None           # smoothed RTT at the first mark (symlog threshold)
    xlim_us: tuple | None = None        # the zoom's time range; None: the events' own
    # The oracle's and the Reno control's own closed-loop runs on the same scenario and seed:
    # [{"label", "times_us", "cwnd", "note"}] (impact.py; cwnd steps, not per event).
    closed_loop: list = field(default_factory=list)
    clip_us: tuple | None = None        # a zoom without xlim: the time range closed_loop is cut to


def job_for(path, view, marks, lo: int = 0, hi: int | None = None, xlim_us=None, closed_loop=()) -> PlotJob:
    """Events lo..hi-1 of the finding's run; marks: the findings to draw; closed_loop: the
    controls' own closed-loop cwnd series (impact.py), cut to events lo..hi-1 in a zoom."""
    stack_snaps = view.stack_run.snapshots
    oracle_snaps = view.oracle_run.snapshots if view.oracle_run else None
    hi = min(hi if hi is not None else len(stack_snaps), len(stack_snaps))
    first = min(f.event_index for f in marks)
    times = [ev.t for ev in view.run.trace.events[lo:hi]]
    whole = lo == 0 and hi == len(stack_snaps)
    # A trace's file name is the user's: its control characters are drawn escaped, as the
    # terminal and junit.xml show them (a font has no glyph for ESC: matplotlib would warn).
    title = printable(f"{view.label} vs {view.reference or 'no oracle'} — {view.trace_path}")
    return PlotJob(str(path), title,
                   view.label, view.reference or "", times,
                   stack_snaps[lo:hi], oracle_snaps[lo:hi] if oracle_snaps else None,
                   [(f.t_us, f.invariant, f.event_index) for f in marks],
                   rtt_at(getattr(view.run, "resolved", None), first), xlim_us, list(closed_loop),
                   None if whole or not times else (times[0], times[-1]))


def run_job(path, views, closed_loop=()) -> PlotJob:
    """The whole run of one stack on one trace, every finding of the run marked; closed_loop:
    the oracle's and the Reno control's own runs beside it (closed-loop traces only)."""
    return job_for(path, views[0], [v.finding for v in views], closed_loop=closed_loop)


def window_job(folder, view, closed_loop=()) -> tuple | None:
    """For long runs, a zoom on this finding's first violation: (job, {"file", "caption"})."""
    n = len(view.stack_run.snapshots)
    if n <= 4 * WINDOW_EVENTS:
        return None
    events, index = view.run.trace.events[:n], view.finding.event_index
    rtt = rtt_at(getattr(view.run, "resolved", None), index)
    if rtt:
        lo, hi, t0, t1 = rtt_window([ev.t for ev in events], index, rtt)
        caption = (f"{WINDOW_RTTS} smoothed RTTs ({duration(rtt)}) either side of the violation, "
                   f"events {lo}–{hi - 1}")
        return (job_for(folder / "window.png", view, [view.finding], lo, hi, (t0, t1), closed_loop),
                {"file": "window.png", "caption": caption})
    lo, hi = window(events, index)
    return (job_for(folder / "window.png", view, [view.finding], lo, hi, closed_loop=closed_loop),
            {"file": "window.png", "caption": f"events {lo}–{hi - 1} around the violation (no RTT sample yet)"})


# ---------------------------------------------------------------- drawing

def _nan(values) -> list:
    return [float("nan") if v is None else v for v in values]


def _series(snaps, name) -> list | None:
    return [getattr(s, name) for s in snaps] if snaps is not None else None


def _wrap(label: str) -> str:
    return textwrap.fill(label, LEGEND_WRAP, break_on_hyphens=False)


def _legend_right(ax, handles=None) -> None:
    """Beside the axes, never over the data."""
    kwargs = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=7,
                  frameon=False)
    if handles is not None:
        ax.legend(handles=handles, **kwargs)
    else:
        ax.legend(**kwargs)


def _step_pair(ax, xs, mine, theirs, label, job, stack_style=STACK_STYLE, oracle_style=ORACLE_STYLE):
    ax.step(xs, _nan(mine), where="post", label=_wrap(f"{job.stack} {label}"), **stack_style)
    if theirs is not None:
        ax.step(xs, _nan(theirs), where="post", label=_wrap(f"{job.oracle} {label}"), **oracle_style)


def _draw_windows(ax, xs, job) -> None:
    cwnd, ssthresh = _series(job.stack_snaps, "cwnd"), _series(job.stack_snaps, "ssthresh")
    o_cwnd, o_ssthresh = _series(job.oracle_snaps, "cwnd"), _series(job.oracle_snaps, "ssthresh")
    _step_pair(ax, xs, cwnd, o_cwnd, "cwnd", job)
    _step_pair(ax, xs, ssthresh, o_ssthresh, "ssthresh", job,
               dict(color="#b2182b", linestyle=":", linewidth=1.2),
               dict(color="#2166ac", linestyle="-.", linewidth=1.0))
    own = closed_loop_lines(job)
    for line, style in zip(own, CLOSED_LOOP_STYLES * len(own)):
        ax.step(line["x_ms"], line["y"], where="post", label=_wrap(line["label"]), **style)
    ax.yaxis.set_major_formatter(byte_formatter(cwnd, o_cwnd, ssthresh, o_ssthresh, *(l["y"] for l in own)))
    ax.set_ylabel("window")
    _legend_right(ax)


def _draw_in_flight(ax, xs, job) -> None:
    mine, theirs = _series(job.stack_snaps, "bytes_in_flight"), _series(job.oracle_snaps, "bytes_in_flight")
    _step_pair(ax, xs, mine, theirs, "bytes in flight", job)
    ax.yaxis.set_major_formatter(byte_formatter(mine, theirs))
    ax.set_ylabel("in flight")
    _legend_right(ax)


def _draw_phase(ax, xs, job) -> None:
    code = {p: i for i, p in enumerate(PHASES)}
    mine, theirs = _series(job.stack_snaps, "phase"), _series(job.oracle_snaps, "phase")
    # The oracle is lifted a little so equal phases show as two lines, not one.
    _step_pair(ax, xs, [code.get(p, 0) for p in mine],
               [code.get(p, 0) + 0.08 for p in theirs] if theirs else None, "phase", job)
    ax.set_yticks(range(len(PHASES)), [p.replace("_", " ") for p in PHASES], fontsize=6)
    ax.set_ylim(-0.5, len(PHASES) - 0.5)
    _legend_right(ax)


def _draw_offsets(ax, xs, job) -> None:
    """Recovery and epoch start minus now (ms), symlog around a labelled zero line."""
    all_offsets = []
    for name, marker, o_marker in (("recovery_start_us", "o", "s"), ("epoch_start_us", "x", "+")):
        short = name.split("_")[0]
        mine = start_offsets_ms(job.times_us, _series(job.stack_snaps, name))
        ax.plot(xs, _nan(mine), linestyle="none", marker=marker, markersize=3.5, color="#b2182b",
                label=_wrap(f"{job.stack} {short} start"))
        all_offsets += mine
        if job.oracle_snaps is not None:
            theirs = start_offsets_ms(job.times_us, _series(job.oracle_snaps, name))
            ax.plot(xs, _nan(theirs), linestyle="none", marker=o_marker, markersize=3.5,
                    markerfacecolor="none", color="#2166ac", label=_wrap(f"{job.oracle} {short} start"))
            all_offsets += theirs
    linthresh = offset_linthresh(all_offsets, job.rtt_us / 1000 if job.rtt_us else None)
    lo, hi = offset_limits(all_offsets, linthresh)
    ax.axhline(0, color="black", linewidth=1.0, label="now (above = in the future)")
    ax.set_yscale("symlog", linthresh=linthresh, linscale=1.0)
    ax.set_ylim(lo, hi)
    ax.yaxis.set_major_locator(FixedLocator(offset_ticks(lo, hi, linthresh)))
    ax.yaxis.set_minor_locator(FixedLocator([]))
    ax.yaxis.set_major_formatter(FuncFormatter(offset_label))
    ax.set_ylabel("start − now (ms)\nsymlog, + = future")
    _legend_right(ax)


def _mark_findings(axes, job) -> None:
    """Dash-dot lines through every panel; numbered badges above the top panel (outside
    the data, where the old in-plot labels covered the lines), explained beside it."""
    marks_ms = [t_us / 1000 for t_us, _, _ in job.marks]
    for x in marks_ms:
        for ax in axes:
            ax.axvline(x, **MARK_STYLE)
    lo, hi = axes[0].get_xlim()
    for x, text in badge_groups(marks_ms, hi - lo):
        axes[0].annotate(text, xy=(x, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 2),
                         textcoords="offset points", ha="center", va="bottom", fontsize=7,
                         bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="black", lw=0.6))
    handles = [Line2D([], [], **MARK_STYLE, label=_wrap(f"{n}: {invariant} (event {index})"))
               for n, (_, invariant, index) in enumerate(job.marks, 1)]
    if handles:
        own = axes[0].get_legend()
        axes[0].legend(handles=handles, loc="lower left", bbox_to_anchor=(1.01, 0.0), borderaxespad=0.0,
                       fontsize=7, frameon=False, title="findings", title_fontsize=7, alignment="left")
        axes[0].add_artist(own)   # a second legend() replaces the first unless it is kept as an artist


def draw_figure(job: PlotJob):
    """The figure of one job (not saved): four panels sharing the time axis."""
    xs = [t / 1000 for t in job.times_us]
    fig, axes = plt.subplots(4, 1, figsize=FIGSIZE, sharex=True, dpi=100,
                             gridspec_kw={"height_ratios": [3, 1.4, 1.1, 2]})
    _draw_windows(axes[0], xs, job)
    _draw_in_flight(axes[1], xs, job)
    _draw_phase(axes[2], xs, job)
    _draw_offsets(axes[3], xs, job)
    if job.xlim_us is not None:
        axes[3].set_xlim(job.xlim_us[0] / 1000, job.xlim_us[1] / 1000)
    # Zoomed times such as 11050..11250 ms would otherwise print as "+1.1e4" offsets.
    axes[3].xaxis.set_major_locator(MaxNLocator(nbins=8))
    axes[3].xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: plain_number(v)))
    axes[3].set_xlabel("trace time (ms)")
    axes[0].set_title(job.title, fontsize=9, pad=16)   # room for the finding badges
    _mark_findings(axes, job)
    fig.align_ylabels(axes)
    # Fixed margins instead of tight_layout(): one draw less per plot.
    fig.subplots_adjust(left=0.135, right=AXES_RIGHT, top=0.94, bottom=0.06, hspace=0.14)
    return fig, axes


def plot_run(job: PlotJob) -> None:
    with plt.rc_context({"font.size": 8, "axes.grid": True, "grid.alpha": 0.3,
                         "svg.hashsalt": "ccdiff", "path.simplify": True}):
        fig, _ = draw_figure(job)
        png = io.BytesIO()
        fig.savefig(png, format="png", metadata=PNG_METADATA)
        plt.close(fig)
    write_bytes_atomic(job.path, png.getvalue())   # a full disk leaves no half PNG


MAX_WORKERS = 8    # conform's report processes set 1: they are one per core already


def draw_all(jobs: list) -> None:
    """Draw every plot; in worker processes when there are many (output is the same either way)."""
    workers = min(os.cpu_count() or 1, MAX_WORKERS)
    if len(jobs) < 4 or workers < 2:
        for job in jobs:
            plot_run(job)
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        for _ in pool.map(plot_run, jobs, chunksize=max(1, len(jobs) // (4 * workers))):
            pass

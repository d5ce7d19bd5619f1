"""What the plots show, as data: start offsets, the symlog axis, byte units, the zoom window.

The drawing functions only place what the pure functions in ccdiff.report.plots
compute, so these tests assert exact values on those, plus a few facts read back
from a drawn (unsaved) figure: the axis scale, tick labels, no offset text.
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from ccdiff.build import ensure_built
from ccdiff.cli import main
from ccdiff.ledger import Ledger
from ccdiff.replay import replay
from ccdiff.report import plots
from ccdiff.report.build import _views
from ccdiff.report.load import load_runs
from ccdiff.snapshot import Snapshot
from ccdiff.trace import load_trace

ROOT = Path(__file__).resolve().parents[2]
DEATH_SPIRAL = ROOT / "examples" / "death-spiral.jsonl"
IDLE_RESTART = ROOT / "examples" / "idle-restart.jsonl"


def _snap(cwnd, recovery=None, epoch=None, in_flight=0):
    return Snapshot(cwnd, cwnd, in_flight, "congestion_avoidance", recovery, epoch, None, None)


def _job(snaps, times_us, oracle=None, marks=(), rtt_us=None, xlim_us=None):
    return plots.PlotJob("unused.png", "t", "stack", "oracle", list(times_us), snaps, oracle,
                         list(marks), rtt_us, xlim_us)


@pytest.fixture
def drawn():
    """draw_figure(job) -> axes after a draw (tick labels exist only then); closed afterwards."""
    figures = []

    def draw(job):
        fig, axes = plots.draw_figure(job)
        fig.canvas.draw()
        figures.append(fig)
        return axes
    yield draw
    for fig in figures:
        plt.close(fig)


def _fraction(ax, y):
    """Height of data value y in axes fraction (0 = bottom, 1 = top), through the axis scale."""
    return ax.transAxes.inverted().transform(ax.transData.transform((0, y)))[1]


# ---------------------------------------------------------------- future start


def test_death_spiral_future_start_is_plus_10_ms_at_the_finding():
    ensure_built("quiche@0.26.0")
    trace = load_trace(str(DEATH_SPIRAL))
    result = replay(trace, ["quiche@0.26.0", "oracle"])
    (finding,) = [f for f in result.findings if f.invariant == "future-recovery-start"]
    snaps = result.runs["quiche@0.26.0"].snapshots
    times = [ev.t for ev in trace.events]
    offsets = plots.start_offsets_ms(times, [s.recovery_start_us for s in snaps])
    first_future = next(i for i, v in enumerate(offsets) if v is not None and v > 0)
    assert (finding.event_index, first_future, offsets[first_future]) == (40, 40, 10.0)
    # The oracle's recovery start is in the past there: 50.4 ms (the loss) - 50.6 ms (now).
    oracle = result.runs["oracle"].snapshots
    assert plots.start_offsets_ms(times, [s.recovery_start_us for s in oracle])[40] == -0.2
    assert plots.offset_linthresh(offsets, 10.0) == 10.0


def test_death_spiral_plot_puts_the_future_start_well_above_now(drawn):
    ensure_built("quiche@0.26.0")
    trace = load_trace(str(DEATH_SPIRAL))
    result = replay(trace, ["quiche@0.26.0", "oracle"])
    job = _job(result.runs["quiche@0.26.0"].snapshots, [ev.t for ev in trace.events],
               result.runs["oracle"].snapshots, [(50600, "future-recovery-start", 40)], 10000)
    ax = drawn(job)[3]
    assert ax.get_yscale() == "symlog"
    assert ax.get_ylim() == pytest.approx((-300.2 * 1.4, 10 * 1.4))   # oracle: 50.4 ms start, last event 350.6 ms
    # On the old linear axis the +10 ms was 3% of the panel above "now"; now it is a fifth.
    assert _fraction(ax, 10) - _fraction(ax, 0) > 0.2
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["-100", "-10", "now", "+10"]
    assert ax.yaxis.get_offset_text().get_text() == ""


def test_far_past_epoch_does_not_flatten_a_future_start(drawn):
    # picoquic high-bdp: the epoch sits 8000 ms in the past while a start is 10 ms ahead.
    offsets = [-8000.0, None, 10.0, 0.0]
    assert plots.offset_linthresh(offsets, 100.0) == 10.0
    assert plots.offset_limits(offsets, 10.0) == pytest.approx((-11200.0, 14.0))
    assert plots.offset_ticks(-11200.0, 14.0, 10.0) == [-10000.0, -100.0, 0.0, 10.0]
    times = [0, 8_000_000, 8_010_000, 8_020_000]
    snaps = [_snap(12000, epoch=0), _snap(12000, epoch=0), _snap(12000, epoch=8_010_000 + 10_000),
             _snap(12000, epoch=8_020_000)]
    ax = drawn(_job(snaps, times, rtt_us=100_000))[3]
    assert _fraction(ax, 10) - _fraction(ax, 0) > 0.2          # linear: 0.1%
    assert _fraction(ax, -8000) > 0.02                          # the far past still on the panel


def test_no_future_start_keeps_one_rtt_of_empty_future():
    assert plots.offset_linthresh([-5.0, None, -300.0], 50.0) == 50.0
    assert plots.offset_linthresh([None], None) == 1.0
    assert plots.offset_limits([-5.0, -300.0], 50.0) == pytest.approx((-420.0, 70.0))
    assert plots.offset_linthresh([0.001], None) == 0.001       # 1 µs: the traces' resolution


@pytest.mark.parametrize("x, floor", [(10.0, 10.0), (7.0, 5.0), (0.3, 0.2), (0.001, 0.001), (199.0, 100.0),
                                      (2500.0, 2000.0)])
def test_nice_floor(x, floor):
    assert plots.nice_floor(x) == floor


def test_offset_labels_are_plain_with_now_at_zero():
    assert [plots.offset_label(v) for v in (-10000.0, -0.5, 0.0, 10.0, 0.002)] == \
        ["-10000", "-0.5", "now", "+10", "+0.002"]


# ---------------------------------------------------------------- byte axes


@pytest.mark.parametrize("scale, unit", [(1, "kB"), (1000, "MB")])
def test_window_axes_are_in_kb_or_mb_without_offset(drawn, scale, unit):
    cwnds = [12000 * scale, 8400 * scale, 5880 * scale, 2400 * scale]
    snaps = [_snap(c, in_flight=c // 2) for c in cwnds]
    axes = drawn(_job(snaps, [0, 10_000, 20_000, 30_000]))
    for ax in axes[:2]:
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert labels and all(label == "0" or label.endswith(f" {unit}") for label in labels), labels
        assert ax.yaxis.get_offset_text().get_text() == ""
    assert "12 " + unit in [t.get_text() for t in axes[0].get_yticklabels()]


def test_byte_labels():
    kb, mb = plots.byte_unit(13_200), plots.byte_unit(2_340_000)
    assert (kb, mb) == ((1000, "kB"), (1_000_000, "MB"))
    assert [plots.byte_label(v, kb) for v in (0, 2400, 12000, 500)] == ["0", "2.4 kB", "12 kB", "0.5 kB"]
    assert [plots.byte_label(v, mb) for v in (1_500_000, 3_000_000)] == ["1.5 MB", "3 MB"]


# ---------------------------------------------------------------- zoom window


def test_rtt_window_spans_rtts_either_side_in_time():
    # Events every 10 ms, then an 8 s idle, then every 10 ms again.
    times = [t * 10_000 for t in range(100)] + [9_000_000 + t * 10_000 for t in range(100)]
    index = 105                                                  # 9.05 s, 5 events after the idle
    lo, hi, t0, t1 = plots.rtt_window(times, index, 50_000)
    assert (t0, t1) == (8_900_000, 9_200_000)                   # 3 RTTs of 50 ms either side
    assert (lo, hi) == (99, 122)      # the last event before the idle enters from the left edge
    assert times[lo] < t0 <= times[lo + 1] and times[hi - 2] <= t1 < times[hi - 1]
    assert plots.rtt_window(times, 0, 50_000)[:3] == (0, 17, 0)  # clipped at the trace's start


def test_ngtcp2_idle_zoom_is_three_rtts_around_the_violation(tmp_path):
    """The idle-inflation window covered 1-11 s; now 150 ms either side of 10.1 s."""
    ensure_built("ngtcp2@1.25.0")
    findings = tmp_path / "f.json"
    assert main(["replay", str(IDLE_RESTART), "--stack", "ngtcp2@1.25.0", "--json", str(findings)]) == 1
    (view,) = [v for v in _views(load_runs(json.loads(findings.read_text()), tmp_path))
               if v.finding.invariant == "idle-inflation"]
    assert (view.finding.event_index, view.finding.t_us) == (2435, 10_100_000)
    assert plots.rtt_at(view.run.resolved, 2435) == 50_000
    job, caption = plots.window_job(tmp_path, view)
    assert job.xlim_us == (10_100_000 - 3 * 50_000, 10_100_000 + 3 * 50_000)
    assert caption["caption"].startswith("3 smoothed RTTs (50 ms) either side of the violation")
    inside = job.times_us[1:-1]
    assert all(job.xlim_us[0] <= t <= job.xlim_us[1] for t in inside)
    assert job.times_us[0] < job.xlim_us[0]                     # the state before the window
    assert job.rtt_us == 50_000


def test_rtt_at_is_none_before_the_first_sample():
    """None makes window_job fall back to WINDOW_INSTANTS (test_helpers)."""
    trace = load_trace(str(DEATH_SPIRAL))
    ledger = Ledger(trace.header)
    resolved = [ledger.resolve(ev) for ev in trace.events]
    assert plots.rtt_at(resolved, 0) is None                   # a send: no ACK, no sample yet
    assert plots.rtt_at(resolved, 40) == 10_075                  # smoothed (RFC 9002 §5.3)


def test_findings_at_one_instant_share_a_badge():
    assert plots.badge_groups([11100.0, 11100.0], 13000.0) == [(11100.0, "1, 2")]
    assert plots.badge_groups([50.6, 70.6, 90.6], 350.0) == [(50.6, "1"), (70.6, "2"), (90.6, "3")]

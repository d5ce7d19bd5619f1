"""Small pieces of the report: Markdown quoting, plot windows, file-name slugs."""
from __future__ import annotations

from ccdiff.report.build import md_code, md_fence
from ccdiff.report.context import slug
from ccdiff.report.plots import WINDOW_INSTANTS, window
from ccdiff.trace import Sent


def test_md_code_cannot_be_closed_by_the_text():
    assert md_code("plain") == "`plain`"
    assert md_code("a`b") == "`` a`b ``"
    assert md_code("x``y`") == "``` x``y` ```"
    assert md_code("two\nlines") == "`two lines`"


def test_md_fence_is_longer_than_any_backtick_run():
    assert md_fence("x", "jsonl") == "```jsonl\nx\n```"
    assert md_fence("a ```` b").startswith("`````\n")


def test_slug_keeps_only_safe_characters():
    assert slug("quiche@0.30.0:idle_fix=off") == "quiche-0.30.0-idle_fix-off"
    assert slug('x"><svg onload=alert(3)>') == "x-svg-onload-alert-3"
    assert slug("../..") == "x"


def test_window_counts_instants_not_events():
    # 100 sends at each of 100 instants: a window of events would show one instant.
    events = [Sent(t * 1000, t * 100 + i, 1200) for t in range(100) for i in range(100)]
    lo, hi = window(events, 5050)
    instants = sorted({e.t for e in events[lo:hi]})
    assert instants[0] == (50 - WINDOW_INSTANTS[0]) * 1000 and instants[-1] == (50 + WINDOW_INSTANTS[1]) * 1000
    assert lo % 100 == 0 and hi % 100 == 0      # whole instants only
    assert window(events, 0)[0] == 0 and window(events, len(events) - 1)[1] == len(events)

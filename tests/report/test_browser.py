"""The death-spiral report opened in headless Chromium (Debian's chromium package).

Checks what a reader sees: the matrix with a link to the finding, the finding
page with its plot (a real PNG next to the page), no console errors; saves
screenshots under the test's tmp folder.
"""
from __future__ import annotations

from html.parser import HTMLParser

from PIL import Image

from .browser import load
from .conftest import DS_FINDING


class Elements(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found = []          # (tag, attrs dict)
        self.text = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(dom: str) -> Elements:
    parser = Elements()
    parser.feed(dom)
    return parser


def test_console_check_catches_errors(tmp_path):
    """The console parser is not blind: a page whose script is blocked or logs an error is caught."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><meta http-equiv="Content-Security-Policy" content="default-src \'none\'">'
                    '<script>console.error("boom")</script><p>x</p>')
    _, messages = load(page, tmp_path / "profile")
    assert messages and "inline script" in messages[0]
    page.write_text("<!DOCTYPE html><script>console.error('boom')</script><p>x</p>")
    _, messages = load(page, tmp_path / "profile")
    assert any("boom" in m for m in messages)


def test_index_shows_the_matrix(death_report, tmp_path):
    out = death_report["out"]
    shot = tmp_path / "index.png"
    dom, messages = load(out / "index.html", tmp_path / "profile", screenshot=shot)
    assert messages == []
    page = parse(dom)
    assert ("table", {"class": "matrix", "id": "matrix-table"}) in page.found
    links = [a.get("href") for tag, a in page.found if tag == "a"]
    assert f"findings/{DS_FINDING}/index.html" in links
    text = " ".join(page.text)
    assert "quiche@0.26.0" in text and "future-recovery-start" in text and "✗ 1" in text
    assert "0/1" in text and "1/1" in text        # traces passed: quiche 0.26.0 none, 0.30.0 all
    assert Image.open(shot).size == (1200, 1600)
    print(f"screenshot: {shot}")


def test_finding_page_shows_the_plot(death_report, tmp_path):
    page_file = death_report["out"] / "findings" / DS_FINDING / "index.html"
    shot = tmp_path / "finding.png"
    dom, messages = load(page_file, tmp_path / "profile", screenshot=shot)
    assert messages == []
    page = parse(dom)
    plots = [a for tag, a in page.found if tag == "img" and a.get("class") == "plot"]
    assert [p["src"] for p in plots] == ["../../plots/death-spiral/quiche-0.26.0.png"]
    with Image.open(page_file.parent / plots[0]["src"]) as plot:
        assert plot.format == "PNG" and plot.size == (1100, 840)
        assert len(plot.getcolors(1 << 16) or []) > 10          # a drawing, not a blank canvas
    text = " ".join(page.text)
    assert "where t is the elapsed time in seconds from the beginning of the current congestion avoidance stage" in text
    assert "idle-shift-from-last-send" in text
    assert "docker compose run --rm replay" in text and "ccdiff replay" in text
    ids = {a.get("id") for _, a in page.found}
    assert {"plots", "rule", "values", "deviations", "trace", "replay", "trace-excerpt"} <= ids
    with Image.open(shot) as image:   # the screenshot shows something other than white
        assert image.convert("L").getextrema()[0] < 100
        # ...and the plot in the first screen: pixels of the stack's red (STACK_STYLE, #b2182b).
        red = sum(n for n, (r, g, b) in image.convert("RGB").getcolors(1 << 20)
                  if abs(r - 0xb2) + abs(g - 0x18) + abs(b - 0x2b) < 60)
        assert red > 500, red
    print(f"screenshot: {shot}")

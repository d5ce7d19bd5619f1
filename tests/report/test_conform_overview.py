"""`ccdiff conform --out DIR` writes DIR/index.html, the closed-loop overview (issue 15 point 5).

One tiny real run (oracle and quiche@0.26.0, plus the Reno controls conform adds, on the
death spiral with 2 seeds: quiche 0.26.0 fails both, seed 1 also misses the deadline) is
checked the way a reader uses the page: the matrix cells carry summary.json's exact
counts, every failing seed links to a file that exists, finding ids carry the scenario,
the page is byte-identical across runs, and Chromium renders the matrix.
"""
from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from ccdiff.cli import main
from ccdiff.conform import run_conform, write_outputs
from ccdiff.outdir import MANIFEST
from ccdiff.sim import load_scenario

from .browser import load

ARGS = ["conform", "--stack", "oracle", "--stack", "quiche@0.26.0", "--scenarios", "death-spiral",
        "--seeds", "2", "--jobs", "1"]


class Cells(HTMLParser):
    """The overview's matrix: (stack, scenario) -> {passed, runs, class, links}, read from
    the cells' data attributes and the "seed N" links inside them."""

    def __init__(self):
        super().__init__()
        self.scenarios, self.cells = [], {}
        self._header = None        # "col" / "row" inside a <th scope=...>
        self._stack = None         # the row's stack: the first text of its row header
        self._cell = None          # the rate cell being read
        self._href = None          # the link being read, inside a rate cell

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr":
            self._stack, self._cell = None, None
        elif tag == "th":
            self._header = a.get("scope")
        elif tag == "td" and "rate" in (a.get("class") or "").split():
            column = sum(1 for key in self.cells if key[0] == self._stack)
            self._cell = {"passed": int(a["data-passed"]), "runs": int(a["data-runs"]), "class": a["class"],
                          "links": {}}
            self.cells[(self._stack, self.scenarios[column])] = self._cell
        elif tag == "a" and self._cell is not None:
            self._href = a.get("href")

    def handle_endtag(self, tag):
        if tag == "th":
            self._header = None
        elif tag == "a":
            self._href = None

    def handle_data(self, data):
        text = data.strip()
        if not text:
            return
        if self._header == "col":
            self.scenarios.append(text)
        elif self._header == "row" and self._stack is None:
            self._stack = text
        elif self._href and text.startswith("seed "):
            self._cell["links"][int(text.split()[1])] = self._href


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same conform run twice, into a and b (for the byte-identity check)."""
    base = tmp_path_factory.mktemp("conform-overview")
    for name in ("a", "b"):
        assert main(ARGS + ["--out", str(base / name)]) == 1
    return base


def parse(page: Path) -> Cells:
    cells = Cells()
    cells.feed(page.read_text())
    return cells


def test_matrix_cells_carry_the_summary_counts(runs):
    out = runs / "a"
    summary = json.loads((out / "summary.json").read_text())
    page = parse(out / "index.html")
    assert page.scenarios == ["death-spiral"]
    assert set(page.cells) == {(c["stack"], c["scenario"]) for c in summary["cells"]}
    for c in summary["cells"]:
        cell = page.cells[(c["stack"], c["scenario"])]
        assert (cell["passed"], cell["runs"]) == (c["passed"], c["runs"]), c["stack"]
    quiche = page.cells[("quiche@0.26.0", "death-spiral")]
    assert (quiche["passed"], quiche["runs"]) == (0, 2) and "pass-none" in quiche["class"]
    assert "pass-all" in page.cells[("oracle", "death-spiral")]["class"]
    text = (out / "index.html").read_text()
    # the impact of the late seed: bytes delivered of the 10 MB, from metrics_late
    late = next(c for c in summary["cells"] if c["stack"] == "quiche@0.26.0")["metrics_late"]["delivered_bytes"]
    assert late and "late 1: median 2.34 MB of 10 MB delivered" in text


def test_every_failing_seed_links_to_an_existing_file(runs):
    out = runs / "a"
    summary = json.loads((out / "summary.json").read_text())
    page = parse(out / "index.html")
    failing = [c for c in summary["cases"] if c["status"] != "pass"]
    assert failing
    for case in failing:
        links = page.cells[(case["stack"], case["scenario"])]["links"]
        assert case["seed"] in links, case
        assert (out / links[case["seed"]]).is_file(), links[case["seed"]]
    # the first failing seed of a stack with findings opens its finding page, scenario in the id
    first = page.cells[("quiche@0.26.0", "death-spiral")]["links"]
    assert first[0] == ("report/quiche@0.26.0/findings/death-spiral-seed-0--quiche-0.26.0--"
                        "future-recovery-start/index.html")
    assert first[1] == "traces/death-spiral/quiche@0.26.0/seed-1.jsonl"   # no page: its trace


def test_finding_ids_carry_the_scenario_and_pages_say_closed_loop(runs):
    out = runs / "a"
    ids = [p.name for p in out.glob("report/*/findings/*")]
    assert ids and all(i.startswith("death-spiral-seed-0--") for i in ids), ids
    stack_page = (out / "report" / "quiche@0.26.0" / "index.html").read_text()
    assert "<title>ccdiff conform: quiche@0.26.0, closed loop</title>" in stack_page
    assert "passed\n<strong>0 of 2</strong> runs\n(2 seeds × 1\nscenario: death-spiral)" in stack_page
    assert "traces passed" not in stack_page and "replayed seeds passed" in stack_page
    assert 'href="../../index.html"' in stack_page
    summary = json.loads((out / "report" / "quiche@0.26.0" / "summary.json").read_text())
    assert all(f["id"].startswith("death-spiral-seed-0--") for f in summary["findings"])


def test_overview_is_byte_identical_across_runs(runs):
    assert (runs / "a" / "index.html").read_bytes() == (runs / "b" / "index.html").read_bytes()


def test_the_overview_path_is_the_last_line(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["conform", "--stack", "oracle", "--scenarios", "tail-loss", "--seeds", "1", "--jobs", "1",
                 "--out", str(out)]) == 0
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"overview: {out / 'index.html'}"


def test_written_without_report_folders(tmp_path):
    """write_outputs alone (no report_failures): the cells have counts, failing seeds link
    their traces, nothing links into report/."""
    scenario = load_scenario("death-spiral").with_params(bytes=300_000)
    summary = run_conform(["oracle", "mutant=oracle:idle=last-send"], [scenario], [0], str(tmp_path), jobs=1)
    write_outputs(summary, str(tmp_path))
    page = parse(tmp_path / "index.html")
    assert {k: (v["passed"], v["runs"]) for k, v in page.cells.items()} == {
        ("oracle", scenario.name): (1, 1), ("mutant", scenario.name): (0, 1)}
    assert page.cells[("mutant", scenario.name)]["links"] == {0: f"traces/{scenario.name}/mutant/seed-0.jsonl"}
    assert "report/" not in (tmp_path / "index.html").read_text()


def test_chromium_shows_the_matrix(runs, tmp_path):
    out = runs / "a"
    shot = tmp_path / "overview.png"
    dom, messages = load(out / "index.html", tmp_path / "profile", screenshot=shot)
    assert messages == []
    assert 'id="matrix-table"' in dom and "0/2" in dom and "2/2" in dom
    with Image.open(shot) as image:
        rgb = image.convert("RGB")
        assert rgb.size == (1200, 1600)
        colours = {c for _, c in rgb.getcolors(1 << 20)}
        # the all-pass cells' green and the no-pass cells' hatch are painted: the matrix is there
        assert any(abs(r - 0xd6) < 8 and abs(g - 0xf0) < 8 and abs(b - 0xd6) < 8 for r, g, b in colours)
        assert any(abs(r - 0xf4) < 8 and abs(g - 0xb6) < 8 and abs(b - 0xb6) < 8 for r, g, b in colours)
    print(f"screenshot: {shot}")


def test_a_reused_out_links_only_this_runs_pages(tmp_path):
    """A failing run, then an all-pass run into the same OUT: the earlier report folder is
    removed (OUT's manifest names it) and the overview, rewritten after that, links nothing
    of it; every file conform leaves in OUT is one its manifest names."""
    out = tmp_path / "out"
    common = ["conform", "--scenarios", "death-spiral", "--seeds", "1", "--jobs", "1", "--out", str(out)]

    def files_not_in_manifest():
        listed = {json.loads(line) for line in (out / MANIFEST).read_text().splitlines()}
        return {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - listed - {MANIFEST}
    assert main(common + ["--stacks", "x=oracle:idle=last-send"]) == 1
    assert 'href="report/x/findings/death-spiral-seed-0--' in (out / "index.html").read_text()
    assert (out / "report" / "x" / "index.html").is_file() and files_not_in_manifest() == set()
    assert main(common + ["--stacks", "x=oracle"]) == 0
    text = (out / "index.html").read_text()
    assert not (out / "report" / "x").exists() and "report/" not in text
    assert files_not_in_manifest() == set()


def test_labels_and_reasons_are_escaped(tmp_path):
    """A report name is the user's text: it reaches the page escaped, never as markup."""
    scenario = load_scenario("death-spiral").with_params(bytes=300_000)
    summary = run_conform(['"<i>&=oracle:idle=last-send'], [scenario], [0], str(tmp_path), jobs=1)
    write_outputs(summary, str(tmp_path))
    text = (tmp_path / "index.html").read_text()
    assert "<i>" not in text and "&#34;&lt;i&gt;&amp;" in text

"""`ccdiff coverage` (ccdiff/coverage.py): gcc --coverage build of a C stack's adapter in its
own folder, line and branch coverage of the controller's own files, uncovered ranges with
upstream permalinks, exit 2 with one line on bad input.  Runs on ngtcp2 with the two
example traces only (a few seconds once the coverage build exists)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("gcov") is None,
                                reason="needs gcc and gcov")


def _ccdiff(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env or os.environ, timeout=timeout)


def _function_lines(path: Path, name: str) -> range:
    """The lines of one C function definition in an upstream file (its name at column 0
    after the return type, up to the closing brace at column 0)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^\w.*\b{name}\(", line))
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return range(start + 1, end + 2)


@pytest.fixture(scope="module")
def ngtcp2_examples(tmp_path_factory):
    out = tmp_path_factory.mktemp("cov")
    normal = Path(os.environ.get("CCDIFF_BUILD_DIR", ROOT / "build")) / "ngtcp2" / "1.25.0" / "libccdiff_adapter.so"
    before = normal.stat().st_mtime_ns if normal.exists() else None
    result = _ccdiff("coverage", "ngtcp2", "--examples", "--json", str(out / "cov.json"), "--out", str(out / "o"))
    assert result.returncode == 0, result.stderr
    # the normal build is never the output location
    assert (normal.stat().st_mtime_ns if normal.exists() else None) == before
    return json.loads((out / "cov.json").read_text()), result, out


def test_reports_the_controller_files_with_numbers(ngtcp2_examples):
    doc, result, out = ngtcp2_examples
    assert set(doc["files"]) == {"lib/ngtcp2_cc.c", "lib/ngtcp2_rst.c"}
    assert doc["specs"] == ["ngtcp2@1.25.0:cc=cubic", "ngtcp2@1.25.0:cc=reno"]
    total = doc["totals"]["examples"]
    assert 0 < total["lines_covered"] < total["lines"] and 0 < total["line_pct"] < 100
    assert 0 < total["branches_covered"] < total["branches"]
    assert doc["runs"]["examples"]["runs"] == 2 * len(list((ROOT / "examples").glob("*.jsonl"))) and not doc["runs"]["examples"]["errors"]
    from ccdiff.coverage import coverage_dir
    from ccdiff.paths import build_dir
    assert Path(doc["build"]) == coverage_dir() / "ngtcp2" / "1.25.0" != build_dir() / "ngtcp2" / "1.25.0"
    assert Path(doc["build"], "libccdiff_adapter.so").exists()
    assert "lib/ngtcp2_cc.c" in result.stdout and "line% / branch%" in result.stdout
    assert (out / "o" / "coverage.md").read_text().startswith("# Coverage of ngtcp2")


def test_congestion_event_covered_and_reset_uncovered(ngtcp2_examples):
    doc, _, _ = ngtcp2_examples
    entry = doc["files"]["lib/ngtcp2_cc.c"]
    covered, uncovered = set(entry["covered_lines"]), set(entry["uncovered_lines"])
    src = Path(doc["build"]) / "src" / "ngtcp2-sys-0.2.0" / "deps" / "ngtcp2" / "lib" / "ngtcp2_cc.c"
    # death-spiral's losses run CUBIC's congestion event: recovery starts, a new epoch
    text = src.read_text().splitlines()
    event = _function_lines(src, "ngtcp2_cc_cubic_cc_congestion_event")
    key = [n for n in event if text[n - 1].strip() in ("cstat->congestion_recovery_start_ts = ts;",
                                                        "cubic->current.epoch_start = ts;")]
    assert len(key) == 2 and set(key) <= covered
    # cc->reset is called by ngtcp2_conn on a path change only: never from a ccdiff trace
    reset = set(_function_lines(src, "ngtcp2_cc_cubic_cc_reset")) & (covered | uncovered)
    assert reset and reset <= uncovered
    ranges = [r for r in entry["uncovered"] if r["function"] == "ngtcp2_cc_cubic_cc_reset"]
    assert ranges and ranges[0]["url"].startswith(
        "https://github.com/ngtcp2/ngtcp2/blob/f9e9ff01ad2c8116bc09de4f644b0028a61486a6/lib/ngtcp2_cc.c#L")


@pytest.mark.parametrize("args, needle", [
    (["nosuchstack"], "unknown stack"),
    (["ngtcp2", "--corpus", "/nonexistent-ccdiff-corpus"], "not a folder"),
    (["ngtcp2", "--examples", "--seeds", "2"], "--seeds applies to --scenarios"),
    (["oracle"], "oracle"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    result = _ccdiff("coverage", *args, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], result.stderr


def test_rust_without_matching_llvm_tools_is_one_clear_error(monkeypatch):
    from ccdiff import coverage
    from ccdiff.errors import SetupError
    monkeypatch.setattr(coverage.shutil, "which", lambda name: None)
    monkeypatch.setattr(coverage, "_rustup_tool", lambda name: None)
    with pytest.raises(SetupError, match=r"Rust coverage needs llvm-profdata and llvm-cov of rustc's LLVM \d+.*"
                                         r"apt-get install llvm-\d+"):
        coverage.rust_tools()


def test_seeds_out_of_range_is_a_usage_error():
    """Numeric bounds are checked by the parser, as for every command (NUMERIC_BOUNDS)."""
    result = _ccdiff("coverage", "ngtcp2", "--scenarios", "--seeds", "0", timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == \
        "ccdiff coverage: error: argument --seeds: 0 is out of range (expected between 1 and 100000)"


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios" / "coverage").glob("*.toml")), ids=lambda p: p.stem)
def test_coverage_only_scenarios_give_valid_traces(path):
    """scenarios/coverage/ is not in the catalog (test_sim walks that): the same check here."""
    from ccdiff.sim import load_scenario, simulate
    from ccdiff.trace import parse_trace_text
    scenario = load_scenario(str(path))
    scenario = scenario.with_params(bytes=min(scenario.bytes, 1_000_000))
    result = simulate(scenario, "oracle", 0)
    trace = parse_trace_text(result.trace_text(), path.stem)
    assert len(trace.events) == result.metrics["events"] > 0
    assert result.metrics["completion_us"] is not None


def test_coverage_only_scenarios_are_run_and_not_in_the_catalog():
    from ccdiff import coverage
    from ccdiff.sim import available_scenarios
    plan = coverage.plan(False, True, [], 1)["scenarios"]
    assert "satellite" not in available_scenarios()
    assert any(name.endswith("scenarios/coverage/satellite.toml") for name in plan["scenarios"])
    assert plan["seeds"] == [0]


def test_every_stack_names_its_controller_files():
    """Every stack folder (tests/test_adding_a_stack.py: a new one too) names its controller
    files in its coverage.toml, and a Rust stack the crates its fuzz builds instrument."""
    from ccdiff.coverage import controller_files, not_driven
    from ccdiff.stacks import load_recipes
    for name, recipe in load_recipes().items():
        files = controller_files(recipe)
        assert files and all(isinstance(f, str) and not f.startswith("/") for f in files), \
            f"{name}: controller_files in {recipe.folder / 'coverage.toml'}"
        assert all(isinstance(why, str) and why for why in not_driven(recipe).values()), name
        assert set(recipe.coverage) <= {"controller_files", "not_driven", "extracted_tree", "compiled_copies",
                                        "python_copies", "sancov_crates"}, name
        assert set(recipe.coverage.get("compiled_copies", {}).values()) <= set(files), name
        if recipe.language == "rust":
            assert "ccdiff_adapter" in recipe.coverage.get("sancov_crates", "").split(), name
        if recipe.language == "python":
            assert len(recipe.coverage.get("python_copies", ())) == 2, name


def _not_driven(stack: str) -> dict:
    from ccdiff.coverage import not_driven
    from ccdiff.stacks import load_recipes
    return not_driven(load_recipes()[stack])


def test_not_driven_functions_exist_and_stay_unrun(ngtcp2_examples):
    """A not_driven name that matches nothing (a typo, an upstream rename) would silently
    leave its lines in the driven totals."""
    doc, _, _ = ngtcp2_examples
    flagged = {r["function"] for e in doc["files"].values() for r in e["uncovered"] if r["not_driven"]}
    assert flagged == set(_not_driven("ngtcp2"))
    assert doc["driven"]["examples"]["lines"] < doc["totals"]["examples"]["lines"]


def _rust_tools_present() -> bool:
    from ccdiff.coverage import rust_tools
    from ccdiff.errors import SetupError
    try:
        rust_tools()
        return True
    except SetupError:
        return False


@pytest.mark.skipif(shutil.which("cargo") is None or not _rust_tools_present(),
                    reason="needs cargo and llvm-profdata/llvm-cov of rustc's LLVM (setup/debian-packages.txt)")
def test_rust_stack_line_coverage(tmp_path):
    """quinn through -C instrument-coverage: its congestion event runs on the examples, path MTU
    updates only with --all-options, and stable rustc gives no branch counters (n/a, not 100%)."""
    result = _ccdiff("coverage", "quinn", "--examples", "--json", str(tmp_path / "q.json"), timeout=600)
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "q.json").read_text())
    assert set(doc["files"]) == {"src/congestion/cubic.rs", "src/congestion/new_reno.rs"}
    entry = doc["files"]["src/congestion/cubic.rs"]
    src = next(Path(doc["build"], "src").glob("*/src/congestion/cubic.rs")).read_text().splitlines()
    event = next(n for n, line in enumerate(src, 1) if "fn on_congestion_event(" in line)
    key = [n for n in range(event, event + 40) if src[n - 1].strip() in
           ("self.recovery_start_time = Some(now);", "self.window = self.ssthresh;")]
    assert len(key) == 2 and set(key) <= set(entry["covered_lines"])
    mtu = [r for r in entry["uncovered"] if r["function"].endswith("::on_mtu_update")]
    assert mtu and not mtu[0]["not_driven"] and "src/congestion/cubic.rs#L" in mtu[0]["url"]
    assert doc["totals"]["examples"]["branch_pct"] is None and "n/a" in result.stdout
    # path MTU discovery is the adapter's mtu=discovered option on a trace whose datagrams
    # are larger than quinn's initial 1200: --all-options runs it
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    sim = _ccdiff("sim", str(ROOT / "scenarios" / "coverage" / "large-datagrams.toml"), "--set", "bytes=200000",
                  "--no-controls", "--trace", str(corpus / "large.jsonl"), timeout=120)
    assert sim.returncode == 0, sim.stderr
    more = _ccdiff("coverage", "quinn", "--corpus", str(corpus), "--all-options", "--json", str(tmp_path / "all.json"),
                   timeout=600)
    assert more.returncode == 0, more.stderr
    doc = json.loads((tmp_path / "all.json").read_text())
    assert "quinn@0.11.19:cc=reno,mtu=discovered" in doc["specs"]
    assert not any(r["function"].endswith("::on_mtu_update") for e in doc["files"].values() for r in e["uncovered"])


@pytest.fixture(scope="module")
def aioquic_examples(tmp_path_factory):
    """aioquic's coverage over the examples, in a coverage folder of its own under tmp."""
    out = tmp_path_factory.mktemp("pycov")
    normal = Path(os.environ.get("CCDIFF_BUILD_DIR", ROOT / "build")) / "aioquic" / "1.7.2" / "ccdiff_adapter.py"
    before = normal.stat().st_mtime_ns if normal.exists() else None
    env = dict(os.environ, CCDIFF_COVERAGE_BUILD_DIR=str(out / "cov"))
    result = _ccdiff("coverage", "aioquic", "--examples", "--json", str(out / "cov.json"), env=env)
    assert result.returncode == 0, result.stderr
    assert (normal.stat().st_mtime_ns if normal.exists() else None) == before
    return json.loads((out / "cov.json").read_text()), result


def test_python_stack_line_and_branch_coverage(aioquic_examples):
    """aioquic (in process) through coverage.py in the child: lines and branches of the
    pinned congestion modules, with upstream permalinks."""
    from ccdiff.coverage import default_traces
    doc, result = aioquic_examples
    congestion = "src/aioquic/quic/congestion/"
    assert set(doc["files"]) == {congestion + "cubic.py", congestion + "reno.py", congestion + "base.py"}
    assert doc["specs"] == ["aioquic@1.7.2:cc=cubic", "aioquic@1.7.2:cc=reno"]
    assert doc["runs"]["examples"]["runs"] == 2 * len(default_traces(ROOT / "examples"))
    assert not doc["runs"]["examples"]["errors"]
    total = doc["totals"]["examples"]
    assert 0 < total["lines_covered"] < total["lines"] and 0 < total["line_pct"] < 100
    assert 0 < total["branches_covered"] < total["branches"] and total["branch_pct"] is not None
    assert congestion + "cubic.py" in result.stdout and "line% / branch%" in result.stdout
    # death-spiral's losses start a congestion event in CUBIC: the reduction runs
    entry = doc["files"][congestion + "cubic.py"]
    src = (Path(doc["build"]) / "upstream" / "aioquic" / "quic" / "congestion" / "cubic.py").read_text().splitlines()
    lost = next(n for n, line in enumerate(src, 1) if "def on_packets_lost(" in line)
    key = [n for n in range(lost, lost + 40) if src[n - 1].strip() in
           ("self._congestion_recovery_start_time = now", "self.ssthresh = new_ssthresh")]
    assert len(key) == 2 and set(key) <= set(entry["covered_lines"])
    # the branch into the reduction was both taken and not taken somewhere
    assert not any(p["line"] == key[0] - 1 for p in entry["partial_branches"])
    # on_packets_expired is the PTO's, which only a lenient trace (an imported qlog) has: the
    # examples are strict, so it stays uncovered, driven (not in not_driven), linked upstream
    expired = [r for r in entry["uncovered"] if r["function"] == "CubicCongestionControl.on_packets_expired"]
    assert expired and not expired[0]["not_driven"]
    assert expired[0]["url"].startswith(
        "https://github.com/aiortc/aioquic/blob/1.7.2/src/aioquic/quic/congestion/cubic.py#L")


def test_python_not_driven_functions_exist_and_stay_unrun(aioquic_examples):
    doc, _ = aioquic_examples
    flagged = {r["function"] for e in doc["files"].values() for r in e["uncovered"] if r["not_driven"]}
    assert flagged == set(_not_driven("aioquic"))
    assert doc["driven"]["examples"]["lines"] < doc["totals"]["examples"]["lines"]


def test_python_coverage_without_coverage_py_is_one_clear_error(monkeypatch):
    from ccdiff import coverage
    from ccdiff.errors import SetupError
    monkeypatch.setitem(sys.modules, "coverage", None)     # `import coverage` raises ImportError
    with pytest.raises(SetupError, match=r"Python coverage needs the coverage package .*pip install"):
        coverage.coverage_module()
    # the version it names is the one the test extra pins
    assert f'"{coverage.PYCOV_PIN}"' in (ROOT / "pyproject.toml").read_text()


def test_linux_kernel_files_through_the_extracted_copies(tmp_path):
    """Linux's pinned source is a tarball: build.sh extracts the kernel files into the
    coverage folder and compiles copies (tcp_cubic.c whole, tcp_cong.c's Reno block);
    gcov's lines of the copies are reported at the kernel file's own line numbers."""
    env = dict(os.environ, CCDIFF_COVERAGE_BUILD_DIR=str(tmp_path / "cov"))
    result = _ccdiff("coverage", "linux", "--examples", "--json", str(tmp_path / "l.json"), env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "l.json").read_text())
    assert set(doc["files"]) == {"net/ipv4/tcp_cubic.c", "net/ipv4/tcp_cong.c"}
    assert not doc["runs"]["examples"]["errors"]
    total = doc["totals"]["examples"]
    assert 0 < total["lines_covered"] < total["lines"] and 0 < total["branches_covered"] < total["branches"]
    tree = next(Path(doc["build"], "work", "kernel").glob("linux-source-*"))
    cong = tree / "net" / "ipv4" / "tcp_cong.c"
    # the losses run CUBIC's ssthresh and Reno's, at the kernel files' own lines
    for rel, name in (("net/ipv4/tcp_cubic.c", "cubictcp_recalc_ssthresh"), ("net/ipv4/tcp_cong.c", "tcp_reno_ssthresh")):
        lines = _function_lines(tree / rel, name)
        assert set(lines) & set(doc["files"][rel]["covered_lines"]), name
    # lines of tcp_cong.c outside the compiled block are not instrumented at all
    outside = set(_function_lines(cong, "tcp_set_ca_state"))
    entry = doc["files"]["net/ipv4/tcp_cong.c"]
    assert not outside & (set(entry["covered_lines"]) | set(entry["uncovered_lines"]))
    undo = [r for r in entry["uncovered"] if r["function"] == "tcp_reno_undo_cwnd"]
    assert undo and undo[0]["not_driven"] and undo[0]["url"].startswith(
        "https://git.kernel.org/pub/scm/linux/kernel/git/stable/linux.git/tree/net/ipv4/tcp_cong.c?h=v6.12.117#n")
    flagged = {r["function"] for e in doc["files"].values() for r in e["uncovered"] if r["not_driven"]}
    assert flagged == set(_not_driven("linux"))

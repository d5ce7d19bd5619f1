"""The generated ngtcp2 test (ccdiff/report/unit_test.py ngtcp2_test) fails on the pinned
ngtcp2 1.25.0: its CUBIC counts an 8 s idle period towards t (RFC 9438 §4.2 MUST NOT), so
the first round trip after the idle grows cwnd past the bound (issue 15's must-show: one
`new` finding carried all the way).

The reproducer is fuzz/reproducers/ngtcp2-idle-inflation.jsonl (69 events, strict, with the
application's app_idle / app_data): shrunk from a hand-made trace with examples/idle-restart.jsonl's
shape (a cwnd-limited bulk into congestion avoidance, 8 s idle, bulk again); ddmin of the
example itself stops at 4033 events (docs/closed-loop-results.md).  The
generated function is what a maintainer pastes into tests/ngtcp2_cc_test.c; here it is
compiled with gcc against the pinned source ccdiff's build unpacked (the files
implementations/ngtcp2/build.sh compiles, with its generated version.h), with a three-line
stand-in for munit's assert_uint64 / assert_not_null (munit is a git submodule of ngtcp2,
not in the crate) and a main() that calls it.

Upstream master (checked at ngtcp2/ngtcp2@f3af8b14, docs/closed-loop-results.md) has the
same app-limited logic.  To run the generated test against any other ngtcp2 source tree (a
maintainer's checkout, master): `python3 tests/test_ngtcp2_unit_test.py TREE` (exit 1 while
the defect is there).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ccdiff.paths import build_dir
from ccdiff.report.unit_test import ngtcp2_test, ngtcp2_test_file
from ccdiff.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
REPRODUCER = ROOT / "fuzz" / "reproducers" / "ngtcp2-idle-inflation.jsonl"
TEST_NAME = "idle_inflation"
FUNCTION = "test_ngtcp2_cc_cubic_idle_inflation"
# implementations/ngtcp2/build.sh UPSTREAM: the controller, the rate sampler and what they link against.
SOURCES = ["ngtcp2_cc.c", "ngtcp2_rst.c", "ngtcp2_log.c", "ngtcp2_fmt.c", "ngtcp2_str.c", "ngtcp2_conv.c",
           "ngtcp2_vec.c", "ngtcp2_unreachable.c"]
MUNIT = r"""#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
/* munit's assertions, as ngtcp2's tests use them (tests/munit/munit.h). */
#define assert_uint64(a, op, b) do { uint64_t a_ = (a), b_ = (b); if (!(a_ op b_)) { \
  fprintf(stderr, "%s:%d: assertion failed: %s %s %s (%" PRIu64 " %s %" PRIu64 ")\n", \
          __FILE__, __LINE__, #a, #op, #b, a_, #op, b_); exit(1); } } while (0)
#define assert_not_null(p) do { if ((p) == NULL) { \
  fprintf(stderr, "assertion failed: %s != NULL\n", #p); exit(1); } } while (0)
"""


def pinned_tree() -> tuple:
    """(lib/ of ngtcp2 1.25.0 as ccdiff's build unpacked it, the folder holding ngtcp2/version.h)."""
    out = build_dir() / "ngtcp2" / "1.25.0"
    lib = out / "src" / "ngtcp2-sys-0.2.0" / "deps" / "ngtcp2" / "lib"
    gen = out / "gen"
    if not (lib / "ngtcp2_cc.c").exists() or not (gen / "ngtcp2" / "version.h").exists():
        pytest.skip(f"ngtcp2 1.25.0 is not built under {out} (ccdiff build ngtcp2@1.25.0)")
    return lib, gen


def compile_and_run(source: str, lib: Path, gen: Path, work: Path) -> subprocess.CompletedProcess:
    c_file = work / "ngtcp2_cc_ccdiff_test.c"
    c_file.write_text(MUNIT + ngtcp2_test_file(source) +
                      f"\nint main(void) {{\n  {FUNCTION}();\n  puts(\"{FUNCTION}: passed\");\n  return 0;\n}}\n")
    exe = work / "ngtcp2_cc_ccdiff_test"
    build = subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O1", "-Wall", "-Werror", "-DNGTCP2_STATICLIB",
                            f"-I{gen}", f"-I{lib / 'includes'}", f"-I{lib}", str(c_file),
                            *[str(lib / name) for name in SOURCES], "-lm", "-o", str(exe)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def generated() -> str:
    trace = load_trace(str(REPRODUCER))
    return ngtcp2_test(trace, "idle-inflation", TEST_NAME,
                       "ccdiff: idle-inflation, minimized from examples/idle-restart.jsonl")


def test_the_reproducer_is_strict_and_small():
    trace = load_trace(str(REPRODUCER))
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "validate", str(REPRODUCER)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "strict" in proc.stdout
    assert len(trace.events) <= 69
    assert any(type(ev).__name__ == "AppIdle" for ev in trace.events), "the write call that finds no data"


def test_the_generated_c_test_is_an_ngtcp2_munit_test(generated):
    assert f"void {FUNCTION}(void) {{" in generated
    assert "ngtcp2_cc_cubic_init(&cubic, &log, &cstat, &rst);" in generated
    assert "cc->on_ack_recv(cc, &cstat, &ack, ts);" in generated
    assert "assert_uint64(cstat.cwnd, <=, " in generated


def test_the_generated_c_test_fails_on_ngtcp2_1_25_0(generated, tmp_path):
    lib, gen = pinned_tree()
    proc = compile_and_run(generated, lib, gen, tmp_path)
    assert proc.returncode != 0, proc.stdout
    # After the 8 s idle, the first round trip takes cwnd past the bound (RFC 9438 §4.2).
    # The driver reproduces ccdiff's replay exactly: 6880 -> 14080 over 14400 bytes acked (0.5 per
    # byte: the target is capped at 1.5 cwnd, W_cubic(t) with t = 8 s is off the curve), where
    # 2 x max(pre-idle rate 0.108, Reno rate 1200/6880) + 0.05 per byte allows 12624.
    assert "assertion failed: cstat.cwnd <= 12624 (14080 <= 12624)" in proc.stderr, proc.stderr
    assert "passed" not in proc.stdout


def test_the_finding_page_is_new_with_the_stored_reproducer_and_the_c_test(tmp_path):
    """`ccdiff replay examples/idle-restart.jsonl --stack oracle --stack ngtcp2 --report DIR`:
    finding.md starts with status `new`, and -- the example is too long to shrink while the
    report is written -- carries the committed reproducer and the C test generated from it."""
    import json
    from ccdiff.build import ensure_built
    from ccdiff.cli import main
    pinned_tree()
    ensure_built("ngtcp2@1.25.0")
    findings, out = tmp_path / "findings.json", tmp_path / "report"
    assert main(["replay", str(ROOT / "examples" / "idle-restart.jsonl"), "--stack", "oracle", "--stack",
                 "ngtcp2@1.25.0", "--json", str(findings), "--report", str(out)]) == 1
    doc = json.loads(findings.read_text())
    idle = [f for f in doc["findings"] if f["invariant"] == "idle-inflation"]
    assert idle and idle[0]["upstream_status"] == "new"
    pages = [p for p in out.rglob("finding.md") if "idle-inflation" in str(p)]
    assert pages, sorted(str(p) for p in out.rglob("*"))
    text = pages[0].read_text()
    assert "reproducer `fuzz/reproducers/ngtcp2-idle-inflation.jsonl` shows the finding in 69 events" in text
    assert "### As a test for ngtcp2's own suite" in text
    assert f"void {FUNCTION}(void) {{" in text and "```c" in text


if __name__ == "__main__":
    # python3 tests/test_ngtcp2_unit_test.py TREE: the generated test compiled against TREE/lib
    # (version.h from ccdiff's 1.25.0 build: it only names a version).  Exit 1 while it fails.
    tree = Path(sys.argv[1])
    _, version_h = pinned_tree()
    source = ngtcp2_test(load_trace(str(REPRODUCER)), "idle-inflation", TEST_NAME,
                         "ccdiff: idle-inflation, minimized from examples/idle-restart.jsonl")
    with tempfile.TemporaryDirectory() as work:
        proc = compile_and_run(source, tree / "lib", version_h, Path(work))
    sys.stdout.write(proc.stdout + proc.stderr)
    sys.exit(0 if proc.returncode == 0 else 1)

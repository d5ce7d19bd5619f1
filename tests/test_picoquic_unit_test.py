"""The generated picoquic test (ccdiff/report/picoquic_test.py) fails on the pinned picoquic
1.1.53.0: after 17 s of idle its CUBIC sets cwin to W_cubic(t) with t counted from the start
of the idle period and no 1.5 x cwnd cap on the target (cubic.c:287-307), 11,759 -> 1,798,021
bytes on one 1,200-byte ACK, where RFC 9438 §4.4 ("cwnd MUST be incremented by (target -
cwnd)/cwnd for each received new ACK", target at most 1.5 cwnd, §4.2) allows half a byte per
byte acknowledged.

The reproducer is fuzz/reproducers/picoquic-idle-uncapped-wcubic.jsonl (6 events, strict,
found by ccdiff fuzz).  The generated function is what a maintainer adds to picoquictest/
(an `int NAME_test(void)` returning -1 on failure); here it is compiled with gcc against the
pinned source ccdiff's build unpacked (cubic.c, newreno.c, cc_common.c, pacing.c, frames.c:
the files implementations/picoquic/build.sh compiles), with a main() that calls it.  No
release fixes it (the reproducer's header: still so on master d199d45b), so there is no
passing build to compare with.

To run it against another picoquic tree (a maintainer's checkout):
`python3 tests/test_picoquic_unit_test.py TREE` (exit 1 while the defect is there).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ccdiff.paths import build_dir
from ccdiff.report.picoquic_test import picoquic_test, picoquic_test_file
from ccdiff.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
REPRODUCER = ROOT / "fuzz" / "reproducers" / "picoquic-idle-uncapped-wcubic.jsonl"
FUNCTION = "ccdiff_ca_growth_bound_test"
SOURCES = ["cubic.c", "newreno.c", "cc_common.c", "pacing.c", "frames.c"]
MAIN = f"""
/* quicctx.c's, called by pacing.c only with a path-quality callback (never here). */
void picoquic_refresh_path_quality_thresholds(picoquic_path_t* path_x) {{ (void)path_x; }}

int main(void)
{{
  int ret = {FUNCTION}();
  puts(ret == 0 ? "{FUNCTION}: passed" : "{FUNCTION}: failed");
  return ret == 0 ? 0 : 1;
}}
"""


def pinned_tree() -> Path:
    """The picoquic/ folder of 1.1.53.0 as ccdiff's build unpacked it (the aiopquic sdist)."""
    folder = build_dir() / "picoquic" / "1.1.53.0" / "src" / "aiopquic-0.6.1" / "third_party" / "picoquic"
    if not (folder / "picoquic" / "cubic.c").exists():
        pytest.skip(f"picoquic 1.1.53.0 is not built under {build_dir()} (ccdiff build picoquic@1.1.53.0)")
    return folder


def compile_and_run(source: str, tree: Path, work: Path) -> subprocess.CompletedProcess:
    pq = tree / "picoquic"
    c_file = work / "ccdiff_cc_test.c"
    c_file.write_text(picoquic_test_file(source) + MAIN)
    exe = work / "ccdiff_cc_test"
    includes = [f"-I{pq}"] + ([f"-I{tree.parent / 'picotls' / 'include'}"]
                              if (tree.parent / "picotls" / "include").is_dir() else [])
    # The generated file warning-free; picoquic's own files as its build compiles them.
    strict = subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", *includes, "-c", str(c_file),
                             "-o", str(work / "ccdiff_cc_test.o")], capture_output=True, text=True, timeout=600)
    assert strict.returncode == 0, strict.stderr[-3000:]
    build = subprocess.run(["gcc", "-std=gnu11", "-O1", "-w", "-ffunction-sections", "-fdata-sections", *includes,
                            str(work / "ccdiff_cc_test.o"), *[str(pq / name) for name in SOURCES],
                            "-Wl,--gc-sections", "-lm", "-o", str(exe)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)


def generate() -> str:
    return picoquic_test(load_trace(str(REPRODUCER)), "ca-growth-bound", "ccdiff_ca_growth_bound",
                         "ccdiff: ca-growth-bound after idle, fuzz/reproducers/picoquic-idle-uncapped-wcubic.jsonl")


def test_the_generated_c_test_is_a_picoquictest_function():
    source = generate()
    assert f"int {FUNCTION}(void)" in source
    assert "alg->alg_notify(cnx, path, picoquic_congestion_notification_acknowledgement, &st, now);" in source
    assert "RFC 9438 §4.4: \"In this region, cwnd MUST be incremented by" in source


def test_the_generated_c_test_fails_on_picoquic_1_1_53_0(tmp_path):
    proc = compile_and_run(generate(), pinned_tree(), tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # The first ACK after 17 s of idle: exactly ccdiff's replay of the adapter (11,759 -> 1,798,021).
    assert ("event 5 (t = 17235463 us): congestion avoidance grew cwin 11759 -> 1798021 on 1200 bytes "
            "acknowledged (at most 600 + 1200)") in proc.stderr, proc.stderr
    assert f"{FUNCTION}: failed" in proc.stdout


def test_the_same_driver_passes_without_the_idle(tmp_path):
    """The control: the same trace with the application's 17 s pause cut to 10 ms shows no
    violation, and the generated test of it (the check at every ACK in congestion avoidance)
    passes on the same picoquic: the failure above is the idle's, not the driver's."""
    import json
    lines = REPRODUCER.read_text().splitlines()
    shift = 17_225_463 - 235_463
    out = [lines[0]]
    for line in lines[1:]:
        ev = json.loads(line)
        if ev["t"] >= 17_225_463:
            ev["t"] -= shift
        out.append(json.dumps(ev))
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(out) + "\n")
    trace = load_trace(str(short))
    from ccdiff.replay import replay
    assert not [v for v in replay(trace, ["picoquic"]).violations if v.invariant == "ca-growth-bound"]
    from ccdiff.report.unit_test import NotExpressible
    with pytest.raises(NotExpressible, match="shows no ca-growth-bound"):
        picoquic_test(trace, "ca-growth-bound", "ccdiff_ca_growth_bound")
    source = picoquic_test(trace, "ca-growth-bound", "ccdiff_ca_growth_bound", require_violation=False)
    assert "CCDIFF_CA" in source
    proc = compile_and_run(source, pinned_tree(), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{FUNCTION}: passed" in proc.stdout


def test_the_finding_md_carries_the_c_test(tmp_path):
    """`ccdiff replay REPRODUCER --stack picoquic --report DIR`: the new ca-growth-bound report
    has the generated test under "As a test for picoquic's own suite"."""
    from ccdiff.cli import main
    out = tmp_path / "report"
    assert main(["replay", str(REPRODUCER), "--stack", "picoquic@1.1.53.0", "--report", str(out)]) == 1
    pages = [p for p in out.rglob("finding.md") if "ca-growth-bound" in str(p)]
    assert len(pages) == 1, sorted(str(p) for p in out.rglob("finding.md"))
    text = pages[0].read_text()
    assert "### As a test for picoquic's own suite" in text
    assert f"int {FUNCTION}(void)" in text and "```c" in text


if __name__ == "__main__":
    # python3 tests/test_picoquic_unit_test.py TREE: TREE holds picoquic/cubic.c.  Exit 1 while it fails.
    with tempfile.TemporaryDirectory() as work:
        proc = compile_and_run(generate(), Path(sys.argv[1]), Path(work))
    sys.stdout.write(proc.stdout + proc.stderr)
    sys.exit(0 if proc.returncode == 0 else 1)

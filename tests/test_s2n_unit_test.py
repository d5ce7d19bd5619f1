"""The generated s2n-quic test (ccdiff/report/s2n_test.py) fails on s2n-quic-core 0.91.0, the
pinned release: after 596 ms of idle its CUBIC's first round trip grows the window 8,400 ->
11,400 bytes, where RFC 9438 §4.2 ("The elapsed time t in Figure 1 MUST NOT include periods
during which cwnd has not been updated due to application-limited behavior") keeps it near the
pre-idle rate (0 per byte: the sender was app-limited); ccdiff's bound allows 10,800.

The reproducer is fuzz/reproducers/s2n-quic-idle-inflation.jsonl (strict, from s2n-quic's own
closed loop on idle-restart).  The generated #[test] is what a maintainer appends to
s2n-quic-core's src/recovery/cubic/tests.rs; here it is appended there in a copy of the crate
as ccdiff's build unpacked it (sha256-checked) and run with
`cargo test --lib --features testing` (s2n's own test configuration).  Cached under
build/s2n-quic-unit-tests/ (one cargo build: about 1.5 minutes the first time).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ccdiff.paths import build_dir
from ccdiff.report.s2n_test import s2n_test
from ccdiff.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
REPRODUCER = ROOT / "fuzz" / "reproducers" / "s2n-quic-idle-inflation.jsonl"
VERSION = "0.91.0"
TEST_NAME = "ccdiff_idle_inflation"


def pinned_crate() -> Path:
    crate = build_dir() / "s2n-quic" / VERSION / "src" / f"s2n-quic-core-{VERSION}"
    if not (crate / "src" / "recovery" / "cubic" / "tests.rs").exists():
        pytest.skip(f"s2n-quic {VERSION} is not built under {build_dir()} (ccdiff build s2n-quic@{VERSION})")
    return crate


def generate() -> str:
    return s2n_test(load_trace(str(REPRODUCER)), "idle-inflation", TEST_NAME,
                    "ccdiff: idle-inflation, fuzz/reproducers/s2n-quic-idle-inflation.jsonl")


def test_the_generated_rust_test_fails_on_s2n_quic_0_91_0():
    source = generate()
    assert f"fn {TEST_NAME}() {{" in source
    assert "cc.on_ack(largest_sent, total, (), &rtt, &mut random, now, &mut publisher);" in source
    work = build_dir() / "s2n-quic-unit-tests"
    work.mkdir(parents=True, exist_ok=True)
    tree = work / f"s2n-quic-core-{VERSION}"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(pinned_crate(), tree)
    tests = tree / "src" / "recovery" / "cubic" / "tests.rs"
    tests.write_text(tests.read_text() + "\n" + source)
    env = dict(os.environ, CARGO_TARGET_DIR=str(work / "target"), RUST_BACKTRACE="0")
    proc = subprocess.run(["cargo", "test", "--lib", "--features", "testing", TEST_NAME], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=3000)
    output = proc.stdout + proc.stderr
    assert f"test recovery::cubic::tests::{TEST_NAME} ..." in output, output[-3000:]
    assert proc.returncode != 0, output[-3000:]
    # The first round trip after the idle: ccdiff's replay of the adapter, exactly (8400 -> 11400).
    assert ("event 23 (t = 2042688 us): cwnd 11400 after the first round trip after the idle, above 10800 "
            "(RFC 9438 §4.2: t excludes the idle period)") in output, output[-3000:]


def test_the_finding_md_carries_the_rust_test(tmp_path):
    from ccdiff.cli import main
    pinned_crate()
    out = tmp_path / "report"
    assert main(["replay", str(REPRODUCER), "--stack", f"s2n-quic@{VERSION}", "--report", str(out)]) == 1
    pages = [p for p in out.rglob("finding.md") if "idle-inflation" in str(p)]
    assert len(pages) == 1, sorted(str(p) for p in out.rglob("finding.md"))
    text = pages[0].read_text()
    assert "### As a test for s2n-quic's own suite" in text
    assert f"fn {TEST_NAME}() {{" in text and "```rust" in text

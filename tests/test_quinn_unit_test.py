"""The generated quinn test (ccdiff/report/quinn_test.py) fails on quinn-proto 0.11.19, the
pinned release: its Cubic counts an idle period towards t (RFC 9438 §4.2: "The elapsed time t
in Figure 1 MUST NOT include periods during which cwnd has not been updated due to
application-limited behavior"): app_limited only skips growth while the connection is idle,
and recovery_start_time -- Cubic's epoch -- stays where it was, so the first round trip after
the idle grows the window past the bound.

The reproducer is fuzz/reproducers/quinn-idle-inflation.jsonl (17 events, strict, from quinn's
own closed loop on idle-restart).  The generated #[test] is what a maintainer pastes into the
`tests` module of src/congestion/cubic.rs; here it is appended there in a copy of the crate as
ccdiff's build unpacked it (sha256-checked, without ccdiff's RttEstimator facade: the test is
inside the crate and uses RttEstimator::new / update directly) and run with
`cargo test --no-default-features --lib` (no TLS provider).  Dev-dependencies that only the
TLS-gated tests use (rcgen, tracing-subscriber, wasm-bindgen-test, lazy_static) are dropped
from the copy's Cargo.toml, so the build needs no aws-lc / ring; nothing the test or the
congestion code compiles is touched.  Cached under build/quinn-unit-tests/ (one cargo build;
minutes the first time).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ccdiff.paths import build_dir
from ccdiff.report.quinn_test import quinn_test
from ccdiff.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
REPRODUCER = ROOT / "fuzz" / "reproducers" / "quinn-idle-inflation.jsonl"
VERSION = "0.11.19"
TEST_NAME = "ccdiff_idle_inflation"
TLS_ONLY_DEV_DEPS = ("rcgen", "tracing-subscriber", "wasm-bindgen-test", "lazy_static")


def pinned_crate() -> Path:
    crate = build_dir() / "quinn" / VERSION / "src" / f"quinn-proto-{VERSION}"
    if not (crate / "src" / "congestion" / "cubic.rs").exists():
        pytest.skip(f"quinn {VERSION} is not built under {build_dir()} (ccdiff build quinn@{VERSION})")
    return crate


def without_tls_dev_deps(manifest: str) -> str:
    """Cargo.toml without the [dev-dependencies.X] tables of TLS_ONLY_DEV_DEPS."""
    for name in TLS_ONLY_DEV_DEPS:
        manifest = re.sub(r"\n\[dev-dependencies\.%s\]\n(?:(?!\n\[).)*" % re.escape(name), "\n", manifest,
                          flags=re.S)
    return manifest


def with_test(crate: Path, test: str, into: Path) -> Path:
    tree = into / f"quinn-proto-{VERSION}"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(crate, tree)
    manifest = tree / "Cargo.toml"
    manifest.write_text(without_tls_dev_deps(manifest.read_text()))
    cubic = tree / "src" / "congestion" / "cubic.rs"
    text = cubic.read_text()
    end = text.rstrip().rindex("}")          # the closing brace of `mod tests`
    cubic.write_text(text[:end] + "\n" + test + text[end:])
    return tree


def generate() -> str:
    return quinn_test(load_trace(str(REPRODUCER)), "idle-inflation", TEST_NAME,
                      "ccdiff: idle-inflation, fuzz/reproducers/quinn-idle-inflation.jsonl")


def test_the_tls_only_dev_dependencies_are_the_only_cut():
    manifest = (pinned_crate() / "Cargo.toml").read_text()
    cut = without_tls_dev_deps(manifest)
    for name in TLS_ONLY_DEV_DEPS:
        assert f"[dev-dependencies.{name}]" in manifest and f"[dev-dependencies.{name}]" not in cut
    assert "[dev-dependencies.assert_matches]" in cut and "[dev-dependencies.hex-literal]" in cut
    assert "[dependencies.rustc-hash]" in cut or cut.count("[dependencies.") == manifest.count("[dependencies.")


def test_the_generated_rust_test_fails_on_quinn_0_11_19():
    source = generate()
    assert f"fn {TEST_NAME}() {{" in source and "cc.on_end_acks(now, remaining, app_limited, largest_acked);" in source
    work = build_dir() / "quinn-unit-tests"
    work.mkdir(parents=True, exist_ok=True)
    tree = with_test(pinned_crate(), source, work)
    env = dict(os.environ, CARGO_TARGET_DIR=str(work / "target"), RUST_BACKTRACE="0")
    proc = subprocess.run(["cargo", "test", "--no-default-features", "--lib", TEST_NAME], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=3000)
    output = proc.stdout + proc.stderr
    assert f"test congestion::cubic::tests::{TEST_NAME} ..." in output, output[-3000:]
    assert proc.returncode != 0, output[-3000:]
    # The first round trip after the idle: ccdiff's replay of the adapter, exactly.
    assert ("event 16 (t = 2043840 us): cwnd 12840 after the first round trip after the idle, above 11640 "
            "(RFC 9438 §4.2: t excludes the idle period)") in output, output[-3000:]


def test_the_finding_md_carries_the_rust_test(tmp_path):
    """`ccdiff replay REPRODUCER --stack quinn --report DIR`: the idle-inflation report has the
    generated test under "As a test for quinn's own suite"."""
    from ccdiff.cli import main
    pinned_crate()
    out = tmp_path / "report"
    assert main(["replay", str(REPRODUCER), "--stack", f"quinn@{VERSION}", "--report", str(out)]) == 1
    pages = [p for p in out.rglob("finding.md") if "idle-inflation" in str(p)]
    assert len(pages) == 1, sorted(str(p) for p in out.rglob("finding.md"))
    text = pages[0].read_text()
    assert "### As a test for quinn's own suite" in text
    assert f"fn {TEST_NAME}() {{" in text and "```rust" in text

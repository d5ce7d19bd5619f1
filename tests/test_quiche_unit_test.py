"""The generated quiche test (ccdiff/report/unit_test.py) runs in quiche's own test suite:
it fails on quiche 0.26.0, whose CUBIC pushes the recovery start into the future (the death
spiral), and passes on 0.26.1, which fixed it (issue 15's must-show).

Both releases come from crates.io, sha256-checked (0.26.0 as ccdiff's build fetches it,
0.26.1 against the crates.io index's cksum below); the generated test is appended to the
`tests` module of src/recovery/congestion/cubic.rs and run with `cargo test`.

quiche's own test binary links its TLS layer, which needs BoringSSL: the default feature
`boringssl-vendored` builds it with cmake (not installed here, and minutes per release),
and without a TLS feature the link fails on the BoringSSL functions quiche declares
(SSL_*, EVP_*, RAND_bytes, ...).  The congestion tests never use TLS, but TestSender::new
builds a Config, whose constructor creates an SSL_CTX: so every declared BoringSSL function
is linked as a stub returning 1 (non-NULL for a pointer, success for BoringSSL's int
results; tls_stubs below).  Every line of congestion code the test runs is quiche's own.
Builds are cached under build/quiche-unit-tests/.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

import pytest

from ccdiff.build import _check_member
from ccdiff.paths import build_dir
from ccdiff.report.unit_test import quiche_test
from ccdiff.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
CRATES = {   # version -> sha256 (crates.io index "cksum"; 0.26.0 is implementations/quiche/stack.toml's)
    "0.26.0": None,
    "0.26.1": "c24cee496cc37e2a86c95013008fe59378f4ddc1172dcf60e44e1eef7c35c8e7",
}
TEST_NAME = "ccdiff_future_recovery_start"


def pinned_sha256(version: str) -> str:
    import tomllib
    stack = tomllib.loads((ROOT / "implementations" / "quiche" / "stack.toml").read_text())
    return next(v["sha256"] for v in stack["versions"] if v["version"] == version)


def unpacked(version: str, into: Path) -> Path:
    """quiche-VERSION unpacked from its crates.io crate, sha256-checked."""
    crate = into / f"quiche-{version}.crate"
    if not crate.exists():
        with urllib.request.urlopen(f"https://static.crates.io/crates/quiche/quiche-{version}.crate",
                                    timeout=120) as response:
            crate.write_bytes(response.read())
    want = CRATES[version] or pinned_sha256(version)
    assert hashlib.sha256(crate.read_bytes()).hexdigest() == want, f"{crate}: sha256 mismatch"
    tree = into / f"quiche-{version}"
    shutil.rmtree(tree, ignore_errors=True)
    unpack_crate(crate, into)
    return tree


def unpack_crate(crate: Path, into: Path) -> None:
    """As ccdiff's build unpacks: the "data" filter where this python has it (3.11.4+), the
    same checks by hand on Debian bookworm's 3.11.2 (docker/bare-check.sh runs that one)."""
    with tarfile.open(crate) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:
            for member in tar.getmembers():
                _check_member(crate, member)
            tar.extractall(into)


def with_test(tree: Path, test: str) -> None:
    """Append the test to the end of cubic.rs's `mod tests` (the file's last closing brace)."""
    cubic = tree / "src" / "recovery" / "congestion" / "cubic.rs"
    text = cubic.read_text()
    end = text.rstrip().rindex("}")
    cubic.write_text(text[:end] + "\n" + test + text[end:])


def extern_functions(text: str) -> set:
    """Names of the functions declared in `extern "C" { ... }` blocks of a Rust file."""
    names = set()
    for match in re.finditer(r'extern\s+"C"\s*\{', text):
        depth, i = 1, match.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        names |= set(re.findall(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(", text[match.end():i]))
    return names


def tls_stubs(trees: list, work: Path) -> Path:
    """One object defining every C function the quiche trees declare (their BoringSSL imports),
    each returning 1.  One path for every release, so RUSTFLAGS -- and with them cargo's
    cache of the dependencies -- stay the same from one release to the next."""
    names = set()
    for tree in trees:
        for rs in sorted((tree / "src").rglob("*.rs")):
            names |= extern_functions(rs.read_text())
    assert {"SSL_new", "RAND_bytes"} <= names, "quiche declares its BoringSSL imports in extern blocks"
    source = work / "tls-stubs.c"
    source.write_text("#include <stdlib.h>\n" + "".join(f"long {n}(void) {{ return 1; }}\n" for n in sorted(names)))
    obj = source.with_suffix(".o")
    subprocess.run(["cc", "-c", "-fPIC", str(source), "-o", str(obj)], check=True)
    return obj


def cargo_test(tree: Path, target: Path, stubs: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, CARGO_TARGET_DIR=str(target), RUSTFLAGS=f"-C link-arg={stubs}", RUST_BACKTRACE="0")
    return subprocess.run(["cargo", "test", "--no-default-features", "--lib", TEST_NAME],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=3000)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("min") / "min.jsonl"
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "minimize", "examples/death-spiral.jsonl", "--stack",
                           "quiche@0.26.0", "--invariant", "future-recovery-start", "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return quiche_test(load_trace(str(out)), "future-recovery-start", TEST_NAME, "ccdiff: the death spiral")


@pytest.fixture(scope="module")
def trees(generated) -> dict:
    """Both releases unpacked, the generated test appended, and the TLS stubs built."""
    work = build_dir() / "quiche-unit-tests"
    work.mkdir(parents=True, exist_ok=True)
    unpacked_trees = {version: unpacked(version, work) for version in CRATES}
    for tree in unpacked_trees.values():
        with_test(tree, generated)
    return {"work": work, "trees": unpacked_trees, "stubs": tls_stubs(list(unpacked_trees.values()), work)}


@pytest.mark.parametrize("version, fails", [("0.26.0", True), ("0.26.1", False)])
def test_the_generated_rust_test_fails_on_0_26_0_and_passes_on_0_26_1(trees, version, fails):
    proc = cargo_test(trees["trees"][version], trees["work"] / "target", trees["stubs"])
    output = proc.stdout + proc.stderr
    assert f"test recovery::congestion::cubic::tests::{TEST_NAME} ..." in output, output[-3000:]
    if fails:
        # The send after the drained pipe: quiche 0.26.0 moves the recovery start 10 ms ahead.
        assert proc.returncode != 0
        assert "event 4 (t = 50600 us): recovery start Some(10ms) after now" in output
    else:
        assert proc.returncode == 0, output[-3000:]
        assert "1 passed" in output

"""What the fuzzer image relies on (docker/Dockerfile target `fuzzer`, docker/build-fuzz.py):
the harnesses it pre-builds are found without writing, a missing one is a clear setup
error, and the build script picks the right targets and keeps the right files.  The image
itself (read-only root file system, two workers) is checked by docker/ci.sh."""
import importlib.util
import subprocess
import sys
import json
import os
from pathlib import Path

import pytest

from ccdiff.build import recipe_digest
from ccdiff.errors import SetupError
from ccdiff.fuzzing import harness as harness_module
from ccdiff.stacks import load_recipes, resolve

ROOT = Path(__file__).resolve().parent.parent


def load_build_fuzz():
    spec = importlib.util.spec_from_file_location("build_fuzz", ROOT / "docker" / "build-fuzz.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_targets_expand_to_pinned_versions():
    build_fuzz = load_build_fuzz()
    pinned = [f"{r.name}@{v}" for r in load_recipes().values() for v in r.versions]
    assert build_fuzz.targets(["all"]) == pinned
    quiche = [f"quiche@{v}" for v in load_recipes()["quiche"].versions]
    assert len(quiche) >= 2
    assert build_fuzz.targets(["quiche", "quiche@0.26.0"]) == quiche     # deduplicated, in order


def test_clean_keeps_libraries_harnesses_and_stamps(tmp_path):
    build_fuzz = load_build_fuzz()
    keep = ["quiche/0.26.0/sancov/libccdiff_adapter.so", "quiche/0.26.0/sancov/harness-afl",
            "quiche/0.26.0/sancov/harness-afl.json", "quiche/0.26.0/sancov/build-knobs.json",
            "ngtcp2/1.25.0/build-info.json", "tools/honggfuzz/src/x.c"]          # not a stack: untouched
    scratch = ["quiche/0.26.0/src/quiche-0.26.0/Cargo.toml", "quiche/0.26.0/sancov/target/x",
               "quiche/0.26.0/sancov/work/stage/y", "ngtcp2/1.25.0/gen/z.h"]
    for rel in keep + scratch:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    build_fuzz.clean(tmp_path)
    assert all((tmp_path / rel).exists() for rel in keep)
    assert not any((tmp_path / rel).exists() for rel in scratch)


def test_prebuilt_harness_is_used_without_building(tmp_path, monkeypatch):
    """The stamps of a finished build are all harness() looks at: no compiler runs (the
    fake library and executable would not survive a rebuild's checks otherwise)."""
    monkeypatch.setenv("CCDIFF_FUZZ_BUILD_DIR", str(tmp_path))
    target = resolve("quiche@0.26.0")
    out = tmp_path / "quiche" / "0.26.0" / "sancov-afl"   # AFL++'s Rust build (no trace-compares)
    out.mkdir(parents=True)
    (out / "libccdiff_adapter.so").write_text("prebuilt")
    knobs = {"CCDIFF_SANITIZE": "0",
             "RUSTFLAGS": harness_module.sancov_cfg("quiche ccdiff_adapter", harness_module.RUST_SANCOV_AFL),
             "CCDIFF_SANCOV_RUSTFLAGS": harness_module.RUST_SANCOV_AFL, "CCDIFF_SANCOV_CRATES": "quiche ccdiff_adapter",
             "CARGO_BUILD_TARGET": "x86_64-unknown-linux-gnu", "recipe": recipe_digest(target.recipe)}
    (out / "build-knobs.json").write_text(json.dumps(knobs, sort_keys=True))
    driver = harness_module.driver_dir()
    sources = [driver / s for s in harness_module.STAMP_SOURCES]
    stamp = {"library": str(out / "libccdiff_adapter.so"), "sources": {s.name: s.stat().st_mtime_ns for s in sources},
             "recipe": harness_module.HARNESS_RECIPE}
    (out / "harness-afl").write_text("prebuilt")
    (out / "harness-afl.json").write_text(json.dumps(stamp))
    (tmp_path / ".lock").write_text("")
    monkeypatch.setattr(harness_module, "_run", lambda *a, **k: pytest.fail("harness() tried to build"))
    assert harness_module.harness(target, "afl") == out / "harness-afl"


def test_missing_harness_in_an_unwritable_folder_is_a_setup_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("CCDIFF_FUZZ_BUILD_DIR", str(blocker / "fuzz"))     # mkdir fails: ENOTDIR
    with pytest.raises(SetupError, match="afl harness for quiche@0.26.0 is not built and cannot be built"):
        harness_module.harness(resolve("quiche@0.26.0"), "afl")
    assert os.listdir(tmp_path) == ["a-file"]


def test_workers_finishing_together_write_one_whole_report(tmp_path):
    """Scaled workers end at the same moment and each writes FINDINGS/<stack>/report: one at
    a time, so neither fails on the other's half-written folder (compose hit exactly that)."""
    from ccdiff.fuzzing.triage import Triage
    reproducer = ROOT / "fuzz" / "reproducers" / "quiche-future-recovery-start.bin"
    triage = Triage(tmp_path, "quiche@0.26.0", "quiche@0.26.0")
    assert len(triage.add_input(reproducer.read_bytes(), "afl")) == 1
    script = ("import sys; from pathlib import Path; from ccdiff.fuzzing.conclude import write_report as _report; "
              "from ccdiff.fuzzing.triage import Triage; "
              "_report(Triage(Path(sys.argv[1]), 'quiche@0.26.0', 'quiche@0.26.0'))")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    index = tmp_path / "quiche@0.26.0" / "report" / "index.html"
    assert "future-recovery-start" in index.read_text()


def test_harnesses_skip_python_stacks(tmp_path, monkeypatch):
    """aioquic is fuzzed in process (hypothesis, atheris): the image builds no AFL++ or
    honggfuzz harness for it, and still builds them for the native stacks named."""
    build_fuzz = load_build_fuzz()
    monkeypatch.setenv("CCDIFF_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("CCDIFF_FUZZ_BUILD_DIR", str(tmp_path / "fuzz"))
    built = []
    monkeypatch.setattr(harness_module, "harness", lambda target, engine: built.append((target.label, engine)) or "x")
    build_fuzz.main("harnesses", ["aioquic@1.7.2", "quinn@0.11.19"])
    assert built == [("quinn@0.11.19", "afl"), ("quinn@0.11.19", "honggfuzz")]

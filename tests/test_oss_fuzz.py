"""The OSS-Fuzz / ClusterFuzzLite layout (docs/oss-fuzz.md): .clusterfuzzlite/build.sh run
natively for one stack with the variables a libFuzzer + ASan build sets, the target it
writes run on its seed corpus, and a crash file of the kind those services report
replayed and triaged with `ccdiff fuzz triage DIR`.  The full check (three engine and
sanitizer pairs, every target, 10,000 inputs, in the builder image) is
docker/oss-fuzz-check.sh."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from ccdiff.fuzzing import ossfuzz
from ccdiff.stacks import load_recipes

ROOT = Path(__file__).resolve().parent.parent
CRASH = ROOT / "fuzz" / "reproducers" / "picoquic-numeric-error.bin"   # numeric-error on picoquic 1.1.53.0
# What the builder image's `compile` exports for FUZZING_ENGINE=libfuzzer SANITIZER=address
# (docker/oss-fuzz/Dockerfile and compile, after google/oss-fuzz's base-builder).
LIBFUZZER_ADDRESS = {
    "CC": "clang", "CXX": "clang++", "SANITIZER": "address", "FUZZING_ENGINE": "libfuzzer",
    "CFLAGS": "-O1 -fno-omit-frame-pointer -gline-tables-only -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION "
              "-fsanitize=address -fsanitize-address-use-after-scope -fsanitize=fuzzer-no-link",
    "LIB_FUZZING_ENGINE": "-fsanitize=fuzzer",
    "RUSTFLAGS": "--cfg fuzzing -Zsanitizer=address -Cdebuginfo=1 -Cforce-frame-pointers",
}


def test_one_target_per_pinned_release_named_by_stack_or_release():
    names = ossfuzz.target_names()
    pinned = {f"{r.name}@{v}" for r in load_recipes().values() for v in r.versions}
    assert set(names.values()) == pinned
    for name, spec in names.items():
        stack, version = spec.split("@")
        several = len(load_recipes()[stack].versions) > 1
        assert name == (f"{stack}_{version.replace('.', '_')}" if several else stack)
    assert "quiche_0_26_0" in names and "quiche_0_30_0" in names     # per quiche release


def _build_sh(tmp_path: Path, env: dict, *targets: str) -> subprocess.CompletedProcess:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    if not (src / "ccdiff").exists():
        (src / "ccdiff").symlink_to(ROOT)        # the Dockerfile's COPY . $SRC/ccdiff
    full = dict(os.environ, SRC=str(src), OUT=str(tmp_path / "out"), WORK=str(tmp_path / "work"), **env)
    return subprocess.run(["bash", str(ROOT / ".clusterfuzzlite" / "build.sh"), *targets], env=full,
                          capture_output=True, text=True, timeout=600)


def test_build_sh_refuses_to_run_without_the_services_variables(tmp_path):
    env = {k: v for k, v in LIBFUZZER_ADDRESS.items() if k != "LIB_FUZZING_ENGINE"}
    result = _build_sh(tmp_path, dict(env, LIB_FUZZING_ENGINE=""), "ngtcp2")
    assert result.returncode == 2 and "LIB_FUZZING_ENGINE not set" in result.stderr
    result = _build_sh(tmp_path, LIBFUZZER_ADDRESS, "nosuch")
    assert result.returncode == 2 and "unknown target(s) nosuch" in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_seed_corpus_is_every_seed_and_byte_identical_on_rebuild(tmp_path):
    first = ossfuzz.seed_corpus("t", tmp_path).read_bytes()
    again = ossfuzz.seed_corpus("t", tmp_path).read_bytes()
    assert first == again
    seeds = sorted(p for p in (ROOT / ossfuzz.SEEDS).iterdir() if p.is_file())
    with zipfile.ZipFile(tmp_path / "t_seed_corpus.zip") as archive:
        assert archive.namelist() == [p.name for p in seeds]
        assert all(archive.read(p.name) == p.read_bytes() for p in seeds)


def test_native_libfuzzer_build_runs_the_seed_corpus_and_aborts_on_a_violation(tmp_path):
    """picoquic (a C stack: a build of seconds) through build.sh, as ClusterFuzzLite runs it."""
    result = _build_sh(tmp_path, LIBFUZZER_ADDRESS, "picoquic")
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["lib", "picoquic", "picoquic.dict", "picoquic_seed_corpus.zip"]
    assert (out / "picoquic.dict").read_bytes() == (ROOT / "fuzz" / "ccdiff.dict").read_bytes()
    assert (out / "lib" / "picoquic" / "libccdiff_adapter.so").is_file()
    symbols = subprocess.run(["nm", str(out / "picoquic")], capture_output=True, text=True).stdout
    assert " T LLVMFuzzerTestOneInput" in symbols and " T fz_one_input" in symbols   # the one harness body
    corpus = tmp_path / "corpus"
    with zipfile.ZipFile(out / "picoquic_seed_corpus.zip") as archive:
        archive.extractall(corpus)
    run = subprocess.run([str(out / "picoquic"), "-runs=1000", f"-dict={out / 'picoquic.dict'}", str(corpus)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Done 1000 runs" in run.stderr
    # An invariant violation is a crash to libFuzzer: the abort() of fz_harness.c.
    crash = subprocess.run([str(out / "picoquic"), str(CRASH)], capture_output=True, text=True, timeout=60,
                           cwd=tmp_path)
    assert crash.returncode != 0
    assert "ccdiff-fuzz: violation numeric-error at event 3" in crash.stderr
    assert "libFuzzer: deadly signal" in crash.stderr


def test_native_afl_build_is_instrumented_and_aborts_on_a_violation(tmp_path):
    """The afl engine's form: afl-clang-fast and AFL++'s libAFLDriver.a (Debian's afl++ ships
    it in /usr/lib/afl/; the builder image copies it to $LIB_FUZZING_ENGINE)."""
    env = dict(LIBFUZZER_ADDRESS, CC="afl-clang-fast", CXX="afl-clang-fast++", FUZZING_ENGINE="afl", AFL_QUIET="1",
               CFLAGS=LIBFUZZER_ADDRESS["CFLAGS"].replace(" -fsanitize=fuzzer-no-link", ""),
               LIB_FUZZING_ENGINE="/usr/lib/afl/libAFLDriver.a")
    result = _build_sh(tmp_path, env, "picoquic")
    assert result.returncode == 0, result.stderr[-3000:]
    exe = tmp_path / "out" / "picoquic"
    seed = sorted((ROOT / ossfuzz.SEEDS).iterdir())[0]
    shown = subprocess.run(["afl-showmap", "-q", "-o", str(tmp_path / "map"), "--", str(exe), str(seed)],
                           capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, ASAN_OPTIONS="symbolize=0:abort_on_error=1"))   # afl-showmap's rule
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert len((tmp_path / "map").read_text().splitlines()) > 50        # edges of the harness and picoquic
    crash = subprocess.run([str(exe), str(CRASH)], capture_output=True, text=True, timeout=60)
    assert crash.returncode == -6 and "ccdiff-fuzz: violation numeric-error at event 3" in crash.stderr


def _ccdiff(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_reported_crash_file_replays_and_a_folder_of_them_is_triaged(tmp_path):
    """What ClusterFuzzLite hands back: bare files of bytes (crash-<sha1>), no AFL++ layout."""
    crashes = tmp_path / "cflite-crashes"
    (crashes / "run-2").mkdir(parents=True)
    shutil.copy(CRASH, crashes / "crash-0a1b2c")
    shutil.copy(CRASH, crashes / "run-2" / "clusterfuzz-testcase-minimized-picoquic-1")   # the same bug twice
    (crashes / ".hidden").write_bytes(b"\xff" * 4)                                      # skipped
    decoded = _ccdiff("decode", str(crashes / "crash-0a1b2c"), cwd=tmp_path)
    assert decoded.returncode == 0, decoded.stderr
    (tmp_path / "crash.jsonl").write_text(decoded.stdout)
    replay = _ccdiff("replay", "crash.jsonl", "--stack", "picoquic", cwd=tmp_path)
    assert replay.returncode == 1 and "numeric-error" in replay.stdout + replay.stderr

    triage = _ccdiff("fuzz", "triage", str(crashes), "--stack", "picoquic", "--findings", "f", "--no-report",
                     cwd=tmp_path)
    assert triage.returncode == 1, triage.stderr
    assert "2 input(s) from" in triage.stderr
    (folder,) = (tmp_path / "f").iterdir()
    stored = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    assert [s.split("--")[0] for s in stored] == ["numeric-error"]          # the same bug twice: stored once
    info = json.loads((folder / stored[0] / "finding.json").read_text())
    assert info["found_by"] == ["external"] and info["first_input"].endswith("crash-0a1b2c")

    again = _ccdiff("fuzz", "triage", str(crashes), "--stack", "picoquic", "--findings", "f", "--no-report",
                    cwd=tmp_path)
    # picoquic's numeric-error, strict and not known upstream: the one kind a nightly fails on
    assert again.returncode == 1 and "0 finding(s) stored by this run" in again.stdout
    assert "1 strict and new" in again.stdout
    assert json.loads((folder / stored[0] / "finding.json").read_text())["fails_nightly"] is True


def test_triage_of_a_missing_or_empty_folder_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    for folder in ("empty", "nosuch"):
        result = _ccdiff("fuzz", "triage", folder, "--stack", "picoquic", cwd=tmp_path)
        assert result.returncode == 2
        assert result.stderr.startswith("error: ") and folder in result.stderr

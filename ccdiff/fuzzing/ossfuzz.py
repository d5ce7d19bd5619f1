"""The OSS-Fuzz / ClusterFuzzLite build: one libFuzzer-style target per stack (per pinned
release), built from the environment those services set.  `.clusterfuzzlite/build.sh`
runs it; docs/oss-fuzz.md describes the layout.

    python3 -m ccdiff.fuzzing.ossfuzz [TARGET...]      (TARGET: a name from `target_names()`)

The contract (google/oss-fuzz docs, "Setting up a new project: build.sh"): the builder
image's `compile` sets CC, CXX, CFLAGS, CXXFLAGS, RUSTFLAGS, LIB_FUZZING_ENGINE, SANITIZER,
FUZZING_ENGINE, OUT, SRC and WORK, then runs $SRC/build.sh, which must leave in $OUT one
executable per fuzz target, `<target>_seed_corpus.zip` and `<target>.dict`.

The target is the same harness body as `ccdiff fuzz` runs (fuzz/driver/fz_harness.c:
`LLVMFuzzerTestOneInput` -> `fz_one_input`), linked with the engine's library instead of
fz_main.c (AFL++) or libhfuzz (honggfuzz): `-fsanitize=fuzzer` for libFuzzer, AFL++'s
libAFLDriver.a (persistent mode over LLVMFuzzerTestOneInput) for the afl engine.  The
stack's adapter is built by its own build.sh with $CC and $CFLAGS (sanitizer + coverage
flags) as the C stacks' knobs, or, for the Rust stacks, with $RUSTFLAGS plus the sancov
pass cargo-fuzz adds (the services' RUSTFLAGS carry the sanitizer, not the coverage).
It stays a shared library, shipped in $OUT/lib/<target>/ and found through the target's
rpath ($ORIGIN), since every stack's build.sh makes one.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from ..errors import SetupError
from ..stacks import LIBRARY_NAME, Target, load_recipes, resolve

# fz_state.c without FZ_LIBFUZZER / FZ_STATE_COUNTERS_INIT: its counts go nowhere here.
DRIVER_SOURCES = ("fz_harness.c", "fz_check.c", "fz_decode.c", "fz_ledger.c", "fz_state.c")
SEEDS = "fuzz/seeds/no-loss"
DICTIONARY = "fuzz/ccdiff.dict"
RUST_TRIPLE = "x86_64-unknown-linux-gnu"
# The coverage cargo-fuzz gives libFuzzer targets (cargo-fuzz src/project.rs): 8-bit
# counters with their PC table, and compare tracing for libFuzzer's value profile.
RUST_LIBFUZZER_COVERAGE = ("-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 "
                           "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters "
                           "-Cllvm-args=-sanitizer-coverage-pc-table "
                           "-Cllvm-args=-sanitizer-coverage-trace-compares")
# AFL++ and honggfuzz runtimes implement the trace-pc-guard callbacks (as harness.py's
# sancov build for `ccdiff fuzz`).
RUST_GUARD_COVERAGE = ("-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=3 "
                       "-Cllvm-args=-sanitizer-coverage-trace-pc-guard "
                       "-Cllvm-args=-sanitizer-coverage-trace-compares")
REQUIRED = ("CC", "CFLAGS", "LIB_FUZZING_ENGINE", "OUT", "SRC")


def target_names() -> dict:
    """{target name: stack@version}: the stack's name when one release is pinned, else
    <stack>_<version> with dots as underscores (ClusterFuzz keeps a corpus per name, so a
    name changes only when the pinned set does)."""
    names = {}
    for recipe in sorted(load_recipes().values(), key=lambda r: r.name):
        versions = list(recipe.versions)
        for version in versions:
            name = recipe.name if len(versions) == 1 else f"{recipe.name}_{version.replace('.', '_')}"
            names[name] = f"{recipe.name}@{version}"
    return names


def engine_of(env: dict) -> str:
    """FUZZING_ENGINE, which `compile` sets; else told by LIB_FUZZING_ENGINE."""
    engine = env.get("FUZZING_ENGINE", "")
    if not engine:
        engine = "libfuzzer" if "-fsanitize=fuzzer" in env.get("LIB_FUZZING_ENGINE", "") else "afl"
    return engine


def _run(cmd: list, env: dict, what: str) -> None:
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    result = subprocess.run(cmd, env=env)
    if result.returncode != 0:
        raise SetupError(f"building {what} failed (exit {result.returncode}); the output is above")


def adapter(target: Target, env: dict, work: Path) -> Path:
    """The stack's adapter built by its own build.sh with the service's flags."""
    from .harness import stack_source
    out = work / target.recipe.name / target.version / "oss-fuzz"
    knobs = {"CCDIFF_INCLUDE": str(_include()), "CCDIFF_STACK_VERSION": target.version,
             "CCDIFF_SANITIZE": "0"}
    if target.recipe.language == "rust":
        coverage = RUST_LIBFUZZER_COVERAGE if engine_of(env) == "libfuzzer" else RUST_GUARD_COVERAGE
        # Naming the triple keeps RUSTFLAGS (sanitizer, sancov) off build scripts and proc
        # macros, which run on the host and would not link against the engine's runtime.
        knobs.update(RUSTFLAGS=f"{env.get('RUSTFLAGS', '')} {coverage}".strip(),
                     CARGO_BUILD_TARGET=RUST_TRIPLE)
    else:
        # $CFLAGS holds the sanitizer and the engine's coverage flags; the sanitizer and engine
        # runtimes live in the target executable, hence undefined symbols in the library.
        # lld: GNU ld keeps every coverage-instrumented function alive despite --gc-sections,
        # which pulls in all of picoquic's frames.c dependencies (as harness.py).
        knobs.update(CC=env["CC"], CCDIFF_EXTRA_CFLAGS=env["CFLAGS"],
                     CCDIFF_EXTRA_LDFLAGS="-Wl,-z,undefs -fuse-ld=lld")
    if out.exists():
        shutil.rmtree(out)       # another engine's or sanitizer's build: never mixed
    out.mkdir(parents=True)
    _run(["bash", str(target.recipe.folder / "build.sh"), str(stack_source(target)), str(out)],
         dict(env, **knobs), f"{target.label}'s adapter")
    return out / LIBRARY_NAME


def link(name: str, library: Path, env: dict, out: Path) -> Path:
    """$OUT/<name>: the harness body with the engine, its adapter in $OUT/lib/<name>/."""
    libdir = out / "lib" / name
    libdir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(library, libdir / LIBRARY_NAME)
    driver = _root() / "fuzz" / "driver"
    exe = out / name
    cmd = [env["CC"], *env["CFLAGS"].split(), "-std=gnu11", "-I", str(_include()), "-o", str(exe),
           *(str(driver / s) for s in DRIVER_SOURCES), *env["LIB_FUZZING_ENGINE"].split(),
           "-L", str(libdir), "-lccdiff_adapter", f"-Wl,-rpath,$ORIGIN/lib/{name}", "-lm"]
    _run(cmd, env, f"the {name} target")
    return exe


def seed_corpus(name: str, out: Path) -> Path:
    """<name>_seed_corpus.zip, byte-identical on every build: sorted entries, fixed times."""
    seeds = sorted(p for p in (_root() / SEEDS).iterdir() if p.is_file())
    if not seeds:
        raise SetupError(f"no seed inputs in {_root() / SEEDS}")
    path = out / f"{name}_seed_corpus.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for seed in seeds:
            info = zipfile.ZipInfo(seed.name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, seed.read_bytes(), zipfile.ZIP_DEFLATED)
    return path


def build(env: dict, names: list | None = None) -> list:
    """Every target (or those named) into $OUT; returns their paths."""
    missing = [var for var in REQUIRED if not env.get(var)]
    if missing:
        raise SetupError(f"{', '.join(missing)} not set: run this through the builder image's `compile` "
                         "(or set them as docs/oss-fuzz.md shows)")
    known = target_names()
    unknown = [n for n in names or [] if n not in known]
    if unknown:
        raise SetupError(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(known)}")
    out = Path(env["OUT"])
    out.mkdir(parents=True, exist_ok=True)
    # Scratch (sources, cargo targets) goes to $WORK, which the services provide for it.
    work = Path(env.get("WORK") or Path(env["SRC"]) / "ccdiff-work") / "ccdiff"
    # The downloaded releases are cached in CCDIFF_BUILD_DIR/downloads when one is set (a
    # native run reuses `ccdiff build`'s), else in $WORK; sources and builds always in $WORK.
    env = dict(env, CCDIFF_BUILD_DIR=env.get("CCDIFF_BUILD_DIR") or str(work / "build"),
               CCDIFF_FUZZ_BUILD_DIR=str(work / "fuzz"))
    os.environ.update(CCDIFF_BUILD_DIR=env["CCDIFF_BUILD_DIR"], CCDIFF_FUZZ_BUILD_DIR=env["CCDIFF_FUZZ_BUILD_DIR"])
    built = []
    for name in names or list(known):
        target = resolve(known[name])
        library = adapter(target, env, work / "fuzz")
        exe = link(name, library, env, out)
        seed_corpus(name, out)
        shutil.copyfile(_root() / DICTIONARY, out / f"{name}.dict")
        print(f"ccdiff oss-fuzz: built {exe} ({target.label}, {engine_of(env)}, "
              f"{env.get('SANITIZER', 'none')})", file=sys.stderr, flush=True)
        built.append(exe)
    return built


def _root() -> Path:
    from ..paths import project_root
    return project_root()


def _include() -> Path:
    return _root() / "implementations" / "include"


def main(argv: list) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        print("targets: " + ", ".join(f"{n} ({s})" for n, s in target_names().items()))
        return 0
    if any(not re.fullmatch(r"[A-Za-z0-9_]+", a) for a in argv):
        print(f"error: targets are names like {', '.join(target_names())}", file=sys.stderr)
        return 2
    try:
        build(dict(os.environ), argv)
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

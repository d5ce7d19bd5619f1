"""Builds the in-process harnesses: fuzz/driver/ linked with a stack adapter.

Engines and how the adapter is instrumented:
  afl        C stacks: their build.sh with CC=afl-clang-fast (AFL++'s PCGUARD pass);
             Rust stacks: cargo running LLVM's sancov-module pass (inline 8-bit
             counters) on the stack's own crate and the adapter only
             (coverage.toml sancov_crates, through sancov_rustc.sh); fz_main.c gives each
             counter a slot of AFL++'s map (AFL++'s runtime, afl-compiler-rt, is linked
             into the harness) and folds them in after each input; no comparison
             callbacks (AFL++ uses them only in CMPLOG mode).  Folder sancov-afl/.
  honggfuzz  C stacks: clang -fsanitize-coverage=trace-pc-guard,trace-cmp; Rust
             stacks: the same sancov pass with trace-compares too (libhfuzz implements
             both callbacks; its value profile reads the comparisons).  Folder sancov/.
             The harness links libhfuzz, whose main() runs LLVMFuzzerTestOneInput in
             persistent mode.
  libfuzzer  C stacks: clang -fsanitize-coverage=inline-8bit-counters,pc-table,trace-cmp;
             Rust stacks: the sancov pass with the same three.  Folder libfuzzer/ (C),
             sancov-libfuzzer/ (Rust).  The harness is the driver linked with clang's
             -fsanitize=fuzzer (libFuzzer's main runs LLVMFuzzerTestOneInput in process).
             Not honggfuzz's build: clang 14's libFuzzer refuses trace-pc-guard at start
             ("-fsanitize-coverage=trace-pc-guard is no longer supported by libFuzzer")
             and reads only inline 8-bit counters with their PC table.
  plain      gcc, the stack's ordinary library: replays files (tests, CI, triage).
The driver (fz_harness.c and the decoder, ledger and checks it calls) is never
instrumented: its edges are not the stack's, and under an engine each one cost a
counter update (and each comparison a callback) per event of every input.  Only
fz_main.c, which holds AFL++'s persistent loop, goes through afl-clang-fast (not
fz_counters.c, AFL++'s half of the Rust stacks' counters, compiled plainly too).
sanitize=True adds ASan + UBSan to a C stack's adapter and the harness.
Each build lands in fuzz_build_dir()/<stack>/<version>/<variant>/ and is reused.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

from ..build import ensure_built, fetch, is_checkout_version, recipe_digest, unpack
from ..errors import SetupError
from ..stacks import LIBRARY_NAME, Target
from .toolchain import driver_dir, fuzz_build_dir, honggfuzz_home, include_dir, libfuzzer_runtime, program

DRIVER_SOURCES = ("fz_harness.c", "fz_check.c", "fz_decode.c", "fz_ledger.c", "fz_state.c")
# What a harness's stamp records besides the library: a change to any of them rebuilds it.
STAMP_SOURCES = DRIVER_SOURCES + ("fz_main.c", "fz_counters.c", "fz_counters.h", "fz_state.h")
# Part of a harness's stamp: a harness built by an earlier recipe (an instrumented
# driver) is rebuilt.
HARNESS_RECIPE = 3
SANCOV = "-fsanitize-coverage=trace-pc-guard,trace-cmp"
RUST_SANCOV = ("-C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=3 "
               "-C llvm-args=-sanitizer-coverage-trace-pc-guard "
               "-C llvm-args=-sanitizer-coverage-trace-compares")
# AFL++'s Rust build (docs/fuzzing.md, "The Rust stacks' harnesses"): the same edges as
# inline 8-bit counters, which fz_main.c registers with AFL++'s map and folds into it
# after each input, instead of a call to __sanitizer_cov_trace_pc_guard per edge (8-23%
# of the time); and no comparison callbacks, which AFL++ reads only in CMPLOG mode (not
# run by ccdiff; they were 4-15%).  honggfuzz keeps RUST_SANCOV (its value profile reads
# the comparisons).
RUST_SANCOV_AFL = ("-C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=3 "
                   "-C llvm-args=-sanitizer-coverage-inline-8bit-counters")
# The library's counters constructor calls it in the harness executable (fz_main.c).
AFL_EXPORTS = "-Wl,--export-dynamic-symbol=__sanitizer_cov_8bit_counters_init"
# libFuzzer's Rust build: the counters and PC table it reads (clang 14's libFuzzer stops at
# start on trace-pc-guard, so honggfuzz's build cannot serve it), and the comparisons its
# value profile and CMP table read.
RUST_SANCOV_LIBFUZZER = ("-C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=3 "
                         "-C llvm-args=-sanitizer-coverage-inline-8bit-counters "
                         "-C llvm-args=-sanitizer-coverage-pc-table "
                         "-C llvm-args=-sanitizer-coverage-trace-compares")
# The same for a C stack: -fsanitize=fuzzer-no-link without indirect-calls and stack-depth
# (neither is read by default; stack-depth adds a thread-local store per function).
SANCOV_LIBFUZZER = "-fsanitize-coverage=inline-8bit-counters,pc-table,trace-cmp"
# The crates the sancov pass instruments are each Rust stack's own data: `sancov_crates` in
# its folder's coverage.toml, the one holding the controller and the adapter (lib name
# ccdiff_adapter).  Their dependencies (libm, smallvec, slab, ...) are not the controller;
# instrumented, they cost a callback per edge on every execution.
# UBSan reports and carries on by default; a fuzzer only sees a crash.
ASAN = "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
NO_RECOVER = "-fno-sanitize-recover=undefined"
ENGINES = ("afl", "honggfuzz", "libfuzzer", "plain")


def _run(cmd: list, env: dict, log: Path, what: str) -> None:
    with open(log, "a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        result = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-12:])
        raise SetupError(f"building {what} failed (exit {result.returncode}); log: {log}\n{tail}")


@contextmanager
def _locked():
    """One build at a time across processes (pytest -n, parallel campaigns).  The lock
    file is opened read-only when it exists (flock needs no write access), so the
    fuzzer image's pre-built harnesses work on its read-only root file system."""
    folder = fuzz_build_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ".lock"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def stack_source(target: Target) -> Path:
    """The stack's source: the pinned upstream release, fetched (sha256-checked) and unpacked
    once; or, for a checkout build (`ccdiff build STACK --source DIR`, named local-<hash> or
    git-<sha>), the folder that build recorded in its build-info.json."""
    if is_checkout_version(target.version):
        return Path(_checkout_info(target)["source"])
    pin = target.recipe.versions.get(target.version)
    if pin is None:
        raise SetupError(f"{target.label}: fuzzing builds pinned versions and checkouts built with "
                         f"`ccdiff build {target.recipe.name} --source DIR`")
    root = fuzz_build_dir() / target.recipe.name / target.version / "src"
    marker = root / ".unpacked"
    if not marker.exists():
        unpack(fetch(pin["url"], pin["sha256"]), root)
        marker.write_text(pin["sha256"] + "\n")
    return root / pin.get("subdir", "")


def _checkout_info(target: Target) -> dict:
    """What `ccdiff build --source` recorded of a checkout build: the fuzz build takes the
    same folder, under the same name."""
    path = target.recipe.build_folder(target.version) / "build-info.json"
    try:
        info = json.loads(path.read_text())
        source = Path(info["source"])
    except (OSError, ValueError, KeyError, TypeError):
        raise SetupError(f"{target.label}: no checkout build of that name in {path.parent}; build it "
                         f"first with `ccdiff build {target.recipe.name} --source DIR`") from None
    if not source.is_dir():
        raise SetupError(f"{target.label}: its source folder {source} (build-info.json) is gone")
    # The tree behind a local-<hash> name may change; `build --source` rewrites build-info.json,
    # and the instrumented build follows.
    return dict(info, built_ns=path.stat().st_mtime_ns)


def _variant(target: Target, engine: str, sanitize: bool) -> str:
    rust = target.recipe.language == "rust"
    if sanitize and rust:
        raise SetupError(f"{target.label}: --sanitize applies to the C stacks (quiche is Rust; "
                         "overflow checks and debug assertions are always on)")
    # Rust: one sancov build per engine (AFL++'s without the comparison callbacks,
    # libFuzzer's with counters and a PC table instead of guard callbacks).
    base = ({"afl": "sancov-afl", "libfuzzer": "sancov-libfuzzer"}.get(engine, "sancov")) if rust else engine
    return base + ("-asan" if sanitize else "")


def sancov_cfg(crates: str, flags: str) -> str:
    """RUSTFLAGS of an instrumented Rust build.  cargo does not fingerprint the wrapper's
    environment: a --cfg (read by no code) naming the covered crates and a digest of the
    sancov flags makes a change of either rebuild every crate."""
    digest = hashlib.sha256(flags.encode()).hexdigest()[:12]
    return f"--cfg=ccdiff_sancov=\"{crates.replace(' ', ',')},{digest}\""


def adapter_library(target: Target, engine: str, sanitize: bool = False) -> Path:
    """The stack's adapter built with the engine's coverage instrumentation."""
    if engine == "plain" and not sanitize:
        ensure_built(target)
        return target.recipe.library(target.version)
    variant = _variant(target, engine, sanitize)
    out = fuzz_build_dir() / target.recipe.name / target.version / variant
    library = out / LIBRARY_NAME
    knobs = {"CCDIFF_SANITIZE": "1" if sanitize else "0"}
    if target.recipe.language == "rust":
        # Build scripts and proc macros must not carry the sancov callbacks: naming the
        # target triple keeps RUSTFLAGS off host artifacts.
        crates = target.recipe.coverage.get("sancov_crates")
        if crates is None:
            raise SetupError(f"{target.label}: name the crates to instrument (the controller's and "
                             f"ccdiff_adapter) as sancov_crates in {target.recipe.folder / 'coverage.toml'}")
        sancov = {"afl": RUST_SANCOV_AFL, "libfuzzer": RUST_SANCOV_LIBFUZZER}.get(engine, RUST_SANCOV)
        knobs.update(RUSTFLAGS=sancov_cfg(crates, sancov), CCDIFF_SANCOV_RUSTFLAGS=sancov,
                     CCDIFF_SANCOV_CRATES=crates,
                     CARGO_BUILD_TARGET="x86_64-unknown-linux-gnu")
    else:
        extra = {"honggfuzz": [SANCOV], "libfuzzer": [SANCOV_LIBFUZZER]}.get(engine, [])
        if sanitize:  # build.sh adds -fsanitize=address,undefined itself
            extra.append(NO_RECOVER)
        knobs.update(CC=program("afl-clang-fast") if engine == "afl" else program("clang"),
                     CCDIFF_EXTRA_CFLAGS=" ".join(extra),
                     # The engine's runtime (and ASan's) is linked into the harness, not the
                     # library; lld because GNU ld keeps every sancov-instrumented function
                     # alive despite --gc-sections.
                     CCDIFF_EXTRA_LDFLAGS="-Wl,-z,undefs -fuse-ld=lld")
    stamp = out / "build-knobs.json"
    made_of = dict(knobs, recipe=recipe_digest(target.recipe))   # rebuilt when the adapter changes
    if is_checkout_version(target.version):                      # ... or the checkout is rebuilt
        info = _checkout_info(target)
        made_of.update(source=info["source"], source_built_ns=info["built_ns"])
    if library.exists() and stamp.exists() and json.loads(stamp.read_text()) == made_of:
        return library
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CCDIFF_INCLUDE=str(include_dir()), CCDIFF_STACK_VERSION=target.version, **knobs)
    if target.recipe.language == "rust":   # not a knob: where ccdiff is installed is no part of the build
        # A copy in the build folder, made executable: an installed package's data files may
        # have lost the mode bit (setuptools copies package data without it).
        wrapper = out / "sancov_rustc.sh"
        wrapper.write_text(Path(__file__).with_name("sancov_rustc.sh").read_text())
        wrapper.chmod(0o755)
        env["RUSTC_WRAPPER"] = str(wrapper)
    log = out / "build.log"
    log.write_text("")
    _run(["bash", str(target.recipe.folder / "build.sh"), str(stack_source(target)), str(out)], env, log,
         f"{target.label} for {engine}")
    stamp.write_text(json.dumps(made_of, sort_keys=True))
    return library


def harness(target: Target, engine: str, sanitize: bool = False) -> Path:
    """The harness executable for one stack and engine (built if missing)."""
    if engine not in ENGINES:
        raise SetupError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    try:
        with _locked():
            return _harness(target, engine, sanitize)
    except OSError as exc:      # a read-only build folder: the harness was not pre-built
        raise SetupError(f"the {engine} harness for {target.label} is not built and cannot be built "
                         f"in {fuzz_build_dir()} ({exc.strerror}); the fuzzer image pre-builds the AFL++ and "
                         "honggfuzz harnesses of the stacks named in its FUZZ_TARGETS build argument "
                         "(docs/containers.md; libFuzzer's: run it natively)") from None


def _harness(target: Target, engine: str, sanitize: bool) -> Path:
    library = adapter_library(target, engine, sanitize)
    name = f"harness-{engine}" + ("-asan" if sanitize else "")
    exe = library.parent / name if engine != "plain" or sanitize else \
        fuzz_build_dir() / target.recipe.name / target.version / "plain" / name
    info = exe.with_suffix(".json")
    sources = [driver_dir() / s for s in STAMP_SOURCES]
    stamp = {"library": str(library), "sources": {s.name: s.stat().st_mtime_ns for s in sources},
             "recipe": HARNESS_RECIPE}
    if exe.exists() and info.exists() and json.loads(info.read_text()) == stamp:
        return exe
    exe.parent.mkdir(parents=True, exist_ok=True)
    flags = ["-O2", "-g", "-std=gnu11", "-I", str(include_dir())]
    if sanitize:
        flags += ASAN.split()
    link = ["-L", str(library.parent), "-lccdiff_adapter", f"-Wl,-rpath,{library.parent}", "-lm"]
    # AFL++'s harness adds fz_counters.c (the Rust stacks' inline 8-bit counters into its map).
    srcs = [str(driver_dir() / s) for s in DRIVER_SOURCES + (("fz_counters.c",) if engine == "afl" else ())]
    log = exe.with_suffix(".log")
    log.write_text("")
    if engine != "plain":
        # The driver as plain objects (see the module docstring), linked below.
        objects = exe.parent / f"{exe.name}-driver"
        objects.mkdir(exist_ok=True)
        plain_srcs, srcs = srcs, [str(objects / (Path(s).stem + ".o")) for s in srcs]
        # fz_state.c's counters go to the engine (fz_state.h): libFuzzer's extra-counters
        # section, or the 8-bit-counter registration AFL++ (fz_counters.c) and libhfuzz take.
        state = "-DFZ_LIBFUZZER" if engine == "libfuzzer" else "-DFZ_STATE_COUNTERS_INIT"
        for src, obj in zip(plain_srcs, srcs):
            _run([program("clang"), *flags, state, "-c", "-o", obj, src], dict(os.environ), log,
                 f"the {engine} harness for {target.label}")
    if engine == "afl":
        cmd = [program("afl-clang-fast"), *flags, "-o", str(exe), str(driver_dir() / "fz_main.c"), *srcs, *link,
               AFL_EXPORTS]
    elif engine == "libfuzzer":
        # libFuzzer's runtime and main; the driver objects above stay plain (the flag at link
        # time instruments nothing, it adds libclang_rt.fuzzer).
        libfuzzer_runtime()
        cmd = [program("clang"), *flags, "-fsanitize=fuzzer", "-o", str(exe), *srcs, *link]
    elif engine == "honggfuzz":
        home = honggfuzz_home()
        cmd = [program("clang"), *flags, "-o", str(exe), *srcs,
               "-Wl,--whole-archive", str(home / "libhfuzz/libhfuzz.a"), "-Wl,--no-whole-archive",
               str(home / "libhfcommon/libhfcommon.a"), *link, "-lpthread", "-ldl", "-lrt"]
    else:
        cc = program("clang") if sanitize else program("gcc")
        cmd = [cc, *flags, "-o", str(exe), str(driver_dir() / "fz_main.c"), *srcs, *link]
    _run(cmd, dict(os.environ), log, f"the {engine} harness for {target.label}")
    info.write_text(json.dumps(stamp))
    return exe


def harness_env(target: Target, engine: bool = False) -> dict:
    """Environment a harness needs: the SPEC's stack options.  Run directly (not under
    an engine, which sets its own and refuses others), sanitizer reports end in abort()
    as they do under the engines, so every way of running agrees."""
    env = dict(os.environ, CCDIFF_FUZZ_OPTIONS=target.options_text)
    if not engine:
        env.setdefault("ASAN_OPTIONS", "abort_on_error=1:detect_leaks=0:symbolize=1")
        env.setdefault("UBSAN_OPTIONS", "abort_on_error=1:halt_on_error=1:print_stacktrace=1")
    return env


def tool(out_dir: Path | None = None) -> Path:
    """fz_tool (decoder + ledger only), for the vector test."""
    out = out_dir or fuzz_build_dir() / "tools"
    out.mkdir(parents=True, exist_ok=True)
    exe = out / "fz_tool"
    srcs = [driver_dir() / s for s in ("fz_tool.c", "fz_decode.c", "fz_ledger.c")]
    log = out / "fz_tool.log"
    log.write_text("")
    _run([program("gcc"), "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-std=c11", "-I", str(include_dir()),
          "-o", str(exe), *map(str, srcs)], dict(os.environ), log, "fz_tool")
    return exe


def decode_harness(engine: str = "plain", sanitize: bool = True) -> Path:
    """fz_decode_fuzz (decoder + ledger + JSONL writer, no stack): under AFL++ for the
    long hostile-input run (bench/bench_hostile.py), plain for tests; ASan + UBSan by default."""
    if engine not in ("afl", "plain"):
        raise SetupError(f"the decode harness builds for afl or plain, not {engine!r}")
    out = fuzz_build_dir() / "tools"
    exe = out / (f"fz_decode_fuzz-{engine}" + ("-asan" if sanitize else ""))
    sources = [driver_dir() / s for s in ("fz_decode_fuzz.c", "fz_decode.c", "fz_ledger.c")]
    info = exe.with_suffix(".json")
    stamp = {"sources": {s.name: s.stat().st_mtime_ns for s in sources}}
    with _locked():
        if exe.exists() and info.exists() and json.loads(info.read_text()) == stamp:
            return exe
        out.mkdir(parents=True, exist_ok=True)
        cc = program("afl-clang-fast") if engine == "afl" else program("clang" if sanitize else "gcc")
        flags = ["-O1", "-g", "-Wall", "-std=gnu11", "-I", str(include_dir())] + (ASAN.split() if sanitize else [])
        log = exe.with_suffix(".log")
        log.write_text("")
        _run([cc, *flags, "-o", str(exe), *map(str, sources)], dict(os.environ), log, exe.name)
        info.write_text(json.dumps(stamp))
    return exe

"""Builds what the fuzzer image (docker/Dockerfile, target `fuzzer`) needs before
its root file system becomes read-only at run time, with ccdiff's own recipes:

    build-fuzz.py stacks TARGET...     the ordinary builds (triage replays through them)
    build-fuzz.py harnesses TARGET...  the AFL++ and honggfuzz in-process harnesses
                                       (ccdiff/fuzzing/harness.py)

TARGET: `all` (every pinned version of every stack), a stack (every pinned
version of it) or stack@version.  Sanitizer builds are left out (`--sanitize`
needs a writable build folder: run it natively).  Each step then deletes the
sources and cargo targets it made, which the image does not need."""
import shutil
import sys
from pathlib import Path

from ccdiff.errors import SetupError
from ccdiff.paths import build_dir
from ccdiff.stacks import load_recipes, resolve

# Not libfuzzer: a third instrumented build of every stack (minutes per Rust stack) for an
# engine the compose fuzz profile does not run; `ccdiff fuzz --engine libfuzzer` runs natively.
ENGINES = ("afl", "honggfuzz")
SCRATCH = ("src", "target", "work", "gen")    # what build.sh and the fetcher leave besides the library


def targets(names: list) -> list:
    recipes = load_recipes()
    specs = []
    for name in names:
        if name == "all":
            specs += [f"{r.name}@{v}" for r in recipes.values() for v in r.versions]
        elif "@" in name:
            specs.append(name)
        else:
            specs += [f"{name}@{v}" for v in resolve(name, recipes).recipe.versions]
    return list(dict.fromkeys(specs))


def clean(folder: Path) -> None:
    """Scratch folders of every build under `folder` (<stack>/<version>/[<variant>/])."""
    for stack in load_recipes():
        for pattern in ("*/*/", "*/*/*/"):     # <version>/<scratch>, <version>/<variant>/<scratch>
            for sub in (folder / stack).glob(pattern):
                if sub.name in SCRATCH:
                    shutil.rmtree(sub)


def main(step: str, names: list) -> None:
    specs = targets(names or ["all"])
    if step == "stacks":
        from ccdiff.build import build_spec
        for spec in specs:
            print(*build_spec(spec), flush=True)
        clean(build_dir())
    elif step == "harnesses":
        from ccdiff.fuzzing.harness import harness
        from ccdiff.fuzzing.toolchain import fuzz_build_dir
        for spec in specs:
            target = resolve(spec)
            if target.recipe.language == "python":
                continue            # in process: fuzzed by hypothesis and atheris, no C harness
            for engine in ENGINES:
                print(harness(target, engine), flush=True)
        clean(fuzz_build_dir())
    else:
        raise SetupError(f"unknown step {step!r}: stacks or harnesses")
    shutil.rmtree(build_dir() / "downloads", ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    try:
        main(sys.argv[1], sys.argv[2:])
    except SetupError as exc:
        sys.exit(f"error: {exc}")

"""What the Rust adapters report on the fuzz inputs is pinned (issue #36).

quinn's and s2n-quic's adapters read private controller fields; until issue #36 they
formatted the whole controller's derived Debug and parsed it on every step, which was
most of a fuzz execution.  They now read the fields through read-only accessors the
build appends (implementations/<stack>/patches/apply.py).  A faster harness must judge
the same input the same way: fuzz/driver/fz_snapshots.c prints every snapshot of every
input (floats exactly, in %a), and tests/fixtures/fuzz-snapshots.json holds, per stack,
option set and input (fuzz/vectors/*.bin, fuzz/seeds/no-loss/*.bin: about 7,000 steps,
losses, persistent congestion, ECN, idle and 6,000 random events), the sha256 of those
lines as the Debug-reading adapters of main fd7126a printed them.  Any snapshot field
that changes, on any step, fails here with the input's name.
"""
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from ccdiff.build import ensure_built
from ccdiff.fuzzing.toolchain import driver_dir, include_dir, program
from ccdiff.stacks import resolve

ROOT = Path(__file__).resolve().parent.parent
INPUTS = sorted([*(ROOT / "fuzz" / "vectors").glob("*.bin"), *(ROOT / "fuzz" / "seeds" / "no-loss").glob("*.bin")])
PINNED = json.loads((ROOT / "tests" / "fixtures" / "fuzz-snapshots.json").read_text())
CASES = [(stack, options) for stack in sorted(PINNED) for options in sorted(PINNED[stack])]


def per_input_digests(text: str) -> dict:
    digests, name, lines = {}, None, []
    for line in text.splitlines(keepends=True):
        if line.startswith("# "):
            if name is not None:
                digests[name] = hashlib.sha256("".join(lines).encode()).hexdigest()[:16]
            name, lines = line.split()[1], []
        lines.append(line)
    if name is not None:
        digests[name] = hashlib.sha256("".join(lines).encode()).hexdigest()[:16]
    return digests


@pytest.fixture(scope="module")
def snapshots_tool(tmp_path_factory):
    built = {}

    def build(stack: str) -> Path:
        if stack not in built:
            target = resolve(stack)
            ensure_built(target)
            lib = target.recipe.library(target.version).parent
            exe = tmp_path_factory.mktemp("fz_snapshots") / f"fz_snapshots-{stack}"
            subprocess.run([program("gcc"), "-O2", "-Wall", "-Werror", "-std=gnu11", "-I", str(include_dir()),
                            "-I", str(driver_dir()), "-o", str(exe), str(driver_dir() / "fz_snapshots.c"),
                            str(driver_dir() / "fz_decode.c"), str(driver_dir() / "fz_ledger.c"),
                            "-L", str(lib), "-lccdiff_adapter", f"-Wl,-rpath,{lib}", "-lm"], check=True)
            built[stack] = exe
        return built[stack]
    return build


@pytest.mark.parametrize("stack,options", CASES, ids=[f"{s}[{o or 'default'}]" for s, o in CASES])
def test_rust_adapter_snapshots_on_the_fuzz_inputs_are_unchanged(snapshots_tool, stack, options):
    assert {p.name for p in INPUTS} == set(PINNED[stack][options]), "inputs added or removed: re-pin"
    out = subprocess.run([str(snapshots_tool(stack)), *map(str, INPUTS)],
                         env=dict(os.environ, CCDIFF_FUZZ_OPTIONS=options),
                         capture_output=True, text=True, check=True, timeout=120).stdout
    got = per_input_digests(out)
    changed = sorted(name for name, digest in PINNED[stack][options].items() if got.get(name) != digest)
    assert not changed, f"{stack} [{options}]: snapshots changed on {changed}"

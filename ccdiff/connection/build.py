"""Building a stack's connection shim: implementations/<stack>/connection/build.sh.

The shim is built from the same pinned, sha256-checked release as the stack's
adapter (its unpacked source under build/<stack>/<version>/src/), into
build/<stack>/<version>/connection/.  Like the adapter, a shim made from other
files than the recipe's present ones is stale and is rebuilt
(connection/build-info.json records the digest).
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from ..build import build_lock, ensure_built, log_tail, run_build_script, tree_digest
from ..errors import SetupError
from ..paths import implementations_dir
from ..stacks import Target
from .shim import LIBRARY_NAME, MODULE_NAME


def supports_connection(target: Target) -> bool:
    return target.kind == "native" and (target.recipe.folder / "connection" / "build.sh").exists()


# The contract the shims are built against: a change to either rebuilds every shim.
# What every shim's build reads from implementations/include/ besides its own folder: the
# contract headers and the Rust builds' shared steps.
SHARED_INPUTS = ("ccdiff_connection.h", "ccdiff_connection_c.h", "rust_build.sh")


def _digest(folder: Path) -> str:
    """The shim's folder (ccdiff/build.py's tree_digest, as for a --source tree) and the
    shared inputs."""
    digest = hashlib.sha256(tree_digest(folder).encode())
    for name in SHARED_INPUTS:
        digest.update(b"\0" + name.encode() + b"\0" + (implementations_dir() / "include" / name).read_bytes())
    return digest.hexdigest()[:16]


def _source(target: Target) -> Path:
    pin = target.recipe.versions.get(target.version)
    if pin is None:          # a release the registry lock pins (the adapter's build just used it)
        from ..registry import resolve_release
        try:
            pin = resolve_release(target.recipe, target.version, record=False)
        except SetupError:
            pin = None
    src = target.recipe.build_folder(target.version) / "src"
    if pin is not None and pin.get("subdir"):
        src = src / pin["subdir"]
    if not src.is_dir():
        raise SetupError(f"{target.label}: no unpacked source at {src}; run: ccdiff build {target.recipe.name}"
                         f"@{target.version} --force")
    return src


def ensure_shim(target: Target) -> Path:
    """The built shim of the target's stack and version (built first when missing or stale)."""
    if not supports_connection(target):
        name = target.label if target.kind == "native" else "the oracle"
        raise SetupError(f"{name} has no connection shim (implementations/<stack>/connection/); "
                         "docs/connection-mode.md lists the stacks that have one")
    recipe = target.recipe
    ensure_built(target)
    out = recipe.build_folder(target.version) / "connection"
    artifact = out / (MODULE_NAME if recipe.language == "python" else LIBRARY_NAME)
    folder = recipe.folder / "connection"
    digest = _digest(folder)
    if _current(out, artifact, digest):
        return artifact
    # One build of a shim at a time, across processes (two tests of one stack, run at once by
    # pytest -n 2 on a fresh checkout, both ran build.sh into the same folder); the second
    # waits and finds the first's build current.
    with build_lock(out):
        if not _current(out, artifact, digest):
            _build_shim(target, folder, out, artifact, digest)
    return artifact


def _current(out: Path, artifact: Path, digest: str) -> bool:
    try:
        info = json.loads((out / "build-info.json").read_text())
    except (OSError, ValueError):
        info = {}
    return artifact.exists() and info.get("recipe") == digest


def _build_shim(target: Target, folder: Path, out: Path, artifact: Path, digest: str) -> None:
    recipe = target.recipe
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"  building the {recipe.name}@{target.version} connection shim "
          f"(implementations/{recipe.name}/connection/build.sh)", file=sys.stderr)
    code, log_path = run_build_script(folder / "build.sh", _source(target), out, target.version)
    if code != 0 or not artifact.exists():
        raise SetupError(f"building the {target.label} connection shim failed (exit {code}); "
                         f"full log: {log_path}\n" + log_tail(log_path))
    seconds = round(time.monotonic() - started, 1)
    (out / "build-info.json").write_text(json.dumps({"recipe": digest, "seconds": seconds}, indent=2) + "\n")
    print(f"  built {artifact} in {seconds} s", file=sys.stderr)

"""A library built from adapter sources that changed since is refused by every command that
runs it (replay, matrix, sim), as conform refuses it, with the command that fixes it."""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccdiff.build import ensure_built
from ccdiff.paths import build_dir

ROOT = Path(__file__).resolve().parent.parent
SPEC = "quiche@0.30.0"
MESSAGE = ("error: quiche@0.30.0 was built from an older adapter (implementations/quiche/ changed since); "
           "run: ccdiff build quiche@0.30.0")


@pytest.fixture(scope="module")
def stale_build_dir(tmp_path_factory):
    """A copy of the real build whose recorded adapter digest is not the present one."""
    ensure_built(SPEC)
    real = build_dir() / "quiche" / "0.30.0"
    copy = tmp_path_factory.mktemp("build") / "quiche" / "0.30.0"
    copy.mkdir(parents=True)
    shutil.copy2(real / "libccdiff_adapter.so", copy)
    info = json.loads((real / "build-info.json").read_text())
    info["recipe"] = "0" * len(info["recipe"])
    (copy / "build-info.json").write_text(json.dumps(info))
    return copy.parent.parent


@pytest.mark.parametrize("args", [
    ["replay", "examples/death-spiral.jsonl", "--stack", SPEC],
    ["matrix", "examples/death-spiral.jsonl", "--stack", SPEC],
    ["sim", "death-spiral", "--stack", SPEC],
    ["conform", "--scenarios", "death-spiral", "--seeds", "1", "--stacks", SPEC, "--out", "{tmp}/out"],
])
def test_a_stale_build_is_refused_by_every_command(stale_build_dir, tmp_path, args):
    env = dict(os.environ, CCDIFF_BUILD_DIR=str(stale_build_dir))
    env.pop("CCDIFF_REMOTE_QUICHE", None)
    done = subprocess.run([sys.executable, "-m", "ccdiff", *[a.format(tmp=tmp_path) for a in args]], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == MESSAGE, done.stderr[-2000:]


@pytest.fixture(scope="module")
def modified_build_dir(tmp_path_factory):
    """A copy of the real build whose library is not the file its build wrote (issue #32: a
    corrupted library was still shown as built)."""
    ensure_built(SPEC)
    real = build_dir() / "quiche" / "0.30.0"
    copy = tmp_path_factory.mktemp("build") / "quiche" / "0.30.0"
    copy.mkdir(parents=True)
    shutil.copy2(real / "libccdiff_adapter.so", copy)
    info = json.loads((real / "build-info.json").read_text())
    info["library_sha256"] = "0" * 64
    (copy / "build-info.json").write_text(json.dumps(info))
    return copy.parent.parent


def test_a_modified_library_is_refused_and_shown_as_modified(modified_build_dir):
    env = dict(os.environ, CCDIFF_BUILD_DIR=str(modified_build_dir))
    env.pop("CCDIFF_REMOTE_QUICHE", None)
    run = functools.partial(subprocess.run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    done = run([sys.executable, "-m", "ccdiff", "replay", "examples/death-spiral.jsonl", "--stack", SPEC])
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "is not the library its build wrote" in last and last.endswith("run: ccdiff build quiche@0.30.0"), last
    rows = json.loads(run([sys.executable, "-m", "ccdiff", "stacks", "--json"]).stdout)
    row = next(r for r in rows if r["stack"] == "quiche" and r["version"] == "0.30.0")
    assert row["built"] and row["modified"] and not row["stale"]
    table = run([sys.executable, "-m", "ccdiff", "stacks"], env=dict(env, COLUMNS="200")).stdout
    assert "modified" in table

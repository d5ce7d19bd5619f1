"""Planted bugs in ngtcp2's controller are caught by `ccdiff conform` (issue #21).

Each mutant is the pinned ngtcp2 1.25.0 source (unpacked from its sha256-checked
registry archive into tmp) with one change to lib/ngtcp2_cc.c, built with
`ccdiff build ngtcp2 --source DIR` into a build folder under tmp (CCDIFF_BUILD_DIR), so
the pinned builds are never touched.  Each runs `ccdiff conform --scenario death-spiral
--seeds 5`, as does the pristine ngtcp2@1.25.0 on the same scenario and seeds:

- beta 0.5 (ngtcp2_cc.c:501, `cwnd * 7 / 10` -> `cwnd * 5 / 10`): profile.toml documents
  ngtcp2's delivery-rate ssthresh (`ssthresh-bounded-by-delivery`), which may cut deeper
  than beta.  As a whole-invariant waiver of excess-reduction it hid this mutant; checked
  by its mechanism (ccdiff/mechanisms.py) a reduction is excused only where the new
  ssthresh is what ngtcp2's own rule computes at that event;
- the recovery check removed (ngtcp2_cc.c:320-321, `in_congestion_recovery(cstat,
  ack->largest_pkt_sent_ts)` dropped from on_ack_recv): the documented gap-fill deviation
  excused every growth-in-recovery; now only growth on an ACK that fills a gap.

The pristine stack has no violation of those invariants on the same runs, and an
unpatched copy built the same way (--source) gets exactly the pristine verdicts: what the
mutants show comes from the one change.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccdiff.build import ensure_built, fetch, unpack
from ccdiff.paths import project_root
from ccdiff.stacks import load_recipes

PINNED = "1.25.0"
SCENARIO, SEEDS = "death-spiral", 5
CC = "lib/ngtcp2_cc.c"
# The planted changes are bench/planted_bugs.py's (one definition for the bench's example
# replays and this conform test); here, the invariant that must catch each.
sys.path.insert(0, str(project_root() / "bench"))
from planted_bugs import PLANTED, plant   # noqa: E402

_BUGS = {bug.name: bug for bug in PLANTED}
MUTANTS = {"beta-0.5": (_BUGS["ngtcp2-beta-0.5"], "excess-reduction"),
           "no-recovery-check": (_BUGS["ngtcp2-no-recovery-check"], "growth-in-recovery")}
WATCHED = {"excess-reduction", "growth-in-recovery"}


def ccdiff(*args, build_dir: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if build_dir is not None:
        env["CCDIFF_BUILD_DIR"] = str(build_dir)
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], cwd=project_root(), env=env,
                          capture_output=True, text=True, timeout=timeout)


def conform(stack: str, out: Path, build_dir: Path | None = None) -> tuple[int, dict]:
    """exit code, {seed: [finding dicts of `stack`]}."""
    done = ccdiff("conform", "--stack", stack, "--scenario", SCENARIO, "--seeds", str(SEEDS), "--jobs", "1",
                  "--out", str(out), "--no-report", "--traces", "none", build_dir=build_dir)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    by_seed = {case["seed"]: case["findings"] for case in summary["cases"] if case["stack"] == stack}
    assert sorted(by_seed) == list(range(SEEDS)), summary["cases"]
    return done.returncode, by_seed


def violations(by_seed: dict, invariants=WATCHED) -> dict:
    """{seed: {invariant: finding}} of the violations of those invariants."""
    out = {}
    for seed, findings in by_seed.items():
        hits = {f["invariant"]: f for f in findings if f["status"] == "violation" and f["invariant"] in invariants}
        if hits:
            out[seed] = hits
    return out


@pytest.fixture(scope="module")
def pristine_source(tmp_path_factory) -> Path:
    """The pinned ngtcp2 tree, from the verified registry archive (build/downloads caches it)."""
    recipe = load_recipes()["ngtcp2"]
    pin = recipe.versions[PINNED]
    ensure_built(f"ngtcp2@{PINNED}")
    folder = tmp_path_factory.mktemp("ngtcp2-src")
    unpack(fetch(pin["url"], pin["sha256"]), folder)
    tree = folder / pin["subdir"]
    assert (tree / CC).is_file()
    return tree


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict:
    code, by_seed = conform(f"ngtcp2@{PINNED}", tmp_path_factory.mktemp("pristine") / "out")
    return by_seed


def build_copy(source: Path, tmp: Path, name: str, bug=None) -> tuple[str, Path]:
    """Copy, patch, `ccdiff build ngtcp2 --source`; returns (stack spec, its build folder)."""
    tree = tmp / name
    shutil.copytree(source, tree)
    if bug is not None:
        plant(tree, bug)          # exactly once, or it raises: a change that no longer applies fails
    build_dir = tmp / "build"
    done = ccdiff("build", "ngtcp2", "--source", str(tree), build_dir=build_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    library = Path(done.stdout.strip().splitlines()[-1])
    assert library.is_file() and library.parent.parent == build_dir / "ngtcp2"
    return f"ngtcp2@{library.parent.name}", build_dir


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_planted_bug_is_flagged_by_conform_and_pristine_is_not(name, pristine_source, pristine, tmp_path):
    bug, invariant = MUTANTS[name]
    spec, build_dir = build_copy(pristine_source, tmp_path, name, bug)
    code, by_seed = conform(spec, tmp_path / "out", build_dir)
    caught = violations(by_seed, {invariant})
    assert code == 1
    assert caught, f"{name}: no {invariant} violation on {SCENARIO} seeds 0-{SEEDS - 1}: {by_seed}"
    # It points at the mutated behaviour, not at the documented deviation.
    for hits in caught.values():
        detail = hits[invariant]["detail"]
        assert "documented deviations" not in detail
        if invariant == "excess-reduction":
            assert "below beta" in detail
        else:
            assert "before the recovery start" in detail
    # The pristine stack on the same scenario and seeds: none of these violations.
    assert violations(pristine) == {}, pristine
    print(f"{name} ({spec}): {invariant} on seeds {sorted(caught)} of {SEEDS}; "
          f"counts {[caught[s][invariant]['count'] for s in sorted(caught)]}")


def test_an_unpatched_source_build_gets_the_pinned_verdicts(pristine_source, pristine, tmp_path):
    """The control: the same copy-and-build path without the change.  Same findings, seed by
    seed, as the pinned build (the stack's label aside): the mutants' findings come from
    their one change, not from building with --source."""
    spec, build_dir = build_copy(pristine_source, tmp_path, "unpatched")
    _, by_seed = conform(spec, tmp_path / "out", build_dir)

    def key(findings):
        return sorted((f["invariant"], f["status"], f["event_index"], f["count"]) for f in findings)
    assert {s: key(f) for s, f in by_seed.items()} == {s: key(f) for s, f in pristine.items()}

"""Differential fuzzing between builds: `ccdiff fuzz --stack CANDIDATE --against BASELINE`
(issue #21 point 3, docs/fuzzing.md "Differential fuzzing between builds").

The pinned ngtcp2 1.25.0 source is copied twice (tests/test_planted_bugs.py's helpers) and
built with `ccdiff build ngtcp2 --source` into a build folder under tmp: (a) with beta
7/10 -> 5/10 in lib/ngtcp2_cc.c, (b) with whitespace added to that same line.  AFL++
fuzzes each copy's instrumented harness (built from the checkout, under its own name);
triage replays every input through both builds.  The behavioural patch yields stored
differences and exit 1, the whitespace patch none and exit 0.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ccdiff.build import fetch
from ccdiff.replay import replay
from ccdiff.trace import load_trace
from ccdiff.fuzzing.triage import FIELDS, first_difference
from ccdiff.snapshot import Snapshot
from ccdiff.stacks import load_recipes

from .test_planted_bugs import MUTANTS, PINNED, build_copy, ccdiff, pristine_source  # noqa: F401
from planted_bugs import Planted   # bench/, on sys.path through test_planted_bugs

BASELINE = f"ngtcp2@{PINNED}"
BETA = MUTANTS["beta-0.5"][0]
WHITESPACE = Planted("ngtcp2-whitespace", "ngtcp2", "lib/ngtcp2_cc.c",
                     "  cstat->ssthresh = cstat->cwnd * 7 / 10;", "  cstat->ssthresh   =  cstat->cwnd * 7 / 10;  ",
                     "whitespace only: no behaviour changes, so no difference may be stored")
FUZZ_TIME = "15s"


@pytest.fixture(scope="module")
def builds(pristine_source, tmp_path_factory) -> dict:  # noqa: F811
    """Both patched copies and the baseline, built into one tmp build folder (the baseline
    from the verified archive already downloaded, so nothing is fetched)."""
    tmp = tmp_path_factory.mktemp("against")
    build_dir = tmp / "build"
    pin = load_recipes()["ngtcp2"].versions[PINNED]
    (build_dir / "downloads").mkdir(parents=True)
    shutil.copy(fetch(pin["url"], pin["sha256"]), build_dir / "downloads")
    specs = {name: build_copy(pristine_source, tmp, name, change)[0]
             for name, change in (("beta", BETA), ("whitespace", WHITESPACE))}
    done = ccdiff("build", BASELINE, build_dir=build_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(specs, build_dir=build_dir, fuzz_dir=tmp / "fuzz-build")


def fuzz_against(builds: dict, candidate: str, findings: Path, engine: str = "afl", time: str = FUZZ_TIME):
    import os
    old = os.environ.get("CCDIFF_FUZZ_BUILD_DIR")
    os.environ["CCDIFF_FUZZ_BUILD_DIR"] = str(builds["fuzz_dir"])   # instrumented builds under tmp too
    try:
        return ccdiff("fuzz", "--stack", candidate, "--against", BASELINE, "--engine", engine, "--time", time,
                      "--findings", str(findings), build_dir=builds["build_dir"])
    finally:
        if old is None:
            del os.environ["CCDIFF_FUZZ_BUILD_DIR"]
        else:
            os.environ["CCDIFF_FUZZ_BUILD_DIR"] = old


def stored(findings: Path, candidate: str) -> list:
    folder = findings / candidate / f"against-{BASELINE}"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*/finding.json"))]


def test_a_behavioural_patch_differs_from_the_baseline(builds, tmp_path, monkeypatch):
    spec = builds["beta"]
    assert spec.startswith("ngtcp2@local-") or spec.startswith("ngtcp2@git-")
    done = fuzz_against(builds, spec, tmp_path / "findings")
    assert done.returncode == 1, done.stdout + done.stderr
    found = stored(tmp_path / "findings", spec)
    assert found, done.stdout
    # The instrumented harness was built from the checkout, under the checkout's name.
    assert (builds["fuzz_dir"] / "ngtcp2" / spec.split("@")[1] / "afl" / "harness-afl").is_file()
    snapshot_diffs = [f for f in found if f["invariant"] in {f"diff--{name}" for name in FIELDS}]
    assert snapshot_diffs, [f["invariant"] for f in found]
    for info in found:
        assert info["against"] == BASELINE and info["invariant"].startswith("diff--")
        assert info["replay"].endswith(f"--stack {spec} --stack {BASELINE}")
        assert info["replay"] in done.stdout
    # beta 0.5: the first difference is a deeper cut on a congestion event.
    for info in snapshot_diffs:
        first = info["difference"]
        assert first["field"] in ("cwnd", "ssthresh"), info
        assert first["candidate"] < first["baseline"], info
    # The stored reproducer still shows its difference when both builds replay it.
    monkeypatch.setenv("CCDIFF_BUILD_DIR", str(builds["build_dir"]))
    for info in snapshot_diffs:
        repro = Path(info["replay"].split()[4])
        trace = load_trace(str(repro))
        assert len(trace.events) == info["events"]
        result = replay(trace, [spec, BASELINE])
        diff = first_difference(result.runs[spec], result.runs[BASELINE])
        assert diff is not None and (diff.index, diff.field) == (info["difference"]["event_index"],
                                                                 info["difference"]["field"])


def test_a_whitespace_patch_does_not_differ(builds, tmp_path):
    spec = builds["whitespace"]
    done = fuzz_against(builds, spec, tmp_path / "findings")
    assert done.returncode == 0, done.stdout + done.stderr
    assert stored(tmp_path / "findings", spec) == []
    assert "0 new difference(s)" in done.stdout
    # It did fuzz: executions were counted (a run that executes nothing exits 2).
    assert "executions" in done.stderr


def test_hypothesis_finds_the_behavioural_difference_too(builds, tmp_path):
    done = fuzz_against(builds, builds["beta"], tmp_path / "findings", engine="hypothesis", time="10s")
    assert done.returncode == 1, done.stdout + done.stderr
    assert stored(tmp_path / "findings", builds["beta"])


def test_against_itself_or_an_unbuilt_checkout_is_a_setup_error(builds, tmp_path):
    done = fuzz_against(builds, BASELINE, tmp_path / "f", engine="hypothesis", time="1s")
    assert done.returncode == 2 and "the same build" in done.stderr
    done = fuzz_against(builds, "ngtcp2@local-0000000000", tmp_path / "f", time="1s")
    assert done.returncode == 2 and "ccdiff build ngtcp2 --source" in done.stderr


def snap(**changes) -> Snapshot:
    base = Snapshot(12000, None, 0, "slow_start", None, None, float("nan"), None)
    return base._replace(**changes)


class FakeRun:
    def __init__(self, snapshots, error=None):
        self.snapshots, self.error = snapshots, error


def test_first_difference_is_the_first_event_then_the_first_field():
    same = [snap(), snap(cwnd=13200)]
    assert first_difference(FakeRun(same), FakeRun(list(same))) is None      # NaN w_max equals NaN
    diff = first_difference(FakeRun([snap(), snap(cwnd=6000, ssthresh=6000)]),
                            FakeRun([snap(), snap(cwnd=8400, ssthresh=8400)]))
    assert (diff.index, diff.field, diff.candidate, diff.baseline) == (1, "cwnd", 6000, 8400)
    diff = first_difference(FakeRun([snap(phase="recovery")]), FakeRun([snap()]))
    assert (diff.index, diff.field) == (0, "phase")
    diff = first_difference(FakeRun([snap(ssthresh=1)]), FakeRun([snap()]))
    assert (diff.field, diff.candidate, diff.baseline) == ("ssthresh", 1, None)
    diff = first_difference(FakeRun([snap()], error="event 1: boom"), FakeRun([snap(), snap()]))
    assert (diff.index, diff.field, diff.candidate) == (1, "error", "event 1: boom")

"""`matrix --against` and `conform --against`: only what a baseline build does not do counts
(issue #21 point 3, ccdiff/baseline.py).

quiche 0.26.0 pushes its recovery start into the future (the bug ccdiff exists for); 0.30.0
does not.  Judged against 0.30.0, 0.26.0 has new violations; judged against 0.26.0, 0.30.0
has none, although the pristine stacks both have findings of their own.  The same build
under an option that is its default changes nothing at all.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ccdiff.baseline import new_in_conform, new_in_matrix
from ccdiff.build import ensure_built
from ccdiff.paths import project_root

OLD, NEW = "quiche@0.26.0", "quiche@0.30.0"
EXAMPLES = ["examples/death-spiral.jsonl", "examples/idle-restart.jsonl"]


def ccdiff(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], cwd=project_root(), capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, COLUMNS="200"))


@pytest.fixture(scope="module", autouse=True)
def built():
    for spec in (OLD, NEW):
        ensure_built(spec)


def case(stack, seed, *invariants, scenario="s", status="violation"):
    return {"stack": stack, "scenario": scenario, "seed": seed,
            "findings": [{"invariant": i, "status": status, "detail": i} for i in invariants]}


def test_a_violation_the_baseline_has_on_another_seed_is_reshuffled_not_new():
    cases = [case("base", 0, "stuck-at-minimum"), case("base", 1),
             case("cand", 0), case("cand", 1, "stuck-at-minimum", "excess-reduction"),
             case("cand", 2, "growth-in-recovery", status="deviation"),
             case("base", 0, "excess-reduction", scenario="other")]
    result = new_in_conform(cases, [("cand", "base")])["cand"]
    assert [(i["seed"], i["invariant"]) for i in result["new"]] == [(1, "excess-reduction")]
    assert [(i["seed"], i["invariant"]) for i in result["reshuffled"]] == [(1, "stuck-at-minimum")]


def test_a_matrix_violation_is_new_only_where_the_baseline_lacks_it_on_that_trace():
    findings = [{"stack": "base", "trace": "a", "invariant": "x", "status": "violation"},
                {"stack": "cand", "trace": "a", "invariant": "x", "status": "violation"},
                {"stack": "cand", "trace": "b", "invariant": "x", "status": "violation"},
                {"stack": "cand", "trace": "a", "invariant": "y", "status": "deviation"}]
    result = new_in_matrix({"findings": findings, "differences": []}, [("cand", "base")])["cand"]
    assert [(f["trace"], f["invariant"]) for f in result["new"]] == [("b", "x")]


def test_matrix_against_the_fixed_release_finds_the_bug_and_where_the_builds_part(tmp_path):
    out = tmp_path / "m.json"
    done = ccdiff("matrix", *EXAMPLES, "--stack", OLD, "--against", NEW, "--json", str(out))
    assert done.returncode == 1, done.stdout + done.stderr
    against = json.loads(out.read_text())["against"][OLD]
    assert against["baseline"] == NEW
    assert "future-recovery-start" in {f["invariant"] for f in against["new"]}
    parted = {d["trace"]: d for d in against["differs"]}
    assert set(parted) == set(EXAMPLES)
    # death-spiral: the two releases agree until the loss the bug mishandles.
    bug = min(f["event_index"] for f in against["new"] if f["trace"] == EXAMPLES[0])
    assert 0 < parted[EXAMPLES[0]]["event"] <= bug
    assert "new future-recovery-start" in done.stdout


def test_matrix_against_the_buggy_release_has_nothing_new(tmp_path):
    out = tmp_path / "m.json"
    done = ccdiff("matrix", *EXAMPLES, "--stack", NEW, "--against", OLD, "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(out.read_text())["against"][NEW]["new"] == []


def test_the_same_code_under_another_name_differs_nowhere(tmp_path):
    out = tmp_path / "m.json"
    done = ccdiff("matrix", *EXAMPLES, "--stack", f"{NEW}:cc=cubic", "--against", NEW, "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(out.read_text())["against"][f"{NEW}:cc=cubic"] == {"baseline": NEW, "new": [], "consequences": [],
                                                                           "differs": []}


def test_conform_against_the_fixed_release_reports_new_violations_and_pairs_the_reno_aliases(tmp_path):
    done = ccdiff("conform", "--stack", OLD, "--against", NEW, "--scenario", "death-spiral", "--seeds", "2",
                  "--jobs", "1", "--no-report", "--out", str(tmp_path / "c"))
    assert done.returncode == 1, done.stdout + done.stderr
    against = json.loads((tmp_path / "c" / "summary.json").read_text())["against"]
    assert set(against) == {OLD, "quiche-reno@0.26.0"}
    assert against["quiche-reno@0.26.0"]["baseline"] == "quiche-reno@0.30.0"
    assert "future-recovery-start" in {i["invariant"] for i in against[OLD]["new"]}


def test_conform_against_the_buggy_release_exits_0_although_the_fixed_one_has_findings(tmp_path):
    done = ccdiff("conform", "--stack", NEW, "--against", OLD, "--scenario", "death-spiral", "--seeds", "2",
                  "--jobs", "1", "--no-report", "--out", str(tmp_path / "c"))
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert all(r["new"] == [] for r in summary["against"].values())
    # Without --against this run fails: quiche-reno@0.30.0 breaks invariants on death-spiral
    # seed 0 -- as 0.26.0's Reno does on the same seed, so nothing of it is new.
    assert any(c["stack"] == "quiche-reno@0.30.0" and c["status"] == "fail" for c in summary["cases"])


@pytest.mark.parametrize("args, says", [
    (["matrix", EXAMPLES[0], "--against", NEW], "name at least one other build"),
    (["matrix", EXAMPLES[0], "--stack", NEW, "--against", "oracle"], "not the oracle"),
    (["conform", "--stack", OLD, "--against", NEW, "--baseline", "x.json"], "cannot be combined"),
    (["conform", "--stack", OLD, "--against", NEW, "--shard", "1/2"], "cannot be combined"),
    (["conform", "--stack", NEW, "--against", NEW], "name at least one other build"),
])
def test_a_wrong_against_is_a_setup_error(args, says, tmp_path):
    done = ccdiff(*args, "--out", str(tmp_path / "o")) if args[0] == "conform" else ccdiff(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr
    assert not (tmp_path / "o").exists()


def test_a_divergence_after_a_shared_violation_is_its_consequence_not_new():
    """Issue #30 item 10: a divergence that follows a violation the baseline shares on the same
    trace is that violation's consequence."""
    findings = [{"stack": "base", "trace": "a", "invariant": "excess-reduction", "status": "violation", "event_index": 5},
                {"stack": "cand", "trace": "a", "invariant": "excess-reduction", "status": "violation", "event_index": 5},
                {"stack": "cand", "trace": "a", "invariant": "trajectory-divergence", "status": "violation",
                 "event_index": 9},
                {"stack": "cand", "trace": "b", "invariant": "trajectory-divergence", "status": "violation",
                 "event_index": 9}]
    result = new_in_matrix({"findings": findings, "differences": []}, [("cand", "base")])["cand"]
    assert [f["trace"] for f in result["new"]] == ["b"]
    assert [f["trace"] for f in result["consequences"]] == ["a"]


def test_conform_against_judges_a_new_violation_on_the_candidates_own_trace(tmp_path):
    """Issue #30 item 10: the closed loop of a changed build makes inputs the baseline's own loop
    never made.  quiche 0.30.0 with HyStart++ off diverges on persistent-congestion, where 0.30.0's
    own loop does not; but replaying the candidate's own trace, 0.30.0 also ignores the persistent
    congestion there (cloudflare/quiche#2680) and the divergence follows it: shared, not new."""
    out = tmp_path / "out"
    candidate = f"{NEW}:hystart=off"
    done = ccdiff("conform", "--stacks", candidate, "--against", NEW, "--scenarios", "persistent-congestion",
                  "--seeds", "1", "--no-report", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    against = json.loads((out / "summary.json").read_text())["against"][candidate]
    assert against["new"] == [] and against["reshuffled"] == []
    (shared,) = against["shared"]
    assert shared["invariant"] == "trajectory-divergence"
    assert shared["why"].startswith("it follows persistent-congestion-ignored at event ")
    assert shared["why"].endswith(f", which {NEW} shares on this trace")
    said = " ".join(done.stdout.split())
    assert "0 new violations, 0 reshuffled" in said and f"1 shared ({NEW} makes it too" in said

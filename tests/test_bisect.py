"""`ccdiff bisect`: the binary search on fake judges (pure functions), and one real bisect
over quiche 0.26.0 and 0.26.1 (built first when missing, tests/conftest.py; the bisect itself builds nothing)."""
import json
import math
import os

import pytest

from ccdiff.bisect import BAD, GOOD, SKIP, search
from ccdiff.errors import SetupError

RELEASES = [f"0.{i}.0" for i in range(21)]


class Counting:
    def __init__(self, verdict):
        self.verdict, self.calls = verdict, []

    def __call__(self, version):
        self.calls.append(version)
        return self.verdict(RELEASES.index(version))


@pytest.mark.parametrize("fixed_at", range(1, 21))
def test_a_fix_is_found_wherever_it_is(fixed_at):
    judge = Counting(lambda i: GOOD if i >= fixed_at else BAD)
    found = search(RELEASES, judge)
    assert found.direction == "fix"
    assert found.first_good == RELEASES[fixed_at]
    assert found.last_bad == RELEASES[fixed_at - 1]
    assert found.first_bad == RELEASES[0]
    assert len(judge.calls) == len(set(judge.calls))                 # nothing judged twice
    assert len(judge.calls) <= 2 + math.ceil(math.log2(len(RELEASES) - 1))


@pytest.mark.parametrize("broken_at", range(1, 21))
def test_a_regression_is_found_wherever_it_is(broken_at):
    judge = Counting(lambda i: BAD if i >= broken_at else GOOD)
    found = search(RELEASES, judge)
    assert (found.direction, found.first_bad, found.last_good) == \
        ("regression", RELEASES[broken_at], RELEASES[broken_at - 1])
    assert found.first_good is None
    assert len(judge.calls) <= 2 + math.ceil(math.log2(len(RELEASES) - 1))


def test_good_and_bad_bound_the_search():
    judge = Counting(lambda i: BAD if 5 <= i < 12 else GOOD)       # broke at 5, fixed at 12
    found = search(RELEASES, judge, good="0.3.0", bad="0.9.0")
    assert (found.direction, found.first_bad) == ("regression", "0.5.0")
    assert all(3 <= RELEASES.index(v) <= 9 for v in judge.calls)
    found = search(RELEASES, Counting(lambda i: BAD if 5 <= i < 12 else GOOD), good="0.15.0", bad="0.7.0")
    assert (found.direction, found.first_good, found.last_bad) == ("fix", "0.12.0", "0.11.0")


def test_ends_that_do_not_show_the_difference_are_refused():
    with pytest.raises(SetupError, match="--good 0.3.0: judged bad"):
        search(RELEASES, Counting(lambda i: BAD), good="0.3.0", bad="0.9.0")
    found = search(RELEASES, Counting(lambda i: GOOD))
    assert found.direction == "none" and "both good" in found.note


def test_releases_that_cannot_be_judged_are_skipped():
    unbuildable = {0, 1, 9, 10, 11}
    judge = Counting(lambda i: SKIP if i in unbuildable else GOOD if i >= 14 else BAD)
    found = search(RELEASES, judge)
    assert (found.first_bad, found.first_good, found.last_bad) == ("0.2.0", "0.14.0", "0.13.0")
    assert found.verdicts["0.0.0"] == SKIP
    # skipped releases on the boundary: the answer is the first judged one past it
    judge = Counting(lambda i: SKIP if i in (13, 14) else GOOD if i >= 14 else BAD)
    found = search(RELEASES, judge)
    assert (found.last_bad, found.first_good) == ("0.12.0", "0.15.0")


def test_nothing_judgeable_is_an_error():
    with pytest.raises(SetupError, match="fewer than two releases"):
        search(RELEASES, Counting(lambda i: SKIP))


# --- one real bisect, only over releases already built ------------------------------------------

def _built(*versions):
    from ccdiff.build import is_stale
    from ccdiff.stacks import load_recipes
    recipe = load_recipes()["quiche"]
    return all(recipe.library(v).exists() and not is_stale(recipe, v) for v in versions)


def test_real_bisect_names_0_26_1_as_the_death_spiral_fix(tmp_path, capsys, monkeypatch, quiche_releases):
    quiche_releases("0.26.0", "0.26.1")
    assert _built("0.26.0", "0.26.1")
    from ccdiff import registry
    from ccdiff.cli import main
    monkeypatch.setenv("CCDIFF_CRATES_INDEX", (tmp_path / "no-index").as_uri())   # offline: no registry
    monkeypatch.setattr(registry, "_CACHE", {})
    out = tmp_path / "bisect.json"
    rc = main(["bisect", "examples/death-spiral.jsonl", "--stack", "quiche", "--invariant",
               "future-recovery-start", "--bad", "0.26.0", "--good", "0.26.1", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["direction"] == "fix"
    assert doc["first_good_after"]["version"] == "0.26.1"
    assert doc["last_bad_before_fix"]["version"] == "0.26.0"
    assert doc["releases_built"] == []                              # reused, never built here
    assert doc["first_good_after"]["tag"] == "https://github.com/cloudflare/quiche/releases/tag/0.26.1"
    span = doc["commit_range"]
    assert (span["from"], span["to"]) == ("0.26.0", "0.26.1")
    if "from_commit" in span:                                        # the crates ship .cargo_vcs_info.json
        assert span["compare"].startswith("https://github.com/cloudflare/quiche/compare/")
    assert "first good after it: quiche@0.26.1" in capsys.readouterr().out


def test_bisect_usage_errors_are_one_line(capsys):
    from ccdiff.cli import main
    assert main(["bisect", "examples/death-spiral.jsonl", "--stack", "quiche@0.26.0", "--invariant", "x",
                 "--all"]) == 2
    assert "without a version" in capsys.readouterr().err
    assert main(["bisect", "--scenario", "death-spiral", "--stack", "quiche", "--all"]) == 2
    assert "--pass-below" in capsys.readouterr().err
    assert main(["bisect", "examples/death-spiral.jsonl", "--stack", "quiche", "--invariant",
                 "future-recovery-start"]) == 2
    assert "--all" in capsys.readouterr().err
    assert main(["bisect", "examples/death-spiral.jsonl", "--stack", "quiche", "--invariant", "nosuch", "--all"]) == 2
    assert "unknown; one of" in capsys.readouterr().err

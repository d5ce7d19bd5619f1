"""bench/mutation.py: the C operator set, and one real ngtcp2 mutant judged end to end
(issue #21 item 4, docs/detection-power.md "Mutation score").

The operator test runs on a small C snippet: comments, string literals, preprocessor
lines (a continued #define among them), declarators (`int *p`, `const char *s`) and
array sizes in declarations are never mutated, unary minus is left alone, and the order
is the file's.  The end-to-end test plants one relational swap in ngtcp2's CUBIC
on_ack_recv (the 1.5x cap of the cubic target), builds it with `ccdiff build ngtcp2
--source` into a build folder under tmp, and judges it against the pinned build on every
example and a one-seed conform: killed, by ca-growth-bound on an example; the control (the
same path, no change) is identical.
"""
from __future__ import annotations

import json
import sys

import pytest

from ccdiff.paths import project_root

sys.path.insert(0, str(project_root() / "bench"))
import mutation   # noqa: E402

SNIPPET = r"""#include <stdio.h>
#define LIMIT(a) ((a) < 3 && \
                  (a) > 1)
/* a < b in a comment */
static int table[4];
int f(int a, int *p) {
  const char *s = "x < y";  // a > b
  if (a <= 2 && *p) {
    return a * 2 - 1;
  }
  return -a + table[0];
}
int g(void) { return 0x10 != 0; }
"""

EXPECTED = [
    ("f", 8, 7, "neg", "a <= 2 && *p", "!(a <= 2 && *p)"),
    ("f", 8, 9, "ror", "<=", "<"),
    ("f", 8, 9, "ror", "<=", ">"),
    ("f", 8, 12, "icr", "2", "1"),
    ("f", 8, 12, "icr", "2", "3"),
    ("f", 8, 14, "lcr", "&&", "||"),
    ("f", 9, 14, "aor", "*", "/"),
    ("f", 9, 16, "icr", "2", "1"),
    ("f", 9, 16, "icr", "2", "3"),
    ("f", 9, 18, "aor", "-", "+"),
    ("f", 9, 20, "icr", "1", "0"),
    ("f", 9, 20, "icr", "1", "2"),
    ("f", 11, 13, "aor", "+", "-"),
    ("f", 11, 21, "icr", "0", "1"),        # an index, not a declaration's array size
    ("g", 13, 22, "icr", "0x10", "0x11"),
    ("g", 13, 22, "icr", "0x10", "0xf"),
    ("g", 13, 27, "ror", "!=", "=="),
    ("g", 13, 30, "icr", "0", "1"),
]


def as_tuples(found):
    return [(m.function, m.line, m.col, m.operator, m.old, m.new) for m in found]


def test_the_operator_set_on_a_snippet():
    found = mutation.mutants(SNIPPET, "x.c")
    assert as_tuples(found) == EXPECTED
    # Each mutant changes exactly its span, and the text around it is the original.
    for m in found:
        mutated = m.apply(SNIPPET)
        assert mutated[:m.start] == SNIPPET[:m.start] and mutated.endswith(SNIPPET[m.end:])
    assert mutation.functions_in(SNIPPET) == ["f", "g"]
    assert as_tuples(mutation.mutants(SNIPPET, "x.c", functions=["g"])) == EXPECTED[-4:]
    assert [m.operator for m in mutation.mutants(SNIPPET, "x.c", operators=("lcr",))] == ["lcr"]


def test_sampling_is_deterministic_and_in_file_order():
    found = mutation.mutants(SNIPPET, "x.c")
    a, b = mutation.choose(found, 5, seed=3), mutation.choose(found, 5, seed=3)
    assert a == b and len(a) == 5
    assert a == sorted(a, key=lambda m: (m.start, m.end, m.new))
    assert mutation.choose(found, 5, seed=4) != a        # another seed, another subset
    assert mutation.choose(found, 100, seed=0) == found


def test_the_statement_line_decides_unreached():
    # gcov counts a multi-line condition on its first line.
    assert mutation.nearest_instrumented(12, covered={10}, uncovered={11}) is False
    assert mutation.nearest_instrumented(12, covered={11}, uncovered={10}) is True
    assert mutation.nearest_instrumented(3, covered={10}, uncovered=set()) is None


def test_bad_input_is_one_line_and_exit_2(capsys):
    assert mutation.main(["oracle", "--list"]) == 2      # ccdiff's own controller has no pinned source
    assert mutation.main(["ngtcp2", "--functions", "no_such_function", "--list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "unknown stack 'oracle'" in err[0] and "no function no_such_function" in err[1]


PYTHON_SNIPPET = """\
BETA = 0.7


def w_cubic(t, k, w_max):
    # a comment: x < 1 is never mutated, nor is "a < b" in a string
    if t < k and w_max > 0:
        return -0.4 * (t - k) ** 3 + w_max
    return w_max * 2
"""


def test_the_c_operators_over_python_tokens():
    """bench/mutation_python.py: aioquic's cubic.py gets the C set -- ror, aor (and ** -> *),
    lcr as and/or, icr on integers only, neg as `not (...)` -- never in comments, strings, float
    literals or a unary minus; every mutant names its function and applies to its own span."""
    from mutation_python import python_mutants
    found = python_mutants(PYTHON_SNIPPET, "snippet.py")
    ids = [m.id for m in found]
    assert ids == [
        "snippet.py:6:8:neg:!", "snippet.py:6:10:ror:<=", "snippet.py:6:10:ror:>=", "snippet.py:6:14:lcr:or",
        "snippet.py:6:24:ror:<=", "snippet.py:6:24:ror:>=", "snippet.py:6:26:icr:1",
        "snippet.py:7:21:aor:/", "snippet.py:7:26:aor:+", "snippet.py:7:31:aor:*", "snippet.py:7:34:icr:2",
        "snippet.py:7:34:icr:4", "snippet.py:7:36:aor:-", "snippet.py:8:18:aor:/", "snippet.py:8:20:icr:1",
        "snippet.py:8:20:icr:3"]
    assert {m.function for m in found} == {"w_cubic"}
    by_id = {m.id: m for m in found}
    assert by_id["snippet.py:6:8:neg:!"].apply(PYTHON_SNIPPET).splitlines()[5] == "    if not (t < k and w_max > 0):"
    assert by_id["snippet.py:7:31:aor:*"].apply(PYTHON_SNIPPET).splitlines()[6] == \
        "        return -0.4 * (t - k) * 3 + w_max"
    assert python_mutants(PYTHON_SNIPPET, "snippet.py", ["other"]) == []


# A listing recorded with `cargo mutants --Zmutate-file cargo-mutants-snippet.rs --json`
# (cargo-mutants 27.1.0): its spans, replacements and diffs.
FIXTURES = project_root() / "tests" / "fixtures"


def test_a_recorded_cargo_mutants_listing_becomes_mutants():
    text = (FIXTURES / "cargo-mutants-snippet.rs").read_text()
    listing = json.loads((FIXTURES / "cargo-mutants-listing.json").read_text())
    found = mutation.rust_mutants(listing, {"snippet.rs": text})
    assert len(found) == len(listing) == 13            # the #[cfg(test)] module has none
    assert found == sorted(found, key=lambda m: (m.start, m.end, m.new))
    ids = [m.id for m in found]
    assert len(set(ids)) == len(ids)
    assert "cargo-mutants-snippet.rs" not in ids[0] and ids[:4] == [
        "snippet.rs:5:5:cargo-mutants:-1.0", "snippet.rs:5:5:cargo-mutants:0.0",
        "snippet.rs:5:5:cargo-mutants:1.0", "snippet.rs:5:9:cargo-mutants:+"]
    by_id = {m.id: m for m in found}
    body = by_id["snippet.rs:5:5:cargo-mutants:0.0"]
    assert (body.function, body.kind, body.old) == ("w_cubic", "FnValue", "0.4 * (t - k).powi(3) + w_max")
    assert body.apply(text).splitlines()[4] == "    0.0"
    delete = by_id["snippet.rs:9:5:cargo-mutants:delete"]
    assert (delete.old, delete.new, delete.kind) == ("!", "", "UnaryOperator")
    assert delete.apply(text).splitlines()[8] == "    start.map_or(false, |s| sent <= s)"
    # Every mutant's changed line is the one of cargo-mutants' own diff (less its marker comment).
    for m, entry in zip(found, sorted(listing, key=lambda e: (e["span"]["start"]["line"], e["span"]["start"]["column"],
                                                              e["span"]["end"]["line"], e["span"]["end"]["column"],
                                                              e["replacement"]))):
        added = [line[1:].replace(" /* ~ changed by cargo-mutants ~ */", "").replace("/* ~ changed by cargo-mutants ~ */", "")
                 for line in entry["diff"].splitlines() if line.startswith("+") and not line.startswith("+++")]
        assert added[0].rstrip() in m.apply(text).splitlines(), (m.id, added)
    only = mutation.rust_mutants(listing, {"snippet.rs": text}, functions=["in_recovery"])
    assert [m.new for m in only] == ["", "false", "true", ">"]
    assert mutation.rust_mutants(listing, {"other.rs": text}) == []


def test_the_rust_path_without_cargo_mutants_exits_2(capsys, monkeypatch):
    monkeypatch.setattr(mutation.shutil, "which", lambda name: None)
    assert mutation.main(["quiche", "--list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("install with: cargo install --locked cargo-mutants"), err


# ngtcp2 1.25.0 lib/ngtcp2_cc.c:424, in ngtcp2_cc_cubic_cc_on_ack_recv:
#   } else if (2 * w_cubic_next > 3 * cstat->cwnd) {   target = cwnd * 3 / 2;
# `>` -> `<=` caps the target at 1.5 cwnd exactly when W_cubic is below it, and lets it
# through when above: growth beyond 1.5x per RTT (RFC 9438 §4.2), ca-growth-bound on the
# idle-restart example.
CAP_SWAP = "ngtcp2_cc.c:424:31:ror:<="


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    work = tmp_path_factory.mktemp("mutation")
    return mutation.Campaign("ngtcp2", work, mutation.glob_examples(), seeds=1)


def test_a_real_ngtcp2_mutant_is_killed_and_the_control_is_identical(campaign, tmp_path):
    plan = {m.id: m for m in mutation.plan("ngtcp2", ["ngtcp2_cc_cubic_cc_on_ack_recv"], None, 0, tmp_path)}
    mutant = plan[CAP_SWAP]
    assert (mutant.old, mutant.new) == (">", "<=")
    row = campaign.judge(mutant, None)
    assert row["build"] == "ok"
    assert row["after"]["verdict"] == "killed", row["after"]
    # The kill points at the mutated behaviour: the 1.5x cap, on an example trace.
    assert any(k.startswith("replay ") and "ca-growth-bound" in k for k in row["after"]["kills"]), row["after"]
    assert not row["after"]["crash"]
    control = campaign.judge(None, None)
    for column in ("before", "after"):
        assert control[column]["verdict"] == "survived-identical", control
        assert control[column]["replay_differs"] == [] and control[column]["conform_differs"] == 0


def test_conform_kills_use_the_against_rule():
    """A new violation is a kill only where the pristine build has it on no seed of that scenario;
    on another seed it is reshuffled; a case the pristine run lacks is not judged."""
    def case(*violations):
        return {"status": "fail" if violations else "pass", "violations": list(violations), "metrics": "m"}
    pristine = {"cubic|s|0": case("a"), "cubic|s|1": case(), "cubic|t|0": case()}
    mutant = {"cubic|s|0": case(), "cubic|s|1": case("a", "b"), "cubic|t|0": case("c"), "cubic|u|0": case("d")}
    judged = mutation.judge_conform(pristine, mutant)
    assert judged["killed"] == {"cubic|s|b": [1], "cubic|t|c": [0]}
    assert judged["reshuffled"] == {"cubic|s|a": [1]}
    assert judged["differs"] == ["cubic|s|0", "cubic|s|1", "cubic|t|0"]


# ngtcp2 1.25.0 lib/ngtcp2_cc.c:501, in ngtcp2_cc_cubic_cc_congestion_event:
#   cstat->ssthresh = cstat->cwnd * 7 / 10;    ->  * 7 / 9: β 0.78 (shallow-reduction)
BETA_79 = "ngtcp2_cc.c:501:39:icr:9"


def test_the_differential_fuzz_judges_a_mutant_on_inputs_the_pristine_build_passes(tmp_path):
    """--fuzz-seconds: `ccdiff fuzz --stack MUTANT --against PRISTINE` per mutant (Hypothesis
    here, no instrumented build).  The control (no change) shows no difference; β 7/9 differs
    from the pristine build, and an input on which only the mutant violates an invariant kills
    it, named as a fuzz kill."""
    run = mutation.Campaign("ngtcp2", tmp_path, mutation.glob_examples()[:1], seeds=0,
                            fuzz_seconds=10, fuzz_engine="hypothesis")
    control = run.judge(None, None)
    assert control["after"]["verdict"] == "survived-identical", control["after"]
    assert control["after"]["fuzz_differs"] == [] and control["after"]["fuzz_error"] is None
    plan = {m.id: m for m in mutation.plan("ngtcp2", ["ngtcp2_cc_cubic_cc_congestion_event"], None, 0, tmp_path)}
    row = run.judge(plan[BETA_79], None)
    after = row["after"]
    assert after["fuzz_error"] is None and after["fuzz_differs"], after
    assert any(k.startswith("fuzz ") for k in after["kills"]), after
    assert "fuzz" in after["killed_by"]
    assert not (tmp_path / "fuzz" / "fuzz-build" / "ngtcp2").exists() or not any(
        (tmp_path / "fuzz" / "fuzz-build" / "ngtcp2").iterdir())   # no instrumented build kept


def test_fuzz_seconds_must_not_be_negative(capsys):
    assert mutation.main(["ngtcp2", "--fuzz-seconds", "-1", "--list"]) == 2
    assert "--fuzz-seconds must be 0 or more" in capsys.readouterr().err


def test_fuzz_kills_read_the_diff_triage_signature_of_the_candidate_only():
    from ccdiff.fuzzing.triage import invariant_only_in_candidate, only_in_signature
    assert invariant_only_in_candidate(only_in_signature("w-max-mismatch", "candidate")) == "w-max-mismatch"
    assert invariant_only_in_candidate(only_in_signature("w-max-mismatch", "baseline")) is None
    assert invariant_only_in_candidate("diff--cwnd") is None


@pytest.mark.parametrize("stack, mutant_id, invariant", [
    # Linux 6.12 tcp_cubic.c:533, cubictcp_register: cube_factor = 1ull << (10+3*BICTCP_HZ),
    # 2^40, planted as 2^41 -> K from another constant (RFC 9438 Eq. 2): k-mismatch.  The
    # kernel tree comes out of the package's tarball (mutation.source_tree).
    ("linux", "tcp_cubic.c:533:28:icr:2", "k-mismatch"),
    # aioquic 1.7.2 cubic.py:178, on_packets_lost's fast convergence: W_max = cwnd * (1 + β) / 2,
    # planted as / 3 -> w-max-mismatch (RFC 9438 §4.7).  The C operators over Python tokens.
    ("aioquic", "cubic.py:178:84:icr:3", "w-max-mismatch"),
])
def test_linux_and_aioquic_mutants_are_planted_built_and_judged(stack, mutant_id, invariant, tmp_path):
    plan = {m.id: m for m in mutation.plan(stack, None, None, 0, tmp_path)}
    campaign = mutation.Campaign(stack, tmp_path, mutation.glob_examples(), seeds=0)
    row = campaign.judge(plan[mutant_id], None)
    assert row["build"] == "ok" and row["after"]["verdict"] == "killed", row
    assert any(k.startswith("replay ") and invariant in k for k in row["after"]["kills"]), row["after"]
    control = campaign.judge(None, None)
    assert control["after"]["verdict"] == "survived-identical" and control["after"]["replay_differs"] == []

"""What a build changes against a baseline build: `matrix --against` and `conform --against`.

The maintainer's question before merging a congestion-control patch is "what else does my
change change?" (issue #21, point 3).  The pristine stacks already have findings, so an exit
code that says "some violation" says nothing about a patch; these functions keep only what
the baseline build does not do on the same inputs:

- replay (matrix): a violation of the candidate is new when the baseline has no violation of
  that invariant on the same trace; every trace on which the two builds' snapshots differ is
  listed with the first event that differs (the change's footprint, finding or not);
- closed loop (conform): a violation is new when the baseline has no violation of that
  invariant on ANY seed of that scenario.  A patch that changes a trajectory reshuffles the
  loop, and an existing defect moves from one seed to another: such a violation is listed as
  `reshuffled` (on a seed where the baseline did not have it, but the baseline has it on
  another), never as new.

bench/mutation.py judges its mutants by the same rule (its judge_conform, which also compares
the runs' metrics): "killed only when a finding that the pristine build does not have, on the
same inputs, points at the mutated behaviour" (issue #21 point 4).
"""
from __future__ import annotations

from .errors import SetupError
from .stacks import load_recipes, resolve


def pairs(candidates: list, baseline: str, recipes: dict | None = None) -> list:
    """[(candidate label, baseline label)]: each candidate with the baseline, and, where both
    are builds of one stack, each Reno alias of the candidate with the baseline's (conform
    adds the aliases as controls, matrix when they are named)."""
    recipes = load_recipes() if recipes is None else recipes
    base = resolve(baseline, recipes)
    if base.kind != "native":
        raise SetupError(f"--against {baseline}: a stack build to compare with, not the oracle "
                         "(without --against every stack is judged against the oracle)")
    out = []
    for spec in candidates:
        target = resolve(spec, recipes)
        if target.label == base.label:
            raise SetupError(f"--against {baseline}: the same build as --stack {spec}")
        out.append((target.label, base.label))
        if target.kind == "native" and target.recipe.name == base.recipe.name and not target.options \
                and not base.options:
            for alias in sorted(target.recipe.aliases):   # named as conform's with_controls names them
                out.append(tuple(resolve(f"{alias}@{t.version}" if t.spec.version else alias, recipes).label
                                 for t in (target, base)))
    return out


def _violations(findings: list) -> set:
    return {f["invariant"] for f in findings if f["status"] == "violation"}


def new_in_matrix(matrix: dict, compared: list) -> dict:
    """{candidate: {"baseline", "new": [finding], "differs": [{trace, event, line}]}} from
    run_matrix's output (its findings carry their trace; first_difference from replay)."""
    by_trace: dict = {}
    for f in matrix["findings"]:
        if f["status"] == "violation":
            by_trace.setdefault((f["stack"], f["trace"]), set()).add(f["invariant"])
    out = {}
    for candidate, baseline in compared:
        new = [f for f in matrix["findings"] if f["stack"] == candidate and f["status"] == "violation"
               and f["invariant"] not in by_trace.get((baseline, f["trace"]), set())]
        differs = [dict(d) for d in matrix.get("differences", []) if d["stack"] == candidate]
        out[candidate] = {"baseline": baseline, "new": new, "differs": differs}
    return out


def split_by_baseline(candidate: dict, baseline: dict) -> tuple[list, list]:
    """The closed-loop rule, on {(scenario, seed): set of violated invariants} of each build:
    (new, reshuffled), each a sorted list of (scenario, seed, invariant) the candidate has and
    the baseline does not have on that seed -- new when the baseline has the invariant on no
    seed of the scenario, reshuffled when it has it on another.  `scenario` is any group key
    (bench/mutation.py groups by controller family and scenario)."""
    on_any: dict = {}
    for (scenario, _), invariants in baseline.items():
        on_any.setdefault(scenario, set()).update(invariants)
    new, reshuffled = [], []
    for (scenario, seed), invariants in sorted(candidate.items()):
        for inv in sorted(invariants - baseline.get((scenario, seed), set())):
            (reshuffled if inv in on_any.get(scenario, ()) else new).append((scenario, seed, inv))
    return new, reshuffled


def new_in_conform(cases: list, compared: list) -> dict:
    """{candidate: {"baseline", "new": [...], "reshuffled": [...]}}, each item
    {scenario, seed, invariant, detail}, sorted."""
    out = {}
    for candidate, baseline in compared:
        runs: dict = {candidate: {}, baseline: {}}
        details = {}
        for case in cases:
            if case["stack"] in runs:
                runs[case["stack"]][(case["scenario"], case["seed"])] = _violations(case.get("findings", []))
            if case["stack"] == candidate:
                details.update({(case["scenario"], case["seed"], f["invariant"]): f.get("detail", "")
                                for f in case.get("findings", []) if f["status"] == "violation"})
        new, reshuffled = split_by_baseline(runs[candidate], runs[baseline])
        as_items = lambda keys: [{"scenario": k[0], "seed": k[1], "invariant": k[2], "detail": details[k]}  # noqa: E731
                                 for k in keys]
        out[candidate] = {"baseline": baseline, "new": as_items(new), "reshuffled": as_items(reshuffled)}
    return out


def any_new(result: dict) -> bool:
    return any(r["new"] for r in result.values())

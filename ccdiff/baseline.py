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
  another), never as new.  And the candidate's own failing trace is replayed through the
  baseline build (issue #30 item 10): a changed trajectory brings pristine behaviour into
  view on inputs the baseline's own loop never made, so a violation the baseline also shows
  on that very trace is `shared`, never new;
- both: a trajectory divergence that follows a violation the baseline shares on the same
  trace (at or before the divergence) is that violation's consequence, never new.

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
    """{candidate: {"baseline", "new": [finding], "consequences": [finding], "differs": [{trace,
    event, line}]}} from run_matrix's output (its findings carry their trace; first_difference
    from replay)."""
    by_trace: dict = {}
    for f in matrix["findings"]:
        if f["status"] == "violation":
            by_trace.setdefault((f["stack"], f["trace"]), set()).add(f["invariant"])
    out = {}
    for candidate, baseline in compared:
        new, consequences = [], []
        mine = [f for f in matrix["findings"] if f["stack"] == candidate and f["status"] == "violation"]
        for f in mine:
            shared = by_trace.get((baseline, f["trace"]), set())
            if f["invariant"] in shared:
                continue
            same_trace = [g for g in mine if g["trace"] == f["trace"]]
            (consequences if follows_shared(f, same_trace, shared) else new).append(f)
        differs = [dict(d) for d in matrix.get("differences", []) if d["stack"] == candidate]
        out[candidate] = {"baseline": baseline, "new": new, "consequences": consequences, "differs": differs}
    return out


def follows_shared(finding: dict, same_trace: list, shared: set) -> str | None:
    """The shared violation a trajectory divergence follows (one of the candidate's violations
    on the same trace, at or before it, that the baseline has too), or None."""
    if finding["invariant"] != "trajectory-divergence":
        return None
    earlier = sorted((g["event_index"], g["invariant"]) for g in same_trace if g["invariant"] in shared
                     and g["invariant"] != "trajectory-divergence" and g["event_index"] <= finding["event_index"])
    return f"{earlier[0][1]} at event {earlier[0][0]}" if earlier else None


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


def new_in_conform(cases: list, compared: list, root=None) -> dict:
    """{candidate: {"baseline", "new": [...], "reshuffled": [...], "shared": [...]}}, each item
    {scenario, seed, invariant, detail}, sorted; a shared one also says `why`.  root: the run's
    folder, where the candidate's failing traces are (None, or a case without a kept trace:
    a new violation stays new, unjudged on its own input)."""
    out = {}
    for candidate, baseline in compared:
        runs: dict = {candidate: {}, baseline: {}}
        details, candidate_cases = {}, {}
        for case in cases:
            if case["stack"] in runs:
                runs[case["stack"]][(case["scenario"], case["seed"])] = _violations(case.get("findings", []))
            if case["stack"] == candidate:
                candidate_cases[(case["scenario"], case["seed"])] = case
                details.update({(case["scenario"], case["seed"], f["invariant"]): f.get("detail", "")
                                for f in case.get("findings", []) if f["status"] == "violation"})
        new, reshuffled = split_by_baseline(runs[candidate], runs[baseline])
        as_item = lambda k: {"scenario": k[0], "seed": k[1], "invariant": k[2], "detail": details[k]}  # noqa: E731
        still_new, shared = [], []
        replayed: dict = {}     # trace path -> the baseline's violations there: one replay per trace
        for key in new:
            why = _on_same_input(candidate_cases[key[:2]], key[2], baseline, root, replayed)
            if why:
                shared.append(dict(as_item(key), why=why))
            else:
                still_new.append(as_item(key))
        out[candidate] = {"baseline": baseline, "new": still_new, "reshuffled": [as_item(k) for k in reshuffled],
                          "shared": shared}
    return out


def _on_same_input(case: dict, invariant: str, baseline: str, root, replayed: dict) -> str | None:
    """Why the candidate's violation of `invariant` in `case` is not new on its own trace: the
    baseline build, replaying that trace, violates it too, or the violation is a divergence
    following one the baseline shares there.  None when it is new (or no trace was kept)."""
    if root is None or not case.get("trace"):
        return None
    from pathlib import Path
    from .replay import replay
    from .trace import load_trace
    path = Path(root) / case["trace"]
    if not path.is_file() or path.name.endswith(".connection.jsonl"):
        return None                     # a connection's record is not a trace to replay
    if path not in replayed:
        first: dict = {}                # invariant -> the baseline's first violation of it there
        for f in sorted(replay(load_trace(str(path)), [baseline]).violations, key=lambda f: f.event_index):
            first.setdefault(f.invariant, f.event_index)
        replayed[path] = first
    theirs = replayed[path]
    if invariant in theirs:
        return f"{baseline} violates it on this very trace too (event {theirs[invariant]})"
    mine = [f for f in case.get("findings", []) if f["status"] == "violation" and "event_index" in f]
    finding = next((f for f in mine if f["invariant"] == invariant), None)
    cause = finding and follows_shared(finding, mine, set(theirs))
    return f"it follows {cause}, which {baseline} shares on this trace" if cause else None


def any_new(result: dict) -> bool:
    return any(r["new"] for r in result.values())

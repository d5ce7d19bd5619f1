"""`ccdiff bisect`: which release broke it, which fixed it.

Releases of one stack (registry order, oldest first, yanked and pre-releases left out
unless named) are judged by a verdict function -- a trace replayed and an invariant
looked for, or a closed-loop scenario's pass rate over seeds -- in binary-search order.
Every judged release is built first (`ccdiff build STACK@VERSION`: the registry's
digest, the lock file); builds are reused, so an interrupted bisect resumes by
running the same command again.

The search itself (``search``) is a pure function of the ordered releases and a
judge; it assumes one transition between the two ends and finds it with
ceil(log2(n)) judgements.  A release that cannot be judged (it does not build) is
skipped, as ``git bisect skip``: the nearest untried release is judged instead.
"""
from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SetupError

GOOD, BAD, SKIP = "good", "bad", "skip"


@dataclass
class SearchResult:
    first_bad: str | None             # the first release judged bad (of the bad stretch)
    first_good: str | None            # the first good release after the bad stretch (the fix)
    last_good: str | None             # the last good release before first_bad (a regression's base)
    last_bad: str | None              # the last bad release before first_good (a fix's base)
    direction: str                    # "regression" (good -> bad), "fix" (bad -> good), "none"
    verdicts: dict = field(default_factory=dict)   # version -> good|bad|skip, in judging order
    note: str = ""


def _nearest_untried(order: list, lo: int, hi: int, verdicts: dict) -> int | None:
    """The index between lo and hi (exclusive) nearest their middle not yet skipped."""
    mid = (lo + hi) // 2
    for step in range(0, hi - lo):
        for i in (mid - step, mid + step):
            if lo < i < hi and verdicts.get(order[i]) != SKIP:
                return i
    return None


def boundary(order: list, lo: int, hi: int, judge, verdicts: dict) -> int:
    """order[lo] and order[hi] are judged and differ: the smallest i in (lo, hi] judged as
    order[hi] is, with every release between lo and i judged as order[lo] or skipped."""
    low_verdict = verdicts[order[lo]]
    while True:
        i = _nearest_untried(order, lo, hi, verdicts)
        if i is None:
            return hi
        if order[i] not in verdicts:
            verdicts[order[i]] = judge(order[i])
        if verdicts[order[i]] == SKIP:
            continue
        if verdicts[order[i]] == low_verdict:
            lo = i
        else:
            hi = i


def search(order: list, judge, good: str | None = None, bad: str | None = None) -> SearchResult:
    """order: releases oldest first.  judge(version) -> good|bad|skip.  Without good and bad,
    the two ends of order are judged first (--all).  Returns the transition between them."""
    verdicts: dict = {}
    if good is not None and bad is not None:
        if good not in order or bad not in order:
            raise SetupError(f"--good {good} / --bad {bad}: not among the releases searched")
        i, j = order.index(good), order.index(bad)
        if i == j:
            raise SetupError("--good and --bad name the same release")
        lo, hi = min(i, j), max(i, j)
        for v in (order[lo], order[hi]):
            verdicts[v] = judge(v)
        expected = {good: GOOD, bad: BAD}
        for v in (good, bad):
            if verdicts[v] != expected[v]:
                raise SetupError(f"--{expected[v]} {v}: judged {verdicts[v]}, not {expected[v]}; "
                                 "the ends must show the difference to bisect between them")
    else:
        if len(order) < 2:
            raise SetupError(f"bisect needs two releases or more; have {', '.join(order) or 'none'}")
        lo = hi = None
        for k in range(len(order)):                   # an end that cannot be judged: move inwards
            verdicts[order[k]] = judge(order[k])
            if verdicts[order[k]] != SKIP:
                lo = k
                break
        for k in range(len(order) - 1, (lo if lo is not None else len(order)), -1):
            verdicts[order[k]] = judge(order[k])
            if verdicts[order[k]] != SKIP:
                hi = k
                break
        if lo is None or hi is None:
            raise SetupError("fewer than two releases could be judged: "
                             + ", ".join(f"{v}={x}" for v, x in verdicts.items()))
    low, high = verdicts[order[lo]], verdicts[order[hi]]
    if low == high:
        return SearchResult(None, None, None, None, "none", verdicts,
                            f"{order[lo]} and {order[hi]} are both {low}: no transition between them to bisect")
    i = boundary(order, lo, hi, judge, verdicts)
    previous = next((order[k] for k in range(i - 1, lo - 1, -1) if verdicts.get(order[k]) not in (None, SKIP)),
                    order[lo])
    if low == GOOD:            # good -> bad: a regression
        return SearchResult(order[i], None, previous, None, "regression", verdicts,
                            f"still bad at {order[hi]}" if hi == len(order) - 1 else "")
    first_bad = order[lo]
    note = (f"bad at {first_bad}, the --bad release; older ones not searched" if bad is not None else
            f"bad from {first_bad}, the oldest release searched" if lo == 0 else
            f"bad from {first_bad}, the oldest release that could be judged")
    return SearchResult(first_bad, order[i], None, previous, "fix", verdicts, note)


# --- releases to search ------------------------------------------------------------------------

def candidate_releases(recipe, include_yanked: bool = False, include_pre: bool = False) -> list[str]:
    """The releases the adapter supports, oldest first: published ones (registry index) in the
    supported range, plus pinned and locked ones (a stack whose package versions are not its own)."""
    from .registry import is_prerelease, load_config, load_lock, published, support, version_key
    config = load_config(recipe.folder, recipe.name)
    versions = set(recipe.versions)
    if config is not None:
        versions |= {v for v, e in load_lock(config.lock_path).items() if include_yanked or not e.get("yanked")}
        try:
            releases = published(config) if config.same_version else []
        except SetupError as exc:            # offline: what is pinned, locked or built
            _log(f"warning: {exc}; searching pinned, locked and built releases only")
            releases = []
            folder = recipe.build_folder("x").parent
            if folder.is_dir():
                versions |= {p.name for p in folder.iterdir() if recipe.library(p.name).exists()
                             and not p.name.startswith(("local-", "git-"))}
        if True:
            for r in releases:
                if (r.yanked and not include_yanked) or (is_prerelease(r.version) and not include_pre):
                    continue
                versions.add(r.version)
        versions = {v for v in versions if support(config, v)[0]}
    return sorted(versions, key=version_key)


# --- judges ------------------------------------------------------------------------------------

class Judge:
    """Build (or reuse) a release, then run the check; progress on stderr."""

    def __init__(self, stack: str, options: str, check, describe: str, total_hint: int):
        self.stack, self.options, self.check, self.describe = stack, options, check, describe
        self.built: list = []
        self.reused: list = []
        self.records: dict = {}
        self.step = 0
        self.total_hint = total_hint

    def spec(self, version: str) -> str:
        return f"{self.stack}@{version}" + (f":{self.options}" if self.options else "")

    def __call__(self, version: str) -> str:
        from .build import build_target, is_current
        from .stacks import load_recipes
        self.step += 1
        recipe = load_recipes()[self.stack]
        started = time.monotonic()
        record = {"version": version}
        try:
            if is_current(recipe, version):
                self.reused.append(version)
                record["build"] = "reused"
            else:
                _log(f"[{self.step}/~{self.total_hint}] {self.stack}@{version}: building")
                build_target(recipe, version)
                self.built.append(version)
                record["build"] = "built"
            verdict, detail = self.check(self.spec(version))
        except SetupError as exc:
            verdict, detail = SKIP, str(exc).splitlines()[0]
        record.update(verdict=verdict, detail=detail, seconds=round(time.monotonic() - started, 1))
        self.records[version] = record
        _log(f"[{self.step}/~{self.total_hint}] {self.stack}@{version}: {verdict.upper()} ({detail}; "
             f"{record.get('build', 'not built')}, {record['seconds']} s)")
        return verdict


def trace_check(trace_path: str, invariant: str):
    from .trace import load_trace
    trace = load_trace(trace_path)

    def check(spec: str) -> tuple[str, str]:
        from .replay import replay
        result = replay(trace, [spec])
        run = next(iter(result.runs.values()))
        if run.error:
            raise SetupError(f"{spec}: {run.error}")
        hits = [f for f in result.violations if f.invariant == invariant]
        final = run.snapshots[-1].cwnd if run.snapshots else None
        if hits:
            return BAD, f"{invariant} x{sum(getattr(f, 'count', 1) for f in hits)}, final cwnd {final}"
        return GOOD, f"no {invariant}, final cwnd {final}"
    return check


def scenario_check(name: str, seeds: int, pass_below: float | None, invariant: str | None):
    from .sim.engine import simulate
    from .sim.scenario import load_scenario
    scenario = load_scenario(name)

    def check(spec: str) -> tuple[str, str]:
        passed, hits = 0, 0
        for seed in range(seeds):
            result = simulate(scenario, spec, seed, record=False)
            if result.status == "error":
                raise SetupError(f"{spec} seed {seed}: {'; '.join(result.reasons)[:200]}")
            passed += result.status == "pass"
            if invariant and any(f.get("invariant") == invariant and f.get("status") == "violation"
                                 for f in result.findings):
                hits += 1
        rate = passed / seeds
        if invariant:
            bad = hits > 0
            return (BAD if bad else GOOD), f"{invariant} in {hits}/{seeds} seeds, pass rate {rate:.0%}"
        bad = rate < pass_below
        return (BAD if bad else GOOD), f"pass rate {passed}/{seeds} = {rate:.0%} (bad below {pass_below:.0%})"
    return check


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the result --------------------------------------------------------------------------------

def release_info(recipe, version: str | None) -> dict | None:
    if version is None:
        return None
    from .registry import load_config, upstream_links
    from .stacks import build_info
    info = {"version": version, **upstream_links(load_config(recipe.folder, recipe.name), version)}
    vcs = build_info(recipe, version).get("vcs")
    if vcs is None:                                    # built before build-info recorded it
        for path in (recipe.build_folder(version) / "src").glob("*/.cargo_vcs_info.json"):
            try:
                vcs = {"commit": json.loads(path.read_text())["git"]["sha1"]}
            except (OSError, ValueError, KeyError, TypeError):
                pass
    if vcs and vcs.get("commit"):
        info["commit"] = vcs["commit"]
    return info


def result_document(recipe, question: dict, order: list, found: SearchResult, judge: Judge,
                    seconds: float) -> dict:
    from .registry import load_config
    config = load_config(recipe.folder, recipe.name)
    doc = {"stack": recipe.name, "question": question, "releases_searched": order,
           "direction": found.direction,
           "first_bad": release_info(recipe, found.first_bad),
           "first_good_after": release_info(recipe, found.first_good),
           "last_good_before": release_info(recipe, found.last_good),
           "last_bad_before_fix": release_info(recipe, found.last_bad),
           "note": found.note,
           "judged": [judge.records.get(v, {"version": v, "verdict": found.verdicts[v]}) for v in found.verdicts],
           "releases_built": judge.built, "releases_reused": judge.reused,
           "seconds": round(seconds, 1)}
    base, tip = ((found.last_good, found.first_bad) if found.direction == "regression" else
                 (found.last_bad, found.first_good) if found.direction == "fix" else (None, None))
    if base and tip:
        a, b = release_info(recipe, base), release_info(recipe, tip)
        span = {"from": base, "to": tip}
        if a.get("commit") and b.get("commit"):
            span.update(from_commit=a["commit"], to_commit=b["commit"])
            if config and config.upstream_repo:
                span["compare"] = f"{config.upstream_repo}/compare/{a['commit'][:12]}...{b['commit'][:12]}"
        doc["commit_range"] = span
    return doc


def print_result(doc: dict) -> None:
    def name(entry):
        if not entry:
            return "-"
        links = ", ".join(entry[k] for k in ("tag", "changelog") if k in entry and
                          (k == "tag" or entry[k] != entry.get("tag")))
        commit = f" (commit {entry['commit'][:12]})" if entry.get("commit") else ""
        return f"{doc['stack']}@{entry['version']}{commit}" + (f"  {links}" if links else "")
    if doc["direction"] == "none":
        print(f"no transition: {doc['note']}")
    elif doc["direction"] == "fix":
        print(f"first bad:  {name(doc['first_bad'])}" + (f"  [{doc['note']}]" if doc["note"] else ""))
        print(f"last bad:   {name(doc['last_bad_before_fix'])}")
        print(f"first good after it: {name(doc['first_good_after'])}")
    else:
        print(f"last good:  {name(doc['last_good_before'])}")
        print(f"first bad:  {name(doc['first_bad'])}" + (f"  [{doc['note']}]" if doc["note"] else ""))
        print("first good after it: - (not fixed in the releases searched)")
    span = doc.get("commit_range")
    if span:
        if span.get("compare"):
            print(f"commits:    {span['from']}..{span['to']}: {span['compare']}")
        else:
            print(f"commits:    {span['from']}..{span['to']} (no VCS info shipped in the release)")
    print(f"judged {len(doc['judged'])} of {len(doc['releases_searched'])} releases "
          f"({', '.join(j['version'] + '=' + j['verdict'] for j in doc['judged'])}); "
          f"built {len(doc['releases_built'])}, reused {len(doc['releases_reused'])}; {doc['seconds']} s")


def expected_steps(n: int) -> int:
    return 2 + max(0, math.ceil(math.log2(max(n - 1, 1))))

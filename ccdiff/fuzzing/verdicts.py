"""The verdict of every stored fuzz finding, in the words replay, conform and the reports use.

A findings folder holds whatever the engines reached: the known bugs of a release, their
consequences, traces a real connection cannot produce, and now and then something new.
"13 new finding(s)" from a 60 s campaign on a pristine stack told a nightly nothing.  Each
stored finding gets ccdiff/status.py's status (new / not checked / known / fixed /
consequence / lenient / local) from a replay of its reproducer through the stack with its
profile, beside its input's reachability (strict or lenient, ccdiff/reach.py), and the
run fails (exit 1) only on a finding that is a bug report on a strict input.  A native
crash is never a deviation nor a consequence: it is new, known only by its reproducer's
reachability.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..profiles import load_profile
from ..replay import replay, upstream_status
from ..stacks import resolve
from ..status import NEW, UNCHECKED
from ..trace import TraceError, load_trace
from .crash_guard import in_child

NATIVE_CRASH = "native-crash"
GONE = "not shown by this build any more (its profile or the stack changed since it was stored)"


@dataclass(frozen=True)
class Verdict:
    kind: str             # status.Status.kind, or "gone"
    text: str             # the status line
    reachability: str     # strict or lenient: the reproducer's
    url: str = ""

    @property
    def fails(self) -> bool:
        """What a nightly fails on: a bug report a real connection can produce."""
        return self.kind in ("new", "unchecked") and self.reachability == "strict"

    def label(self) -> str:
        return self.text if self.kind == "lenient" else f"{self.text}; {self.reachability} input"


def verdicts(triage) -> dict:
    """signature key -> Verdict for every finding stored in the triage's folder, replayed in a
    child (a stored native crash replays in none: it would take the child down)."""
    entries = {key: stored for key, stored in sorted(triage.stored.items())}
    number, found = in_child(lambda: _judge_all(triage.spec, entries))
    if number is not None:    # a stack died on a reproducer that had not crashed it when stored
        found = {key: Verdict("new", NEW, reachability_of(stored.folder)) for key, stored in entries.items()}
    return found


def _judge_all(spec: str, entries: dict) -> dict:
    checked = bool(load_profile(resolve(spec).recipe).upstream)   # "new" needs the tracker read
    out = {}
    for key, stored in entries.items():
        path = stored.folder / "reproducer.jsonl"
        if stored.signature.invariant == NATIVE_CRASH:
            out[key] = Verdict("new" if checked else "unchecked", NEW if checked else UNCHECKED,
                               reachability_of(stored.folder))
            continue
        try:
            trace = load_trace(str(path))
        except (OSError, TraceError) as exc:
            out[key] = Verdict("gone", f"reproducer unreadable: {exc}", "lenient")
            continue
        result = replay(trace, [spec])
        match = next((f for f in result.findings if f.invariant == stored.signature.invariant), None)
        if match is None:
            out[key] = Verdict("gone", GONE, trace.reachability)
            continue
        status = upstream_status(result.runs[match.stack], match, trace.reachability)
        out[key] = Verdict(status.kind, status.text, trace.reachability, status.url)
    return out




def reachability_of(folder: Path) -> str:
    """A stored finding's reachability (finding.json, from its reproducer); lenient if unknown."""
    try:
        return json.loads((folder / "finding.json").read_text()).get("reachability", "lenient")
    except (OSError, ValueError):
        return "lenient"


def record(triage, found: dict) -> None:
    """Each verdict into its finding.json ("status", "status_text", "fails_nightly"), replaced
    atomically: the file a CI job or `ccdiff report` reads says what the terminal said."""
    for key, verdict in found.items():
        path = triage.folder / key / "finding.json"
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        info.update(status=verdict.kind, status_text=verdict.text, fails_nightly=verdict.fails)
        if verdict.url:
            info["status_url"] = verdict.url
        tmp = path.with_name(f".finding.json.{os.getpid()}")
        tmp.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)


def summarize(triage, found: dict, new: list) -> int:
    """The run's last lines: counts by status, this run's new entries with their verdicts and
    replay commands, and the exit code (1: a strict bug report is stored; else 0)."""
    counts: dict = {}
    for verdict in found.values():
        name = {"fixed": "fixed upstream", "new": NEW, "unchecked": UNCHECKED}.get(verdict.kind, verdict.text)
        name = f"{name} ({verdict.reachability})" if verdict.kind in ("new", "unchecked") else name
        counts[name] = counts.get(name, 0) + 1
    failing = sorted(key for key, verdict in found.items() if verdict.fails)
    print(f"\n{len(new)} finding(s) stored by this run on {triage.stack_label} ({len(found)} in {triage.folder}); "
          f"{len(failing)} strict and new (the nightly's signal)")
    for name, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        print(f"  {n:4d}  {name}")
    for stored in new:
        sig = stored.signature
        verdict = found.get(sig.key)
        tag = verdict.label() if verdict else "not judged"
        print(f"  {sig.invariant} ({sig.shown}), {stored.events} events [{tag}]:\n    {triage.replay_command(stored)}")
    return 1 if failing else 0


__all__ = ["Verdict", "reachability_of", "record", "summarize", "verdicts"]

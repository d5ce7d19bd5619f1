"""The status of a finding: what an upstream maintainer should make of it, decided from data.

One line, first on every finding page and finding.md (issue 15):

  new                                      not documented, not known upstream: a bug report
                                           ("— S@V still shows it: not what K fixed" when a
                                           [[known]] fix's version bound covers it but that
                                           release, replayed, does not)
  new here — upstream tracker not checked  the same, for a stack whose profile records no
                                           check of its tracker (`[upstream] checked`):
                                           a draft, to check before filing
  known upstream                           an open upstream issue covers it (link)
  fixed upstream in VERSION                a later release fixes it (link): replayed on that
                                           release (or a later built one), the trace no longer
                                           shows it (replay.py fix_replays); "— by version only"
                                           when no such build was there to replay it on
  documented deviation — not a bug report  the stack's profile documents it on purpose
  consequence of X in this run             a trajectory divergence that follows violation X,
                                           or any violation after a numeric-error X (neither
                                           known nor fixed): X's report, not its own
  lenient trace only — not reachable as found
                                           the trace has events the stack's own loss
                                           detection would not produce (ccdiff/reach.py)
  another occurrence of X on S — part of the report on T
                                           the same (stack, invariant) violation as the primary
                                           page of a report, on another trace (report/causes.py)
  local build of S@V — compare with its release (`--against S@R`) before filing
                                           a finding on a `build --source` build (named
                                           git-<sha>… or local-<digest>): what a checkout
                                           does is not what upstream released; only the
                                           same finding on a release is a bug report (issue 30)

Known upstream issues and fixes are data in each stack's profile.toml (`[[known]]`):
`id`, `url`, `invariants` (the findings it covers), `condition` (in words), `affects`
(a version bound such as "<0.26.1", or "all"), and either `fixed_in` (+ `fixed_url`) or
nothing (still open).  `new` needs the profile's record of when and against what the
tracker was read (`[upstream]`: `checked`, a date, and `against`); without it no finding is
called new, only "not checked" (ccdiff knows it found something, not that nobody did).
Only those two statuses get a "bug report" link.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

NEW = "new"
CONSEQUENCE = "consequence of {} in this run — part of that report, not a report of its own"
UNCHECKED = "new here — upstream tracker not checked yet (check it before filing)"
KNOWN = "known upstream"
DEVIATION = "documented deviation — not a bug report"
LENIENT = "lenient trace only — not reachable as found"
# One report per root cause (issue 30 item 7): the same (stack, invariant) violation on other
# traces of a report is listed on one primary page; the others say where the report is.
OCCURRENCE = ("another occurrence of {invariant} on {stack} — part of the report on {trace} "
              "(findings/{id}), not a report of its own")
STILL_SHOWN = " — {label} still shows it: not what {id} fixed"
NOT_REPLAYED = " — by version only: no build of {version} or later to replay it on (`ccdiff build {stack}@{version}`)"
LOCAL = "local build of {stack}@{version} — compare with its release (`--against {stack}@{release}`) before filing"


@dataclass(frozen=True)
class Status:
    kind: str            # new, unchecked, known, fixed, deviation, consequence, lenient, local, occurrence
    text: str            # the line shown to the reader
    url: str = ""        # the upstream issue or fix it rests on
    known_id: str = ""

    @property
    def is_bug_report(self) -> bool:
        return self.kind in ("new", "unchecked")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text, "url": self.url, "known_id": self.known_id}


@dataclass(frozen=True)
class FixReplay:
    """A trace replayed on the release a [[known]] entry says fixed its finding (replay.py
    fix_replays): label is the release replayed ("" when none was built), shows the
    invariants it still violates there."""
    label: str
    shows: frozenset = frozenset()


def is_local_build(version: str) -> bool:
    """A `build --source` build's name (ccdiff/build.py _local_version): no release behind it."""
    return (version or "").startswith(("local-", "git-"))


def version_key(version: str) -> tuple:
    """'0.26.1' -> (0, 26, 1); non-numeric parts sort first ('local-3a8c' -> ())."""
    parts = re.findall(r"\d+", version or "")
    if not re.match(r"^\d", version or ""):
        return ()
    return tuple(int(p) for p in parts) + (0,) * max(0, 4 - len(parts))   # 1.13 == 1.13.0


def affects(bound: str, version: str) -> bool:
    """Does a `[[known]]` entry's `affects` bound ("<0.26.1", "<=1.2", "all") cover this version?"""
    bound = (bound or "all").strip()
    if bound == "all":
        return True
    match = re.fullmatch(r"(<=|<|>=|>|==)\s*(\S+)", bound)
    if not match or not version_key(version):
        return False
    op, limit = match.groups()
    a, b = version_key(version), version_key(limit)
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b}[op]


def validate_known(entries: list, source: str, catalog) -> list:
    """The `[[known]]` entries of a profile, checked: messages name the file and the entry."""
    for entry in entries:
        where = f"{source}: [[known]] {entry.get('id', '?')!r}"
        for key in ("id", "url", "invariants", "condition"):
            if key not in entry:
                raise ValueError(f"{where} needs {key!r}")
        for inv in entry["invariants"]:
            if inv not in catalog:
                raise ValueError(f"{where} names unknown invariant {inv!r}")
        if "affects" in entry and entry["affects"] != "all" and \
                not re.fullmatch(r"(<=|<|>=|>|==)\s*\d\S*", entry["affects"]):
            raise ValueError(f"{where}: affects must be 'all' or like '<0.26.1', got {entry['affects']!r}")
    return entries


def followed(detail: str) -> list:
    """The invariants a finding follows ('... (follows a, b)', profiles.judge): a trajectory
    divergence the violations before it, any violation a numeric-error before it."""
    match = re.search(r"\(follows ([\w, -]+)\)$", detail or "")
    return [name.strip() for name in match.group(1).split(",")] if match else []


def covered(invariant: str, detail: str = "") -> set:
    """The invariants a finding stands for: itself, and the ones it follows (profiles.judge),
    whose [[known]] entries and fixes cover it too."""
    return {invariant} | set(followed(detail))


def fixes_claimed(finding_status: str, invariant: str, version: str, known: list, detail: str = "") -> list:
    """The `fixed_in` releases of the [[known]] entries that would file this finding as fixed
    (replay.fix_replays replays the trace on one of them before status_of says so)."""
    if finding_status == "deviation":
        return []
    shown = covered(invariant, detail)
    return [entry["fixed_in"] for entry in known if entry.get("fixed_in") and shown & set(entry["invariants"])
            and affects(entry.get("affects", "all"), version)]


def status_of(finding_status: str, invariant: str, version: str, known: list, reachability: str,
              detail: str = "", checked: dict | None = None, stack: str = "", release: str = "",
              fix_replays: dict | None = None) -> Status:
    """One rule for replay, matrix, conform and the reports.  A trajectory divergence that
    follows a known bug's findings (profiles.judge) is that bug's footprint: same status.
    checked: the profile's `[upstream]` record; without one, "new" is "unchecked".
    stack, release: the stack's name and the release to compare a local build with (its
    default pinned version), named in the local-build status.
    fix_replays: fixed_in -> FixReplay, the trace replayed on that release (or a
    later one): an entry's fix covers a finding only if the release no longer shows it --
    a version bound alone filed quiche 0.26.0's timer-loss recovery start, which 0.26.1 and
    0.30.0 still show, as "fixed upstream in 0.26.1".  None: not replayed (no note)."""
    follows = followed(detail)
    shown = covered(invariant, detail)
    if finding_status == "deviation":
        return Status("deviation", DEVIATION)
    if reachability == "lenient":
        return Status("lenient", LENIENT)
    still = ""
    for entry in known:
        if shown & set(entry["invariants"]) and affects(entry.get("affects", "all"), version):
            if entry.get("fixed_in"):
                replayed = (fix_replays or {}).get(entry["fixed_in"])
                if replayed is not None and replayed.shows & shown:
                    still = still or STILL_SHOWN.format(label=replayed.label, id=entry["id"])
                    continue                       # not what that fix fixed
                text = f"fixed upstream in {entry['fixed_in']}"
                if replayed is not None and not replayed.label:
                    text += NOT_REPLAYED.format(stack=stack or "STACK", version=entry["fixed_in"])
                return Status("fixed", text, entry.get("fixed_url") or entry["url"], entry["id"])
            return Status("known", KNOWN, entry["url"], entry["id"])
    if follows:
        # The footprint of the violations it follows (profiles.judge): their report shows it;
        # a report of its own would file one bug twice, with no RFC text of its own.
        return Status("consequence", CONSEQUENCE.format(", ".join(follows)))
    if is_local_build(version):
        # A checkout's code is not a release's: ccdiff cannot tell whether the finding is
        # upstream's or the checkout's own change until the release is run beside it.
        return Status("local", LOCAL.format(stack=stack or "STACK", version=version,
                                            release=release or "RELEASE"))
    if not checked:
        return Status("unchecked", UNCHECKED + still)
    return Status("new", NEW + still)


def validate_upstream(record, source: str) -> dict:
    """A profile's `[upstream]` table: `checked` (YYYY-MM-DD) and `against` (what was read:
    the branch and commit, the tracker searched)."""
    if record in (None, {}):
        return {}
    if not isinstance(record, dict) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(record.get("checked", ""))) \
            or not str(record.get("against", "")).strip():
        raise ValueError(f"{source}: [upstream] needs checked = \"YYYY-MM-DD\" and against = \"what was read\"")
    return record

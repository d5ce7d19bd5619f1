"""Triage: replay what an engine found through the Python replay, deduplicate, minimize.

Every input (crash or new-coverage queue entry) is decoded (ccdiff/encoding.py)
and replayed through the stack and its reference oracle with every invariant,
trajectory-divergence included (ccdiff/replay.py).  Each violation gets a
signature (stack, invariant, state shape: the kind of event it fired on and
the stack's phase after it); a signature not seen before is minimized by
delta debugging over the trace's events (Zeller and Hildebrandt, "Simplifying
and Isolating Failure-Inducing Input", 2002) and stored once, whichever
engine found it, as findings/<stack>/<signature>/reproducer.jsonl.

Several campaigns (engines, processes, containers) may share one findings
folder, and any of them may be killed at any moment.  A finding is therefore
written into a private staging folder and published by one rename(2), which
is atomic and fails when the signature's folder already exists: a reader never
sees half a finding, and of two workers that found the same signature at the
same moment exactly one stores it (the other adds its engine to `found_by`).

A finding first stored from a lenient input (one a real connection's loss detection would
not produce, which strictify could not repair) is replaced by the first input that shows the
same signature strictly, as found or once repaired: the nightly's signal is strict findings, and an early lenient
sighting must not hide a strict one for the rest of the campaign (issue 36).  The old
folder is moved aside and the new one renamed in, so a reader still never sees half of one.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..encoding import decode
from ..replay import fix_replays, replay
from ..status import covered, fixes_claimed
from ..trace import (EVENT_NAMES, Ack, AppData, AppIdle, Lost, PersistentCongestion, Sent, Trace, TraceError,
                     dump_trace, judge_reachability, parse_trace_text, trace_version)
from ..window_reach import window_overrun
from .crash_guard import ChildWorker, StackCrashed, crash_signal
from .strictify import LENIENT_ONLY, make_strict

MAX_TESTS = 3000   # replays one minimization may spend
STAGING = ".staging"   # under the stack's folder: same file system, so rename(2) is atomic
LOCK = ".lock"         # under the stack's folder: replacing a finding vs concluding a run


@contextlib.contextmanager
def folder_lock(folder: Path):
    """Held while a finding's folder is replaced (Triage._replace) and while a run concludes
    (conclude.py: verdicts, summary, report).  A conclusion replays every stored reproducer
    and then compares a second replay with the first; a worker replacing one of them in
    between made the report fail ("does not reproduce the findings in the document": CI,
    stop 41).  Publishing a new signature needs no lock: a conclusion only reads the
    folders it listed, and rename(2) never changes one of them."""
    with open(folder / LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:   # explicitly: a child forked meanwhile shares the handle, and closing ours would not free it
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass
class Signature:
    stack: str
    invariant: str
    shape: str        # e.g. "ack-recovery"
    # The fixed_in of the [[known]] fix that claims this finding while its release still shows
    # it (_not_fixed_by): not the bug that fix fixed, so a finding of its own -- quiche 0.26.0's
    # death spiral (fixed in 0.26.1) and its timer-loss recovery start (not fixed) are both
    # future-recovery-start on a send in recovery, and whichever input came first decided
    # the folder's status (CI, stop 42).
    not_fixed_by: str = ""

    @property
    def key(self) -> str:
        return f"{self.invariant}--{self.shape}" + (f"--not-fixed-by-{self.not_fixed_by}" if self.not_fixed_by else "")

    @property
    def shown(self) -> str:
        """The shape as the terminal says it."""
        return self.shape + (f"; still shown after the fix in {self.not_fixed_by}" if self.not_fixed_by else "")


@dataclass
class Stored:
    signature: Signature
    folder: Path
    events: int
    found_by: list = field(default_factory=list)
    repair: str = ""      # strictify's outcome: strict as found, repaired, or LENIENT_ONLY


_probing = False   # set while an input that crashed its triage child is triaged again


def _replay(trace: Trace, specs: list):
    """Every replay of triage.  While `_probing`, each first runs in a child: a crash there
    raises StackCrashed with the trace the stack died on, instead of ending ccdiff."""
    if _probing:
        number = crash_signal(lambda: replay(trace, specs))
        if number is not None:
            raise StackCrashed(trace, number, specs)
    return replay(trace, specs)


def stack_folder_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@=-]+", "_", label)


def _kinds(trace: Trace) -> list:
    return [EVENT_NAMES[type(e)] for e in trace.events]


def signatures(trace: Trace, spec: str) -> dict:
    """signature key -> Signature for every violation the replay shows."""
    return _signatures(_replay(trace, [spec]), trace)


def _signatures_and_window(trace: Trace, spec: str) -> tuple:
    """(signatures, where the trace first overfills the stack's own window or None)."""
    result = _replay(trace, [spec])
    run = next(iter(result.runs.values()))
    return _signatures(result, trace), window_overrun(trace, run.snapshots)


def window_of(trace: Trace, spec: str) -> str | None:
    """Where `trace` first overfills `spec`'s own window (window_reach.py), None when it never does."""
    return _signatures_and_window(trace, spec)[1]


def _signatures(result, trace: Trace) -> dict:
    found = {}
    run = next(iter(result.runs.values()))
    kinds = _kinds(trace)
    fixes = None
    for finding in result.violations:
        index = finding.event_index
        phase = run.snapshots[index].phase if index < len(run.snapshots) else "error"
        kind = kinds[index] if index < len(kinds) else "end"
        claimed = fixes_claimed(finding.status, finding.invariant, run.target.version, run.profile.known,
                                finding.detail) if run.target.recipe is not None else []
        if claimed and fixes is None:
            # The fix releases replayed once per trace, for all its findings; a lenient trace's
            # status is "lenient" whatever a fix does (replay checks fixes on strict traces
            # only), so a lenient finding is upgraded only by a strict input the fix fixed.
            strict = judge_reachability(trace).reachability == "strict"
            fixes = fix_replays(trace, run.target, run.profile, result.violations, _replay) if strict else {}
        sig = Signature(run.label, finding.invariant, f"{kind}-{phase}", _not_fixed_by(finding, claimed, fixes))
        found.setdefault(sig.key, sig)
    return found


def _not_fixed_by(finding, claimed: list, fixes: dict | None) -> str:
    """The first of the fixes that claim `finding` (status.fixes_claimed) when each one's
    release, replayed (replay.fix_replays), still shows it: what status.status_of would not
    file as fixed.  "" when one fix covers it (or nothing was built to replay it on, "fixed,
    not replayed"), when none claims it, and on a lenient trace (no fixes replayed)."""
    shown = [(fixes or {}).get(fixed_in) for fixed_in in claimed]
    still = all(r is not None and r.label and r.shows & covered(finding.invariant, finding.detail) for r in shown)
    return claimed[0] if claimed and still else ""


def _repair(events: list) -> list:
    """A causally consistent trace from a subset of events: ACKs and losses keep
    only packets still sent, empty ones go, persistent congestion keeps its loss,
    application events keep alternating (idle, data, idle, ...)."""
    sent, out, idle = set(), [], False
    for ev in events:
        kind = type(ev)
        if kind is AppIdle or kind is AppData:
            if (kind is AppIdle) != idle:
                idle = kind is AppIdle
                out.append(ev)
        elif kind is Sent:
            sent.add(ev.pn)
            out.append(ev)
        elif kind in (Ack, Lost):
            pns = tuple(pn for pn in ev.pns if pn in sent)
            if pns:
                if kind is Ack and ev.rtt is not None and pns[-1] != ev.pns[-1]:
                    ev = ev._replace(rtt=None)   # the stack's sample was of the dropped largest packet
                out.append(ev._replace(pns=pns))
        elif out and type(out[-1]) is Lost and out[-1].t == ev.t:
            out.append(ev)
    return out


def _valid(trace: Trace, events: list) -> Trace | None:
    """A candidate of ddmin as a trace, or None when the validator refuses it.  Its events are
    the (repaired) events of a valid trace, so each one passed the parser's field checks
    already: only the causality checks are run again, on the events as they are -- the same
    trace, line numbers and verdict as writing the candidate out and parsing it back (what
    this did before: two thirds of a report's ddmin time, tests/test_triage_valid.py)."""
    header = trace.header
    version = trace_version(events)        # the version dump_trace would write for them
    if header.version != version:
        header = replace(header, version=version)
    candidate = Trace(header, events, trace.source, list(range(2, len(events) + 2)))
    try:
        return judge_reachability(candidate)
    except TraceError:
        return None


@dataclass
class Budget:
    """Events a minimization may replay in all (the sum of its candidates' lengths): bounds
    the time of a report's ddmin by the work done, not the clock, so the same trace always
    shrinks to the same result.  ddmin is an anytime algorithm: cut short, its result is
    still a trace that shows the finding, only not 1-minimal."""
    limit: int
    spent: int = 0

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.limit


def minimize(trace: Trace, spec: str, key: str, judge=None, budget: Budget | None = None) -> Trace:
    """ddmin over events: the smallest trace (1-minimal, within MAX_TESTS) still showing `key`.

    A strict trace shrinks to a strict one: every candidate must stay reachable (a loss
    with no later packet acknowledged, the usual shortcut of ddmin, is not).  And a trace
    whose sends fit the stack's own window (window_reach.py) shrinks to one that does: a
    free ddmin first (its result usually fits too, and it is smaller: the bound also refuses
    the steps on the way to it), then, if its result overfills the window, a ddmin bound to
    it.  (`judge`, a differential store's, is judged without the window: it compares two
    stacks.)"""
    if judge is not None:
        return _ddmin(trace, key, judge, budget)
    free = _ddmin(trace, key, lambda candidate: signatures(candidate, spec), budget)
    if window_of(free, spec) is None or window_of(trace, spec) is not None:
        return free

    def within_window(candidate: Trace) -> dict:
        found, overrun = _signatures_and_window(candidate, spec)
        return found if overrun is None else {}
    return _ddmin(trace, key, within_window, budget)


def _ddmin(trace: Trace, key: str, judge, budget: Budget | None = None) -> Trace:
    tests = 0
    cache: dict = {}
    strict = judge_reachability(trace).reachability == "strict"

    def interesting(events: list) -> bool:
        nonlocal tests
        repaired = _repair(events)
        ident = tuple(repaired)
        if ident not in cache:
            if budget is not None and budget.exhausted:
                return False          # out of budget: keep what is shrunk so far
            tests += 1
            if budget is not None:
                budget.spent += len(repaired)
            candidate = _valid(trace, repaired)
            cache[ident] = (candidate is not None and (not strict or candidate.reachability == "strict")
                            and key in judge(candidate))
        return cache[ident]

    events = list(trace.events)
    n = 2
    while len(events) >= 2 and tests < MAX_TESTS and not (budget is not None and budget.exhausted):
        size = len(events) // n
        chunks = [events[i:i + size] for i in range(0, len(events), size)] if size else [events]
        reduced = False
        for i in range(len(chunks)):
            complement = [e for j, c in enumerate(chunks) if j != i for e in c]
            if complement and interesting(complement):
                events = _repair(complement)
                n = max(n - 1, 2)
                reduced = True
                break
        if not reduced:
            if n >= len(events):
                break
            n = min(len(events), 2 * n)
    result = _valid(trace, _repair(events))
    return result if result is not None else trace


class Triage:
    """Deduplicating store of findings for one stack under root/<stack>/."""

    against = ""     # DiffTriage: the baseline's spec
    details: dict = {}   # DiffTriage: signature key -> the first difference, for finding.json

    def __init__(self, root: Path, spec: str, label: str, folder: Path | None = None):
        self.spec, self.stack_label = spec, label
        self.folder = folder or root / stack_folder_name(label)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.seen_inputs: set = set()
        self.stored: dict = {}
        self.upgraded: set = set()   # keys stored lenient before and strict now (by this run)
        self._worker = None   # the child that triages inputs (crash_guard.ChildWorker)
        self.reload()

    def close(self) -> None:
        """Ends the triage child (it ends with the store's last reference too)."""
        if self._worker is not None:
            self._worker.close()

    def _load(self, key: str) -> Stored | None:
        """The finding stored under `key` (by this or another run), or None."""
        try:
            data = json.loads((self.folder / key / "finding.json").read_text())
            stored = Stored(Signature(data["stack"], data["invariant"], data["shape"], data.get("not_fixed_by", "")),
                            self.folder / key,
                            data["events"], list(data["found_by"]), data.get("reachability_repair", ""))
        except (OSError, ValueError, KeyError, TypeError):   # half-written by an old version, or not ours
            return None
        self.stored[key] = stored
        return stored

    def _stage(self, stored: Stored, files: dict, source: str) -> Path:
        """A private staging folder holding `files` (name -> bytes) and finding.json, ready to
        be renamed into the signature's folder."""
        staging = self.folder / STAGING
        staging.mkdir(exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{stored.signature.key}.", dir=staging))
        tmp.chmod(0o755)                                  # mkdtemp's 0700 would hide it from readers
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        self._write_info(stored, source, into=tmp)
        return tmp

    def _publish(self, sig: Signature, files: dict, events: int, engine: str, source: str,
                 repair: str = "") -> Stored | None:
        """Write `files` (name -> bytes) and finding.json into a staging folder, then rename it
        to the signature's folder.  Returns the new entry, or None when another worker
        published the same signature first (its entry then lists `engine` too)."""
        stored = Stored(sig, self.folder / sig.key, events, [engine], repair)
        tmp = self._stage(stored, files, source)
        try:
            os.rename(tmp, stored.folder)
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            shutil.rmtree(tmp)
            theirs = self._load(sig.key)
            if theirs is not None and engine not in theirs.found_by:
                theirs.found_by.append(engine)
                self._write_info(theirs, "")
            return None
        self.stored[sig.key] = stored
        return stored

    def _replace(self, old: Stored, files: dict, events: int, engines: list, source: str,
                 repair: str) -> Stored | None:
        """A lenient finding's folder replaced by a strict one: the new folder is staged
        whole, the old one moved aside into staging, the new one renamed into its place.
        Returns None when another worker replaced it first (this store's copy of the entry
        may be older than the folder: it is read again under the lock)."""
        with folder_lock(self.folder):
            current = self._load(old.signature.key)
            if current is None or current.repair != LENIENT_ONLY:
                return None
            found_by = list(dict.fromkeys(current.found_by + engines))
            new = Stored(old.signature, old.folder, events, found_by, repair)
            tmp = self._stage(new, files, source)
            aside = Path(tempfile.mkdtemp(prefix=f"{old.signature.key}.lenient.", dir=tmp.parent))
            os.rename(old.folder, aside / "old")
            try:
                os.rename(tmp, new.folder)
            except OSError as error:
                if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                shutil.rmtree(tmp)    # a worker published it in the gap (publishing takes no lock): theirs stays
                new = None
            shutil.rmtree(aside)
        if new is not None:
            self.stored[new.signature.key] = new
        return new

    def reload(self) -> None:
        """This store as the folder holds it now: other workers' findings and replacements."""
        self.stored = {}
        for info in sorted(self.folder.glob("[!.]*/finding.json")):   # not .staging/ or .work/
            self._load(info.parent.name)

    def replay_command(self, stored: Stored) -> str:
        return f"python3 -m ccdiff replay {stored.folder / 'reproducer.jsonl'} --stack {self.spec}"

    def judge(self, trace: Trace) -> dict:
        """signature key -> Signature of what this store keeps, for one trace."""
        return signatures(trace, self.spec)

    def reduce(self, trace: Trace, sig: Signature) -> tuple:
        return reduce(trace, sig, self.spec)

    def strict_form(self, trace: Trace, sig: Signature) -> tuple | None:
        """(the smallest strict trace still showing `sig`, strictify's outcome) from TRACE,
        strict as found or repaired (reduce's first step), or None when it cannot be made
        strict: what may replace a lenient-only finding."""
        _, strict, repair = _cut_and_repair(trace, sig, self.spec)
        return None if strict is None else (minimize(strict, self.spec, sig.key), repair)

    def wanted(self, trace: Trace) -> set:
        """The signatures this trace would add to the store: those not stored yet, and, when
        the trace is strict, those stored from a lenient input only (it would upgrade them).
        In-process engines (Hypothesis, atheris) keep an input only when this is not empty."""
        found = set(self.judge(trace))
        unknown = found - set(self.stored)
        lenient = {key for key in found - unknown if self.stored[key].repair == LENIENT_ONLY}
        if lenient and judge_reachability(trace).reachability == "strict":
            return unknown | lenient
        return unknown

    def title(self, sig: Signature) -> str:
        return f"{sig.stack} {sig.invariant}"

    def add_input(self, data: bytes, engine: str, source: str = "") -> list:
        """Triage one input; returns the Stored entries it created (findings new to the store).
        It runs in a forked child (crash_guard.py): a stack whose native code dies on the
        input, or on a trace its minimization tries, is stored as native-crash--signal-N
        and the campaign goes on.  The child keeps its own copy of this store, which the
        findings it reports back keep in step."""
        if data in self.seen_inputs:
            return []
        self.seen_inputs.add(data)
        if self._worker is None:
            self._worker = ChildWorker(lambda *args: self._triage(decode(args[0], name="fuzz"), *args))
            weakref.finalize(self, self._worker.close)
        before = set(self.stored)
        number, outcome = self._worker.call(data, engine, source)
        if number is not None:
            return self._triage_probing(decode(data, name="fuzz"), data, engine, source)
        created, seen, details = outcome
        if self.against:
            self.details.update(details)
        for key in seen:          # stored by the child, or by another worker: read back as it is now
            self._load(key)
        self.upgraded |= {key for key in created if key in before}
        return [self.stored[key] for key in created if key in self.stored]

    def _triage(self, trace: Trace, data: bytes, engine: str, source: str) -> tuple:
        """(keys it stored, keys of every stored finding it showed, the stored ones'
        differences) for one input."""
        created, seen = [], []
        found = self.judge(trace)
        for key, sig in found.items():
            stored = self.stored.get(key) or self._load(key)   # another run's?
            # A lenient-only finding: this input may show it strictly (as found, or repaired).
            better = self.strict_form(trace, sig) if stored is not None and stored.repair == LENIENT_ONLY else None
            if stored is not None and better is None:
                seen.append(key)
                if engine not in stored.found_by:
                    stored.found_by.append(engine)
                    self._write_info(stored, "")
                continue
            small, repair = better or self.reduce(trace, sig)
            small.header.name = self.title(sig)
            small.header.comment = (f"found by ccdiff fuzz ({engine}); minimized by delta debugging "
                                    f"from {len(trace.events)} events")
            files = {"reproducer.jsonl": dump_trace(small).encode(), "input.bin": data}
            if better:     # _replace adds the engine to the found_by it reads under the lock
                stored = self._replace(stored, files, len(small.events), [engine], source, repair)
            else:
                stored = self._publish(sig, files, len(small.events), engine, source, repair)
            if stored is not None:
                created.append(key)
            seen.append(key)          # ours, or (None) another worker's that won the rename
        return created, seen, {key: self.details[key] for key in created if key in self.details}

    def _triage_probing(self, trace: Trace, data: bytes, engine: str, source: str) -> list:
        """The input's triage died of a crash signal: triage it again here with every replay
        probed in a child first, up to the trace the stack dies on, and store that crash."""
        global _probing
        _probing = True
        try:
            created, _, _ = self._triage(trace, data, engine, source)
        except StackCrashed as crash:
            return self._store_crash(crash, len(trace.events), data, engine, source)
        finally:
            _probing = False
        return [self.stored[key] for key in created]    # not met again: the crash is not deterministic

    def _store_crash(self, crash: StackCrashed, events: int, data: bytes, engine: str, source: str) -> list:
        """native-crash--signal-N, its reproducer the smallest trace the replay still dies on
        with that signal (ddmin, each candidate in a child)."""
        name = signal.Signals(crash.signal_number).name
        sig = Signature(self.stack_label, "native-crash", f"signal-{crash.signal_number}")
        stored = self.stored.get(sig.key) or self._load(sig.key)
        if stored is not None:
            if engine not in stored.found_by:
                stored.found_by.append(engine)
                self._write_info(stored, "")
            return []

        def dies(candidate: Trace) -> dict:
            number = crash_signal(lambda: replay(candidate, crash.specs))
            return {sig.key: sig} if number == crash.signal_number else {}
        # As reduce(): repaired to strict timings first where loss detection allows (a crash a
        # real connection cannot reach is no bug report), then shrunk, strict staying strict.
        fires = lambda t: sig.key in dies(t)    # noqa: E731
        found = crash.trace
        strict, repair = make_strict(found, fires, lambda e: _valid(found, _repair(e)))
        small = _ddmin(strict or found, sig.key, dies)
        if strict is None:                    # shrunk from a lenient trace: strict now, or repairable?
            strict, repair = make_strict(small, fires, lambda e: _valid(small, _repair(e)))
            small = strict or small
        small.header.name = f"{self.stack_label} native-crash ({name})"
        small.header.comment = (f"found by ccdiff fuzz ({engine}): the stack's native code dies of {name} "
                                f"replaying this trace; minimized by delta debugging from {len(crash.trace.events)} "
                                f"events (the input: {events})")
        note = (f"ccdiff's replay through {', '.join(crash.specs)} died of {name} (signal {crash.signal_number}) "
                f"on reproducer.jsonl, in a child process; the stack's harness had not (it stops at the first "
                f"violation). `ccdiff replay reproducer.jsonl --stack {self.spec}` names the event.\n")
        files = {"input.bin": data, "stderr.txt": note.encode(), "reproducer.jsonl": dump_trace(small).encode()}
        stored = self._publish(sig, files, len(small.events), engine, source, repair)
        return [stored] if stored is not None else []

    def add_crash(self, data: bytes, engine: str, exe: Path, env: dict, source: str = "") -> list:
        """A file the engine saw crash or hang: through the harness first (add_native_crash),
        replayed in-process only when the stack's own code did not die on it."""
        native = self.add_native_crash(data, engine, exe, env, source)
        return native if native is not None else self.add_input(data, engine, source)

    def add_native_crash(self, data: bytes, engine: str, exe: Path, env: dict, source: str = "") -> list | None:
        """An input the engine saw crash or hang, run through the harness itself first.
        If the stack's own code crashes on it (a signal, a sanitizer report) or hangs, it is
        stored with the harness's stderr and must not be replayed in-process (it would take
        ccdiff down with it): returns the new entries.  Returns None when the harness
        finishes normally (an invariant violation, reported with CCDIFF_FUZZ_NO_ABORT):
        then `add_input` is safe and judges it."""
        kind, text = native_failure(exe, env, data)
        if kind is None:
            return None
        sig = Signature(self.stack_label, "native-crash", kind)
        if sig.key in self.stored or self._load(sig.key) is not None:
            return []
        trace = decode(data, name="fuzz")
        files = {"input.bin": data, "stderr.txt": text.encode(), "reproducer.jsonl": dump_trace(trace).encode()}
        stored = self._publish(sig, files, len(trace.events), engine, source)
        return [stored] if stored is not None else []

    @staticmethod
    def _reachability(reproducer: Path) -> dict:
        """strict or lenient (docs/trace-format.md): whether a real connection's loss
        detection would produce every event the finding rests on."""
        try:
            trace = parse_trace_text(reproducer.read_text(), str(reproducer))
        except (OSError, TraceError):
            return {}
        info = {"reachability": trace.reachability}
        if trace.lenient_reason:
            info["lenient_reason"] = trace.lenient_reason
        return info

    def _write_info(self, stored: Stored, source: str, into: Path | None = None) -> None:
        """finding.json, replaced atomically (a kill never leaves half of it)."""
        sig = stored.signature
        info = {"stack": sig.stack, "spec": self.spec, "invariant": sig.invariant, "shape": sig.shape,
                "events": stored.events, "found_by": stored.found_by,
                "replay": self.replay_command(stored)}
        if sig.not_fixed_by:
            info["not_fixed_by"] = sig.not_fixed_by
        if self.against:
            info["against"] = self.against
            if sig.key in self.details:
                info["difference"] = self.details[sig.key]
        if source:
            info["first_input"] = source
        if stored.repair:
            info["reachability_repair"] = stored.repair
            if stored.repair == LENIENT_ONLY:
                info["label"] = LENIENT_ONLY
        info.update(self._reachability((into or stored.folder) / "reproducer.jsonl"))
        path = (into or stored.folder) / "finding.json"
        if path.exists() and not source:
            old = json.loads(path.read_text())
            info["first_input"] = old.get("first_input", "")
            if "difference" in old and "difference" not in info:
                info["difference"] = old["difference"]
        tmp = path.with_name(f".finding.json.{os.getpid()}")
        tmp.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)


FIELDS = ("cwnd", "ssthresh", "bytes_in_flight", "phase", "recovery_start_us", "epoch_start_us",
          "w_max", "k_us")   # ccdiff/snapshot.py's Snapshot, in its order


@dataclass
class Difference:
    """Where two builds first part on one trace."""
    index: int          # the event
    field: str          # a Snapshot field, or "error" (one build's adapter failed there)
    candidate: object
    baseline: object

    def as_dict(self) -> dict:
        return {"event_index": self.index, "field": self.field, "candidate": self.candidate,
                "baseline": self.baseline}


def first_difference(cand, base) -> Difference | None:
    """Two runs of one trace differ at the first event (in trace order) where their snapshots
    differ in any field -- exactly: the same build steps through the same integer and floating
    point operations, so equal code gives equal values (NaN equals NaN) -- or where one stepped and the other
    failed (an adapter error).  Fields are compared in Snapshot's order and the first one that
    differs names the difference.  A field one build does not report (None) differs from
    a value."""
    a, b = cand.snapshots, base.snapshots
    for index in range(min(len(a), len(b))):
        x, y = a[index], b[index]
        for name in FIELDS:
            u, v = getattr(x, name), getattr(y, name)
            if u != v and not (u != u and v != v):      # NaN is NaN in both
                return Difference(index, name, u, v)
    if len(a) != len(b):
        index = min(len(a), len(b))
        return Difference(index, "error", cand.error or "stepped", base.error or "stepped")
    return None


def only_in_signature(invariant: str, side: str) -> str:
    """DiffTriage's signature of an input on which one build (side: candidate or baseline)
    violates an invariant the other does not."""
    return f"diff--{invariant}-only-in-{side}"


def invariant_only_in_candidate(signature: str) -> str | None:
    """The invariant of a stored `only_in_signature(INVARIANT, "candidate")`, else None."""
    head, tail = "diff--", "-only-in-candidate"
    if signature.startswith(head) and signature.endswith(tail):
        return signature[len(head):-len(tail)]
    return None


class DiffTriage(Triage):
    """Differences between two builds (a candidate and a baseline) under
    root/<candidate>/against-<baseline>/.  An input is a difference when the builds'
    snapshots differ (first_difference), or when one violates an invariant the other does
    not on that input; what both show is no difference.  Signatures:
      diff--<field>--<event kind>-<candidate's phase>     the first differing event
      diff--<invariant>-only-in-<candidate|baseline>--<event kind>-<phase>
    Each is minimized by the same ddmin, the predicate being "still shows this difference"."""

    def __init__(self, root: Path, spec: str, label: str, against: str, against_label: str):
        folder = root / stack_folder_name(label) / ("against-" + stack_folder_name(against_label))
        self.against, self.against_label = against, against_label
        self.details = {}
        self.native: list = []     # (kind, source) of inputs that crash the candidate's harness itself
        super().__init__(root, spec, label, folder)

    def add_native_crash(self, data: bytes, engine: str, exe: Path, env: dict, source: str = "") -> list | None:
        """An input that crashes or hangs the candidate's harness natively is not compared (it
        would take ccdiff down in-process); it is counted, and the caller reports it."""
        kind, _ = native_failure(exe, env, data)
        if kind is None:
            return None
        self.native.append((kind, source))
        return []

    def compare(self, trace: Trace) -> dict:
        """signature key -> (Signature, detail dict)."""
        result = _replay(trace, [self.spec, self.against])
        cand, base = result.runs[self.stack_label], result.runs[self.against_label]
        kinds = _kinds(trace)

        def shape(run, index):
            phase = run.snapshots[index].phase if index < len(run.snapshots) else "error"
            return f"{kinds[index] if index < len(kinds) else 'end'}-{phase}"
        found = {}
        diff = first_difference(cand, base)
        if diff is not None:
            sig = Signature(self.stack_label, f"diff--{diff.field}", shape(cand, diff.index))
            found[sig.key] = (sig, dict(diff.as_dict(), event=kinds[diff.index] if diff.index < len(kinds) else "end"))
        firsts = {}
        for finding in result.violations:
            firsts.setdefault((finding.stack, finding.invariant), finding)
        for run, other, side in ((cand, base, "candidate"), (base, cand, "baseline")):
            for (stack, invariant), finding in firsts.items():
                if stack != run.label or (other.label, invariant) in firsts:
                    continue
                sig = Signature(self.stack_label, only_in_signature(invariant, side),
                                shape(run, finding.event_index))
                found.setdefault(sig.key, (sig, {"event_index": finding.event_index, "invariant": invariant,
                                                 "only_in": run.label, "detail": finding.detail}))
        return found

    def judge(self, trace: Trace) -> dict:
        return {key: sig for key, (sig, _) in self.compare(trace).items()}

    def reduce(self, trace: Trace, sig: Signature) -> tuple:
        """Cut after the first event showing the difference (with a margin for invariants
        judged over a stretch), then ddmin; the detail of the smallest is kept."""
        found = self.compare(trace)
        start = found[sig.key][1]["event_index"] if sig.key in found else len(trace.events)
        cut = trace
        for stop in (start + 1, start + 65, len(trace.events)):
            prefix = _valid(trace, trace.events[:min(stop, len(trace.events))])
            if prefix is not None and sig.key in self.judge(prefix):
                cut = prefix
                break
        small = minimize(cut, self.spec, sig.key, self.judge)
        self.details[sig.key] = self.compare(small).get(sig.key, found.get(sig.key, (None, {})))[1]
        return small, ""

    def title(self, sig: Signature) -> str:
        return f"{sig.stack} against {self.against_label}: {sig.invariant}"

    def replay_command(self, stored: Stored) -> str:
        return (f"python3 -m ccdiff replay {stored.folder / 'reproducer.jsonl'} "
                f"--stack {self.spec} --stack {self.against}")


NATIVE_TIMEOUT_S = 10   # a harness run of one input takes milliseconds


def native_failure(exe: Path, env: dict, data: bytes) -> tuple:
    """(kind, stderr) if the harness crashes or hangs on `data` although invariant violations
    only report (CCDIFF_FUZZ_NO_ABORT=1): a signal, a sanitizer report or a hang in the
    stack's own code.  (None, stderr) when it finishes normally."""
    try:
        result = subprocess.run([str(exe)], input=data, env=dict(env, CCDIFF_FUZZ_NO_ABORT="1"),
                                capture_output=True, timeout=NATIVE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        return "hang", (exc.stderr or b"").decode(errors="replace") + \
            f"\nno result within {NATIVE_TIMEOUT_S} s\n"
    text = result.stderr.decode(errors="replace")
    match = re.search(r"(AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer): ?([\w-]*)", text)
    if match:
        return f"{match.group(1).lower()}-{match.group(2) or 'error'}", text
    if "runtime error" in text:
        return "ubsan-runtime-error", text
    if result.returncode < 0:
        return f"signal-{-result.returncode}", text
    return None, text


def reduce(trace: Trace, sig: Signature, spec: str, budget: Budget | None = None) -> tuple:
    """(the smallest trace still showing `sig`, strictify's outcome): cut at the first
    occurrence, ddmin, then -- a finding a real connection cannot produce is no bug report --
    repair the timings loss detection would have set (strictify.py), or say it could not."""
    cut, strict, repair = _cut_and_repair(trace, sig, spec)
    if strict is not None:
        return minimize(strict, spec, sig.key, budget=budget), repair
    small = minimize(cut, spec, sig.key, budget=budget)
    fires = lambda t: sig.key in signatures(t, spec)    # noqa: E731
    strict, repair = make_strict(small, fires, lambda events: _valid(small, _repair(events)))
    return strict or small, repair


def _cut_and_repair(trace: Trace, sig: Signature, spec: str) -> tuple:
    """(the prefix up to the finding, its strict form or None, strictify's outcome).  Repair
    first, while the trace still has the ACKs that let loss detection declare its losses; a
    strict trace then shrinks to a strict one.  Shrinking a lenient trace first drops exactly
    those ACKs (a loss with nothing acknowledged after it is 3 events)."""
    fires = lambda t: sig.key in signatures(t, spec)    # noqa: E731
    cut = cut_to_finding(trace, sig, spec)
    strict, repair = make_strict(cut, fires, lambda events: _valid(cut, _repair(events)))
    return cut, strict, repair


def cut_to_finding(trace: Trace, sig: Signature, spec: str, at: int | None = None) -> Trace:
    """The prefix up to the first event showing the signature (a finding is flagged there).
    at: that event's index when the caller has replayed the trace already (a report)."""
    flagged = [at] if at is not None else \
        [f.event_index for f in _replay(trace, [spec]).violations if f.invariant == sig.invariant]
    for index in flagged:
        end = min(len(trace.events), index + 1)
        # stuck-at-minimum and divergence are judged over a stretch: keep a margin.
        for stop in (end, min(len(trace.events), end + 64), len(trace.events)):
            prefix = _valid(trace, trace.events[:stop])
            if prefix is not None and sig.key in signatures(prefix, spec):
                return prefix
    return trace


__all__ = ["Budget", "DiffTriage", "Difference", "first_difference", "Triage", "Signature", "minimize", "reduce", "signatures",
           "window_of"]

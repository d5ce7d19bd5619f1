"""Per-stack profiles: documented deviations from RFC 9438 and differential tolerances.

implementations/<stack>/profile.toml lists what the stack does differently on
purpose, with code references.  A deviation excuses findings in one of two ways:

- `explains = [invariants]` with `mechanism = NAME` (ccdiff/mechanisms.py): an
  occurrence of those invariants is a deviation only where the mechanism -- an
  executable model of the stack's own rule -- is observed at that event; every
  other occurrence stays a violation (mechanism-checked);
- `tolerates = [invariants]`: every finding of the invariant is a deviation
  (a whole-invariant waiver; `why_wholesale` says why no mechanism expresses it,
  `ccdiff stacks --waivers` lists them all).

trajectory-divergence, the differential against the oracle, is handled apart:

- `variant = {option = "value"}`: the deviation is executable -- an oracle option
  (oracle/base.py, oracle/cubic.py) that reproduces it.  The stack's trajectory is
  compared with the oracle configured with every variant of its profile
  (Profile.reference), so the deviation needs no excuse;
- `observed = TRIGGER` (ccdiff/triggers.py): the deviation excuses a divergence only
  when its trigger occurred in that run at or before the divergence began (a dynamic
  waiver).  A deviation that tolerates trajectory-divergence without `observed` waives
  it wholesale, with its reason in the waiver list.

Neither applies to an RFC MUST (Invariant.waivable is False), which no profile can
waive.

A deviation that waives anything (any of the four above) cites upstream's intent (issue
#30): `intent = {kind, cite, quote}`, kind one of INTENT_KINDS -- a comment in the stack's
code or a document of the stack that says the behaviour is meant, a maintainer's statement
in its tracker, the RFC text (a MAY, an alternative) it follows, or the SHOULD it departs
from with no reason given -- quoted verbatim where `cite` points.  Two other reasons are
named as what they are, never as intent: `consequence_of = "<[[known]] id>"` (the waived
findings follow a bug reported under that entry) and `ours = "..."` (ccdiff's own model
cannot yet tell the stack's behaviour from its own error: nothing under it is reported).
Behaviour with none of these is a finding, never a deviation: its entry may document it (no
waiver), and `ccdiff stacks --waivers` lists each waiver's reason.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field

from .errors import SetupError
from .invariants import CATALOG
from .mechanisms import registry
from .status import validate_known, validate_upstream
from .stacks import oracle_option_values
from .triggers import TRIGGERS

# The oracle options a deviation's `variant` may set, per family of the oracle it varies
# (ccdiff/stacks.py parses the same options from a spec); idle, fast_convergence and undo
# are the oracle's own mutants, not variants.
VARIANT_KEYS = ("ecn", "app_limited", "growth", "recovery", "epoch", "reno_friendly")
VARIANT_OPTIONS = {family: {k: v for k, v in oracle_option_values(family == "cubic").items() if k in VARIANT_KEYS}
                   for family in ("cubic", "reno")}
REFERENCE = {"cubic": "oracle", "reno": "oracle-reno"}
# "rfc-should": the stack departs from a SHOULD (RFC 2119 allows it) and states no reason.
INTENT_KINDS = ("code-comment", "doc", "maintainer", "rfc", "rfc-should")


def waives(dev: dict) -> bool:
    """Whether a [[deviation]] excuses anything: it tolerates or explains an invariant, the
    oracle reproduces it (variant), or it excuses divergences after its trigger (observed)."""
    return bool(dev.get("tolerates") or dev.get("mechanism") or dev.get("variant") or dev.get("observed"))


# The reason listed for a trajectory-divergence tolerance without a trigger (`observed`):
# none is left in the profiles, but a new stack's profile may start with one.
DIVERGENCE_WHOLESALE = ("differential against the RFC 9438 oracle, which has no variant reproducing this "
                        "deviation and no trigger limiting its excuse; a divergence that follows a "
                        "violation is reported regardless")


@dataclass
class Profile:
    stack: str = ""
    cwnd_rel_tolerance: float = 0.25   # |stack - oracle| / oracle before divergence counts
    sustain_events: int = 16           # consecutive ACKs beyond tolerance that make a finding
    min_window_datagrams: int = 2
    ecn: bool = True                   # False: the stack ignores ECN counts (no ECT sent)
    # The stack computes its avoidance rate at most once per clock tick (Linux: once per jiffy)
    # and applies it to every ACK of that tick: ca-off-curve's fastest window does the same.
    # The spec's hz= option sets the tick where the stack has one.
    ca_rate_tick_us: int = 0
    # "ack" (default) or "round-trip": ca-growth-bound judges congestion-avoidance growth ACK by
    # ACK, or over the ACKs of the last smoothed RTT for a stack that sets its window from
    # W_cubic(t) on every ACK, whose growth follows time rather than bytes (picoquic).
    ca_growth_per: str = "ack"
    # Slow start counts acknowledged bytes and adds a whole datagram once it holds one
    # (quiche's bytes_acked_sl): ss-growth-bound then carries what earlier slow-start ACKs
    # acknowledged and did not grow, up to a datagram less a byte.
    ss_byte_counter: bool = False
    deviations: list = field(default_factory=list)
    known: list = field(default_factory=list)   # [[known]] upstream issues and fixes (ccdiff/status.py)
    upstream: dict = field(default_factory=dict)   # [upstream]: when the tracker was checked, against what
    reached: list = field(default_factory=list)    # [[reached]]: findings the stack's own connection reached

    def reached_by_connection(self, invariant: str) -> dict | None:
        """The profile's record of whether the stack's own connection (ccdiff/connection/)
        reached `invariant`, or None when nobody has looked (issue #31 item 4)."""
        return next((r for r in self.reached if r["invariant"] == invariant), None)

    def explaining(self, invariant: str) -> list:
        """Deviations that waive every finding of this invariant for this stack (`tolerates`)."""
        if not CATALOG[invariant].waivable:
            return []
        return [d for d in self.deviations if invariant in d.get("tolerates", [])]

    def reference(self, family: str) -> str:
        """The oracle spec this stack's `family` controller is compared with: the family's
        oracle configured with every deviation's `variant` that applies to it."""
        # A stack that sends no ECT never sees a CE mark (`ecn = false`): nor does its oracle.
        options = {} if self.ecn else {"ecn": "off"}
        for dev in self.deviations:
            if dev.get("family", family) != family:
                continue     # the deviation concerns the stack's other controller
            for key, value in dev.get("variant", {}).items():
                if key in VARIANT_OPTIONS[family]:
                    options[key] = value
        text = ",".join(f"{k}={v}" for k, v in sorted(options.items()))
        return REFERENCE[family] + (f":{text}" if text else "")

    def rate_tick_us(self, options: tuple = ()) -> int:
        """ca_rate_tick_us, or 1 s / hz when the spec sets the stack's clock rate (linux:hz=1000)."""
        hz = dict(options).get("hz")
        return 1_000_000 // int(hz) if hz and self.ca_rate_tick_us else self.ca_rate_tick_us

    def checker_options(self, options: tuple = ()) -> dict:
        """What the checker takes from the profile beyond the floor (Checker's keywords)."""
        return {"rate_tick_us": self.rate_tick_us(options),
                "ca_growth_per_round_trip": self.ca_growth_per == "round-trip",
                "ss_byte_counter": self.ss_byte_counter}

    def judged_rules(self) -> list:
        """The rules this profile has judged in the stack's own terms rather than ACK by ACK
        (`ca_rate_tick_us`, `ca_growth_per`): not waivers -- beyond the stack's own rule the
        invariant still fires -- but listed with them (`ccdiff stacks --waivers`)."""
        rules = []
        if self.ca_rate_tick_us:
            rules.append({"invariant": "ca-off-curve", "profile": f"ca_rate_tick_us = {self.ca_rate_tick_us}",
                          "how": "the fastest window takes the rate of the first ACK of each "
                                 f"{self.ca_rate_tick_us} us tick for every ACK of that tick"})
        if self.ss_byte_counter:
            rules.append({"invariant": "ss-growth-bound", "profile": "ss_byte_counter = true",
                          "how": "an ACK may grow the window by the bytes earlier slow-start ACKs "
                                 "acknowledged and did not grow (under a datagram): the stack adds a "
                                 "whole datagram once its byte counter holds one"})
        if self.ca_growth_per == "round-trip":
            dev = next(d for d in self.deviations if d.get("ca_growth_per") == "round-trip")
            rules.append({"invariant": "ca-growth-bound", "profile": 'ca_growth_per = "round-trip"',
                          "how": "at most half the bytes acknowledged by the ACKs of the last smoothed "
                                 f"round trip, plus a datagram (deviation {dev['id']}: {dev['code']})"})
        return rules

    def divergence_excuses(self, observed: dict, at: int) -> tuple[list, list]:
        """The deviations that excuse a trajectory divergence beginning at event `at`: those
        tolerating it whose trigger (`observed`, ccdiff/triggers.py) first occurred at or
        before `at` -- observed maps a trigger name to its first event index -- and those
        without a trigger (wholesale).  Returns (excusing, not observed)."""
        excusing, idle = [], []
        for dev in self.explaining("trajectory-divergence"):
            trigger = dev.get("observed")
            if trigger is None:
                excusing.append(dev)
                continue
            first = observed.get(trigger if trigger != "mechanism" else "mechanism:" + dev["id"])
            (excusing if first is not None and first <= at else idle).append(dev)
        return excusing, idle

    def mechanisms(self, max_datagram_size: int, family: str = "cubic") -> dict:
        """Fresh mechanism instances for one run of a `family` controller (the profile serves a
        stack's CUBIC and its Reno alias): invariant -> [(deviation id, Mechanism)]
        (Checker(mechanisms=...)).  One instance per mechanism name, shared by the
        deviations and invariants that use it."""
        instances, out = {}, {}
        for dev in self.deviations:
            name = dev.get("mechanism")
            if not name or family not in registry()[name].families:
                continue
            if name not in instances:
                instances[name] = registry()[name](max_datagram_size)
                instances[name].family = family
            for invariant in dev.get("explains", []):
                if CATALOG[invariant].waivable:
                    out.setdefault(invariant, []).append((dev["id"], instances[name]))
        return out

    def wholesale_waivers(self) -> list:
        """Every whole-invariant waiver left: {invariant, deviation, reason}.  The reason is
        the deviation's `why_wholesale` (a string, or a table by invariant): why no mechanism
        expresses it yet; trajectory-divergence has one reason for every deviation
        (DIVERGENCE_WHOLESALE); without one, the deviation's summary, marked as such."""
        out = []
        for dev in self.deviations:
            why = dev.get("why_wholesale", {})
            for inv in dev.get("tolerates", []):
                if not CATALOG[inv].waivable:
                    continue
                if inv == "trajectory-divergence" and dev.get("observed"):
                    continue    # a dynamic waiver: only where its trigger occurred (divergence_excuses)
                if isinstance(why, dict):
                    reason = why.get(inv, "")
                else:   # a string: the deviation's own invariants; divergence has its own reason
                    reason = why if inv != "trajectory-divergence" else ""
                if not reason:
                    reason = DIVERGENCE_WHOLESALE if inv == "trajectory-divergence" else \
                        "no written reason; the deviation: " + dev.get("summary", "")
                out.append({"invariant": inv, "deviation": dev.get("id", ""), "reason": reason})
        return out

    def dynamic_waivers(self) -> list:
        """Deviations that excuse trajectory-divergence only after their trigger occurred in
        the run: {invariant, deviation, trigger, meaning} (ccdiff/triggers.py)."""
        return [{"invariant": "trajectory-divergence", "deviation": d.get("id", ""), "trigger": d["observed"],
                 "meaning": TRIGGERS[d["observed"]]}
                for d in self.explaining("trajectory-divergence") if d.get("observed")]

    def variants(self) -> list:
        """Deviations the oracle reproduces: {deviation, family, options}; the stack is
        compared with Profile.reference(family)."""
        return [{"deviation": d.get("id", ""), "family": d.get("family", "cubic and reno"),
                 "options": ",".join(f"{k}={v}" for k, v in d["variant"].items())}
                for d in self.deviations if d.get("variant")]

    def intents(self) -> list:
        """Every waiving deviation's reason: {deviation, kind, cite, quote}; kind is an intent's,
        or "consequence" (consequence_of) or "ours"."""
        out = []
        for d in self.deviations:
            if not waives(d):
                continue
            if "intent" in d:
                out.append({"deviation": d.get("id", ""), **d["intent"]})
            elif "consequence_of" in d:
                known = next((k for k in self.known if k["id"] == d["consequence_of"]), {})
                out.append({"deviation": d.get("id", ""), "kind": "consequence", "cite": known.get("url", ""),
                            "quote": f"[[known]] {d['consequence_of']}: {known.get('condition', '')}"})
            elif "ours" in d:
                out.append({"deviation": d.get("id", ""), "kind": "ours", "cite": "ccdiff", "quote": d["ours"]})
        return out

    def checked_waivers(self) -> list:
        """Every mechanism-checked excuse: {invariant, deviation, mechanism, rule}."""
        return [{"invariant": inv, "deviation": d.get("id", ""), "mechanism": d["mechanism"],
                 "rule": registry()[d["mechanism"]].rule}
                for d in self.deviations if d.get("mechanism") for inv in d.get("explains", [])]


def _check_deviation(path, dev: dict) -> None:
    """One [[deviation]] of a profile.toml: its names, mechanism, variant and trigger are known
    and consistent; a SetupError naming the file and the deviation otherwise."""
    def bad(rest: str) -> SetupError:
        return SetupError(f"{path}: deviation {dev.get('id')!r}{rest}")
    tolerates = dev.get("tolerates", [])
    why = dev.get("why_wholesale", "")
    if not isinstance(why, (str, dict)) or (isinstance(why, dict) and not set(why) <= set(tolerates)):
        raise bad(": why_wholesale is a string or a table keyed by invariants the deviation tolerates")
    for inv in tolerates + dev.get("explains", []):
        if inv not in CATALOG:
            raise bad(f" names unknown invariant {inv!r}")
    name, explains = dev.get("mechanism"), dev.get("explains", [])
    if explains and not name:
        raise bad(f" explains {', '.join(explains)} but names no mechanism (use tolerates for a "
                  "whole-invariant waiver)")
    if name is not None:
        if name not in registry():
            raise bad(f": unknown mechanism {name!r}; one of {', '.join(sorted(registry()))}")
        beyond = sorted(set(explains) - registry()[name].invariants)
        if beyond:
            raise bad(f": mechanism {name!r} cannot explain {', '.join(beyond)}")
    variant, trigger = dev.get("variant", {}), dev.get("observed")
    if dev.get("family", "cubic") not in VARIANT_OPTIONS:
        raise bad(": family is cubic or reno")
    allowed = {**VARIANT_OPTIONS["reno"], **VARIANT_OPTIONS["cubic"]}
    if not isinstance(variant, dict) or any(value not in allowed.get(key, ()) for key, value in variant.items()):
        raise bad(": variant is a table of oracle options: "
                  + "; ".join(f"{k} = {'|'.join(v)}" for k, v in VARIANT_OPTIONS["cubic"].items()))
    if variant and "trajectory-divergence" in tolerates:
        raise bad(" has a variant, which reproduces it in the oracle: it does not tolerate trajectory-divergence")
    if trigger is not None:
        if trigger not in TRIGGERS:
            raise bad(f": unknown trigger observed = {trigger!r}; one of {', '.join(sorted(TRIGGERS))}")
        if "trajectory-divergence" not in tolerates:
            raise bad(": `observed` limits its excuse of trajectory-divergence, which it does not tolerate")
        if trigger == "mechanism" and not name:
            raise bad(": observed = \"mechanism\" needs a mechanism")
    intent = dev.get("intent")
    if intent is not None and not (isinstance(intent, dict) and set(intent) == {"kind", "cite", "quote"}
                                   and intent["kind"] in INTENT_KINDS
                                   and all(isinstance(v, str) and v.strip() for v in intent.values())):
        raise bad(f": intent is {{kind, cite, quote}}, kind one of {', '.join(INTENT_KINDS)}, cite and quote "
                  "non-empty strings")
    # (the refusal of a waiver without intent: _require_intent, once the profiles cite it)
    both = sorted(set(explains) & set(tolerates))
    if both:
        raise bad(f" both explains and tolerates {', '.join(both)}: a mechanism-checked invariant is not "
                  "waived wholesale")


def _require_intent(path, dev: dict, known_ids: set) -> None:
    """A waiving deviation names its reason (module docstring); a consequence names a [[known]]."""
    if dev.get("consequence_of") is not None and dev["consequence_of"] not in known_ids:
        raise SetupError(f"{path}: deviation {dev.get('id')!r}: consequence_of names no [[known]] entry "
                         f"({dev['consequence_of']!r}; known: {', '.join(sorted(known_ids)) or 'none'})")
    if "ours" in dev and not (isinstance(dev["ours"], str) and dev["ours"].strip()):
        raise SetupError(f"{path}: deviation {dev.get('id')!r}: ours is the reason, a non-empty string")
    if waives(dev) and dev.get("intent") is None and "consequence_of" not in dev and "ours" not in dev:
        raise SetupError(f"{path}: deviation {dev.get('id')!r} waives findings but cites no upstream intent: add "
                         "intent = {kind, cite, quote} (a code comment, a document, a maintainer's word or the "
                         "RFC text it follows), or, with no such evidence, remove its tolerates/mechanism/"
                         "variant/observed: behaviour upstream does not mean is a finding, not a deviation")


REACHED_STATES = ("yes", "not-yet")
# How a "yes" is confirmed by the stack's own log (ccdiff/connection/confirm.py): "logged-step",
# the adapter's step at the finding's event is the one the stack logged there; "own-window", the
# same invariant flags the stack's own logged window at that event (where the adapter is a few
# bytes off the stack, so no step can match exactly).
REACHED_CONFIRMATIONS = ("logged-step", "own-window")


def _check_reached(path, entries) -> list:
    """[[reached]]: {invariant, state, and for "yes" scenario, seed, event and the command
    that shows it; for "not-yet" what was tried}.  A "yes" is what the stack's own events,
    imported from its own qlog and judged (`ccdiff sim --mode connection --qlog`), showed;
    tests/connection/test_reached.py reruns every one."""
    for entry in entries:
        where = f"{path}: [[reached]] {entry.get('invariant')!r}"
        if entry.get("invariant") not in CATALOG:
            raise SetupError(f"{where}: invariant is one of ccdiff's invariants")
        state = entry.get("state")
        if state not in REACHED_STATES:
            raise SetupError(f"{where}: state is one of {', '.join(REACHED_STATES)}")
        needs = {"yes": ("scenario", "seed", "event", "command", "note"), "not-yet": ("tried",)}[state]
        missing = [key for key in needs if key not in entry]
        if missing:
            raise SetupError(f"{where}: a {state!r} entry needs {', '.join(missing)}")
        if entry.get("confirmed_by", "logged-step") not in REACHED_CONFIRMATIONS:
            raise SetupError(f"{where}: confirmed_by is one of {', '.join(REACHED_CONFIRMATIONS)}")
    return entries


def load_profile(recipe) -> Profile:
    if recipe is None:
        return Profile()
    path = recipe.folder / "profile.toml"
    if not path.exists():
        return Profile(stack=recipe.name)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SetupError(f"{path}: {exc}") from None
    divergence = data.get("divergence", {})
    deviations = data.get("deviation", [])
    for dev in deviations:
        _check_deviation(path, dev)
    chosen = {}
    for dev in deviations:
        for key, value in dev.get("variant", {}).items():
            first_value, first_id = chosen.setdefault((key, dev.get("family")), (value, dev.get("id")))
            if first_value != value:
                raise SetupError(f"{path}: deviations {first_id!r} and {dev.get('id')!r} set the oracle's "
                                 f"{key} differently")
    try:
        known = validate_known(data.get("known", []), str(path), CATALOG)
        upstream = validate_upstream(data.get("upstream"), str(path))
    except ValueError as exc:
        raise SetupError(str(exc)) from None
    for dev in deviations:
        _require_intent(path, dev, {entry["id"] for entry in known})
    return Profile(stack=data.get("stack", recipe.name),
                   cwnd_rel_tolerance=float(divergence.get("cwnd_rel_tolerance", 0.25)),
                   sustain_events=int(divergence.get("sustain_events", 16)),
                   min_window_datagrams=int(data.get("min_window_datagrams", 2)),
                   ecn=bool(data.get("ecn", True)),
                   ca_rate_tick_us=int(data.get("ca_rate_tick_us", 0)),
                   ca_growth_per=_ca_growth_per(path, data),
                   ss_byte_counter=bool(data.get("ss_byte_counter", False)),
                   deviations=deviations, known=known, upstream=upstream,
                   reached=_check_reached(path, data.get("reached", [])))


def _ca_growth_per(path, data: dict) -> str:
    """`ca_growth_per`: "ack" or "round-trip"; the latter only with a [[deviation]] that says
    why from the stack's code (`code`), since it relaxes a MUST's per-ACK letter."""
    value = data.get("ca_growth_per", "ack")
    if value not in ("ack", "round-trip"):
        raise SetupError(f"{path}: ca_growth_per is \"ack\" or \"round-trip\", found {value!r}")
    if value == "round-trip" and not any(dev.get("ca_growth_per") == value and dev.get("code")
                                         for dev in data.get("deviation", [])):
        raise SetupError(f"{path}: ca_growth_per = \"round-trip\" needs a [[deviation]] with "
                         "ca_growth_per = \"round-trip\" and the `code` that sets the window from W_cubic(t)")
    return value


def onset(finding) -> int:
    """The first event of a finding's evidence (Finding.onset_index, else where it was flagged)."""
    return finding.event_index if finding.onset_index is None else finding.onset_index


def judge(findings: list, profile: Profile, observed: dict | None = None) -> list:
    """Deviation or violation: one rule for replay, matrix, sim and conform.

    A finding whose every occurrence a deviation's mechanism explained (Finding.explained_by,
    set by the checker) is a deviation; so is any finding of an invariant a documented
    deviation tolerates wholesale (never an RFC MUST: Profile.explaining).  A trajectory divergence that comes after the run broke an
    RFC rule is that bug's footprint, not a documented deviation: it is a violation that
    "follows" the earlier findings -- only those whose evidence began at or before it
    (causal order: an idle inflation flagged at the end of the round trip it measures began
    at that round trip's first ACK).  So does any violation that first shows at or after a
    numeric-error.  With `observed` (the run's ccdiff/triggers.py record,
    which replay passes), a deviation that names a trigger excuses a trajectory divergence
    only when that trigger occurred at or before the divergence began; a divergence no
    deviation excuses stays a violation.  Returns the findings, in the order given.
    """
    for finding in findings:
        explaining = profile.explaining(finding.invariant)
        if finding.invariant == "trajectory-divergence" and observed is not None:
            explaining, idle = profile.divergence_excuses(observed, finding.event_index)
            if not explaining:
                finding.detail += "; no documented deviation explains it" + (
                    " (" + ", ".join(f"{d['id']} needs {d['observed']}" for d in idle) +
                    ", not observed before it)" if idle else "")
        if finding.explained_by and CATALOG[finding.invariant].waivable:
            finding.status = "deviation"
            finding.detail += "; documented deviations (mechanism observed at every occurrence): " + \
                ", ".join(finding.explained_by)
        elif explaining:
            finding.status = "deviation"
            finding.detail += "; documented deviations: " + ", ".join(d["id"] for d in explaining)
    for finding in findings:
        if finding.invariant != "trajectory-divergence":
            continue
        earlier = sorted({f.invariant for f in findings
                          if f.status == "violation" and f.invariant != "trajectory-divergence"
                          and onset(f) <= finding.event_index})
        if earlier:
            finding.status = "violation"
            finding.detail = finding.detail.split("; documented deviations")[0] + \
                f" (follows {', '.join(earlier)})"
    # A window that is no number any more (numeric-error: cwnd 0, NaN, ...) leaves every later
    # rule judging what the stack computes from it: a violation that first shows at or after
    # it is that bug's footprint, one report with it (msquic's zero window after an ECN undo
    # was stored as five "new" fuzz findings: growth from 0, a growth bound, ...).
    insane = [f.event_index for f in findings if f.invariant == "numeric-error" and f.status == "violation"]
    for finding in findings:
        if insane and finding.status == "violation" and finding.event_index >= min(insane) \
                and finding.invariant not in ("numeric-error", "trajectory-divergence"):
            finding.detail += " (follows numeric-error)"
    return findings

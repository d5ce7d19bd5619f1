"""Deviations as executable oracle variants, and dynamic divergence waivers (issue #21 items 1, 5).

A stack's trajectory is compared with the oracle configured with its profile's variants
(Profile.reference); a deviation without a variant excuses a divergence only where its
trigger (ccdiff/triggers.py) occurred at or before it.
"""
import json

import pytest

from ccdiff.errors import SetupError
from ccdiff.invariants import Finding
from ccdiff.profiles import Profile, judge, load_profile
from ccdiff.replay import replay
from ccdiff.stacks import load_recipes, open_controller, resolve
from ccdiff.trace import Ack, Lost, load_trace, parse_trace_text
from oracle import Cubic

from .adapters.common import sent

MDS = 1200


def _trace(events):
    lines = [json.dumps({"ccdiff_trace": 1, "max_datagram_size": MDS})] + [json.dumps(e) for e in events]
    return parse_trace_text("\n".join(lines))


def _max_gap(result, stack, reference):
    """The largest |stack - reference| / reference over every event of a replay."""
    mine, theirs = result.runs[stack].snapshots, result.runs[reference].snapshots
    return max(abs(a.cwnd - b.cwnd) / b.cwnd for a, b in zip(mine, theirs))


# -- the oracle's variants ------------------------------------------------------------------

def test_ecn_off_ignores_ce_marks_and_the_default_reduces():
    trace = load_trace("examples/ecn-small-window.jsonl")
    result = replay(trace, ["oracle", "oracle:ecn=off"], check=False)
    ce_only = [i for i, ev in enumerate(trace.events) if isinstance(ev, Ack) and ev.ecn_ce]
    assert ce_only
    plain, varied = result.runs["oracle"].snapshots, result.runs["oracle:ecn=off"].snapshots
    assert any(plain[i].cwnd < plain[i - 1].cwnd for i in ce_only)
    assert not any(varied[i].cwnd < varied[i - 1].cwnd for i in ce_only)


def _avoidance_trace(ack_ranges):
    """Slow start to a loss, then congestion avoidance with ACKs of the given pn ranges."""
    events = [sent(0, i) for i in range(10)] + [dict(t=50_000, ev="ack", pns=[[0, 8]])]
    events += [sent(50_000, i) for i in range(10, 30)] + [dict(t=60_000, ev="lost", pns=[9])]
    events += [sent(61_000, i) for i in range(30, 60)]   # after the recovery start: they grow it
    t = 100_000
    for lo, hi in ack_ranges:
        t += 5_000
        events.append(dict(t=t, ev="ack", pns=[[lo, hi]]))
    return _trace(events)


def test_per_ack_growth_differs_only_on_acks_of_several_packets():
    one_by_one = _avoidance_trace([(pn, pn) for pn in range(30, 50)])
    grouped = _avoidance_trace([(pn, pn + 3) for pn in range(30, 50, 4)])
    specs = ["oracle", "oracle:growth=per-ack"]
    single = replay(one_by_one, specs, check=False)
    assert [s.cwnd for s in single.runs[specs[0]].snapshots] == [s.cwnd for s in single.runs[specs[1]].snapshots]
    multi = replay(grouped, specs, check=False)
    assert multi.runs[specs[0]].snapshots[-1].cwnd != multi.runs[specs[1]].snapshots[-1].cwnd


def test_per_ack_growth_takes_one_segment_step_per_ack_in_the_cubic_region():
    """RFC 9438 §4.4: cwnd += (target - cwnd) / cwnd per segment acknowledged; ngtcp2 takes that
    step once per ACK frame (lib/ngtcp2_cc.c:446-455), whatever the frame acknowledges."""
    from ccdiff.ledger import ACKED, Resolved
    grown = {}
    for mode in ("per-packet", "per-ack"):
        c = Cubic(MDS, 100_000, growth=mode)
        # 2 s into an epoch with K = 1 s: W_cubic is above cwnd and far above W_est (§4.4).
        c.cwnd, c.ssthresh, c.w_max, c.k, c.epoch_start = 30_000, 20_000, 30_000, 1.0, 0
        c.w_est, c.cwnd_prior = 10_000, 40_000
        packets = tuple((pn, 0, MDS, False) for pn in range(4))
        c.on_ack(Resolved(ACKED, 2_000_000, 4 * MDS, 0, packets, (100_000,) * 4))
        grown[mode] = c.cwnd - 30_000
    assert grown["per-ack"] > 0
    # four steps, each a little smaller as cwnd nears the target, against one
    assert 3.5 * grown["per-ack"] < grown["per-packet"] < 4 * grown["per-ack"]


def test_epoch_at_congestion_event_starts_the_epoch_at_the_reduction():
    trace = _avoidance_trace([])
    result = replay(trace, ["oracle", "oracle:epoch=congestion-event"], check=False)
    loss = next(i for i, ev in enumerate(trace.events) if isinstance(ev, Lost))
    assert result.runs["oracle"].snapshots[loss].epoch_start_us is None
    assert result.runs["oracle:epoch=congestion-event"].snapshots[loss].epoch_start_us == 60_000


def test_reno_friendly_set_follows_w_est_down_and_max_never_shrinks():
    from ccdiff.ledger import ACKED, Resolved
    controllers = {}
    for mode in ("max", "set"):
        c = Cubic(MDS, 100_000, reno_friendly=mode)
        # 1 ms into an epoch with K = 0 and W_max = 20,000: W_cubic(t) is 20,000 bytes, below
        # W_est (29,000 + one ACK's α step): the Reno-friendly region (RFC 9438 §4.3), with the
        # window already above W_est.
        c.cwnd, c.ssthresh, c.w_max, c.k, c.epoch_start = 30_000, 20_000, 20_000, 0.0, 0
        c.w_est, c.cwnd_prior = 29_000, 40_000
        c.on_ack(Resolved(ACKED, 1_000, MDS, 0, ((0, 0, MDS, False),), (100_000,) * 4))
        controllers[mode] = c.cwnd
    assert controllers["max"] == 30_000
    assert 29_000 < controllers["set"] < 30_000


def test_an_unknown_oracle_option_names_what_it_accepts():
    with pytest.raises(SetupError, match=r"growth=per-packet\|per-ack"):
        open_controller(resolve("oracle:growth=fast"), MDS, 100_000)
    with pytest.raises(SetupError, match="oracle-reno:idle=none: unknown option"):
        open_controller(resolve("oracle-reno:idle=none"), MDS, 100_000)


# -- profiles -------------------------------------------------------------------------------

class _Recipe:
    def __init__(self, folder):
        self.folder, self.name = folder, "x"


@pytest.mark.parametrize("deviation,message", [
    ('variant = {growth = "fast"}', "variant is a table of oracle options"),
    ('variant = {idle = "none"}', "variant is a table of oracle options"),
    ('variant = {ecn = "off"}\ntolerates = ["trajectory-divergence"]', "does not tolerate trajectory-divergence"),
    ('tolerates = ["trajectory-divergence"]\nobserved = "sunspots"', "unknown trigger"),
    ('tolerates = ["excess-reduction"]\nobserved = "loss"', "which it does not tolerate"),
    ('tolerates = ["trajectory-divergence"]\nobserved = "mechanism"', "needs a mechanism"),
    ('family = "bbr"', "family is cubic or reno"),
])
def test_profile_rejects_a_bad_variant_or_trigger(tmp_path, deviation, message):
    (tmp_path / "profile.toml").write_text(f'[[deviation]]\nid = "d"\n{deviation}\n')
    with pytest.raises(SetupError, match=message):
        load_profile(_Recipe(tmp_path))


INTENT = 'intent = {kind = "code-comment", cite = "x.c:1 (1.0)", quote = "on purpose"}\n'


def test_profile_rejects_two_deviations_that_vary_one_option_differently(tmp_path):
    (tmp_path / "profile.toml").write_text('[[deviation]]\nid = "a"\nvariant = {ecn = "off"}\n' + INTENT +
                                           '[[deviation]]\nid = "b"\nvariant = {ecn = "on"}\n' + INTENT)
    with pytest.raises(SetupError, match="set the oracle's ecn differently"):
        load_profile(_Recipe(tmp_path))


@pytest.mark.parametrize("waiver", ['tolerates = ["excess-reduction"]', 'variant = {ecn = "off"}',
                                    'mechanism = "k-from-w-max"\nexplains = ["k-mismatch"]',
                                    'tolerates = ["trajectory-divergence"]\nobserved = "loss"'])
def test_a_waiver_without_upstream_intent_is_refused(tmp_path, waiver):
    """Issue #30 item 1: a deviation that excuses anything cites upstream's intent; without it
    the behaviour is a finding.  An entry that only documents (no waiver) needs none."""
    (tmp_path / "profile.toml").write_text(f'[[deviation]]\nid = "d"\n{waiver}\n')
    with pytest.raises(SetupError, match="deviation 'd' waives findings but cites no upstream intent"):
        load_profile(_Recipe(tmp_path))
    (tmp_path / "profile.toml").write_text(f'[[deviation]]\nid = "d"\n{waiver}\n{INTENT}')
    assert load_profile(_Recipe(tmp_path)).intents() == [
        {"deviation": "d", "kind": "code-comment", "cite": "x.c:1 (1.0)", "quote": "on purpose"}]
    (tmp_path / "profile.toml").write_text('[[deviation]]\nid = "d"\ntolerates = []\n')
    assert load_profile(_Recipe(tmp_path)).intents() == []


@pytest.mark.parametrize("intent", ['intent = "a comment"', 'intent = {kind = "hunch", cite = "x", quote = "y"}',
                                    'intent = {kind = "doc", cite = "x"}', 'intent = {kind = "doc", cite = "", quote = "y"}'])
def test_an_intent_names_its_kind_where_and_what(tmp_path, intent):
    (tmp_path / "profile.toml").write_text(f'[[deviation]]\nid = "d"\ntolerates = ["excess-reduction"]\n{intent}\n')
    with pytest.raises(SetupError, match="intent is {kind, cite, quote}"):
        load_profile(_Recipe(tmp_path))


def test_reference_applies_a_variant_to_its_family_only():
    profile = Profile(deviations=[{"id": "a", "family": "cubic", "variant": {"growth": "per-ack"}},
                                  {"id": "b", "variant": {"app_limited": "off"}}], ecn=False)
    assert profile.reference("cubic") == "oracle:app_limited=off,ecn=off,growth=per-ack"
    assert profile.reference("reno") == "oracle-reno:app_limited=off,ecn=off"
    assert Profile().reference("cubic") == "oracle"


def _divergence(at):
    return Finding("s", "trajectory-divergence", at, 0, "cwnd 1 vs oracle 2")


@pytest.mark.parametrize("observed,status", [
    ({}, "violation"),                      # the trigger never occurred
    ({"spurious-loss": 12}, "violation"),   # ... only after the divergence began
    ({"spurious-loss": 10}, "deviation"),
    ({"loss": 3}, "violation"),             # another trigger than the deviation's
])
def test_a_deviation_excuses_a_divergence_only_after_its_trigger(observed, status):
    profile = Profile(deviations=[{"id": "undo", "tolerates": ["trajectory-divergence"],
                                   "observed": "spurious-loss"}])
    finding = judge([_divergence(10)], profile, observed)[0]
    assert finding.status == status
    if status == "violation":
        assert "undo needs spurious-loss, not observed before it" in finding.detail


def test_a_mechanism_trigger_is_the_mechanisms_first_explained_occurrence():
    profile = Profile(deviations=[{"id": "d", "mechanism": "ngtcp2-delivery-ssthresh",
                                   "explains": ["excess-reduction"],
                                   "tolerates": ["trajectory-divergence"], "observed": "mechanism"}])
    assert judge([_divergence(10)], profile, {"mechanism:d": 4})[0].status == "deviation"
    assert judge([_divergence(10)], profile, {"mechanism:other": 4})[0].status == "violation"


def test_what_shows_at_or_after_a_numeric_error_is_its_consequence():
    """A window that is no number any more (msquic's cwnd = 0 after an ECN undo) makes every
    later rule judge garbage: one report, the numeric-error's.  A violation that showed before
    it stays a report of its own, and so does a deviation."""
    from ccdiff.status import status_of
    findings = [Finding("s", "growth-in-recovery", 3, 0, "cwnd 1 -> 2"),
                Finding("s", "numeric-error", 5, 0, "snapshot has cwnd=0"),
                Finding("s", "ca-growth-bound", 5, 0, "grew by 2400"),
                Finding("s", "excess-reduction", 6, 0, "cwnd 0"),
                Finding("s", "k-mismatch", 7, 0, "K", status="deviation", explained_by=("d",))]
    judge(findings, Profile())
    by = {f.invariant: f for f in findings}
    assert by["ca-growth-bound"].detail.endswith("(follows numeric-error)")
    assert by["excess-reduction"].detail.endswith("(follows numeric-error)")
    assert "follows" not in by["growth-in-recovery"].detail + by["numeric-error"].detail
    kinds = {f.invariant: status_of(f.status, f.invariant, "1.0", [], "strict", f.detail).kind for f in findings}
    assert kinds == {"growth-in-recovery": "unchecked", "numeric-error": "unchecked", "ca-growth-bound": "consequence",
                     "excess-reduction": "consequence", "k-mismatch": "deviation"}


def test_without_a_record_the_waiver_is_wholesale_as_before():
    profile = Profile(deviations=[{"id": "undo", "tolerates": ["trajectory-divergence"],
                                   "observed": "spurious-loss"}])
    assert judge([_divergence(10)], profile)[0].status == "deviation"


# -- triggers in a replay ---------------------------------------------------------------------

def test_triggers_record_the_first_event_of_each():
    events = [sent(0, 0), sent(0, 1), sent(0, 2, app_limited=True), dict(t=50_000, ev="ack", pns=[[0, 1]]),
              dict(t=60_000, ev="lost", pns=[2]), dict(t=70_000, ev="ack", pns=[[2, 2]])]
    result = replay(_trace(events), ["oracle", "quiche@0.30.0"])
    first = result.runs["quiche@0.30.0"].triggers.first
    assert first["app-limited"] == 2
    assert first["ack-of-several-packets"] == 3
    assert first["loss"] == first["congestion-event"] == 4
    assert first["spurious-loss"] == 5
    assert "ecn-ce" not in first and "persistent-congestion" not in first and "idle" not in first
    assert first["window-beyond-twice-flight"] == 3      # 12,000 + 2,400 acknowledged > 2 x 3,600 in flight
    full = [sent(0, pn) for pn in range(10)] + [dict(t=50_000, ev="ack", pns=[[0, 9]])]
    first = replay(_trace(full), ["oracle", "quiche@0.30.0"]).runs["quiche@0.30.0"].triggers.first
    assert "window-beyond-twice-flight" not in first     # a full window in flight: 24,000 is twice it


# -- the variants reproduce the stacks they describe --------------------------------------------

def test_quiche_is_tracked_by_its_ecn_off_oracle_where_the_plain_one_is_far_off():
    """quiche ignores ECN (profile no-ecn): on ecn-small-window the plain oracle reduces on every
    CE mark and ends up to 123x below quiche; the oracle with ecn=off stays within 1%."""
    trace = load_trace("examples/ecn-small-window.jsonl")
    result = replay(trace, ["quiche@0.30.0", "oracle", "oracle:ecn=off"], check=False)
    assert _max_gap(result, "quiche@0.30.0", "oracle") > 10
    assert _max_gap(result, "quiche@0.30.0", "oracle:ecn=off") < 0.15
    checked = replay(trace, ["quiche@0.30.0"])
    assert not [f for f in checked.findings if f.invariant == "trajectory-divergence"]


def test_ngtcp2s_variants_bring_the_oracle_onto_its_trajectory():
    """long-recovery: ngtcp2's epoch at the congestion event and its per-ACK-frame growth put it
    5% off the plain oracle; the oracle with those options and its profile's two matches it.
    Since the waiver audit (docs/waiver-audit.md) its reference has only the two whose intent
    upstream states: the per-ACK-frame growth is fixed upstream and the epoch's move has no
    stated reason, so the divergence they make is judged."""
    reference = load_profile(load_recipes()["ngtcp2"]).reference("cubic")
    assert reference == "oracle:recovery=largest-acked,reno_friendly=set"
    model = "oracle:epoch=congestion-event,growth=per-ack,recovery=largest-acked,reno_friendly=set"
    trace = load_trace("examples/long-recovery.jsonl")
    result = replay(trace, ["ngtcp2@1.25.0", "oracle", reference, model], check=False)
    assert _max_gap(result, "ngtcp2@1.25.0", "oracle") > 0.03
    assert _max_gap(result, "ngtcp2@1.25.0", reference) > 0.03
    assert _max_gap(result, "ngtcp2@1.25.0", model) < 0.005

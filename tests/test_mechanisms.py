"""Mechanism-checked deviations (ccdiff/mechanisms.py): a documented deviation excuses an
occurrence only where its mechanism reproduces the stack's step.

The ngtcp2 cases replay ngtcp2 1.25.0 itself (the windows are derived in
tests/adapters/test_ngtcp2.py); the checker cases feed it hand-made snapshots, so the
stack's answer is what the test says it is: a pristine rule, or the planted bug.
"""
import json

import pytest

from ccdiff.build import ensure_built
from ccdiff.cli import main
from ccdiff.errors import SetupError
from ccdiff.invariants import Checker, Finding, Truth
from ccdiff.ledger import ACKED, LOST, PERSISTENT_CONGESTION, SENT, Ledger
from ccdiff.mechanisms import Occurrence, registry

MECHANISMS = registry()   # every stack folder's mechanisms.py, and the shared ones
Ngtcp2DeliverySsthresh = MECHANISMS["ngtcp2-delivery-ssthresh"]
Ngtcp2RenoFriendlySwitch = MECHANISMS["ngtcp2-reno-friendly-switch"]
from ccdiff.paths import project_root
from ccdiff.replay import replay
from ccdiff.profiles import Profile, judge, load_profile
from ccdiff.snapshot import Snapshot
from ccdiff.stacks import load_recipes
from ccdiff.trace import load_trace, parse_trace_text

from .adapters.common import run_events, sent

MDS = 1200
NGTCP2 = "ngtcp2@1.25.0"


def delivery_bounded_loss():
    """Slow start 12000 -> 24000 on pns 0-9; pns 10-13 sent at 10 ms; at 20 ms pn 10 is lost
    and 11-13 acked.  ngtcp2's rate sample: 3600 bytes delivered since pn 13 was sent;
    3600 * 2 < 24000, so ssthresh = min(24000 * 7 / 10, max(3600, 0 + 1200)) = 3600
    (lib/ngtcp2_cc.c:501-510): below beta, by ngtcp2's documented rule."""
    return ([sent(0, i) for i in range(10)] + [dict(t=10_000, ev="ack", pns=[[0, 9]])]
            + [sent(10_000, i) for i in range(10, 14)]
            + [dict(t=20_000, ev="lost", pns=[10]), dict(t=20_000, ev="ack", pns=[[11, 13]])])


def resolved(events):
    text = "\n".join([json.dumps({"ccdiff_trace": 1, "max_datagram_size": MDS})]
                     + [json.dumps(e) for e in events])
    trace = parse_trace_text(text)
    ledger = Ledger(trace.header)
    return [ledger.resolve(e) for e in trace.events]


def snap(cwnd, ssthresh=None, start=None, phase="slow_start", inflight=0):
    return Snapshot(cwnd, ssthresh, inflight, phase, start, start, None, None)


def checked(events, snapshots, profile):
    """The checker over hand-made snapshots, with the profile's mechanisms; judged findings."""
    checker = Checker("stack", MDS, "cubic", 2, loss_applied_with_ack=True,
                      mechanisms=profile.mechanisms(MDS))
    truth, before = Truth(), None
    for index, (ev, after) in enumerate(zip(resolved(events), snapshots)):
        truth.update(ev)
        checker.check(index, ev, before, after, truth)
        before = after
    return {f.invariant: f for f in judge(checker.finish(), profile)}


@pytest.fixture(scope="module")
def ngtcp2_profile():
    return ngtcp2_profile_now()


def ngtcp2_profile_now():
    return load_profile(load_recipes()["ngtcp2"])


# -- the rule itself ---------------------------------------------------------------------

def test_delivery_ssthresh_rule_in_ngtcp2_integers():
    rule = Ngtcp2DeliverySsthresh.ssthresh
    assert rule(12000, 10800, 9600, MDS) == 8400          # 10800 * 2 >= 12000: beta only
    assert rule(24000, 3600, 1200, MDS) == 3600           # delivered bounds it
    assert rule(24000, 1000, 5000, MDS) == 5000           # flight + lost bounds it
    assert rule(24000, 100, 100, MDS) == 2 * MDS          # never below two datagrams
    assert rule(10001, 0, 99999, MDS) == 7000             # cwnd * 7 / 10, truncated


def test_model_reproduces_the_rule_on_ngtcp2_and_not_a_planted_beta():
    events = delivery_bounded_loss()
    model = Ngtcp2DeliverySsthresh(MDS)
    evs = resolved(events)
    for index, ev in enumerate(evs):
        model.observe(index, ev)
    before = snap(24000)

    def occ(ssthresh):
        return Occurrence("excess-reduction", "below-beta", 15, 20_000, before,
                          snap(ssthresh, ssthresh, 20_000, "recovery"), [(15, evs[15]), (16, evs[16])])
    assert model.expected(occ(3600)) == (3600, 3600)        # exact: no ACK of a lost packet inside
    assert model.explains(occ(3600))
    assert not model.explains(occ(4800))            # any other depth is not the rule's
    # Another cause of excess-reduction (a second reduction in one period) is never explained.
    assert not model.explains(Occurrence("excess-reduction", "in-recovery", 15, 20_000, before,
                                         snap(3600, 3600, 20_000), [(15, evs[15]), (16, evs[16])]))


def test_delivery_sample_is_an_interval_only_around_acks_of_lost_packets():
    """pn 1 declared lost, then acknowledged (spurious) after pn 3 was sent: ngtcp2 counts that
    ACK in its delivered bytes only while it still keeps the lost entry, so the sample of the
    ACK of pn 3 is 1200 or 2400; the rule is checked against both ends."""
    events = [sent(0, 0), sent(0, 1), sent(0, 2), dict(t=10_000, ev="ack", pns=[0]),
              dict(t=10_000, ev="lost", pns=[1]), sent(10_000, 3),
              dict(t=20_000, ev="ack", pns=[1]), dict(t=20_000, ev="ack", pns=[3])]
    model = Ngtcp2DeliverySsthresh(MDS)
    evs = resolved(events)
    for index, ev in enumerate(evs):
        model.observe(index, ev)
    assert model.sample([(7, evs[7])]) == (1200, 2400)
    assert model.sample([(4, evs[4])]) == (1200, 1200)   # the loss timer: the last ACK before it (pn 0)


def test_ngtcp2_delivery_bounded_reduction_is_an_explained_deviation():
    ensure_built(NGTCP2)
    snaps, findings = run_events(delivery_bounded_loss(), NGTCP2)
    assert (snaps[-1].cwnd, snaps[-1].ssthresh) == (3600, 3600)
    (finding,) = [f for f in findings if f.invariant == "excess-reduction"]
    assert finding.status == "deviation"
    assert finding.explained_by == ("ssthresh-bounded-by-delivery",)


def test_ngtcp2_gap_fill_growth_is_a_violation_since_the_waiver_audit():
    """tests/adapters/test_ngtcp2.py test_gap_fill_ack_is_not_held_by_recovery: 2400 -> 2717
    on pn 2 alone, below the largest acknowledged pn 3.  The mechanism that once excused it
    (ngtcp2-gap-fill-ack) no longer does: nothing upstream means it, and ngtcp2's own BBR, ECN
    code and Reno treat the unknown send time it rests on as unknown (docs/waiver-audit.md)."""
    ensure_built(NGTCP2)
    events = ([sent(0, i) for i in range(4)]
              + [dict(t=10_000, ev="lost", pns=[0]), dict(t=10_000, ev="ack", pns=[1, 3]),
                 dict(t=12_000, ev="ack", pns=[2])])
    snaps, findings = run_events(events, NGTCP2)
    assert snaps[-1].cwnd == 2717
    (finding,) = [f for f in findings if f.invariant == "growth-in-recovery"]
    assert finding.status == "violation"


@pytest.mark.parametrize("events", [
    # The loss timer before any ACK: rs.delivered is still 0 (ngtcp2_rs_init), so ssthresh =
    # min(8400, max(0, 2400 + 1200)) = 3600.
    [sent(0, 0), sent(0, 1), sent(0, 2), dict(t=10_000, ev="lost", pns=[0]), dict(t=10_100, ev="ack", pns=[1])],
    # CE on a gap-fill ACK (no recovery for ngtcp2), then CE on the next ACK: ngtcp2's first
    # congestion event, inside the checker's recovery period.
    [sent(0, 0), sent(0, 1), dict(t=10_000, ev="ack", pns=[1]), dict(t=10_000, ev="ack", pns=[0], ecn_ce=True),
     sent(10_000, 2), dict(t=20_000, ev="ack", pns=[2], ecn_ce=True)],
    [sent(0, 0), sent(0, 1), sent(0, 2), dict(t=10_000, ev="ack", pns=[1]),
     dict(t=10_000, ev="ack", pns=[0], ecn_ce=True), dict(t=10_000, ev="lost", pns=[2])],
], ids=["timer-loss-before-any-ack", "ce-after-ignored-ce", "loss-after-ignored-ce"])
def test_fuzzed_pristine_ngtcp2_reductions_are_explained(events):
    """Inputs `ccdiff fuzz --engine hypothesis` found on pristine ngtcp2 while the mechanism
    was being written: each reduction is ngtcp2's rule, none may be a violation."""
    ensure_built(NGTCP2)
    _, findings = run_events(events, NGTCP2)
    assert not [f for f in findings if f.status == "violation"], findings


WATCHED = {"excess-reduction", "growth-in-recovery", "missing-reduction"}


@pytest.mark.parametrize("path,spec", [
    ("fuzz/reproducers/ngtcp2-idle-inflation.jsonl", NGTCP2),
    ("fuzz/reproducers/quiche-undo-then-avoidance-entry.jsonl", NGTCP2),
    ("fuzz/vectors/random-4096.jsonl", "ngtcp2-reno@1.25.0"),
    ("fuzz/vectors/random-512.jsonl", "ngtcp2-reno@1.25.0"),
])
def test_stored_corpus_keeps_its_verdicts_on_pristine_ngtcp2(path, spec):
    """Where the wholesale waivers also hid other ngtcp2 behaviours (they became violations
    when the waivers were first made mechanism-checked): the w_est switch (cwnd-set-to-w-est),
    Reno's credit before the congestion event of the same ACK (reno-grows-before-loss), ACKs
    of lost packets inside a rate sample.  Every occurrence of the formerly waived invariants
    is now explained by a mechanism."""
    ensure_built(spec)
    result = replay(load_trace(str(project_root() / path)), [spec])
    found = {f.invariant: f for f in result.findings if f.invariant in WATCHED}
    assert found, "the trace no longer exercises these invariants"
    for finding in found.values():
        assert finding.status == "deviation" and finding.explained_by, finding


def test_the_gap_fill_growth_is_reported_on_the_fuzz_vector_where_it_was_waived():
    """fuzz/vectors/random-4096.jsonl on ngtcp2: its growth-in-recovery was the gap fill
    (ngtcp2-gap-fill-ack), excused until the waiver audit; now a violation, nothing else moved."""
    ensure_built(NGTCP2)
    result = replay(load_trace(str(project_root() / "fuzz/vectors/random-4096.jsonl")), [NGTCP2])
    found = {f.invariant: f for f in result.findings if f.invariant in WATCHED}
    assert found["growth-in-recovery"].status == "violation"
    for invariant in WATCHED - {"growth-in-recovery"}:
        assert invariant not in found or found[invariant].status == "deviation", found[invariant]


def test_w_est_switch_explains_a_small_drop_above_w_cubic_only():
    """fuzz/reproducers/ngtcp2-idle-inflation.jsonl event 31: 5698 -> 5656 with W_cubic(t) = 5642
    (ngtcp2's fixed point from the snapshot's W_max, K = k_m / 1024 s and epoch); the same drop
    to 5600 (below W_cubic: not the Reno-friendly branch) is not explained."""
    ensure_built(NGTCP2)
    trace = load_trace(str(project_root() / "fuzz/reproducers/ngtcp2-idle-inflation.jsonl"))
    run = replay(trace, [NGTCP2]).runs[NGTCP2]
    before, after = run.snapshots[30], run.snapshots[31]
    ledger = Ledger(trace.header)
    evs = [ledger.resolve(e) for e in trace.events]
    mechanism = Ngtcp2RenoFriendlySwitch(MDS)
    assert mechanism.w_cubic(after, evs[31].t) == 5642 and (before.cwnd, after.cwnd) == (5698, 5656)

    def occ(cwnd, cause="no-signal"):
        return Occurrence("excess-reduction", cause, 31, evs[31].t, before, after._replace(cwnd=cwnd),
                          [(31, evs[31])])
    assert mechanism.explains(occ(5656))
    assert not mechanism.explains(occ(5600))
    assert not mechanism.explains(occ(5656, "below-beta"))


# -- the checker: explained and unexplained occurrences ------------------------------------

def gap_fill_then_in_order(ecn=False):
    """Loss at 10 ms (pn 0; 1 and 3 acked), then pn 2 alone (a gap fill) and pn 4 (sent before
    the recovery start, above the largest acked: no gap fill)."""
    return ([sent(0, i) for i in range(5)]
            + [dict(t=10_000, ev="lost", pns=[0]), dict(t=10_000, ev="ack", pns=[1, 3]),
               dict(t=12_000, ev="ack", pns=[2], **({"ecn_ce": True} if ecn else {})),
               dict(t=13_000, ev="ack", pns=[4])])


def test_growth_in_recovery_on_a_non_gap_fill_ack_stays_a_violation():
    """The stack grows on both ACKs of pre-recovery packets (the recovery check removed):
    the gap fill is ngtcp2's rule, the in-order ACK is not.  The mechanism is checked with a
    profile of its own: ngtcp2's no longer waives the gap fill (docs/waiver-audit.md), and
    the mechanism stays the executable model of the rule that finding describes."""
    gap_fill = Profile(deviations=[{"id": "gap-fill-ack-skips-recovery-check", "mechanism": "ngtcp2-gap-fill-ack",
                                    "explains": ["growth-in-recovery"]}])
    snaps = [snap(12000)] * 5 + [snap(8400, 8400, 10_000, "recovery")] * 2 + [
        snap(8700, 8400, 10_000, "congestion_avoidance"), snap(9000, 8400, 10_000, "congestion_avoidance")]
    found = checked(gap_fill_then_in_order(), snaps, gap_fill)
    finding = found["growth-in-recovery"]
    assert finding.status == "violation"
    assert finding.event_index == 8 and finding.count == 1
    assert "1 other occurrence(s) explained" in finding.detail
    # The pristine rule: no growth on the in-order ACK.  Only the gap fill grows: a deviation.
    found = checked(gap_fill_then_in_order(), snaps[:8] + [snaps[7]], gap_fill)
    assert found["growth-in-recovery"].status == "deviation"
    assert checked(gap_fill_then_in_order(), snaps[:8] + [snaps[7]], ngtcp2_profile_now())[
        "growth-in-recovery"].status == "violation"


def test_wholesale_waiver_is_gone_for_mechanism_checked_invariants(ngtcp2_profile):
    """Without the mechanism check the same run is a deviation (the old wholesale waiver):
    ngtcp2's profile no longer tolerates excess-reduction or growth-in-recovery."""
    assert not ngtcp2_profile.explaining("growth-in-recovery")
    assert not ngtcp2_profile.explaining("excess-reduction")
    wholesale = Profile(deviations=[{"id": "old", "tolerates": ["growth-in-recovery"]}])
    snaps = [snap(12000)] * 5 + [snap(8400, 8400, 10_000, "recovery")] * 2 + [
        snap(8700, 8400, 10_000, "congestion_avoidance"), snap(9000, 8400, 10_000, "congestion_avoidance")]
    assert checked(gap_fill_then_in_order(), snaps, wholesale)["growth-in-recovery"].status == "deviation"


def test_a_reduction_in_a_period_the_stack_skipped_is_judged_by_depth(ngtcp2_profile):
    """Found by fuzzing pristine ngtcp2: CE on a gap-fill ACK starts no recovery for ngtcp2
    (ecn-only-on-new-largest, observed), so a later CE inside the checker's period is ngtcp2's
    first congestion event: one reduction by beta is fine there, a second one is not."""
    events = [sent(0, 0), sent(0, 1), dict(t=10_000, ev="ack", pns=[1]),
              dict(t=10_000, ev="ack", pns=[0], ecn_ce=True), sent(10_000, 2), sent(10_000, 3),
              dict(t=20_000, ev="ack", pns=[2], ecn_ce=True), dict(t=30_000, ev="ack", pns=[3], ecn_ce=True)]
    snaps = [snap(12000)] * 2 + [snap(13200), snap(14400)] + [snap(14400)] * 2 + [
        snap(10080, 10080, 20_000, "recovery"), snap(10080, 10080, 20_000, "recovery")]
    found = checked(events, snaps, ngtcp2_profile)
    assert found["missing-reduction"].status == "deviation"
    assert "excess-reduction" not in found
    snaps[-1] = snap(7056, 7056, 30_000, "recovery")
    found = checked(events, snaps, ngtcp2_profile)
    assert found["excess-reduction"].status == "violation" and found["excess-reduction"].event_index == 7


def test_judge_never_lets_a_mechanism_excuse_an_rfc_must():
    finding = Finding("s", "idle-inflation", 3, 0, "x", explained_by=("d",))
    assert judge([finding], Profile())[0].status == "violation"


# -- profiles ----------------------------------------------------------------------------

class _Recipe:
    name = "x"

    def __init__(self, folder):
        self.folder = folder


@pytest.mark.parametrize("deviation,message", [
    ('mechanism = "no-such"\nexplains = ["excess-reduction"]', "unknown mechanism"),
    ('explains = ["excess-reduction"]', "names no mechanism"),
    ('mechanism = "ngtcp2-gap-fill-ack"\nexplains = ["excess-reduction"]', "cannot explain"),
    ('mechanism = "ngtcp2-delivery-ssthresh"\nexplains = ["excess-reduction"]\n'
     'tolerates = ["excess-reduction"]', "both explains and tolerates"),
    ('tolerates = ["no-such-invariant"]', "unknown invariant"),
])
def test_profile_rejects_a_bad_mechanism_entry(tmp_path, deviation, message):
    (tmp_path / "profile.toml").write_text(f'[[deviation]]\nid = "d"\n{deviation}\n')
    with pytest.raises(SetupError, match=message):
        load_profile(_Recipe(tmp_path))


def test_every_mechanism_names_its_upstream_rule():
    import re
    for mechanism in MECHANISMS.values():   # file:line in a C, Rust or Python source (aioquic); s2n-quic's are .rs
        assert mechanism.invariants and re.search(r"\.(c|rs|py):\d+", mechanism.rule), mechanism.name


def test_stacks_waivers_lists_every_whole_invariant_waiver_with_a_reason(capsys):
    assert main(["stacks", "--waivers", "--json"]) == 0
    data = {entry["stack"]: entry for entry in json.loads(capsys.readouterr().out)}
    checked_ngtcp2 = {(c["invariant"], c["deviation"]) for c in data["ngtcp2"]["checked"]}
    assert ("excess-reduction", "ssthresh-bounded-by-delivery") in checked_ngtcp2
    assert ("growth-in-recovery", "gap-fill-ack-skips-recovery-check") not in checked_ngtcp2   # a finding now
    wholesale = {(s, w["invariant"]) for s, e in data.items() for w in e["wholesale"]}
    assert ("ngtcp2", "excess-reduction") not in wholesale
    assert ("ngtcp2", "growth-in-recovery") not in wholesale
    assert ("picoquic", "growth-in-recovery") not in wholesale    # a finding, known upstream (#1823)
    # issue #30 item 1: every waiver says why, and only by the reasons the rule allows
    reasons = {(s, i["deviation"]): i["kind"] for s, e in data.items() for i in e["intents"]}
    assert set(reasons.values()) <= {"code-comment", "doc", "maintainer", "rfc", "rfc-should", "consequence", "ours"}
    # withdrawn: the adapter's connection model was wrong, not quiche (quiche's own connection, cf_app_limited)
    assert ("quiche", "app-limited-reset-by-connection") not in reasons
    assert reasons[("quiche", "no-persistent-congestion")] == "consequence"
    for entry in data.values():
        for waiver in entry["wholesale"]:     # every whole-invariant waiver has a written reason
            assert waiver["reason"] and waiver["deviation"]
            assert not waiver["reason"].startswith("no written reason"), waiver
    recipes = load_recipes()
    for name, entry in data.items():
        # Every tolerated invariant is listed once: wholesale, or (trajectory-divergence with a
        # trigger) as a dynamic waiver.
        tolerated = sum(len(d.get("tolerates", [])) for d in load_profile(recipes[name]).deviations)
        assert len(entry["wholesale"]) + len(entry["dynamic"]) == tolerated
        # issue #21 item 1: no stack waives trajectory-divergence wholesale any more
        assert not [w for w in entry["wholesale"] if w["invariant"] == "trajectory-divergence"], name
    assert data["ngtcp2"]["references"]["cubic"] == "oracle:recovery=largest-acked,reno_friendly=set"
    assert data["quiche"]["references"] == {"cubic": "oracle:ecn=off", "reno": "oracle-reno:ecn=off"}
    assert main(["stacks", "--waivers"]) == 0
    out = capsys.readouterr().out
    assert "whole-invariant waivers" in out and "dynamic waivers" in out and "oracle reproduces" in out
    assert "why each waiver waives" in out


# -- picoquic (issue #21: its wholesale waivers hid a beta of 0.5 and ignored ECN) -----------

def _resolved(kind, t, packets=(), ecn_ce=False):
    from ccdiff.ledger import Resolved
    return Resolved(kind, t, 0, 0, tuple(packets), (50_000, 50_000, 25_000, 50_000), ecn_ce=ecn_ce)


def test_picoquic_loss_rate_filter_is_cc_common_c_arithmetic():
    """cc_common.c:105-136: per lost packet number an EWMA of 1/16, decayed once per number
    since the last loss (at most 32), counted above 15%; numbers at or below the last one
    (packet 0 on a fresh connection) never update."""
    PicoquicLossRateFilter = MECHANISMS["picoquic-loss-rate-filter"]
    m = PicoquicLossRateFilter(1200)
    assert m.loss_test(0) is False and m.rate == 0.0
    rate, verdicts = 0.0, []
    for pn in (30, 32, 34, 36, 38):
        rate = rate * (15 / 16) ** 2 if pn != 30 else 0.0
        rate += (1 - rate) / 16
        verdicts.append(m.loss_test(pn))
        assert m.rate == pytest.approx(rate)
    assert verdicts == [False, False, True, True, True]         # 0.0625, 0.114, 0.156 > 0.15
    before = m.rate
    assert m.loss_test(1_000) is False                          # 962 numbers later: 32 decays, not 962
    assert m.rate == pytest.approx(before * (15 / 16) ** 32 + (1 - before * (15 / 16) ** 32) / 16)
    after = m.rate
    assert m.loss_test(999) is False and m.rate == after and m.last_lost == 1_000   # below the last: no update


def test_picoquic_mechanisms_never_excuse_ce_or_a_deeper_reduction():
    from ccdiff.ledger import ACKED, LOST, SENT
    PicoquicLossRateFilter = MECHANISMS["picoquic-loss-rate-filter"]
    PicoquicHystartDelayExit = MECHANISMS["picoquic-hystart-delay-exit"]
    PicoquicRecoveryByPacketNumber = MECHANISMS["picoquic-recovery-by-packet-number"]
    snap = Snapshot(12_000, 9_000, 0, "congestion_avoidance", 0, 0, 12_000.0, 0.0)
    m = PicoquicLossRateFilter(1200)
    m.observe(1, _resolved(LOST, 100, [(5, 10, 1200, False)]))
    ack = _resolved(ACKED, 100, [(6, 10, 1200, False)], ecn_ce=True)
    assert not m.explains(Occurrence("missing-reduction", "missing-reduction", 2, 100, snap, snap,
                                     [(1, _resolved(LOST, 100, [(5, 10, 1200, False)])), (2, ack)]))
    loss_only = [(1, _resolved(LOST, 100, [(5, 10, 1200, False)])), (2, _resolved(ACKED, 100, [(6, 10, 1200, False)]))]
    assert m.explains(Occurrence("missing-reduction", "missing-reduction", 2, 100, snap, snap, loss_only))
    # HyStart's exit keeps at least 7/16 of the window, only from the initial slow start.
    start = Snapshot(16_000, None, 0, "slow_start", None, 0, None, None)
    hystart = PicoquicHystartDelayExit(1200)
    for after, ok in ((Snapshot(7_000, 7_000, 0, "congestion_avoidance", None, 0, None, None), True),
                      (Snapshot(6_900, 6_900, 0, "congestion_avoidance", None, 0, None, None), False)):
        assert hystart.explains(Occurrence("excess-reduction", "no-signal", 3, 100, start, after, [])) is ok
    # A second reduction for a loss numbered below the recovery sequence is never picoquic's.
    r = PicoquicRecoveryByPacketNumber(1200)
    for pn in range(10):
        r.observe(pn, _resolved(SENT, 0, [(pn, 0, 1200, False)]))
    r.recovery_sequence, r.avoidance = 8, True
    lost = [(20, _resolved(LOST, 100, [(3, 0, 1200, False)]))]
    r.observe(20, lost[0][1])
    after = Snapshot(8_400, 8_400, 0, "congestion_avoidance", 100, 100, 12_000.0, 0.0)
    assert not r.explains(Occurrence("excess-reduction", "in-recovery", 20, 100, snap, after, lost))
    lost_new = [(21, _resolved(LOST, 100, [(9, 0, 1200, False)]))]
    r.observe(21, lost_new[0][1])
    assert r.explains(Occurrence("excess-reduction", "in-recovery", 21, 100, snap, after, lost_new))


def test_picoquic_app_limited_by_timestamp_replays_the_send_time_rule():
    from ccdiff.ledger import ACKED, APP_IDLE, SENT
    PicoquicAppLimitedByTimestamp = MECHANISMS["picoquic-app-limited-by-timestamp"]
    m = PicoquicAppLimitedByTimestamp(1200)
    m.observe(0, _resolved(SENT, 10, [(0, 10, 1200, False)]))
    m.observe(1, _resolved(APP_IDLE, 10))
    m.observe(2, _resolved(ACKED, 60, [(0, 10, 1200, False)]))   # sent at the limited instant: no growth
    m.observe(3, _resolved(SENT, 70, [(1, 70, 1200, True)]))      # an app-limited send at 70
    m.observe(4, _resolved(SENT, 80, [(2, 80, 1200, False)]))
    m.observe(5, _resolved(ACKED, 130, [(2, 80, 1200, False)]))  # newest acked sent after 70: grows
    snap = Snapshot(12_000, 9_000, 0, "congestion_avoidance", None, 0, None, None)
    occ = lambda i: Occurrence("growth-while-app-limited", "growth-while-app-limited", i, 0, snap, snap, [])
    assert not m.explains(occ(2)) and m.explains(occ(5))


# -- shallow-reduction (issue #21: a β of 0.78 planted in ngtcp2 passed every check) ---------

def _snap(cwnd, ssthresh=None, w_max=None):
    return Snapshot(cwnd, ssthresh, 0, "congestion_avoidance", None, None, w_max, None)


def _occurrence(before, after, acked=0):
    events = [(0, _resolved(LOST, 1_000, [(9, 0, MDS, False)]))]
    if acked:
        events.append((1, _resolved(ACKED, 1_000, [(pn, 0, MDS, False) for pn in range(acked // MDS)])))
    return Occurrence("shallow-reduction", "above-beta", 0, 1_000, before, after, events)


@pytest.mark.parametrize("family,reduced,explained", [
    ("cubic", 0.7 * (24_000 + 3 * MDS), True),        # β of the window the ACK grew first
    ("cubic", 0.8 * (24_000 + 3 * MDS), False),       # shallower than that too: a β bug
    ("reno", 0.5 * (24_000 + 3 * MDS), True),
    ("reno", 0.7 * (24_000 + 3 * MDS), False),
])
def test_acks_credited_before_losses_explains_beta_of_the_grown_window_only(family, reduced, explained):
    mechanism = MECHANISMS["acks-credited-before-losses"](MDS)
    mechanism.family = family
    occ = _occurrence(_snap(24_000), _snap(int(reduced), int(reduced)), acked=3 * MDS)
    assert mechanism.explains(occ) is explained
    assert not mechanism.explains(_occurrence(_snap(24_000), _snap(int(reduced), int(reduced))))  # no ACK


def test_picoquic_beta_seven_eighths_explains_its_rule_not_a_planted_beta():
    """cubic.c: W_max = 7/8 x cwnd (fast convergence) and ssthresh = 7/8 x W_max: 0.766 of
    the window (the examples' 53,248 -> 40,768 with W_max 46,592); a β of 0.9 is not that."""
    mechanism = MECHANISMS["picoquic-beta-seven-eighths"](MDS)
    before = _snap(53_248)
    assert mechanism.explains(_occurrence(before, _snap(40_721, 40_768, 46_592.0)))
    assert not mechanism.explains(_occurrence(before, _snap(47_923, 47_923, 53_248.0)))   # β 0.9
    assert not mechanism.explains(_occurrence(before, _snap(40_721, 40_768, None)))     # no W_max


# -- quiche: its missed reductions are its own recovery start's, never a blanket waiver ---------
# (a wholesale missing-reduction waiver hid a congestion_event emptied by a mutant, 359:5)

def _quiche_loss(start, sent_at):
    before = Snapshot(12_000, 8_400, 0, "congestion_avoidance", start, start, None, None)
    after = before
    lost = [(0, _resolved(LOST, 50_000, [(7, sent_at, MDS, False)]))]
    return Occurrence("missing-reduction", "missing-reduction", 0, 50_000, before, after, lost)


def test_quiche_idle_shift_explains_a_loss_inside_its_own_start_only_after_a_shift():
    mechanism = MECHANISMS["quiche-idle-shift-first-send"](MDS)
    inside = _quiche_loss(start=40_000, sent_at=40_000)     # sent at quiche's (shifted) start
    assert not mechanism.explains(inside)                   # no send has moved the start yet
    moved_before = Snapshot(12_000, 8_400, 0, "congestion_avoidance", 30_000, 30_000, None, None)
    moved_after = moved_before._replace(recovery_start_us=40_000, epoch_start_us=40_000)
    mechanism.after_step(5, _resolved(SENT, 40_000), moved_before, moved_after)
    assert mechanism.explains(inside)
    assert not mechanism.explains(_quiche_loss(start=40_000, sent_at=40_001))   # after it: a new event
    assert not mechanism.explains(_quiche_loss(start=None, sent_at=10_000))     # no recovery at all


def test_quiche_no_persistent_congestion_explains_only_after_one_was_declared():
    mechanism = MECHANISMS["quiche-no-persistent-congestion"](MDS)
    inside = _quiche_loss(start=40_000, sent_at=39_000)
    assert not mechanism.explains(inside)
    mechanism.observe(3, _resolved(PERSISTENT_CONGESTION, 45_000))
    assert mechanism.explains(inside)
    assert not mechanism.explains(_quiche_loss(start=40_000, sent_at=41_000))


def test_quiche_profile_waives_missing_reduction_nowhere_wholesale():
    profile = load_profile(load_recipes()["quiche"])
    assert not profile.explaining("missing-reduction")
    checked = {(w["invariant"], w["mechanism"]) for w in profile.checked_waivers()}
    # the idle shift's missed reduction is a finding since the waiver audit (docs/waiver-audit.md)
    assert ("missing-reduction", "quiche-idle-shift-first-send") not in checked
    assert ("missing-reduction", "quiche-no-persistent-congestion") in checked


# -- quinn: K from W_max alone (RFC 8312's K), explained where it is exactly that -------------

def _k_occurrence(w_max, k_s):
    before = _snap(10_920, None, 10_920.0)
    after = Snapshot(7_643, 7_643, 0, "recovery", None, None, w_max, k_s * 1e6)
    return Occurrence("k-mismatch", "k-mismatch", 0, 1_000, before, after, [])


def test_k_from_w_max_explains_quinns_k_not_a_planted_c():
    """quinn's cubic_k: K = cbrt(W_max / MDS x (1 - 0.7) / 0.4), death-spiral's numbers after
    fast convergence (W_max 9,282 = 0.85 x 10,920): 1.7968 s where Eq. 2 gives 1.5058 s.  A K
    from C = 4/11 (3.2% longer) is not quinn's rule."""
    mechanism = MECHANISMS["k-from-w-max"](MDS)
    quinn_k = (9_282 / MDS * 0.3 / 0.4) ** (1 / 3)
    assert abs(quinn_k - 1.7968) < 1e-3
    assert mechanism.explains(_k_occurrence(9_282.0, quinn_k))
    assert not mechanism.explains(_k_occurrence(9_282.0, quinn_k * (11 / 10) ** (1 / 3)))
    assert not mechanism.explains(_k_occurrence(9_282.0, 1.5058))   # Eq. 2's K never needs it
    assert not mechanism.explains(_k_occurrence(None, quinn_k))


def test_quinns_k_after_fast_convergence_is_an_explained_deviation_on_the_examples():
    ensure_built("quinn")
    result = replay(load_trace(str(project_root() / "examples" / "death-spiral.jsonl")), ["quinn"])
    (finding,) = [f for f in result.findings if f.invariant == "k-mismatch"]
    assert finding.status == "deviation" and finding.explained_by == ("k-from-w-max",)


def test_quinn_ignores_ce_on_a_reordered_ack_frame_only():
    """AFL++ stored a CE count on a gap-fill ACK (9 after 13) as a new strict missing-reduction
    on pristine quinn: quinn examines ECN counts only on a frame with a new largest
    (mod.rs:1563-1572, its comment the intent).  The mechanism excuses that frame; the same CE
    count on the frame with the new largest is still judged, and the acks-before-losses window
    left larger than before stays a violation."""
    ensure_built("quinn")
    trace = load_trace(str(project_root() / "fuzz" / "reproducers" / "quinn-ecn-on-reordered-ack.jsonl"))
    assert trace.reachability == "strict"
    (finding,) = replay(trace, ["quinn"]).findings
    assert (finding.invariant, finding.status, finding.explained_by) == (
        "missing-reduction", "deviation", ("ecn-only-on-new-largest",))
    swapped = [trace.events[0], trace.events[1], trace.events[2]._replace(ecn_ce=True), trace.events[3]._replace(ecn_ce=False)]
    result = replay(type(trace)(trace.header, swapped, trace.source), ["quinn"])
    assert not [f for f in result.findings if f.invariant == "missing-reduction"]    # CE on the new largest: reduces
    big = parse_trace_text("\n".join(['{"ccdiff_trace": 1, "max_datagram_size": 1200}'] + [
        f'{{"t": 0, "ev": "sent", "pn": {pn}, "bytes": 1200}}' for pn in range(5)] + [
        '{"t": 10000, "ev": "ack", "pns": [[0, 4]], "ecn_ce": true}']))
    (kept,) = [f for f in replay(big, ["quinn"]).findings if f.invariant == "missing-reduction"]
    assert kept.status == "violation"      # 12,000 + 6,000 then x 0.7: 12,600, larger than before


def test_msquic_ignores_ce_on_an_ack_frame_without_a_new_largest_only():
    """AFL++ stored a CE count on the ACK of packet 0 after that of packet 2 as a new strict
    missing-reduction on pristine msquic: msquic validates ECN counts and calls OnEcn only
    when the largest acknowledged increases (loss_detection.c:1523-1528, its comment the
    intent).  The mechanism excuses that frame; the same CE count on the frame with the new
    largest reduces, and no reduction there would stay a violation."""
    ensure_built("msquic")
    trace = load_trace(str(project_root() / "fuzz" / "reproducers" / "msquic-ecn-on-reordered-ack.jsonl"))
    assert trace.reachability == "strict"
    (finding,) = replay(trace, ["msquic"]).findings
    assert (finding.invariant, finding.status, finding.explained_by) == (
        "missing-reduction", "deviation", ("ecn-only-on-new-largest",))
    ce_first = trace.events[:2] + [trace.events[2]._replace(ecn_ce=True), trace.events[3]._replace(ecn_ce=False)]
    result = replay(type(trace)(trace.header, ce_first, trace.source), ["msquic"])
    cwnd = [s.cwnd for s in result.runs["msquic"].snapshots]
    assert cwnd[2] < cwnd[1] and not result.findings    # CE on the new largest: OnEcn reduces
    assert MECHANISMS["msquic-ecn-on-new-largest-only"].invariants == frozenset({"missing-reduction"})


def test_picoquics_loss_filter_sees_an_acks_ce_before_the_losses_it_reveals():
    """AFL++ stored a missing reduction on pristine picoquic as new and strict: the loss-rate
    filter's model tested the loss of 125 (revealed by the ACK carrying CE at t=154636) before
    that ACK's CE, as the trace orders them, and so counted it in the EWMA; picoquic notifies
    the CE first (frames.c:3994-4003), enters recovery, and then skips the loss (below
    recovery_sequence, cubic.c:333): the EWMA stays lower and 138's loss does not reduce.
    Without the CE on that ACK the losses are tested in the trace's order, as before."""
    ensure_built("picoquic")
    trace = load_trace(str(project_root() / "fuzz" / "reproducers" / "picoquic-ce-before-revealed-losses.jsonl"))
    assert trace.reachability == "strict"
    findings = [f for f in replay(trace, ["picoquic"]).findings if f.invariant == "missing-reduction"]
    assert findings and all(f.status == "deviation" and f.explained_by == ("loss-rate-filter",) for f in findings)
    model = MECHANISMS["picoquic-loss-rate-filter"](1200)
    ledger = Ledger(trace.header)
    for index, ev in enumerate(trace.events):
        model.observe(index, ledger.resolve(ev))
    verdicts = dict(model.filtered)
    assert verdicts[6] and verdicts[11] and verdicts[12]     # every loss stayed under 15%
    assert model.last_lost == 138 and model.rate < model.THRESHOLD
    in_order = MECHANISMS["picoquic-loss-rate-filter"](1200)
    ledger = Ledger(trace.header)
    for index, ev in enumerate(trace.events):
        in_order.observe(index, ledger.resolve(ev._replace(ecn_ce=False) if index == 7 else ev))
    assert not dict(in_order.filtered)[12]      # no CE there: 125 enters the EWMA, 138 passes 15%


def test_msquic_grows_once_an_ack_above_its_recovery_packet_number_ended_recovery():
    """AFL++ stored growth on the ACK of packet 46 (sent before the CE's recovery start) as a
    new strict growth-in-recovery on pristine msquic: the ACK of 75, above
    RecoverySentPacketNumber (48), had ended msquic's recovery (cubic.c:434-446, its comment
    the intent).  The mechanism excuses growth only once its replay of that rule is out of
    recovery: without the ACK of 75, the ACK of 46 stays in msquic's recovery and does not
    grow, and an ACK in recovery is never excused."""
    ensure_built("msquic")
    trace = load_trace(str(project_root() / "fuzz" / "reproducers" / "msquic-recovery-ended-by-largest.jsonl"))
    assert trace.reachability == "strict"
    (finding,) = [f for f in replay(trace, ["msquic"]).findings if f.invariant == "growth-in-recovery"]
    assert (finding.status, finding.explained_by) == ("deviation", ("recovery-by-packet-number",))
    model = MECHANISMS["msquic-recovery-by-packet-number"](1200)
    ledger = Ledger(trace.header)
    for index, ev in enumerate(trace.events):
        model.observe(index, ledger.resolve(ev))
    assert dict(model.out_before) == {2: True, 4: False, 5: True}   # in recovery from the CE (event 2) to the ACK of 75
    without_75 = [e for e in trace.events if getattr(e, "pns", None) != (75,)]
    result = replay(type(trace)(trace.header, without_75, trace.source), ["msquic"])
    cwnd = [s.cwnd for s in result.runs["msquic"].snapshots]
    assert cwnd[-1] == cwnd[-2] and not [f for f in result.findings if f.invariant == "growth-in-recovery"]


def test_msquics_flight_cap_excuses_a_divergence_only_where_the_cap_can_hold_the_window():
    """AFL++ stored a trajectory divergence on pristine msquic as new and strict: four sends the
    trace calls cwnd-limited into a 12,000-byte window, which the oracle grows on (RFC 9002
    §7.8: pacing-limited is not underutilized) and msquic caps at 2 x BytesInFlightMax (cubic.c
    654-663, its comment the intent).  Excused once an ACK came whose slow-start growth would
    pass twice the largest flight (trigger window-beyond-twice-flight), not before."""
    ensure_built("msquic")
    trace = load_trace(str(project_root() / "fuzz" / "reproducers" / "msquic-flight-cap-holds-window.jsonl"))
    assert trace.reachability == "strict"
    result = replay(trace, ["msquic"])
    (finding,) = [f for f in result.findings if f.invariant == "trajectory-divergence"]
    assert finding.status == "deviation" and "no-app-limited-state-flight-cap" in finding.detail
    assert result.runs["msquic"].triggers.first["window-beyond-twice-flight"] == finding.event_index == 4


def test_picoquic_keeps_its_window_for_sends_in_the_microsecond_of_an_app_limited_one():
    """The other side of app-limited-by-timestamp: AFL++ stored the ACK of ten cwnd-limited
    packets, sent in the microsecond of two app-limited ones, as a new strict
    ss-growth-shortfall on pristine picoquic.  Its rule (growth only for a packet sent strictly
    after the last limited instant) kept the window; sent 1 us later, they grow it."""
    from ccdiff.trace import Sent
    ensure_built("picoquic")
    trace = load_trace(str(project_root() / "fuzz" / "reproducers" / "picoquic-app-limited-same-microsecond.jsonl"))
    assert trace.reachability == "strict"
    (finding,) = replay(trace, ["picoquic"]).findings
    assert (finding.invariant, finding.status, finding.explained_by) == (
        "ss-growth-shortfall", "deviation", ("app-limited-by-timestamp",))
    later = [e._replace(t=1) if isinstance(e, Sent) and not e.app_limited else e for e in trace.events]
    result = replay(type(trace)(trace.header, later, trace.source), ["picoquic"])
    cwnd = [s.cwnd for s in result.runs["picoquic"].snapshots[-2:]]
    assert cwnd[1] > cwnd[0] and not result.findings


def _w_max_occurrence(before_cwnd, w_max, acked=0):
    occ = _occurrence(_snap(before_cwnd), _snap(int(0.7 * before_cwnd), int(0.7 * before_cwnd), w_max), acked)
    occ.invariant = occ.cause = "w-max-mismatch"
    return occ


def test_w_max_from_the_grown_window_or_picoquics_seven_eighths_only():
    """quinn and aioquic credit the ACK first: W_max = 48,000 + the 2,400 bytes acked =
    50,400 (the examples' first loss); picoquic's W_max = 7/8 x 53,248 = 46,592 (fast
    convergence by 7/8 from the first event).  A W_max above the grown window, or 0.75 of it,
    is neither rule."""
    credited = MECHANISMS["acks-credited-before-losses"](MDS)
    assert credited.explains(_w_max_occurrence(48_000, 50_400.0, acked=2 * MDS))
    assert credited.explains(_w_max_occurrence(48_000, 0.85 * 50_400, acked=2 * MDS))
    assert not credited.explains(_w_max_occurrence(48_000, 50_400.0))                  # no ACK
    assert not credited.explains(_w_max_occurrence(48_000, 54_000.0, acked=2 * MDS))
    assert not credited.explains(_w_max_occurrence(48_000, 0.75 * 48_000, acked=2 * MDS))
    picoquic = MECHANISMS["picoquic-beta-seven-eighths"](MDS)
    assert picoquic.explains(_w_max_occurrence(53_248, 46_592.0))
    assert picoquic.explains(_w_max_occurrence(53_248, 53_248.0))
    assert not picoquic.explains(_w_max_occurrence(53_248, 0.85 * 0.85 * 53_248))


def test_picoquic_k_from_w_max_uses_its_seven_eighths():
    """cubic.c:138: K = cbrt(W_max x (1 - 7/8) / C); after an undo (blackout scenario, seed 0)
    W_max 6,223 gives 1.1770 s, where quinn's 0.7 would give 1.6623 s."""
    picoquic = MECHANISMS["picoquic-k-from-w-max"](MDS)
    assert picoquic.explains(_k_occurrence(6_223.0, 1.1770))
    assert not picoquic.explains(_k_occurrence(6_223.0, (6_223 / MDS * 0.3 / 0.4) ** (1 / 3)))
    assert not MECHANISMS["k-from-w-max"](MDS).explains(_k_occurrence(6_223.0, 1.1770))


def test_s2n_fast_convergence_compares_with_the_previous_unreduced_window():
    """RFC 8312's W_last_max: after an event at 31,626 bytes (W_max 0.85 x 31,626 = 26,882),
    a window of 27,766 is below W_last_max but above W_max: s2n-quic reduces W_max to
    0.85 x 27,766 = 23,601 (reordering scenario, seed 0), RFC 9438 keeps 27,766."""
    mechanism = MECHANISMS["s2n-fast-convergence-rfc8312"](MDS)
    lost = _resolved(LOST, 1_000, [(9, 0, MDS, False)])
    first = (_snap(31_626, None, 26_000.0), _snap(22_138, 22_138, 26_882.0))
    mechanism.after_step(3, lost, *first)
    occ = _w_max_occurrence(27_766, 23_601.0)
    occ.index = 9
    assert mechanism.explains(occ)
    occ.after = occ.after._replace(w_max=0.9 * 27_766)        # not 0.85
    assert not mechanism.explains(occ)
    above = _w_max_occurrence(32_000, 0.85 * 32_000)           # above the previous window: no FC
    above.index = 9
    assert not mechanism.explains(above)
    mechanism.after_step(5, _resolved(PERSISTENT_CONGESTION, 2_000, [(9, 0, MDS, False)]),
                         _snap(22_138, 22_138, 26_882.0), _snap(2 * MDS, 2 * MDS, 0.0))
    again = _w_max_occurrence(27_766, 23_601.0)                # persistent congestion zeroed W_last_max
    again.index = 9
    assert not mechanism.explains(again)


# -- aioquic's 2 s reset: its intent (inactivity) explained, its bug (an outage) not (#30) --
def _aioquic_trace(kind: str) -> str:
    """A window grown to ~300 kB over six round trips, then: `outage`, 100 packets more in
    flight and no ACK until a probe 2.5 s later; `idle`, those 100 acknowledged, then 2.1 s
    of silence and a send; `raise`, persistent congestion (cwnd 2,400), then a send 3.1 s
    after it with nothing in flight."""
    header = {"ccdiff_trace": 1, "max_datagram_size": 1200, "name": f"aioquic-{kind}"}
    if kind == "raise":
        events = [{"t": 0, "ev": "sent", "pn": 0, "bytes": 1200}, {"t": 10000, "ev": "ack", "pns": [[0, 0]]},
                  {"t": 20000, "ev": "sent", "pn": 1, "bytes": 1200},
                  {"t": 400000, "ev": "sent", "pn": 2, "bytes": 1200},
                  {"t": 800000, "ev": "lost", "pns": [1, 2]}, {"t": 800000, "ev": "persistent_congestion"},
                  {"t": 3900000, "ev": "sent", "pn": 3, "bytes": 1200},
                  {"t": 3910000, "ev": "ack", "pns": [[3, 3]]}]
    else:
        events, pn, t = [], 0, 0
        for r in range(6):
            for _ in range(2 ** (r + 2)):
                events.append({"t": t, "ev": "sent", "pn": pn, "bytes": 1200})
                pn += 1
            t += 10000
            events.append({"t": t, "ev": "ack", "pns": [[pn - 2 ** (r + 2), pn - 1]]})
        for _ in range(100):
            events.append({"t": t, "ev": "sent", "pn": pn, "bytes": 1200})
            pn += 1
        if kind == "idle":
            t += 10000
            events.append({"t": t, "ev": "ack", "pns": [[pn - 100, pn - 1]]})
            events.append({"t": t + 2_100_000, "ev": "sent", "pn": pn, "bytes": 1200})
        else:
            events.append({"t": t + 2_500_000, "ev": "sent", "pn": pn, "bytes": 1200})
    return "\n".join(json.dumps(x) for x in [header] + events) + "\n"


def _aioquic_findings(tmp_path, kind):
    ensure_built("aioquic")
    trace = tmp_path / f"{kind}.jsonl"
    trace.write_text(_aioquic_trace(kind))
    out = tmp_path / f"{kind}.json"
    code = main(["replay", str(trace), "--stack", "aioquic", "--json", str(out)])
    return code, {f["invariant"]: f for f in json.loads(out.read_text())["findings"]}


def test_aioquic_reset_with_bytes_in_flight_is_a_violation_not_its_idle_deviation(tmp_path):
    """Issue #30: during an outage a probe reset 314 kB to 12 kB and ccdiff called it the
    documented idle reset; the mechanism now checks the inactivity its upstream comment names."""
    code, found = _aioquic_findings(tmp_path, "outage")
    assert code == 1
    assert found["excess-reduction"]["status"] == "violation"
    assert "-> 12000 on no congestion signal" in found["excess-reduction"]["detail"]
    code, found = _aioquic_findings(tmp_path, "idle")     # 2.1 s with nothing in flight: its intent
    assert code == 0 and found["excess-reduction"]["status"] == "deviation"
    assert "idle-reset-from-last-acked-send" in found["excess-reduction"]["detail"]


def test_aioquic_raising_a_collapsed_window_on_a_send_is_growth_without_ack(tmp_path):
    code, found = _aioquic_findings(tmp_path, "raise")
    assert code == 1
    assert found["growth-without-ack"]["status"] == "violation"
    assert found["growth-without-ack"]["detail"] == "cwnd 2400 -> 12000 on a send event, 0 bytes in flight before it"


def test_the_idle_reset_mechanism_refuses_each_missing_precondition():
    """Every precondition it claims, one missing at a time: the reset state, 2 s after the
    last acknowledged packet's send time, nothing in flight, and no send or ACK for a round
    trip of that packet (a period of underutilization, RFC 9002 §7.8)."""
    from ccdiff.ledger import Resolved
    mds = 1200
    mechanism = MECHANISMS["aioquic-idle-reset"](mds)

    def event(kind, t, bif, packets=()):
        return Resolved(kind, t, bif, bif, list(packets), (0, 0, 0, 0))
    reset = snap(12000)._replace(w_max=12000.0, k_us=0, epoch_start_us=None)
    before = snap(300000, 200000, phase="congestion_avoidance")

    def judged(gap_us, in_flight, after=reset, acked_sent=0):
        m = MECHANISMS["aioquic-idle-reset"](mds)
        m.observe(0, event(SENT, 0, 0))
        m.observe(1, event(ACKED, 10_000, 1200, [(0, acked_sent, 1200, 0)]))
        send = event(SENT, 10_000 + gap_us, in_flight)
        m.observe(2, send)
        return m.explains(Occurrence("excess-reduction", "no-signal", 2, send.t, before, after, [(2, send)]))
    assert judged(2_000_000, 0)                       # the intent: 2 s of inactivity
    assert not judged(2_000_000, 120_000)             # bytes in flight: an outage
    # 2 s after the send time, 1.5 s of inactivity on a 610 ms path: underutilized for more than
    # a round trip, RFC 9002 §7.8's MAY (a violation before 2026-11-29, which no maintainer takes)
    assert judged(1_500_000, 0, acked_sent=-600_000)
    assert not judged(100_000, 0, acked_sent=-2_500_000)   # a 2.51 s RTT: the send right after the ACK
    assert not judged(1_000_000, 0)                   # not aioquic's 2 s at all
    assert not judged(2_000_000, 0, after=reset._replace(cwnd=24000))   # not the reset state
    assert mechanism.name == "aioquic-idle-reset"


def test_a_3_s_outage_flags_aioquic_in_closed_loop():
    """scenarios/outage-3s.toml: the probe sent 2 s after the last acknowledged packet resets
    aioquic's window with 100s of kB in flight (issue #30, item 4)."""
    from ccdiff.sim import load_scenario, simulate
    ensure_built("aioquic")
    result = simulate(load_scenario("outage-3s"), "aioquic", 0)
    assert result.status == "fail"
    assert any(r.startswith("excess-reduction") and "-> 12000 on no congestion signal" in r for r in result.reasons), \
        result.reasons
    assert simulate(load_scenario("outage-3s"), "oracle", 0).status == "pass"


def test_on_the_3_s_outage_a_k_recomputed_to_the_same_value_is_judged_against_its_own_windows():
    """s2n-quic 0.91.0 after persistent congestion: cubic.reset() sets K = 0 and W_max = 0
    (cubic.rs:416-420), then the slow-start exit sets W_max = cwnd and K = 0 again
    (cubic.rs:354-361, 859-866) -- RFC 9438 §4.8's first avoidance stage after a timeout.  K
    did not change value, and the checker kept judging it against the windows of the
    persistent-congestion event: a k-mismatch on seeds 2, 4 and 6 that was ccdiff's own.  Now a
    new W_max brings its event's windows in.  aioquic sets W_max on an ACK with no epoch and
    K at the next one: its K is judged where the epoch starts (seed 1 had a k-mismatch)."""
    from ccdiff.sim import load_scenario, simulate
    outage = load_scenario("outage-3s")
    for stack, seeds in (("s2n-quic", (2, 4, 6)), ("aioquic", (1,))):
        ensure_built(stack)
        for seed in seeds:
            result = simulate(outage, stack, seed)
            assert not [f for f in result.findings if f["invariant"] == "k-mismatch"], (stack, seed)


def test_on_the_3_s_outage_quinn_ignores_a_loss_after_its_slow_start_exit():
    """A real quinn 0.11.19 bug the outage reaches (docs/closed-loop-results.md): persistent
    congestion clears recovery_start_time (cubic.rs:201-203); the slow-start exit then sets it
    to `now` as the epoch's start (cubic.rs:118-128), and on_congestion_event ignores the loss
    of every packet sent before that instant (cubic.rs:174-180) though no recovery began
    (RFC 9002 §7.3.1's MUST).  Seed 8: pn 687's loss keeps cwnd at 8,400."""
    from ccdiff.sim import load_scenario, simulate
    ensure_built("quinn")
    result = simulate(load_scenario("outage-3s"), "quinn", 8)
    missing = [f for f in result.findings if f["invariant"] == "missing-reduction"]
    assert [(f["status"], f["event_index"], f["t_us"]) for f in missing] == [("violation", 1035, 6_444_412)]
    assert "quinn-reno" not in {f["stack"] for f in result.findings}
    reno = simulate(load_scenario("outage-3s"), "quinn-reno", 8)
    assert not [f for f in reno.findings if f["invariant"] == "missing-reduction"]


# -- recovery membership where the clock cannot tell (#30, item 8) ----------------------------
def _same_microsecond_after_a_loss(second_loss: bool):
    """pn 0..5 sent at 0; pn 1..5 acknowledged and pn 0 declared lost at 10 ms; pn 6, 7 sent
    in that same microsecond, after the loss; then pn 6 acknowledged (or, second_loss, pn 6
    lost on pn 7's ACK) at 20 ms."""
    events = [sent(0, n) for n in range(6)] + [
        dict(t=10_000, ev="ack", pns=[[1, 5]]), dict(t=10_000, ev="lost", pns=[0]), sent(10_000, 6), sent(10_000, 7)]
    if second_loss:
        events += [dict(t=20_000, ev="ack", pns=[7]), dict(t=20_000, ev="lost", pns=[6])]
    else:
        events += [dict(t=20_000, ev="ack", pns=[6])]
    return events


def test_packets_sent_in_the_microsecond_of_the_loss_are_judged_in_both_readings():
    """RFC 9002 §7.3.2's "sent after the start of recovery", read by packet order (ngtcp2,
    picoquic, a new C stack) or by send time (quiche, aioquic): for pn 6, sent in the loss's
    own microsecond but after it, both are right.  Growth on its ACK is no growth in recovery;
    its loss may or may not start a new period (one reduction either way, by beta); a
    second reduction for it is still excess."""
    profile = Profile(stack="s")
    slow_start = [snap(12000)] * 6 + [snap(18000), snap(12600, 12600, 10_000, "recovery")] + [
        snap(12600, 12600, 10_000, "recovery")] * 2
    grown = checked(_same_microsecond_after_a_loss(False), slow_start + [snap(13800, 12600, 10_000)], profile)
    assert "growth-in-recovery" not in grown                   # pn 6 ended recovery, by order
    for reduced in (12600, 8820):                              # kept (by time) or reduced by beta (by order)
        found = checked(_same_microsecond_after_a_loss(True),
                        slow_start + [snap(12600, 12600, 10_000, "recovery"), snap(reduced, reduced, 20_000, "recovery")],
                        profile)
        assert "missing-reduction" not in found and "excess-reduction" not in found, found
    found = checked(_same_microsecond_after_a_loss(True),
                    slow_start + [snap(12600, 12600, 10_000, "recovery"), snap(4000, 4000, 20_000, "recovery")],
                    profile)
    assert "excess-reduction" in found                         # deeper than beta in any reading


def test_a_period_only_one_reading_opens_leaves_a_later_first_reduction_judged_by_depth():
    """`ccdiff sim real-aioquic-cubic-blackout --stack linux@6.1 --seed 9` (the fixture): pn 25,
    sent in the microsecond of the loss at 39.1 ms but after it, is lost at 59.1 ms (a new
    period by order only), pn 27 at 63.7 ms (by time only); Linux keeps its window for both
    and reduces once, by beta, at 67.9 ms.  Judged by depth, as after a missed period: no
    excess-reduction (the first version of the two readings convicted it)."""
    from pathlib import Path
    ensure_built("linux@6.1")
    trace = load_trace(str(Path(__file__).parent / "fixtures" / "linux-same-microsecond-recovery.jsonl"))
    result = replay(trace, ["linux@6.1"])
    assert not [f for f in result.findings if f.status == "violation"], result.findings

"""Each invariant fires on the fault it names and stays quiet on the correct oracle.

Faults are injected by perturbing the oracle's snapshots before the checker
sees them: the checker is under test here, not a stack.
"""
import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from ccdiff.encoding import decode
from ccdiff.invariants import CATALOG, Checker, Truth
from ccdiff.ledger import ACKED, LOST, PERSISTENT_CONGESTION, SENT, Ledger
from ccdiff.replay import replay
from ccdiff.snapshot import CONGESTION_AVOIDANCE
from oracle import Cubic

from .flow import MDS, Flow

RTT = 50_000


def run_checker(flow: Flow, perturb=None, family="cubic", **checker_options) -> list:
    """Run the oracle over the flow, optionally perturbing snapshots; return the checker's findings.

    checker_options go to Checker (loss_applied_with_ack, bdp_bytes)."""
    trace = flow.trace()
    ledger, truth = Ledger(trace.header), Truth()
    oracle = Cubic(MDS, trace.header.initial_rtt_us)
    checker = Checker("test", MDS, family, **checker_options)
    before = None
    for index, event in enumerate(trace.events):
        ev = ledger.resolve(event)
        truth.update(ev)
        snap = oracle.step(ev)
        if perturb:
            snap = perturb(index, ev, before, snap) or snap
        checker.check(index, ev, before, snap, truth)
        before = snap
    return checker.finish()


def check(flow: Flow, perturb=None, family="cubic", provisional_loss=False) -> set:
    """Run the oracle over the flow, optionally perturbing snapshots; return invariant ids found."""
    return {f.invariant for f in run_checker(flow, perturb, family, loss_applied_with_ack=provisional_loss)}


def flow_after_one_loss() -> Flow:
    """Slow start to 30 datagrams, then one loss: a recovery period, then CA."""
    flow = Flow()
    for n in (10, 20):
        flow.round_trip(n, RTT)
    flight = flow.send(30)
    flow.wait(RTT)
    flow.lose(flight[:1])
    flow.ack(flight[1:])
    flow.wait(100)
    return flow


def lossy_flow() -> Flow:
    """Slow start, a loss (recovery), CA rounds, an app-limited round, persistent congestion."""
    flow = flow_after_one_loss()
    for _ in range(6):
        flow.round_trip(25, RTT)
    flow.round_trip(3, RTT, app_limited=True)
    # RFC 9002 §7.6.2: two lost packets more than (smoothed + 4 rttvar + 25 ms) * 3 apart
    # (about 250 ms here), nothing acknowledged between them.
    flight = flow.send(2)
    flow.wait(6 * RTT)
    flight += flow.send(2)
    flow.wait(RTT)
    flow.lose(flight, persistent=True)
    flow.wait(100)
    flow.round_trip(2, RTT)
    return flow


def test_catalog_entries_are_complete():
    required = {"future-recovery-start", "cwnd-below-minimum", "stuck-at-minimum", "missing-reduction",
                "excess-reduction", "shallow-reduction", "growth-in-recovery", "growth-while-app-limited", "idle-inflation",
                "ca-growth-bound", "ca-without-epoch", "k-mismatch", "w-max-mismatch", "ss-growth-bound", "persistent-congestion-ignored",
                "numeric-error", "trajectory-divergence"}
    assert required <= set(CATALOG)
    for inv in CATALOG.values():
        assert inv.title and inv.rfc and inv.why


def test_correct_oracle_is_clean_on_the_lossy_flow():
    assert check(lossy_flow()) == set()


def with_cwnd(snap, cwnd):
    return snap._replace(cwnd=cwnd)


def test_numeric_error():
    assert "numeric-error" in check(lossy_flow(), lambda i, ev, b, s: s._replace(w_max=math.nan) if i == 40 else None)
    assert "numeric-error" in check(lossy_flow(), lambda i, ev, b, s: with_cwnd(s, 0) if i == 5 else None)


def test_a_finite_negative_k_is_eq_2s_value_not_a_numeric_error():
    """RFC 9438 §4.2 eq. 2, K = cbrt((W_max - cwnd_epoch) / C), is negative when the stage
    starts above W_max (aioquic's signed cube root): only a non-finite or absurd K is an error."""
    assert "numeric-error" not in check(lossy_flow(), lambda i, ev, b, s: s._replace(k_us=-7.75e6) if i == 40 else None)
    assert "numeric-error" in check(lossy_flow(), lambda i, ev, b, s: s._replace(k_us=-1e30) if i == 40 else None)
    assert "numeric-error" in check(lossy_flow(), lambda i, ev, b, s: s._replace(k_us=-math.inf) if i == 40 else None)


def test_cwnd_below_minimum():
    assert "cwnd-below-minimum" in check(lossy_flow(), lambda i, ev, b, s: with_cwnd(s, 2 * MDS - 1) if i == 50 else None)


def test_future_recovery_start():
    found = check(lossy_flow(), lambda i, ev, b, s: s._replace(recovery_start_us=ev.t + 1) if i == 80 else None)
    assert "future-recovery-start" in found
    found = check(lossy_flow(), lambda i, ev, b, s: s._replace(epoch_start_us=ev.t + 1) if i == 80 else None)
    assert "future-recovery-start" in found


def test_missing_reduction():
    held = {}
    def ignore_losses(i, ev, before, snap):
        # Keep the pre-loss window through the loss and the ACK at the same instant.
        if ev.kind == LOST and before is not None:
            held.update(t=ev.t, cwnd=before.cwnd)
        if held.get("t") == ev.t:
            return with_cwnd(snap, held["cwnd"])
    assert "missing-reduction" in check(lossy_flow(), ignore_losses)


def test_a_loss_is_judged_with_the_ack_that_revealed_it():
    """A stack that applies the reduction only inside the ACK (ngtcp2) is not flagged."""
    def late_reduction(i, ev, before, snap):
        if ev.kind == LOST and before is not None:
            return with_cwnd(snap, before.cwnd)       # provisional: nothing applied yet
    assert check(lossy_flow(), late_reduction, provisional_loss=True) == set()
    assert "missing-reduction" in check(lossy_flow(), late_reduction)


def test_excess_reduction_below_beta_and_without_signal():
    held = {}
    def halve(i, ev, before, snap):
        if ev.kind == LOST and before is not None:
            held.update(t=ev.t, cwnd=before.cwnd // 2)
        if held.get("t") == ev.t:
            return with_cwnd(snap, held["cwnd"])
    assert "excess-reduction" in check(lossy_flow(), halve)
    def shrink_on_ack(i, ev, before, snap):
        if ev.kind == ACKED and i == 15:
            return with_cwnd(snap, before.cwnd - MDS)
    assert "excess-reduction" in check(lossy_flow(), shrink_on_ack)


def _reduce_to(factor, *, ssthresh=None):
    """A perturbation: at the loss (and its ACK), cwnd becomes factor x the window before it;
    ssthresh: another factor for ssthresh (default: the same)."""
    held = {}
    def perturb(i, ev, before, snap):
        if ev.kind == LOST and before is not None and "t" not in held:
            held.update(t=ev.t, cwnd=int(before.cwnd * factor),
                        ssthresh=int(before.cwnd * (ssthresh if ssthresh is not None else factor)))
        if held.get("t") == ev.t:
            return snap._replace(cwnd=held["cwnd"], ssthresh=held["ssthresh"])
    return perturb


def test_shallow_reduction_above_beta():
    """RFC 9438 §4.6 β_cubic = 0.7: a reduction to 0.9 (window and ssthresh) is shallow; the
    oracle's 0.7 and a PRR-style step (cwnd still high, ssthresh at β) are not."""
    assert check(flow_after_one_loss()) == set()
    assert "shallow-reduction" in check(flow_after_one_loss(), _reduce_to(0.9))
    assert "shallow-reduction" not in check(flow_after_one_loss(), _reduce_to(0.95, ssthresh=0.7))
    # NewReno's β is 0.5: the 0.7 that passes for CUBIC is shallow for Reno
    assert "shallow-reduction" in check(flow_after_one_loss(), _reduce_to(0.7), family="reno")


def _scale_new_k(factor):
    """A perturbation: the stack's K times factor, from the snapshot that computes it on."""
    def perturb(i, ev, before, snap):
        if snap.k_us is not None:
            return snap._replace(k_us=snap.k_us * factor)
    return perturb


def test_k_mismatch_checks_each_new_k_against_eq_2():
    """RFC 9438 Eq. 2, K = cbrt((W_max - cwnd_epoch) / C), C = 0.4: a K 3.5% off (ngtcp2's
    `* 10 / 4` planted as `* 9 / 4`) is flagged; fixed-point rounding (0.5%) and a K of 0 for a
    stage that starts at or above W_max are not; Reno has no K."""
    flow = lossy_flow()    # K is judged where it is used: a congestion-avoidance ACK
    assert "k-mismatch" in check(flow, _scale_new_k(1.035))
    assert "k-mismatch" in check(flow, _scale_new_k(0.965))
    assert "k-mismatch" not in check(flow, _scale_new_k(1.005))
    assert "k-mismatch" not in check(flow, _scale_new_k(1.035), family="reno")

    def start_above_w_max(i, ev, before, snap):
        if snap.k_us is not None:
            return snap._replace(w_max=min(snap.w_max, snap.cwnd - MDS), k_us=0.0)
    assert "k-mismatch" not in check(flow, start_above_w_max)


def test_k_mismatch_judges_k_where_it_is_used_not_where_avoidance_is_entered():
    """A stack may enter avoidance on an ACK (recovery's end, slow start crossing ssthresh) and
    compute its K at the next one (quinn after persistent congestion): a stale K on the
    entering ACK is no finding; still stale on the next ACK, which used it, it is."""
    flow = flow_after_one_loss()
    for _ in range(3):
        flow.round_trip(25, RTT)

    def stale_k_on_avoidance_acks(count):
        seen = []
        def perturb(i, ev, before, snap):
            if snap.k_us is None:
                return None
            if snap.phase == CONGESTION_AVOIDANCE and ev.kind == ACKED:
                seen.append(i)
            if len(seen) <= count:
                return snap._replace(k_us=snap.k_us * 1.5)
        return perturb
    assert "k-mismatch" not in check(flow, stale_k_on_avoidance_acks(1))
    assert "k-mismatch" in check(flow, stale_k_on_avoidance_acks(2))


def test_k_mismatch_is_waivable_and_quotes_eq_2():
    inv = CATALOG["k-mismatch"]
    assert inv.waivable and inv.keyword == "descriptive" and "calculated using the following equation" in inv.quote


def _set_w_max_at_loss(factor):
    """A perturbation: at the loss (and its ACK), W_max = factor x the window before it."""
    held = {}
    def perturb(i, ev, before, snap):
        if ev.kind == LOST and before is not None and "t" not in held:
            held.update(t=ev.t, w_max=before.cwnd * factor)
        if held.get("t") == ev.t:
            return snap._replace(w_max=held["w_max"])
    return perturb


def test_w_max_mismatch_takes_the_window_or_its_fast_convergence_value():
    """RFC 9438 §4.7: W_max is the window before the reduction, or 0.85 of it when that window is
    below the previous W_max.  The first event has no previous W_max: 0.85 there (quiche's
    `<` planted as `<=` on an equal one) and a W_max of 0.9 x cwnd (ngtcp2's 17/20 planted as
    18/20) are flagged; a W_max a few bytes off (whole segments) is not; Reno has none."""
    flow = flow_after_one_loss()
    assert "w-max-mismatch" not in check(flow, _set_w_max_at_loss(1.0))
    assert "w-max-mismatch" not in check(flow, _set_w_max_at_loss(1.02))
    assert "w-max-mismatch" in check(flow, _set_w_max_at_loss(0.85))
    assert "w-max-mismatch" in check(flow, _set_w_max_at_loss(0.9))
    assert "w-max-mismatch" not in check(flow, _set_w_max_at_loss(0.9), family="reno")


def test_w_max_mismatch_allows_fast_convergence_below_the_previous_w_max():
    """With a previous W_max above the window (here 10 x cwnd before the loss), 0.85 of the
    window passes and 0.8 of it does not."""
    def with_previous_w_max(factor):
        at_loss = _set_w_max_at_loss(factor)
        def perturb(i, ev, before, snap):
            if snap.w_max is None:
                return snap._replace(w_max=10.0 * snap.cwnd)
            return at_loss(i, ev, before, snap)
        return perturb
    flow = flow_after_one_loss()
    assert "w-max-mismatch" not in check(flow, with_previous_w_max(0.85))
    assert "w-max-mismatch" in check(flow, with_previous_w_max(0.80))


def test_growth_in_recovery():
    flow = Flow()
    flight = flow.send(8)
    flow.wait(RTT)
    flow.lose(flight[:1])
    flow.ack(flight[1:])          # all sent before the recovery start
    def grow(i, ev, before, snap):
        if ev.kind == ACKED:
            return with_cwnd(snap, before.cwnd + MDS)
    assert "growth-in-recovery" in check(flow, grow)
    assert check(flow) == set()


def test_growth_while_app_limited():
    flow = Flow()
    flow.round_trip(3, RTT, app_limited=True)
    def grow(i, ev, before, snap):
        if ev.kind == ACKED:
            return with_cwnd(snap, before.cwnd + 100)
    assert "growth-while-app-limited" in check(flow, grow)
    assert check(flow) == set()


def test_a_mark_does_not_make_a_full_or_paced_round_trip_app_limited():
    """RFC 9438 §5.8 "currently sending less than what is allowed by the congestion window":
    the trace's mark is the application's word, not the window's.  AFL stored both shapes on
    pristine quiche 0.26.0 as new strict findings (quiche grows: its own flag was cleared)."""
    def grow(i, ev, before, snap):
        if ev.kind == ACKED:
            return with_cwnd(snap, before.cwnd + 100)
    full = Flow()       # every send marked, the last one fills the oracle's 12,000-byte window
    flight = full.send(10, app_limited=True)
    full.wait(RTT).ack(flight)
    assert "growth-while-app-limited" not in check(full, grow)
    room = Flow()       # the same nine marked sends leave room: the flow was app-limited
    flight = room.send(9, app_limited=True)
    room.wait(RTT).ack(flight)
    assert "growth-while-app-limited" in check(room, grow)
    paced = Flow()      # a marked send, then one the application did not limit (paced), before the ACK
    flight = paced.send(1, app_limited=True) + paced.send(1)
    paced.wait(RTT).ack(flight[:1])
    assert "growth-while-app-limited" not in check(paced, grow)


def test_a_stack_that_reads_app_limited_now_is_not_short_of_growth():
    """RFC 9002 B.5 asks IsAppOrFlowControlLimited() as an ACK arrives: a stack that gates growth
    on its state now (quinn's connection flag: its last poll_transmit ran out of data) keeps its
    window on an ACK of unmarked packets when its last send was app-limited.  AFL++ stored that
    as a new strict ss-growth-shortfall on pristine quinn."""
    def keep(i, ev, before, snap):
        if ev.kind == ACKED:
            return with_cwnd(snap, before.cwnd)
    def flow(last_marked: bool) -> Flow:
        f = Flow()
        flight = f.send(9) + f.send(1, app_limited=last_marked)
        return f.wait(RTT).ack(flight[:7])
    assert "ss-growth-shortfall" not in check(flow(True), keep)
    assert "ss-growth-shortfall" in check(flow(False), keep)


def test_ss_and_ca_growth_bounds():
    def double(i, ev, before, snap):
        if ev.kind == ACKED and before is not None and snap.cwnd > before.cwnd:
            return with_cwnd(snap, before.cwnd + 3 * (snap.cwnd - before.cwnd) + 2 * MDS)
    found = check(lossy_flow(), double)
    assert {"ss-growth-bound", "ca-growth-bound"} <= found


def test_persistent_congestion_ignored():
    def ignore(i, ev, before, snap):
        if ev.kind == PERSISTENT_CONGESTION:
            return with_cwnd(snap, before.cwnd)
    assert "persistent-congestion-ignored" in check(lossy_flow(), ignore)


def flow_recovering_from_persistent_congestion(packets_per_round: int = 3, rounds: int = 30) -> Flow:
    """A persistent congestion a connection can declare (RFC 9002 §7.6.2: a prior RTT sample,
    two lost packets further apart than the duration, nothing between them acknowledged),
    then `rounds` round trips (30: 1.5 s at 50 ms, seconds pinned if the window does not
    grow); flow.collapse_t is when the window collapsed."""
    flow = Flow()
    flow.round_trip(1, RTT)
    flow.wait(100)
    flight = flow.send(2)
    flow.wait(12 * RTT)     # > (50000 + 4 * 25000 + 25000) * 3 after one sample (RFC 9002 §7.6.1)
    flight += flow.send(2)
    flow.wait(RTT)
    flow.lose(flight, persistent=True)
    flow.collapse_t = flow.now
    flow.wait(100)
    for _ in range(rounds):
        flow.round_trip(packets_per_round, RTT)
    return flow


def test_stuck_at_minimum():
    flow = flow_recovering_from_persistent_congestion(packets_per_round=2)
    pin = lambda i, ev, b, s: with_cwnd(s, 2 * MDS) if ev.t > flow.collapse_t else None  # noqa: E731
    assert "stuck-at-minimum" in check(flow, pin)
    assert check(flow) == set()


def test_stuck_is_judged_in_round_trips_not_a_packet_count():
    """Issue #30: Linux's integer estimator holds the floor for up to 6 round trips (16-18
    packets) and leaves it; the check allowed 8 packets and convicted it.  A window pinned for
    12 round trips (36 packets) and then growing is not stuck; one pinned for the 1.5 s of 30
    round trips is, at 2 or 3 datagrams alike (quiche 0.26.0: hundreds)."""
    def pinned_for(flow, rounds, cwnd):
        until = flow.collapse_t + rounds * RTT
        return lambda i, ev, b, s: s._replace(cwnd=cwnd) if flow.collapse_t < ev.t <= until else s
    slow = flow_recovering_from_persistent_congestion(rounds=30)
    assert "stuck-at-minimum" not in check(slow, pinned_for(slow, 12, 2 * MDS))
    for cwnd in (2 * MDS, 3 * MDS):
        found = {f.invariant: f for f in run_checker(slow, pinned_for(slow, 30, cwnd))}
        assert "stuck-at-minimum" in found
        assert " for 20 round trips," in found["stuck-at-minimum"].detail or \
            " for 21 round trips," in found["stuck-at-minimum"].detail


def test_idle_inflation_only_for_time_based_family():
    result = replay(Flow().trace(), [])  # smoke: empty spec list is fine
    assert result.findings == []
    from ccdiff.trace import load_trace
    from pathlib import Path
    trace = load_trace(str(Path(__file__).resolve().parent.parent / "examples" / "idle-restart.jsonl"))
    result = replay(trace, ["oracle:idle=none", "oracle-reno"])
    assert {(f.stack, f.invariant) for f in result.findings} == {("oracle:idle=none", "idle-inflation")}


# idle-inflation compares growth rates around an idle period; on pathological open-loop
# streams (stalls of many seconds with packets still in flight) its reference round trip
# is not meaningful, so the property below covers every other invariant.
HEURISTIC = {"idle-inflation"}


@settings(max_examples=150, deadline=None)
@given(st.binary(min_size=2, max_size=1200))
def test_correct_oracles_violate_nothing_on_any_fuzz_stream(data):
    result = replay(decode(data), ["oracle", "oracle-reno"])
    assert {f.invariant for f in result.findings} - HEURISTIC == set()


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=2, max_size=600))
def test_resolved_events_keep_bytes_in_flight_consistent(data):
    trace = decode(data)
    ledger = Ledger(trace.header)
    for event in trace.events:
        ev = ledger.resolve(event)
        assert ev.bytes_in_flight >= 0 and ev.bytes_in_flight_after >= 0
        delta = sum(p[2] for p in ev.packets)
        if ev.kind == SENT:
            assert ev.bytes_in_flight_after == ev.bytes_in_flight + delta
        elif ev.kind in (ACKED, LOST):
            assert ev.bytes_in_flight_after == ev.bytes_in_flight - delta


def test_docs_invariants_md_is_generated_from_the_catalog():
    from pathlib import Path
    from ccdiff.catalog_doc import render
    doc = Path(__file__).resolve().parent.parent / "docs" / "invariants.md"
    assert doc.read_text() == render(), "run: python3 -m ccdiff.catalog_doc > docs/invariants.md"


def test_an_undo_is_not_growth():
    """RFC 9438 §4.9: restoring the pre-reduction window (the recovery start moves back) is
    not growth; the same jump with the recovery start kept is."""
    flow = flow_after_one_loss()
    flow.round_trip(4, RTT)
    seen = {}

    def jump_back(keep_recovery_start):
        def perturb(i, ev, before, snap):
            if ev.kind == LOST:
                seen["pre"], seen["loss_t"] = before, ev.t
            pre = seen.get("pre")
            if pre is not None and ev.kind == ACKED and ev.packets[0][1] > seen["loss_t"]:
                return snap._replace(cwnd=pre.cwnd, recovery_start_us=(
                    snap.recovery_start_us if keep_recovery_start else pre.recovery_start_us))
        return perturb
    assert check(flow, jump_back(keep_recovery_start=False)) == set()
    assert "ca-growth-bound" in check(flow, jump_back(keep_recovery_start=True))


def test_truth_without_ecn_ignores_ce_marks():
    """A stack that ignores ECN (profile `ecn = false`) is judged on a timeline where an
    ECN-CE mark starts no recovery period; the default timeline treats it as RFC 9002 §7.1 does."""
    flow = Flow()
    flight = flow.send(2)
    flow.wait(RTT)
    flow.ack(flight[:1], ecn_ce=True)
    ledger = Ledger(flow.trace().header)
    with_ecn, without = Truth(), Truth(ecn=False)
    for event in flow.trace().events:
        ev = ledger.resolve(event)
        with_ecn.update(ev)
        without.update(ev)
    assert with_ecn.signal and with_ecn.recovery_start == ev.t
    assert not without.signal and without.recovery_start is None


def test_phase_comes_from_the_stack_not_cwnd_below_ssthresh():
    """picoquic's rounding leaves cwnd 1 byte below ssthresh (11,759 vs 11,760) in congestion
    avoidance: the stack's phase field says congestion avoidance, so a burst of growth on one
    ACK breaks the congestion-avoidance bound (a MUST), not the waivable slow-start one."""
    flow = flow_after_one_loss()
    for _ in range(4):
        flow.round_trip(25, RTT)
    last_ack = len(flow.events) - 1

    def rounding(i, ev, before, snap):
        if snap.ssthresh is None or snap.phase != "congestion_avoidance":
            return None
        cwnd = before.cwnd + 20 * ev.acked_bytes if i == last_ack else snap.cwnd
        return snap._replace(cwnd=cwnd, ssthresh=cwnd + 1)
    found = check(flow, rounding)
    assert "ca-growth-bound" in found
    assert "ss-growth-bound" not in found


def test_reported_slow_start_above_ssthresh_is_judged_as_avoidance():
    """A stack that still says slow start with cwnd at or above ssthresh (quiche after a
    HyStart++ exit) is held to the congestion-avoidance bound: RFC 9002 §7.3.1 puts slow
    start below the threshold."""
    flow = flow_after_one_loss()
    for _ in range(3):
        flow.round_trip(25, RTT)
    flight = flow.send(4)
    flow.wait(RTT)
    flow.ack(flight)
    last = len(flow.events) - 1

    def says_slow_start(i, ev, before, snap):
        if snap.ssthresh is None:
            return None
        cwnd = before.cwnd + ev.acked_bytes if i == last else snap.cwnd
        return snap._replace(phase="slow_start", cwnd=cwnd)
    found = check(flow, says_slow_start)
    assert "ca-growth-bound" in found and "ss-growth-bound" not in found




def check_with_bdp(flow: Flow, perturb, bdp_bytes) -> set:
    return {f.invariant for f in run_checker(flow, perturb, bdp_bytes=bdp_bytes)}


def test_stuck_near_minimum_is_flagged():
    """A window frozen at 2.7 datagrams (above the 2-datagram floor of RFC 9002 §7.2) while
    packets sent after the last signal keep being acknowledged is the same failure."""
    frozen = int(2.7 * MDS)
    flow = flow_recovering_from_persistent_congestion()
    pin = lambda i, ev, b, s: s._replace(cwnd=frozen) if ev.t > flow.collapse_t else s  # noqa: E731
    assert "stuck-at-minimum" in check_with_bdp(flow, pin, None)
    assert "stuck-at-minimum" in check_with_bdp(flow, pin, 100 * MDS)
    assert "stuck-at-minimum" not in check_with_bdp(flow, lambda i, ev, b, s: s, None)


def test_stuck_needs_a_full_window():
    """Two packets per round trip in a window of three never fill it (RFC 9002 §7.8): the window
    is underutilized, not stuck (examples/ecn-small-window.jsonl's Linux finding before the
    rule).  Three packets per round trip fill it, and the same frozen window is stuck; so do
    two packets in a window of 2.7 datagrams, which has no room for a third."""
    def pinned(flow, cwnd):
        return lambda i, ev, b, s: s._replace(cwnd=cwnd) if ev.t > flow.collapse_t else s
    two, three = (flow_recovering_from_persistent_congestion(n) for n in (2, 3))
    assert "stuck-at-minimum" not in check(two, pinned(two, 3 * MDS))
    assert "stuck-at-minimum" in check(three, pinned(three, 3 * MDS))
    assert "stuck-at-minimum" in check(two, pinned(two, int(2.7 * MDS)))


def test_small_window_on_a_tiny_bdp_path_is_not_stuck():
    """Where the path's bandwidth-delay product is itself about 2.5 datagrams, a window of 2.7
    datagrams is the path's operating point, not a frozen controller."""
    frozen = int(2.7 * MDS)
    flow = flow_recovering_from_persistent_congestion()
    pin = lambda i, ev, b, s: s._replace(cwnd=frozen) if ev.t > flow.collapse_t else s  # noqa: E731
    assert "stuck-at-minimum" not in check_with_bdp(flow, pin, int(2.5 * MDS))
    at_floor = lambda i, ev, b, s: s._replace(cwnd=2 * MDS) if ev.t > flow.collapse_t else s  # noqa: E731
    assert "stuck-at-minimum" in check_with_bdp(flow, at_floor, int(2.5 * MDS))


def checker_findings(flow: Flow, perturb=None) -> dict:
    """Like check(), but the findings themselves: invariant id -> Finding."""
    return {f.invariant: f for f in run_checker(flow, perturb)}


def first_avoidance_growth(flow: Flow) -> int:
    """Index of the first ACK on which the oracle, already in congestion avoidance by its own
    phase and with an epoch, grows the window."""
    trace = flow.trace()
    ledger, oracle, before = Ledger(trace.header), Cubic(MDS, trace.header.initial_rtt_us), None
    for index, event in enumerate(trace.events):
        ev = ledger.resolve(event)
        snap = oracle.step(ev)
        if (ev.kind == ACKED and before is not None and before.phase == "congestion_avoidance"
                and snap.cwnd > before.cwnd and snap.epoch_start_us is not None):
            return index
        before = snap
    raise AssertionError("no growth in congestion avoidance")


def avoidance_flow() -> Flow:
    flow = flow_after_one_loss()
    for _ in range(4):
        flow.round_trip(25, RTT)
    return flow


def test_ca_without_epoch_fires_once_at_the_ack_that_grows_with_no_epoch():
    """RFC 9438 §4.2/§4.8: growth in congestion avoidance follows W_cubic(t), t = t_current -
    t_epoch.  A stack that reports congestion avoidance, has reported epochs before, and grows
    on an ACK while its epoch is unset (ngtcp2 after cubic_vars_reset) is flagged there, once."""
    flow = avoidance_flow()
    target = first_avoidance_growth(flow)
    drop = lambda i, ev, b, s: s._replace(epoch_start_us=None) if i == target else None  # noqa: E731
    found = checker_findings(flow, drop)
    assert set(found) == {"ca-without-epoch"}
    assert (found["ca-without-epoch"].event_index, found["ca-without-epoch"].count) == (target, 1)


def test_ca_without_epoch_is_quiet_when_the_epoch_exists_or_is_never_reported():
    """The correct oracle (its epoch starts on the first avoidance ACK) is clean; a CUBIC
    adapter that reports no epoch field at all is not judged; growth in slow start with no
    epoch (every stack before its first congestion event) is no finding."""
    flow = avoidance_flow()
    assert "ca-without-epoch" not in checker_findings(flow)
    never = lambda i, ev, b, s: s._replace(epoch_start_us=None)  # noqa: E731
    assert "ca-without-epoch" not in checker_findings(flow, never)
    assert "ca-without-epoch" not in checker_findings(lossy_flow())


def test_ca_without_epoch_is_descriptive_and_waivable():
    inv = CATALOG["ca-without-epoch"]
    assert (inv.keyword, inv.waivable, inv.quote_from) == ("descriptive", True, "RFC 9438 §4.8")


def test_ngtcp2_grows_in_avoidance_with_no_epoch_after_persistent_congestion():
    """ngtcp2 1.25.0, closed loop (persistent-congestion, seed 1, deterministic): persistent
    congestion calls cubic_vars_reset (epoch_start = UINT64_MAX, ngtcp2_cc.c ~198) but keeps
    ssthresh; slow start reaches it and congestion avoidance runs with no epoch, at the 1.5 x
    cwnd target cap (t = ts - UINT64_MAX, cc.c ~277) until the next loss sets one."""
    import pytest
    from ccdiff.sim import load_scenario, simulate
    from ccdiff.stacks import load_recipes, resolve
    target = resolve("ngtcp2@1.25.0", load_recipes())
    if not target.recipe.library(target.version).exists():
        pytest.skip("ngtcp2@1.25.0 is not built (set CCDIFF_BUILD_DIR)")
    result = simulate(load_scenario("persistent-congestion"), "ngtcp2@1.25.0", 1)
    found = {f["invariant"]: f for f in result.findings}
    assert (found["ca-without-epoch"]["event_index"], found["ca-without-epoch"]["count"]) == (3194, 89)
    replayed = replay(decode_trace(result.trace_text()), ["ngtcp2@1.25.0", "oracle"])
    ours = {f.invariant for f in replayed.findings if f.stack == "ngtcp2@1.25.0"}
    assert "ca-without-epoch" in ours
    assert not [f for f in replayed.findings if f.stack == "oracle"]


def decode_trace(text: str):
    from ccdiff.trace import parse_trace_text
    return parse_trace_text(text, "sim")


def test_growth_without_ack_flags_a_raise_on_any_event_but_an_ack():
    """Issue #30: a send, a loss or an application event may keep or lower the window, never
    raise it (RFC 9002 §7.8, Appendix B.5); ACK growth is the other invariants' business."""
    def raise_on(kinds):
        def perturb(index, ev, before, snap):
            if before is not None and ev.kind in kinds:
                return snap._replace(cwnd=before.cwnd + MDS)
        return perturb

    def lower_on_sends(index, ev, before, snap):
        if before is not None and ev.kind == SENT:
            return snap._replace(cwnd=max(2 * MDS, before.cwnd - 1))
    flow = flow_after_one_loss()
    assert "growth-without-ack" not in check(flow)
    assert "growth-without-ack" in check(flow, raise_on({SENT}))
    assert "growth-without-ack" in check(flow, raise_on({LOST}))
    assert "growth-without-ack" not in check(flow, lower_on_sends)
    found = {f.invariant: f for f in run_checker(flow, raise_on({SENT}))}
    assert found["growth-without-ack"].detail.startswith("cwnd ") and " on a send event, " in \
        found["growth-without-ack"].detail
    # A provisional loss snapshot (ngtcp2) is not the stack's state: its ACK is judged instead.
    assert "growth-without-ack" not in check(flow, raise_on({LOST}), provisional_loss=True)


def _slow_start_with_small_packets(size: int = 1128, acks: int = 60) -> str:
    """Ten packets, then one ACK per packet, each releasing two more, in slow start: the
    packet size of quiche's own connections (1,128 bytes), below the 1,200-byte datagram."""
    lines = [{"ccdiff_trace": 1, "max_datagram_size": 1200, "name": f"slow start, {size}-byte packets"}]
    t = pn = 0
    for _ in range(10):
        lines.append({"t": t, "ev": "sent", "pn": pn, "bytes": size})
        pn += 1
    t = 40_000
    for k in range(acks):
        lines.append({"t": t, "ev": "ack", "pns": [k]})
        for _ in range(2):
            lines.append({"t": t, "ev": "sent", "pn": pn, "bytes": size})
            pn += 1
        t += 1_000 if k % 10 != 9 else 31_000
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def test_slow_start_growth_may_use_what_a_byte_counter_carried(tmp_path):
    """quiche's own connection (2026-11-29) was convicted of ss-growth-bound on every run:
    it adds a datagram when its byte counter holds one (cubic.rs bytes_acked_sl), so with
    1,128-byte packets every second ACK grows 1,200.  Over the run it never grows by more than
    it acknowledged: the bound carries what earlier ACKs left (less than a datagram).  A
    window growing a datagram per packet whatever its size (quiche's Reno) outgrows the bytes
    acknowledged from its first ACK on, with nothing carried, and is still flagged."""
    from ccdiff.trace import load_trace
    path = tmp_path / "small.jsonl"
    path.write_text(_slow_start_with_small_packets())
    result = replay(load_trace(str(path)), ["quiche@0.30.0", "quiche-reno@0.30.0", "quinn"])
    found = {(f.stack, f.invariant) for f in result.violations}
    assert found == {("quiche-reno@0.30.0", "ss-growth-bound")}, found
    cwnd = [s.cwnd for s in result.runs["quiche@0.30.0"].snapshots]
    assert cwnd[-1] - cwnd[0] <= 60 * 1128 and any(b - a == 1200 for a, b in zip(cwnd, cwnd[1:]))
    (reno,) = [f for f in result.violations if f.stack == "quiche-reno@0.30.0"]
    assert reno.event_index == 10     # the first ACK: nothing carried yet, 1,200 grown for 1,128


def test_a_reduction_on_the_ce_count_of_the_loss_s_microsecond_is_the_period_s_one():
    """AFL++ stored a new strict missing-reduction on pristine picoquic: its loss-rate filter
    left a loss alone, and the ACK of the same microsecond, carrying a CE count, reduced the
    window (16,544 -> 12,666).  One reduction in the period's first microsecond, on either
    signal, is what RFC 9002 §7.3.2 asks; without the CE count the loss snapshot is final."""
    from pathlib import Path
    from ccdiff.trace import load_trace
    path = Path(__file__).resolve().parent.parent / "fuzz" / "reproducers" / "picoquic-filtered-loss-then-ce.jsonl"
    trace = load_trace(str(path))
    assert trace.reachability == "strict"
    result = replay(trace, ["picoquic"])
    assert "missing-reduction" not in {f.invariant for f in result.findings}
    cwnd = [s.cwnd for s in result.runs["picoquic"].snapshots]
    assert cwnd[-3] == cwnd[-2] > cwnd[-1]              # the loss kept it, the CE-marked ACK cut it
    no_ce = [e._replace(ecn_ce=False) if i == len(trace.events) - 1 else e for i, e in enumerate(trace.events)]
    kept = replay(type(trace)(trace.header, no_ce, trace.source), ["picoquic"])
    assert "missing-reduction" in {f.invariant for f in kept.findings}

"""The lower and upper bounds of growth: ca-off-curve (congestion avoidance against the stack's
own W_cubic curve) and ss-growth-shortfall (slow start short of the bytes acknowledged).

The checker is under test: the oracle, with its W_cubic(t) replaced by a slipped one or its
slow start slowed (the kinds of change cargo-mutants and the C operators make in a stack's
controller), stands in for a stack whose snapshot still reports the RFC's K and W_max.
"""
import importlib.util
import math
import re

import pytest

import oracle.cubic
from ccdiff.build import ensure_built
from ccdiff.invariants import CATALOG, Checker, Truth
from ccdiff.ledger import ACKED, Ledger
from ccdiff.mechanisms import Occurrence, registry
from ccdiff.paths import project_root
from ccdiff.replay import replay
from ccdiff.snapshot import CONGESTION_AVOIDANCE, Snapshot
from ccdiff.trace import load_trace
from oracle import Cubic

EXAMPLES = project_root() / "examples"
CONVEX = EXAMPLES / "convex-probing.jsonl"


def _run(trace, controller, perturb=None, **checker_options) -> dict:
    """invariant -> Finding for `controller` (anything with step(ev) -> Snapshot) over a trace,
    its snapshots optionally perturbed (perturb(ev, snap) -> Snapshot); checker_options go to
    Checker (rate_tick_us)."""
    ledger, truth = Ledger(trace.header), Truth()
    checker = Checker("test", trace.header.max_datagram_size, **checker_options)
    before = None
    for index, event in enumerate(trace.events):
        ev = ledger.resolve(event)
        truth.update(ev)
        snap = controller.step(ev)
        if perturb:
            snap = perturb(ev, snap)
        checker.check(index, ev, before, snap, truth)
        before = snap
    return {f.invariant: f for f in checker.finish()}


def findings(path, w_cubic=None, perturb=None, monkeypatch=None) -> dict:
    """The oracle over one trace file, its W_cubic(t) optionally replaced."""
    if w_cubic is not None:
        monkeypatch.setattr(oracle.cubic, "w_cubic_segments", w_cubic)
    trace = load_trace(str(path))
    return _run(trace, Cubic(trace.header.max_datagram_size, trace.header.initial_rtt_us), perturb)


def slipped(c=0.4, k_sign=-1, zero=False):
    """W_cubic(t) with another C, t + K for t - K past K (ngtcp2's 287:25), or 0 (quiche's and
    quinn's `w_cubic` -> 0.0)."""
    def w_cubic(t, k, w_max):
        if zero:
            return 0.0
        offset = t + k if (k_sign > 0 and t > k) else t - k
        return c * offset ** 3 + w_max
    return w_cubic


@pytest.mark.parametrize("name", ["convex-probing", "long-recovery", "app-limited-then-bulk", "idle-restart"])
@pytest.mark.parametrize("slip, direction", [
    (slipped(c=0.2), "above"),       # C halved (ngtcp2's >> 10 -> >> 11): the concave side rises sooner
    (slipped(zero=True), "below"),   # no cubic region at all: W_est alone drives growth
])
def test_a_slipped_curve_is_flagged_on_the_examples_where_the_stack_is_on_it(monkeypatch, name, slip, direction):
    found = findings(EXAMPLES / f"{name}.jsonl", slip, monkeypatch=monkeypatch)
    if direction == "below" and name == "idle-restart":
        # idle-restart's avoidance is W_est's (the Reno-friendly region, RFC 9438 §4.3): without
        # W_cubic the window grows exactly as before, and nothing is wrong to see.
        assert set(found) == set()
        return
    assert set(found) == {"ca-off-curve"}
    assert found["ca-off-curve"].detail.startswith(direction)


def test_the_convex_region_is_checked_too(monkeypatch):
    """t + K instead of t - K past the plateau: W_cubic(t + RTT) jumps to the 1.5 x cwnd cap
    once t + RTT passes K.  Only convex-probing stays in avoidance that long (epoch 1.0 s, K
    3.56 s, RTT 0.2 s)."""
    found = findings(CONVEX, slipped(k_sign=1), monkeypatch=monkeypatch)
    assert set(found) == {"ca-off-curve"} and found["ca-off-curve"].detail.startswith("above")
    assert found["ca-off-curve"].t_us > 1.0e6 + 3.55e6 - 0.2e6


def test_the_rfc_curve_is_quiet_with_whole_segment_growth():
    """The oracle's own window passes; so does the same window rounded to whole datagrams (Linux,
    quiche and quinn grow a datagram at a time) and the oracle grown per ACK frame, when the
    checker is told so (ngtcp2's profile)."""
    def whole_segments(ev, snap):
        return snap._replace(cwnd=math.ceil(snap.cwnd / 1200) * 1200)
    for path in sorted(EXAMPLES.glob("*.jsonl")):
        assert "ca-off-curve" not in findings(path)
        assert "ca-off-curve" not in findings(path, perturb=whole_segments)


def _make_examples():
    """examples/make_examples.py as a module: its Flow builds ACK-clocked traces."""
    spec = importlib.util.spec_from_file_location("make_examples", EXAMPLES / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stretched_acks_trace():
    """convex-probing's flow with an ACK frame per 8 packets."""
    module = _make_examples()
    flow = module.Flow(100_000, ack_every=8)
    losses = module.burst(100, 6, 2)
    flow.drop = lambda pn: pn in losses
    flow.bulk(6_500_000)
    return flow.trace("ack-every-8", "")


def test_one_segments_step_per_ack_frame_is_the_least_growth(monkeypatch):
    """RFC 9438 §4.4 grows cwnd by (target - cwnd) / cwnd "for each received new ACK": ngtcp2 and
    s2n-quic take one segment's step per ACK frame, an eighth of per-segment growth when a frame
    acknowledges 8 packets.  With W_est held at the reduced window (α = 0) the window is on W_cubic
    alone: that pace passes, no cubic growth at all does not."""
    monkeypatch.setattr(oracle.cubic, "ALPHA_AIMD", 0.0)
    trace = _stretched_acks_trace()
    mds, rtt = trace.header.max_datagram_size, trace.header.initial_rtt_us
    assert "ca-off-curve" not in _run(trace, Cubic(mds, rtt, growth="per-ack"))
    monkeypatch.setattr(oracle.cubic, "w_cubic_segments", slipped(zero=True))
    found = _run(trace, Cubic(mds, rtt, growth="per-ack"))
    assert set(found) == {"ca-off-curve"} and found["ca-off-curve"].detail.startswith("below")


def test_the_oracle_and_every_variant_pass_on_every_example():
    """Through replay (the profile's per-ACK-frame flag from the spec's own options)."""
    specs = ["oracle", "oracle:growth=per-ack", "oracle:epoch=congestion-event,growth=per-ack,recovery=largest-acked,"
             "reno_friendly=set", "oracle:ecn=off", "oracle:app_limited=off,ecn=off,reno_friendly=set"]
    for path in sorted(EXAMPLES.glob("*.jsonl")):
        result = replay(load_trace(str(path)), specs)
        assert not [f for f in result.findings if f.invariant == "ca-off-curve"], path.name


def test_ca_off_curve_rests_on_the_rfc_must_and_is_waivable_only_by_mechanism():
    inv = CATALOG["ca-off-curve"]
    assert inv.keyword == "MUST" and inv.waivable
    assert "MUST be incremented" in inv.quote and inv.quote_from == "RFC 9438 §4.4"


def _curve_occurrence(cwnd, w_max=12_000.0, epoch=0, t=1_000_000, cause="above"):
    snap = Snapshot(cwnd, 8_400, cwnd, CONGESTION_AVOIDANCE, epoch, epoch, w_max, 0.0)
    return Occurrence("ca-off-curve", cause, 0, t, snap, snap, [])


class _Ack:
    kind = ACKED

    def __init__(self, smoothed, min_rtt):
        self.rtt = (smoothed, smoothed, smoothed // 2, min_rtt)


def test_w_est_closed_form_explains_rfc_8312s_estimate_only():
    """quinn's W_est(t) = W_max x 0.7 + 0.529 x t / RTT datagrams: W_max 12,000 bytes, t = 1 s,
    RTT 100 ms -> 8,400 + 6,353 = 14,753 bytes.  A window up to a datagram above it is quinn's
    rule; two datagrams above it (another alpha), or a drop below the curve, are not."""
    quinn = registry()["w-est-closed-form"](1200)
    quinn.observe(0, _Ack(100_000, 50_000))
    w_est = 12_000 * 0.7 + 3 * 0.3 / 1.7 * 10 * 1200
    assert abs(w_est - 14_753) < 1
    assert quinn.explains(_curve_occurrence(int(w_est) + 1_200))
    assert not quinn.explains(_curve_occurrence(int(w_est) + 2_400))
    assert not quinn.explains(_curve_occurrence(int(w_est), cause="below"))
    # s2n-quic divides by min_rtt (50 ms here): twice the growth term.
    s2n = registry()["s2n-w-est-closed-form"](1200)
    s2n.observe(0, _Ack(100_000, 50_000))
    assert s2n.explains(_curve_occurrence(int(12_000 * 0.7 + 3 * 0.3 / 1.7 * 20 * 1200)))
    assert not quinn.explains(_curve_occurrence(int(12_000 * 0.7 + 3 * 0.3 / 1.7 * 20 * 1200)))


def test_quinns_jump_to_its_closed_form_w_est_after_app_limited_time_is_an_explained_deviation():
    """app-limited-then-bulk: quinn's W_est(t) keeps growing with t through the 1.5 s the
    application had little to send (quinn's ACKs do not grow the window meanwhile), so the
    first cwnd-limited ACKs jump the window to it: above the curve, explained by its documented
    closed-form W_est and by nothing else."""
    ensure_built("quinn")
    result = replay(load_trace(str(EXAMPLES / "app-limited-then-bulk.jsonl")), ["quinn"])
    (curve,) = [f for f in result.findings if f.invariant == "ca-off-curve"]
    assert curve.status == "deviation" and curve.explained_by == ("w-est-closed-form-rfc8312",)
    assert curve.detail.startswith("above") and curve.t_us == 2_375_000


class SlowedSlowStart:
    """The oracle with each slow-start step scaled by `factor` (picoquic's 263:126 applies
    HyStart++'s divisor 4 outside CSS; quiche's 258:26 never fills its byte counter)."""

    def __init__(self, factor, mds=1200, initial_rtt_us=333_000, from_t=0):
        self.oracle, self.factor, self.from_t = Cubic(mds, initial_rtt_us), factor, from_t

    def step(self, ev):
        o = self.oracle
        before, slow_start = o.cwnd, o.cwnd < o.ssthresh
        snap = o.step(ev)
        if slow_start and o.cwnd > before and ev.t >= self.from_t:
            o.cwnd = before + (o.cwnd - before) * self.factor
            snap = snap._replace(cwnd=int(o.cwnd))
        return snap


def test_slow_start_short_of_the_acked_bytes_is_flagged_on_every_example_that_has_one():
    """Three quarters of the growth is flagged in the first round trips of every example with a
    slow start from a full window; the RFC's growth is not.  death-spiral's first ACK already
    reveals a loss and ecn-small-window's a CE mark: no slow-start ACK to judge."""
    for path in sorted(EXAMPLES.glob("*.jsonl")):
        trace = load_trace(str(path))
        assert "ss-growth-shortfall" not in _run(trace, Cubic(1200, trace.header.initial_rtt_us))
        found = _run(trace, SlowedSlowStart(0.75, 1200, trace.header.initial_rtt_us))
        if path.name in ("death-spiral.jsonl", "ecn-small-window.jsonl"):
            assert "ss-growth-shortfall" not in found
        else:
            assert found["ss-growth-shortfall"].event_index < 60, path.name   # in the first round trips


def _rising_rtt_trace(rise_us):
    """An ACK-clocked slow start (examples/make_examples.py's Flow: the window refilled at every
    ACK, as the RFC's slow start sizes it) over 50 ms round trips for 150 ms, then `rise_us`
    longer ones: an RTT rise that lets RFC 9406's conservative slow start begin when it is at
    least clamp(50 ms / 8, 4 ms, 16 ms) = 6.25 ms."""
    module = _make_examples()
    flow = module.Flow(50_000)
    flow.bulk(150_000)
    flow.rtt += rise_us
    flow.bulk(400_000)
    return flow.trace("rtt-rise", "")


def test_a_quarter_of_the_growth_passes_only_after_an_rtt_rise_that_lets_css_begin():
    """A quarter is HyStart++'s CSS growth (RFC 9406 §4.2, CSS_GROWTH_DIVISOR 4), here from the
    ACKs of the longer round trips on.  Without an RTT rise of at least clamp(min_rtt / 8, 4 ms,
    16 ms) before it, CSS cannot have begun."""
    def shortfall(rise_us, factor):
        slowed = SlowedSlowStart(factor, from_t=200_000)
        return "ss-growth-shortfall" in _run(_rising_rtt_trace(rise_us), slowed)
    assert not shortfall(10_000, 1.0) and not shortfall(0, 1.0)
    assert shortfall(0, 0.25) and shortfall(5_000, 0.25)      # 5 ms < 6.25 ms: no CSS possible
    assert not shortfall(10_000, 0.25)                        # a 10 ms rise: CSS possible
    assert shortfall(10_000, 0.15)                            # below CSS's quarter too


def test_ss_growth_shortfall_quotes_rfc_9002_and_is_waivable():
    inv = CATALOG["ss-growth-shortfall"]
    assert inv.waivable and inv.keyword == "descriptive" and "increases by the number of bytes" in inv.quote


class LinuxCntFrozenForAJiffy:
    """The snapshots Linux's tcp_cubic gave in the case that showed its rule (a HyStart mutant
    on convex-probing, events 214-271): epoch 1.0 s, K 3.104 s, W_max 37 segments, cwnd 25
    segments, and a flight of 40 packets acknowledged in pairs within one jiffy.  bictcp_update
    computed cnt = 25 / (28 - 25) = 8 at the first ACK (its integer bic_target rounds
    W_cubic(t + RTT) = 27.2 up) and kept it for the whole jiffy: a segment per 8 packets (2
    carried in snd_cwnd_cnt), to 30 segments, where RFC 9438 recomputes the target at every
    ACK and stops near 27."""

    def __init__(self):
        self.acked = 0

    def step(self, ev):
        if ev.kind == ACKED and ev.t >= 1_000_000:
            self.acked += len(ev.packets)
        epoch = 1_000_000 if ev.t >= 1_000_000 else None
        return Snapshot(30_000 + 1_200 * ((self.acked + 2) // 8), 30_000, ev.bytes_in_flight_after,
                        CONGESTION_AVOIDANCE, None, epoch, 44_400.0, 3_104_492.0)


def _one_jiffy_of_acks():
    from .flow import Flow
    flow = Flow()
    flow.send(1)
    flow.wait(200_000).ack([0])            # the RTT sample: 200 ms
    flow.wait(600_000)
    flight = flow.send(40)
    flow.wait(200_000)
    for i in range(0, 40, 2):
        flow.ack(flight[i:i + 2])          # 20 ACKs at t = 1.0 s
    return flow.trace()


def test_a_rate_computed_once_per_tick_is_the_stacks_documented_rule_not_a_finding():
    """Linux's profile sets ca_rate_tick_us (deviation cnt-once-per-jiffy): the fastest window
    then keeps the tick's first rate for every ACK of the tick.  The same snapshots without it
    leave the curve."""
    trace = _one_jiffy_of_acks()
    assert _run(trace, LinuxCntFrozenForAJiffy())["ca-off-curve"].detail.startswith("above")
    assert "ca-off-curve" not in _run(trace, LinuxCntFrozenForAJiffy(), rate_tick_us=4_000)


def test_the_rate_tick_comes_from_the_profile_and_the_specs_hz():
    from ccdiff.profiles import load_profile
    from ccdiff.stacks import load_recipes
    recipes = load_recipes()
    linux = load_profile(recipes["linux"])
    assert linux.rate_tick_us(()) == 4_000 and linux.rate_tick_us((("hz", "1000"),)) == 1_000
    assert load_profile(recipes["quiche"]).rate_tick_us((("hz", "1000"),)) == 0


class WindowFromTheCurve:
    """A stack that sets its window from a curve of time on every ACK in congestion avoidance,
    as picoquic sets cwin = W_cubic(t) (cubic.c:286-308): 40 bytes per ms from 60,000 bytes at
    t = 1 s, whatever the ACK acknowledged."""

    def step(self, ev):
        cwnd = 60_000 + max(0, ev.t - 1_000_000) * 40 // 1_000 if ev.kind == ACKED else None
        self.cwnd = cwnd if cwnd is not None else getattr(self, "cwnd", 60_000)
        return Snapshot(self.cwnd, 50_000, ev.bytes_in_flight_after, CONGESTION_AVOIDANCE,
                        None, 1_000_000, 60_000.0, 0.0)


def _acks_with_a_gap(idle_before_gap: bool = False):
    """A 100 ms path; at t = 1 s a flight of 40 packets acknowledged one per 2 ms, then a gap of
    60 ms in the ACK clock (less than a round trip) before the next ACK of one packet: 2,400
    bytes of growth for 1,200 acknowledged.  idle_before_gap: the pipe empties and the
    sender is idle for 2 s first, so that ACK opens a new round trip."""
    from .flow import Flow
    flow = Flow()
    flow.send(1)
    flow.wait(100_000).ack([0])            # the RTT sample: 100 ms
    flow.wait(800_000)
    flight = flow.send(41)
    flow.wait(100_000)
    for pn in flight[:-1]:
        flow.ack([pn]).wait(2_000)
    if idle_before_gap:
        flow.ack([flight[-1]]).wait(2_000_000)
        flight = flow.send(2)
        flow.wait(100_000).ack([flight[0]])
    else:
        flow.wait(58_000).ack([flight[-1]])
    return flow.trace()


def test_a_window_set_from_the_curve_is_bounded_per_round_trip_where_its_profile_says_so():
    """ca-growth-bound holds ACK by ACK for most stacks; a stack whose window follows time
    (profile ca_growth_per = "round-trip") may carry a gap's growth on one ACK, as long as the
    round trip's ACKs grew it by at most half their bytes."""
    trace = _acks_with_a_gap()
    per_ack = _run(trace, WindowFromTheCurve())["ca-growth-bound"]
    assert "grew cwnd by 2400 for 1200 bytes" in per_ack.detail
    assert "ca-growth-bound" not in _run(trace, WindowFromTheCurve(), ca_growth_per_round_trip=True)


def test_per_round_trip_a_jump_after_idle_is_still_a_violation():
    """An idle period empties the round: the first ACK after it is judged alone, so W_cubic(t)
    counted across the idle (picoquic's uncapped curve) is still caught."""
    found = _run(_acks_with_a_gap(idle_before_gap=True), WindowFromTheCurve(), ca_growth_per_round_trip=True)
    assert "by the 1 ACK(s) of the last smoothed round trip" in found["ca-growth-bound"].detail


def test_round_trip_judging_needs_a_deviation_with_the_stacks_code(tmp_path):
    from ccdiff.errors import SetupError
    from ccdiff.profiles import load_profile
    from ccdiff.stacks import load_recipes

    class Recipe:
        name, folder = "made-up", tmp_path
    for text, expected in (('ca_growth_per = "rtt"\n', 'is "ack" or "round-trip"'),
                           ('ca_growth_per = "round-trip"\n', "needs a [[deviation]]")):
        (tmp_path / "profile.toml").write_text(text)
        with pytest.raises(SetupError, match=re.escape(expected)):
            load_profile(Recipe)
    picoquic = load_profile(load_recipes()["picoquic"])
    assert picoquic.checker_options()["ca_growth_per_round_trip"]
    assert not load_profile(load_recipes()["quiche"]).checker_options()["ca_growth_per_round_trip"]
    # picoquic's Reno (newreno.c) grows per ACK: the rule is for its CUBIC only
    assert not Checker("picoquic-reno", 1200, "reno", ca_growth_per_round_trip=True).ca_growth_per_round_trip


def test_picoquic_on_the_satellite_path_is_judged_per_round_trip():
    """The real picoquic on scenarios/coverage/satellite.toml: an ACK 82 ms after the previous
    one in a 600 ms round trip grows its 707 kB window by 2,551 bytes for 2,400 acknowledged
    (W_cubic(t) across the gap).  Judged per ACK that is a violation; per round trip, as its
    profile says, the run passes ca-growth-bound."""
    from ccdiff.sim.engine import simulate
    from ccdiff.sim.scenario import load_scenario
    ensure_built("picoquic")
    result = simulate(load_scenario(str(project_root() / "scenarios/coverage/satellite.toml")), "picoquic", 0)
    assert "ca-growth-bound" not in {f["invariant"] for f in result.findings}
    snapshots = replay(result.trace, ["picoquic"]).runs["picoquic"].snapshots
    per_ack = _run(result.trace, Snapshots(snapshots))
    assert "grew cwnd by 2551 for 2400 bytes" in per_ack["ca-growth-bound"].detail
    assert "ca-growth-bound" not in _run(result.trace, Snapshots(snapshots), ca_growth_per_round_trip=True)


class Snapshots:
    """The snapshots of a finished replay, step by step (the checker judges them again)."""

    def __init__(self, snapshots):
        self.snapshots = iter(snapshots)

    def step(self, ev):
        return next(self.snapshots)

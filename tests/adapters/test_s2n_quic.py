"""The s2n-quic adapter drives s2n-quic-core's own CubicCongestionController the way
s2n-quic's recovery manager does.

s2n-quic-core 0.91.0 ships its CUBIC unit tests in src/recovery/cubic/tests.rs and
HyStart's in src/recovery/hybrid_slow_start.rs.  They set private fields directly
(congestion_window, state, bytes_in_flight, w_max), so each test below reaches the
test's state through events and asserts the numbers or the rule the upstream test
asserts, with the arithmetic in the docstring.  Order tests come from
s2n-quic-transport 0.91.0 src/recovery/manager.rs ("manager.rs:N").

Shared facts: mds 1200, initial window min(10 x 1200, max(14720, 2400)) = 12000
(cubic.rs:531-544); beta 0.7, C 0.4; the slow-start threshold after a congestion event
is max(min(threshold, new cwnd), 16 x mds = 19200) (hybrid_slow_start.rs:188-196).

`test_mutation_ack_before_losses_fails` builds a deliberately broken adapter (on_ack
before the losses the same ACK reveals, i.e. the caller's order reversed) and checks
that the order test's number fails on it.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from ccdiff.build import ensure_built
from ccdiff.paths import build_dir, implementations_dir, project_root
from ccdiff.replay import replay
from ccdiff.trace import parse_trace_text
from tests.adapters.common import run_marked   # absolute: the mutation check imports this file alone

MDS = 1200
MS = 1000
SPEC = "s2n-quic"
VERSION = "0.91.0"


@pytest.fixture(scope="module", autouse=True)
def built():
    ensure_built(SPEC)


def run(events, spec=SPEC, check=False, fmt=2):
    """Replay (t, event dict, mark) rows; returns ({mark: snapshot}, findings)."""
    return run_marked(events, spec, check=check, fmt=fmt)


def sent(t, *pns, mark=None, app_limited=False):
    extra = {"app_limited": True} if app_limited else {}
    return [(t, dict(ev="sent", pn=pn, bytes=MDS, **extra), mark) for pn in pns]


def ack(t, pns, mark=None, **extra):
    return [(t, dict(ev="ack", pns=list(pns), ack_delay=0, **extra), mark)]


def lost(t, pns, mark=None):
    return [(t, dict(ev="lost", pns=list(pns)), mark)]


def grown_to_48000():
    """Slow start to 48000 bytes, the cap 2 x bytes_in_flight_hi binding each time
    (cubic.rs:297, 329-352): ten packets acked in one frame at 10 ms: 12000 + 12000 =
    24000 = 2 x 12000; twenty more acked at 20 ms: 48000 = 2 x 24000."""
    return (sent(0, *range(10)) + ack(10 * MS, range(10), mark="ss1")
            + sent(10 * MS, *range(10, 30)) + ack(20 * MS, range(10, 30), mark="ss2")
            + sent(20 * MS, *range(30, 70)))


def test_on_packet_lost_upstream_numbers():
    """cubic.rs tests `on_packet_lost` (tests.rs:673-711): a loss in slow start leaves
    cwnd = cwnd x BETA, threshold = cwnd x BETA, state Recovery(loss time), bytes in flight
    less the lost bytes; `on_packet_lost_already_in_recovery` (tests.rs:738-755): a second
    loss in recovery changes nothing.  48000 -> 33600 (> 19200, so the threshold is it);
    bytes in flight 40 x 1200 - 1200 = 46800."""
    s, _ = run(grown_to_48000() + lost(30 * MS, [30], mark="loss") + lost(35 * MS, [31, 32], mark="again"))
    assert s["ss1"].cwnd == 24000 and s["ss2"].cwnd == 48000 and s["ss2"].phase == "slow_start"
    loss = s["loss"]
    assert loss.cwnd == int(48000 * 0.7) == 33600
    assert loss.ssthresh == 33600
    assert loss.phase == "recovery" and loss.recovery_start_us == 30 * MS
    assert loss.bytes_in_flight == 46800
    # W_max = 40 packets, cwnd_start = 28: K = cbrt((40 - 28) / 0.4) s (cubic.rs:790-849)
    assert loss.w_max == 48000.0
    assert math.isclose(loss.k_us, 30 ** (1 / 3) * 1e6, rel_tol=1e-5)
    again = s["again"]
    assert again.cwnd == 33600 and again.recovery_start_us == 30 * MS
    assert again.bytes_in_flight == 46800 - 2400


def test_threshold_floor_low_ssthresh():
    """hybrid_slow_start.rs test `on_congestion_event` (hss.rs:220-243): a threshold below
    low_ssthresh (16 x mds) is raised to it.  12000 -> 8400 on a loss, but the slow-start
    threshold is max(8400, 19200) = 19200 (RFC 9002 §7.3.2 would set ssthresh = 8400; the
    state machine, not the threshold, keeps s2n out of slow start: profile)."""
    s, _ = run(sent(0, *range(10)) + lost(10 * MS, [0], mark="loss"))
    assert s["loss"].cwnd == 8400 and s["loss"].ssthresh == 19200 and s["loss"].phase == "recovery"


def test_persistent_congestion_upstream_numbers():
    """cubic.rs test `on_packet_lost_persistent_congestion` (tests.rs:764-782): slow start,
    cwnd = minimum window (2 x 1200), W_max = 0 and K = 0 (cubic.rs:416-420).  Declared on
    the loss timer here (s2n computes persistent congestion there too, manager.rs:157-181,
    843-849): the snapshot at persistent_congestion is that path's.  pn 31 (sent at 20 ms)
    and pn 70 (200 ms) span 180 ms > the 150 ms persistent-congestion duration."""
    ev = grown_to_48000() + lost(30 * MS, [30]) + sent(200 * MS, 70) + lost(400 * MS, [31, 70]) \
        + [(400 * MS, dict(ev="persistent_congestion"), "pc")] + sent(401 * MS, 71, mark="after")
    s, _ = run(ev)
    pc = s["pc"]
    assert pc.cwnd == 2400 and pc.phase == "slow_start"
    assert pc.w_max == 0.0 and pc.k_us == 0.0
    assert pc.recovery_start_us is None and pc.epoch_start_us is None
    assert s["after"].cwnd == 2400


def test_recovery_to_congestion_avoidance_upstream_rule():
    """cubic.rs test `on_packet_ack_recovery_to_congestion_avoidance` (tests.rs:1060-1086):
    an ACK of a packet sent after the recovery start ends recovery: congestion avoidance
    with start_time = the ACK's time (cubic.rs:315-322); `on_packet_ack_recovery`
    (tests.rs:1128-1152): an ACK of a packet sent before it changes nothing.
    t=10 ms loss of pn 0: 8400; t=20 ms ACK pn 1..9 (sent at 0): still recovery;
    pn 10 sent at 21 ms, ACKed at 41 ms: congestion avoidance, epoch 41 ms.  The growth on
    that ACK (cubic.rs:547-619): t = 0, W_cubic(0) = 7 packets is not below W_est(0) = 7
    (f32), so the concave branch: K = cbrt(3 / 0.4) = 1.9574 s, RTT = min_rtt = 20 ms,
    target W_cubic(0.02 s) = 0.4 (0.02 - 1.9574)^3 + 10 = 7.0906 packets = 8508.7 bytes,
    cwnd += (8508.7 - 8400) / 8400 x 1200 = 15.5: 8415."""
    ev = sent(0, *range(10)) + lost(10 * MS, [0]) + ack(20 * MS, range(1, 10), mark="old") \
        + sent(21 * MS, 10) + ack(41 * MS, [10], mark="ca")
    s, _ = run(ev)
    assert s["old"].phase == "recovery" and s["old"].cwnd == 8400 and s["old"].bytes_in_flight == 0
    assert s["ca"].phase == "congestion_avoidance" and s["ca"].epoch_start_us == 41 * MS
    assert s["ca"].cwnd == 8415 and s["ca"].recovery_start_us == 10 * MS


def idle_events():
    """After test_recovery_to_congestion_avoidance's CA entry at 41 ms: pn 11 sent at 41 ms
    app-limited with 7215 bytes of room (> 3 x 1200: under-utilized, cubic.rs:221-227,
    669-690); its ACK at 61 ms stamps app_limited_time = 61 ms and does not grow
    (cubic.rs:302-312).  One second later pn 12..18 fill the window (8400 of 8415: congestion
    limited, not app-limited); the ACK of pn 12 at 1081 ms moves start_time by
    app_limited_time - window_increase_time = 61 - 41 = 20 ms (cubic.rs:117-132): epoch
    61 ms.  The second from 61 ms to 1061 ms stays in t."""
    return (sent(0, *range(10)) + lost(10 * MS, [0]) + ack(20 * MS, range(1, 10))
            + sent(21 * MS, 10) + ack(41 * MS, [10], mark="ca")
            + sent(41 * MS, 11, app_limited=True) + ack(61 * MS, [11], mark="limited")
            + sent(1061 * MS, *range(12, 19)) + ack(1081 * MS, [12], mark="resumed"))


def test_congestion_avoidance_after_idle_period_upstream_rule():
    """cubic.rs test `congestion_avoidance_after_idle_period` (tests.rs:460-556): the
    congestion-avoidance start moves forward by the app-limited stretch from the last window
    increase to the app-limited ACK (10 s -> 16 s there; 41 ms -> 61 ms here), and t at
    the next ACK counts from the moved start (upstream: 25 - 16 = 9 s)."""
    s, _ = run(idle_events())
    assert s["limited"].cwnd == 8415 and s["limited"].epoch_start_us == 41 * MS
    assert s["resumed"].epoch_start_us == 61 * MS
    assert s["resumed"].cwnd > 8415


def test_slow_start_cap_two_x_bytes_in_flight_hi():
    """cubic.rs test `on_packet_ack_utilized_then_under_utilized` (tests.rs:963-1029): in
    slow start the window grows at most to 2 x the highest bytes in flight seen at an ACK
    (60_000 x 2 there).  Two packets (2400 bytes) sent not app-limited and acknowledged:
    max_cwnd = max(2 x 2400, 2400) = 4800 < 12000, so on_ack returns before growing
    (cubic.rs:329-341)."""
    s, _ = run(sent(0, 0, 1) + ack(10 * MS, [0, 1], mark="ack"))
    assert s["ack"].cwnd == 12000 and s["ack"].phase == "slow_start"


def hystart_events(step_ms):
    """One packet per millisecond, each ACKed an RTT later: 10 ms for pn < 40, then
    10 + step_ms.  HyStart (hybrid_slow_start.rs:93-173) compares the minimum of the first
    8 RTT samples of a round with the previous round's; a rise of at least
    clamp(10 ms / 8, 4 ms, 16 ms) = 4 ms with cwnd >= 16 x 1200 sets threshold = cwnd, and
    on_rtt_update then leaves slow start (cubic.rs:271-283)."""
    rows = []
    for pn in range(120):
        rtt = 10 if pn < 40 else 10 + step_ms
        rows.append((pn * MS, "s", pn))
        rows.append(((pn + rtt) * MS, "a", pn))
    rows.sort(key=lambda r: (r[0], r[1] == "s"))   # at one instant: ACKs, then sends
    ev = []
    for t, kind, pn in rows:
        ev += sent(t, pn) if kind == "s" else ack(t, [pn], mark=f"a{pn}")
    return ev


def test_hystart_exit_upstream_rule():
    """hybrid_slow_start.rs / cubic.rs test `on_packet_sent` (tests.rs:246-321): a delay
    increase between two RTT rounds of 8 samples ends slow start without loss: threshold
    = the window at that sample, state congestion avoidance, and Cubic's W_max = cwnd with
    K = 0 (cubic.rs:859-866).  With a constant RTT nothing exits."""
    s, _ = run(hystart_events(20))
    exits = [p for p in range(120) if s[f"a{p}"].phase == "congestion_avoidance"]
    assert exits, "no HyStart exit"
    first = s[f"a{exits[0]}"]
    before = s[f"a{exits[0] - 1}"]
    assert before.phase == "slow_start" and exits[0] >= 40
    assert first.ssthresh is not None and first.ssthresh >= 19200
    assert first.w_max == float(first.ssthresh) and first.k_us == 0.0
    assert first.epoch_start_us == (exits[0] + 30) * MS
    steady, _ = run(hystart_events(0))
    assert all(steady[f"a{p}"].phase == "slow_start" and steady[f"a{p}"].ssthresh is None for p in range(120))


def test_losses_before_ack():
    """manager.rs:644 then 728-741: the ACK that reveals a loss applies it first, then its
    on_ack.  t=0 pn 0..9; t=10 ms pn 0 lost and pn 1..3 acked: 12000 x 0.7 = 8400, and the
    ACK's packets (sent at 0, before the recovery start) do not grow it.  (on_ack first
    would grow slow start to 15600, then 0.7 x 15600 = 10920.)"""
    s, _ = run(sent(0, *range(10)) + lost(10 * MS, [0], mark="lost") + ack(10 * MS, [1, 2, 3], mark="ack"))
    assert s["lost"].cwnd == 8400
    assert s["ack"].cwnd == 8400 and s["ack"].recovery_start_us == 10 * MS
    assert s["ack"].bytes_in_flight == 12000 - 4 * 1200


def test_ecn_ce_reduces():
    """manager.rs:718-726, 766-779: a CE increase on an ACK with a new largest calls
    on_explicit_congestion before on_ack: 12000 -> 8400, and the ACK's packets (sent
    before) do not grow it."""
    s, _ = run(sent(0, *range(10)) + ack(10 * MS, [0, 1], mark="ce", ecn_ce=True))
    assert s["ce"].cwnd == 8400 and s["ce"].phase == "recovery"


def test_options_rejected():
    from ccdiff.errors import SetupError
    from ccdiff.native import AdapterError
    with pytest.raises((AdapterError, SetupError, ValueError)) as exc:
        run(sent(0, 0), spec="s2n-quic:cc=reno")
    assert "cc" in str(exc.value)


def test_mtu_discovered_scales_window():
    """cubic.rs:458-469: on_mtu_update(1500) from 1200 scales the window by 1500 / 1200
    and keeps at least the new initial window: max(12000 x 1.25, min(15000, 14720)) =
    15000; built at 1500 directly the initial window is 14720 (cubic.rs:531-544)."""
    lines = [json.dumps({"ccdiff_trace": 2, "max_datagram_size": 1500}),
             json.dumps({"t": 0, "ev": "sent", "pn": 0, "bytes": 1500})]
    for spec, want in ((SPEC, 14720), (SPEC + ":mtu=discovered", 15000)):
        res = replay(parse_trace_text("\n".join(lines)), [spec], check=False)
        r = next(iter(res.runs.values()))
        assert r.error is None, r.error
        assert r.snapshots[0].cwnd == want


MUTATION = (
    ("        let reveals = match &self.pending {\n",
     "        // MUTATION: on_ack before the losses this ACK reveals\n"
     "        let mbytes: usize = acked.iter().map(|(_, s)| s.bytes as usize).sum();\n"
     "        self.cc.on_ack(largest.time, mbytes, (), &self.rtt, &mut ZeroRandom, now, &mut NoopPublisher);\n"
     "        let reveals = match &self.pending {\n"),
    ("        self.cc.on_ack(largest.time, bytes, (), &self.rtt, &mut ZeroRandom, now, &mut NoopPublisher);\n",
     "        let _ = bytes;\n"),
)


def test_mutation_ack_before_losses_fails(tmp_path):
    """A broken adapter (on_ack before the losses of the same ACK) fails
    test_losses_before_ack: its ACK snapshot is 10920, not 8400; and on the death-spiral
    example its findings are not the real adapter's.  Built from a copy of
    implementations/ into a scratch build folder (the cargo target is copied from the
    real build, so only the adapter recompiles)."""
    if shutil.which(os.environ.get("CARGO", "cargo")) is None:
        pytest.skip("cargo not installed")
    home = tmp_path / "home"
    (home / "implementations").mkdir(parents=True)
    shutil.copytree(implementations_dir() / "include", home / "implementations" / "include")
    shutil.copytree(implementations_dir() / "s2n-quic", home / "implementations" / "s2n-quic")
    lib = home / "implementations" / "s2n-quic" / "adapter" / "src" / "lib.rs"
    src = lib.read_text()
    for old, new in MUTATION:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    lib.write_text(src)
    builds = tmp_path / "build"
    real = build_dir() / "s2n-quic" / VERSION
    (builds / "downloads").mkdir(parents=True)
    crate = build_dir() / "downloads" / f"s2n-quic-core-{VERSION}.crate"
    if crate.exists():
        shutil.copy(crate, builds / "downloads")
    if (real / "target").is_dir():
        shutil.copytree(real / "target", builds / "s2n-quic" / VERSION / "target", symlinks=True)
    check = (
        "import json, sys\n"
        "from ccdiff.build import build_spec\n"
        f"build_spec('s2n-quic@{VERSION}')\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import test_s2n_quic as t\n"
        "s, _ = t.run(t.sent(0, *range(10)) + t.lost(10000, [0]) + t.ack(10000, [1, 2, 3], mark='ack'))\n"
        "text = open(sys.argv[2]).read()\n"
        "res = t.replay(t.parse_trace_text(text), [t.SPEC], check=True)\n"
        "found = sorted({(f.invariant, f.status) for f in res.findings})\n"
        "print(json.dumps({'cwnd': s['ack'].cwnd, 'findings': found}))\n")
    env = dict(os.environ, CCDIFF_HOME=str(home), CCDIFF_BUILD_DIR=str(builds),
               PYTHONPATH=str(project_root()), CARGO_BUILD_JOBS=os.environ.get("CARGO_BUILD_JOBS", "1"))
    example = str(project_root() / "examples" / "death-spiral.jsonl")
    out = subprocess.run([sys.executable, "-c", check, os.path.dirname(__file__), example], env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    got = doc["cwnd"]
    # The real adapter's number (test_losses_before_ack) is 8400; the mutant grows first.
    assert got == 10920, got
    with pytest.raises(AssertionError):
        assert got == 8400
    # The verdict moves too: on examples/death-spiral.jsonl the mutant takes the ACK of pn 6..8
    # (sent in the recovery period) before the loss of pn 5, leaves recovery and reduces for
    # pn 5 (8400 -> 5885), so the real adapter's missing-reduction, which the mechanism
    # s2n-recovery-by-state explains (test_recovery_by_state_is_a_checked_deviation), is gone
    # and its window leaves the oracle's envelope instead, a deviation the profile tolerates.
    # No violation: the stuck-at-minimum this mutant once showed was a 3600-byte window (s2n's
    # cap at 1.5 x the highest bytes in flight, profile under-utilized-window) holding the
    # trace's 2 packets per round trip, a window the sender never filled (RFC 9002 §7.8).
    assert doc["findings"] == [["trajectory-divergence", "deviation"]], doc["findings"]


def test_recovery_by_state_is_a_checked_deviation():
    """examples/death-spiral.jsonl: pn 5 (sent at 10.1 ms, after the 10 ms recovery start) is
    lost at 20.1 ms before any ACK of a packet sent in the period was processed (the ACK of
    pn 6..8 at that instant comes after loss detection, manager.rs:644 then 728-741): s2n
    stays at 8400 (missing-reduction).  The s2n-recovery-by-state mechanism explains it (the
    profile's recovery-by-state); every other invariant stays armed."""
    text = (project_root() / "examples" / "death-spiral.jsonl").read_text()
    res = replay(parse_trace_text(text), [SPEC], check=True)
    found = {(f.invariant, f.status) for f in res.findings if f.stack == SPEC}
    assert ("missing-reduction", "deviation") in found
    assert not [f for f in res.findings if f.stack == SPEC and f.status == "violation"]


def test_under_utilized_mechanism_explains_only_a_full_window():
    """s2n-under-utilized-window (ccdiff/mechanisms.py) replays cubic.rs:221-232, 669-690 from
    the snapshots: 10 packets flagged app-limited fill the 12000-byte window (the last send
    leaves no room: congestion-limited, so not app-limited either), so under_utilized is
    clear and the ACK grows the window (12000 -> 13200).  The mechanism explained that
    growth-while-app-limited finding until 2026-11-29; since then the invariant itself holds
    back (a round trip whose last send filled the window is not app-limited, RFC 9438 §5.8:
    "currently sending less than what is allowed by the congestion window").  With one
    app-limited packet (1200 of 12000: under-utilized) s2n does not grow, and there is
    nothing to explain."""
    ev = [(0, dict(ev="app_idle"), None)]
    full = sent(0, *range(10), app_limited=True) + ack(10 * MS, [0], mark="ack")
    s, findings = run(ev + full, check=True)
    assert s["ack"].cwnd == 13200
    assert not [f for f in findings if f.invariant == "growth-while-app-limited"]
    s, findings = run(ev + sent(0, 0, app_limited=True) + ack(10 * MS, [0], mark="ack"), check=True)
    assert s["ack"].cwnd == 12000
    assert not [f for f in findings if f.invariant == "growth-while-app-limited"]


def test_ecn_only_on_a_new_largest():
    """manager.rs:444-450, 718-726: ECN counts are processed only on a frame whose largest
    acknowledged is not below the largest so far.  AFL's minimized reproducer (docs/
    fuzzing.md): pn 16, 17 sent; the ACK of 17, then a reordered ACK of 16 with a CE
    increase: no congestion event (12000 stays), a documented deviation
    (ecn-only-on-new-largest, mechanism s2n-ecn-on-new-largest-only), not a violation."""
    ev = sent(20 * MS, 16, 17) + ack(30 * MS, [17]) + ack(30 * MS, [16], mark="ce", ecn_ce=True)
    s, findings = run(ev, check=True)
    assert s["ce"].cwnd == 12000
    assert {(f.invariant, f.status) for f in findings if f.invariant == "missing-reduction"} == \
        {("missing-reduction", "deviation")}


def test_idle_inflation_is_a_violation():
    """The real finding (docs/closed-loop-results.md, docs/fuzzing.md; honggfuzz's minimized
    reproducer, tests/fixtures/s2n-quic-idle-inflation.jsonl): after the flight of pn 2915
    (not app-limited, so under_utilized is clear and no app_limited_time is stamped,
    cubic.rs:221-227, 302-312) nothing is sent for 15 s; t = now - start_time counts it
    (cubic.rs:109, 113-132), W_cubic has jumped, and the first ACK after idle grows by the
    per-ACK cap of half its bytes (cubic.rs:556-558): 9007 -> 12007 for 5 x 1200 bytes.
    RFC 9438 §4.2's MUST: the profile documents it and waives nothing."""
    text = (project_root() / "tests" / "fixtures" / "s2n-quic-idle-inflation.jsonl").read_text()
    res = replay(parse_trace_text(text), [SPEC], check=True)
    r = next(iter(res.runs.values()))
    assert r.error is None, r.error
    assert (r.snapshots[20].cwnd, r.snapshots[21].cwnd) == (9007, 12007)
    assert [f.status for f in res.findings if f.stack == SPEC and f.invariant == "idle-inflation"] == ["violation"]

"""The quinn adapter drives quinn-proto's own Cubic / NewReno the way quinn's Connection does.

quinn-proto 0.11.19 ships two CUBIC unit tests (src/congestion/cubic.rs, `mod tests`)
and none for NewReno or for the connection's call order.  The first two tests below
re-create cubic.rs's tests as ccdiff traces and assert the numbers they assert; the
upstream tests set private fields directly (window, ssthresh, w_max,
recovery_start_time), so each trace reaches that state through events, with the
arithmetic in the docstring.  The rest are hand-derived from the code
(src/connection/mod.rs for the order, cubic.rs / new_reno.rs for the numbers).

Shared facts: the default initial window is 12000 bytes (cubic.rs:263-269), the
controller is created 1 us before trace time 0 (adapter), beta = 0.7, C = 0.4,
K = cbrt(W_max/MTU * 0.3 / 0.4) seconds (cubic.rs:36-40).

`test_mutation_loss_before_acks_fails` builds a deliberately broken adapter (the
held-back loss applied before the ACK's on_ack calls, i.e. RFC 9002's order
instead of quinn's) and checks that the order test fails on it.
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
SPEC = "quinn"
RENO = "quinn-reno"


@pytest.fixture(scope="module", autouse=True)
def built():
    ensure_built(SPEC)


def run(events, spec=SPEC, check=False):
    """Replay (t, event dict, mark) rows; returns ({mark: snapshot}, findings)."""
    return run_marked(events, spec, check=check)


def sent(t, *pns, mark=None):
    return [(t, dict(ev="sent", pn=pn, bytes=MDS), mark) for pn in pns]


def ack(t, pns, mark=None, **extra):
    return [(t, dict(ev="ack", pns=list(pns), ack_delay=0, **extra), mark)]


def lost(t, pns, mark=None):
    return [(t, dict(ev="lost", pns=list(pns)), mark)]


def fast_convergence_events():
    """Reaches cubic.rs's test state (window 9600 < W_max) and applies a second loss.

    t=0      pn 0..9 sent; cwnd 12000.
    t=10 ms  pn 0 lost by the loss timer (no ACK at that time): W_max = 12000 (cwnd >=
             W_max = 0), ssthresh = cwnd = int(12000 * 0.7) = 8400, recovery start 10 ms,
             K = cbrt(10 * 0.3 / 0.4) = 1.9574 s, cwnd_inc = 0.
    t=20 ms  ACK of pn 1..9 (sent at 0, before the recovery start: no growth); then the
             RTT sample: smoothed = 20 ms.  pn 10, 11 sent.
    t=50 ms  ACK of pn 10.  on_ack runs BEFORE this ACK's RTT sample (mod.rs:1527 vs
             1538), so RTT = 20 ms: t = 40 ms; W_cubic(t + RTT) = (0.4 (0.06 - 1.9574)^3
             + 10) * 1200 = 8721 < W_est(t) = (10 * 0.7 + 3 * 0.3 / 1.7 * 40 / 20) * 1200
             = 9670.6, so cwnd_inc += 9670 - 8400 = 1270 >= 1200: cwnd = 9600.
             (With the sample taken first, smoothed = (7 * 20 + 30) / 8 = 21.25 ms,
             W_est = 9595.8, cwnd_inc = 1195 < 1200: cwnd would stay 8400.)
    t=60 ms  pn 11 (sent after the recovery start) lost by the timer: upstream's state.
    """
    return (sent(0, *range(10)) + lost(10 * MS, [0], mark="loss1")
            + ack(20 * MS, range(1, 10), mark="old-acks") + sent(20 * MS, 10, 11)
            + ack(50 * MS, [10], mark="ca") + lost(60 * MS, [11], mark="loss2"))


def test_fast_convergence_upstream_numbers():
    """cubic.rs `fast_convergence_reduces_w_max_without_double_reducing_window`
    (cubic.rs:281-300): window 9600 (8 * BASE_DATAGRAM_SIZE) below W_max; a congestion
    event sets W_max = window * (1 + BETA) / 2 = 8160, ssthresh = (window * BETA) as u64
    = 6720 and window = ssthresh (the 0.7 reduction applies to the old window, not to
    the lowered W_max).  Upstream's W_max is 12 * 1200 = 14400; here the first loss
    leaves 12000, which the test's assertions do not depend on (both exceed 9600)."""
    s, _ = run(fast_convergence_events())
    assert s["loss1"].cwnd == 8400 and s["loss1"].ssthresh == 8400
    assert s["loss1"].w_max == 12000.0
    assert s["loss1"].recovery_start_us == 10 * MS and s["loss1"].epoch_start_us == 10 * MS
    assert math.isclose(s["loss1"].k_us, (10 * 0.3 / 0.4) ** (1 / 3) * 1e6, rel_tol=1e-12)
    assert s["old-acks"].cwnd == 8400
    assert s["ca"].cwnd == 9600 and s["ca"].phase == "congestion_avoidance"
    window = 8 * MDS
    assert s["loss2"].w_max == window * (1.0 + 0.7) / 2.0
    assert s["loss2"].ssthresh == int(window * 0.7) == 6720
    assert s["loss2"].cwnd == s["loss2"].ssthresh
    assert s["loss2"].recovery_start_us == 60 * MS
    assert math.isclose(s["loss2"].k_us, (8160 / MDS * 0.3 / 0.4) ** (1 / 3) * 1e6, rel_tol=1e-12)


def test_no_overflow_after_long_lossless_period():
    """cubic.rs `congestion_avoidance_does_not_overflow_after_long_lossless_period`
    (cubic.rs:302-320): in congestion avoidance with a recovery start, an ACK ten days
    later (W_cubic beyond u64::MAX) adds exactly one datagram and does not panic (the
    adapter is built with overflow-checks on).  Upstream's window is 12000 with
    ssthresh = window; here the timer loss at 10 ms gives 8400 = ssthresh, then
    pn 10 sent 10 days later and ACKed 20 ms after: 8400 + 1200."""
    later = 10 * 24 * 3600 * 1_000_000
    s, _ = run(sent(0, *range(10)) + lost(10 * MS, [0]) + ack(20 * MS, range(1, 10))
               + sent(later, 10) + ack(later + 20 * MS, [10], mark="late"))
    assert s["late"].cwnd == 8400 + MDS


def test_acks_before_losses():
    """mod.rs:1503-1536 then 1556: the ACK that reveals a loss grows the window first.

    t=0 pn 0..9 sent; t=10 ms pn 0 lost, and the ACK of pn 1..3 at the same time.
    The CCD_LOST snapshot is the loss timer's (provisional): int(12000 * 0.7) = 8400.
    The ACK then runs in quinn's order: three on_ack in slow start (no recovery yet):
    12000 + 3 * 1200 = 15600; then on_congestion_event: W_max = 15600, ssthresh =
    cwnd = int(15600 * 0.7) = 10920.  (Loss first, as RFC 9002 A.7, would give 8400.)"""
    s, _ = run(sent(0, *range(10)) + lost(10 * MS, [0], mark="lost") + ack(10 * MS, [1, 2, 3], mark="ack"))
    assert s["lost"].cwnd == 8400
    assert s["ack"].cwnd == 10920 and s["ack"].ssthresh == 10920
    assert s["ack"].w_max == 15600.0
    assert s["ack"].recovery_start_us == 10 * MS


def test_ecn_ce_after_acks():
    """mod.rs:1563-1576: an ACK with a new largest and a CE increase calls
    on_congestion_event(now, send time of the largest acked, false, 0) after the acks:
    12000 + 2 * 1200 = 14400, then int(14400 * 0.7) = 10080."""
    s, _ = run(sent(0, *range(10)) + ack(10 * MS, [0, 1], mark="ce", ecn_ce=True))
    assert s["ce"].cwnd == 10080 and s["ce"].ssthresh == 10080


def persistent_congestion_events(loss_before):
    """RTT sample 10 ms at t=10 ms (srtt 10, rttvar 5: PC duration (10 + 20 + 25) * 3 =
    165 ms).  pn 1 sent at 11 ms, pn 2..4 at 200 ms; at 210 ms pn 1 and 2 are lost
    (sent 189 ms apart, nothing between them acknowledged) with persistent congestion,
    revealed by the ACK of pn 4.  With loss_before, pn 3 is lost by the timer at 205 ms
    first (a recovery period starting after pn 2 was sent)."""
    ev = sent(0, 0) + ack(10 * MS, [0]) + sent(11 * MS, 1) + sent(200 * MS, 2, 3, 4)
    if loss_before:
        ev += lost(205 * MS, [3], mark="loss3")
    return ev + lost(210 * MS, [1, 2]) + [(210 * MS, dict(ev="persistent_congestion"), "pc")] \
        + ack(210 * MS, [4], mark="ack")


def test_persistent_congestion():
    """cubic.rs:182-214.  After pn 0's ACK cwnd = 13200; the ACK at 210 ms first grows
    it (pn 4, slow start): 14400; then the congestion event: W_max = 14400, ssthresh =
    int(14400 * 0.7) = 10080 = cwnd; persistent: W_max = 10080, ssthresh =
    max(int(10080 * 0.7), 2400) = 7056 (beta twice, profile persistent-congestion-
    ssthresh), cwnd = 2 * 1200, recovery start cleared."""
    s, findings = run(persistent_congestion_events(False), check=True)
    assert s["pc"].cwnd == 2400 and s["ack"].cwnd == 2400
    assert s["ack"].ssthresh == 7056 and s["ack"].w_max == 10080.0
    assert s["ack"].recovery_start_us is None and s["ack"].phase == "slow_start"
    assert not [f for f in findings if f.invariant == "persistent-congestion-ignored"]


@pytest.mark.parametrize("spec, reduced", [(SPEC, int(13200 * 0.7)), (RENO, int(13200 * 0.5))])
def test_persistent_congestion_ignored_inside_recovery(spec, reduced):
    """A real defect (docs/closed-loop-results.md): on_congestion_event returns when the
    batch's largest lost packet was sent at or before recovery_start_time (cubic.rs:174-180,
    new_reno.rs:92-94), before its persistent-congestion branch (cubic.rs:201,
    new_reno.rs:101).  Timer loss of pn 3 at 205 ms: 13200 -> 9240 (Cubic) / 6600
    (NewReno), recovery start 205 ms.  At 210 ms pn 4 (sent 200 ms, before that start)
    does not grow it, and the persistent congestion of pn 1..2 (largest sent at 200 ms)
    is dropped: the window stays, where RFC 9002 §7.6.2 requires 2400."""
    s, findings = run(persistent_congestion_events(True), spec=spec, check=True)
    assert s["loss3"].cwnd == reduced
    assert s["ack"].cwnd == reduced and s["ack"].recovery_start_us == 205 * MS
    assert [f for f in findings if f.invariant == "persistent-congestion-ignored"
            and f.status == "violation"]


def test_newreno_order_and_abc():
    """new_reno.rs, hand-derived.
    t=10 ms  ACK pn 0, 1: slow start 12000 + 2400 = 14400.
    t=20 ms  pn 2 lost, revealed by the ACK of pn 3: on_ack first (slow start, 15600),
             then on_congestion_event: int(15600 * 0.5) = 7800 = ssthresh (f32 factor).
    t=21 ms  pn 10..16 sent; t=40 ms ACK of them: Appropriate Byte Counting
             (new_reno.rs:76-81): bytes_acked reaches 7 * 1200 = 8400 >= 7800 on the
             7th packet: cwnd 9000 (bytes_acked 600)."""
    ev = (sent(0, *range(10)) + ack(10 * MS, [0, 1], mark="ss") + lost(20 * MS, [2])
          + ack(20 * MS, [3], mark="loss") + sent(21 * MS, *range(10, 17))
          + ack(40 * MS, range(10, 16), mark="six") + ack(40 * MS, [16], mark="seven"))
    s, _ = run(ev, spec=RENO)
    assert s["ss"].cwnd == 14400
    assert s["loss"].cwnd == 7800 and s["loss"].ssthresh == 7800
    assert s["six"].cwnd == 7800
    assert s["seven"].cwnd == 9000
    assert s["seven"].w_max is None and s["seven"].epoch_start_us is None


def test_app_idle_gates_growth():
    """mod.rs:947: after app_idle the connection's app_limited flag is true and on_ack
    returns early (cubic.rs:102-109); after app_data it is false again.
    t=0 pn 0..3 sent, app_idle; t=10 ms ACK pn 0, 1: no growth (12000);
    app_data at 10 ms, ACK pn 2 at 11 ms: slow start 13200."""
    ev = sent(0, 0, 1, 2, 3) + [(0, dict(ev="app_idle"), None)] + ack(10 * MS, [0, 1], mark="idle") \
        + [(10 * MS, dict(ev="app_data"), None)] + ack(11 * MS, [2], mark="busy")
    lines = [json.dumps({"ccdiff_trace": 2, "max_datagram_size": MDS})] + [json.dumps({"t": t, **e}) for t, e, _ in ev]
    res = replay(parse_trace_text("\n".join(lines)), [SPEC], check=False)
    r = next(iter(res.runs.values()))
    assert r.error is None, r.error
    marks = {m: i for i, (_, _, m) in enumerate(ev) if m}
    assert r.snapshots[marks["idle"]].cwnd == 12000
    assert r.snapshots[marks["busy"]].cwnd == 13200


def test_options_rejected():
    from ccdiff.errors import SetupError
    from ccdiff.native import AdapterError
    with pytest.raises((AdapterError, SetupError, ValueError)) as exc:
        run(sent(0, 0), spec="quinn:idle_fix=on")
    assert "idle_fix" in str(exc.value)


MUTATION = (
    "        let mut in_flight = ev.bytes_in_flight + pending_bytes;\n",
    "        let mut in_flight = ev.bytes_in_flight + pending_bytes;\n"
    "        if let Some(p) = self.pending.take() {  // MUTATION: loss before the acks\n"
    "            Self::congestion_event(&mut self.cc, now, &p, p.persistent);\n"
    "        }\n",
)


def test_mutation_loss_before_acks_fails(tmp_path):
    """A broken adapter (the loss applied before the ACK's on_ack calls) fails
    test_acks_before_losses: its ACK snapshot is 8400, not 10920.  Built from a copy of
    implementations/ into a scratch build folder (the cargo target is copied from the
    real build, so only quinn-proto and the adapter recompile)."""
    if shutil.which(os.environ.get("CARGO", "cargo")) is None:
        pytest.skip("cargo not installed")
    home = tmp_path / "home"
    (home / "implementations").mkdir(parents=True)
    shutil.copytree(implementations_dir() / "include", home / "implementations" / "include")
    shutil.copytree(implementations_dir() / "quinn", home / "implementations" / "quinn")
    lib = home / "implementations" / "quinn" / "adapter" / "src" / "lib.rs"
    src = lib.read_text()
    assert src.count(MUTATION[0]) == 1
    lib.write_text(src.replace(MUTATION[0], MUTATION[1]))
    builds = tmp_path / "build"
    real = build_dir() / "quinn" / "0.11.19"
    (builds / "downloads").mkdir(parents=True)
    crate = build_dir() / "downloads" / "quinn-proto-0.11.19.crate"
    if crate.exists():
        shutil.copy(crate, builds / "downloads")
    if (real / "target").is_dir():
        shutil.copytree(real / "target", builds / "quinn" / "0.11.19" / "target", symlinks=True)
    check = (
        "import json, sys\n"
        "from ccdiff.build import build_spec\n"
        "build_spec('quinn@0.11.19')\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import test_quinn as t\n"
        "s, _ = t.run(t.sent(0, *range(10)) + t.lost(10000, [0]) + t.ack(10000, [1, 2, 3], mark='ack'))\n"
        "print(json.dumps({'cwnd': s['ack'].cwnd}))\n")
    env = dict(os.environ, CCDIFF_HOME=str(home), CCDIFF_BUILD_DIR=str(builds),
               PYTHONPATH=str(project_root()), CARGO_BUILD_JOBS=os.environ.get("CARGO_BUILD_JOBS", "1"))
    out = subprocess.run([sys.executable, "-c", check, os.path.dirname(__file__)], env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])["cwnd"]
    # The real adapter's number (test_acks_before_losses) is 10920; the mutant gives the
    # loss-first 8400, so that test's assertion fails on it.
    assert got == 8400, got
    with pytest.raises(AssertionError):
        assert got == 10920


@pytest.mark.parametrize("options", ["", ":mtu=discovered"])
def test_initial_window_is_1200_based_at_any_mtu(options):
    """cubic.rs:263-269: initial_window = 14720.clamp(2 * 1200, 10 * 1200) = 12000 bytes
    whatever the path MTU (RFC 9002 §7.2 would give 14720 at 1500 bytes; profile
    initial-window-1200-based), built with the trace's MTU or raised to it by
    on_mtu_update (mod.rs:1517-1522), which only lifts the window to 2 x MTU = 3000.
    Four timer losses, each of a packet sent after the previous recovery start: 12000 -> 8400 -> 5880 -> 4116 -> max(2881, 2 x 1500) = 3000,
    the floor of the trace's MTU in both modes."""
    lines = [json.dumps({"ccdiff_trace": 1, "max_datagram_size": 1500})]
    events = []
    for i in range(4):      # each packet sent after the previous recovery start, then lost
        events += [dict(t=i * 10 * MS + (MS if i else 0), ev="sent", pn=i, bytes=1500),
                   dict(t=(i + 1) * 10 * MS, ev="lost", pns=[i])]
    res = replay(parse_trace_text("\n".join(lines + [json.dumps(e) for e in events])), [SPEC + options],
                 check=False)
    r = next(iter(res.runs.values()))
    assert r.error is None, r.error
    assert r.snapshots[0].cwnd == 12000
    assert [s.cwnd for s in r.snapshots[1::2]] == [8400, 5880, 4116, 3000]

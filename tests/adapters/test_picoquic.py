"""picoquic adapter (implementations/picoquic): expected windows from picoquic's own code.

picoquic's test suite (picoquictest/congestion_test.c) checks its controllers
end to end through simulated connections; the only notify-level checks are
cc_common_slow_start_increase_test (app-limited -> no slow-start growth,
otherwise growth by the delivered bytes) and cc_algo_reset_test (relative
values only).  So the numbers below are derived by hand from picoquic
1.1.53.0 (the aiopquic 0.6.1 sdist; "cubic.c:N" = picoquic/cubic.c etc.) and
each docstring shows the arithmetic.  Where the arithmetic is floating point,
`cubic_root` and `w_cubic` below transcribe cubic.c:83-130 operation by
operation, so the expected integers are exact.  Several tests pin the
adapter's calling order (ECN before the acknowledgement, loss detection
inside the ACK after the acked ranges), so a mis-driven stack fails them.

Constants: PICOQUIC_CWIN_INITIAL = 10 * 1536 = 15360, PICOQUIC_CWIN_MINIMUM =
2 * 1536 = 3072 (picoquic_internal.h:92-93), send_mtu = 1200 (the trace's
max_datagram_size).  Acked bytes exclude the 16-byte AEAD tag: 1184 per
datagram (frames.c:3072).  RTT samples are 10 ms unless noted.
"""
from __future__ import annotations


import pytest

from ccdiff.build import ensure_built
from ccdiff.errors import SetupError

from .common import run_events, sent

SPEC = "picoquic@1.1.53.0"
RENO = "picoquic-reno@1.1.53.0"
MDS = 1200
LEN = MDS - 16            # packet->length: what picoquic counts as acknowledged
BETA = 7.0 / 8.0          # PICOQUIC_CUBIC_BETA_ECN, cubic.c:28
C = 0.4                   # cubic.c:27


@pytest.fixture(scope="module", autouse=True)
def built():
    ensure_built(SPEC)


def run(events, spec=SPEC):
    return run_events(events, spec)


def cubic_root(x: float) -> float:
    """cubic.c:83-119: power-of-two start, three Newton steps (not an exact cbrt)."""
    v, y = 1.0, 1.0
    while v > x * 8:
        v /= 8
        y /= 2
    while v < x:
        v *= 8
        y *= 2
    for _ in range(3):
        y2 = y * y
        y3 = y2 * y
        y += (x - y3) / (3.0 * y2)
    return y


def w_cubic(w_max: float, k: float, elapsed_us: int) -> float:
    """cubic.c:122-130, in packets of send_mtu."""
    d = elapsed_us / 1000000.0 - k
    return C * (d * d * d) + w_max


def first_reduction(cwin: int):
    """cubic_enter_recovery on the first event (cubic.c:158-168, 189-201).

    W_max = cwin / mtu; fast convergence applies because W_last_max starts at
    UINT64_MAX / mtu (cubic.c:59-60); ssthresh = W_max * 7/8 * mtu; K from
    7/8 (cubic.c:138); cwnd = W_cubic(0) * mtu.  Returns (cwnd, ssthresh, W_max, K).
    """
    w_max = (cwin / MDS) * BETA
    ssthresh = int(w_max * BETA * MDS)
    k = cubic_root(w_max * (1.0 - BETA) / C)
    return int(w_cubic(w_max, k, 0) * MDS), ssthresh, w_max, k


def test_describe_and_options():
    with pytest.raises(SetupError, match="hystart"):
        run([sent(0, 0)], SPEC + ":hystart=on")
    with pytest.raises(SetupError, match="cubic\\|newreno"):
        run([sent(0, 0)], SPEC + ":cc=bbr")


def test_slow_start_round():
    """Slow start grows by the acknowledged bytes (cubic.c:259-263, cc_common.c:210-220).

    10 packets at t=0 acked in one ACK at 10 ms: 15360 + 10 * 1184 = 27200.
    The sends are not app-limited, so the path is marked cwin-blocked at their
    send time (sender.c:2601-2610) -- the "not app limited" branch of upstream's
    cc_common_slow_start_increase_test.  ssthresh stays UINT64_MAX (None).
    """
    snaps, findings = run([sent(0, i) for i in range(10)] + [dict(t=10_000, ev="ack", pns=[[0, 9]])])
    assert snaps[9].cwnd == 15360 and snaps[9].bytes_in_flight == 12000
    after = snaps[-1]
    assert after.cwnd == 15360 + 10 * LEN == 27200
    assert after.ssthresh is None and after.phase == "slow_start" and after.bytes_in_flight == 0
    assert findings == []


def test_slow_start_app_limited_no_growth():
    """App-limited sends: no growth (cubic.c:261, last_time_acked_data_frame_sent must be
    after last_sender_limited_time; cf. cc_common_slow_start_increase_test, "App limited")."""
    snaps, _ = run([sent(0, i, app_limited=True) for i in range(10)]
                   + [dict(t=10_000, ev="ack", pns=[[0, 9]])])
    assert snaps[-1].cwnd == 15360


def test_single_loss_is_filtered():
    """One loss does not reduce the window: the smoothed loss rate is 1/16 = 0.0625 < 0.15
    (cc_common.c:111-126, cc_common.h:30-32; cubic.c:317-321).  The ACK then grows slow
    start by 9 * 1184: 15360 + 10656 = 26016."""
    snaps, findings = run([sent(0, i) for i in range(10)]
                          + [dict(t=10_000, ev="lost", pns=[1]), dict(t=10_000, ev="ack", pns=[0, [2, 9]])])
    assert snaps[10].cwnd == 15360 and snaps[10].ssthresh is None
    assert snaps[11].cwnd == 15360 + 9 * LEN == 26016 and snaps[11].phase == "slow_start"
    assert {f.invariant: f.status for f in findings}.get("missing-reduction") == "deviation"


def loss_event():
    """12 packets at t=0; at 10 ms pns 1-3 are lost, 0 and 4-11 acked in one ACK."""
    return ([sent(0, i) for i in range(12)]
            + [dict(t=10_000, ev="lost", pns=[[1, 3]]), dict(t=10_000, ev="ack", pns=[0, [4, 11]])])


def test_loss_reduces_by_seven_eighths_twice():
    """Three losses in a row pass the filter: rate 0.0625, 0.1174, 0.1657 > 0.15 on pn 3
    (cc_common.c:116-126).  cubic_enter_recovery with cwin 15360: W_max = 12.8 -> fast
    convergence -> 11.2; ssthresh = int(11.2 * 7/8 * 1200) = 11760; K = cubic_root(3.5)
    = 1.5183 s; cwnd = int(W_cubic(0) * 1200) = 11759 (cubic_root is 3 Newton steps).
    The ACK that follows (9 * 1184 bytes) leaves cwnd at W_cubic(0): W_reno = 7680 + 10656 *
    1200 / 7680 = 9345 < 11759 (cubic.c:298-307)."""
    cwnd, ssthresh, w_max, k = first_reduction(15360)
    assert (cwnd, ssthresh) == (11759, 11760)
    snaps, _ = run(loss_event())
    lost, acked = snaps[12], snaps[13]
    for s in (lost, acked):
        assert (s.cwnd, s.ssthresh, s.phase) == (cwnd, ssthresh, "congestion_avoidance")
        assert s.epoch_start_us == 10_000
        assert s.w_max == pytest.approx(w_max * MDS) and s.k_us == pytest.approx(k * 1e6)
    assert lost.bytes_in_flight == 10800 and acked.bytes_in_flight == 0


def test_ecn_ce_is_signalled_before_the_acknowledgement():
    """ECN-CE bypasses the loss filter (cubic.c:319) and is notified while the ACK frame is
    decoded (frames.c:3994-4003), before the acknowledgement (frames.c:3129): the reduction
    uses cwin 15360, giving the same 11759 / 11760 as a loss; the ACK's Reno estimate
    (7680 + 11840 * 1200 / 7680 = 9530) stays below it.  Growing first would give ~20800."""
    cwnd, ssthresh, w_max, _ = first_reduction(15360)
    snaps, _ = run([sent(0, i) for i in range(10)]
                   + [dict(t=10_000, ev="ack", pns=[[0, 9]], ecn_ce=True)])
    after = snaps[-1]
    assert (after.cwnd, after.ssthresh, after.phase) == (cwnd, ssthresh, "congestion_avoidance")
    assert after.w_max == pytest.approx(w_max * MDS) and after.epoch_start_us == 10_000


def test_persistent_congestion_and_loss_found_by_the_ack():
    """Persistent congestion replays the losses as retransmission-timer losses; a later loss
    found by an ACK is checked against that ACK's largest packet number.

    ACK of pns 0-5 at 10 ms: 15360 + 6 * 1184 = 22464.  At 400 ms pns 6-9 are lost: as
    repeats, pn 8 passes the filter: W_max = 18.72 -> 16.38, ssthresh = 17199,
    cwnd = int(W_cubic(0) * 1200) = 17198.  Persistent congestion turns them into timeouts
    (loss_recovery.c:942): the first one collapses to PICOQUIC_CWIN_MINIMUM 3072 in slow
    start, keeping ssthresh 17199, epoch 400 ms, recovery_sequence 10 (cubic.c:181-186).
    pns 10-13 sent at 400 ms; at 405 ms 10-12 are lost and 13 acked.  The CCD_LOST alone
    (timer view, highest acked still 5) does nothing: 5 ms < srtt and 10 > 5 (cubic.c:320-321).
    Inside the ACK (frames.c:3101) the highest acked is 13 >= 10, so pn 10 re-enters recovery:
    W_max = 2.56 -> 2.24 (fast convergence), 2.24 * 7/8 * 1200 = 2352 < 3072, so cubic forgets
    ssthresh and restarts slow start at 3072 (cubic.c:169-179); the ACK then adds 1184: 4256."""
    events = ([sent(0, i) for i in range(6)]
              + [dict(t=10_000, ev="ack", pns=[[0, 5]])]
              # RFC 9002 §7.6.2: pns 6-9 sent after the sample and 190 ms apart (> 165 ms)
              + [sent(10_100, 6)] + [sent(200_100, i) for i in (7, 8, 9)]
              + [dict(t=400_000, ev="lost", pns=[[6, 9]]),
                 dict(t=400_000, ev="persistent_congestion")]
              + [sent(400_000, i) for i in range(10, 14)]
              + [dict(t=405_000, ev="lost", pns=[[10, 12]]), dict(t=405_000, ev="ack", pns=[13])])
    snaps, findings = run(events)
    assert snaps[10].cwnd == 15360 + 6 * LEN == 22464
    w_max = (22464 / MDS) * BETA
    assert (snaps[11].cwnd, snaps[11].ssthresh) == (17198, int(w_max * BETA * MDS)) == (17198, 17199)
    pc = snaps[12]
    assert (pc.cwnd, pc.ssthresh, pc.phase, pc.epoch_start_us) == (3072, 17199, "slow_start", 400_000)
    assert "persistent-congestion-ignored" not in {f.invariant for f in findings}
    lost, acked = snaps[17], snaps[18]
    assert (lost.cwnd, lost.ssthresh, lost.phase) == (3072, 17199, "slow_start")
    assert (acked.cwnd, acked.ssthresh, acked.phase) == (3072 + LEN, None, "slow_start")
    assert acked.epoch_start_us == 405_000 and acked.w_max == pytest.approx(2.56 * BETA * MDS)


def test_idle_moves_epoch_to_last_app_limited_time():
    """After an idle period the epoch moves to the last app-limited instant (cubic.c:291-293).

    loss_event() puts cubic in congestion avoidance at 10 ms (cwnd 11759, W_reno 9345).  Two
    app-limited packets at 20 ms, acked at 30 ms: no growth, the acked data was sent at the
    app-limited instant (cubic.c:287 needs last_time_acked_data_frame_sent >
    last_sender_limited_time); the still app-limited sender stamps 30 ms after the ACK
    (sender.c:1426).  5 s idle; two cwnd-limited packets at 5030 ms, acked at 5040 ms:
    start_of_epoch 10 ms < 30 ms -> 30 ms, so t = 5.01 s still contains the idle time and
    cwnd = int((0.4 * (5.01 - K)^3 + 11.2) * 1200) = 33873 (W_reno = 9345 + 2368 * 1200 /
    9345 = 9649 is smaller).  ccdiff reports this jump (idle-inflation / growth bounds)."""
    _, _, w_max, k = first_reduction(15360)
    events = (loss_event()
              + [sent(20_000, 12, app_limited=True), sent(20_000, 13, app_limited=True),
                 dict(t=30_000, ev="ack", pns=[[12, 13]]),
                 sent(5_030_000, 14), sent(5_030_000, 15), dict(t=5_040_000, ev="ack", pns=[[14, 15]])])
    snaps, _ = run(events)
    assert snaps[13].cwnd == snaps[16].cwnd == 11759
    assert snaps[16].epoch_start_us == 10_000
    after = snaps[-1]
    expected = int(w_cubic(w_max, k, 5_040_000 - 30_000) * MDS)
    assert expected == 33873
    assert after.cwnd == expected and after.epoch_start_us == 30_000
    assert after.phase == "congestion_avoidance"


def test_newreno_loss_and_growth():
    """picoquic NewReno (newreno.c): no loss filter.  The loss of pn 0 halves the window:
    ssthresh = cwin = 15360 / 2 = 7680, recovery_start = 10 ms (newreno.c:54-68).  The ACK of
    pns 1-9 then grows it in congestion avoidance: (9 * 1184 * 1200) / 7680 = 1665 ->
    9345 (newreno.c:111-113).  Slow start before that is the same as cubic's: 27200."""
    snaps, _ = run([sent(0, i) for i in range(10)]
                   + [dict(t=10_000, ev="lost", pns=[0]), dict(t=10_000, ev="ack", pns=[[1, 9]])], RENO)
    lost, acked = snaps[10], snaps[11]
    assert (lost.cwnd, lost.ssthresh, lost.recovery_start_us) == (7680, 7680, 10_000)
    assert (acked.cwnd, acked.ssthresh, acked.phase) == (7680 + (9 * LEN * MDS) // 7680, 7680,
                                                        "congestion_avoidance")
    assert acked.cwnd == 9345
    snaps, _ = run([sent(0, i) for i in range(10)] + [dict(t=10_000, ev="ack", pns=[[0, 9]])], RENO)
    assert snaps[-1].cwnd == 27200 and snaps[-1].ssthresh is None


@pytest.mark.parametrize("delay_us,restored", [(550_000, True), (1_450_000, False)])
def test_spurious_repeat_only_while_picoquic_keeps_the_lost_packet(delay_us, restored):
    """picoquic notifies spurious_repeat only for a lost packet still in its retransmitted
    queue (frames.c:2643-2715), which forgets packets sent more than 1 s
    (PICOQUIC_SPURIOUS_RETRANSMIT_DELAY_MAX) before the latest acknowledged one, after each
    ACK frame's ranges (frames.c:2728-2747, 3964).  pn 1 is lost and ECN-CE sends cubic to
    congestion avoidance; pn 5 is sent delay_us later and acknowledged, then pn 1.  Sent
    0.55 s after pn 1 it keeps pn 1 (cubic_correct_spurious restores slow start,
    cubic.c:213-236); sent 1.45 s after, picoquic has forgotten pn 1: nothing changes."""
    events = ([sent(0, i) for i in range(5)]
              + [dict(t=50_000, ev="lost", pns=[1]), dict(t=50_000, ev="ack", pns=[0, [2, 4]], ecn_ce=True),
                 sent(50_000 + delay_us, 5), dict(t=100_000 + delay_us, ev="ack", pns=[5]),
                 dict(t=150_000 + delay_us, ev="ack", pns=[1])])
    snaps, _ = run(events)
    before, after = snaps[-2], snaps[-1]
    assert before.phase == "congestion_avoidance" and before.ssthresh == 11760
    if restored:
        assert after.phase == "slow_start" and after.ssthresh is None and after.cwnd == 16544
    else:
        assert (after.cwnd, after.ssthresh, after.phase) == (before.cwnd, 11760, "congestion_avoidance")


# The files of picoquic's tree the adapter compiles (implementations/picoquic/build.sh, adapter.c).
CC_FILES = {"picoquic/cubic.c", "picoquic/newreno.c", "picoquic/cc_common.c", "picoquic/cc_common.h",
            "picoquic/pacing.c"}
# aiopquic's patches already present in its vendored tree (implementations/picoquic/provenance.toml).
APPLIED_IN_SDIST = {"picoquic-reset-at-ack-delete.patch"}


def test_aiopquic_patches_leave_the_controller_code_as_upstream_wrote_it(tmp_path):
    """The aiopquic sdist vendors picoquic and keeps its own patches apart (patches/*.patch);
    one of them is nevertheless already in the vendored tree (it reverses cleanly).  What
    ccdiff calls picoquic's controller is upstream's only if no patch touches the files the
    adapter compiles: none may touch the congestion-control files, and frames.c (compiled for
    picoquic_estimate_max_path_bandwidth alone) only outside that function."""
    import os
    import re
    import subprocess
    from ccdiff.build import fetch, unpack
    from ccdiff.stacks import load_recipes
    pin = load_recipes()["picoquic"].versions["1.1.53.0"]
    unpack(fetch(pin["url"], pin["sha256"]), tmp_path)
    sdist = tmp_path / pin["subdir"].split("/")[0]
    tree = tmp_path / pin["subdir"]
    patches = sorted((sdist / "patches").glob("*.patch"))
    assert patches, "aiopquic ships its patches in patches/"
    frames = (tree / "picoquic" / "frames.c").read_text(errors="replace").splitlines()
    start = next(i for i, line in enumerate(frames, 1) if re.match(r"\w.*picoquic_estimate_max_path_bandwidth\(", line))
    end = next(i for i, line in enumerate(frames[start:], start + 1) if line.startswith("}"))
    # Outside any repository: inside one, git apply silently skips paths outside the cwd.
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp_path))
    applied = {p.name for p in patches
               if subprocess.run(["git", "apply", "--check", "-R", str(p)], cwd=tree, env=env,
                                 capture_output=True).returncode == 0}
    assert applied == APPLIED_IN_SDIST, "update provenance.toml and APPLIED_IN_SDIST"
    for patch in patches:
        text = patch.read_text(errors="replace")
        touched = set(re.findall(r"^\+\+\+ b/(\S+)", text, re.M))
        assert touched, f"{patch.name}: no file found in it"
        assert not touched & CC_FILES, f"{patch.name} patches the controller: {sorted(touched & CC_FILES)}"
        for section in re.split(r"^diff --git ", text, flags=re.M):
            if "+++ b/picoquic/frames.c" not in section:
                continue
            for first, length in re.findall(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", section, re.M):
                lo, hi = int(first), int(first) + int(length or 1) - 1
                assert hi < start or lo > end, f"{patch.name} changes frames.c:{lo}-{hi}, inside " \
                                               f"picoquic_estimate_max_path_bandwidth ({start}-{end})"

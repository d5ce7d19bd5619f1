"""Linux tcp_cubic adapter (implementations/linux): numbers from tcp_cubic.c's own arithmetic.

The kernel tarball ships no unit test of tcp_cubic (its only user-space copy,
tools/testing/selftests/bpf/progs/bpf_cubic.c, asserts no window), so the
expected values are derived by hand from net/ipv4/tcp_cubic.c (6.12.117 and
6.1.176 have the same code) and checked against RFC 9438's real-valued
formulas, in segments:

  beta = 717/1024: ssthresh = max(cwnd * 717 / 1024, 2) (cubictcp_recalc_ssthresh)
  cube_factor = 2^40 / (bic_scale * 10) = 2^40 / 410 (cubictcp_register)
  bic_K = cubic_root(cube_factor * (W_max - cwnd)) in 1/1024 s (bictcp_update)
  K (RFC 9438 §4.2 eq. 2) = cbrt((W_max - cwnd_epoch) / C), C = 0.4

`cubic_root` below transcribes tcp_cubic.c's table + one Newton step line by
line, so the expected K is exact; the RFC value is within Linux's stated
0.195% average error plus C = 410/1024 instead of 0.4.

HZ is 250 (Debian's CONFIG_HZ_250): a jiffy is 4000 µs; the adapter's jiffy
clock ticks at multiples of 4000 µs of trace time (whatever the clock base), and
epoch times come back as the start of their jiffy.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from ccdiff.build import ensure_built
from ccdiff.paths import build_dir, implementations_dir

from .common import run_events, sent

SPEC = "linux@6.12"
OLD = "linux@6.1"
RENO = "linux-reno@6.12"
MDS = 1200
HZ = 250


@pytest.fixture(scope="module", autouse=True)
def built():
    ensure_built(SPEC)
    ensure_built(OLD)


def cubic_root(a: int) -> int:
    """tcp_cubic.c cubic_root(): table lookup, then one Newton-Raphson step, in u32/u64."""
    v = [0, 54, 54, 54, 118, 118, 118, 118, 123, 129, 134, 138, 143, 147, 151, 156,
         157, 161, 164, 168, 170, 173, 176, 179, 181, 185, 187, 190, 192, 194, 197, 199,
         200, 202, 204, 206, 209, 211, 213, 215, 217, 219, 221, 222, 224, 225, 227, 229,
         231, 232, 234, 236, 237, 239, 240, 242, 244, 245, 246, 248, 250, 251, 252, 254]
    b = a.bit_length()                      # fls64
    if b < 7:
        return (v[a] + 35) >> 6
    b = ((b * 84) >> 8) - 1
    shift = a >> (b * 3)
    x = (((v[shift] + 10) << b) & 0xFFFFFFFF) >> 6
    x = (2 * x + (a // (x * (x - 1)))) & 0xFFFFFFFF
    return ((x * 341) & 0xFFFFFFFF) >> 10


CUBE_FACTOR = (1 << 40) // 410             # cubictcp_register: 2^40 / (41 * 10)


def jiffy(t_us: int) -> int:
    """The jiffy (counted from trace time 0) holding trace time t."""
    return t_us * HZ // 1_000_000


def jiffy_start_trace_us(t_us: int) -> int:
    """The trace time at which the jiffy holding trace time t began."""
    return jiffy(t_us) * 1_000_000 // HZ


def loss_then_first_ca_ack(spec=SPEC):
    """IW10 sent at t=0; pn 0 lost at 10 ms, 1-9 acked; pn 10 (its retransmission) sent,
    acked at 20 ms: Recovery ends (snd_una reaches high_seq), the first CA ACK starts the
    epoch."""
    events = [sent(0, pn) for pn in range(10)]
    events += [dict(t=10000, ev="lost", pns=[0]),
               dict(t=10000, ev="ack", pns=[[1, 9]], ack_delay=0),
               sent(10000, 10),
               dict(t=20000, ev="ack", pns=[10], ack_delay=0)]
    return run_events(events, spec)


@pytest.mark.parametrize("spec", [SPEC, OLD])
def test_loss_beta_and_w_max(spec):
    """cubictcp_recalc_ssthresh: last_max_cwnd = 10 (no fast convergence before a first
    W_max), ssthresh = max(10 * 717 / 1024, 2) = 7 segments (RFC 9438 §4.6: 10 x 0.7 = 7)."""
    snaps, _ = loss_then_first_ca_ack(spec)
    lost = snaps[10]
    assert lost.cwnd == 7 * MDS and lost.ssthresh == 7 * MDS
    assert lost.w_max == 10 * MDS
    assert lost.phase == "recovery" and lost.recovery_start_us == 10000
    # The ACK of 1-9 does not end Recovery: the hole of pn 0 holds snd_una below high_seq.
    assert snaps[11].phase == "recovery" and snaps[11].cwnd == 7 * MDS


@pytest.mark.parametrize("spec", [SPEC, OLD])
def test_k_from_cubic_root_matches_rfc(spec):
    """bictcp_update at the first CA ACK (t = 20 ms): epoch_start = that jiffy,
    bic_K = cubic_root(2^40/410 * (10 - 7)) = cubic_root(8045207031) = 2003 (1/1024 s;
    the real cube root is 2003.76) = 1.956055 s.  RFC 9438 §4.2: K = cbrt((10 - 7) / 0.4)
    = cbrt(7.5) = 1.957434 s (0.07% apart: C = 410/1024 and the truncation)."""
    snaps, findings = loss_then_first_ca_ack(spec)
    first = snaps[13]
    bic_k = cubic_root(CUBE_FACTOR * 3)
    assert bic_k == 2003
    assert first.k_us == pytest.approx(2003 * 1e6 / 1024)
    assert abs(first.k_us / 1e6 - 7.5 ** (1 / 3)) < 0.002 * 7.5 ** (1 / 3)
    assert first.epoch_start_us == jiffy_start_trace_us(20000)
    assert first.phase == "congestion_avoidance" and first.cwnd == 7 * MDS
    assert not [f for f in findings if f.status == "violation"]


def w_target(t_jiffies: int, delay_min_us: int, bic_k: int, origin: int) -> int:
    """bictcp_update's bic_target, in segments, t_jiffies after the epoch started."""
    t = t_jiffies + -(-delay_min_us // (1_000_000 // HZ))   # usecs_to_jiffies rounds up
    t = (t << 10) // HZ
    offs = abs(bic_k - t)
    delta = (410 * offs ** 3) >> 40
    return origin - delta if t < bic_k else origin + delta


def test_cubic_growth_near_k():
    """bic_target = W_max -/+ C(t-K)^3 and cnt = cwnd / (target - cwnd) after the epoch of
    test_k_..., with an ACK of 2 packets every 5 ms (RTT 10 ms) up to 3 s: the
    bic_target at each ACK's jiffy decides cnt, tcp_cong_avoid_ai the growth.  The replica below recomputes cnt with tcp_cubic.c's own
    integer steps, including tcp_friendliness (beta_scale = 15), and the adapter must
    produce the same window after every ACK; at t = 3 s it is at W_max = 10 or above,
    against RFC 9438's W_cubic(3 s) = 0.4 (3 - 1.957)^3 + 10 = 10.45 segments."""
    events = [sent(0, pn) for pn in range(10)]
    events += [dict(t=10000, ev="lost", pns=[0]),
               dict(t=10000, ev="ack", pns=[[1, 9]], ack_delay=0),
               sent(10000, 10),
               dict(t=20000, ev="ack", pns=[10], ack_delay=0)]
    # Two packets every 5 ms, each pair acked 10 ms later: something stays in flight at
    # every send, so no CA_EVENT_TX_START moves the epoch (see the idle tests).
    events += [sent(20000, 11), sent(20000, 12), sent(25000, 13), sent(25000, 14)]
    pn, t = 11, 30000
    acks = []
    while t <= 3_000_000:
        events.append(dict(t=t, ev="ack", pns=[pn, pn + 1], ack_delay=0))
        acks.append((len(events) - 1, t))
        events += [sent(t, pn + 4), sent(t, pn + 5)]
        pn += 2
        t += 5000
    snaps, _ = run_events(events, SPEC)

    # Replica of bictcp_update + tcp_cong_avoid_ai from the first CA ACK on.
    epoch = jiffy(20000)
    bic_k, origin, delay_min = 2003, 10, 10000
    cwnd, cnt_acc, ack_cnt, tcp_cwnd = 7, 1, 1, 7    # the first CA ACK acked one packet
    last_cwnd, last_time = 7, epoch
    first_t = w_target(0, delay_min, bic_k, origin)
    cnt = 7 // (first_t - 7) if first_t > 7 else 100 * 7
    cnt = max(cnt, 2)
    for i, at in acks:
        now = jiffy(at)
        ack_cnt += 2
        if not (last_cwnd == cwnd and now - last_time <= HZ // 32):
            if now != last_time:
                last_cwnd, last_time = cwnd, now
                target = w_target(now - epoch, delay_min, bic_k, origin)
                cnt = cwnd // (target - cwnd) if target > cwnd else 100 * cwnd
            delta = (cwnd * 15) >> 3
            while ack_cnt > delta:
                ack_cnt -= delta
                tcp_cwnd += 1
            if tcp_cwnd > cwnd:
                cnt = min(cnt, cwnd // (tcp_cwnd - cwnd))
            cnt = max(cnt, 2)
        if cnt_acc >= cnt:
            cnt_acc, cwnd = 0, cwnd + 1
        cnt_acc += 2
        if cnt_acc >= cnt:
            cwnd += cnt_acc // cnt
            cnt_acc -= (cnt_acc // cnt) * cnt
        assert snaps[i].cwnd == cwnd * MDS, (at, snaps[i].cwnd, cwnd)
    # The ACK clock is fixed (4 packets per RTT whatever cwnd is), so tcp_friendliness
    # leads: tcp_cwnd gains one segment per (cwnd * 15 >> 3) packets acked (RFC 9438 §4.3's
    # W_est with alpha = 3(1-0.7)/(1+0.7)), caps cnt at cwnd / (tcp_cwnd - cwnd), and the
    # window ends at 36 segments, far above W_cubic(3 s) = 0.4 (3 - 1.957)^3 + 10 = 10.45.
    assert cwnd == 36
    assert 0.4 * (3.0 - 7.5 ** (1 / 3)) ** 3 + 10 < 11


def clamp_events(gap_us):
    """The run of loss_then_first_ca_ack (lsndtime 10 ms, epoch 20 ms, pipe empty at
    20 ms), then one send at 20 ms + gap."""
    events = [sent(0, pn) for pn in range(10)]
    events += [dict(t=10000, ev="lost", pns=[0]),
               dict(t=10000, ev="ack", pns=[[1, 9]], ack_delay=0),
               sent(10000, 10),
               dict(t=20000, ev="ack", pns=[10], ack_delay=0),
               sent(20000 + gap_us, 11)]
    return events


def idle_events(gap_us):
    """Epoch at 20 ms (first CA ACK), pn 11 sent at 20 ms, pn 12 at 25 ms (the last send),
    acked at 30 and 35 ms (the pipe empties at 35 ms), then pn 13 at 35 ms + gap."""
    events = clamp_events(0)
    events += [sent(25000, 12),
               dict(t=30000, ev="ack", pns=[11], ack_delay=0),
               dict(t=35000, ev="ack", pns=[12], ack_delay=0),
               sent(35000 + gap_us, 13)]
    return events


def test_idle_tx_start_shifts_epoch_by_time_since_last_send():
    """cubictcp_cwnd_event(CA_EVENT_TX_START) on the first send with nothing in flight:
    epoch_start += now - lsndtime, in jiffies, clamped to now.  The last send was pn 12
    at 25 ms, the pipe emptied at 35 ms; the send at 1.035 s shifts the epoch by
    jiffy(1.035 s) - jiffy(25 ms) = 258 - 6 = 252 jiffies (1.008 s): the idle time
    measured from the last send.  RFC 9438 §4.2 (and the oracle) exclude the
    1.000 s during which the pipe was empty."""
    events = idle_events(1_000_000)
    snaps, _ = run_events(events, SPEC)
    before, after = snaps[-2], snaps[-1]
    shift_jiffies = jiffy(1_035_000) - jiffy(25000)
    assert shift_jiffies == 252
    assert after.epoch_start_us - before.epoch_start_us == shift_jiffies * 4000
    assert after.epoch_start_us < 1_035_000
    assert after.cwnd == before.cwnd
    oracle, _ = run_events(events, "oracle")
    assert oracle[-1].epoch_start_us - oracle[-2].epoch_start_us == 1_000_000


def test_idle_shift_clamped_to_now():
    """c2e7204d180f ("tcp_cubic: do not set epoch_start in the future"): the epoch started
    (20 ms) after the last send (10 ms); a send 5 ms after the pipe emptied would move it
    by now - lsndtime = 15 ms, to 35 ms, after now (25 ms): it is clamped to now's jiffy."""
    snaps, findings = run_events(clamp_events(5000), SPEC)
    assert snaps[-1].epoch_start_us == jiffy_start_trace_us(25000)
    assert snaps[-1].epoch_start_us <= 25000
    assert not [f for f in findings if f.invariant == "future-recovery-start"]


def test_persistent_congestion_is_tcp_enter_loss():
    """tcp_enter_loss after a recovery that already reduced: no second ssthresh (high_seq
    not yet acked), cwnd = packets in flight + 1 = 1 segment (everything marked lost),
    cubictcp_state(TCP_CA_Loss) resets the epoch and W_max."""
    events = [sent(0, pn) for pn in range(10)]
    events += [dict(t=10000, ev="ack", pns=[0], ack_delay=0), sent(11000, 10), sent(300000, 11),
               dict(t=2000000, ev="lost", pns=[[1, 11]]),
               dict(t=2000000, ev="persistent_congestion")]
    snaps, _ = run_events(events, SPEC)
    # the ACK of pn 0 grew IW10 to 11 (slow start); 11 * 717 / 1024 = 7
    assert snaps[-2].ssthresh == 7 * MDS and snaps[-2].cwnd == 7 * MDS
    assert snaps[-1].cwnd == MDS and snaps[-1].ssthresh == 7 * MDS
    assert snaps[-1].w_max is None and snaps[-1].epoch_start_us is None


def test_reno_halves_and_counts_packets():
    """tcp_reno_ssthresh: max(cwnd >> 1, 2): 10 -> 5 segments; slow start adds one segment
    per packet acknowledged whatever its size (tcp_slow_start), here 600-byte packets."""
    events = [dict(t=0, ev="sent", pn=pn, bytes=600) for pn in range(4)]
    events += [dict(t=10000, ev="ack", pns=[[0, 3]], ack_delay=0)]
    snaps, _ = run_events(events, RENO)
    assert snaps[-1].cwnd == 14 * MDS
    events = [sent(0, pn) for pn in range(10)] + [dict(t=10000, ev="lost", pns=[0])]
    snaps, _ = run_events(events, RENO)
    assert snaps[-1].cwnd == 5 * MDS and snaps[-1].ssthresh == 5 * MDS


def test_options():
    from ccdiff.errors import SetupError
    from ccdiff.native import AdapterError
    for bad in ("linux:hz=1024", "linux:idle_fix=on", "linux:cc=bbr"):
        with pytest.raises((AdapterError, SetupError, ValueError)) as exc:
            run_events([sent(0, 0)], bad)
        assert bad.split(":")[1].split("=")[0] in str(exc.value)
    # hz=1000: the epoch starts at the first CA ACK's 1 ms jiffy (20 ms), with hz=100 at
    # its 10 ms one; hz=250 at its 4 ms one (20 ms as well).
    events = clamp_events(0)[:-1]
    events[-1] = dict(events[-1], t=21500)
    assert run_events(events, "linux:hz=1000")[0][-1].epoch_start_us == 21000
    assert run_events(events, "linux:hz=100")[0][-1].epoch_start_us == 20000
    assert run_events(events, "linux:hz=300")[0][-1].epoch_start_us == 20000
    assert run_events(events, SPEC)[0][-1].epoch_start_us == 20000


MUTATION = (
    "  if (in_flight(c) == 0 && c->ops->cwnd_event) c->ops->cwnd_event(SK(c), CA_EVENT_TX_START);\n",
    "  /* MUTATION: no CA_EVENT_TX_START */\n",
)


def test_mutation_without_tx_start_fails(tmp_path):
    """A broken adapter that never delivers CA_EVENT_TX_START (the idle hook) fails
    test_idle_tx_start_shifts_epoch_by_time_since_last_send: its epoch stays at 20 ms.
    Built by build.sh from a copy of implementations/linux against the real build's
    extracted kernel tree."""
    library = build_without_tx_start(tmp_path)
    if library is None:
        pytest.skip("needs the linux@6.12 build's extracted tree and gcc")
    check = (
        "import json, sys\n"
        "from ccdiff.native import load_library\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from adapters import test_linux as t\n"
        "from ccdiff import stacks\n"
        "from pathlib import Path\n"
        "real = stacks.StackRecipe.library\n"
        "stacks.StackRecipe.library = lambda self, v: Path(sys.argv[1]) if self.name == 'linux' else real(self, v)\n"
        "# the mutant is not the library linux@6.12's build-info.json records: that is the point\n"
        "stacks._refuse_stale = lambda target: None\n"
        "import ccdiff.build\n"
        "ccdiff.build.ensure_built = lambda spec: None\n"
        "s, _ = t.run_events(t.idle_events(1_000_000), 'linux@6.12')\n"
        "print(json.dumps({'shift': s[-1].epoch_start_us - s[-2].epoch_start_us}))\n")
    res = subprocess.run([sys.executable, "-c", check, str(library),
                          os.path.dirname(os.path.dirname(__file__))],
                         env=dict(os.environ, PYTHONPATH=str(implementations_dir().parent)),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    shift = json.loads(res.stdout.strip().splitlines()[-1])["shift"]
    # The real adapter shifts by 252 jiffies (1008000 µs); the mutant not at all, so the
    # idle test's assertion fails on it.
    assert shift == 0
    with pytest.raises(AssertionError):
        assert shift == 252 * 4000


def build_without_tx_start(tmp_path):
    """The adapter with CA_EVENT_TX_START never delivered (MUTATION), built by build.sh from a
    copy of implementations/linux against the real build's extracted kernel tree; None when that
    tree or gcc is missing."""
    tree = build_dir() / "linux" / "6.12" / "work" / "kernel"
    kernel = next(tree.glob("linux-source-*"), None) if tree.is_dir() else None
    if kernel is None or shutil.which("gcc") is None:
        return None
    home = tmp_path / "home" / "implementations"
    shutil.copytree(implementations_dir() / "include", home / "include")
    shutil.copytree(implementations_dir() / "linux", home / "linux")
    adapter = home / "linux" / "adapter.c"
    src = adapter.read_text()
    assert src.count(MUTATION[0]) == 1
    adapter.write_text(src.replace(MUTATION[0], MUTATION[1]))
    out = tmp_path / "out"
    subprocess.run(["bash", str(home / "linux" / "build.sh"), str(kernel), str(out)], check=True,
                   env=dict(os.environ, CCDIFF_INCLUDE=str(home / "include"), CCDIFF_STACK_VERSION="6.12"),
                   capture_output=True, timeout=300)
    return out / "libccdiff_adapter.so"


def test_tx_start_does_not_hold_the_window_on_death_spiral(tmp_path, monkeypatch):
    """Linux's stay near the floor on death-spiral is not the idle hook's doing (issue #30): without
    CA_EVENT_TX_START the epoch differs at some events (the hook does shift it by the time since
    the last send), but every window, and so the closed-loop trace, is byte-identical.  At 2-3
    segments the window is driven by the integer Reno-friendly estimate (tcp_cwnd, one whole
    segment ahead before it caps cnt) and the HZ/32 recompute throttle; the integer cubic term
    of a W_max of 2-3 segments adds nothing for about a second, wherever the epoch is
    (bictcp_update, tcp_cubic.c:214-338).  Seed 3 is Linux's slowest (7 round trips, 70 ms)."""
    from ccdiff import stacks
    from ccdiff.replay import replay
    from ccdiff.sim import load_scenario, simulate
    ensure_built(SPEC)
    library = build_without_tx_start(tmp_path)
    if library is None:
        pytest.skip("needs the linux@6.12 build's extracted tree and gcc")
    scenario = load_scenario("death-spiral")
    real = simulate(scenario, SPEC, 3)
    original = stacks.StackRecipe.library
    with monkeypatch.context() as patch:
        patch.setattr(stacks.StackRecipe, "library",
                      lambda self, v: library if self.name == "linux" else original(self, v))
        # the mutant is not the library the build recorded (build-info.json's sha256): on purpose
        patch.setattr(stacks, "_refuse_stale", lambda target: None)
        mutant = simulate(scenario, SPEC, 3)
        without = replay(real.trace, [SPEC], check=False).runs[SPEC].snapshots
    with_hook = replay(real.trace, [SPEC], check=False).runs[SPEC].snapshots
    assert mutant.trace_text() == real.trace_text()
    assert [s.cwnd for s in without] == [s.cwnd for s in with_hook]
    assert sum(a.epoch_start_us != b.epoch_start_us for a, b in zip(without, with_hook)) > 0


def test_6_1_and_6_12_behave_the_same_on_the_examples():
    """No behavioural difference between the two kernels (docs/linux-cross-check.md): the
    controller code differs only in BTF annotations, and every snapshot of both examples is
    the same."""
    from ccdiff.paths import project_root
    from ccdiff.replay import replay
    from ccdiff.trace import load_trace
    for name in ("death-spiral.jsonl", "idle-restart.jsonl"):
        result = replay(load_trace(str(project_root() / "examples" / name)), [OLD, SPEC], check=False)
        old, new = result.runs[OLD].snapshots, result.runs[SPEC].snapshots
        assert len(old) == len(new) > 100
        assert old == new, name


def test_slow_start_after_idle_restarts_the_window():
    """slow_start_after_idle=on (net.ipv4.tcp_slow_start_after_idle, Linux's default 1):
    IW10 acknowledged grows to 20 segments; after 2 s with nothing outstanding, queuing data
    runs tcp_cwnd_restart: RTO = 10 ms + max(4 x 5 ms, 200 ms) = 53 jiffies, the window is
    halved once per RTO elapsed while above min(IW10, cwnd) = 10: 20 -> 10; ssthresh
    max(infinite, 3/4 cwnd) stays infinite.  Off (ccdiff's default), the window stays 20."""
    events = [sent(0, pn) for pn in range(10)]
    events += [dict(t=10000, ev="ack", pns=[[0, 9]], ack_delay=0), sent(2_010_000, 10)]
    on, _ = run_events(events, "linux:slow_start_after_idle=on")
    off, _ = run_events(events, SPEC)
    assert on[-2].cwnd == off[-2].cwnd == 20 * MDS
    assert on[-1].cwnd == 10 * MDS and on[-1].ssthresh is None
    assert off[-1].cwnd == 20 * MDS

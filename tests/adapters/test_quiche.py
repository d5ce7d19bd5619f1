"""The quiche adapter drives quiche's own controller the way quiche does.

Each test re-creates one of quiche's own unit tests (src/recovery/congestion/
cubic.rs and reno.rs, `mod tests`, driven there by test_sender.rs) as a ccdiff
trace and asserts the cwnd values that upstream test asserts.  If the adapter
called the hooks in another order, with another bytes_in_flight, or skipped
checkpoint/rollback, these values would change.

Upstream's TestSender injects RTT samples with update_rtt(); the adapter runs
quiche's own RttStats on the trace's ACKs, so the traces below time their
first ACK to produce the same sample (noted where it matters).  TestSender
keeps quiche's own app-limited flag (congestion/mod.rs:201), hence
`app_limited=cc`, and has HyStart++ off unless the test says otherwise.
"""
from __future__ import annotations

import json
from collections import deque

import pytest

from ccdiff.build import ensure_built
from ccdiff.errors import SetupError
from ccdiff.replay import replay
from ccdiff.paths import project_root
from ccdiff.trace import load_trace, parse_trace_text

MDS = 1200
MS = 1000
VERSIONS = ["0.26.0", "0.30.0"]
TEST_SENDER = "hystart=off,app_limited=cc"   # test_sender(): TestSender::new(algo, false)


@pytest.fixture(scope="module", autouse=True)
def built():
    for version in VERSIONS:
        ensure_built(f"quiche@{version}")


class Sender:
    """quiche's TestSender (test_sender.rs) writing a trace: FIFO acks and losses."""

    def __init__(self):
        self.lines = [json.dumps({"ccdiff_trace": 1, "max_datagram_size": MDS})]
        self.t = 0
        self.pn = 0
        self.unacked = deque()
        self.marks = {}

    def send(self, n=1):
        for _ in range(n):
            self._emit(ev="sent", pn=self.pn, bytes=MDS)
            self.unacked.append(self.pn)
            self.pn += 1
        return self

    def advance(self, us):
        self.t += us
        return self

    def ack(self, n, mark=None):
        """ack_n_packets(n): one ACK frame for the n oldest unacked packets."""
        pns = [self.unacked.popleft() for _ in range(n)]
        return self._emit(mark, ev="ack", pns=pns, ack_delay=0)

    def lose(self, n=1, mark=None):
        """lose_n_packets(n): the n oldest unacked packets are declared lost."""
        pns = [self.unacked.popleft() for _ in range(n)]
        return self._emit(mark, ev="lost", pns=pns)

    def _emit(self, mark=None, **event):
        self.lines.append(json.dumps({"t": self.t, **event}))
        if mark:
            self.marks[mark] = len(self.lines) - 2  # index among events
        return self

    def run(self, spec):
        """Snapshots by mark name, plus the full list under None."""
        result = replay(parse_trace_text("\n".join(self.lines)), [spec], check=False)
        run = next(iter(result.runs.values()))
        assert run.error is None, run.error
        snaps = {name: run.snapshots[i] for name, i in self.marks.items()}
        snaps[None] = run.snapshots
        return snaps


def cubic(version, options=TEST_SENDER):
    return f"quiche@{version}:{options}" if options else f"quiche@{version}"


# --- cubic.rs tests (both versions) -------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_cubic_slow_start(version):
    """cubic.rs `cubic_slow_start`: one ACK of a full window grows cwnd by one datagram."""
    s = Sender().send(10).advance(MS).ack(1, mark="ack")   # upstream: no time passes
    assert s.run(cubic(version))["ack"].cwnd == 12000 + MDS


@pytest.mark.parametrize("version", VERSIONS)
def test_cubic_slow_start_multi_acks(version):
    """cubic.rs `cubic_slow_start_multi_acks`: one ACK frame of 3 packets grows by 3 datagrams."""
    s = Sender().send(10).advance(MS).ack(3, mark="ack")
    assert s.run(cubic(version))["ack"].cwnd == 12000 + 3 * MDS


@pytest.mark.parametrize("version", VERSIONS)
def test_cubic_congestion_event(version):
    """cubic.rs `cubic_congestion_event`: a loss multiplies cwnd by BETA_CUBIC = 0.7."""
    snap = Sender().send(1).lose(1, mark="loss").run(cubic(version))["loss"]
    assert snap.cwnd == 8400 and snap.ssthresh == 8400
    assert snap.phase == "recovery" and snap.recovery_start_us == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_cubic_congestion_avoidance(version):
    """cubic.rs `cubic_congestion_avoidance`: after the loss, only packets sent after
    the recovery start grow cwnd, and 6 ACKs of them add exactly one datagram.
    (update_rtt(100 ms) upstream = the first ACK here comes 100 ms after the send.)"""
    s = Sender().send(10).advance(100 * MS).lose(1, mark="loss")
    s.ack(1).advance(100 * MS).ack(7, mark="recovery-acks")       # upstream: ack_n_packets(8)
    s.send(8).advance(100 * MS).ack(1, mark="old-ack")
    for i in range(6):
        s.ack(1, mark=f"ca{i}").advance(100 * MS)
    snaps = s.run(cubic(version))
    assert snaps["loss"].cwnd == 8400
    assert snaps["recovery-acks"].cwnd == 8400
    assert snaps["old-ack"].cwnd == 8400
    assert snaps["ca0"].cwnd == 8400
    assert snaps["ca5"].cwnd == 8400 + MDS     # (reached on the 5th ACK already)
    assert snaps["ca5"].phase == "congestion_avoidance"


@pytest.mark.parametrize("version", VERSIONS)
def test_cubic_fast_convergence(version):
    """cubic.rs `cubic_fast_convergence`: a second loss before regaining W_max sets
    W_max = cwnd * (1 + BETA_CUBIC) / 2 and cwnd = cwnd * 0.7."""
    s = Sender().send(10).lose(1, mark="loss1")
    s.advance(100 * MS).ack(8)                 # RTT sample 100 ms = update_rtt(rtt)
    s.send(7).ack(1).advance(100 * MS)
    for _ in range(6):
        s.ack(1, mark="ca")
    s.lose(1, mark="loss2")
    snaps = s.run(cubic(version))
    assert snaps["loss1"].cwnd == 8400
    assert snaps["ca"].cwnd == 8400 + MDS
    assert snaps["loss2"].cwnd == int(9600 * 0.7)
    assert snaps["loss2"].w_max == 9600 * (1.0 + 0.7) / 2.0


@pytest.mark.parametrize("version", VERSIONS)
def test_cubic_spurious_congestion_event(version):
    """cubic.rs `cubic_spurious_congestion_event`: a congestion event from slow start
    is kept; a later one with fewer than MIN_ROLLBACK_THRESHOLD losses is rolled
    back (cwnd restored) on the first ACK of a packet sent after it.  Upstream
    fabricates the ACKed/lost packets' send times; here real packets are sent then."""
    s = Sender().send(10).lose(1, mark="loss1")
    s.advance(100 * MS).send(2)                  # pkts 10, 11: sent after recovery start
    s.unacked.rotate(2)                          # ack/lose those two, not the old ones
    s.advance(5 * MS).ack(1, mark="ack-from-ss")
    s.advance(5 * MS).lose(1, mark="loss2")
    s.advance(90 * MS).send(1)
    s.unacked.rotate(1)
    s.advance(10 * MS).ack(1, mark="rollback")
    snaps = s.run(cubic(version))
    assert snaps["loss1"].cwnd == 8400
    assert snaps["ack-from-ss"].cwnd == 8400     # "This is from slow start, no rollback."
    assert snaps["loss2"].cwnd == int(8400 * 0.7)
    assert snaps["rollback"].cwnd == 8400        # "cwnd is rolled back to the previous one."
    assert snaps["rollback"].recovery_start_us == 0   # prior epoch restored


@pytest.mark.parametrize("version", VERSIONS)
def test_cubic_no_rollback_at_min_rollback_threshold(version):
    """cubic.rs `cubic_spurious_congestion_event`, counter-case: with
    MIN_ROLLBACK_THRESHOLD (2) packets lost since the checkpoint the event is
    not treated as spurious (cubic.rs:239-247 counts Congestion.lost_count, which
    recovery.rs:568 advances after each congestion event)."""
    s = Sender().send(10).lose(1)
    s.advance(100 * MS).send(3)
    s.unacked.rotate(3)
    s.advance(5 * MS).ack(1)
    s.advance(5 * MS).lose(2, mark="loss2")
    s.advance(90 * MS).send(1)
    s.unacked.rotate(1)
    s.advance(10 * MS).ack(1, mark="no-rollback")
    snaps = s.run(cubic(version))
    assert snaps["loss2"].cwnd == 5880
    assert snaps["no-rollback"].cwnd == 5880
    assert snaps["no-rollback"].recovery_start_us == 110 * MS


@pytest.mark.parametrize("version", VERSIONS)
def test_late_ack_of_lost_packet_rolls_back(version):
    """recovery.rs:699-701 (`on_ack_received`): an ACK of a packet already declared lost
    rolls the controller back to the checkpoint taken before that congestion event
    (cubic.rs `rollback`), before the ACK's other packets count.  Same start as
    `cubic_fast_convergence`; the second loss is then ACKed 1 ms later."""
    s = Sender().send(10).lose(1)
    s.advance(100 * MS).ack(8).send(7).ack(1).advance(100 * MS)
    for _ in range(6):
        s.ack(1, mark="ca")
    lost = s.unacked[0]
    s.lose(1, mark="loss2")
    s.advance(MS)._emit("late", ev="ack", pns=[lost], ack_delay=0)
    snaps = s.run(cubic(version))
    assert snaps["ca"].cwnd == 9600 and snaps["loss2"].cwnd == 6720
    assert snaps["late"].cwnd == 9600
    assert snaps["late"].recovery_start_us == 0     # the prior epoch


@pytest.mark.parametrize("version", VERSIONS)
def test_ack_of_a_forgotten_lost_packet_does_not_roll_back(version):
    """quiche recognises an ACK of a lost packet as spurious only while the packet is still
    in RecoveryEpoch.sent_packets (recovery.rs:173-182); drain_acked_and_lost_packets
    (recovery.rs:305-327) drops it once it leads the deque and was lost more than one
    smoothed RTT ago.  Same start as the test above, but an ACK 300 ms after the second
    loss (smoothed RTT 100 ms) drains packet 16 first: its late ACK then matches nothing
    in quiche, so no rollback (docs/entry-points.md, `rollback`)."""
    s = Sender().send(10).lose(1)
    s.advance(100 * MS).ack(8).send(7).ack(1).advance(100 * MS)
    for _ in range(6):
        s.ack(1)
    lost = s.unacked[0]
    s.lose(1, mark="loss2")
    s.send(1).advance(300 * MS).ack(1, mark="drain")
    s.advance(MS)._emit("late", ev="ack", pns=[lost], ack_delay=0)
    snaps = s.run(cubic(version))
    assert snaps["loss2"].cwnd == 6720 and snaps["loss2"].recovery_start_us == 200 * MS
    # Packet 17 was sent in recovery (in 0.26.0 the idle shift moved the start to 300 ms).
    assert snaps["drain"].cwnd == 6720
    assert snaps["late"].cwnd == 6720             # not rolled back to 9600
    assert snaps["late"].recovery_start_us == snaps["drain"].recovery_start_us != 0


# --- the idle-restart shift (the death spiral) --------------------------------


def trap_trace():
    """cubic.rs `cubic_perpetual_recovery_trap` (0.30.0): loss, drain, then 20 rounds
    of 7-packet bursts that are fully ACKed one RTT later (bytes in flight 0 at
    every send)."""
    s = Sender().send(10).advance(100 * MS).lose(1, mark="loss").ack(9)
    for r in range(20):
        s.send(7)
        s.marks[f"send{r}"] = len(s.lines) - 2
        s.advance(100 * MS).ack(7, mark=f"ack{r}")
    return s


def test_cubic_perpetual_recovery_trap_fixed():
    """cubic.rs `cubic_perpetual_recovery_trap` (0.30.0, fix on): cwnd grows beyond
    the post-loss value and the recovery start does not move."""
    snaps = trap_trace().run(cubic("0.30.0"))
    assert snaps["loss"].cwnd == 8400 and snaps["loss"].recovery_start_us == 100 * MS
    assert snaps["ack19"].cwnd > 8400
    assert {snap.recovery_start_us for snap in snaps[None]} == {None, 100 * MS}
    assert snaps["ack19"].recovery_start_us == 100 * MS


@pytest.mark.parametrize("spec", ["quiche@0.26.0:" + TEST_SENDER,
                                  "quiche@0.30.0:idle_fix=off," + TEST_SENDER])
def test_cubic_perpetual_recovery_trap_bug(spec):
    """cubic.rs `cubic_perpetual_recovery_trap`, without the fix: the assertion upstream
    added the test for fails -- every send moves the recovery start one RTT past
    itself and cwnd stays at the post-loss value."""
    snaps = trap_trace().run(spec)
    assert snaps["ack19"].cwnd == 8400
    for r in range(20):
        send_t = 200 * MS + r * 100 * MS - 100 * MS
        assert snaps[f"send{r}"].recovery_start_us == send_t + 100 * MS  # in the future
        assert snaps[f"send{r}"].phase == "recovery"


def idle_trace():
    """cubic.rs `cubic_genuine_idle_epoch_shift` (0.30.0): loss, drain, 5 s idle,
    one 7-packet burst ACKed one RTT later."""
    s = Sender().send(10).advance(100 * MS).lose(1, mark="loss").ack(9)
    s.advance(5_000 * MS).send(7)
    s.marks["resume"] = len(s.lines) - 2
    return s.advance(100 * MS).ack(7, mark="ack")


def test_cubic_genuine_idle_epoch_shift_fixed():
    """cubic.rs `cubic_genuine_idle_epoch_shift`: cwnd does not shrink and the recovery
    start moves forward by exactly the idle time (to the resumption send)."""
    snaps = idle_trace().run(cubic("0.30.0"))
    assert snaps["loss"].recovery_start_us == 100 * MS
    assert snaps["ack"].cwnd == 8400
    assert snaps["ack"].recovery_start_us == 100 * MS + 5_000 * MS   # == last_sent_time


@pytest.mark.parametrize("spec", ["quiche@0.26.0:" + TEST_SENDER,
                                  "quiche@0.30.0:idle_fix=off," + TEST_SENDER])
def test_cubic_genuine_idle_epoch_shift_bug(spec):
    """cubic.rs `cubic_genuine_idle_epoch_shift`, without the fix: idle is measured from
    the last send (t=0), so the shift is 5.1 s, one RTT too much: the recovery
    start lands 100 ms after the resumption send (cubic.rs:159-169 in 0.26.0)."""
    snaps = idle_trace().run(spec)
    assert snaps["ack"].cwnd == 8400
    assert snaps["resume"].recovery_start_us == 5_200 * MS      # now is 5 100 ms


# --- HyStart++ (cubic.rs hystart tests) --------------------------------------


def hystart_rounds():
    """Rounds 1 and 2 of cubic.rs `cubic_hystart_css_to_ss`/`_css_to_ca`: 8 packets
    ACKed after 50 ms, then 8 packets ACKed one by one with RTTs 100, 204, 412, ...
    (upstream sets the RTT with update_rtt(); here the ACK times produce it)."""
    s = Sender().send(8).advance(50 * MS).ack(8, mark="round1")
    s.advance(100 * MS).send(8)
    start, rtt = s.t, 100 * MS
    for i in range(8):
        s.t = start + rtt
        s.ack(1, mark=f"r2ack{i}")
        rtt += rtt + 4 * MS
    return s


@pytest.mark.parametrize("version", VERSIONS)
def test_cubic_hystart_css_to_ss(version):
    """cubic.rs `cubic_hystart_css_to_ss`: the 8th rising-RTT sample enters CSS (after a
    full-datagram increase); a round with a lower RTT returns to slow start after
    growing size / CSS_GROWTH_DIVISOR per ACK for N_RTT_SAMPLE ACKs."""
    s = hystart_rounds()
    s.advance(80 * MS).send(8).advance(80 * MS).ack(8, mark="round3")
    snaps = s.run(cubic(version, "hystart=on"))
    assert snaps["round1"].cwnd == 12000 + 8 * MDS
    assert snaps["r2ack7"].cwnd == snaps["r2ack6"].cwnd + MDS
    assert snaps["round3"].cwnd == snaps["r2ack7"].cwnd + MDS // 4 * 8
    # Without HyStart++ the same trace is plain slow start.
    plain = s.run(cubic(version, "hystart=off"))
    assert plain["round3"].cwnd == plain["r2ack7"].cwnd + 8 * MDS


@pytest.mark.parametrize("version", VERSIONS)
def test_cubic_hystart_css_to_ca(version):
    """cubic.rs `cubic_hystart_css_to_ca`: CSS_ROUNDS rounds in CSS end slow start
    without a loss: ssthresh = cwnd."""
    s = hystart_rounds()
    for r in range(5):
        s.send(8).advance(100 * MS).ack(8, mark=f"css{r}")
    snaps = s.run(cubic(version, "hystart=on"))
    last = snaps["css4"]
    assert snaps["css3"].ssthresh is None                # still slow start
    assert last.ssthresh is not None and last.cwnd == last.ssthresh
    # quiche's state_str still says "conservative_slow_start" (in_css() stays true), but the
    # next ACK takes the congestion-avoidance branch (cubic.rs:255, 276-281): so does the phase.
    assert last.phase == "congestion_avoidance"
    assert snaps["css3"].phase == "slow_start"           # CSS proper is slow start


@pytest.mark.parametrize("version", VERSIONS)
def test_avoidance_after_a_hystart_exit_is_labelled_so(version):
    """The stored reproducer quiche-css-epoch-counts-idle: once CSS ends (ssthresh 24600 set,
    cwnd 25800) every later snapshot is congestion avoidance with the CSS start as epoch, and
    the growth after the idle is judged as such (idle-inflation)."""
    trace = load_trace(str(project_root() / "fuzz" / "reproducers" / "quiche-css-epoch-counts-idle.jsonl"))
    spec = f"quiche@{version}"                             # HyStart++ on, as quiche ships
    snaps = replay(trace, [spec]).runs[spec].snapshots
    after = [s for s in snaps if s.ssthresh is not None]
    assert after and all(s.cwnd >= s.ssthresh for s in after)
    assert {s.phase for s in after} == {"congestion_avoidance"}
    assert {s.phase for s in snaps if s.ssthresh is None} == {"slow_start"}


# --- reno.rs tests ------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_reno_slow_start_and_congestion_event(version):
    """reno.rs `reno_slow_start`, `reno_slow_start_multi_acks`, `reno_congestion_event`."""
    spec = cubic(version, "cc=reno," + TEST_SENDER)
    assert Sender().send(10).advance(MS).ack(1, mark="a").run(spec)["a"].cwnd == 12000 + MDS
    assert Sender().send(10).advance(MS).ack(3, mark="a").run(spec)["a"].cwnd == 12000 + 3 * MDS
    snap = Sender().send(1).lose(1, mark="l").run(spec)["l"]
    assert snap.cwnd == 6000 and snap.w_max is None and snap.epoch_start_us is None


@pytest.mark.parametrize("version", VERSIONS)
def test_reno_congestion_avoidance(version):
    """reno.rs `reno_congestion_avoidance`: one datagram per cwnd of ACKed bytes, with
    bytes_acked_ca pre-credited to half the window at the congestion event."""
    s = Sender().send(14).advance(100 * MS).lose(1, mark="loss")
    s.advance(200 * MS).ack(13, mark="old")
    s.send(7).advance(100 * MS).ack(2, mark="a2").ack(1, mark="a3")
    s.send(7).advance(MS).ack(5, mark="a8").ack(1, mark="a9")   # upstream: no time passes
    snaps = s.run(f"quiche-reno@{version}:{TEST_SENDER}")
    assert [snaps[m].cwnd for m in ("loss", "old", "a2", "a3", "a8", "a9")] == \
        [6000, 6000, 6000, 6000 + MDS, 6000 + MDS, 6000 + 2 * MDS]


# --- adapter contract ----------------------------------------------------------


@pytest.mark.parametrize("options", ["", "app_limited=conn", "app_limited=trace"])
def test_connection_modes_match_test_sender_when_cwnd_limited(options):
    """The scenarios above fill the window, so quiche's own flag is already false:
    the connection-like default gives the same values (cubic_congestion_avoidance)."""
    s = Sender().send(10).advance(100 * MS).lose(1).ack(1).advance(100 * MS).ack(7)
    s.send(8).advance(100 * MS).ack(1)
    for i in range(6):
        s.ack(1, mark=f"ca{i}").advance(100 * MS)
    spec = "quiche@0.30.0:hystart=off" + ("," + options if options else "")
    assert s.run(spec)["ca5"].cwnd == 8400 + MDS


def test_options_are_checked():
    trace = Sender().send(1).lines
    text = "\n".join(trace)
    with pytest.raises(SetupError, match="idle_fix=on.*0.26.0"):
        replay(parse_trace_text(text), ["quiche@0.26.0:idle_fix=on"])
    with pytest.raises(SetupError, match="cc.*cubic\\|reno"):
        replay(parse_trace_text(text), ["quiche@0.30.0:cc=bbr"])
    with pytest.raises(SetupError, match="unknown option \"nope\""):
        replay(parse_trace_text(text), ["quiche@0.30.0:nope=1"])
    replay(parse_trace_text(text), ["quiche@0.26.0:idle_fix=off"])   # a no-op there


def test_death_spiral_example_findings():
    """examples/death-spiral.jsonl: quiche 0.26.0 and 0.30.0:idle_fix=off report a
    recovery start in the future; 0.30.0 (fix on) does not."""
    from ccdiff.trace import load_trace
    from ccdiff.paths import project_root
    trace = load_trace(str(project_root() / "examples" / "death-spiral.jsonl"))
    result = replay(trace, ["quiche@0.26.0", "quiche@0.30.0", "quiche@0.30.0:idle_fix=off"])
    bad = {f.stack for f in result.findings if f.invariant == "future-recovery-start"}
    assert bad == {"quiche@0.26.0", "quiche@0.30.0:idle_fix=off"}
    assert result.runs["quiche@0.30.0"].snapshots[-1].cwnd > 4 * MDS
    assert result.runs["quiche@0.26.0"].snapshots[-1].cwnd == 2 * MDS


def test_app_limited_modes():
    """congestion/mod.rs:201 sets app_limited = bytes_in_flight + sent < cwnd at each
    send and cubic.rs:228 then skips growth; a Connection's send loop that ends on a
    full window clears it (lib.rs:4517), which app_limited=conn does after a packet
    sent cwnd-limited (here the last, pn 4)."""
    s = Sender()
    s.lines.append(json.dumps({"t": 0, "ev": "sent", "pn": 0, "bytes": MDS, "app_limited": True}))
    s.unacked.append(0)
    s.pn = 1
    s.send(4).advance(10 * MS).ack(5, mark="ack")
    assert s.run("quiche@0.30.0:hystart=off,app_limited=cc")["ack"].cwnd == 12000
    assert s.run("quiche@0.30.0:hystart=off,app_limited=conn")["ack"].cwnd == 12000 + 5 * MDS
    # trace: the flag of the last sent packet (pn 4, not app-limited) decides.
    assert s.run("quiche@0.30.0:hystart=off,app_limited=trace")["ack"].cwnd == 12000 + 5 * MDS


def _app_trace(*events):
    lines = [json.dumps({"ccdiff_trace": 2, "max_datagram_size": MDS})]
    lines += [json.dumps(ev) for ev in events]
    return parse_trace_text("\n".join(lines))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_connection_that_ran_out_of_data_keeps_app_limited(version):
    """quiche's send loop with nothing left to send ends in write_pkt_type's Done
    (lib.rs:8325 in 0.30.0, 7824 in 0.26.0) before any update_app_limited, so the flag
    stays as on_packet_sent set it (5 packets in a 12,000-byte window: true) and the
    ACK grows nothing -- as quiche 0.30.0's own connection logs it (cf_app_limited).
    The old model cleared it after every send and grew the window by 6,000 bytes.  A
    retransmission sent after `app_idle` ends such a loop too, whatever its flag; a
    packet sent cwnd-limited ends a loop on a full window, which clears it."""
    sends = [{"t": 0, "ev": "sent", "pn": pn, "bytes": MDS, "app_limited": True} for pn in range(5)]
    idle = {"t": 0, "ev": "app_idle"}
    ack = {"t": 10 * MS, "ev": "ack", "pns": [0, 1, 2, 3, 4], "ack_delay": 0}
    spec = f"quiche@{version}:hystart=off"

    def cwnd_after(*events):
        result = replay(_app_trace(*events), [spec], check=False)
        run = next(iter(result.runs.values()))
        assert run.error is None, run.error
        return run.snapshots[-1].cwnd

    assert cwnd_after(*sends, idle, ack) == 12000
    assert cwnd_after(*sends, ack) == 12000
    retx = [dict(ev, app_limited=False) for ev in sends]
    assert cwnd_after(*retx, idle, ack) == 12000 + 5 * MDS         # cwnd-limited, then nothing to send
    assert cwnd_after(idle, *retx, ack) == 12000                    # sent while the application had none
    assert cwnd_after(idle, {"t": 0, "ev": "app_data"}, *retx, ack) == 12000 + 5 * MDS


def test_ecn_ce_is_no_congestion_signal_on_quiche_s_timeline():
    """Harness defect found by fuzzing, fixed (profile `ecn = false`, Truth(ecn=False)): quiche
    never sees CE on a real path (it sends no ECT), yet the checker opened a recovery period at
    the CE-marked ACK and blamed quiche's ordinary growth on it as growth-in-recovery, and the
    next loss as a second reduction (excess-reduction).  The oracle still reduces on CE."""
    lines = [{"ccdiff_trace": 1, "max_datagram_size": MDS},
             {"t": 0, "ev": "sent", "pn": 2, "bytes": MDS},
             {"t": 10 * MS, "ev": "ack", "pns": [2], "ecn_ce": True},
             {"t": 10 * MS, "ev": "sent", "pn": 3, "bytes": MDS},
             {"t": 20 * MS, "ev": "lost", "pns": [3]}]
    result = replay(parse_trace_text("\n".join(json.dumps(x) for x in lines)), ["quiche@0.30.0", "oracle"])
    quiche = [s.cwnd for s in result.runs["quiche@0.30.0"].snapshots]
    assert quiche == [12000, 13200, 13200, 9240]          # CE ignored, the loss is the first event
    assert result.runs["oracle"].snapshots[1].cwnd == 8400
    assert not result.violations


@pytest.mark.parametrize("version", VERSIONS)
def test_ecn_ce_and_persistent_congestion_are_ignored(version):
    """quiche sends no ECT (lib.rs:4589) and LegacyRecovery never declares persistent
    congestion (cloudflare/quiche#2680): both leave cwnd untouched."""
    s = Sender().send(10).advance(10 * MS)
    s.lines.append(json.dumps({"t": s.t, "ev": "ack", "pns": [s.unacked.popleft()], "ecn_ce": True}))
    s.marks["ce"] = len(s.lines) - 2
    # Two packets sent after the sample, 2 s apart (RFC 9002 §7.6.2 holds), lost with the rest.
    s.advance(100).send(1).advance(2_000 * MS).send(1).advance(10 * MS).lose(11)
    s.lines.append(json.dumps({"t": s.t, "ev": "persistent_congestion"}))
    s.marks["pc"] = len(s.lines) - 2
    snaps = s.run(cubic(version))
    assert snaps["ce"].cwnd == 12000 + MDS
    assert snaps["pc"].cwnd == int((12000 + MDS) * 0.7)

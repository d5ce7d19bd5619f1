"""Metamorphic relations (ccdiff/metamorphic.py, docs/metamorphic.md): each transform on its
own, then every relation over every example and stored reproducer for the oracle and every
stack.  A verdict change there is a harness bug (or a stack reading absolute time or packet
numbers, which the report names)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ccdiff.metamorphic import (check_trace, default_trace_paths, load_any, offset_packet_numbers,
                                relations_for, shift_time, single_split_positions, split_ack,
                                split_acks_at, split_pns, splittable_acks, verdict)
from ccdiff.invariants import Finding
from ccdiff.stacks import available
from ccdiff.trace import Ack, Lost, Sent, TraceError, dump_trace, parse_trace_text

ROOT = Path(__file__).resolve().parent.parent
CORPUS = default_trace_paths(ROOT)
DEATH_SPIRAL = str(ROOT / "examples" / "death-spiral.jsonl")


def all_specs() -> list:
    """The oracles and every pinned stack version of the recipes, built or not (the test builds
    them); releases built by name for a bisect are not the corpus's stacks, so the test
    collects the same cases on every machine."""
    return [row["stack"] + (f"@{row['version']}" if row["version"] else "") for row in available()
            if row.get("default", True)]


def test_corpus_is_the_examples_and_every_reproducer():
    examples = sorted(str(p) for p in (ROOT / "examples").glob("*.jsonl"))
    reproducers = sorted(str(p) for p in (ROOT / "fuzz" / "reproducers").glob("*")
                         if p.suffix in (".jsonl", ".bin"))
    assert DEATH_SPIRAL in examples and reproducers
    assert CORPUS == examples + reproducers


@pytest.mark.parametrize("base", [1_000_000, 86_400_000_000, 21 * 86_400_000_000])
def test_a_shifted_trace_validates_and_only_its_times_move(base):
    trace = load_any(DEATH_SPIRAL)
    shifted = shift_time(trace, base)
    # shift_time re-parses its output; dump and parse once more to be sure it is a valid trace.
    assert parse_trace_text(dump_trace(shifted)).events == shifted.events
    assert len(shifted.events) == len(trace.events)
    for old, new in zip(trace.events, shifted.events):
        assert new.t == old.t + base
        assert new._replace(t=old.t) == old


def test_a_shift_past_the_format_limit_is_a_trace_error_not_a_crash():
    trace = load_any(DEATH_SPIRAL)
    with pytest.raises(TraceError, match="between 0 and"):
        shift_time(trace, 2**53)


@pytest.mark.parametrize("offset", [1000, 2**20])
def test_an_offset_trace_moves_every_packet_number(offset):
    trace = load_any(DEATH_SPIRAL)
    moved = offset_packet_numbers(trace, offset)
    assert len(moved.events) == len(trace.events)
    for old, new in zip(trace.events, moved.events):
        assert new.t == old.t and type(new) is type(old)
        if type(old) is Sent:
            assert new.pn == old.pn + offset and new.bytes == old.bytes
        elif type(old) in (Ack, Lost):
            assert new.pns == tuple(pn + offset for pn in old.pns)
        else:
            assert new == old


def test_split_pns_cuts_before_the_highest_range_or_in_the_middle():
    assert split_pns((1, 2, 5, 6, 9)) == ((1, 2, 5, 6), (9,))
    assert split_pns((3, 4, 5, 6, 7)) == ((3, 4), (5, 6, 7))
    assert split_pns((8, 9)) == ((8,), (9,))


def test_a_split_ack_covers_the_same_packets_at_the_same_instant():
    ack = Ack(t=500, pns=(1, 2, 3, 7, 8), ack_delay=25, ecn_ce=True)
    first, second = split_ack(ack)
    assert second.pns + first.pns == ack.pns and first.pns and second.pns
    assert first.pns[-1] == 8, "the first frame carries the largest acknowledged and its RTT sample"
    assert first.t == second.t == 500 and first.ack_delay == second.ack_delay == 25
    # The CE mark travels with the largest acknowledged (RFC 9002 §7.1 starts recovery at its send time).
    assert (first.ecn_ce, second.ecn_ce) == (True, False)
    # So does the stack's own RTT sample (`rtt`): the other frame's largest is another packet.
    first, second = split_ack(ack._replace(rtt=480))
    assert (first.rtt, second.rtt) == (480, None)


def test_a_shift_or_an_offset_keeps_the_stacks_rtt_sample():
    """`rtt` is a difference of times: a time shift and a packet-number offset keep it."""
    text = ('{"ccdiff_trace": 1}\n{"t": 0, "ev": "sent", "pn": 0, "bytes": 1200}\n'
            '{"t": 0, "ev": "sent", "pn": 1, "bytes": 1200}\n{"t": 9000, "ev": "ack", "pns": [0, 1], "rtt": 9400}\n')
    trace = parse_trace_text(text)
    assert shift_time(trace, 86_400_000_000).events[-1].rtt == 9400
    assert offset_packet_numbers(trace, 2**20).events[-1].rtt == 9400
    split = split_acks_at(trace, [2])
    assert [ev.rtt for ev in split.events[2:]] == [9400, None]


def test_splitting_every_ack_of_a_trace_keeps_the_packets_each_instant_acknowledges():
    trace = load_any(str(ROOT / "examples" / "idle-restart.jsonl"))
    chosen = splittable_acks(trace)
    assert chosen, "the example has ACKs of several packets"
    split = split_acks_at(trace, chosen)
    assert len(split.events) == len(trace.events) + len(chosen)

    def acked_by_instant(events):
        out = {}
        for ev in events:
            if type(ev) is Ack:
                out.setdefault(ev.t, []).extend(ev.pns)
        return {t: sorted(pns) for t, pns in out.items()}
    assert acked_by_instant(split.events) == acked_by_instant(trace.events)
    assert [ev for ev in split.events if type(ev) is not Ack] == [ev for ev in trace.events if type(ev) is not Ack]


def test_single_splits_pick_the_first_middle_and_last_splittable_ack():
    trace = load_any(str(ROOT / "examples" / "idle-restart.jsonl"))
    acks = splittable_acks(trace)
    assert single_split_positions(trace) == sorted({acks[0], acks[len(acks) // 2], acks[-1]})
    names = [r.name for r in relations_for(trace)]
    assert names[:6] == ["shift+1s", "shift+100s", "shift+1d", "shift+3w", "pn+1000", "pn+2^20"]
    assert "split-all-acks" in names


def test_a_trace_without_a_multi_packet_ack_has_no_split_relation():
    trace = parse_trace_text('{"ccdiff_trace": 1}\n{"t": 0, "ev": "sent", "pn": 0, "bytes": 1200}\n'
                             '{"t": 9, "ev": "ack", "pns": [0]}\n')
    assert [r.name for r in relations_for(trace) if r.name.startswith("split")] == []


def test_exact_verdicts_compare_indices_and_counts_split_verdicts_only_the_set():
    one = [Finding("s", "ca-growth-bound", 4, 10, "at t=10", count=2)]
    moved = [Finding("s", "ca-growth-bound", 5, 99, "at t=99", count=3)]
    assert verdict(one, exact=True) != verdict(moved, exact=True)
    assert verdict(one, exact=False) == verdict(moved, exact=False)
    # times and details (which quote times) never count
    assert verdict(one, exact=True) == verdict([Finding("s", "ca-growth-bound", 4, 7, "x", count=2)], exact=True)


# The verdict changes the stacks' own code makes, each traced to it in docs/metamorphic.md
# ("Results"): (trace, stack name) -> the relations that change and why.  Every other
# (trace, stack, relation) must keep its verdict; a change here that is not listed, or a
# listed one that no longer happens, fails the test -- the list is exact, not a waiver.
PN0 = ("picoquic's loss filter starts at packet number 0 (picoquic_cc_hystart_loss_test, "
       "cc_common.c): a loss of packet 0 is never counted, as on a fresh real connection")
PER_FRAME = ("ngtcp2 applies a congestion event and growth per ACK frame "
             "(ngtcp2_cc_cubic_cc_on_ack_recv): two frames are a different input; only documented "
             "deviations move")
ACKS_FIRST = ("quinn grows on every packet of an ACK frame before that frame's loss detection "
              "(connection/mod.rs:1503-1556, profile acks-before-losses): split, the frame with "
              "the largest comes first and reveals the loss, so the reduction starts from a window "
              "grown by two packets instead of three (10,080 instead of 10,920); only the "
              "documented trajectory-divergence moves")
ACKS_FIRST_SMALL_WINDOW = (
    "quinn grows on every packet of an ACK frame before that frame's ECN reaction (profile "
    "acks-before-losses): split at a 2,582-byte window, the frame with the CE mark acknowledges "
    "one packet, quinn grows to 3,781 and 0.7 x 3,781 = 2,647 is above the window before the "
    "mark.  The profile documents this case (an ACK of more than 3/7 of the window) and does "
    "not waive it: a real missing-reduction, which two ACK frames in one packet reach")
PER_FRAME_S2N = ("s2n-quic calls on_ack once per ACK frame with the frame's bytes and its largest "
                 "packet's send time (s2n-quic-transport recovery/manager.rs:728-741), capped per "
                 "frame at half the bytes in congestion avoidance and by the highest bytes in flight "
                 "seen at an ACK (cubic.rs:297, 329-341, 556-558): two frames are a different input, "
                 "and growth on the second frame of an app-limited burst is its under-utilized rule "
                 "(profile under-utilized-window); only documented deviations move")
PER_FRAME_PICOQUIC_SEED = ("picoquic seeds slow start from the bandwidth estimate each ACK frame gives "
                           "(cubic.c:259-270, cc_common.c:233-245; profile slow-start-bandwidth-seed, mechanism-"
                           "checked): split, the first frame's smaller sample seeds a window above its reference "
                           "for 16 ACKs, a divergence that deviation's own trigger excuses; only documented "
                           "deviations move")
# (trace, stack name) -> violations a listed relation may add: a stack's own documented but
# unwaived finding that the relation's input reaches and the original does not.
NEW_VIOLATIONS = {("ecn-small-window.jsonl", "quinn"): {"missing-reduction", "trajectory-divergence"},  # follows it
                  # ngtcp2's gap fill (a finding since the waiver audit, docs/waiver-audit.md): split, an ACK
                  # frame that does not raise the largest acknowledged grows the window in recovery.
                  **{(trace, "ngtcp2"): {"growth-in-recovery"} for trace in (
                      "app-limited-then-bulk.jsonl", "repeated-losses.jsonl", "death-spiral.jsonl",
                      "idle-restart.jsonl")},
                  **{(trace, "ngtcp2"): {"growth-in-recovery", "trajectory-divergence"}   # and what follows it
                     for trace in ("convex-probing.jsonl", "ecn-small-window.jsonl")},
                  # msquic's AIMD accumulator wrap (AIMD_WRAP_SPLIT), and the divergence that follows it
                  ("idle-restart.jsonl", "msquic"): {"ca-growth-bound", "ca-off-curve", "trajectory-divergence"},
                  ("ecn-small-window.jsonl", "msquic"): {"ca-growth-bound", "ca-off-curve", "trajectory-divergence"}}
# (Split, Linux's window reached 4 segments and stayed there for 20 packets, about 5 round
# trips: stuck-at-minimum under the old 8-packet rule, not under the 20 round trips of issue
# #30's calibration: only the documented trajectory-divergence moves there now.)
PER_ACK_LINUX = ("Linux runs pkts_acked, the recovery exit at high_seq and cong_avoid once per ACK "
                 "(tcp_ack, tcp_input.c:3964-4124), with the packets it newly acknowledges as one count, "
                 "and tcp_is_cwnd_limited lets slow start grow while cwnd < 2 x max_packets_out "
                 "(include/net/tcp.h:1391-1403, profile cwnd-limited-per-window): split ACKs are a "
                 "different input; only documented deviations move")
ACKS_FIRST_DEPTH = ("the stack credits an ACK frame's packets before it runs loss detection on that frame "
                    "(quinn, aioquic: profile acks-before-losses; ngtcp2's Reno: reno-grows-before-loss), so "
                    "its reduction starts from the window the frame just grew, a documented, mechanism-checked "
                    "shallow-reduction (and W_max taken from that window, w-max-mismatch); split, the frame that "
                    "reveals the loss acknowledges fewer packets and the reduction stays within β of the window, "
                    "W_max within a datagram of it: only that documented deviation moves")
SPLIT_USES_K = ("split, the frame's packets arrive in two ACKs, and the second finds quinn in congestion "
                "avoidance with the K it computed at the congestion event, RFC 8312's cbrt(W_max (1 - β) / C) "
                "(profile k-from-w-max, mechanism-checked): k-mismatch is judged where a K is used, so only that "
                "documented deviation appears")
PER_FRAME_MSQUIC = ("msquic runs OnDataAcknowledged once per ACK frame: one concave/convex step per frame "
                    "whatever it acknowledges (cubic.c:646-651, profile per-ack-frame-growth), the recovery "
                    "exit by the frame's largest acknowledged (cubic.c:434-446) and the 2 x BytesInFlightMax "
                    "cap per frame (cubic.c:664-666): split ACKs are a different input, which reaches "
                    "congestion avoidance (where K is judged) or an app-limited ACK a frame earlier; only "
                    "documented deviations move")
AIMD_WRAP_SPLIT = ("split, the smaller frames feed msquic's Reno-friendly accumulator in steps of less than a "
                   "datagram, and the step that crosses AimdWindow wraps the uint32 below zero (cubic.c:635-638; "
                   "fuzz/reproducers/msquic-aimd-accumulator-wrap.jsonl): from then on every frame adds a "
                   "datagram. The real finding, which the unsplit trace's larger frames step over; the same "
                   "build with the two lines in RFC 3465's order changes no verdict under any split")
KNOWN_STACK_CHANGES = {
    ("idle-restart.jsonl", "msquic"): ({"split-all-acks"}, AIMD_WRAP_SPLIT),
    ("ecn-small-window.jsonl", "msquic"): ({"split-all-acks"}, AIMD_WRAP_SPLIT),
    ("quiche-missed-event-then-growth.jsonl", "msquic"): ({"split-all-acks", "split-ack@12"}, PER_FRAME_MSQUIC),
    ("quiche-undo-then-avoidance-entry.jsonl", "msquic"): ({"split-all-acks", "split-ack@10"}, PER_FRAME_MSQUIC),
    ("quiche-epoch-tie-same-microsecond.jsonl", "msquic"): ({"split-all-acks", "split-ack@33"}, PER_FRAME_MSQUIC),
    ("death-spiral.jsonl", "picoquic"): ({"pn+1000", "pn+2^20"}, PN0),
    ("death-spiral.jsonl", "ngtcp2"): ({"split-all-acks", "split-ack@6"}, PER_FRAME),
    ("idle-restart.jsonl", "ngtcp2"): ({"split-all-acks"}, PER_FRAME),
    # (quiche-missed-event-then-growth.jsonl, ngtcp2): split, its gap-fill growth-in-recovery deviation
    # came on an ACK of packets sent in the loss's own microsecond, after it; by packet order they
    # are not in recovery (Truth's two readings, issue #30): no verdict moves there any more.
    ("death-spiral.jsonl", "quinn"): ({"split-ack@6"}, ACKS_FIRST),
    ("app-limited-then-bulk.jsonl", "ngtcp2"): ({"split-all-acks"}, PER_FRAME),
    ("repeated-losses.jsonl", "ngtcp2"): ({"split-all-acks"}, PER_FRAME),
    ("ecn-small-window.jsonl", "ngtcp2"): ({"split-all-acks", "split-ack@334"}, PER_FRAME),
    ("ecn-small-window.jsonl", "quinn"): ({"split-all-acks"}, ACKS_FIRST_SMALL_WINDOW),
    ("death-spiral.jsonl", "linux-reno"): ({"split-all-acks"}, PER_ACK_LINUX),
    ("ecn-small-window.jsonl", "linux"): ({"split-all-acks"}, PER_ACK_LINUX),
    ("quiche-undo-then-avoidance-entry.jsonl", "linux"): ({"split-all-acks", "split-ack@10"}, PER_ACK_LINUX),
    ("quiche-undo-then-avoidance-entry.jsonl", "linux-reno"): ({"split-all-acks", "split-ack@10"}, PER_ACK_LINUX),
    ("app-limited-then-bulk.jsonl", "quinn"): ({"split-all-acks"}, ACKS_FIRST_DEPTH),
    ("idle-restart.jsonl", "quinn"): ({"split-all-acks"}, ACKS_FIRST_DEPTH),
    ("repeated-losses.jsonl", "quinn"): ({"split-all-acks"}, ACKS_FIRST_DEPTH),
    ("idle-restart.jsonl", "aioquic"): ({"split-all-acks"}, ACKS_FIRST_DEPTH),
    ("app-limited-then-bulk.jsonl", "aioquic"): ({"split-all-acks"}, ACKS_FIRST_DEPTH),
    ("repeated-losses.jsonl", "aioquic"): ({"split-all-acks"}, ACKS_FIRST_DEPTH),
    ("convex-probing.jsonl", "aioquic"): ({"split-all-acks"}, ACKS_FIRST_DEPTH),
    ("convex-probing.jsonl", "quinn"): ({"split-all-acks"}, ACKS_FIRST_DEPTH),
    ("convex-probing.jsonl", "ngtcp2"): ({"split-all-acks"}, PER_FRAME),
    ("convex-probing.jsonl", "picoquic-reno"): ({"split-all-acks"}, PER_FRAME_PICOQUIC_SEED),
    ("quiche-missed-event-then-growth.jsonl", "quinn"): ({"split-all-acks", "split-ack@12"}, SPLIT_USES_K),
    ("quiche-epoch-tie-same-microsecond.jsonl", "quinn"): ({"split-all-acks", "split-ack@33"}, SPLIT_USES_K),
    ("death-spiral.jsonl", "quinn-reno"): ({"split-all-acks", "split-ack@6"}, ACKS_FIRST_DEPTH),
    ("death-spiral.jsonl", "aioquic-reno"): ({"split-all-acks", "split-ack@6"}, ACKS_FIRST_DEPTH),
    ("death-spiral.jsonl", "ngtcp2-reno"): ({"split-all-acks", "split-ack@6"}, ACKS_FIRST_DEPTH),
    ("death-spiral.jsonl", "s2n-quic"): ({"split-all-acks", "split-ack@129"}, PER_FRAME_S2N),
    ("quiche-undo-then-avoidance-entry.jsonl", "s2n-quic"): ({"split-all-acks", "split-ack@10"}, PER_FRAME_S2N),
}


@pytest.mark.parametrize("spec", all_specs())
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: Path(p).name)
def test_no_relation_changes_a_verdict(path, spec):
    """Shifts, offsets and splits keep every verdict, except the listed changes the stack's
    own code makes; and those change only documented deviations, never a violation."""
    from ccdiff.build import ensure_built
    ensure_built(spec)
    rows = [r for r in check_trace(load_any(path), spec) if r.changed]
    expected, why = KNOWN_STACK_CHANGES.get((Path(path).name, spec.split("@")[0]), (set(), ""))
    assert {r.relation for r in rows} == expected, why
    allowed = NEW_VIOLATIONS.get((Path(path).name, spec.split("@")[0]), set())
    added = set()
    for row in rows:
        violations = [{v[:2] for v in verdict if v[2] == "violation"} for verdict in (row.before, row.after)]
        assert violations[0] <= violations[1], (row.relation, why)          # none disappears
        new = {inv for _, inv in violations[1] - violations[0]}
        assert new <= allowed, (row.relation, why)                           # only the listed ones
        added |= new
    assert added == allowed, why                                             # each listed one is reached


def test_check_harness_cli_reports_a_change_with_exit_1_and_none_with_exit_0(tmp_path):
    """Through the real CLI: the oracle keeps every verdict (exit 0); the mutant that
    measures idle from the last send reads no absolute time either, so it keeps its own."""
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "check-harness", "--stack", "oracle:idle=last-send",
                           "examples/death-spiral.jsonl", "--json", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())["rows"]
    assert {r["relation"] for r in rows} >= {"shift+3w", "pn+2^20", "split-all-acks"}
    assert all(r["before"] == r["after"] and "future-recovery-start" in r["before"] for r in rows)
    assert "0 verdict changes" in proc.stdout


def test_check_harness_cli_bad_trace_is_exit_2_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ccdiff_trace": 1}\n{"t": 0, "ev": "nope"}\n')
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "check-harness", "--stack", "oracle", str(bad)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{bad}:2:" in proc.stderr


def test_check_harness_catches_an_adapter_that_reads_absolute_time(tmp_path):
    """The `faulty` adapter (tests/fault_adapters.py) returns a NaN snapshot from an absolute
    time on: the bug class of a stack whose clock starts at 0.  Shifted by 1 s or more, the
    death spiral crosses that time and the verdict changes; the command exits 1 and names it."""
    import os
    from .fault_adapters import install_faulty_stack
    install_faulty_stack(tmp_path)
    env = dict(os.environ, CCDIFF_HOME=str(tmp_path), CCDIFF_BUILD_DIR=str(tmp_path / "build"),
               PYTHONPATH=str(ROOT))
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "check-harness", "--stack", "faulty:fault=garbage,at=500000",
                           DEATH_SPIRAL, "--json", str(out), "--changes-only"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    changed = {r["relation"]: r for r in json.loads(out.read_text())["rows"] if r["changed"]}
    assert sorted(changed) == ["shift+100s", "shift+1d", "shift+1s", "shift+3w"]
    assert "numeric-error" not in changed["shift+1s"]["before"]
    assert "numeric-error@" in changed["shift+1s"]["after"]
    assert "4 verdict changes" in proc.stdout


def test_check_harness_runs_only_the_families_asked_for(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "check-harness", "--stack", "oracle", "--relations",
                           "pn", DEATH_SPIRAL, "--json", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert [r["relation"] for r in json.loads(out.read_text())["rows"]] == ["pn+1000", "pn+2^20"]
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "check-harness", "--stack", "oracle", "--relations",
                           "shift,bogus", DEATH_SPIRAL], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().endswith("expected a comma-separated list of shift, pn, split")


def test_a_transform_that_leaves_the_valid_traces_is_a_row_not_an_error():
    """A trace near the format's time limit cannot be shifted by 3 weeks: the row says why
    (no verdict to compare), the other relations still run; on main, a split whose extra
    RTT samples break a persistent congestion's RFC 9002 §7.6.2 duration takes this path."""
    late = 2**53 - 10 * 86_400_000_000
    trace = parse_trace_text('{"ccdiff_trace": 1}\n'
                             f'{{"t": {late}, "ev": "sent", "pn": 0, "bytes": 1200}}\n'
                             f'{{"t": {late + 9000}, "ev": "ack", "pns": [0]}}\n')
    rows = {r.relation: r for r in check_trace(trace, "oracle")}
    assert rows["shift+3w"].after is None and not rows["shift+3w"].changed
    assert "between 0 and" in rows["shift+3w"].skipped
    assert rows["shift+1d"].after == rows["shift+1d"].before == () and rows["shift+1d"].skipped == ""

"""Reachability: persistent congestion only as RFC 9002 §7.6.2 lets a sender establish it.

The validator (ccdiff/trace.py), the fuzz decoder (ccdiff/encoding.py, its C twin checked by
the shared vectors) and the simulator must agree; the property below re-judges every decoded
persistent congestion with a brute-force transcription of §7.6.2, independent of ccdiff/reach.py.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccdiff.encoding import decode
from ccdiff.rtt import Rtt
from ccdiff.reach import persistent_congestion_duration_us
from ccdiff.sim import simulate
from ccdiff.sim.scenario import load_scenario
from ccdiff.trace import (Ack, Lost, PersistentCongestion, Sent, TraceError, dump_trace, parse_trace_text)

ROOT = Path(__file__).resolve().parent.parent
# The death-spiral example as it was before trace format 2: its losses break RFC 9002 §6.1
# (declared with 2 later packets acknowledged), so it is lenient at line 6.
LENIENT_DEATH_SPIRAL = ROOT / "tests" / "fixtures" / "death-spiral-lenient.jsonl"


def trace_text(events, **header):
    return "\n".join([json.dumps({"ccdiff_trace": 1, "max_datagram_size": 1200, **header})]
                     + [json.dumps(e) for e in events])


def sent(t, pn):
    return {"t": t, "ev": "sent", "pn": pn, "bytes": 1200}


# One 10 ms RTT sample at 10 ms: smoothed 10000, rttvar 5000, so the persistent congestion
# duration is (10000 + max(20000, 1000) + 25000) * 3 = 165000 us with the default max_ack_delay.
SAMPLE = [sent(0, 0), {"t": 10_000, "ev": "ack", "pns": [0]}]


def collapse(gap_us, *, extra=(), lost=(1, 2), late_pn=2, **header):
    """pn 1 at 10.1 ms, late_pn gap_us later, both lost one RTT after it (loss timer), then PC."""
    t2 = 10_100 + gap_us
    events = SAMPLE + [sent(10_100, 1), *extra, sent(t2, late_pn),
                       {"t": t2 + 10_000, "ev": "lost", "pns": list(lost)},
                       {"t": t2 + 10_000, "ev": "persistent_congestion"}]
    return trace_text(events, **header)


def test_duration_is_rfc9002_7_6_1():
    assert persistent_congestion_duration_us(10_000, 5_000, 25_000) == 165_000
    assert persistent_congestion_duration_us(10_000, 100, 0) == (10_000 + 1_000) * 3   # kGranularity


def test_two_lost_packets_further_apart_than_the_duration_establish_it():
    trace = parse_trace_text(collapse(165_001))
    assert isinstance(trace.events[-1], PersistentCongestion)


def test_span_equal_to_the_duration_is_rejected_with_the_numbers():
    with pytest.raises(TraceError) as err:
        parse_trace_text(collapse(165_000), "pc.jsonl")
    message = str(err.value)
    assert message.startswith("pc.jsonl:7: persistent congestion at t=185100: ")
    assert "span 165000 us, not more than the persistent congestion duration 165000 us" in message
    assert "max_ack_delay 25000" in message


def test_max_ack_delay_comes_from_the_header():
    parse_trace_text(collapse(100_000, max_ack_delay=0))      # (10000 + 20000 + 0) * 3 = 90000
    with pytest.raises(TraceError, match="duration 90000 us"):
        parse_trace_text(collapse(90_000, max_ack_delay=0))
    with pytest.raises(TraceError, match='"max_ack_delay" must be between 0 and 16383000'):
        parse_trace_text(collapse(200_000, max_ack_delay=16_384_000))


def test_one_lost_packet_is_not_enough():
    with pytest.raises(TraceError, match="fewer than two lost packets"):
        parse_trace_text(collapse(200_000, lost=(2,)))


def test_no_rtt_sample_is_rejected():
    events = [sent(0, 1), sent(200_000, 2), {"t": 210_000, "ev": "lost", "pns": [1, 2]},
              {"t": 210_000, "ev": "persistent_congestion"}]
    with pytest.raises(TraceError, match="no RTT sample yet"):
        parse_trace_text(trace_text(events))


def test_packets_sent_before_the_first_sample_do_not_count():
    events = [sent(0, 0), sent(0, 1), {"t": 10_000, "ev": "ack", "pns": [0]}, sent(300_000, 2),
              {"t": 310_000, "ev": "lost", "pns": [1, 2]}, {"t": 310_000, "ev": "persistent_congestion"}]
    with pytest.raises(TraceError, match=r"sent after the first RTT sample \(t=10000\)"):
        parse_trace_text(trace_text(events))


def test_an_acknowledged_packet_between_them_breaks_the_span():
    extra = [sent(100_000, 2), {"t": 110_000, "ev": "ack", "pns": [2]}]
    with pytest.raises(TraceError, match="acknowledged packets split the lost packets 1..3"):
        parse_trace_text(collapse(200_000, extra=extra, late_pn=3, lost=(1, 3)))
    # The same packet still in flight (neither acknowledged nor lost) does not break it.
    parse_trace_text(collapse(200_000, extra=[sent(100_000, 2)], late_pn=3, lost=(1, 3)))


def test_an_earlier_loss_pairs_with_a_new_one():
    """§7.6.2 names two lost packets, not one loss detection: pn 1 lost earlier still counts."""
    events = SAMPLE + [sent(10_100, 1), sent(20_000, 2), {"t": 30_000, "ev": "lost", "pns": [1]},
                       sent(200_000, 3), {"t": 210_000, "ev": "lost", "pns": [3]},
                       {"t": 210_000, "ev": "persistent_congestion"}]
    parse_trace_text(trace_text(events))


def test_the_ack_that_revealed_the_loss_counts_as_the_stack_saw_it():
    """A loss revealed by an ACK comes before that ACK in the trace, but the stack took the
    ACK's RTT sample before judging §7.6.2 (RFC 9002 Appendix A.7), so the validator also
    judges it on the state after a same-time ACK.  First sample 100 ms: smoothed 100000,
    rttvar 50000, duration (100000 + 200000 + 25000) * 3 = 975000.  A second 100 ms sample
    leaves smoothed and shrinks rttvar to 37500: duration 825000 < the 900000 span."""
    events = [sent(0, 0), {"t": 100_000, "ev": "ack", "pns": [0]},
              sent(100_100, 1), sent(1_000_100, 2), sent(1_000_100, 3),
              {"t": 1_100_100, "ev": "lost", "pns": [1, 2]},
              {"t": 1_100_100, "ev": "persistent_congestion"}]
    with pytest.raises(TraceError, match="span 900000 us, not more than the persistent congestion duration 975000"):
        parse_trace_text(trace_text(events))                       # a timer loss: no second chance
    parse_trace_text(trace_text(events + [{"t": 1_100_100, "ev": "ack", "pns": [3]}]))
    later = events + [{"t": 1_100_101, "ev": "ack", "pns": [3]}]
    with pytest.raises(TraceError, match="duration 975000"):
        parse_trace_text(trace_text(later))                        # a later ACK did not reveal it


def test_examples_and_reproducers_validate():
    paths = sorted((ROOT / "examples").glob("*.jsonl")) + sorted((ROOT / "fuzz" / "reproducers").glob("*.jsonl"))
    result = subprocess.run([sys.executable, "-m", "ccdiff", "validate", *map(str, paths)], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("scenario", ["persistent-congestion", "death-spiral", "tail-loss"])
def test_simulator_traces_validate(scenario):
    """The simulator follows §7.6.2 (ccdiff/sim/recovery.py); its traces pass the validator."""
    pcs = 0
    for seed in range(3):
        result = simulate(load_scenario(scenario), "oracle", seed, record=True, check=False)
        trace = parse_trace_text(result.trace_text(), f"{scenario}-{seed}")
        pcs += sum(isinstance(ev, PersistentCongestion) for ev in trace.events)
    if scenario == "persistent-congestion":
        assert pcs > 0


# --- the fuzz decoder ----------------------------------------------------------------------

def persistent_congestion_holds(events, index: int, max_ack_delay: int = 25_000) -> bool:
    """Brute force §7.6.2 for the PC at events[index], on the state before it (a timer loss)."""
    rtt, first_sample, sent_at, acked, lost, batch = Rtt(333_000), None, {}, set(), set(), set()
    for i, ev in enumerate(events[:index]):
        if isinstance(ev, Sent):
            sent_at[ev.pn] = ev.t
        elif isinstance(ev, Ack):
            acked.update(ev.pns)
            rtt.update(ev.t - sent_at[max(ev.pns)], ev.ack_delay)
            first_sample = ev.t if first_sample is None else first_sample
        elif isinstance(ev, Lost):
            lost.update(ev.pns)
            batch = (batch if isinstance(events[i - 1], Lost) and events[i - 1].t == ev.t else set()) | set(ev.pns)
    if first_sample is None:
        return False
    duration = (rtt.smoothed + max(4 * rtt.rttvar, 1_000) + max_ack_delay) * 3
    candidates = [pn for pn in lost - acked if sent_at[pn] > first_sample]
    return any(sent_at[y] - sent_at[x] > duration
               and not any(lo in acked for lo in sent_at if x < lo < y)
               for y in candidates if y in batch for x in candidates if x < y)


# Biased towards what persistent congestion needs (an RTT sample first, waits of 10-960 ms,
# few ACKs between losses): about 5% of inputs then establish it, the rest are refused.
SAMPLE_FIRST = bytes([0x00, 0x00, 0x05, 0x00, 0x01, 0x00])     # send 1, ACK it, wait 0.1 ms
OPS = st.lists(st.one_of(st.tuples(st.sampled_from([0, 0, 2, 3, 3, 4, 5]), st.integers(0, 255)),
                         st.tuples(st.just(1), st.integers(128, 223))), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.booleans(), OPS)
def test_every_decoded_persistent_congestion_satisfies_rfc9002_7_6_2(sample_first, ops):
    # Every lose op asks for persistent congestion (bit 7), so the decoder must refuse the rest.
    data = (SAMPLE_FIRST if sample_first else b"") + bytes(
        b for code, arg in ops for b in (code, arg | 0x80 if code == 3 else arg))
    trace = decode(data)
    parse_trace_text(dump_trace(trace))
    for i, ev in enumerate(trace.events):
        if isinstance(ev, PersistentCongestion):
            assert persistent_congestion_holds(trace.events, i), dump_trace(trace)


def test_decoder_emits_persistent_congestion_when_it_holds():
    """Not vacuous: the shared vector establishes it, and the same ops with an ACK between do not."""
    vectors = ROOT / "fuzz" / "vectors"
    with_pc = decode((vectors / "persistent-congestion.bin").read_bytes()).events
    split = decode((vectors / "pc-split-by-ack.bin").read_bytes()).events
    assert isinstance(with_pc[-1], PersistentCongestion) and persistent_congestion_holds(with_pc, len(with_pc) - 1)
    assert not any(isinstance(ev, PersistentCongestion) for ev in split)


# --- strict or lenient: RFC 9002 §6.1 losses, ack_delay <= max_ack_delay ------------------

def reach(events, **header):
    trace = parse_trace_text(trace_text(events, **header), "r.jsonl")
    return trace.reachability, trace.lenient_reason


FLIGHT = [sent(0, i) for i in range(5)]


def test_packet_threshold_loss_is_strict():
    # pn 0 lost when pn 3 (0 + kPacketThreshold) is acknowledged, by the ACK at the same time.
    events = FLIGHT + [{"t": 10_000, "ev": "lost", "pns": [0]}, {"t": 10_000, "ev": "ack", "pns": [1, 2, 3]}]
    assert reach(events) == ("strict", "")


def test_loss_short_of_both_thresholds_is_lenient_with_its_line():
    events = FLIGHT + [{"t": 10_000, "ev": "lost", "pns": [0]}, {"t": 10_000, "ev": "ack", "pns": [1, 2]}]
    label, reason = reach(events)
    assert label == "lenient"
    assert reason.startswith("line 7: lost packet 0 is 2 packets before the largest acknowledged 2")
    assert "9/8 x max(smoothed_rtt 10000, latest_rtt 10000) = 11250 us (RFC 9002 §6.1)" in reason


def test_time_threshold_loss_is_strict():
    # pn 0 sent at 0, acked neighbour pn 1 at 10 ms; declared lost by the timer at 11.25 ms.
    events = FLIGHT + [{"t": 10_000, "ev": "ack", "pns": [1]}, {"t": 11_250, "ev": "lost", "pns": [0]}]
    assert reach(events) == ("strict", "")
    early = FLIGHT + [{"t": 10_000, "ev": "ack", "pns": [1]}, {"t": 11_249, "ev": "lost", "pns": [0]}]
    assert reach(early)[0] == "lenient"


def test_loss_of_a_packet_sent_after_every_acknowledged_one_is_lenient():
    events = FLIGHT + [{"t": 10_000, "ev": "ack", "pns": [0]}, {"t": 50_000, "ev": "lost", "pns": [4]}]
    label, reason = reach(events)
    assert label == "lenient" and "not sent before an acknowledged packet (largest acknowledged 0" in reason


def test_ack_delay_above_max_ack_delay_is_lenient():
    events = FLIGHT[:1] + [{"t": 40_000, "ev": "ack", "pns": [0], "ack_delay": 25_000}]
    assert reach(events) == ("strict", "")
    assert reach(events, max_ack_delay=20_000) == (
        "lenient", "line 3: ack_delay 25000 us exceeds max_ack_delay 20000 us (RFC 9000 §18.2)")


# RFC 9002 §6.2: after SAMPLE, PTO = smoothed 10000 + max(4 x rttvar 5000, 1000) + max_ack_delay
# 25000 = 55000 us; the timer counts from the last send and fires late by at most kGranularity.
PTO_US = 55_000


def test_silence_past_the_pto_with_a_packet_in_flight_is_lenient():
    """The picoquic "10 s with one packet outstanding" shape: its connection sends a probe
    when the PTO expires, so an ACK long after, with nothing sent, is not reachable."""
    flight = SAMPLE + [sent(20_000, 1)]
    on_time = flight + [{"t": 20_000 + PTO_US + 1_000, "ev": "ack", "pns": [1]}]
    assert reach(on_time) == ("strict", "")
    late = flight + [{"t": 10_020_000, "ev": "ack", "pns": [1]}]
    label, reason = reach(late)
    assert label == "lenient"
    assert reason == ("line 5: 1 packet(s) in flight and nothing sent since t=20000: the PTO timer "
                      "expires at t=75000, 9945000 us before this event, and the sender must send a "
                      "probe then (RFC 9002 §6.2.1, §6.2.4)")


def test_a_probe_at_the_deadline_keeps_the_trace_strict_and_backs_the_timer_off():
    probe = SAMPLE + [sent(20_000, 1), sent(20_000 + PTO_US, 2)]
    # pto_count is now 1: the next deadline is the probe's time + 2 x PTO (RFC 9002 §6.2.1).
    backed_off = probe + [{"t": 75_000 + 2 * PTO_US, "ev": "ack", "pns": [1, 2]}]
    assert reach(backed_off) == ("strict", "")
    past_it = probe + [{"t": 75_000 + 2 * PTO_US + 1_001, "ev": "ack", "pns": [1, 2]}]
    assert reach(past_it)[1].startswith("line 6: 2 packet(s) in flight and nothing sent since t=75000")
    # An ACK resets the backoff (Appendix A.7).  Packet 3, sent before the backed-off deadline,
    # is acknowledged 10 ms later: smoothed 10000, rttvar 3750, PTO 50000 us, pto_count 0.
    acked = probe + [sent(180_000, 3), {"t": 190_000, "ev": "ack", "pns": [1, 2, 3]}, sent(300_000, 4)]
    assert reach(acked + [{"t": 351_000, "ev": "ack", "pns": [4]}]) == ("strict", "")
    assert reach(acked + [{"t": 351_001, "ev": "ack", "pns": [4]}])[1].startswith(
        "line 9: 1 packet(s) in flight and nothing sent since t=300000: the PTO timer expires at t=350000")


def test_silence_with_nothing_in_flight_is_an_idle_application():
    idle = SAMPLE + [sent(10_000_000, 1), {"t": 10_010_000, "ev": "ack", "pns": [1]}]
    assert reach(idle) == ("strict", "")
    lost = SAMPLE + [sent(20_000, 1), sent(30_000, 2), sent(40_000, 3), sent(50_000, 4),
                     {"t": 60_000, "ev": "lost", "pns": [1]}, {"t": 60_000, "ev": "ack", "pns": [2, 3, 4]},
                     sent(5_000_000, 5)]
    assert reach(lost) == ("strict", "")   # lost packets are out of flight: no timer


def test_a_fuzzed_reproducer_with_52_s_of_silence_in_flight_is_lenient():
    """quiche-css-epoch-counts-idle as the fuzzer found it was strict under RFC 9002 §6.1 and
    §7.6.2 alone: its packet 21 stays in flight for 52 s with nothing sent, which quiche's own
    PTO would end.  (The stored reproducer is its strict repair, tests/test_strictify.py.)"""
    trace = parse_trace_text((ROOT / "tests" / "fixtures" / "quiche-css-epoch-counts-idle-lenient.jsonl").read_text())
    assert trace.reachability == "lenient"
    assert trace.lenient_reason.startswith("line 5: 1 packet(s) in flight and nothing sent since t=20000")


def test_validate_prints_it_and_replay_json_and_findings_carry_it(tmp_path):
    strict = tmp_path / "strict.jsonl"
    strict.write_text(trace_text(FLIGHT + [{"t": 10_000, "ev": "lost", "pns": [0]},
                                           {"t": 10_000, "ev": "ack", "pns": [1, 2, 3]}]))
    lenient = LENIENT_DEATH_SPIRAL
    out = subprocess.run([sys.executable, "-m", "ccdiff", "validate", str(strict), str(lenient)], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout.splitlines()[0].endswith(", strict")
    assert ", lenient (line 6: lost packet 0 is 2 packets before" in out.stdout.splitlines()[1]
    report = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "ccdiff", "replay", str(lenient), "--stack", "oracle:idle=last-send",
                    "--json", str(report)], cwd=ROOT, capture_output=True, check=False)
    document = json.loads(report.read_text())
    assert document["reachability"] == "lenient" and document["lenient_reason"].startswith("line 6:")
    assert document["findings"] and all(f["reachability"] == "lenient" for f in document["findings"])


def test_matrix_json_has_reachability_per_trace():
    from ccdiff.matrix import run_matrix
    lenient = str(LENIENT_DEATH_SPIRAL)
    matrix = run_matrix([lenient], ["oracle:idle=last-send"])
    assert matrix["reachability"] == [{"trace": lenient, "reachability": "lenient",
                                       "lenient_reason": parse_trace_text(
                                           Path(lenient).read_text()).lenient_reason}]
    assert matrix["findings"] and all(f["reachability"] == "lenient" for f in matrix["findings"])


def test_simulator_traces_are_strict():
    """The simulator's loss detection is RFC 9002 §6.1's, so its traces are strict."""
    for scenario in ("death-spiral", "tail-loss", "reordering"):
        result = simulate(load_scenario(scenario), "oracle", 1, record=True, check=False)
        trace = parse_trace_text(result.trace_text(), scenario)
        assert (trace.reachability, trace.lenient_reason) == ("strict", "")


@pytest.mark.parametrize("wait_arg,span_ms,expected", [(0x8F, 160, False), (0x90, 170, True)])
def test_decoder_duration_boundary(wait_arg, span_ms, expected):
    """A 10 ms sample gives (10 + max(4 x 5, 1) + 25) x 3 = 165 ms: the two lost packets,
    sent span_ms apart, establish persistent congestion only beyond it."""
    data = bytes([0x00, 0x00, 0x05, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, wait_arg, 0x00, 0x00, 0x03, 0x81])
    events = decode(data).events
    lost = [ev for ev in events if isinstance(ev, Lost)]
    assert lost and lost[0].pns == (1, 2)
    assert isinstance(events[-1], PersistentCongestion) is expected

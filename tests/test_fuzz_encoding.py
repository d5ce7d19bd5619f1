"""The binary fuzz encoding: shared vectors, and every byte string decodes to a valid trace."""
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccdiff.encoding import MAX_EVENTS, decode, encode, wait_us
from ccdiff.trace import (Ack, AppIdle, Lost, Sent, dump_trace, judge_reachability, load_trace,
                          parse_trace_text)

VECTORS = Path(__file__).resolve().parent.parent / "fuzz" / "vectors"
NAMES = sorted(p.stem for p in VECTORS.glob("*.bin"))
EXAMPLES = VECTORS.parent.parent / "examples"


def test_vectors_exist():
    assert {"empty", "basic", "all-ops", "death-spiral", "random-4096"} <= set(NAMES)
    for name in NAMES:
        assert (VECTORS / f"{name}.jsonl").exists(), f"{name}.bin has no expected .jsonl"


@pytest.mark.parametrize("name", NAMES)
def test_python_decoder_matches_shared_vector(name):
    data = (VECTORS / f"{name}.bin").read_bytes()
    assert dump_trace(decode(data, name=name)) == (VECTORS / f"{name}.jsonl").read_text()


def test_basic_vector_by_hand():
    """00 03: send 4; 02 01: ACK the 2 oldest; 03 00: lose the oldest; 05 00: ACK all.
    ACKs and losses come BASE_RTT (10 ms) after the newest packet they cover was sent."""
    trace = decode(bytes([0x00, 0x03, 0x02, 0x01, 0x03, 0x00, 0x05, 0x00]))
    rows = [(type(e).__name__, e.t, getattr(e, "pn", None), getattr(e, "pns", None)) for e in trace.events]
    assert rows == [("Sent", 0, 0, None), ("Sent", 0, 1, None), ("Sent", 0, 2, None), ("Sent", 0, 3, None),
                    ("Ack", 10_000, None, (0, 1)), ("Lost", 10_000, None, (2,)), ("Ack", 10_000, None, (3,))]


def test_wait_table():
    assert [wait_us(a) for a in (0, 127, 128, 223, 224, 255)] == [100, 12_800, 10_000, 960_000, 1_000_000, 32_000_000]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_decode_to_a_trace_the_validator_accepts(data):
    trace = decode(data)
    text = dump_trace(trace)
    reparsed = parse_trace_text(text)          # raises TraceError on any inconsistency
    assert len(reparsed.events) == len(trace.events) <= MAX_EVENTS
    assert dump_trace(decode(data)) == text    # deterministic


def test_event_cap_never_orphans_persistent_congestion():
    # "send 8, lose 1 + persistent congestion" repeated far past the cap.
    data = bytes([0x00, 0x07, 0x03, 0x80]) * 20_000
    trace = decode(data)
    assert len(trace.events) == MAX_EVENTS
    parse_trace_text(dump_trace(trace))


# -- encode: a trace back into bytes (seeds from traces: `ccdiff encode`) -----------------

@pytest.mark.parametrize("name", NAMES)
def test_encode_reproduces_every_decoded_vector_exactly(name):
    """What the decoder wrote, the encoder writes back: every vector, its late ACKs of lost
    packets and persistent congestion included."""
    trace = decode((VECTORS / f"{name}.bin").read_bytes(), name=name)
    data, dropped = encode(trace)
    assert dropped == {} and dump_trace(decode(data, name=name)) == dump_trace(trace)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_encode_reproduces_any_decoded_bytes(data):
    trace = decode(data)
    assert dump_trace(decode(encode(trace)[0])) == dump_trace(trace)


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.jsonl")))
def test_an_encoded_example_keeps_its_packets_times_and_strictness(name):
    """A hand-written trace (other packet numbers, RTTs, ACK frames) comes back strict with
    every packet sent within 100 us of its time and acknowledged, lost or outstanding as in
    the original; only the application idle/data marks are left out, and counted."""
    original = load_trace(str(EXAMPLES / name))
    data, dropped = encode(original)
    copy = judge_reachability(decode(data))
    assert copy.reachability == "strict", copy.lenient_reason
    assert set(dropped) <= {"AppIdle", "AppData"}
    assert dropped.get("AppIdle", 0) == sum(isinstance(e, AppIdle) for e in original.events)
    sent = [e for e in original.events if isinstance(e, Sent)]
    again = [e for e in copy.events if isinstance(e, Sent)]
    assert len(again) == len(sent)
    assert all(0 <= a.t - b.t < 100 for a, b in zip(sent, again))
    assert [a.app_limited for a in sent] == [b.app_limited for b in again]

    def fate(trace):      # each packet, in send order: acknowledged, lost, or neither
        order = {e.pn: i for i, e in enumerate(x for x in trace.events if isinstance(x, Sent))}
        out = ["outstanding"] * len(order)
        for e in trace.events:
            if isinstance(e, (Ack, Lost)):
                for pn in e.pns:
                    out[order[pn]] = type(e).__name__ if out[order[pn]] == "outstanding" else out[order[pn]]
        return out
    assert fate(copy) == fate(original)


def test_encode_command_writes_a_seed_and_says_what_it_left_out(tmp_path):
    import subprocess
    import sys
    out = tmp_path / "idle-restart.bin"
    run = subprocess.run([sys.executable, "-m", "ccdiff", "encode", str(EXAMPLES / "idle-restart.jsonl"),
                          "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "4082 events ->" in run.stderr and "left out: 1 AppData, 2 AppIdle" in run.stderr
    assert out.read_bytes() == encode(load_trace(str(EXAMPLES / "idle-restart.jsonl")))[0]
    bad = subprocess.run([sys.executable, "-m", "ccdiff", "encode", str(tmp_path / "missing.jsonl"),
                          "-o", str(tmp_path / "x.bin")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and not (tmp_path / "x.bin").exists()

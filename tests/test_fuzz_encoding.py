"""The binary fuzz encoding: shared vectors, and every byte string decodes to a valid trace."""
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccdiff.encoding import MAX_EVENTS, decode, wait_us
from ccdiff.trace import dump_trace, parse_trace_text

VECTORS = Path(__file__).resolve().parent.parent / "fuzz" / "vectors"
NAMES = sorted(p.stem for p in VECTORS.glob("*.bin"))


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

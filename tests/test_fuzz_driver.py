"""The C fuzz decoder and ledger (fuzz/driver/) against the contract and ccdiff's own.

The vectors are the contract: fz_tool must print every fuzz/vectors/*.jsonl
byte for byte.  The ledger must hand stacks the same resolved events as
ccdiff/ledger.py (bytes in flight before the event, the integer RFC 9002 §5
estimator), checked on the vectors and on random inputs.
"""
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccdiff.encoding import decode
from ccdiff.fuzzing.harness import tool
from ccdiff.ledger import Ledger
from ccdiff.trace import dump_trace

VECTORS = Path(__file__).resolve().parent.parent / "fuzz" / "vectors"
NAMES = sorted(p.stem for p in VECTORS.glob("*.bin"))


@pytest.fixture(scope="module")
def fz_tool(tmp_path_factory):
    return tool(tmp_path_factory.mktemp("fz_tool"))


def c_output(fz_tool, mode: str, path: Path, *extra) -> str:
    return subprocess.run([str(fz_tool), mode, str(path), *extra], check=True,
                          capture_output=True, text=True).stdout


def python_resolved(data: bytes) -> str:
    """The same line format as fz_tool resolve, from ccdiff's decoder and ledger."""
    trace = decode(data)
    ledger = Ledger(trace.header)
    lines = []
    for event in trace.events:
        ev = ledger.resolve(event)
        flags = (1 if ev.app_limited else 0) | (2 if ev.ecn_ce else 0)
        pkts = "".join(f" {pn}:{sent}:{size}:{int(al)}" for pn, sent, size, al in ev.packets)
        spur = "".join(f" {pn}:{sent}:{size}:{int(al)}" for pn, sent, size, al in ev.spurious)
        lines.append(f"{ev.kind} {ev.t} {ev.bytes_in_flight} {flags} {ev.ack_delay} |{pkts} |{spur} | "
                     + " ".join(map(str, ev.rtt)) + "\n")
    return "".join(lines)


@pytest.mark.parametrize("name", NAMES)
def test_c_decoder_reproduces_vector(fz_tool, name):
    expected = (VECTORS / f"{name}.jsonl").read_text()
    assert c_output(fz_tool, "trace", VECTORS / f"{name}.bin", name) == expected


@pytest.mark.parametrize("name", NAMES)
def test_c_ledger_matches_python_ledger(fz_tool, name):
    path = VECTORS / f"{name}.bin"
    out = c_output(fz_tool, "resolve", path)
    assert out == python_resolved(path.read_bytes())
    assert out or name in ("empty", "no-op")


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=600))
def test_c_and_python_agree_on_random_inputs(fz_tool, tmp_path_factory, data):
    path = tmp_path_factory.mktemp("in") / "input.bin"
    path.write_bytes(data)
    text = c_output(fz_tool, "trace", path, "fuzz")
    assert text == c_output(fz_tool, "trace", path, "fuzz")  # deterministic
    assert text == dump_trace(decode(data))                   # decode() names its trace "fuzz"
    assert c_output(fz_tool, "resolve", path) == python_resolved(data)

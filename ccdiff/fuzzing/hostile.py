"""Hostile input for ccdiff's own front ends: strategies and the property each must keep.

Every entry point either accepts its input or rejects it with its documented
clean error -- TraceError (file:line: reason) from the trace parser,
SetupError from the SPEC parser, exit 2 (or 0/1) from the CLI -- never
another exception.  The fuzz decoder has no error at all: any bytes are a
trace, and that trace's canonical text parses back to itself.

tests/test_hostile_input.py runs these properties briefly in CI;
bench/bench_hostile.py runs them for minutes.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile

from hypothesis import strategies as st

from ..encoding import decode
from ..errors import SetupError
from ..paths import project_root
from ..spec import parse_spec
from ..trace import TraceError, dump_trace, parse_lines

HEADER = '{"ccdiff_trace": 1, "max_datagram_size": 1200}'

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=5),
    max_leaves=12)
event_like = st.fixed_dictionaries(
    {"t": st.integers(-5, 10**6) | json_values, "ev": st.sampled_from(["sent", "ack", "lost",
                                                                        "persistent_congestion", "x"])},
    optional={"pn": json_values | st.integers(0, 50), "bytes": json_values | st.integers(0, 2000),
              "pns": json_values | st.lists(st.integers(0, 50) | st.lists(st.integers(0, 50), max_size=3)),
              "ack_delay": json_values, "ecn_ce": json_values, "app_limited": json_values,
              "extra": json_values})
# A header line (sometimes broken) and event lines, JSON or not.
trace_lines = st.lists(event_like.map(json.dumps) | st.text(max_size=40), max_size=30)
spec_texts = st.text(max_size=60)
# Bytes of the fuzz encoding (docs/fuzz-encoding.md): every byte string is valid.
encoded = st.binary(max_size=2000)

_EXAMPLE = str(project_root() / "examples" / "death-spiral.jsonl")
cli_args = st.lists(st.sampled_from(
    ["replay", "validate", "stacks", "matrix", "decode", "build", "--stack", "--json", "oracle",
     "oracle:idle=x", "nosuch@1", _EXAMPLE, "/nonexistent", "-", ".", "--source", "--help", "", "@", ":",
     "all", "--sanitize", "out.json", "oracle-reno", "/nonexistent/out.json", "--stack=oracle:undo=maybe",
     "quiche@0.26.0:cc=x", "a\x00b"]) | st.text(max_size=12), max_size=6)
# Commands that build, serve, or run whole campaigns (slow, covered by their own
# tests), and `decode -` which reads stdin.
_SKIPPED = {"build", "serve", "conform", "fuzz", "sim", "report", "-"}


def check_trace_lines(lines: list) -> None:
    try:
        parse_lines([HEADER] + lines, "hostile.jsonl")
    except TraceError as exc:
        assert exc.source == "hostile.jsonl" and exc.line >= 1 and exc.reason, exc


def check_spec(text: str) -> None:
    try:
        parse_spec(text)
    except SetupError as exc:
        assert str(exc)


def check_decode(data: bytes) -> None:
    text = dump_trace(decode(data))
    assert dump_trace(parse_lines(text.splitlines(), "decoded.jsonl")) == text


def cli_skipped(args: list) -> bool:
    return bool(_SKIPPED & set(args))


def check_cli(args: list) -> None:
    from ..cli import main
    if cli_skipped(args):
        return
    cwd, out, err = os.getcwd(), io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as scratch:   # --json FILE lands here, not in the repo
        os.chdir(scratch)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(args)
        except SystemExit as exc:          # argparse: usage errors exit 2, --help exits 0
            code = exc.code
        finally:
            os.chdir(cwd)
    assert code in (0, 1, 2), f"exit {code!r}"
    assert "Traceback (most recent call last)" not in err.getvalue(), err.getvalue()[-2000:]


# name -> (strategy, property): what bench/bench_hostile.py cycles through
TARGETS = {
    "trace parser (ccdiff.trace.parse_lines)": (trace_lines, check_trace_lines),
    "fuzz decoder (ccdiff.encoding.decode)": (encoded, check_decode),
    "SPEC parser (ccdiff.spec.parse_spec)": (spec_texts, check_spec),
    "CLI (ccdiff.cli.main)": (cli_args, check_cli),
}

"""Hostile input: the trace parser, the fuzz decoder and the CLI never crash.

Each either accepts the input or rejects it with its own error (TraceError,
SetupError, exit 2), never another exception or a traceback.
"""
import random
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings

from ccdiff.encoding import decode
from ccdiff.fuzzing.harness import decode_harness
from ccdiff.fuzzing.hostile import (check_cli, check_decode, check_spec, check_trace_lines, cli_args, encoded,
                                    spec_texts, trace_lines)
from ccdiff.trace import dump_trace, parse_lines

ROOT = Path(__file__).resolve().parent.parent


@settings(max_examples=400, deadline=None)
@given(trace_lines)
def test_parser_accepts_or_raises_trace_error(lines):
    check_trace_lines(lines)


@settings(max_examples=300, deadline=None)
@given(spec_texts)
def test_spec_parser_accepts_or_raises_setup_error(text):
    check_spec(text)


@settings(max_examples=300, deadline=None)
@given(encoded)
def test_any_bytes_decode_to_a_trace_that_parses_back(data):
    check_decode(data)


@settings(max_examples=150, deadline=None)
@given(cli_args)
def test_cli_never_raises(args):
    check_cli(args)


def random_inputs(count: int, seed: int = 9) -> list:
    """Byte strings of every shape: empty, odd lengths, uniform bytes, runs of one
    operation; mostly short (the Python side of the comparison is the slow part), a few
    of 4 KiB (2,048 operations)."""
    rng = random.Random(seed)
    out = [b"", b"\x00", b"\xff" * 4096, rng.randbytes(4096), bytes([5, 255, 0, 7] * 1024)]
    while len(out) < count:
        n = rng.choice([1, 2, 3, 7, 16, 33, 64, 128, 255])
        if rng.random() < 0.3:   # operations only: opcode 0-7 (plus unknown ones), any argument
            out.append(bytes(b for _ in range(n // 2) for b in (rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 255]),
                                                                  rng.randrange(256))))
        else:
            out.append(rng.randbytes(n))
    return out


def test_c_decoder_under_asan_ubsan_on_random_inputs(tmp_path):
    """fuzz/driver's decoder, ledger and JSONL writer built with ASan + UBSan: a few
    thousand hostile inputs give no sanitizer report, and each output is the trace
    ccdiff/encoding.py decodes and a trace the parser accepts."""
    exe = decode_harness("plain", sanitize=True)
    inputs = random_inputs(3000)
    for start in range(0, len(inputs), 500):
        batch = inputs[start:start + 500]
        paths = []
        for i, data in enumerate(batch):
            paths.append(tmp_path / f"in-{start + i}.bin")
            paths[-1].write_bytes(data)
        done = subprocess.run([str(exe), *map(str, paths)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "runtime error" not in done.stderr and "Sanitizer" not in done.stderr, done.stderr[-3000:]
        expected = [dump_trace(decode(data)) for data in batch]
        assert done.stdout == "".join(expected)
        for text in expected:
            parse_lines(text.splitlines(), "c-decoded.jsonl")


def test_nul_byte_in_a_path_is_a_clean_error(capsys):
    """Found by bench/bench_hostile.py: open() raises ValueError, not OSError, on a NUL
    byte, so `replay` (and every other path option) gave a traceback."""
    import pytest
    from ccdiff.cli import main
    from ccdiff.trace import TraceError, load_trace
    example = str(ROOT / "examples" / "death-spiral.jsonl")
    for args in (["replay", "a\x00b"], ["replay", example, "--json", "out\x00.json"], ["decode", "\x00"],
                 ["conform", "--out", "dir\x00"], ["matrix", example, "--report", "r\x00"]):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 2
        assert "contains a NUL byte" in capsys.readouterr().err
    with pytest.raises(TraceError, match="path contains a NUL byte"):
        load_trace("a\x00b.jsonl")


def test_unwritable_output_is_exit_2_not_a_traceback():
    for command in ("replay", "matrix"):
        proc = subprocess.run([sys.executable, "-m", "ccdiff", command, "examples/death-spiral.jsonl",
                               "--stack", "oracle", "--json", "/nonexistent/out.json"],
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 2 and "--json /nonexistent/out.json: the folder /nonexistent does not exist" \
            in proc.stderr
        assert "Traceback" not in proc.stderr


def test_cli_subprocess_has_no_traceback_on_garbage_argument(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "replay", "--stack", "quiche@9.9.9",
                           "examples/death-spiral.jsonl"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "quiche@9.9.9 is not built" in proc.stderr

"""The trace format: valid traces round-trip; malformed ones give exit 2 with file, line, reason."""
import subprocess
import sys
from pathlib import Path

import pytest

from ccdiff.trace import TraceError, dump_trace, load_trace, parse_trace_text

ROOT = Path(__file__).resolve().parent.parent
HEADER = '{"ccdiff_trace": 1, "max_datagram_size": 1200}'
SENT = '{"t": 0, "ev": "sent", "pn": 0, "bytes": 1200}'

# (name, trace text, line the error must name, words the reason must contain)
MALFORMED = [
    ("empty file", "", 1, "empty trace"),
    ("header missing", SENT, 1, "header"),
    ("bad version", '{"ccdiff_trace": 7}', 1, "unsupported trace version"),
    ("unknown header field", '{"ccdiff_trace": 1, "mss": 1200}', 1, "unknown header field 'mss'"),
    ("not JSON", HEADER + "\n{t: 0}", 2, "not valid JSON"),
    ("not an object", HEADER + "\n[1, 2]", 2, "must be a JSON object"),
    ("unknown event", HEADER + '\n{"t": 0, "ev": "rto"}', 2, 'unknown or missing "ev"'),
    ("unknown field", HEADER + '\n{"t": 0, "ev": "sent", "pn": 0, "bytes": 1200, "size": 3}', 2,
     'unknown field "size"'),
    ("missing field", HEADER + '\n{"t": 0, "ev": "sent", "pn": 0}', 2, 'missing field "bytes"'),
    ("time as string", HEADER + '\n{"t": "0", "ev": "sent", "pn": 0, "bytes": 1200}', 2, '"t" must be an integer'),
    ("negative time", HEADER + '\n{"t": -5, "ev": "sent", "pn": 0, "bytes": 1200}', 2, '"t" must be between'),
    ("time backwards", HEADER + '\n{"t": 50, "ev": "sent", "pn": 0, "bytes": 1200}\n'
     '{"t": 40, "ev": "sent", "pn": 1, "bytes": 1200}', 3, "time goes backwards"),
    ("pn not increasing", HEADER + "\n" + SENT + "\n" + SENT, 3, "packet number 0 is not above"),
    ("ack of unsent packet", HEADER + "\n" + SENT + '\n{"t": 9, "ev": "ack", "pns": [3]}', 3,
     "ACK of packet 3, which was never sent"),
    ("double ack", HEADER + "\n" + SENT + '\n{"t": 9, "ev": "ack", "pns": [0]}\n'
     '{"t": 10, "ev": "ack", "pns": [0]}', 4, "already acknowledged"),
    ("zero rtt ack", HEADER + "\n" + SENT + '\n{"t": 0, "ev": "ack", "pns": [0]}', 3,
     "positive round-trip time"),
    ("loss of acked packet", HEADER + "\n" + SENT + '\n{"t": 9, "ev": "ack", "pns": [0]}\n'
     '{"t": 9, "ev": "lost", "pns": [0]}', 4, "already acknowledged"),
    ("lost twice", HEADER + "\n" + SENT + '\n{"t": 9, "ev": "lost", "pns": [0]}\n'
     '{"t": 9, "ev": "lost", "pns": [0]}', 4, "already declared lost"),
    ("bad range", HEADER + "\n" + SENT + '\n{"t": 9, "ev": "ack", "pns": [[5, 2]]}', 3, "lo > hi"),
    ("empty pns", HEADER + "\n" + SENT + '\n{"t": 9, "ev": "ack", "pns": []}', 3, "non-empty list"),
    ("zero bytes", HEADER + '\n{"t": 0, "ev": "sent", "pn": 0, "bytes": 0}', 2, '"bytes" must be between'),
    ("bool app_limited", HEADER + '\n{"t": 0, "ev": "sent", "pn": 0, "bytes": 1, "app_limited": 1}', 2,
     '"app_limited" must be true or false'),
    ("orphan persistent congestion", HEADER + "\n" + SENT + '\n{"t": 5, "ev": "persistent_congestion"}', 3,
     "must directly follow"),
    ("negative ack delay", HEADER + "\n" + SENT + '\n{"t": 9, "ev": "ack", "pns": [0], "ack_delay": -1}', 3,
     '"ack_delay" must be between'),
    ("lone surrogate in name", '{"ccdiff_trace": 1, "name": "a\\udcffb"}', 1,
     '"name" holds a lone surrogate at character 1'),
    ("lone surrogate in comment", '{"ccdiff_trace": 1, "comment": "\\ud800"}', 1, '"comment" holds a lone surrogate'),
    ("over a million packets in one ack", HEADER + '\n{"t": 9, "ev": "ack", "pns": [[0, 999999], 1000000]}', 2,
     '"pns" names more than 1000000 packets in one event'),
    # the stack's own RTT sample: integer µs, at least 1
    ("rtt as a float", HEADER + "\n" + SENT + '\n{"t": 9, "ev": "ack", "pns": [0], "rtt": 8.5}', 3,
     '"rtt" must be an integer, got 8.5'),
    ("zero rtt sample", HEADER + "\n" + SENT + '\n{"t": 9, "ev": "ack", "pns": [0], "rtt": 0}', 3,
     '"rtt" must be between 1 and'),
    ("bool rtt", HEADER + "\n" + SENT + '\n{"t": 9, "ev": "ack", "pns": [0], "rtt": true}', 3,
     '"rtt" must be an integer'),
    ("rtt on a send", HEADER + '\n{"t": 0, "ev": "sent", "pn": 0, "bytes": 1200, "rtt": 5}', 2,
     'unknown field "rtt" in "sent" event'),
]


@pytest.mark.parametrize("name,text,line,words", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_trace_is_rejected_with_line_and_reason(name, text, line, words):
    with pytest.raises(TraceError) as info:
        parse_trace_text(text, source="bad.jsonl")
    assert info.value.line == line
    assert words in info.value.reason
    assert str(info.value).startswith(f"bad.jsonl:{line}: ")


@pytest.mark.parametrize("name,text,line,words", MALFORMED[::4], ids=[m[0] for m in MALFORMED[::4]])
@pytest.mark.parametrize("command", ["validate", "replay"])
def test_cli_exits_2_without_traceback(tmp_path, name, text, line, words, command):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "ccdiff", command, str(path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert f"bad.jsonl:{line}: " in proc.stderr and words in proc.stderr
    assert "Traceback" not in proc.stderr


def test_binary_garbage_and_missing_file_exit_2(tmp_path):
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\xff\xfe\x00binary")
    for path in (garbage, tmp_path / "missing.jsonl"):
        proc = subprocess.run([sys.executable, "-m", "ccdiff", "validate", str(path)],
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert path.name in proc.stderr


def test_examples_round_trip_byte_for_byte():
    for path in sorted((ROOT / "examples").glob("*.jsonl")):
        assert dump_trace(load_trace(str(path))) == path.read_text()


def test_ack_rtt_round_trips_and_a_trace_without_it_is_unchanged():
    """`rtt` on an ack (the stack's own sample, µs) is read, kept and written back in place;
    a trace without it reads and writes as before (Ack.rtt None, no key)."""
    text = (HEADER + "\n" + SENT + '\n{"t": 0, "ev": "sent", "pn": 1, "bytes": 1200}'
            '\n{"t": 9000, "ev": "ack", "pns": [0], "ack_delay": 25, "rtt": 9312}'
            '\n{"t": 9100, "ev": "ack", "pns": [1]}\n')
    trace = parse_trace_text(text)
    assert [ev.rtt for ev in trace.events[2:]] == [9312, None]
    assert dump_trace(trace) == text
    assert dump_trace(parse_trace_text(dump_trace(trace))) == text
    # the trace's own checks and the ledger's estimate keep the trace's difference; the
    # resolved ACK carries the stack's sample beside it
    from ccdiff.ledger import Ledger
    ledger = Ledger(trace.header)
    resolved = [ledger.resolve(ev) for ev in trace.events]
    assert (resolved[2].rtt[0], resolved[2].stack_rtt, resolved[3].stack_rtt) == (9000, 9312, None)
    assert '"rtt"' not in text.replace('"rtt": 9312', "")


def test_ranges_and_singletons_parse_the_same():
    text = HEADER + "\n" + "\n".join(
        f'{{"t": 0, "ev": "sent", "pn": {i}, "bytes": 1200}}' for i in range(5))
    a = parse_trace_text(text + '\n{"t": 9, "ev": "ack", "pns": [0, [1, 3], 4]}')
    b = parse_trace_text(text + '\n{"t": 9, "ev": "ack", "pns": [4, 3, 2, 1, 0]}')
    assert a.events[-1].pns == b.events[-1].pns == (0, 1, 2, 3, 4)
    assert '"pns": [[0, 4]]' in dump_trace(a)


@pytest.mark.parametrize("example", ["death-spiral", "idle-restart"])
def test_streamed_trace_reads_what_load_trace_holds(tmp_path, example):
    """validate/replay/matrix read traces as a stream (ccdiff/trace_stream.py): the same
    events, count, line numbers (blank lines shift them) and strict/lenient label."""
    from ccdiff.trace_stream import StreamedTrace
    lines = (ROOT / "examples" / f"{example}.jsonl").read_text().splitlines()
    spaced = tmp_path / "spaced.jsonl"
    spaced.write_text("".join(line + "\n" + "\n" * (i % 3 == 1) + " \n" * (i % 7 == 2)
                              for i, line in enumerate(lines)))
    whole, streamed = load_trace(str(spaced)), StreamedTrace(str(spaced))
    assert list(streamed.stream()) == whole.events and streamed.n_events == len(whole.events)
    assert [streamed.line_of(i) for i in range(len(whole.events) + 1)] == \
        [whole.line_of(i) for i in range(len(whole.events) + 1)]
    assert (streamed.reachability, streamed.lenient_reason) == (whole.reachability, whole.lenient_reason)


def test_streamed_trace_changed_after_validation_is_an_error(tmp_path):
    from ccdiff.trace_stream import StreamedTrace
    path = tmp_path / "t.jsonl"
    path.write_text((ROOT / "examples" / "death-spiral.jsonl").read_text())
    streamed = StreamedTrace(str(path))
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))   # one event fewer
    with pytest.raises(TraceError, match="changed while replaying"):
        list(streamed.stream())

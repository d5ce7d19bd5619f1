"""A trace's sends against one stack's own window (ccdiff/window_reach.py, RFC 9002 §7)."""
from ccdiff.replay import replay
from ccdiff.trace import parse_trace_text, probe_sends
from ccdiff.window_reach import window_overrun

HEADER = '{"ccdiff_trace": 1, "max_datagram_size": 1200, "initial_rtt_us": 100000}\n'


def sends(t: int, first: int, count: int) -> str:
    return "".join(f'{{"t": {t}, "ev": "sent", "pn": {pn}, "bytes": 1200}}\n' for pn in range(first, first + count))


def overrun(text: str) -> str | None:
    trace = parse_trace_text(HEADER + text)
    return window_overrun(trace, replay(trace, ["oracle"]).runs["oracle"].snapshots)


def test_the_eleventh_datagram_overfills_the_initial_window():
    # RFC 9002 §7.2: the initial window is 10 x max_datagram_size here (12,000 bytes)
    assert overrun(sends(0, 0, 10)) is None
    found = overrun(sends(0, 0, 11))
    assert found.startswith("event 10 (t=0 us) puts 13200 bytes in flight, over the stack's window of 12000")


def test_acknowledged_bytes_make_room():
    text = sends(0, 0, 10) + '{"t": 100000, "ev": "ack", "pns": [0, 1]}\n' + sends(100000, 10, 2)
    assert overrun(text) is None


def test_a_pto_probe_and_the_send_on_entering_recovery_are_exempt():
    # The PTO (RFC 9002 §6.2.1) of an RTT of 100 ms: 100 + 4 x 50 + 25 = 325 ms after the last send.
    probe = sends(0, 0, 10) + sends(325000, 10, 2)
    trace = parse_trace_text(HEADER + probe)
    assert probe_sends(trace) == {10}
    assert overrun(probe) is None                        # two probes: RFC 9002 §6.2.4
    assert overrun(sends(0, 0, 10) + sends(325000, 10, 3)).startswith("event 12")
    # One ACK, then a loss: the window drops to 0.7 x 13,200 = 9,240 bytes with 9,600 in flight.
    recovery = (sends(0, 0, 10) + '{"t": 100000, "ev": "ack", "pns": [1]}\n'
                '{"t": 100000, "ev": "lost", "pns": [0]}\n')
    snapshots = replay(parse_trace_text(HEADER + recovery), ["oracle"]).runs["oracle"].snapshots
    assert snapshots[-1].cwnd < 8 * 1200
    assert overrun(recovery + sends(100000, 10, 1)) is None     # "a single packet can be sent prior to reduction"
    assert overrun(recovery + sends(100000, 10, 2)).startswith("event 13 (t=100000 us) puts 12000 bytes")


def test_the_stored_idle_reproducers_are_ones_the_stacks_own_connections_could_send():
    """fuzz/reproducers/{quinn,s2n-quic}-idle-inflation.jsonl (from each stack's own closed loop,
    minimized): strict, within the convicted stack's window, and the finding fires.  The ngtcp2
    one is not within ngtcp2's window (issue #30 item 6), and its finding page says so."""
    from pathlib import Path

    from ccdiff.fuzzing.triage import signatures, window_of
    from ccdiff.trace import load_trace
    root = Path(__file__).resolve().parent.parent / "fuzz" / "reproducers"
    for name, spec in (("quinn", "quinn@0.11.19"), ("s2n-quic", "s2n-quic@0.91.0")):
        trace = load_trace(str(root / f"{name}-idle-inflation.jsonl"))
        assert trace.reachability == "strict" and window_of(trace, spec) is None
        assert "idle-inflation" in {s.invariant for s in signatures(trace, spec).values()}
    assert window_of(load_trace(str(root / "ngtcp2-idle-inflation.jsonl")), "ngtcp2@1.25.0") is not None

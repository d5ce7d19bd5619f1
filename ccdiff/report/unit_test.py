"""A finding's minimal trace as a test in the stack's own language (issue 15 point 2).

quiche: a Rust `#[test]` for the tests module of src/recovery/congestion/cubic.rs, written
with quiche's own test harness (`TestSender`, src/recovery/congestion/test_sender.rs:
`send_packet`, `ack_n_packets`, `lose_n_packets`, `update_rtt`, `advance_time`) so that a
maintainer can paste it and see it fail.  TestSender acknowledges and loses packets oldest
first, so a trace maps onto it when every ACK and loss covers the oldest packets still
outstanding and every packet has the same size; otherwise `quiche_test` says why not.

Each event is followed by the invariant's assertion (the one ccdiff's checker makes), so
the test fails at the first event where the controller breaks it.
"""
from __future__ import annotations

import re

from ..trace import Ack, AppData, AppIdle, Lost, PersistentCongestion, Sent

# Assertions after each event, in quiche's terms (Congestion through TestSender's Deref).
ASSERTIONS = {
    "future-recovery-start": (
        "assert!(\n"
        "    sender.congestion_recovery_start_time.map_or(true, |start| start <= sender.time),\n"
        "    \"{where}: recovery start {{:?}} after now\",\n"
        "    sender.congestion_recovery_start_time.map(|start| start - sender.time),\n"
        ");"),
    "cwnd-below-minimum": (
        "assert!(\n"
        "    sender.congestion_window >= 2 * sender.max_datagram_size,\n"
        "    \"{where}: cwnd {{}} below the minimum window\",\n"
        "    sender.congestion_window,\n"
        ");"),
}


class NotExpressible(ValueError):
    """The trace cannot be written with TestSender's oldest-first ACKs and losses."""


def quiche_test(trace, invariant: str, name: str, comment: str = "") -> str:
    """The Rust test, or NotExpressible / KeyError (no assertion for this invariant)."""
    check = ASSERTIONS[invariant]
    sizes = {ev.bytes for ev in trace.events if type(ev) is Sent}
    if len(sizes) != 1:
        raise NotExpressible("packets of different sizes (TestSender sends one size per call)")
    size = sizes.pop()
    if size != trace.header.max_datagram_size:
        raise NotExpressible(f"packets of {size} bytes, not max_datagram_size")
    body, outstanding, sent_at, now = [], [], {}, None
    for index, ev in enumerate(trace.events):
        kind = type(ev)
        if now is not None and ev.t > now:
            body.append(f"sender.advance_time(Duration::from_micros({ev.t - now}));")
        now = ev.t
        line = f"event {index} (t = {ev.t} us)"
        if kind is Sent:
            body.append(f"sender.send_packet(size); // pn {ev.pn}")
            outstanding.append(ev.pn)
            sent_at[ev.pn] = ev.t
        elif kind in (Ack, Lost):
            n = len(ev.pns)
            if list(ev.pns) != outstanding[:n]:
                raise NotExpressible(f"{line}: {kind.__name__.lower()} of {list(ev.pns)} is not the oldest "
                                     f"outstanding packets {outstanding[:n]}")
            del outstanding[:n]
            if kind is Ack:
                # RFC 9002 §5.1: a sample from the largest newly acknowledged packet, taken
                # before the ACK reaches the controller (recovery.rs on_ack_received).
                body.append(f"sender.update_rtt(Duration::from_micros({ev.t - sent_at[ev.pns[-1]]}));")
                body.append(f"sender.ack_n_packets({n}, size); // pn {list(ev.pns)}")
            else:
                body.append(f"sender.lose_n_packets({n}, size, None); // pn {list(ev.pns)}")
        elif kind is PersistentCongestion:
            raise NotExpressible(f"{line}: quiche's LegacyRecovery has no persistent congestion")
        elif kind in (AppIdle, AppData):
            continue     # quiche's controller has no hook for them (docs/adapters.md)
        body.append(check.format(where=line))
    fn = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
    lines = [f"    // {text}" for text in (comment or "").splitlines()]
    lines += ["    #[test]", f"    fn {fn}() {{", "        let mut sender = test_sender();",
              "        let size = sender.max_datagram_size;",
              f"        assert_eq!(size, {size});"]
    lines += ["        " + row for stmt in body for row in stmt.splitlines()]
    lines.append("    }")
    return "\n".join(lines) + "\n"

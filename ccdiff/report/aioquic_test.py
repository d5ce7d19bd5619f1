"""A finding's minimal trace as a test for aioquic's own suite (issue 30 item 7).

aioquic's congestion controllers are plain Python classes (src/aioquic/quic/congestion/
cubic.py, reno.py) and its tests drive them directly (tests/test_congestion_cubic.py:
`CubicCongestionControl(...)`, `on_packet_sent`, `on_packet_acked`, ...).  The generated
test does the same, one literal call per controller call, in exactly the order and with
exactly the arguments ccdiff's adapter (implementations/aioquic/adapter.py) gave them when
it replayed the trace: the calls are recorded from that replay, so the test and ccdiff's
verdict see the same controller states.  The order is QuicPacketRecovery's (recovery.py:
the ACK's packets first, then the RTT sample, then the losses _detect_loss finds after
that ACK), which is why a loss declared at the instant of an ACK appears after it.

Each controller call is wrapped by the invariant's check, so the test fails at the first
call where the controller breaks the RFC rule, with a message naming the trace event.
"""
from __future__ import annotations

import re

from .unit_test import NotExpressible

RECORDED = ("on_packet_sent", "on_packet_acked", "on_packets_lost", "on_rtt_measurement",
            "on_persistent_congestion", "on_packets_expired")

# The checks, as methods of the generated TestCase.  Each quotes the rule it asserts.
CHECKS = {
    "growth-in-recovery": '''
    def acked(self, cc, event: str, now: float, packet: QuicSentPacket) -> None:
        # RFC 9002 Appendix B.5, OnPacketAcked: "Do not increase congestion window in
        # recovery period." -- InCongestionRecovery(sent_time) is
        # sent_time <= congestion_recovery_start_time; and RFC 9002 §7.3.2: "A recovery
        # period ends and the sender enters congestion avoidance when a packet sent during
        # the recovery period is acknowledged."  CUBIC "does not make any changes to the TCP
        # Fast Recovery and Fast Retransmit algorithms" (RFC 9438 §4.2).
        start = cc._congestion_recovery_start_time
        before = cc.congestion_window
        cc.on_packet_acked(now=now, packet=packet)
        if start and packet.sent_time <= start:
            self.assertLessEqual(
                cc.congestion_window, before,
                f"{event}: cwnd {before} -> {cc.congestion_window} on the ACK of packet "
                f"{packet.packet_number}, sent at t = {us(packet.sent_time)} us, at or before "
                f"the recovery start t = {us(start)} us",
            )
''',
    "growth-without-ack": '''
    def no_growth(self, cc, event: str, call: str, before: int) -> None:
        # RFC 9002 §7.8 / Appendix B.5: the window grows in OnPacketsAcked only; a send, a
        # loss or a timer may keep or lower it.  "When this occurs, the congestion window
        # SHOULD NOT be increased in either slow start or congestion avoidance."
        self.assertLessEqual(
            cc.congestion_window, before,
            f"{event}: cwnd {before} -> {cc.congestion_window} on {call}, which acknowledges nothing",
        )
''',
}


class _Recorder:
    """Stands for the adapter's controller object: records every call, forwards everything.
    The adapter deep-copies its controller for a provisional snapshot (a loss held back
    until the ACK at its instant); a copy records into its own copied list, so only the
    calls that shaped the real run are kept."""

    def __init__(self, inner, log: list):
        self.inner, self.log = inner, log

    def __getattr__(self, name):
        if name.startswith("__") or name in ("inner", "log"):
            raise AttributeError(name)
        attr = getattr(self.inner, name)
        if name in RECORDED:
            def call(**kwargs):
                self.log.append((name, kwargs, self.inner.congestion_window))
                return attr(**kwargs)
            return call
        return attr


def record(trace, spec: str = "aioquic") -> list:
    """[(event index, trace event, [(call, kwargs, cwnd before), ...]), ...]: the controller
    calls ccdiff's adapter made while it replayed `trace` on `spec` (an aioquic build)."""
    from ..ledger import Ledger
    from ..stacks import load_recipes, open_controller, resolve
    target = resolve(spec, load_recipes())
    if target.recipe is None or target.recipe.name != "aioquic":
        raise NotExpressible(f"{spec} is not an aioquic build")
    controller = open_controller(target, trace.header.max_datagram_size, trace.header.initial_rtt_us,
                                 trace.header.max_ack_delay)
    adapter = getattr(controller, "controller", None)
    if adapter is None or not hasattr(adapter, "cc"):
        raise NotExpressible(f"{spec}: the controller is not in process (an adapter container?)")
    log: list = []
    adapter.cc = _Recorder(adapter.cc, log)
    ledger = Ledger(trace.header)
    out = []
    try:
        for index, ev in enumerate(trace.events):
            start = len(log)
            controller.step(ledger.resolve(ev))
            out.append((index, ev, log[start:]))
        # A loss still held back at the end is committed by nothing: aioquic's timer would.
    finally:
        controller.close()
    return out, adapter.base, target


def _describe(ev) -> str:
    from ..trace import event_to_dict
    d = event_to_dict(ev)
    rest = ", ".join(f"{k} {v}" for k, v in d.items() if k not in ("t", "ev"))
    return f"{d['ev']} {rest}".strip()


def aioquic_test(trace, invariant: str, name: str, comment: str = "", spec: str = "aioquic") -> str:
    """A Python module holding one unittest TestCase for aioquic's tests/ folder (the class
    can be pasted into tests/test_congestion_cubic.py, whose imports it repeats), or
    KeyError (no check for this invariant) / NotExpressible."""
    check = CHECKS[invariant]
    recorded, base, target = record(trace, spec)
    reno = dict(target.options).get("cc", "cubic") != "cubic"
    cls = "RenoCongestionControl" if reno else "CubicCongestionControl"
    module = "reno" if reno else "cubic"
    body = []
    for index, ev, calls in recorded:
        last_acked = None
        line = f"event {index} (t = {ev.t} us)"
        body.append(f"# {line}: {_describe(ev)}")
        if not calls:
            body.append("#   (no call yet: aioquic's _detect_loss runs after the ACK at this instant, "
                        "or its loss timer)" if type(ev).__name__ == "Lost" else "#   (no controller call)")
        for call, kwargs, _ in calls:
            if call == "on_packet_sent":
                p = kwargs["packet"]
                us = round(p.sent_time * 1e6) - base
                body.append(f"packets[{p.packet_number}] = sent_packet({p.packet_number}, at({us}), {p.sent_bytes})")
                stmt = f"cc.on_packet_sent(packet=packets[{p.packet_number}])"
            elif call == "on_packet_acked":
                p = kwargs["packet"]
                now = _at(kwargs["now"], base)
                last_acked = p
                if invariant == "growth-in-recovery":
                    body.append(f'self.acked(cc, "{line}", {now}, packets[{p.packet_number}])')
                    continue
                body.append(f"cc.on_packet_acked(now={now}, packet=packets[{p.packet_number}])")
                continue
            elif call == "on_rtt_measurement":
                now, rtt = kwargs["now"], kwargs["rtt"]
                # recovery.py: latest_rtt = now - sent_time of the largest newly acknowledged packet
                exact = last_acked is not None and now - last_acked.sent_time == rtt and _at(now, base) != repr(now)
                rtt_text = (f"{_at(now, base)} - packets[{last_acked.packet_number}].sent_time" if exact
                            else repr(rtt))
                body.append(f"cc.on_rtt_measurement(now={_at(now, base)}, rtt={rtt_text})")
                continue
            elif call in ("on_packets_lost", "on_packets_expired"):
                pns = ", ".join(f"packets[{p.packet_number}]" for p in kwargs["packets"])
                args = f"now={_at(kwargs['now'], base)}, " if "now" in kwargs else ""
                stmt = f"cc.{call}({args}packets=[{pns}])"
            else:
                stmt = f"cc.{call}()"
            if invariant == "growth-without-ack":
                body.append("before = cc.congestion_window")
                body.append(stmt)
                body.append(f'self.no_growth(cc, "{line}", "{call}", before)')
            else:
                body.append(stmt)
    fn = "test_" + re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
    klass = "Ccdiff" + "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", invariant) if part) + "Test"
    header = [f"# {text}" for text in (comment or "").splitlines()]
    out = header + [
        f"# Drives aioquic's {cls} ({module}.py) call by call as QuicPacketRecovery does",
        "# (recovery.py: on_packet_sent per packet; per ACK frame on_packet_acked for each newly",
        "# acknowledged packet, then on_rtt_measurement, then on_packets_lost for what",
        "# _detect_loss finds).  Generated by ccdiff from the replay of the trace.",
        "from unittest import TestCase",
        "",
        f"from aioquic.quic.congestion.{module} import {cls}",
        "from aioquic.quic.packet import QuicPacketType",
        "from aioquic.quic.packet_builder import QuicSentPacket",
        "from aioquic.tls import Epoch",
        "",
        f"BASE_US = {base}  # the clock's value at trace time 0, in microseconds",
        "",
        "",
        "def at(us: int) -> float:",
        '    """Trace time (microseconds) as aioquic\'s clock: seconds, a float."""',
        "    return (BASE_US + us) / 1e6",
        "",
        "",
        "def us(seconds: float) -> int:",
        "    return round(seconds * 1e6) - BASE_US",
        "",
        "",
        "def sent_packet(packet_number: int, sent_time: float, sent_bytes: int) -> QuicSentPacket:",
        "    return QuicSentPacket(epoch=Epoch.ONE_RTT, in_flight=True, is_ack_eliciting=True,",
        "                          is_crypto_packet=False, packet_number=packet_number,",
        "                          packet_type=QuicPacketType.ONE_RTT, sent_time=sent_time,",
        "                          sent_bytes=sent_bytes)",
        "",
        "",
        f"class {klass}(TestCase):",
    ]
    out += check.strip("\n").splitlines()
    out += ["", f"    def {fn}(self) -> None:",
            f"        cc = {cls}(max_datagram_size={trace.header.max_datagram_size})",
            "        packets = {}"]
    out += ["        " + row for row in body]
    return "\n".join(out) + "\n"


def _at(seconds: float, base: int) -> str:
    us = round(seconds * 1e6) - base
    if (base + us) / 1e6 != seconds:
        return repr(seconds)
    return f"at({us})"

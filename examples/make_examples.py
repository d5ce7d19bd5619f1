"""Regenerate the example traces: python3 examples/make_examples.py

The traces are committed; this script documents how they were made and keeps
them reproducible (same script, same bytes).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ccdiff.ledger import Ledger                          # noqa: E402
from ccdiff.trace import Ack, AppData, AppIdle, Header, Lost, Sent, Trace, dump_trace  # noqa: E402
from oracle import Cubic                                  # noqa: E402

MDS = 1200
HERE = Path(__file__).resolve().parent


class Writer:
    def __init__(self):
        self.events = []
        self.pn = 0

    def send(self, t, count=1, app_limited=False):
        pns = []
        for _ in range(count):
            self.events.append(Sent(t, self.pn, MDS, app_limited))
            pns.append(self.pn)
            self.pn += 1
        return pns

    def ack(self, t, pns):
        self.events.append(Ack(t, tuple(pns)))

    def lose(self, t, pns):
        self.events.append(Lost(t, tuple(pns)))


def death_spiral() -> Trace:
    """The open-loop shape of quiche's CUBIC death spiral (../shared/brief.md).

    Phase 1, collapse: five congestion events, each a loss of a packet sent
    after the previous recovery started, while the pipe is never empty (so no
    idle shift happens yet): 12000 -> 8400 -> 5880 -> 4116 -> 2881 -> 2400.
    Phase 2, the minimum window: every RTT the two outstanding packets are
    acknowledged in one ACK, which drains the pipe, and two new packets are
    sent at that same instant.  A controller that measures idle from the last
    send sees a full RTT of idle on every send and pushes its recovery start
    (= epoch) past now; a correct one sees none and grows.
    """
    rtt, w = 10_000, Writer()
    t = 0
    flight = w.send(t, 5)
    for _ in range(5):
        a, b, c, d, e = flight
        t_ack = t + rtt
        # The ACK of b..d makes a lost by RFC 9002 §6.1's packet threshold (3 later
        # packets acknowledged); loss detection runs before the ACK hook.
        w.lose(t_ack, [a])
        w.ack(t_ack, [b, c, d])
        nxt = t_ack + 100
        flight = w.send(nxt, 5) if _ < 4 else []
        w.ack(t_ack + 200, [e])           # sent before the recovery start: no growth
        t = nxt
    now = t_ack + 200                     # the pipe just drained
    outstanding = w.send(now, 2)
    for _ in range(30):
        now += rtt
        w.ack(now, outstanding)           # drains the pipe...
        outstanding = w.send(now, 2)      # ...and the sender refills it at the same instant
    header = Header(MDS, name="death-spiral",
                    comment="loss collapses cwnd to the minimum; then per RTT two packets are "
                            "acked and two sent at the same instant (quiche CUBIC death spiral)")
    return Trace(header, w.events)


def idle_restart() -> Trace:
    """Bulk transfer in congestion avoidance, 8 s idle, then bulk again.

    Flights are sized by the reference oracle (ACK-clocked, one ACK per two
    packets, RTT 50 ms) and then frozen into an open-loop trace.  A single
    loss early on moves the flow into congestion avoidance.
    """
    rtt, w = 50_000, Writer()
    oracle, ledger = Cubic(MDS, 333_000), Ledger(Header(MDS))

    def emit(ev):
        w.events.append(ev)
        oracle.step(ledger.resolve(ev))

    pending = []       # (ack time, pn)
    now, pn = 0, 0
    lost = []          # the one lost packet, until RFC 9002 §6.1 lets the sender declare it

    def fill(t, stop_sending):
        nonlocal pn
        while not stop_sending and ledger.bytes_in_flight + MDS <= oracle.cwnd:
            emit(Sent(t, pn, MDS))
            pending.append((t + rtt, pn))
            pn += 1

    def run_until(t_end, sending):
        nonlocal now
        fill(now, not sending)
        while pending:
            t_ack = pending[0][0]
            if sending and t_ack > t_end:
                break
            batch = [p for ta, p in pending[:2] if ta == t_ack] or [pending[0][1]]
            del pending[:len(batch)]
            now = t_ack
            if batch[0] == 30:                       # the one loss: leave slow start
                lost.append(30)
                batch = batch[1:]
            if lost and batch and batch[-1] >= lost[0] + 3:
                # RFC 9002 §6.1 packet threshold: declared when 3 later packets are acked.
                emit(Lost(now, tuple(lost)))
                lost.clear()
            if batch:
                emit(Ack(now, tuple(batch)))
            fill(now, not sending or now >= t_end)
        now = max(now, t_end)

    # The application's own events (trace format 2): its send call finds no data at the
    # end of each bulk phase, and it has data again when the next one starts.
    run_until(3_000_000, sending=True)    # bulk for 3 s
    emit(AppIdle(now))
    run_until(3_000_000, sending=False)   # drain
    now = 11_000_000                      # 8 s idle
    emit(AppData(now))
    run_until(13_000_000, sending=True)   # bulk for 2 s
    emit(AppIdle(now))
    run_until(13_000_000, sending=False)
    header = Header(MDS, name="idle-restart",
                    comment="bulk in congestion avoidance, 8 s idle, bulk again (RFC 9438 §4.2 idle)")
    return Trace(header, w.events)


def main() -> None:
    for name, make in (("death-spiral", death_spiral), ("idle-restart", idle_restart)):
        path = HERE / f"{name}.jsonl"
        path.write_text(dump_trace(make()))
        print(path)


if __name__ == "__main__":
    main()

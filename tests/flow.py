"""A small scripted sender for tests: builds a trace event by event and replays it.

    flow = Flow()
    flow.send(10); flow.wait(50_000); flow.ack_all()
    snaps = flow.run("oracle")          # one snapshot per event
"""
from __future__ import annotations

from ccdiff.replay import replay
from ccdiff.trace import Ack, Header, Lost, PersistentCongestion, Sent, Trace, dump_trace, parse_trace_text

MDS = 1200


class Flow:
    def __init__(self, mds: int = MDS):
        self.header = Header(mds)
        self.mds = mds
        self.events = []
        self.now = 0
        self.pn = 0
        self.outstanding = []   # pns in flight, ascending

    def wait(self, us: int) -> "Flow":
        self.now += us
        return self

    def send(self, count: int = 1, app_limited: bool = False) -> list:
        pns = []
        for _ in range(count):
            self.events.append(Sent(self.now, self.pn, self.mds, app_limited))
            self.outstanding.append(self.pn)
            pns.append(self.pn)
            self.pn += 1
        return pns

    def ack(self, pns, ecn_ce: bool = False) -> "Flow":
        pns = sorted(pns)
        self.events.append(Ack(self.now, tuple(pns), 0, ecn_ce))
        self.outstanding = [p for p in self.outstanding if p not in set(pns)]
        return self

    def ack_all(self) -> "Flow":
        return self.ack(list(self.outstanding))

    def lose(self, pns, persistent: bool = False) -> "Flow":
        pns = sorted(pns)
        self.events.append(Lost(self.now, tuple(pns)))
        self.outstanding = [p for p in self.outstanding if p not in set(pns)]
        if persistent:
            self.events.append(PersistentCongestion(self.now))
        return self

    def round_trip(self, packets: int, rtt: int, app_limited: bool = False) -> "Flow":
        """Send a flight, then one RTT later ACK it one packet per ACK (ACK clocking)."""
        flight = self.send(packets, app_limited)
        self.wait(rtt)
        for pn in flight:
            self.ack([pn])
        return self

    def trace(self) -> Trace:
        # Round-trip through the text format so tests also exercise the parser.
        return parse_trace_text(dump_trace(Trace(self.header, list(self.events))))

    def replay(self, *specs):
        return replay(self.trace(), list(specs))

    def run(self, spec: str = "oracle") -> list:
        return self.replay(spec).runs[spec].snapshots

    def last(self, spec: str = "oracle"):
        return self.run(spec)[-1]

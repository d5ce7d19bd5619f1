"""One connection-mode run: a stack's client and server, the scenario's path, virtual time.

The loop is a discrete-event simulator with one clock.  Its events are datagram
arrivals, datagram releases (a paced datagram goes on the wire at the time its
stack asked for), the application's bursts, and each endpoint's own timer (its
loss detection, PTO, ACK delay, pacing, idle: whatever the stack arms).  After
every event the client's application offers what it has, the server's reads,
both endpoints send what they will, and the client's congestion state is read
through the stack's API; a change becomes one record of the run.

The run's record (JSON Lines) holds the datagrams (who sent how many bytes
when, and their fate on the path) and every change of the client's congestion
state, so two runs of one scenario, stack and seed can be compared byte for byte.
"""
from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field

from ..errors import SetupError
from ..paths import implementations_dir
from ..profiles import load_profile
from ..sim.scenario import Scenario
from ..stacks import Target, resolve
from .build import ensure_shim
from .path import LOST, QUEUE_DROP, Path
from .shim import ShimError, open_shim

FORMAT = 1
CLIENT, SERVER = 0, 1
ROLE = ("client", "server")
_ARRIVE, _RELEASE, _APP, _WAKE = 0, 1, 2, 3
# A runaway guard, not a limit a correct stack meets: datagrams one endpoint may emit
# in one call burst (a correct stack stops at its window or its pacer long before).
MAX_BURST = 100_000
# Timers a stack may re-arm at the same microsecond before the run calls it stuck.
MAX_SAME_TIME_TIMERS = 10_000


@dataclass
class ConnectionResult:
    scenario: str
    stack: str
    seed: int
    status: str                      # pass | fail | error
    reasons: list
    metrics: dict
    records: list = field(default_factory=list, repr=False)

    def record_text(self) -> str:
        return "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in self.records)

    def to_dict(self) -> dict:
        return {"mode": "connection", "scenario": self.scenario, "stack": self.stack, "seed": self.seed,
                "status": self.status, "reasons": self.reasons, "metrics": self.metrics}


def shim_options(target: Target, s: Scenario) -> str:
    """The contract's options (docs/connection-mode.md) and the spec's own, `k=v;k=v`."""
    cert = implementations_dir() / "include" / "connection"
    options = [f"mds={s.max_datagram_size}", f"cert={cert / 'cert.pem'}", f"key={cert / 'key.pem'}"]
    options += [f"{k}={v}" for k, v in target.options]
    for text in options:
        if ";" in text:
            raise SetupError(f"connection option {text!r}: a value may not hold ';'")
    return ";".join(options)


def run_connection(scenario: Scenario, stack, seed: int, *, record: bool = True,
                   qlog: str | None = None) -> ConnectionResult:
    """Run one stack's own connection through one scenario with one seed.  qlog: a path
    for the client's own qlog (shims that write one take the `qlog` option)."""
    target = stack if isinstance(stack, Target) else resolve(stack)
    new = open_shim(ensure_shim(target))
    options = shim_options(target, scenario)
    if qlog and ";" in qlog:
        raise SetupError(f"--qlog {qlog!r}: the connection options cannot carry a path with ';'")
    run = _Run(scenario, target, seed, record)
    endpoints = []
    try:
        try:
            endpoints.append(new(False, 0, seed, options + (f";qlog={qlog}" if qlog else "")))
            endpoints.append(new(True, 0, seed, options))
        except ShimError as exc:
            raise SetupError(f"{target.label}: the connection shim refused to start: {exc}") from None
        run.go(*endpoints)
    finally:
        for endpoint in endpoints:
            endpoint.close()
    return run.result()


class _Run:
    def __init__(self, s: Scenario, target: Target, seed: int, record: bool):
        self.s, self.target, self.seed = s, target, seed
        self.path = Path(s, seed)
        profile = load_profile(target.recipe)
        self.floor = max(profile.min_window_datagrams, 2) * s.max_datagram_size
        self.records = []
        self.keep = record
        self.error = None
        self.deadlock_us = None
        self.completion_us = None
        self.established_us = None
        self.heap = []
        self.seq = 0
        self.total = s.bytes * (s.bursts if s.app == "bursts" else 1)
        self.available = s.bytes                 # what the application has offered so far
        self.accepted = 0                        # ... and the client's stack took
        self.delivered = 0                       # what the server's application read
        self.last_delivery = 0
        self.max_stall = 0
        self.last_release = [0, 0]
        self.reading = [None, None]              # per endpoint: until when it reads a batch
        self.sent = [0, 0]
        self.path_lost = 0
        self.queue_drops = 0
        self.events = 0
        self.state = None                        # the client's last (cwnd, bif, ssthresh, in_recovery)
        self.state_t = 0
        self.min_window_us = 0
        self.max_cwnd = 0
        self.transitions = 0
        self.last_stats = {}

    # -- records
    def note(self, entry: dict) -> None:
        if self.keep:
            self.records.append(entry)

    def schedule(self, t: int, kind: int, arg) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, arg))

    # -- the loop
    def go(self, client, server) -> None:
        s = self.s
        self.eps = eps = (client, server)
        self.note({"ccdiff_connection": FORMAT, "scenario": s.name, "stack": self.target.label,
                   "seed": self.seed, "max_datagram_size": s.max_datagram_size})
        if s.app == "bursts":
            for i in range(1, s.bursts):
                self.schedule(i * s.period_us, _APP, i)
        now = 0
        same_time = 0
        fired = [None, None]          # per endpoint: when its timer was handled last
        bumped = 0                    # timers re-called 1 us later in a row
        try:
            self.settle(now)
            while True:
                timers = [ep.timeout(now) for ep in eps]
                for who in (CLIENT, SERVER):
                    if timers[who] is not None and self.reading[who] is not None \
                            and timers[who] < self.reading[who]:
                        timers[who] = self.reading[who]     # it reads its batch first
                    if fired[who] == now and timers[who] is not None and timers[who] <= now:
                        # Still due after the stack handled it: a real clock has moved on by
                        # the next call.  aioquic's float seconds can leave a loss timer due
                        # by one ulp (death-spiral, seed 4): it declares the loss 1 µs later,
                        # as it would live.
                        timers[who] = now + 1
                        bumped += 1
                        if bumped > MAX_SAME_TIME_TIMERS:
                            raise ShimError(f"the {ROLE[who]}'s timer is still due after "
                                            f"{MAX_SAME_TIME_TIMERS:,} calls, 1 us apart: it never advances")
                t_heap = self.heap[0][0] if self.heap else None
                candidates = [t for t in (t_heap, *timers) if t is not None]
                if not candidates:
                    self.deadlock_us = now
                    break
                t = max(min(candidates), now)
                if t > s.deadline_us:
                    break
                same_time = same_time + 1 if t == now else 0
                if same_time > MAX_SAME_TIME_TIMERS:
                    raise ShimError(f"the stack's timer stays at t={now} us after {MAX_SAME_TIME_TIMERS:,} "
                                    "calls: it never advances")
                now = t
                self.events += 1
                if t_heap is not None and t_heap <= now:
                    bumped = 0
                    _, _, kind, arg = heapq.heappop(self.heap)
                    if kind == _ARRIVE:
                        self.receive(arg, now)
                        # An event loop reads every datagram waiting on its socket before it
                        # acts: all that arrive in the same microsecond form one batch.
                        while self.heap and self.heap[0][0] == now and self.heap[0][2] == _ARRIVE:
                            self.receive(heapq.heappop(self.heap)[3], now)
                    elif kind == _RELEASE:
                        who, data = arg
                        self.transmit(who, data, now)
                    elif kind == _WAKE:
                        pass                                # the batch's end: settle() sends
                    else:
                        if self.delivered == self.available:
                            self.last_delivery = now        # nothing was waiting
                        self.available += s.bytes
                else:
                    who = 0 if timers[0] is not None and timers[0] <= now else 1
                    eps[who].on_timeout(now)
                    fired[who] = now
                if self.settle(now):
                    self.completion_us = now
                    break
        except ShimError as exc:
            self.error = f"t={now} us: {exc}"
            self.note({"t": now, "error": str(exc)})
        self.end_us = self.completion_us if self.completion_us is not None else min(now, s.deadline_us)
        if self.state is not None and self.state[0] <= self.floor:
            self.min_window_us += max(0, self.end_us - self.state_t)

    def settle(self, now: int) -> bool:
        """After an event: the applications act, both endpoints send, the client's state is
        read.  True once the server's application has read every byte and the end."""
        client, server = self.eps
        if self.accepted < self.available:
            fin = self.available == self.total
            self.accepted += client.write(self.available - self.accepted, fin, now)
        read = server.read(now)
        if read > self.delivered:
            self.max_stall = max(self.max_stall, now - self.last_delivery)
            self.delivered, self.last_delivery = read, now
        for who in (CLIENT, SERVER):
            if self.reading[who] is not None and now < self.reading[who]:
                continue                 # still reading its batch (rx_batch_us): sends after
            self.reading[who] = None
            self.flush(who, now)
        self.observe(now)
        # The server's stats are read only once every byte is there (it is one call per event).
        return self.delivered >= self.total and server.stats().get("stream_fin_read") == 1

    def receive(self, arg, now: int) -> None:
        """A datagram reaches its endpoint.  The first of a batch opens the endpoint's
        reading window (the scenario's rx_batch_us): until it closes the endpoint reads
        what arrives, sends nothing and leaves its timers for later, as an event loop that
        drains its socket before it does anything else (docs/connection-mode.md)."""
        who, data = arg
        self.eps[who].recv(data, now)
        if self.reading[who] is None:
            self.reading[who] = now + self.s.rx_batch_us
            if self.s.rx_batch_us:
                self.schedule(self.reading[who], _WAKE, who)

    def flush(self, who: int, now: int) -> None:
        ep = self.eps[who]
        for _ in range(MAX_BURST):
            out = ep.send(now)
            if out is None:
                return
            data, at = out
            release = max(now, at, self.last_release[who])
            self.last_release[who] = release
            if release == now:
                self.transmit(who, data, now)
            else:
                self.schedule(release, _RELEASE, (who, data))
        raise ShimError(f"the {ROLE[who]} sent {MAX_BURST:,} datagrams at t={now} us without stopping")

    def transmit(self, who: int, data: bytes, now: int) -> None:
        self.sent[who] += 1
        size = len(data)
        fate = self.path.to_server(now, size) if who == CLIENT else self.path.to_client(now)
        if fate == LOST:
            self.path_lost += 1
        elif fate == QUEUE_DROP:
            self.queue_drops += 1
        else:
            self.schedule(fate, _ARRIVE, (1 - who, data))
        self.note({"t": now, "from": ROLE[who], "size": size,
                   "arrive" if isinstance(fate, int) else "fate": fate})

    def observe(self, now: int) -> None:
        stats = self.eps[CLIENT].stats()
        self.last_stats = stats
        if self.established_us is None and stats.get("established") == 1:
            self.established_us = now
            if self.delivered == 0:
                # The liveness clock starts with the handshake: a scenario's max_stall_us
                # bounds the data phase, as in the closed loop (which has no handshake).  A
                # handshake whose Initials are lost waits out the stack's PTO from its
                # initial RTT (quinn: 333 ms, RFC 9002 §6.2.2, so 1 s then 2 s); that time
                # is handshake_us, and the deadline still counts from t = 0.
                self.last_delivery = now
        state = (stats.get("cwnd"), stats.get("bytes_in_flight"), stats.get("ssthresh"), stats.get("in_recovery"))
        if state == self.state:
            return
        if self.state is not None:
            if self.state[0] is not None and self.state[0] <= self.floor:
                self.min_window_us += now - self.state_t
            if self.state[3] is not None and state[3] is not None and state[3] != self.state[3]:
                self.transitions += 1
        self.state, self.state_t = state, now
        if state[0] is not None:
            self.max_cwnd = max(self.max_cwnd, state[0])
        self.note({"t": now, "cwnd": state[0], "bytes_in_flight": state[1], "ssthresh": state[2],
                   "in_recovery": state[3]})

    # -- the verdict
    def result(self) -> ConnectionResult:
        s = self.s
        stats = self.last_stats
        end = self.end_us
        if self.completion_us is None and self.delivered < self.total:
            self.max_stall = max(self.max_stall, end - self.last_delivery)
        metrics = {
            "completion_us": self.completion_us,
            "goodput_bytes_per_s": self.delivered * 1_000_000 // max(end, 1),
            "min_window_us": self.min_window_us,
            "recovery_transitions": self.transitions if stats.get("in_recovery") is not None else None,
            "delivered_bytes": self.delivered,
            "total_bytes": self.total,
            "datagrams_sent": self.sent[CLIENT],
            "datagrams_received": self.sent[SERVER],
            "packets_lost": stats.get("packets_lost"),
            "path_losses": self.path_lost,
            "queue_drops": self.queue_drops,
            "max_cwnd": self.max_cwnd,
            "final_cwnd": stats.get("cwnd"),
            "max_stall_us": self.max_stall,
            "handshake_us": self.established_us,
            "events": self.events,
            "end_us": end,
        }
        reasons = []
        if self.error:
            reasons.append(f"stack-error: {self.error}")
        if self.completion_us is None:
            if self.deadlock_us is not None and not self.error:
                reasons.append(f"liveness: no timer and nothing in flight at t={self.deadlock_us} us with "
                               f"{self.delivered:,} of {self.total:,} bytes delivered (deadlock)")
            elif not self.error:
                reasons.append(f"deadline: {self.delivered:,} of {self.total:,} bytes delivered by "
                               f"t={s.deadline_us} us")
        if s.max_stall_us and self.max_stall > s.max_stall_us:
            reasons.append(f"liveness: {self.max_stall} us without new delivery (limit {s.max_stall_us} us)")
        status = "error" if self.error else "fail" if reasons else "pass"
        return ConnectionResult(s.name, self.target.label, self.seed, status, reasons, metrics, self.records)

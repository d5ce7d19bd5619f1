"""The closed-loop simulator: one sender gated by the controller under test.

Every packet the sender emits, every ACK and every loss it detects becomes a
ccdiff trace event, and each event goes through the same path as `ccdiff
replay`: Ledger.resolve -> Truth.update -> controller.step -> Checker.check.
The controller's snapshot then decides what the sender may do next: it sends
while bytes_in_flight + max_datagram_size <= cwnd (no pacing).  The trace of a
run is replayable: `ccdiff replay run.jsonl --stack SPEC` gives the same
snapshots and findings.

Same scenario, stack and seed -> the same trace and metrics, byte for byte:
virtual time in integer microseconds, random.Random seeded from the run's
seed only, ties broken by insertion order.
"""
from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field

from ..errors import SetupError
from ..invariants import Checker, Truth
from ..ledger import Ledger
from ..native import AdapterError
from ..profiles import load_profile
from ..snapshot import RECOVERY
from ..stacks import Target, open_controller, resolve
from ..trace import Ack, Header, Lost, PersistentCongestion, Sent, Trace, dump_trace
from .network import Link, LossModel
from .recovery import LossDetection
from .scenario import Scenario

_ARRIVE, _ACK, _APP = 0, 1, 2
NEVER = 2**62


@dataclass
class SimResult:
    scenario: str
    stack: str
    seed: int
    status: str                      # pass | fail | error
    reasons: list                    # why it failed, one line each
    metrics: dict
    findings: list                   # Finding.to_dict(), violations and deviations
    trace: Trace | None = field(default=None, repr=False)

    def trace_text(self) -> str:
        return dump_trace(self.trace) if self.trace is not None else ""

    def to_dict(self) -> dict:
        return {"scenario": self.scenario, "stack": self.stack, "seed": self.seed, "status": self.status,
                "reasons": self.reasons, "metrics": self.metrics, "findings": self.findings}


def simulate(scenario: Scenario, stack, seed: int, *, record: bool = True, check: bool = True,
             recipes: dict | None = None) -> SimResult:
    """Run one stack through one scenario with one seed.  stack: a SPEC string or a Target."""
    target = stack if isinstance(stack, Target) else resolve(stack, recipes)
    s = scenario
    mds = s.max_datagram_size
    header = Header(mds, s.initial_rtt_us, name=f"{s.name} seed={seed}",
                    comment=f"ccdiff sim: scenario {s.name}, seed {seed}, stack {target.label}")
    controller = open_controller(target, mds, s.initial_rtt_us)
    profile = load_profile(target.recipe)
    provisional = bool(target.recipe and target.recipe.loss_applied_with_ack)
    checker = Checker(target.label, mds, target.family, profile.min_window_datagrams, provisional)
    try:
        sim = _Sim(s, seed, header, controller, checker, check)
        sim.run()
    finally:
        if hasattr(controller, "close"):
            controller.close()
    return _judge(s, target, seed, sim, checker, profile, header, record)


class _Sim:
    """State of one run.  run() keeps hot variables local; see simulate()."""

    def __init__(self, s: Scenario, seed: int, header: Header, controller, checker: Checker, check: bool):
        self.s, self.seed, self.header = s, seed, header
        self.controller, self.checker, self.check = controller, checker, check
        self.events = []
        self.error = None
        self.completion_us = None
        self.deadlock_us = None
        self.metrics = {}

    def run(self) -> None:  # noqa: C901  (one loop, kept flat for speed)
        s, seed = self.s, self.seed
        mds = s.max_datagram_size
        events = self.events
        append_event = events.append
        ledger, truth = Ledger(self.header), Truth()
        resolve_ev, truth_update = ledger.resolve, truth.update
        step = self.controller.step
        checker = self.checker
        check = checker.check if self.check else None
        floor = checker.floor
        deadline = s.deadline_us

        loss = LossModel(s.loss_schedule, s.blackouts, random.Random(f"{seed}/loss"))
        ack_loss = LossModel(((NEVER, s.ack_loss_rate),) if s.ack_loss_rate else (), s.blackouts,
                             random.Random(f"{seed}/ack-loss"))
        rng_path = random.Random(f"{seed}/path")
        fwd_delay = s.base_rtt_us // 2
        ret_delay = s.base_rtt_us - fwd_delay
        link = Link(s.rate_bytes_per_s, s.queue_bytes, fwd_delay)
        ld = LossDetection(s.initial_rtt_us, s.max_ack_delay_us)
        detect, pc_check = ld.detect, ld.persistent_congestion
        in_flight = ledger.in_flight

        # -- state shared by the closures below (one-element lists are cheap cells)
        st = {"snap": None, "last_t": 0, "min_us": 0, "transitions": 0, "in_rec": False,
              "max_cwnd": 0, "index": 0}
        status = bytearray()        # per pn: 0 in flight, 1 acknowledged, 2 declared lost
        sent_times = []             # per pn
        chunk_of = []               # per pn: which mds-sized piece of application data it carries
        per_burst = -(-s.bytes // mds)
        total_chunks = per_burst * (s.bursts if s.app == "bursts" else 1)
        delivered = bytearray(total_chunks)
        retx = deque()
        counters = {"delivered": 0, "next_chunk": 0, "available": per_burst, "sent": 0, "lost": 0,
                    "ptos": 0, "pcs": 0, "last_ack_eliciting": None, "last_delivery": 0, "max_stall": 0,
                    "next_pn": 0}

        def emit(ev) -> None:
            r = resolve_ev(ev)
            truth_update(r)
            t = r.t
            try:
                snap = step(r)
            except (AdapterError, ArithmeticError, ValueError) as exc:
                index = st["index"]
                self.error = f"event {index}: {exc}"
                checker.flag("adapter-error", index, t, str(exc))
                append_event(ev)
                raise _Stop from None
            append_event(ev)
            before = st["snap"]
            index = st["index"]
            st["index"] = index + 1
            if check is not None:
                check(index, r, before, snap, truth)
            if before is not None:
                if before.cwnd <= floor:
                    st["min_us"] += t - st["last_t"]
            st["last_t"] = t
            cwnd = snap.cwnd
            if cwnd > st["max_cwnd"]:
                st["max_cwnd"] = cwnd
            in_rec = snap.phase == RECOVERY
            if in_rec != st["in_rec"]:
                st["in_rec"] = in_rec
                st["transitions"] += 1
            st["snap"] = snap

        heap = []
        push = heapq.heappush
        seq = [0]

        def schedule(t, kind, a, b=None):
            seq[0] += 1
            push(heap, (t, seq[0], kind, a, b))

        def transmit(now, chunk, app_limited) -> None:
            pn = counters["next_pn"]
            counters["next_pn"] = pn + 1
            status.append(0)
            sent_times.append(now)
            chunk_of.append(chunk)
            counters["sent"] += 1
            counters["last_ack_eliciting"] = now
            emit(Sent(now, pn, mds, app_limited))
            if loss.drops(now):
                return
            arrival = link.send(now, mds)
            if arrival is None:
                return
            if s.reorder_rate and rng_path.random() < s.reorder_rate:
                arrival += s.reorder_delay_us
            schedule(arrival, _ARRIVE, pn)

        def next_chunk():
            while retx:
                chunk = retx.popleft()
                if not delivered[chunk]:
                    return chunk
            if counters["next_chunk"] < counters["available"]:
                chunk = counters["next_chunk"]
                counters["next_chunk"] = chunk + 1
                return chunk
            return None

        def pump(now) -> None:
            """Send while the controller's window allows (RFC 9002 §7: bytes_in_flight + mds <= cwnd)."""
            if ledger.bytes_in_flight + mds > st["snap"].cwnd:
                return
            # RFC 9002 §7.8: this sending opportunity is app-limited when everything the
            # application has to send leaves room for another datagram in the window.
            waiting = (counters["available"] - counters["next_chunk"] + len(retx)) * mds
            app_limited = ledger.bytes_in_flight + waiting + mds <= st["snap"].cwnd
            while ledger.bytes_in_flight + mds <= st["snap"].cwnd:
                chunk = next_chunk()
                if chunk is None:
                    return
                transmit(now, chunk, app_limited)

        def probe(now) -> None:
            """RFC 9002 §6.2.4: up to pto_probes ack-eliciting packets, whatever the window."""
            for _ in range(s.pto_probes):
                chunk = next_chunk()
                if chunk is None:   # nothing new: resend the oldest unacknowledged data
                    chunk = next((chunk_of[pn] for pn in in_flight if not delivered[chunk_of[pn]]), None)
                if chunk is None:
                    return
                transmit(now, chunk, False)

        def declare(now, lost) -> None:
            for packet in lost:
                pn = packet[0]
                status[pn] = 2
                retx.append(chunk_of[pn])
            counters["lost"] += len(lost)
            persistent = pc_check(lost, status, sent_times)
            emit(Lost(now, tuple(p[0] for p in lost)))
            if persistent:
                counters["pcs"] += 1
                emit(PersistentCongestion(now))

        # Receiver state
        rx = {"pending": [], "largest": -1, "unacked": 0, "timer": None, "last_arrival": 0}

        def send_ack(now) -> None:
            rx["timer"] = None
            rx["unacked"] = 0
            pending = rx["pending"]
            if not pending:
                return
            if ack_loss.drops(now):
                return          # the next ACK frame repeats these ranges
            rx["pending"] = []
            pending.sort()
            ack_delay = min(now - pending[-1][1], s.max_ack_delay_us)
            arrival = now + ret_delay
            if s.jitter_us:
                arrival += rng_path.randrange(s.jitter_us + 1)
            if s.ack_aggregation_us:
                agg = s.ack_aggregation_us
                arrival = -(-arrival // agg) * agg
            arrival = max(arrival, rx["last_arrival"])   # the return path keeps order
            rx["last_arrival"] = arrival
            schedule(arrival, _ACK, tuple(p[0] for p in pending), ack_delay)

        def on_arrival(now, pn) -> None:
            rx["pending"].append((pn, now))
            gap = pn != rx["largest"] + 1
            if pn > rx["largest"]:
                rx["largest"] = pn
            rx["unacked"] += 1
            if (gap and s.ack_on_gap) or rx["unacked"] >= s.ack_every:
                send_ack(now)
            elif rx["timer"] is None:
                rx["timer"] = now + s.max_ack_delay_us

        def on_ack(now, pns, ack_delay) -> bool:
            newly = tuple(pn for pn in pns if status[pn] != 1)
            if not newly:
                return False
            largest = newly[-1]
            if largest > ld.largest_acked:
                ld.largest_acked = largest
            ld.on_rtt_sample(now - sent_times[largest], ack_delay, now)   # the ledger's sample too
            lost = detect(now, in_flight, set(newly))
            if lost:
                declare(now, lost)
            emit(Ack(now, newly, ack_delay))
            fresh = 0
            for pn in newly:
                status[pn] = 1
                chunk = chunk_of[pn]
                if not delivered[chunk]:
                    delivered[chunk] = 1
                    fresh += 1
            if fresh:
                counters["delivered"] += fresh
                stall = now - counters["last_delivery"]
                if stall > counters["max_stall"]:
                    counters["max_stall"] = stall
                counters["last_delivery"] = now
            ld.pto_count = 0            # RFC 9002 A.7
            return counters["delivered"] == total_chunks and counters["available"] == total_chunks

        def on_timer(now) -> None:
            if ld.loss_time is not None:
                lost = detect(now, in_flight)
                if lost:
                    declare(now, lost)
            else:
                ld.pto_count += 1
                counters["ptos"] += 1
                probe(now)

        # -- the loop --------------------------------------------------------
        heappop = heapq.heappop
        if s.app == "bursts":
            for i in range(1, s.bursts):
                schedule(i * s.period_us, _APP, i)
        timer_at = None
        now = 0
        try:
            # the controller's state before anything happens: the first send's snapshot
            # needs a window, so open with the stack's initial window from a Sent event.
            st["snap"] = None
            first = next_chunk()
            transmit(0, first, False)
            pump(0)
            timer_at = ld.timer(counters["last_ack_eliciting"], ledger.bytes_in_flight)
            while True:
                t_heap = heap[0][0] if heap else NEVER
                t_rx = rx["timer"] if rx["timer"] is not None else NEVER
                t_tx = timer_at if timer_at is not None else NEVER
                now = min(t_heap, t_rx, t_tx)
                if now == NEVER:
                    self.deadlock_us = st["last_t"]
                    break
                if now > deadline:
                    break
                if t_heap == now:
                    _, _, kind, a, b = heappop(heap)
                    if kind == _ARRIVE:
                        on_arrival(now, a)
                        continue
                    if kind == _ACK:
                        if on_ack(now, a, b):
                            self.completion_us = now
                            break
                    else:   # _APP: a new burst
                        if counters["delivered"] == counters["available"]:
                            counters["last_delivery"] = now   # nothing was waiting
                        counters["available"] += per_burst
                elif t_rx == now:
                    send_ack(now)
                    continue
                else:
                    on_timer(now)
                pump(now)
                timer_at = ld.timer(counters["last_ack_eliciting"], ledger.bytes_in_flight)
        except _Stop:
            pass
        end = self.completion_us if self.completion_us is not None else min(max(now, st["last_t"]), deadline)
        if self.completion_us is None and counters["delivered"] < total_chunks:
            stall = end - counters["last_delivery"]
            counters["max_stall"] = max(counters["max_stall"], stall)
        snap = st["snap"]
        if snap is not None and snap.cwnd <= floor:
            st["min_us"] += max(0, end - st["last_t"])
        delivered_bytes = min(counters["delivered"] * mds, s.bytes * (s.bursts if s.app == "bursts" else 1))
        self.metrics = {
            "completion_us": self.completion_us,
            "goodput_bytes_per_s": delivered_bytes * 1_000_000 // max(end, 1),
            "min_window_us": st["min_us"],
            "recovery_transitions": st["transitions"],
            "delivered_bytes": delivered_bytes,
            "total_bytes": s.bytes * (s.bursts if s.app == "bursts" else 1),
            "packets_sent": counters["sent"],
            "packets_lost": counters["lost"],
            "queue_drops": link.drops,
            "ptos": counters["ptos"],
            "persistent_congestions": counters["pcs"],
            "max_cwnd": st["max_cwnd"],
            "final_cwnd": snap.cwnd if snap is not None else None,
            "max_stall_us": counters["max_stall"],
            "events": len(events),
            "end_us": end,
        }


class _Stop(Exception):
    """The controller failed: the run ends at this event."""


def _judge(s: Scenario, target: Target, seed: int, sim: _Sim, checker: Checker, profile, header,
           record: bool) -> SimResult:
    findings = checker.finish()
    for finding in findings:
        finding.line = finding.event_index + 2          # dump_trace: header on line 1
        explaining = profile.explaining(finding.invariant)
        if explaining:
            finding.status = "deviation"
            finding.detail += "; documented deviations: " + ", ".join(d["id"] for d in explaining)
    findings.sort(key=lambda f: (f.event_index, f.invariant))
    m = sim.metrics
    reasons = []
    if sim.error:
        reasons.append(f"adapter-error: {sim.error}")
    if m["completion_us"] is None:
        if sim.deadlock_us is not None:
            reasons.append(f"liveness: nothing left to do at t={sim.deadlock_us} us with "
                           f"{m['delivered_bytes']} of {m['total_bytes']} bytes delivered (deadlock)")
        else:
            reasons.append(f"deadline: {m['delivered_bytes']} of {m['total_bytes']} bytes delivered "
                           f"by t={s.deadline_us} us")
    if s.max_stall_us and m["max_stall_us"] > s.max_stall_us:
        reasons.append(f"liveness: {m['max_stall_us']} us without new delivery (limit {s.max_stall_us} us)")
    if s.check_invariants:
        for f in findings:
            if f.status == "violation" and f.invariant != "adapter-error":
                reasons.append(f"{f.invariant} (x{f.count}) at event {f.event_index} (line {f.line}, "
                               f"t={f.t_us} us): {f.detail}")
    trace = None
    if record:
        trace = Trace(header, sim.events, f"{s.name}-seed{seed}", list(range(2, len(sim.events) + 2)))
    return SimResult(s.name, target.label, seed, "fail" if reasons else "pass", reasons, m,
                     [f.to_dict() for f in findings], trace)


__all__ = ["simulate", "SimResult", "SetupError"]

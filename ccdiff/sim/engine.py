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

from ..divergence import Differential
from ..errors import SetupError
from ..invariants import Checker, Truth
from ..ledger import Ledger
from ..native import AdapterError
from ..profiles import judge, load_profile
from ..replay import fix_replays
from ..snapshot import RECOVERY
from ..stacks import Target, open_controller, resolve
from ..status import status_of
from ..trace import (Ack, AppData, AppIdle, Header, Lost, PersistentCongestion, Sent, Trace, dump_trace,
                     judge_reachability)
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
    header = Header(mds, s.initial_rtt_us, name=f"{s.name} seed={seed}", max_ack_delay=s.max_ack_delay_us,
                    comment=f"ccdiff sim: scenario {s.name}, seed {seed}, stack {target.label}")
    controller = open_controller(target, mds, s.initial_rtt_us, s.max_ack_delay_us)
    profile = _profile(target.recipe)
    provisional = bool(target.recipe and target.recipe.loss_applied_with_ack)
    # The path's bandwidth-delay product tells stuck-at-minimum when a small window is
    # the path's own operating point (ccdiff/invariants.py near_floor_limit).
    bdp_bytes = s.rate_bytes_per_s * s.base_rtt_us // 1_000_000
    checker = Checker(target.label, mds, target.family, profile.min_window_datagrams, provisional,
                      bdp_bytes=bdp_bytes, mechanisms=profile.mechanisms(mds, target.family),
                      **profile.checker_options(target.options))
    # The stack's window against its reference oracle's on the run's own events (issue #21
    # item 5): an arithmetic slip that keeps every per-event invariant still shows.
    differential = None
    if check and target.kind == "native":
        differential = Differential(target.label, profile, target.family, mds, s.initial_rtt_us)
    try:
        sim = _Sim(s, seed, header, controller, checker, check, Truth(ecn=profile.ecn), differential)
        sim.run()
    finally:
        if hasattr(controller, "close"):
            controller.close()
    return _judge(s, target, seed, sim, checker, profile, header, record, differential)


_PROFILES: dict = {}


def _profile(recipe):
    """load_profile, read once per process (conform workers run many cases)."""
    key = None if recipe is None else str(recipe.folder)
    if key not in _PROFILES:
        _PROFILES[key] = load_profile(recipe)
    return _PROFILES[key]


class _Sim:
    """State of one run.  run() keeps hot variables local; see simulate()."""

    def __init__(self, s: Scenario, seed: int, header: Header, controller, checker: Checker, check: bool,
                 truth: Truth, differential: Differential | None = None):
        self.s, self.seed, self.header = s, seed, header
        self.differential = differential
        self.controller, self.checker, self.check = controller, checker, check
        self.truth = truth           # the run's RFC 9002 timeline, as the stack's profile sees ECN
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
        ledger, truth = Ledger(self.header), self.truth
        resolve_ev, truth_update = ledger.resolve, truth.update
        step = self.controller.step
        checker = self.checker
        check = checker.check if self.check else None
        differ = self.differential.step if self.differential is not None else None
        floor = checker.floor
        deadline = s.deadline_us
        ack_every, max_ack_delay, ack_on_gap = s.ack_every, s.max_ack_delay_us, s.ack_on_gap
        reorder_rate, reorder_delay = s.reorder_rate, s.reorder_delay_us
        jitter, aggregation = s.jitter_us, s.ack_aggregation_us

        loss = LossModel(s.loss_schedule, s.blackouts, random.Random(f"{seed}/loss"))
        drops = loss.drops
        ack_loss = LossModel(((NEVER, s.ack_loss_rate),) if s.ack_loss_rate else (), s.blackouts,
                             random.Random(f"{seed}/ack-loss"))
        rng_path = random.Random(f"{seed}/path")
        fwd_delay = s.base_rtt_us // 2
        ret_delay = s.base_rtt_us - fwd_delay
        link = Link(s.rate_bytes_per_s, s.queue_bytes, fwd_delay)
        link_send = link.send
        ld = LossDetection(s.initial_rtt_us, s.max_ack_delay_us)
        detect, pc_check = ld.detect, ld.persistent_congestion
        in_flight = ledger.in_flight

        status = bytearray()        # per pn: 0 in flight, 1 acknowledged, 2 declared lost
        sent_times = []             # per pn
        chunk_of = []               # per pn: which mds-sized piece of application data it carries
        per_burst = -(-s.bytes // mds)
        total_chunks = per_burst * (s.bursts if s.app == "bursts" else 1)
        delivered = bytearray(total_chunks)
        retx = deque()

        # -- state shared by the closures below (closure cells: cheaper than dicts)
        snap = None                 # the controller's latest snapshot
        cwnd = 0
        index = last_t = min_us = transitions = max_cwnd = 0
        in_rec = False
        n_delivered = next_chunk_i = sent = lost_count = ptos = pcs = 0
        available = per_burst
        app_idle = False        # the application said it has nothing to send (trace format 2)
        last_ack_eliciting = None
        last_delivery = max_stall = next_pn = 0
        seq = 0
        heap = []
        push = heapq.heappush

        def emit(ev) -> None:
            nonlocal snap, cwnd, index, last_t, min_us, transitions, max_cwnd, in_rec
            r = resolve_ev(ev)
            truth_update(r)
            t = r.t
            try:
                after = step(r)
            except (AdapterError, ArithmeticError, ValueError) as exc:
                self.error = f"event {index}: {exc}"
                checker.flag("adapter-error", index, t, str(exc))
                append_event(ev)
                raise _Stop from None
            append_event(ev)
            if check is not None:
                check(index, r, snap, after, truth)
                if differ is not None:
                    differ(index, r, snap, after, truth)
            index += 1
            if snap is not None and cwnd <= floor:
                min_us += t - last_t
            last_t = t
            snap = after
            cwnd = after.cwnd
            if cwnd > max_cwnd:
                max_cwnd = cwnd
            if (after.phase == RECOVERY) != in_rec:
                in_rec = not in_rec
                transitions += 1

        def schedule(t, kind, a, b=None):
            nonlocal seq
            seq += 1
            push(heap, (t, seq, kind, a, b))

        def transmit(now, chunk, app_limited) -> None:
            nonlocal next_pn, sent, last_ack_eliciting
            pn = next_pn
            next_pn = pn + 1
            status.append(0)
            sent_times.append(now)
            chunk_of.append(chunk)
            sent += 1
            last_ack_eliciting = now
            emit(Sent(now, pn, mds, app_limited))
            if drops(now):
                return
            arrival = link_send(now, mds)
            if arrival is None:
                return
            if reorder_rate and rng_path.random() < reorder_rate:
                arrival += reorder_delay
            schedule(arrival, _ARRIVE, pn)

        def next_chunk():
            nonlocal next_chunk_i
            while retx:
                chunk = retx.popleft()
                if not delivered[chunk]:
                    return chunk
            if next_chunk_i < available:
                chunk = next_chunk_i
                next_chunk_i = chunk + 1
                return chunk
            return None

        def pump(now) -> None:
            """Send while the controller's window allows (RFC 9002 §7: bytes_in_flight + mds <= cwnd)."""
            if ledger.bytes_in_flight + mds > cwnd:
                return
            # RFC 9002 §7.8: this sending opportunity is app-limited when everything the
            # application has to send leaves room for another datagram in the window.
            waiting = (available - next_chunk_i + len(retx)) * mds
            app_limited = ledger.bytes_in_flight + waiting + mds <= cwnd
            while ledger.bytes_in_flight + mds <= cwnd:
                chunk = next_chunk()
                if chunk is None:
                    app_out_of_data(now)
                    return
                transmit(now, chunk, app_limited)

        def app_out_of_data(now) -> None:
            """The window has room and nothing is left to send: the application is idle.

            Declared once per idle period, as a real connection's write call that finds
            no stream data (ngtcp2_conn.c conn_write_vmsg_wrapper, quiche send_single,
            picoquic's stream scheduler) -- trace format 2's "app_idle".
            """
            nonlocal app_idle
            if not app_idle:
                app_idle = True
                emit(AppIdle(now))

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
            nonlocal lost_count, pcs
            for packet in lost:
                pn = packet[0]
                status[pn] = 2
                retx.append(chunk_of[pn])
            lost_count += len(lost)
            persistent = pc_check(lost, status, sent_times)
            emit(Lost(now, tuple(p[0] for p in lost)))
            if persistent:
                pcs += 1
                emit(PersistentCongestion(now))

        # Receiver state
        rx_pending = []
        rx_largest = -1
        rx_unacked = 0
        rx_timer = None
        rx_last_arrival = 0

        def send_ack(now) -> None:
            nonlocal rx_pending, rx_unacked, rx_timer, rx_last_arrival
            rx_timer = None
            rx_unacked = 0
            pending = rx_pending
            if not pending:
                return
            if ack_loss.drops(now):
                return          # the next ACK frame repeats these ranges
            rx_pending = []
            pending.sort()
            ack_delay = min(now - pending[-1][1], max_ack_delay)
            arrival = now + ret_delay
            if jitter:
                arrival += rng_path.randrange(jitter + 1)
            if aggregation:
                arrival = -(-arrival // aggregation) * aggregation
            if arrival < rx_last_arrival:
                arrival = rx_last_arrival   # the return path keeps order
            rx_last_arrival = arrival
            schedule(arrival, _ACK, tuple(p[0] for p in pending), ack_delay)

        def on_arrival(now, pn) -> None:
            nonlocal rx_largest, rx_unacked, rx_timer
            rx_pending.append((pn, now))
            gap = pn != rx_largest + 1
            if pn > rx_largest:
                rx_largest = pn
            rx_unacked += 1
            if (gap and ack_on_gap) or rx_unacked >= ack_every:
                send_ack(now)
            elif rx_timer is None:
                rx_timer = now + max_ack_delay

        def on_ack(now, pns, ack_delay) -> bool:
            nonlocal n_delivered, last_delivery, max_stall
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
                n_delivered += fresh
                if now - last_delivery > max_stall:
                    max_stall = now - last_delivery
                last_delivery = now
            ld.pto_count = 0            # RFC 9002 A.7
            return n_delivered == total_chunks and available == total_chunks

        def on_timer(now) -> None:
            nonlocal ptos
            if ld.loss_time is not None:
                lost = detect(now, in_flight)
                if lost:
                    declare(now, lost)
            else:
                ld.pto_count += 1
                ptos += 1
                probe(now)

        # -- the loop --------------------------------------------------------
        heappop = heapq.heappop
        timer = ld.timer
        if s.app == "bursts":
            for i in range(1, s.bursts):
                schedule(i * s.period_us, _APP, i)
        timer_at = None
        now = 0
        try:
            # The first packet opens the connection (every initial window holds one);
            # its snapshot gives the window the sender works with from then on.
            transmit(0, next_chunk(), False)
            pump(0)
            timer_at = timer(last_ack_eliciting, ledger.bytes_in_flight)
            while True:
                t_heap = heap[0][0] if heap else NEVER
                t_rx = rx_timer if rx_timer is not None else NEVER
                t_tx = timer_at if timer_at is not None else NEVER
                now = min(t_heap, t_rx, t_tx)
                if now == NEVER:
                    self.deadlock_us = last_t
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
                        if n_delivered == available:
                            last_delivery = now   # nothing was waiting
                        available += per_burst
                        if app_idle:              # the application has data again
                            app_idle = False
                            emit(AppData(now))
                elif t_rx == now:
                    send_ack(now)
                    continue
                else:
                    on_timer(now)
                pump(now)
                timer_at = timer(last_ack_eliciting, ledger.bytes_in_flight)
        except _Stop:
            pass
        end = self.completion_us if self.completion_us is not None else min(max(now, last_t), deadline)
        if self.completion_us is None and n_delivered < total_chunks:
            max_stall = max(max_stall, end - last_delivery)
        if snap is not None and cwnd <= floor:
            min_us += max(0, end - last_t)
        total_bytes = s.bytes * (s.bursts if s.app == "bursts" else 1)
        delivered_bytes = min(n_delivered * mds, total_bytes)
        self.metrics = {
            "completion_us": self.completion_us,
            "goodput_bytes_per_s": delivered_bytes * 1_000_000 // max(end, 1),
            "min_window_us": min_us,
            "recovery_transitions": transitions,
            "delivered_bytes": delivered_bytes,
            "total_bytes": total_bytes,
            "packets_sent": sent,
            "packets_lost": lost_count,
            "queue_drops": link.drops,
            "ptos": ptos,
            "persistent_congestions": pcs,
            "max_cwnd": max_cwnd,
            "final_cwnd": snap.cwnd if snap is not None else None,
            "max_stall_us": max_stall,
            "events": len(events),
            "end_us": end,
        }


class _Stop(Exception):
    """The controller failed: the run ends at this event."""


def _judge(s: Scenario, target: Target, seed: int, sim: _Sim, checker: Checker, profile, header,
           record: bool, differential: Differential | None = None) -> SimResult:
    findings = checker.finish()
    observed = None
    if differential is not None:
        if differential.watch.finding is not None:
            findings.append(differential.watch.finding)
        differential.triggers.record_mechanisms(checker.first_explained)
        observed = differential.triggers.first
    for finding in findings:
        finding.line = finding.event_index + 2          # dump_trace: header on line 1
    findings = sorted(judge(findings, profile, observed), key=lambda f: (f.event_index, f.invariant))
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
    if record or any(f.status == "violation" for f in findings):
        trace = Trace(header, sim.events, f"{s.name}-seed{seed}", list(range(2, len(sim.events) + 2)))
    return SimResult(s.name, target.label, seed, "fail" if reasons else "pass", reasons, m,
                     _with_status(findings, target, profile, trace), trace if record else None)


def _with_status(findings: list, target: Target, profile, trace: Trace | None) -> list:
    """Findings as JSON with replay's status words (ccdiff/status.py: new, known, fixed,
    consequence, lenient ...): a conform case says what replay and fuzz say of the same
    finding, and its totals count the strict bug reports apart (issue #30)."""
    if trace is None:
        return [f.to_dict() for f in findings]
    reachability = judge_reachability(trace).reachability
    recipe = target.recipe
    fixes = fix_replays(trace, target, profile, findings) if reachability == "strict" else {}
    out = []
    for f in findings:
        status = status_of(f.status, f.invariant, target.version, profile.known, reachability, f.detail,
                           profile.upstream, stack=recipe.name if recipe else "",
                           release=recipe.default_version if recipe else "", fix_replays=fixes)
        d = dict(f.to_dict(), upstream_status=status.text, upstream_kind=status.kind)
        if reachability == "lenient":
            d["reachability"] = "lenient"
        out.append(d)
    return out


__all__ = ["simulate", "SimResult", "SetupError"]

"""Oracle throughput: events per second on a 1-million-event stream, one core.

    python3 bench/bench_oracle.py [--events N]

Prints three figures measured in one run: the oracle alone (ledger + CUBIC),
the oracle with every invariant checked (what `ccdiff replay --stack oracle`
does), and their ratio.  Goal (issue 2): at least 300,000 events/s for the
oracle alone.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ccdiff.invariants import Checker, Truth   # noqa: E402
from ccdiff.ledger import Ledger               # noqa: E402
from ccdiff.trace import Ack, Header, Lost, Sent  # noqa: E402
from oracle import Cubic                       # noqa: E402

MDS = 1200


def make_stream(n_events: int, seed: int = 1) -> list:
    """ACK-clocked bulk flow, ~0.5% random loss, idle gaps now and then: every code path."""
    return list(iter_stream(n_events, seed))


def iter_stream(n_events: int, seed: int = 1):
    """make_stream's events one by one (bench_memory writes 10 M of them to a file)."""
    rng = random.Random(seed)
    outstanding, pn, now, count = [], 0, 0, 0
    while True:
        batch_events = []
        for _ in range(rng.randint(1, 4)):
            batch_events.append(Sent(now, pn, MDS))
            outstanding.append(pn)
            pn += 1
        now += 10_000 + rng.randint(0, 500)
        batch, outstanding = outstanding[:2], outstanding[2:]
        if rng.random() < 0.005 and len(batch) == 2:
            batch_events.append(Lost(now, (batch[0],)))
            batch = batch[1:]
        batch_events.append(Ack(now, tuple(batch)))
        if rng.random() < 0.002:
            for lone in outstanding:
                batch_events.append(Ack(now + 10_000, (lone,)))
            outstanding = []
            now += rng.randint(100_000, 3_000_000)
        for ev in batch_events:
            if count == n_events:
                return
            count += 1
            yield ev


def measure(events, check: bool) -> float:
    header = Header(MDS)
    ledger, oracle = Ledger(header), Cubic(MDS, header.initial_rtt_us)
    truth, checker = Truth(), Checker("oracle", MDS)
    resolve, step = ledger.resolve, oracle.step
    started = time.perf_counter()
    if check:
        before = None
        for index, event in enumerate(events):
            ev = resolve(event)
            truth.update(ev)
            snap = step(ev)
            checker.check(index, ev, before, snap, truth)
            before = snap
    else:
        for event in events:
            step(resolve(event))
    return len(events) / (time.perf_counter() - started)


GOAL_EVENTS_PER_S = 300_000   # issue 2, oracle alone


def rates(n_events: int) -> dict:
    """Both figures on one stream: events/s of the oracle alone and with every invariant."""
    events = make_stream(n_events)
    return {"events": n_events, "alone": measure(events, check=False), "checked": measure(events, check=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    figures = rates(args.events)
    alone, checked = figures["alone"], figures["checked"]
    print(f"{'measure':<44}{'events/s':>12}")
    print(f"{'oracle alone (ledger + CUBIC)':<44}{alone:>12,.0f}")
    print(f"{'oracle + every invariant':<44}{checked:>12,.0f}")
    print(f"{'ratio checked / alone':<44}{checked / alone:>12.2f}")
    print(f"{'goal: oracle alone >= 300,000 events/s':<44}{'met' if alone >= GOAL_EVENTS_PER_S else 'NOT met':>12}")


if __name__ == "__main__":
    main()

"""Structure-aware search with Hypothesis, the oracle in the loop.

Inputs are generated as lists of encoding operations (docs/fuzz-encoding.md):
an opcode and its argument byte, so every example is a meaningful event
stream and Hypothesis's shrinker works on whole operations.  The property is
"replaying this through the stack and its reference oracle shows no violation
we have not stored yet", which covers everything the in-process harness
cannot check cheaply (trajectory-divergence, stuck-at-minimum, ...).  A
failing example is shrunk by Hypothesis, then handed to triage, which
minimizes it further over events and stores it.
"""
from __future__ import annotations

import time

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from ..encoding import decode
from .triage import Triage

# Losses and ACKs are the interesting operations: weight the opcode choice so
# a short list has a few of each (send 0, wait 1, ack 2, lose 3, spurious 4,
# ack_all 5, round 6, ack_and_send 7).
OPCODES = st.sampled_from([0, 0, 1, 2, 2, 3, 4, 5, 5, 6, 7, 7])
OPERATIONS = st.lists(st.tuples(OPCODES, st.integers(0, 255)), min_size=1, max_size=80)
ROUND_EXAMPLES = 200


class _NewFinding(Exception):
    pass


def run(spec: str, triage: Triage, seconds: float, database_dir, on_progress=None) -> dict:
    """Rounds of ROUND_EXAMPLES examples until `seconds` have passed.  "violations": the
    rounds that ended on an example violating an invariant not stored yet."""
    started, examples, rounds, violating = time.monotonic(), 0, 0, 0
    new = []
    database = DirectoryBasedExampleDatabase(str(database_dir))

    while time.monotonic() - started < seconds:
        failing = {}

        @seed(rounds)
        @settings(max_examples=ROUND_EXAMPLES, deadline=None, database=database, derandomize=False,
                  suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                  phases=[Phase.reuse, Phase.generate, Phase.shrink])
        @given(OPERATIONS)
        def prop(ops):
            nonlocal examples
            examples += 1
            data = bytes(b for op in ops for b in op)
            unknown = triage.wanted(decode(data))   # new signatures (differences with --against), or strict upgrades
            if unknown:
                failing["data"] = data     # the last failing call is Hypothesis's shrunk example
                raise _NewFinding(sorted(unknown))

        try:
            prop()
        except _NewFinding:
            violating += 1
            new += triage.add_input(failing["data"], "hypothesis", "hypothesis")
        rounds += 1
        if on_progress:
            elapsed = time.monotonic() - started
            on_progress({"execs_per_sec": examples / max(elapsed, 1e-9), "rounds": rounds,
                         "execs": examples, "violations": violating}, new)
    elapsed = time.monotonic() - started
    return {"execs_per_sec": examples / max(elapsed, 1e-9), "execs": examples, "rounds": rounds,
            "violations": violating, "new": new}

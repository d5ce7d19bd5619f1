"""`ccdiff fuzz`: coverage-guided fuzzing of the stacks' controllers, with triage.

harness.py builds the in-process harnesses (fuzz/driver/, a stack's adapter
built with the engine's instrumentation); engines.py runs AFL++ and
honggfuzz; hypo.py is the structure-aware Hypothesis search with the oracle
in the loop; triage.py replays what the engines found through the Python
replay, deduplicates by signature and minimizes into JSONL reproducers.
"""

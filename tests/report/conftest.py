"""Shared report fixtures: one real run of the death spiral, rendered once per session."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccdiff.build import ensure_built
from ccdiff.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEATH_SPIRAL = ROOT / "examples" / "death-spiral.jsonl"
STACKS = ["oracle", "quiche@0.26.0", "quiche@0.30.0"]
DS_FINDING = "death-spiral--quiche-0.26.0--future-recovery-start"


@pytest.fixture(scope="session")
def death_report(tmp_path_factory):
    """`ccdiff replay examples/death-spiral.jsonl ... --json F --report DIR` on the real quiche builds."""
    for spec in STACKS:
        ensure_built(spec)
    folder = tmp_path_factory.mktemp("death-spiral")
    findings, out = folder / "findings.json", folder / "report"
    args = ["replay", str(DEATH_SPIRAL)] + [a for s in STACKS for a in ("--stack", s)]
    assert main(args + ["--json", str(findings), "--report", str(out)]) == 1   # violations found
    return {"json": findings, "out": out, "doc": json.loads(findings.read_text())}

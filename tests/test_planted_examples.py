"""The examples see every planted bug (issue #21, "examples that exercise every stack").

bench/planted_bugs.py plants one change each in picoquic 1.1.53.0's cubic.c (unpacked
from its sha256-checked registry archive, built with `ccdiff build picoquic --source`
into a scratch build folder) and replays every example trace through the pristine pinned
build and the mutant.  Before the four examples for planted-bug shapes and picoquic's
mechanism-checked deviations, three of these four gave byte-identical replays of the two
examples and the fourth (beta 0.5) was waived as a documented deviation.
"""
from __future__ import annotations

import json
import subprocess
import sys

from ccdiff.build import ensure_built
from ccdiff.paths import project_root

PICOQUIC = {  # planted bug -> the invariant that must catch it, on which example
    "picoquic-beta-0.5": ("excess-reduction", "death-spiral.jsonl"),
    "picoquic-no-recovery-check": ("excess-reduction", "repeated-losses.jsonl"),
    "picoquic-ecn-ignored": ("missing-reduction", "ecn-small-window.jsonl"),
    "picoquic-grows-app-limited": ("growth-while-app-limited", "app-limited-then-bulk.jsonl"),
}


def test_every_planted_picoquic_bug_is_caught_by_the_examples_and_the_control_is_identical(tmp_path):
    ensure_built("picoquic@1.1.53.0")
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, "bench/planted_bugs.py", "--work", str(tmp_path / "work"),
                           "--json", str(out), "--only", *PICOQUIC, "picoquic-control"],
                          cwd=project_root(), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["planted"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["picoquic-control"]["verdict"] == "identical"
    for name, (invariant, example) in PICOQUIC.items():
        row = rows[name]
        assert row["verdict"] == "caught", row
        assert invariant in row["new_violations"].get(example, []), row

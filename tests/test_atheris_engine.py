"""`ccdiff fuzz --engine atheris` (ccdiff/fuzzing/atheris_engine.py): libFuzzer for Python on a
Python stack (aioquic), in process; and the engine/stack combinations that cannot work
exit 2 with the command that would."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ccdiff.build import ensure_built
from ccdiff.fuzzing.atheris_engine import available

ROOT = Path(__file__).resolve().parent.parent


def ccdiff(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.skipif(not available(), reason="atheris not installed (pip install '.[atheris]')")
def test_smoke_campaign_on_aioquic_finds_growth_in_recovery(tmp_path):
    """Seconds of atheris on aioquic from the no-loss seeds: inputs execute with the stack's
    own functions instrumented, and triage stores Cubic's growth in recovery (cubic.py has no
    recovery check) once; a second run resumes and does not store it again."""
    ensure_built("aioquic")
    result = ccdiff("fuzz", "--stack", "aioquic", "--engine", "atheris", "--time", "15s", "--findings",
                    str(tmp_path), "--no-report")
    # exit 1 exactly when a strict bug report is stored (the one verdict vocabulary, issue #30)
    strict_new = int(re.search(r"; (\d+) strict and new", result.stdout).group(1))
    assert result.returncode == (1 if strict_new else 0), result.stdout + result.stderr[-3000:]
    assert re.search(r"\[atheris\] +\d+ s  [1-9]\d* executions \(\d+/s\)", result.stderr), result.stderr[-2000:]
    stored = {p.parent.name for p in (tmp_path / "aioquic").glob("*/finding.json")}
    assert any(name.startswith("growth-in-recovery--") for name in stored), stored
    again = ccdiff("fuzz", "--stack", "aioquic", "--engine", "atheris", "--time", "3s", "--findings",
                   str(tmp_path), "--no-report")
    strict_new = int(re.search(r"; (\d+) strict and new", again.stdout).group(1))
    assert again.returncode == (1 if strict_new else 0), again.stdout + again.stderr[-3000:]
    first = next(name for name in sorted(stored) if name.startswith("growth-in-recovery--"))
    shape = first.split("--", 1)[1]
    assert f"growth-in-recovery ({shape})" not in again.stdout


def test_engine_and_stack_language_must_match(tmp_path):
    for args, message in ((["--stack", "aioquic", "--engine", "afl"], "use --engine atheris"),
                          (["--stack", "aioquic", "--engine", "honggfuzz"], "no C harness for honggfuzz")):
        result = ccdiff("fuzz", *args, "--time", "1s", "--findings", str(tmp_path))
        assert result.returncode == 2 and message in result.stderr, result.stderr
    if available():
        result = ccdiff("fuzz", "--stack", "quinn", "--engine", "atheris", "--time", "1s", "--findings", str(tmp_path))
        assert result.returncode == 2 and "instruments Python code" in result.stderr, result.stderr

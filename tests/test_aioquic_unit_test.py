"""The generated aioquic test (ccdiff/report/aioquic_test.py) runs against aioquic 1.7.2 as
pip installs it (`pip install aioquic==1.7.2`), not ccdiff's copy of its modules: it fails
there, at the event where CubicCongestionControl grows the window on the ACK of a packet
sent before the recovery start (RFC 9002 §7.3.2, Appendix B.5: "Do not increase congestion
window in recovery period."), and the same calls on aioquic's RenoCongestionControl (which
returns early for such packets, reno.py) pass.

The finding: growth-in-recovery on examples/death-spiral.jsonl, minimized by `ccdiff minimize`
to 6 events (issue 30: filed as one report per trace before; one root cause).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ccdiff.paths import build_dir
from ccdiff.report.aioquic_test import aioquic_test
from ccdiff.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
VERSION = "1.7.2"


def installed_aioquic() -> Path:
    """The pip-installed aioquic package folder, which must be 1.7.2 and carry the same
    congestion modules as the sdist ccdiff pins (implementations/aioquic/stack.toml)."""
    proc = subprocess.run([sys.executable, "-c", "import aioquic, os; print(aioquic.__version__); "
                           "print(os.path.dirname(aioquic.__file__))"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"aioquic is not installed (pip install aioquic=={VERSION}): {proc.stderr[-300:]}")
    version, folder = proc.stdout.split()
    if version != VERSION:
        pytest.skip(f"aioquic {version} is installed, not {VERSION}")
    return Path(folder)


@pytest.fixture(scope="module")
def minimal(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("min") / "min.jsonl"
    proc = subprocess.run([sys.executable, "-m", "ccdiff", "minimize", "examples/death-spiral.jsonl", "--stack",
                           "aioquic@1.7.2", "--invariant", "growth-in-recovery", "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def run_generated(source: str, work: Path) -> subprocess.CompletedProcess:
    (work / "test_ccdiff_growth_in_recovery.py").write_text(source)
    return subprocess.run([sys.executable, "-m", "unittest", "-v", "test_ccdiff_growth_in_recovery"], cwd=work,
                          capture_output=True, text=True, timeout=120)


def test_pip_aioquic_is_the_pinned_release():
    folder = installed_aioquic()
    pinned = build_dir() / "aioquic" / VERSION / "upstream" / "aioquic" / "quic" / "congestion"
    if not pinned.exists():
        pytest.skip(f"aioquic {VERSION} is not built under {pinned.parent.parent.parent}")
    for name in ("base.py", "cubic.py", "reno.py"):
        assert (folder / "quic" / "congestion" / name).read_bytes() == (pinned / name).read_bytes(), name


def test_the_generated_python_test_fails_on_aioquic_1_7_2(minimal, tmp_path):
    installed_aioquic()
    source = aioquic_test(load_trace(str(minimal)), "growth-in-recovery", "ccdiff_growth_in_recovery",
                          "ccdiff: growth-in-recovery, minimized from examples/death-spiral.jsonl")
    # It drives aioquic's own class with aioquic's own packet type, and quotes the rule.
    assert "from aioquic.quic.congestion.cubic import CubicCongestionControl" in source
    assert '"Do not increase congestion window in\n        # recovery period."' in source
    assert "cc.on_packets_lost(now=at(10000), packets=[packets[0]])" in source
    proc = run_generated(source, tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    # The ACK of packet 3 comes before the loss of packet 0 at the same instant (aioquic hands
    # an ACK's packets to the controller before _detect_loss): slow start, then recovery from
    # t = 10 ms.  Packet 4 was sent at 0, before it; its ACK must not grow the window.
    assert ("AssertionError: 3000 not less than or equal to 2400 : event 5 (t = 10200 us): cwnd 2400 -> 3000 "
            "on the ACK of packet 4, sent at t = 0 us, at or before the recovery start t = 10000 us") in output
    assert "FAILED (failures=1)" in output


def test_the_same_calls_pass_on_aioquic_reno(minimal, tmp_path):
    """The control: RenoCongestionControl returns before any growth for a packet sent at or
    before the recovery start (reno.py on_packet_acked), so the same test passes."""
    installed_aioquic()
    source = aioquic_test(load_trace(str(minimal)), "growth-in-recovery", "ccdiff_growth_in_recovery",
                          spec="aioquic-reno@1.7.2")
    assert "from aioquic.quic.congestion.reno import RenoCongestionControl" in source
    proc = run_generated(source, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Ran 1 test" in proc.stderr and "OK" in proc.stderr


def test_the_finding_md_carries_the_python_test(tmp_path):
    """`ccdiff replay examples/death-spiral.jsonl --stack aioquic --report DIR`: the new
    growth-in-recovery report has the generated test under "As a test for aioquic's own suite"."""
    from ccdiff.cli import main
    out = tmp_path / "report"
    assert main(["replay", str(ROOT / "examples" / "death-spiral.jsonl"), "--stack", "aioquic@1.7.2",
                 "--report", str(out)]) == 1
    pages = [p for p in out.rglob("finding.md") if "growth-in-recovery" in str(p)]
    assert len(pages) == 1, sorted(str(p) for p in out.rglob("finding.md"))
    text = pages[0].read_text()
    assert text.startswith("**Status: new")
    assert "### As a test for aioquic's own suite" in text
    assert "```python\n" in text and "class CcdiffGrowthInRecoveryTest(TestCase):" in text

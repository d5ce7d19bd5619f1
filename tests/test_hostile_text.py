"""Issue #32: text from a trace, a file name or a scenario never drives the terminal, and
never makes a junit.xml ill-formed (ccdiff/streams.py, ccdiff/output.py xml_safe)."""
from __future__ import annotations

import io
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from ccdiff.streams import GuardedStream

ROOT = Path(__file__).resolve().parent.parent
DEATH_SPIRAL = ROOT / "examples" / "death-spiral.jsonl"
HOSTILE = "x\x1b]0;owned\x07\x1b[31mred\x9b.jsonl"


def test_a_file_name_with_control_characters_is_printed_escaped_and_junit_stays_xml(tmp_path):
    trace = tmp_path / HOSTILE
    trace.write_bytes(DEATH_SPIRAL.read_bytes())
    for argv in (["matrix", trace, "--stack", "oracle:idle=last-send", "--report", tmp_path / "R"],
                 ["validate", trace], ["replay", trace, "--stack", "oracle"]):
        proc = subprocess.run([sys.executable, "-m", "ccdiff", *map(str, argv)], capture_output=True,
                              cwd=ROOT)
        assert proc.returncode in (0, 1), proc.stderr
        for stream in (proc.stdout, proc.stderr):
            assert not any(b in stream for b in (b"\x1b", b"\x07", b"\xc2\x9b")), stream
        assert b"x\\x1b]0;owned" in proc.stdout + proc.stderr      # (rich drops the BEL itself)
    root = ET.parse(tmp_path / "R" / "junit.xml").getroot()      # well-formed XML 1.0
    assert any("x\\x1b]0;owned\\x07" in case.get("classname") for case in root.iter("testcase"))


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_colours_and_the_progress_bar_pass_and_nothing_else():
    screen = _Terminal()
    stream = GuardedStream(screen)
    stream.write("\x1b[1mbold\x1b[0m \x1b[2K\x1b[1A\r" + HOSTILE)
    assert screen.getvalue() == "\x1b[1mbold\x1b[0m \x1b[2K\x1b[1A\r" + "x\\x1b]0;owned\\x07\x1b[31mred\\x9b.jsonl"
    piped = io.StringIO()                      # no terminal: no escape sequence at all
    GuardedStream(piped).write("\x1b[1mbold\r")
    assert piped.getvalue() == "\\x1b[1mbold\\x0d"

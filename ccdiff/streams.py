"""stdout and stderr of one ccdiff command (issue #32).

Two rules, for every line any part of ccdiff prints:
- a reader that goes away (`| head`, a pager quit early) costs nothing but the rest of the
  terminal output: the command goes on, writes its --json, --report and --trace outputs and
  keeps its exit code;
- text from a trace, a qlog, a scenario or a file name never drives the terminal: control
  characters are printed escaped (ESC as \\x1b, BEL as \\x07).  On a terminal, the CSI
  sequences (ESC [ digits letter) that rich's colours and progress bar are made of pass;
  OSC, DCS and every other control sequence (window titles, the clipboard) are escaped.
  A stream that is no terminal gets no escape sequence at all, so a CI log or a file
  never holds one.
"""
from __future__ import annotations

import contextlib
import os
import re

# C0 controls but tab and newline, DEL, and the C1 controls (some terminals obey them).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ON_A_TERMINAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")   # a progress bar's \r passes
_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _escape(text: str, control=_CONTROL) -> str:
    return control.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def printable(text: str, csi: bool = False) -> str:
    """text with its control characters escaped; csi: keep CSI sequences (a terminal's).
    A lone surrogate (a file name that is not UTF-8) is escaped too, never an encode error."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if not csi:
        return _escape(text)
    out, last = [], 0
    for match in _CSI.finditer(text):
        out += [_escape(text[last:match.start()], _CONTROL_ON_A_TERMINAL), match.group()]
        last = match.end()
    out.append(_escape(text[last:], _CONTROL_ON_A_TERMINAL))
    return "".join(out)


class GuardedStream:
    """A text stream that escapes control characters and survives a reader that is gone."""

    def __init__(self, inner):
        self.inner = inner
        self.gone = False
        try:
            self._csi = bool(inner.isatty())
        except (AttributeError, ValueError, OSError):
            self._csi = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self.inner.write(printable(text, self._csi))
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.inner.flush()
            except BrokenPipeError:
                self._reader_gone()

    def _reader_gone(self) -> None:
        self.gone = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            # What the interpreter still holds for this fd is flushed at exit: into /dev/null.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.inner.fileno())
            os.close(devnull)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@contextlib.contextmanager
def guarded(sys_module):
    """sys.stdout and sys.stderr guarded for the block, restored after it."""
    out, err = sys_module.stdout, sys_module.stderr
    sys_module.stdout, sys_module.stderr = GuardedStream(out), GuardedStream(err)
    try:
        yield
    finally:
        sys_module.stdout, sys_module.stderr = out, err

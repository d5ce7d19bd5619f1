"""A trace too big to hold: validated from its file once, then re-read for each replay.

`ccdiff validate`, `replay` and `matrix` take traces of any length (10 million events
and more) in bounded memory: a StreamedTrace keeps the header, the event count, the
strict/lenient judgement and where blank lines shift line numbers (for the line of a
finding), never the events.  The first pass validates the whole file before anything
runs, so a malformed trace fails exactly as load_trace does (exit 2, nothing opened).
"""
from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from array import array
from bisect import bisect_right

from .trace import Causality, TraceError, reachability_of, read_file


class StreamedTrace:
    """Duck-types Trace for replay and its reports: header, source, n_events,
    reachability, lenient_reason, line_of(); stream() re-reads the events."""

    def __init__(self, path: str):
        self.source = path
        causality = Causality()
        reader = read_file(path, causality)
        self.header = next(reader)
        # An event's line is its index plus an offset that changes only after a blank line:
        # the indices where it changes and the new offsets, not one line number per event.
        self._starts, self._offsets = array("q"), array("q")
        count = 0
        for lineno, _ in reader:
            if not self._offsets or lineno - count != self._offsets[-1]:
                self._starts.append(count)
                self._offsets.append(lineno - count)
            count += 1
        causality.finish()
        self.n_events = count
        self.reachability, self.lenient_reason = reachability_of(causality)

    def line_of(self, index: int) -> int:
        if not 0 <= index < self.n_events:
            return 0
        return index + self._offsets[bisect_right(self._starts, index) - 1]

    def stream(self):
        """The events again, from the file, validated again: a file changed since the
        first pass fails at its line instead of replaying something else."""
        reader = read_file(self.source, Causality())
        next(reader)
        count = 0
        for _, ev in reader:
            count += 1
            yield ev
        if count != self.n_events:
            raise TraceError(self.source, None, f"changed while replaying: {count} events, "
                                                f"{self.n_events} when validated")


MAX_PIPED_BYTES = 4 << 30     # a pipe is copied to a temporary file first: at most this


def rereadable(path: str) -> str:
    """`path`, or for a pipe (`cat t | ccdiff replay /dev/stdin`, a FIFO) a copy of it in a
    temporary folder removed at exit: a trace is read more than once (the qlog sniffer,
    validation, each replay), and a pipe gives its bytes once.  Bounded memory: streamed."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return path                       # the reader says what is wrong with it
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return path                       # a file, or a device that opens afresh (/dev/zero)
    folder = tempfile.mkdtemp(prefix="ccdiff-pipe-")
    atexit.register(shutil.rmtree, folder, True)
    copy = os.path.join(folder, os.path.basename(path) or "input")
    try:
        with open(path, "rb") as src, open(copy, "wb") as dst:
            while block := src.read(1 << 20):
                if dst.tell() + len(block) > MAX_PIPED_BYTES:
                    raise TraceError(path, None, f"a piped trace larger than {MAX_PIPED_BYTES >> 30} GiB: "
                                                 "write it to a file and name the file")
                dst.write(block)
    except OSError as exc:
        raise TraceError(path, None, f"cannot read: {exc.strerror or exc}") from None
    return copy


def open_trace(path: str):
    """A trace file or a qlog (ccdiff/qlog_import.py, detected by extension or content),
    for replay and matrix: validated whole, streamed again as the replay goes."""
    from .qlog_import import QlogTrace, looks_like_qlog
    path = rereadable(path)
    return QlogTrace(path) if looks_like_qlog(path) else StreamedTrace(path)


def load_any(path: str):
    """load_trace, or a qlog imported into memory (reports replay with every snapshot)."""
    from .qlog_import import QlogTrace, looks_like_qlog
    from .trace import Trace, load_trace
    path = rereadable(path)
    if not looks_like_qlog(path):
        return load_trace(path)
    qlog = QlogTrace(path)
    events = list(qlog.stream())
    return Trace(qlog.header, events, path, list(qlog._lines), qlog.reachability, qlog.lenient_reason)

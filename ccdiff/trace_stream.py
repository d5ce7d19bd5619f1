"""A trace too big to hold: validated from its file once, then re-read for each replay.

`ccdiff validate`, `replay` and `matrix` take traces of any length (10 million events
and more) in bounded memory: a StreamedTrace keeps the header, the event count, the
strict/lenient judgement and where blank lines shift line numbers (for the line of a
finding), never the events.  The first pass validates the whole file before anything
runs, so a malformed trace fails exactly as load_trace does (exit 2, nothing opened).
"""
from __future__ import annotations

from array import array
from bisect import bisect_right

from .trace import TraceError, _Causality, _reachability, read_file


class StreamedTrace:
    """Duck-types Trace for replay and its reports: header, source, n_events,
    reachability, lenient_reason, line_of(); stream() re-reads the events."""

    def __init__(self, path: str):
        self.source = path
        causality = _Causality()
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
        self.reachability, self.lenient_reason = _reachability(causality)

    def line_of(self, index: int) -> int:
        if not 0 <= index < self.n_events:
            return 0
        return index + self._offsets[bisect_right(self._starts, index) - 1]

    def stream(self):
        """The events again, from the file, validated again: a file changed since the
        first pass fails at its line instead of replaying something else."""
        reader = read_file(self.source, _Causality())
        next(reader)
        count = 0
        for _, ev in reader:
            count += 1
            yield ev
        if count != self.n_events:
            raise TraceError(self.source, None, f"changed while replaying: {count} events, "
                                                f"{self.n_events} when validated")


def open_trace(path: str):
    """A trace file or a qlog (ccdiff/qlog_import.py, detected by extension or content),
    for replay and matrix: validated whole, streamed again as the replay goes."""
    from .qlog_import import QlogTrace, looks_like_qlog
    return QlogTrace(path) if looks_like_qlog(path) else StreamedTrace(path)


def load_any(path: str):
    """load_trace, or a qlog imported into memory (reports replay with every snapshot)."""
    from .qlog_import import QlogTrace, looks_like_qlog
    from .trace import Trace, load_trace
    if not looks_like_qlog(path):
        return load_trace(path)
    qlog = QlogTrace(path)
    events = list(qlog.stream())
    return Trace(qlog.header, events, path, list(qlog._lines), qlog.reachability, qlog.lenient_reason)

"""A trace too big to hold: validated from its file once, then re-read for each replay.

`ccdiff validate`, `replay` and `matrix` take traces of any length (10 million events
and more) in bounded memory: a StreamedTrace keeps the header, the event count, the
strict/lenient judgement and one line number per event (4 bytes each, for the line of a
finding), never the events.  The first pass validates the whole file before anything
runs, so a malformed trace fails exactly as load_trace does (exit 2, nothing opened).
"""
from __future__ import annotations

from array import array

from .trace import TraceError, _Causality, _reachability, read_file


class StreamedTrace:
    """Duck-types Trace for replay and its reports: header, source, n_events,
    reachability, lenient_reason, line_of(); stream() re-reads the events."""

    def __init__(self, path: str, keep_lines: bool = True):
        self.source = path
        causality = _Causality()
        reader = read_file(path, causality)
        self.header = next(reader)
        self.lines = array("I")   # the line of each event, 4 bytes each
        count = 0
        for lineno, _ in reader:
            count += 1
            if keep_lines:
                if lineno > 0xFFFF_FFFF:
                    raise TraceError(path, lineno, "more than 4294967295 lines")
                self.lines.append(lineno)
        causality.finish()
        self.n_events = count
        self.reachability, self.lenient_reason = _reachability(causality)

    def line_of(self, index: int) -> int:
        return self.lines[index] if index < len(self.lines) else 0

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

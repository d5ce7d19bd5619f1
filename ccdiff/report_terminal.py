"""Terminal summary of a replay: one table per run, then the findings."""
from __future__ import annotations

import os
import shutil
import sys
import textwrap

from rich.console import Console
from rich.table import Table

from .invariants import CATALOG

PIPED_WIDTH = 120       # piped without COLUMNS: wide enough for a log, the width CI logs show
INDENT = "    "


def terminal_width() -> int:
    """COLUMNS when set (what a user or a CI job asks for, piped or not), else the
    terminal's width, else PIPED_WIDTH."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
        if columns > 0:
            return columns
    except ValueError:
        pass
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return PIPED_WIDTH


def console(stderr: bool = False) -> Console:
    return Console(highlight=False, width=terminal_width(), stderr=stderr)


def wrap_indented(text: str, width: int, indent: str = INDENT) -> str:
    """One paragraph, every line indented, words never split (a long path stays whole)."""
    return textwrap.fill(" ".join(text.split()), max(width, len(indent) + 20), initial_indent=indent,
                         subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def print_replay(console, result) -> None:
    trace = result.trace
    by_stack = {}
    for finding in result.findings:
        by_stack.setdefault(finding.stack, []).append(finding)
    table = Table(title=f"{trace.source}: {len(trace.events)} events", title_justify="left")
    for column in ("stack", "final cwnd", "violations", "deviations", "status"):
        table.add_column(column)
    for label, run in result.runs.items():
        found = by_stack.get(label, [])
        bad = sorted({f.invariant for f in found if f.status == "violation"})
        dev = sorted({f.invariant for f in found if f.status == "deviation"})
        final = str(run.snapshots[-1].cwnd) if run.snapshots else "-"
        status = "[red]FAIL[/]" if bad else "[green]pass[/]"
        if run.error:
            status = "[red]ERROR[/]"
        table.add_row(label, final, ", ".join(bad) or "-", ", ".join(dev) or "-", status)
    console.print(table)
    for finding in result.findings:
        inv = CATALOG[finding.invariant]
        colour = "red" if finding.status == "violation" else "yellow"
        more = f" (x{finding.count})" if finding.count > 1 else ""
        console.print(f"[{colour}]{finding.status}[/] [bold]{finding.stack}[/] {finding.invariant}{more} "
                      f"at event {finding.event_index} (line {finding.line}, t={finding.t_us} us)")
        console.print(f"    {finding.detail}")
        console.print(f"    [dim]{inv.rfc}: {inv.title}[/]")

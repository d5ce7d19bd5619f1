"""Terminal summary of a replay: one table per run, then the findings."""
from __future__ import annotations

import os
import shutil
import sys
import textwrap

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .invariants import CATALOG
from .units import duration, rate, size

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
    """One row per run, then each finding in full, wrapped and indented.  The violations and
    deviations columns name the invariants when the names fit the console, else count
    them (the findings below name them): a name is never cut to fit a column."""
    trace = result.trace
    by_stack = {}
    for finding in result.findings:
        by_stack.setdefault(finding.stack, []).append(finding)
    print_wrapped(console, f"{trace.source}: {trace.n_events} events")
    runs = []
    for label, run in result.runs.items():
        found = by_stack.get(label, [])
        bad = sorted({f.invariant for f in found if f.status == "violation"})
        dev = sorted({f.invariant for f in found if f.status == "deviation"})
        status = "ERROR" if run.error else "FAIL" if bad else "pass"
        runs.append((label, size(run.last.cwnd) if run.last else "-", bad, dev, status))
    headers = ("final cwnd", "violations", "deviations", "status")
    longest = max(len(run[0]) for run in runs + [("stack",)])
    named = [(label, final, "\n".join(bad) or "-", "\n".join(dev) or "-", status)   # one name a line
             for label, final, bad, dev, status in runs]
    counted = [(label, final, str(len(bad)) if bad else "-", str(len(dev)) if dev else "-", status)
               for label, final, bad, dev, status in runs]
    for rows in (named, counted):
        widths = [max(len(h), *(len(line) for row in rows for line in row[i + 1].splitlines()))
                  for i, h in enumerate(headers)]
        if table_width([longest] + widths) <= console.width:
            _replay_table(console, rows, headers)
            break
    else:
        for label, final, bad, dev, status in counted:       # a label too long for a table row
            print_wrapped(console, f"{label}: {status}, final cwnd {final}, violations {bad}, deviations {dev}",
                          style=_STATUS_COLOUR[status])
    print_findings(console, result)


_STATUS_COLOUR = {"pass": "green", "FAIL": "red", "ERROR": "red"}


def _replay_table(console, rows: list, headers: tuple) -> None:
    table = Table()
    name_column(table, "stack", [row[0] for row in rows])
    for header in headers:
        table.add_column(header, justify="right" if header == "final cwnd" else "left", no_wrap=True)
    for *cells, status in rows:
        table.add_row(*cells, f"[{_STATUS_COLOUR[status]}]{status}[/]")
    console.print(table)


def print_findings(console, result) -> None:
    """Each finding: where, then what, then the rule, continuation lines indented."""
    for finding in result.findings:
        inv = CATALOG[finding.invariant]
        more = f" (x{finding.count})" if finding.count > 1 else ""
        print_wrapped(console, f"{finding.status} {finding.stack} {finding.invariant}{more} at event "
                               f"{finding.event_index} (line {finding.line}, t={finding.t_us} us)",
                      style="red" if finding.status == "violation" else "yellow")
        print_wrapped(console, finding.detail, first=INDENT)
        print_wrapped(console, f"{inv.rfc}: {inv.title}", first=INDENT, style="dim")
        local = _local_build_status(result, finding)
        if local:
            print_wrapped(console, local, first=INDENT, style="yellow")


def _local_build_status(result, finding) -> str:
    """A finding on a `build --source` build says so where it is read first (issue 30): it
    is no bug report until the release it came from is compared (`--against`)."""
    from .replay import upstream_status
    from .trace import judge_reachability
    run = result.runs.get(finding.stack)
    if run is None or run.target.kind != "native":
        return ""
    status = upstream_status(run, finding, judge_reachability(result.trace).reachability)
    return status.text if status.kind == "local" else ""


def table_width(column_widths: list) -> int:
    """Width of a rich Table with the default box and padding: one space each side of a
    cell and a rule between and around the columns."""
    return sum(w + 3 for w in column_widths) + 1


def plain_width(markup: str) -> int:
    """Width of a cell's longest word once its rich markup is gone (cells wrap at spaces)."""
    from rich.text import Text
    return max((len(word) for word in Text.from_markup(markup).plain.split()), default=0)


def column_keys(names: list, row_label_width: int, cell_width: int, width: int) -> tuple:
    """Headers for a grid whose columns are named by `names`: the names themselves when
    the table fits in `width`, else short keys "1".."N" and a legend (one "N name" a
    line), so a name is never cut to "death-s…" (rows would be told apart by nothing)."""
    full = [row_label_width] + [max(len(n), cell_width) for n in names]
    if table_width(full) <= width:
        return list(names), ""
    keys = [str(i) for i in range(1, len(names) + 1)]
    legend = "\n".join(f"{INDENT}{key:>2}  {name}" for key, name in zip(keys, names))
    return keys, legend


def column_chunks(first_width: int, widths: list, width: int) -> list:
    """Split columns (indices) into the fewest groups that fit `width` beside the first
    column, of even sizes (5 + 5, not 9 + 1), so a grid too wide for the console becomes
    several tables instead of cut cells."""
    count = 1
    while count < len(widths):
        size = -(-len(widths) // count)
        groups = [list(range(i, min(i + size, len(widths)))) for i in range(0, len(widths), size)]
        if all(table_width([first_width] + [widths[i] for i in g]) <= width for g in groups):
            return groups
        count += 1
    return [[i] for i in range(len(widths))]


def source_gone_note(row: dict) -> str:
    """For a checkout build whose source folder was deleted (stacks.checkout_source's
    `source_gone`), the line `ccdiff stacks` and `ccdiff versions` add under "built"; "" else."""
    if not row.get("source_gone"):
        return ""
    from rich.markup import escape
    return f"\n[yellow]local build; its source folder is gone[/] ({escape(row['source'] or 'not recorded')})"


def name_column(table, header: str, names) -> None:
    """A column of identifiers (stack labels, scenario names): as wide as the longest,
    never wrapped or cut."""
    longest = max([len(header)] + [len(str(n)) for n in names])
    table.add_column(header, no_wrap=True, min_width=longest)


def print_wrapped(console, text: str, first: str = "", indent: str = INDENT, style=None) -> None:
    """A paragraph wrapped to the console with every continuation line indented (rich
    alone would wrap mid-sentence back to column 0); words (names, paths) never split."""
    lines = textwrap.wrap(" ".join(text.split()), max(console.width, len(indent) + 20), initial_indent=first,
                          subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True, style=style)


SIM_TERMS = ("at minimum window: time the window spent at its floor (RFC 9002 §7.2: 2 datagrams); "
             "recovery↔avoidance: transitions between recovery and congestion avoidance, entries "
             "plus exits (Cloudflare's \"flips\"); longest stall: longest time without new data delivered; "
             "PTO: probe timeouts (RFC 9002 §6.2)")


def sim_completion(result, scenario) -> str:
    m = result.metrics
    if m["completion_us"] is not None:
        return duration(m["completion_us"])
    return (f"did not complete in {duration(scenario.deadline_us)} ({size(m['delivered_bytes'])} of "
            f"{size(m['total_bytes'])} delivered)")


def sim_rows(result, scenario) -> list:
    """(label, value) for one run, closed loop or connection mode, in human units (raw
    values: --json); a measure the run does not have (a stack that does not expose it,
    or a closed-loop count a real connection has no name for) shows as —."""
    m = result.metrics

    def shown(key, form=str):
        return "—" if m.get(key) is None else form(m[key])
    colour = {"pass": "green", "fail": "red", "error": "red"}[result.status]
    sent = m.get("packets_sent", m.get("datagrams_sent"))
    return [
        ("verdict", f"[{colour}]{result.status.upper()}[/]"),
        ("completion", sim_completion(result, scenario)),
        ("goodput", rate(m["goodput_bytes_per_s"])),
        ("at minimum window", duration(m["min_window_us"])),
        ("recovery↔avoidance", shown("recovery_transitions")),
        ("largest cwnd", size(m["max_cwnd"])),
        ("final cwnd", shown("final_cwnd", size)),
        ("packets sent/lost", f"{'—' if sent is None else sent} / {shown('packets_lost')}"),
        ("PTOs", shown("ptos")),
        ("persistent congestion", shown("persistent_congestions")),
        ("longest stall", duration(m["max_stall_us"])),
    ]


def print_sim(console, scenario, seed: int, runs: list) -> None:
    """One column per run (the --stack runs, then the oracle and the Reno control), one row
    per measure; why a --stack run does not pass below, one wrapped line per reason."""
    results = [run["result"] for run in runs]
    rows = [sim_rows(result, scenario) for result in results]
    labels = [label for label, _ in rows[0]]
    names = [run.get("name", r.stack) for run, r in zip(runs, results)]
    controls = [name for run, name in zip(runs, names) if run["role"] == "control"]
    beside = f"; controls on the same path and seed: {' and '.join(controls)}" if controls else ""
    print_wrapped(console, f"{scenario.name}, seed {seed}, deadline {duration(scenario.deadline_us)}{beside} "
                           "(oracle: RFC 9438 CUBIC; oracle-reno: RFC 9002 NewReno)")
    # Fixed widths (rich would squeeze a header to "quiche@0.2…"): a run's column is as wide
    # as its label and its values; only the completion sentence and the labels wrap.
    first = max(len(word) for label in labels for word in label.split())
    widths = [max([len(name), plain_width(row[1][1])]
                  + [len(Text.from_markup(value).plain) for label, value in row if label != "completion"])
              for name, row in zip(names, rows)]
    for chunk in column_chunks(first, widths, console.width):
        table = Table()
        table.add_column("", width=first)
        for i in chunk:
            table.add_column(names[i], width=widths[i], no_wrap=False)
        for n, label in enumerate(labels):
            table.add_row(label, *(rows[i][n][1] for i in chunk))
        console.print(table)
    print_wrapped(console, SIM_TERMS, style="dim")
    for run, result in zip(runs, results):
        if result.reasons and run["role"] == "stack":
            console.print(f"{run.get('name', result.stack)} does not pass:", markup=False, highlight=False)
            for reason in result.reasons:
                print_wrapped(console, reason, first=INDENT, indent=INDENT * 2)


def print_own_events(console, name: str, scenario, seed: int, judged: dict) -> None:
    """A connection run's own events judged (ccdiff/connection/confirm.py): each finding
    with the line that says it was reached by the stack's own connection, and how closely
    the adapter follows the window the stack logged."""
    print_wrapped(console, f"{name}: its own {judged['events']:,} events (qlog {judged['qlog']}) through "
                           "the adapter and every invariant:")
    if not judged["findings"]:
        print_wrapped(console, "no finding", first=INDENT, indent=INDENT * 2)
    for f in judged["findings"]:
        print_wrapped(console, f"{f['status']} {f['invariant']} (x{f['count']}) at event {f['event']}, "
                               f"t={f['t_us']} us: {f['detail']}", first=INDENT, indent=INDENT * 2)
        step = f["logged_step"]
        if step["confirmed"]:
            why = f"its own logged window makes the same step, {step['stack'][0]} -> {step['stack'][1]}"
        else:
            why = (f"but its own logged window here is {step['stack'][0]} -> {step['stack'][1]}, the adapter's "
                   f"{step['adapter'][0]} -> {step['adapter'][1]}: the adapter's finding, not confirmed")
        print_wrapped(console, f"reached by the stack's own connection: yes ({scenario.name}, seed {seed}, "
                               f"event {f['event']}); {why}", first=INDENT * 2, indent=INDENT * 3, style="dim")
        own = f.get("own_window")
        if own is not None:
            print_wrapped(console, f"its own logged window, judged by the same invariant: {f['invariant']} at event "
                                   f"{own['event']}, t={own['t_us']} us: {own['detail']}",
                          first=INDENT * 2, indent=INDENT * 3, style="dim")
        elif not step["confirmed"] and f.get("own_window_judged"):
            print_wrapped(console, f"its own logged window, judged by the same invariant: no {f['invariant']}",
                          first=INDENT * 2, indent=INDENT * 3, style="dim")
    parts = []
    for metric, m in judged["fidelity"].items():
        if m["agreement"] is not None:
            parts.append(f"{metric} {m['agreement']:.1%} of {m['compared']:,} points")
    if parts:
        print_wrapped(console, "adapter vs the stack's own logged state (exact match): " + "; ".join(parts),
                      first=INDENT, indent=INDENT * 2)
    if judged["reachability"] != "strict":
        print_wrapped(console, "note: the import marks these events lenient ("
                               f"{judged['lenient_reason']}). The stack's own connection produced them, so "
                               "they are reachable; the mark is either the stack's own loss detection "
                               "departing from RFC 9002 §6.1 or the import misreading its log, one case at a "
                               "time (docs/connection-mode.md)",
                      first=INDENT, indent=INDENT * 2, style="dim")

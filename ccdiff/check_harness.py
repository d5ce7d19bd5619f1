"""`ccdiff check-harness --stack SPEC [TRACE...] [--seeds N]`: the metamorphic relations
(ccdiff/metamorphic.py, docs/metamorphic.md) over a corpus, for someone adding a stack.

A verdict that changes under a time shift, a packet-number offset or a split ACK is a
harness bug (the adapter's clock, an overflow, a packet number the adapter invents),
so any change exits 1; bad input or setup exits 2.
"""
from __future__ import annotations

import sys

from .errors import SetupError
from .metamorphic import FAMILIES, check_trace, default_trace_paths, describe, load_any, sim_traces
from .output import write_json
from .paths import project_root

EXIT_OK, EXIT_CHANGED, EXIT_ERROR = 0, 1, 2


def add_parser(sub) -> None:
    from .cli_help import Once, add_command
    p = add_command(sub, "check-harness",
                    summary="metamorphic checks of a stack's harness: a verdict must not change when a "
                            "trace is shifted in time, its packet numbers offset or an ACK split",
                    description="Replay each trace and each transform of it (time shifts from 1 s to "
                                "3 weeks, packet numbers +1000 and +2^20, ACKs split in two at the same "
                                "instant) through one stack and compare the verdicts (docs/metamorphic.md). "
                                "Exit 1 when any verdict changes: that is a harness bug, not the stack's.",
                    examples=["ccdiff check-harness --stack ngtcp2",
                              "ccdiff check-harness --stack quiche@0.30.0 --seeds 3 --changes-only",
                              "ccdiff check-harness --stack picoquic my-trace.jsonl --json rows.json"])
    p.add_argument("traces", nargs="*", metavar="TRACE",
                   help="JSONL traces or fuzzer inputs (.bin); default examples/*.jsonl and "
                   "fuzz/reproducers/*, plus the simulator's traces with --seeds")
    p.add_argument("--stack", required=True, metavar="SPEC", action=Once,
                   help="the one stack to check, e.g. ngtcp2, quiche@0.30.0, oracle")
    p.add_argument("--seeds", type=int, default=0, metavar="N",
                   help="also the trace of every scenario x seeds 0..N-1, recorded with SPEC in the "
                   "closed loop as `ccdiff conform` runs it (default 0)")
    p.add_argument("--build", action="store_true", help="build SPEC's adapter first if missing or stale")
    p.add_argument("--relations", default=",".join(FAMILIES), metavar="LIST",
                   help="families to run, comma-separated: shift (time), pn (packet numbers), split "
                   "(ACKs); default all")
    p.add_argument("--changes-only", action="store_true", help="print only the rows whose verdict changed")
    p.add_argument("--json", metavar="FILE", help="write every row as JSON")
    p.set_defaults(func=cmd_check_harness)


def _corpus(args) -> list:
    """(name, trace) pairs: the files named (or the default ones), then the simulator's."""
    if args.seeds < 0:
        raise SetupError(f"--seeds {args.seeds}: expected 0 or more")
    paths = args.traces or default_trace_paths(project_root())
    corpus = [(path, load_any(path)) for path in paths]
    return corpus + sim_traces(args.stack, args.seeds)


def cmd_check_harness(args) -> int:
    from .stacks import resolve
    resolve(args.stack)          # an unknown SPEC is a usage error before any work
    if args.build:
        from .build import ensure_built
        ensure_built(args.stack)
    families = _families(args.relations)
    rows = []
    for name, trace in _corpus(args):
        rows.extend(check_trace(trace, args.stack, name, families))
        print(f"  checked {name}", file=sys.stderr, flush=True)
    _print_rows(rows, args.changes_only)
    changed = [row for row in rows if row.changed]
    traces = len({row.trace for row in rows})
    skipped = [row for row in rows if row.after is None]
    print(f"{traces} traces, {len(rows)} relation checks on {args.stack}: {len(changed)} verdict changes"
          + (f", {len(skipped)} not applicable (the transformed trace is invalid)" if skipped else ""))
    if args.json:
        write_json(args.json, {"stack": args.stack, "rows": [
            {"trace": r.trace, "relation": r.relation, "before": describe(r.before),
             "after": describe(r.after), "changed": r.changed, "skipped": r.skipped} for r in rows]})
    return EXIT_CHANGED if changed else EXIT_OK


def _families(text: str) -> tuple:
    chosen = tuple(part for part in text.split(",") if part)
    unknown = [part for part in chosen if part not in FAMILIES]
    if unknown or not chosen:
        raise SetupError(f"--relations {text!r}: expected a comma-separated list of {', '.join(FAMILIES)}")
    return chosen


def _print_rows(rows: list, changes_only: bool) -> None:
    from rich.console import Console
    from rich.table import Table
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    table = Table(title="metamorphic relations (invariant@event xcount; (d) documented deviation)",
                  title_justify="left")
    for column in ("trace", "relation", "verdict before", "verdict after", ""):
        table.add_column(column, overflow="fold")
    for row in rows:
        if changes_only and not row.changed and row.after is not None:
            continue
        if row.after is None:
            table.add_row(row.trace, row.relation, describe(row.before), f"invalid: {row.skipped}",
                          "[yellow]n/a[/]")
            continue
        mark = "[bold red]CHANGED[/]" if row.changed else "[green]same[/]"
        table.add_row(row.trace, row.relation, describe(row.before),
                      describe(row.after) if row.changed else "", mark)
    console.print(table)

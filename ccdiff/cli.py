"""The `ccdiff` command.  Exit codes: 0 no finding, 1 findings, 2 bad input or setup."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import __version__
from .errors import SetupError
from .trace import TraceError, load_trace

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

EPILOG = """\
examples:
  ccdiff replay examples/death-spiral.jsonl --stack oracle --stack oracle:idle=last-send
  ccdiff replay examples/death-spiral.jsonl --stack quiche@0.26.0 --stack quiche@0.30.0
  ccdiff matrix examples/*.jsonl --json matrix.json
  ccdiff validate examples/idle-restart.jsonl
  ccdiff build all && ccdiff stacks
  ccdiff decode fuzz/vectors/basic.bin > basic.jsonl

exit codes: 0 no finding, 1 findings (violations), 2 bad input or setup.
docs: docs/trace-format.md, docs/invariants.md, docs/adapters.md
"""


def _console():
    from rich.console import Console
    return Console(highlight=False, width=None if sys.stdout.isatty() else 120)


def cmd_validate(args) -> int:
    failed = 0
    for path in args.traces:
        try:
            trace = load_trace(path)
        except TraceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{path}: ok, {len(trace.events)} events, max_datagram_size {trace.header.max_datagram_size}")
    return EXIT_ERROR if failed else EXIT_OK


def cmd_replay(args) -> int:
    from .replay import replay
    from .report_terminal import print_replay
    trace = load_trace(args.trace)
    specs = args.stack or ["oracle"]
    if args.build:
        from .build import ensure_built
        for spec in specs:
            ensure_built(spec)
    result = replay(trace, specs)
    print_replay(_console(), result)
    if args.json:
        document = {
            "trace": args.trace,
            "events": len(trace.events),
            "stacks": [{"stack": label, "description": getattr(run.controller, "description", label),
                        "error": run.error,
                        "final": run.snapshots[-1].to_dict() if run.snapshots else None}
                       for label, run in result.runs.items()],
            "findings": [f.to_dict() for f in result.findings],
        }
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return EXIT_FINDINGS if result.violations else EXIT_OK


def cmd_matrix(args) -> int:
    from .matrix import default_specs, print_matrix, run_matrix
    specs = args.stack or default_specs()
    console = _console()
    matrix = run_matrix(args.traces, specs,
                        progress=lambda path: print(f"  replayed {path}", file=sys.stderr, flush=True))
    print_matrix(console, matrix)
    if args.json:
        Path(args.json).write_text(json.dumps(matrix, indent=2) + "\n")
    return EXIT_FINDINGS if any(c["violation"] for c in matrix["cells"]) else EXIT_OK


def cmd_stacks(args) -> int:
    from rich.table import Table
    from .stacks import available
    rows = available()
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    table = Table(title="stacks", title_justify="left")
    for column in ("stack", "version", "built", "options / alias for"):
        table.add_column(column)
    for row in rows:
        built = "[green]yes[/]" if row["built"] else "[red]no[/]  (ccdiff build " + \
            f"{row['stack']}@{row['version']})"
        table.add_row(row["stack"], row["version"] or "-", built, row["note"])
    _console().print(table)
    return EXIT_OK


def cmd_build(args) -> int:
    from .build import build_spec
    source = Path(args.source) if args.source else None
    for spec in args.specs:
        for library in build_spec(spec, source=source, sanitize=args.sanitize, force=args.force):
            print(library)
    return EXIT_OK


def cmd_decode(args) -> int:
    from .encoding import decode
    from .trace import dump_trace
    try:
        data = Path(args.input).read_bytes() if args.input != "-" else sys.stdin.buffer.read()
    except OSError as exc:
        raise SetupError(f"cannot read {args.input}: {exc.strerror}") from None
    sys.stdout.write(dump_trace(decode(data, name=Path(args.input).name)))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ccdiff", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Differential conformance testing of QUIC congestion controllers against an "
                    "RFC 9438 CUBIC reference oracle.")
    parser.add_argument("--version", action="version", version=f"ccdiff {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("replay", help="run a trace through controllers and check every invariant",
                       description="Replay a JSONL trace through one or more controllers, check every "
                                   "invariant after every event and compare stacks with the oracle.")
    p.add_argument("trace", help="trace file (.jsonl), see docs/trace-format.md")
    p.add_argument("--stack", action="append", metavar="SPEC",
                   help="name[@version][:key=value,...], repeatable; default: oracle. "
                        "e.g. oracle, oracle:idle=last-send, oracle-reno, quiche@0.26.0")
    p.add_argument("--json", metavar="FILE", help="also write the findings as JSON")
    p.add_argument("--build", action="store_true", help="build missing stacks first")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("matrix", help="replay traces through every stack: a stack x invariant matrix",
                       description="Replay every trace through every stack (default: the oracles and "
                                   "every built stack) and print a stack x invariant matrix.")
    p.add_argument("traces", nargs="+", metavar="TRACE")
    p.add_argument("--stack", action="append", metavar="SPEC", help="restrict to these stacks (repeatable)")
    p.add_argument("--json", metavar="FILE", help="also write the matrix and every finding as JSON")
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("validate", help="check traces for syntax and causal consistency")
    p.add_argument("traces", nargs="+", metavar="TRACE")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("stacks", help="list the stacks and versions, and which are built")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_stacks)

    p = sub.add_parser("build", help="fetch (pinned, sha256-checked) and build stack adapters",
                       description="Build stack adapters from their pinned registry releases "
                                   "(implementations/<stack>/stack.toml), or from a local checkout.")
    p.add_argument("specs", nargs="+", metavar="STACK[@VERSION]",
                   help="quiche (all pinned versions), quiche@0.26.0, or all")
    p.add_argument("--source", metavar="DIR", help="build from this local source tree instead")
    p.add_argument("--sanitize", action="store_true", help="build with ASan+UBSan (C adapters)")
    p.add_argument("--force", action="store_true", help="rebuild even if built")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("decode", help="decode fuzzer bytes into a JSONL trace (docs/fuzz-encoding.md)")
    p.add_argument("input", help="binary file, or - for stdin")
    p.set_defaults(func=cmd_decode)

    from .fuzzing.command import add_parser as add_fuzz_parser
    add_fuzz_parser(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

"""The `ccdiff` command.  Exit codes: 0 no finding, 1 findings, 2 bad input or setup."""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
from pathlib import Path

from . import __version__
from .errors import SetupError
from .output import read_json_input, write_json
from .trace import TraceError, load_trace

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

EPILOG = """\
examples:
  ccdiff replay examples/death-spiral.jsonl --stack oracle --stack oracle:idle=last-send
  ccdiff replay examples/death-spiral.jsonl --stack quiche@0.26.0 --stack quiche@0.30.0
  ccdiff matrix examples/*.jsonl --json matrix.json
  ccdiff replay examples/death-spiral.jsonl --stack quiche@0.26.0 --report reports/death-spiral
  ccdiff report matrix.json --out reports/html
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
    with _isolation(args):
        result = replay(trace, specs)
    print_replay(_console(), result)
    if args.json or args.report:
        document = {
            "trace": args.trace,
            "specs": specs,      # what to re-run for a report (ccdiff report)
            "events": len(trace.events),
            "stacks": [{"stack": label, "description": getattr(run.controller, "description", label),
                        "error": run.error,
                        "final": run.snapshots[-1].to_dict() if run.snapshots else None}
                       for label, run in result.runs.items()],
            "findings": [f.to_dict() for f in result.findings],
        }
        if args.json:
            write_json(args.json, document)
        _write_report(document, args.report)
    return EXIT_FINDINGS if result.violations else EXIT_OK


def _isolation(args):
    """--isolate: native stacks run in a child server; a crash or hang becomes a finding."""
    if not args.isolate:
        return contextlib.nullcontext()
    from .isolation import isolated
    return isolated(args.timeout)


def _add_isolation_options(p) -> None:
    p.add_argument("--isolate", action="store_true",
                   help="run native stacks in a child process: a crash or a hang becomes that "
                        "stack's adapter-error finding and the run goes on")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="with --isolate: give up on a stack that does not answer within S seconds "
                        "(default 60)")


def _write_report(document: dict, out) -> None:
    if out:
        from .report import build_report
        data = build_report(document, out)
        print(f"report: {Path(out) / 'index.html'} ({data['totals']['findings']} findings)", file=sys.stderr)


def cmd_report(args) -> int:
    from .report import report_from_file
    data = report_from_file(args.input, args.out)
    print(f"{Path(args.out) / 'index.html'}: {len(data['traces'])} traces x {len(data['stacks'])} stacks, "
          f"{data['totals']['violations']} violations, {data['totals']['deviations']} deviations")
    return EXIT_FINDINGS if data["totals"]["violations"] else EXIT_OK


def cmd_matrix(args) -> int:
    from .matrix import default_specs, print_matrix, run_matrix
    specs = args.stack or default_specs()
    console = _console()
    with _isolation(args):
        matrix = run_matrix(args.traces, specs,
                            progress=lambda path: print(f"  replayed {path}", file=sys.stderr, flush=True))
    print_matrix(console, matrix)
    if args.json:
        write_json(args.json, matrix)
    _write_report(matrix, args.report)
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
        built = "[yellow]stale[/] (adapter changed; ccdiff build " if row["stale"] else \
            "[green]yes[/]" if row["built"] else "[red]no[/]  (ccdiff build "
        if row["stale"] or not row["built"]:
            built += f"{row['stack']}@{row['version']})"
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
    # Fuzz inputs are small (AFL++ caps them at 1 MB); the cap bounds memory and time on
    # /dev/zero or a huge file, which would otherwise be read whole.
    limit = 16 << 20
    try:
        if args.input == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(args.input, "rb") as file:
                data = file.read(limit + 1)
    except OSError as exc:
        raise SetupError(f"cannot read {args.input}: {exc.strerror}") from None
    if len(data) > limit:
        raise SetupError(f"{args.input}: larger than {limit >> 20} MiB; fuzz inputs are at most a few MB")
    sys.stdout.write(dump_trace(decode(data, name=Path(args.input).name)))
    return EXIT_OK


def cmd_serve(args) -> int:
    import os
    from .serve import TOKEN_ENV, serve
    return serve(args.host, args.port, args.stack, args.token or os.environ.get(TOKEN_ENV, ""))


def cmd_serve_reports(args) -> int:
    from .report.server import serve_reports
    return serve_reports(args.folder, args.host, args.port)


def _scenario_list(names):
    from .sim.scenario import available_scenarios, load_scenario
    names = names or available_scenarios()
    out = []
    for item in names:
        for name in item.split(","):
            if name:
                out.append(load_scenario(name))
    return out


def _stack_list(items):
    """--stacks a,b --stacks c -> [a, b, c]; a part like 'hystart=off' after a SPEC with
    options continues that SPEC (quiche:idle_fix=off,hystart=off) unless its right-hand
    side names a stack (NAME=SPEC)."""
    if not items:
        return None
    from .stacks import load_recipes, resolve
    recipes = load_recipes()

    def names_stack(text):
        try:
            resolve(text, recipes)
            return True
        except SetupError:
            return False
    out = []
    for item in items:
        for part in item.split(","):
            if not part:
                continue
            key, eq, value = part.partition("=")
            if (out and ":" in out[-1] and eq and re.fullmatch(r"[a-z_][a-z0-9_]*", key)
                    and ":" not in value and "@" not in value and not names_stack(value)):
                out[-1] += "," + part
            else:
                out.append(part)
    return out


def cmd_conform(args) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from .conform import (cpu_count, default_stacks, earlier_outputs, exit_code, print_summary,
                          remove_stale_outputs, run_conform, with_controls, write_outputs)
    scenarios = _scenario_list(args.scenarios)
    stacks = with_controls(_stack_list(args.stacks) or default_stacks())
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    baseline = read_json_input(args.baseline, "baseline") if args.baseline else None
    if baseline is not None:   # a malformed baseline is refused before the run, not after it
        from .conform import compare
        compare({"cases": [], "cells": []}, baseline, args.tolerance)
    if args.build:
        from .build import ensure_built
        for spec in stacks:
            ensure_built(spec)
    earlier = earlier_outputs(args.out)   # what a run before this one wrote into OUT
    jobs = args.jobs or cpu_count()
    total = len(stacks) * len(scenarios) * len(seeds)
    from rich.console import Console
    err = Console(stderr=True, highlight=False)
    with Progress(TextColumn("conform"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[bad]}"),
                  TimeElapsedColumn(), console=err, transient=not err.is_terminal) as bar:
        task = bar.add_task("cases", total=total, bad="")
        failed = [0]

        def progress(doc):
            failed[0] += doc["status"] != "pass"
            bar.update(task, advance=1, bad=f"{failed[0]} not passing" if failed[0] else "")
        try:
            summary = run_conform(stacks, scenarios, seeds, args.out, jobs, args.traces, args.timeout or None,
                                  progress, fresh=args.fresh)
        except KeyboardInterrupt:
            print(f"interrupted: finished cases are kept in {args.out}/cases.jsonl; run the same "
                  "command again to resume", file=sys.stderr)
            raise
    regressions = None
    if args.baseline:
        from .conform import compare
        regressions = compare(summary, baseline, args.tolerance)
        summary["regressions"] = regressions
    write_outputs(summary, args.out)
    console = _console()
    print_summary(console, summary)
    print(f"wrote {args.out}/summary.json and {args.out}/junit.xml", file=sys.stderr)
    reports = []
    if args.report and args.traces != "none":
        from .conform import report_failures
        reports = report_failures(summary, args.out, stacks)
        for folder in reports:
            print(f"report: {folder}/index.html", file=sys.stderr)
    for path in remove_stale_outputs(args.out, earlier, summary, reports):
        print(f"removed {path} (an earlier run's, not produced by this one)", file=sys.stderr)
    if regressions is not None:
        for r in regressions:
            seed = f" seed {r['seed']}" if r["seed"] is not None else ""
            console.print(f"[red]regression[/] {r['kind']} {r['stack']} {r['scenario']}{seed}: {r['detail']}")
        console.print(f"{len(regressions)} regressions against {args.baseline}")
        return EXIT_ERROR if summary["totals"]["errors"] else EXIT_FINDINGS if regressions else EXIT_OK
    return exit_code(summary)


def cmd_sim(args) -> int:
    from .sim import simulate
    (scenario,) = _scenario_list([args.scenario])
    params = {}
    for item in args.set or []:
        key, _, value = item.partition("=")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    if params:
        scenario = scenario.with_params(**params)
    worst = 0
    for spec in args.stack or ["oracle"]:
        result = simulate(scenario, spec, args.seed, record=bool(args.trace))
        print(json.dumps(result.to_dict(), indent=1, sort_keys=True) if args.json else
              f"{result.stack} seed {result.seed}: {result.status.upper()} "
              f"completion={result.metrics['completion_us']} us "
              f"min_window={result.metrics['min_window_us']} us "
              f"flips={result.metrics['recovery_transitions']} events={result.metrics['events']}")
        if not args.json:
            for reason in result.reasons:
                print(f"    {reason}")
        if args.trace:
            path = args.trace if len(args.stack or ["oracle"]) == 1 else \
                f"{args.trace.removesuffix('.jsonl')}-{re.sub(r'[^A-Za-z0-9@._-]+', '_', result.stack)}.jsonl"
            Path(path).write_text(result.trace_text())
            print(f"    trace: {path}  (ccdiff replay {path} --stack {result.stack})")
        worst = max(worst, EXIT_FINDINGS if result.status != "pass" else EXIT_OK)
    return worst


def cmd_scenarios(args) -> int:
    from .sim.scenario import available_scenarios, load_scenario
    for name in available_scenarios():
        s = load_scenario(name)
        print(f"{name:24} {' '.join(s.purpose.split())[:90]}")
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
    p.add_argument("--report", metavar="DIR", help="also write an HTML/Markdown/qlog/JUnit report there")
    _add_isolation_options(p)
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("matrix", help="replay traces through every stack: a stack x invariant matrix",
                       description="Replay every trace through every stack (default: the oracles and "
                                   "every built stack) and print a stack x invariant matrix.")
    p.add_argument("traces", nargs="+", metavar="TRACE")
    p.add_argument("--stack", action="append", metavar="SPEC", help="restrict to these stacks (repeatable)")
    p.add_argument("--json", metavar="FILE", help="also write the matrix and every finding as JSON")
    p.add_argument("--report", metavar="DIR", help="also write an HTML/Markdown/qlog/JUnit report there")
    _add_isolation_options(p)
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("report", help="HTML, Markdown bug reports, qlog and JUnit from a findings JSON",
                       description="Turn the findings JSON of `ccdiff replay --json` or `ccdiff matrix "
                                   "--json` into a report folder (docs/reports.md); the traces are "
                                   "replayed again for the plots and qlog.")
    p.add_argument("input", metavar="FINDINGS_JSON")
    p.add_argument("--out", metavar="DIR", required=True, help="report folder (new, empty, or an earlier report)")
    p.set_defaults(func=cmd_report)

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

    p = sub.add_parser("serve", help="serve built adapters over TCP (adapter containers; docs/containers.md)",
                       description="Serve this machine's built adapters over TCP (JSON Lines, "
                                   "ccdiff/remote.py); clients set CCDIFF_REMOTE_<STACK>=host:port.")
    p.add_argument("--stack", metavar="NAME", help="serve only this stack (e.g. quiche); default: every built one")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (containers: 0.0.0.0)")
    p.add_argument("--port", type=int, default=7000, help="TCP port (0: any free one, printed)")
    p.add_argument("--token", default="", help="shared secret every request must carry "
                   "(default: $CCDIFF_SERVE_TOKEN; clients send theirs from the same variable)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("serve-reports", help="serve the HTML reports under a folder over HTTP (read-only)",
                       description="Serve FOLDER over HTTP: / lists every report under it (a folder with "
                                   "an index.html), the rest are its files. Read-only; hidden folders "
                                   "(fuzzer corpora) are not served. The compose `report` service runs it.")
    p.add_argument("folder", nargs="?", default="reports", metavar="FOLDER", help="default: reports")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (containers: 0.0.0.0)")
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080; 0: any free one, printed)")
    p.set_defaults(func=cmd_serve_reports)

    p = sub.add_parser("conform", help="closed-loop conformance: stacks x scenarios x seeds in the simulator",
                       description="Run every stack through every scenario (scenarios/*.toml) with N seeds "
                                   "in the closed-loop simulator, in parallel; write summary.json, junit.xml "
                                   "and the traces of failing runs. The Reno controls (oracle-reno and each "
                                   "stack's Reno alias) always run too. Exit 0 all pass, 1 failures, 2 errors.")
    p.add_argument("--stacks", action="append", metavar="SPEC[,SPEC...]",
                   help="stacks (default: the oracles and every built stack); NAME=SPEC reports SPEC "
                        "as NAME, e.g. oracle=oracle:idle=last-send")
    p.add_argument("--scenarios", action="append", metavar="NAME[,NAME...]",
                   help="scenario names or .toml paths (default: all of scenarios/)")
    p.add_argument("--seeds", type=int, default=10, metavar="N", help="seeds per case (default 10)")
    p.add_argument("--first-seed", type=int, default=0, metavar="S")
    p.add_argument("--out", default="reports/conform", metavar="DIR")
    p.add_argument("--jobs", type=int, default=0, metavar="N", help="worker processes (default: cores)")
    p.add_argument("--traces", choices=["failing", "all", "none"], default="failing",
                   help="which runs keep a replayable trace under DIR/traces (default failing)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="per-case time limit: a case still running after S seconds (a hung stack) is "
                        "killed and reported as an error, and the run goes on (default 300; the slowest "
                        "catalog case takes a few seconds; 0: no limit)")
    p.add_argument("--baseline", metavar="FILE",
                   help="an earlier summary.json: exit 1 only on regressions (a seed that passed there "
                        "fails now, or a pass-rate drop beyond --tolerance), 0 otherwise, 2 on errors")
    p.add_argument("--tolerance", type=float, default=0.05, metavar="X",
                   help="pass-rate drop that counts as a regression when seed sets differ (default 0.05)")
    p.add_argument("--build", action="store_true", help="build missing stacks first")
    p.add_argument("--fresh", action="store_true",
                   help="ignore DIR/cases.jsonl (by default finished cases of an interrupted run of "
                        "the same matrix are reused, and only the rest run)")
    p.add_argument("--no-report", dest="report", action="store_false",
                   help="skip the HTML reports of failing stacks (DIR/report/<stack>/, from the first "
                        "failing seed of each scenario)")
    p.set_defaults(func=cmd_conform)

    p = sub.add_parser("sim", help="run one scenario once in the closed-loop simulator",
                       description="Simulate one scenario with one seed for each stack; print the verdict "
                                   "and metrics, optionally write the replayable trace.")
    p.add_argument("scenario", help="scenario name or .toml path")
    p.add_argument("--stack", action="append", metavar="SPEC")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario field")
    p.add_argument("--trace", metavar="FILE", help="write the run's trace (JSONL)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sim)

    p = sub.add_parser("scenarios", help="list the scenario catalog")
    p.set_defaults(func=cmd_scenarios)

    from .fuzzing.command import add_parser as add_fuzz_parser
    add_fuzz_parser(sub)
    return parser


# Bounds of numeric options, by dest (the option's name with '_'): a value outside them is a
# usage error (exit 2) before any work starts, instead of a run of nothing (--seeds 0), a
# wrapped or overflowing value deep inside (a port of 70000, a timeout of inf), or a campaign
# that cannot end (--seeds 10**18).  A numeric option not listed must be finite and >= 0.
NUMERIC_BOUNDS = {
    ("conform", "seeds"): (1, 100_000),     # by (subcommand, dest) first, then by dest
    "seeds": (0, 100_000),
    "first_seed": (0, 2**32 - 1),
    "seed": (0, 2**32 - 1),
    "jobs": (0, 1024),
    "port": (0, 65535),
    "timeout": (0, 7 * 86400),
    "tolerance": (0, 1),
}


def numeric_bounds(command: str, dest: str) -> tuple:
    return NUMERIC_BOUNDS.get((command, dest), NUMERIC_BOUNDS.get(dest, (0, math.inf)))


def check_numbers(parser: argparse.ArgumentParser, args) -> None:
    """Refuse nan, inf, negative and out-of-range values of every int/float option of the
    chosen subcommand (found by introspection, so a new option is covered the day it lands)."""
    chosen = parser._subparsers._group_actions[0].choices[args.command]
    for action in chosen._actions:
        value = getattr(args, action.dest, None)
        if action.type not in (int, float) or not isinstance(value, (int, float)):
            continue
        if value == action.default:
            continue          # a default is not the user's mistake (tests check defaults are in range)
        low, high = numeric_bounds(args.command, action.dest)
        if not math.isfinite(value) or not low <= value <= high:
            name = action.option_strings[-1] if action.option_strings else action.dest
            limit = f"at least {low}" if high == math.inf else f"between {low} and {high}"
            chosen.error(f"argument {name}: {value!r} is out of range (expected {limit})")


def error_location(exc: BaseException) -> str:
    """Where an unexpected exception was raised: the file a failed system call named, else
    the innermost frame's file:line."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return str(exc.filename)
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "ccdiff"
    return f"{Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"


def describe_error(exc: BaseException) -> str:
    """One line: what went wrong and where (never a traceback: a nightly reads stderr)."""
    if isinstance(exc, OSError):
        what = exc.strerror or str(exc) or type(exc).__name__
    elif isinstance(exc, MemoryError):
        what = "out of memory"
    else:
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"{error_location(exc)}: {' '.join(what.split())}"


def main(argv=None) -> int:
    """Exit 0: no finding; 1: findings or regressions, and nothing else; 2: every error that
    is not a finding (usage, input, setup, I/O, out of memory, a bug), as one line."""
    parser = build_parser()
    # A command line from the OS cannot hold a NUL byte, but main() called in-process can,
    # and open() raises ValueError (not OSError) on one: refuse it here, once for every path.
    for arg in sys.argv[1:] if argv is None else argv:
        if "\0" in arg:
            parser.error(f"argument {arg!r} contains a NUL byte")
    args = parser.parse_args(argv)
    check_numbers(parser, args)
    try:
        return args.func(args)
    except (TraceError, SetupError) as exc:
        print(f"error: {_printable(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:   # noqa: BLE001 - the top-level rule: MemoryError, OSError, a bug
        print(f"error: {_printable(describe_error(exc))}", file=sys.stderr)
        return EXIT_ERROR


def _printable(text: str) -> str:
    """A message may quote a user's lone surrogate or control character: print it escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x1b", "\\x1b")


if __name__ == "__main__":
    sys.exit(main())

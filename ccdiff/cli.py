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
from .cli_help import HelpFormatter, Once, add_command, add_qlog_option
from .errors import SetupError
from .output import atomic_file, read_json_input, write_json, write_text_atomic
from .trace import TraceError, load_trace
from .trace_stream import StreamedTrace, open_trace

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
  ccdiff import tests/fixtures/qlog/aioquic-cubic-random-loss.qlog -o real.jsonl
  ccdiff fidelity tests/fixtures/qlog/aioquic-cubic-random-loss.qlog --stack oracle --out fid

exit codes: 0 no finding, 1 findings (violations), 2 bad input or setup.
docs: docs/trace-format.md, docs/invariants.md, docs/adapters.md
"""


def cmd_import(args) -> int:
    from .qlog_import import describe, import_qlog
    if args.output:       # a failed import leaves no half trace (ccdiff/output.py's rule)
        with atomic_file(args.output) as fh:
            summary = import_qlog(args.qlog, lambda text: fh.write(text.encode("utf-8")), args.all_spaces)
    else:
        summary = import_qlog(args.qlog, sys.stdout.write, args.all_spaces)
    where = f" -> {args.output}" if args.output else ""
    lines = describe(summary)
    print(f"{args.qlog}{where}: {lines[0]}", file=sys.stderr)
    for line in lines[1:]:
        print(f"  {line}", file=sys.stderr)
    if args.json:
        write_json(args.json, summary.to_dict())
    if args.scenario:
        from .qlog_import import QlogTrace
        from .qlog_scenario import derive, to_toml
        from .sim.scenario import load_scenario
        stem = Path(args.qlog).name.rsplit(".", 1)[0]
        name = "real-" + re.sub(r"[^A-Za-z0-9_-]+", "-", stem)
        write_text_atomic(args.scenario, to_toml(derive(QlogTrace(args.qlog), name, Path(args.qlog).name)))
        if Path(args.scenario).is_file():
            load_scenario(args.scenario)          # what ccdiff sim / conform will read
        print(f"scenario: {args.scenario}  (ccdiff sim {args.scenario} --stack SPEC)", file=sys.stderr)
    return EXIT_OK


def cmd_fidelity(args) -> int:
    from .fidelity import diverges, fidelity, plot, summary_lines
    result = fidelity(args.qlog, args.stack, keep_series=bool(args.out))
    for line in summary_lines(result):
        print(line)
    if args.out:
        out = Path(args.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SetupError(f"--out {out}: cannot create the folder: {exc.strerror or exc}") from None
        plot(result, out / "fidelity.png")
        write_json(out / "fidelity.json", result)
        print(f"wrote {out / 'fidelity.json'} and {out / 'fidelity.png'}", file=sys.stderr)
    if args.json:
        write_json(args.json, {k: v for k, v in result.items() if k != "series"})
    return EXIT_FINDINGS if diverges(result) else EXIT_OK


def _console():
    from .report_terminal import console
    return console()


def cmd_validate(args) -> int:
    failed = 0
    for path in args.traces:
        if path.endswith(".toml"):        # a scenario: the schema sim and conform share
            from .sim.scenario import load_scenario
            try:
                scenario = load_scenario(path)
            except SetupError as exc:
                print(f"error: {_printable(str(exc))}", file=sys.stderr)
                failed += 1
            else:
                print(f"{path}: ok, scenario {_printable(scenario.name)}")
            continue
        from .qlog_import import QlogTrace, looks_like_qlog
        qlog = looks_like_qlog(path)
        try:
            # a qlog is validated as the trace its import gives (#34: it read "the first line
            # must be the header" before, a ccdiff trace's rule)
            trace = QlogTrace(path) if qlog else StreamedTrace(path)   # any length, bounded memory
        except TraceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed += 1
            continue
        if qlog:
            print(f"{path}: ok, a qlog: imported as {trace.n_events} events, max_datagram_size "
                  f"{trace.header.max_datagram_size}, {trace.reachability}"
                  + (f" ({trace.lenient_reason})" if trace.lenient_reason else "")
                  + f" (ccdiff import {path} -o FILE writes the trace)")
            continue
        reach = trace.reachability + (f" ({trace.lenient_reason})" if trace.lenient_reason else "")
        print(f"{path}: ok, {trace.n_events} events, max_datagram_size {trace.header.max_datagram_size}, "
              f"{reach}")
    return EXIT_ERROR if failed else EXIT_OK


def cmd_replay(args) -> int:
    from .replay import finding_dicts, reachability_fields, replay
    from .report_terminal import print_replay
    specs = args.stack or ["oracle"]
    if len(args.traces) > 1:   # one trace, one table, one --json document; several are matrix's
        import shlex
        matrix = ["ccdiff", "matrix", *args.traces] + [x for spec in specs for x in ("--stack", spec)]
        raise SetupError(f"replay takes one trace, not {len(args.traces)}: ccdiff matrix replays several "
                         f"with the same checks, one row per stack ({shlex.join(matrix)})")
    args.trace = args.traces[0]
    trace = open_trace(args.trace)   # a trace or a qlog; validated whole here, read again by replay
    if args.build:
        from .build import ensure_built
        for spec in specs:
            ensure_built(spec)
    with _isolation(args):
        result = replay(trace, specs, keep_snapshots=False)
    print_replay(_console(), result)
    if args.json or args.report:
        document = {
            "trace": args.trace,
            "specs": specs,      # what to re-run for a report (ccdiff report)
            "events": trace.n_events,
            **reachability_fields(trace),
            "stacks": [{"stack": label, "description": getattr(run.controller, "description", label),
                        "error": run.error,
                        "final": run.last.to_dict() if run.last else None}
                       for label, run in result.runs.items()],
            "findings": finding_dicts(result),
        }
        if args.json:
            write_json(args.json, document)
        _write_report(document, args.report, args.qlog_schema)
    return EXIT_FINDINGS if result.violations else EXIT_OK


def _isolation(args):
    """--isolate: adapter stacks (native and Python) run in a child server; a crash or hang
    becomes a finding."""
    if not args.isolate:
        if args.timeout is not None:    # a limit that would silently not apply
            raise SetupError("--timeout limits a stack run in its own process: it needs --isolate "
                             "(without it, a hung stack hangs ccdiff)")
        return contextlib.nullcontext()
    from .isolation import isolated
    return isolated(args.timeout if args.timeout is not None else ISOLATION_TIMEOUT_S)


ISOLATION_TIMEOUT_S = 60.0


def _add_isolation_options(p) -> None:
    p.add_argument("--isolate", action="store_true",
                   help="run every adapter stack (native libraries and in-process Python adapters "
                        "such as aioquic) in a child process: a crash or a hang becomes that "
                        "stack's adapter-error finding and the run goes on")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help=f"with --isolate: give up on a stack that does not answer within S seconds "
                        f"(default {ISOLATION_TIMEOUT_S:g})")


def _write_report(document: dict, out, qlog_schema: str) -> None:
    if out:
        from .report import build_report
        data = build_report(document, out, qlog_schema=qlog_schema)
        print(f"report: {Path(out) / 'index.html'} ({data['totals']['findings']} findings)", file=sys.stderr)


def cmd_report(args) -> int:
    from .report import report_from_file
    data = report_from_file(args.input, args.out, args.qlog_schema)
    print(f"{Path(args.out) / 'index.html'}: {len(data['traces'])} traces x {len(data['stacks'])} stacks, "
          f"{data['totals']['violations']} violations, {data['totals']['deviations']} deviations")
    return EXIT_FINDINGS if data["totals"]["violations"] else EXIT_OK


def cmd_matrix(args) -> int:
    from .matrix import default_specs, print_matrix, run_matrix
    specs, compared = args.stack or default_specs(), ()
    if args.against:
        specs, compared = _against_specs(args.stack, args.against)
    console = _console()
    with _isolation(args):
        matrix = run_matrix(args.traces, specs, compare=compared,
                            progress=lambda path: print(f"  replayed {path}", file=sys.stderr, flush=True))
    print_matrix(console, matrix)
    against = None
    if compared:
        from .baseline import new_in_matrix
        against = matrix["against"] = new_in_matrix(matrix, compared)
        _print_against_matrix(console, against, len(args.traces))
    if args.json:
        write_json(args.json, matrix)
    _write_report(matrix, args.report, args.qlog_schema)
    if against is not None:   # the patch's question: only what the baseline does not do counts
        from .baseline import any_new
        return EXIT_FINDINGS if any_new(against) else EXIT_OK
    return EXIT_FINDINGS if any(c["violation"] for c in matrix["cells"]) else EXIT_OK


def _against_specs(stacks: list | None, baseline: str, add_controls=None) -> tuple[list, list]:
    """(every spec to run, the (candidate, baseline) label pairs) of `--stack ... --against B`:
    the candidates are the --stack builds other than B.  add_controls: conform's
    with_controls, whose Reno aliases of both builds are compared too (matrix compares
    them when they are named)."""
    from .baseline import pairs
    from .labels import split_label
    from .stacks import resolve

    def label(spec: str) -> str:    # conform's `label=SPEC` form names the run LABEL
        name, item = split_label(spec)
        return name or resolve(item).label
    base = label(baseline)
    candidates = [s for s in stacks or [] if label(s) != base]
    if not candidates:
        raise SetupError(f"--against {baseline} compares the builds named with --stack with it: "
                         "name at least one other build, e.g. --stack ngtcp2@git-1a2b3c4d5e")
    specs = list(dict.fromkeys(list(stacks) + [baseline]))
    if add_controls:
        specs = add_controls(specs)
    labels = {label(s) for s in specs}
    compared = []
    for candidate in candidates:       # the builds' own pair under their run names, then the aliases'
        _, *aliases = pairs([split_label(candidate)[1]], split_label(baseline)[1])   # also validates both
        compared += [(label(candidate), base)] + [p for p in aliases if p[0] in labels and p[1] in labels]
    return specs, compared


def _print_against_matrix(console, against: dict, n_traces: int) -> None:
    from .report_terminal import print_wrapped
    for candidate, r in against.items():
        differs = r["differs"]
        print_wrapped(console, f"{candidate} against {r['baseline']}: snapshots differ on {len(differs)} of "
                               f"{n_traces} traces")
        for d in differs:
            print_wrapped(console, f"  {d['trace']}: from event {d['event']} (line {d['line']})")
        if not r["new"]:
            print_wrapped(console, f"  no new violation: every violation of {candidate} is one {r['baseline']} "
                                   "has on the same trace", style="green")
        for f in r["new"]:
            print_wrapped(console, f"  new {f['invariant']} on {f['trace']} at event {f['event_index']}: "
                                   f"{f['detail']}", style="red")
        for f in r.get("consequences", ()):
            print_wrapped(console, f"  not new: {f['invariant']} on {f['trace']} at event {f['event_index']} "
                                   f"follows a violation {r['baseline']} shares there")


def cmd_stacks(args) -> int:
    from rich.markup import escape
    from rich.table import Table
    from .stacks import available
    if args.waivers:
        return _print_waivers(args)
    rows = available()
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    from .report_terminal import name_column, source_gone_note
    table = Table(title="stacks", title_justify="left")
    name_column(table, "stack", [row["stack"] for row in rows])
    name_column(table, "version", [row["version"] or "-" for row in rows])
    table.add_column("built")
    table.add_column("options / alias for", overflow="fold")   # option lists are long words
    for row in rows:
        built = "[yellow]stale[/] (adapter changed; ccdiff build " if row["stale"] else \
            "[red]modified[/] (not the library its build wrote; ccdiff build " if row.get("modified") else \
            "[green]yes[/]" if row["built"] else "[red]no[/]  (ccdiff build "
        if row["stale"] or row.get("modified") or not row["built"]:
            built += f"{row['stack']}@{row['version']})"
        gone = source_gone_note(row)      # a checkout build whose folder was deleted (issue 30)
        if gone:
            built += gone
        elif row.get("source"):
            built += f"\nlocal build of {escape(row['source'])}"
        note = row["note"] + (f"\n[cyan]{row['supports']}[/]" if row.get("supports") else "")
        table.add_row(row["stack"], row["version"] or "-", built, note)
    _console().print(table)
    return EXIT_OK


def _print_waivers(args) -> int:
    """`ccdiff stacks --waivers`: every deviation's excuses, mechanism-checked or wholesale, and
    the evidence of upstream intent each waiving deviation cites (profile.toml `intent`)."""
    from rich.table import Table
    from .profiles import load_profile
    from .stacks import load_recipes
    data = []
    for recipe in load_recipes().values():
        profile = load_profile(recipe)
        data.append({"stack": recipe.name, "checked": profile.checked_waivers(),
                     "wholesale": profile.wholesale_waivers(), "dynamic": profile.dynamic_waivers(),
                     "variants": profile.variants(), "intents": profile.intents(),
                     "judged": profile.judged_rules(),
                     "references": {family: profile.reference(family) for family in ("cubic", "reno")}})
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    console = _console()

    def table(title: str, *columns: str):
        made = Table(title=title, title_justify="left")
        for name in columns:
            made.add_column(name, overflow="fold")
        return made
    checked = table("mechanism-checked deviations: a finding is excused only where the mechanism reproduces the "
                    "stack's step (profile.toml `explains`)", "stack", "invariant", "deviation",
                    "mechanism (upstream rule)")
    wholesale = table("whole-invariant waivers: every finding of the invariant is excused (profile.toml `tolerates`)",
                      "stack", "invariant", "deviation", "why no mechanism checks it")
    variants = table("deviations the oracle reproduces: the stack's trajectory is compared with this oracle "
                     "(profile.toml `variant`)", "stack", "deviation", "oracle options", "reference (CUBIC; Reno)")
    dynamic = table("dynamic waivers: a trajectory divergence is excused only when the trigger occurred at or "
                    "before it (profile.toml `observed`)", "stack", "deviation", "trigger", "meaning")
    intents = table("why each waiver waives: upstream's intent (a code comment, a document, a maintainer, the "
                    "RFC text it follows; rfc-should: a SHOULD departed from with no reason given), a consequence "
                    "of a reported finding, or ccdiff's own limit (profile.toml `intent`, `consequence_of`, "
                    "`ours`); behaviour with none of these is a finding, never waived",
                    "stack", "deviation", "reason", "quote")
    judged = table("rules judged in the stack's own terms, not waived: beyond the stack's own rule the "
                   "invariant still fires (profile.toml `ca_rate_tick_us`, `ca_growth_per`)",
                   "stack", "invariant", "profile", "judged as")
    for entry in data:
        refs = entry["references"]
        for row in entry["judged"]:
            judged.add_row(entry["stack"], row["invariant"], row["profile"], row["how"])
        for row in entry["intents"]:
            intents.add_row(entry["stack"], row["deviation"], f"{row['kind']}: {row['cite']}", row["quote"])
        for row in entry["variants"]:
            variants.add_row(entry["stack"], row["deviation"], f"{row['options']} ({row['family']})",
                             f"{refs['cubic']}; {refs['reno']}")
        for row in entry["dynamic"]:
            dynamic.add_row(entry["stack"], row["deviation"], row["trigger"], row["meaning"])
        for row in entry["checked"]:
            checked.add_row(entry["stack"], row["invariant"], row["deviation"],
                            f"{row['mechanism']} ({row['rule']})")
        grouped = {}    # one row per stack, invariant and reason (trajectory-divergence: one for all)
        for row in entry["wholesale"]:
            grouped.setdefault((row["invariant"], row["reason"]), []).append(row["deviation"])
        for (invariant, reason), deviations in grouped.items():
            wholesale.add_row(entry["stack"], invariant, ", ".join(deviations), reason)
    console.print(variants)
    console.print(checked)
    console.print(dynamic)
    console.print(wholesale)
    console.print(judged)
    console.print(intents)
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
        raise SetupError(f"{args.input}: cannot read: {exc.strerror}") from None
    if len(data) > limit:
        raise SetupError(f"{args.input}: larger than {limit >> 20} MiB; fuzz inputs are at most a few MB")
    sys.stdout.write(dump_trace(decode(data, name=Path(args.input).name)))
    return EXIT_OK


def cmd_encode(args) -> int:
    from .encoding import encode
    from .output import write_bytes_atomic
    trace = load_trace(args.trace)
    data, dropped = encode(trace)
    write_bytes_atomic(args.output, data)     # a device node (/dev/full) is written in place
    left_out = ", ".join(f"{count} {what}" for what, count in sorted(dropped.items()))
    print(f"{args.trace}: {len(trace.events)} events -> {len(data)} bytes ({args.output})"
          + (f"; left out: {left_out}" if left_out else ""), file=sys.stderr)
    return EXIT_OK


def cmd_minimize(args) -> int:
    from .fuzzing.strictify import LENIENT_ONLY
    from .fuzzing.triage import reduce, signatures, window_of
    from .invariants import CATALOG
    from .trace import dump_trace
    if args.invariant not in CATALOG:
        raise SetupError(f"--invariant {args.invariant!r}: unknown; one of {', '.join(sorted(CATALOG))}")
    trace = load_trace(args.trace)
    found = signatures(trace, args.stack)
    mine = [sig for sig in found.values() if sig.invariant == args.invariant]
    if not mine:
        shown = ", ".join(sorted({sig.invariant for sig in found.values()})) or "no violation"
        raise SetupError(f"{args.trace}: {args.invariant} does not fire on {args.stack} (it shows: {shown}); "
                         "nothing to minimize")
    sig = mine[0]
    small, repair = reduce(trace, sig, args.stack)
    small.header.name = f"{sig.stack} {sig.invariant}"
    small.header.comment = f"ccdiff minimize: {len(trace.events)} -> {len(small.events)} events ({repair})"
    text = dump_trace(small)
    if args.output:
        write_text_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    where = f" -> {args.output}" if args.output else ""
    overrun = window_of(small, args.stack)
    window = f"; beyond {args.stack}'s own window: {overrun}" if overrun else f"; within {args.stack}'s own window"
    print(f"{args.trace}: {sig.invariant} ({sig.shown}) on {args.stack}: {len(trace.events)} -> "
          f"{len(small.events)} events, {small.reachability}"
          f"{' [' + LENIENT_ONLY + ']' if repair == LENIENT_ONLY else ''}{window}{where}", file=sys.stderr)
    return EXIT_OK


def cmd_serve(args) -> int:
    import os
    from .serve import TOKEN_ENV, serve
    token = os.environ.get(TOKEN_ENV, "")
    if args.token_file:
        try:
            with open(args.token_file, "rb") as fh:
                token = fh.read(4097).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SetupError(f"--token-file {args.token_file}: cannot read a secret: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
        if not 1 <= len(token) <= 4096 or not all("!" <= c <= "~" for c in token):
            raise SetupError(f"--token-file {args.token_file}: expected one line of 1 to 4096 visible "
                             "ASCII characters")
    return serve(args.host, args.port, args.stack, token)


def cmd_serve_reports(args) -> int:
    from .report.server import serve_reports
    return serve_reports(args.folder, args.host, args.port)


def _scenario_list(names, mode: str = "closed-loop"):
    """The named scenarios; none named: the catalog, and with --mode connection the
    connection scenarios too (scenarios/connection/)."""
    from .sim.scenario import available_scenarios, connection_scenarios, load_scenario
    names = names or available_scenarios() + (connection_scenarios() if mode == "connection" else [])
    out = []
    for item in names:
        for name in item.split(","):
            if name:
                out.append(load_scenario(name))
    return out


def split_stack_specs(text: str, previous: list) -> list:
    """'a,b' -> [a, b]; a part like 'hystart=off' after a SPEC with options continues that
    SPEC (quiche:idle_fix=off,hystart=off) unless its right-hand side names a stack
    (NAME=SPEC).  `previous`: the SPECs of the earlier --stack options, which the first
    part may continue.  Returns the new SPECs, with previous[-1] possibly extended."""
    from .stacks import load_recipes, resolve
    recipes = load_recipes()

    def names_stack(value):
        try:
            resolve(value, recipes)
            return True
        except SetupError:
            return False
    out = list(previous)
    for part in text.split(","):
        if not part:
            continue
        key, eq, value = part.partition("=")
        if (out and ":" in out[-1] and eq and re.fullmatch(r"[a-z_][a-z0-9_]*", key)
                and ":" not in value and "@" not in value and not names_stack(value)):
            out[-1] += "," + part
        else:
            out.append(part)
    return out


class StackSpecs(argparse.Action):
    """--stack, repeatable, each a SPEC or a comma list of SPECs (split_stack_specs)."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            setattr(namespace, self.dest, split_stack_specs(values, getattr(namespace, self.dest) or []))
        except SetupError as exc:
            parser.error(f"{option_string} {values}: {exc}")


def cmd_conform(args) -> int:
    from .conform import default_stacks, with_controls
    from .outdir import OutputFolder
    shard = None
    if args.shard is not None:
        from .shard import parse_shard
        shard = parse_shard(args.shard)
        if args.baseline:
            raise SetupError("--baseline compares the whole matrix: give it to `ccdiff merge`, not to "
                             "one --shard")
    scenarios = _scenario_list(args.scenarios, args.mode)
    stacks, compared = with_controls(args.stacks or default_stacks()), None
    if args.mode == "connection":
        stacks = _connection_stacks(args.stacks, with_controls)
    if args.against:
        if args.baseline or shard is not None:
            raise SetupError("--against runs the baseline build beside the candidates; it cannot be "
                             "combined with --baseline FILE or --shard")
        stacks, compared = _against_specs(args.stacks, args.against, with_controls)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    baseline = read_json_input(args.baseline, "baseline") if args.baseline else None
    if baseline is not None:   # a malformed baseline is refused before the run, not after it
        from .conform import compare
        compare({"cases": [], "cells": []}, baseline, args.tolerance)
    if args.build:
        from .build import ensure_built
        for spec in stacks:
            ensure_built(spec)
    run = None
    if shard is not None:      # what every shard of this run must share, read before it starts
        from .shard import run_identity
        run = run_identity(stacks, scenarios, seeds, traces=args.traces, timeout_s=args.timeout or None,
                           report=args.report, qlog_schema=args.qlog_schema, mode=args.mode)
    with OutputFolder(args.out, inputs=_scenario_files(scenarios) + [args.baseline]) as folder:
        return _conform_into(folder, args, stacks, scenarios, seeds, shard, run, baseline, compared)


def _connection_stacks(specs, with_controls) -> list:
    """conform --mode connection: the named stacks (default: the default matrix's stacks that
    have a connection shim, and the oracle), each of which must have one, and the
    controls, which run the closed loop beside them."""
    from .conform import default_stacks
    from .connection.build import supports_connection
    from .stacks import load_recipes, resolve
    recipes = load_recipes()
    if not specs:
        return [spec for spec in default_stacks() if resolve(spec, recipes).kind == "oracle"
                or supports_connection(resolve(spec, recipes))]
    missing = [spec for spec in specs if not supports_connection(resolve(spec, recipes))]
    if missing:
        have = ", ".join(name for name in recipes if supports_connection(resolve(name, recipes)))
        raise SetupError(f"--mode connection: {', '.join(missing)} has no connection shim; stacks with "
                         f"one: {have} (docs/connection-mode.md)")
    return with_controls(list(specs))


def _scenario_files(scenarios) -> list:
    return [s.source for s in scenarios if s.source]


def _conform_into(folder, args, stacks, scenarios, seeds, shard, run, baseline, compared) -> int:
    """The run, once OUT is locked and ours (ccdiff/outdir.py)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from .conform import cpu_count, run_conform
    jobs = args.jobs or cpu_count()
    from .shard import in_shard
    total = sum(in_shard(i, shard) for i in range(len(stacks) * len(scenarios) * len(seeds)))
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
            summary = run_conform(stacks, scenarios, seeds, folder, jobs, args.traces, args.timeout or None,
                                  progress, fresh=args.fresh, shard=shard, mode=args.mode,
                                  memory_mib=args.memory_limit or None)
        except KeyboardInterrupt:
            print(f"interrupted: finished cases are kept in {args.out}/cases.jsonl; run the same "
                  "command again to resume", file=sys.stderr)
            raise
    # A shard's reports are the merge's: one report per failing stack over every scenario.
    code = write_conform_outputs(summary, folder, stacks, report=args.report and shard is None,
                                 traces=args.traces, qlog_schema=args.qlog_schema, baseline=baseline,
                                 baseline_path=args.baseline, tolerance=args.tolerance, compared=compared,
                                 jobs=jobs)
    if shard is not None:
        from .shard import write_marker
        folder.claim("shard.json")
        marker = write_marker(args.out, shard, run, summary)    # last: the shard is complete
        print(f"shard {shard[0]}/{shard[1]} complete: {marker} (join the shards with "
              f"`ccdiff merge DIR... --out OUT`)", file=sys.stderr)
    return code


def write_conform_outputs(summary: dict, folder, stacks: list, *, report: bool, traces: str,
                          qlog_schema: str, baseline, baseline_path: str | None, tolerance: float,
                          compared: list | None = None, jobs: int = 0) -> int:
    """The end of `conform` and of `merge`: summary.json, junit.xml, the reports of failing
    stacks, stale outputs of an earlier run removed, the overview; the terminal summary and
    regressions (--baseline FILE) or what is new against a baseline build (--against,
    `compared` its label pairs).  folder: OUT, an open OutputFolder (ccdiff/outdir.py).
    jobs: processes for the reports (0: one per core).  Returns the exit code."""
    from .conform import exit_code, print_summary, write_outputs
    out = str(folder.root)
    # This run's traces are already the folder's: run_conform adopts each as its worker
    # writes it, merge's copy_traces claims each it copies.
    regressions = against = None
    if baseline is not None:
        from .conform import compare
        regressions = compare(summary, baseline, tolerance)
        summary["regressions"] = regressions
    if compared:
        from .baseline import new_in_conform
        against = summary["against"] = new_in_conform(summary["cases"], compared, folder.root)
    write_outputs(summary, folder)
    from .report_terminal import print_wrapped
    console = _console()
    print_summary(console, summary)
    print(f"wrote {out}/summary.json and {out}/junit.xml", file=sys.stderr)
    if report and traces != "none":
        from .conform import cpu_count, report_failures
        for written in report_failures(summary, folder, stacks, qlog_schema, jobs=jobs or cpu_count()):
            print(f"report: {written}/index.html", file=sys.stderr)
    removed = folder.finish()
    if removed:
        print(f"removed {len(removed)} file(s) an earlier run wrote into {out} and this one did not "
              f"(e.g. {removed[0]})", file=sys.stderr)
    # Again now that the reports exist and stale ones are gone: its links point at this run's pages.
    from .conform import write_overview
    overview = write_overview(summary, folder)
    if regressions is not None:
        for r in regressions:
            seed = f" seed {r['seed']}" if r["seed"] is not None else ""
            print_wrapped(console, f"regression {r['kind']} {r['stack']} {r['scenario']}{seed}: {r['detail']}",
                          style="red")
        console.print(f"{len(regressions)} regressions against {baseline_path}")
    if against is not None:
        _print_against_conform(console, against)
    print(f"overview: {overview}", file=sys.stderr)      # last line: the one page to open
    if against is not None:
        from .baseline import any_new
        return EXIT_ERROR if summary["totals"]["errors"] else EXIT_FINDINGS if any_new(against) else EXIT_OK
    if regressions is not None:
        return EXIT_ERROR if summary["totals"]["errors"] else EXIT_FINDINGS if regressions else EXIT_OK
    return exit_code(summary)


def _print_against_conform(console, against: dict) -> None:
    from .report_terminal import print_wrapped
    for candidate, r in against.items():
        print_wrapped(console, f"{candidate} against {r['baseline']}: {len(r['new'])} new violations, "
                               f"{len(r['reshuffled'])} reshuffled (a violation {r['baseline']} has on another "
                               "seed of the same scenario: the change moved it, it did not make it), "
                               f"{len(r.get('shared', ()))} shared ({r['baseline']} makes it too on the "
                               "candidate's own trace)",
                      style="red" if r["new"] else "green")
        for item in r["new"]:
            print_wrapped(console, f"  new {item['invariant']} on {item['scenario']} seed {item['seed']}: "
                                   f"{item['detail']}", style="red")


def cmd_merge(args) -> int:
    from .merge import merge_shards
    from .outdir import OutputFolder
    baseline = read_json_input(args.baseline, "baseline") if args.baseline else None
    if baseline is not None:   # refused before anything is written, as in conform
        from .conform import compare
        compare({"cases": [], "cells": []}, baseline, args.tolerance)
    # --out was checked against the shards before this (cli_paths.check_paths).
    merged = merge_shards(args.shards, args.out, check_builds=args.report)
    with OutputFolder(args.out, inputs=[*args.shards, args.baseline]) as folder:
        merged.copy_traces(folder)
        arguments = merged.run["arguments"]
        return write_conform_outputs(merged.summary, folder, arguments["stacks"],
                                 report=args.report and arguments["report"], traces=arguments["traces"],
                                 qlog_schema=arguments["qlog_schema"], baseline=baseline,
                                 baseline_path=args.baseline, tolerance=args.tolerance)


SIM_CONTROLS = ("oracle", "oracle-reno")   # the CUBIC reference and the Reno control


def _sim_trace_path(args, label: str, path: str | None = None, suffix: str = ".jsonl") -> str:
    path = path or args.trace
    if len(args.stack or ["oracle"]) == 1:
        return path
    return f"{path.removesuffix(suffix)}-{re.sub(r'[^A-Za-z0-9@._-]+', '_', label)}{suffix}"


def cmd_sim(args) -> int:
    """Each --stack, then the oracle and the Reno control on the same scenario and seed
    (what a stack's numbers mean depends on what the reference does on that path).
    --mode connection runs each --stack's own client and server (ccdiff/connection/),
    with the same stack's adapter in the closed loop beside it."""
    from .report_terminal import print_sim
    from .sim import simulate
    (scenario,) = _scenario_list([args.scenario])
    from .sim.scenario import parse_overrides
    params = parse_overrides(args.set)
    if params:
        scenario = scenario.with_params(**params)
    specs = args.stack or ["oracle"]
    controls = [c for c in SIM_CONTROLS if c not in specs] if args.controls else []
    connection = args.mode == "connection"
    if args.qlog and not connection:
        raise SetupError("--qlog is the client's own qlog of --mode connection; the closed loop has "
                         "its trace (--trace)")
    runs = []
    from .limits import run_limits
    with run_limits(args.timeout, args.memory_limit, f"sim {scenario.name}"):
        for spec in specs:
            if connection:
                from .connection import run_connection
                qlog = _sim_trace_path(args, spec, args.qlog, ".qlog") if args.qlog else None
                result = run_connection(scenario, spec, args.seed, record=bool(args.trace), qlog=qlog)
                run = {"role": "stack", "mode": "connection", "result": result,
                       "name": f"{result.stack} (own connection)"}
                if qlog:
                    from .connection.confirm import judge_qlog
                    run["own_events"] = judge_qlog(qlog, spec)
                runs.append(run)
                if not args.controls:
                    continue
                closed = simulate(scenario, spec, args.seed, record=False)
                runs.append({"role": "control", "mode": "closed-loop", "result": closed,
                             "name": f"{closed.stack} (closed loop)"})
            else:
                result = simulate(scenario, spec, args.seed, record=bool(args.trace))
                runs.append({"role": "stack", "mode": "closed-loop", "result": result})
        for spec in controls:
            runs.append({"role": "control", "mode": "closed-loop",
                         "result": simulate(scenario, spec, args.seed, record=False)})
    if args.json:
        print(json.dumps({"scenario": scenario.name, "seed": args.seed,
                          "runs": [dict(run["result"].to_dict(), role=run["role"], mode=run["mode"],
                                        **({"own_events": run["own_events"]} if "own_events" in run else {}))
                                   for run in runs]},
                         indent=1, sort_keys=True))
    else:
        print_sim(_console(), scenario, args.seed, runs)
        for run in runs:
            if "own_events" in run:
                from .report_terminal import print_own_events
                print_own_events(_console(), run["name"], scenario, args.seed, run["own_events"])
    for run in runs:
        if args.trace and run["role"] == "stack":
            result = run["result"]
            path = _sim_trace_path(args, result.stack)
            if run["mode"] == "connection":
                write_text_atomic(path, result.record_text())
                print(f"record: {path}  (the connection's datagrams and its congestion state; "
                      f"docs/connection-mode.md)", file=sys.stderr)
            else:
                write_text_atomic(path, result.trace_text())
                print(f"trace: {path}  (ccdiff replay {path} --stack {result.stack})", file=sys.stderr)
    failing = [run for run in runs if run["role"] == "stack" and (run["result"].status != "pass" or any(
        f["status"] == "violation" for f in run.get("own_events", {}).get("findings", ())))]
    return EXIT_FINDINGS if failing else EXIT_OK


def cmd_scenarios(args) -> int:
    from .report_terminal import terminal_width, wrap_indented
    from .sim.scenario import available_scenarios, connection_scenarios, load_scenario
    names, connection = available_scenarios(), connection_scenarios()
    if args.names:
        print("\n".join(names + connection))
        return EXIT_OK
    width = terminal_width()
    for name in names + connection:
        print(name)
        mark = "(connection mode, scenarios/connection/) " if name in connection else ""
        print(wrap_indented(mark + load_scenario(name).purpose, width))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ccdiff", formatter_class=HelpFormatter, epilog=EPILOG,
        description="Differential conformance testing of QUIC congestion controllers against an "
                    "RFC 9438 CUBIC reference oracle.")
    parser.add_argument("--version", action="version", version=f"ccdiff {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_replay, _add_matrix, _add_report, _add_validate, _add_stacks, _add_build,
                _add_decode, _add_encode, _add_minimize, _add_serve, _add_serve_reports, _add_conform, _add_merge,
                _add_sim, _add_scenarios, _add_coverage, _add_import, _add_fidelity):
        add(sub)
    from .connection.search import add_parser as add_confirm_parser
    add_confirm_parser(sub)
    from .fuzzing.command import add_parser as add_fuzz_parser
    add_fuzz_parser(sub)
    from .fuzzing.triage_dir import add_parser as add_fuzz_triage_parser
    add_fuzz_triage_parser(sub)
    from .check_harness import add_parser as add_check_harness_parser
    add_check_harness_parser(sub)
    from .versions_cli import add_parsers as add_versions_parsers
    add_versions_parsers(sub)
    return parser


def _add_import(sub) -> None:
    p = add_command(sub, "import", summary="turn a qlog of a real connection into a trace (docs/qlog-import.md)",
                    description="Read a qlog (qlog 0.3 JSON or JSON-SEQ .sqlog; transport:/recovery: or the "
                                "current draft's quic: names) of a real connection, from the sender's side, "
                                "and write the ccdiff trace of its application data space: packets in "
                                "flight sent, ACK frames received (the packets each newly acknowledges, ack "
                                "delay, ECN-CE), packets declared lost, persistent congestion and the "
                                "application's idle periods where the log says so, each event with the "
                                "stack's own logged cwnd / ssthresh / bytes in flight beside it. Streams: "
                                "any length in bounded memory. A malformed or truncated qlog, or one that "
                                "lacks what a trace needs (e.g. packet sizes), exits 2 naming the line and "
                                "the field. `ccdiff replay` and `ccdiff fidelity` also take a qlog directly.",
                    examples=["ccdiff import tests/fixtures/qlog/aioquic-cubic-random-loss.qlog -o real.jsonl",
                              "ccdiff import server.sqlog | ccdiff validate /dev/stdin",
                              "ccdiff replay tests/fixtures/qlog/aioquic-cubic-idle.qlog --stack oracle",
                              "ccdiff import tests/fixtures/qlog/aioquic-cubic-blackout.qlog -o /dev/null "
                              "--scenario real.toml && ccdiff sim real.toml --stack oracle"])
    p.add_argument("qlog", metavar="QLOG", help="qlog file (.qlog JSON or .sqlog JSON-SEQ)")
    p.add_argument("-o", "--output", metavar="TRACE", help="write the trace here (default: stdout)")
    p.add_argument("--json", metavar="FILE", help="also write what the import did (counts, left out) as JSON")
    p.add_argument("--scenario", metavar="TOML",
                   help="also write a closed-loop scenario with this connection's network conditions (min "
                        "RTT, jitter, loss by send time, blackouts, idle bursts) for ccdiff sim / conform")
    p.add_argument("--all-spaces", action="store_true",
                   help="also import the Initial and Handshake packets, every packet renumbered in send "
                        "order (the trace has one packet number space); default: the application data "
                        "space only, with the log's packet numbers. fidelity always imports them all: the "
                        "stack's controller saw them")
    p.set_defaults(func=cmd_import)


def _add_fidelity(sub) -> None:
    p = add_command(sub, "fidelity", summary="does a stack's adapter reproduce the stack's own qlog?",
                    description="Import a qlog (as `ccdiff import`), replay it through the stack's adapter "
                                "and compare, after each settled point (the last event of one instant), the "
                                "adapter's cwnd, ssthresh and bytes in flight with what the stack itself "
                                "logged: agreement rate per metric and the first divergence with both values "
                                "and the qlog line. Exit 0 when everything agrees, 1 on a divergence, 2 on "
                                "errors (docs/qlog-import.md).",
                    examples=["ccdiff fidelity tests/fixtures/qlog/aioquic-cubic-random-loss.qlog --stack oracle",
                              "ccdiff fidelity tests/fixtures/qlog/aioquic-reno-random-loss.qlog --stack oracle-reno "
                              "--out reports/fidelity-reno"])
    p.add_argument("qlog", metavar="QLOG", help="qlog file of the stack's own connection")
    p.add_argument("--stack", required=True, metavar="SPEC", action=Once,
                   help="the adapter to check, e.g. oracle, oracle-reno, quiche@0.30.0")
    p.add_argument("--out", metavar="DIR", help="write fidelity.json (with the series) and fidelity.png there")
    p.add_argument("--json", metavar="FILE", help="write the comparison (without the series) as JSON")
    p.set_defaults(func=cmd_fidelity)


def _add_coverage(sub) -> None:
    p = add_command(sub, "coverage", summary="line and branch coverage of a stack's controller files",
                    description="Build the stack's adapter with coverage instrumentation into its own folder "
                                "(build/coverage/<stack>/<version>/, never the normal build), run the "
                                "chosen inputs through it (default: the examples, the stored reproducers "
                                "fuzz/reproducers/ and every scenario x 3 seeds) and report line and branch "
                                "coverage of the controller's own files per input set, with every line "
                                "never run as an upstream permalink (docs/coverage.md). C stacks: gcc --coverage "
                                "and gcov, lines and branches; Rust stacks: -C instrument-coverage and "
                                "llvm-profdata/llvm-cov of rustc's LLVM version, lines only; Python stacks (aioquic): "
                                "coverage.py in the replaying process, lines and branches.",
                    examples=["ccdiff coverage ngtcp2",
                              "ccdiff coverage picoquic --examples --json picoquic-coverage.json",
                              "ccdiff coverage ngtcp2 --scenarios --seeds 1 --out reports/coverage-ngtcp2"])
    p.add_argument("stack", metavar="STACK", help="a stack with a coverage.toml (`ccdiff stacks`), name[@version]")
    p.add_argument("--examples", action="store_true", help="run examples/*.jsonl")
    p.add_argument("--scenarios", action="store_true", help="run every scenario in the closed loop")
    p.add_argument("--seeds", type=int, default=None, metavar="N", help="seeds per scenario (default 3)")
    p.add_argument("--corpus", action="append", metavar="DIR",
                   help="a folder of .jsonl/.bin traces, repeatable (default set: fuzz/reproducers/)")
    p.add_argument("--all-options", action="store_true",
                   help="also run every other value of the stack's other options (quiche idle_fix, hystart, "
                        "app_limited; quinn mtu), one at a time; default: each cc= value with defaults")
    p.add_argument("--out", metavar="DIR", help="write coverage.json and coverage.md there")
    p.add_argument("--json", metavar="FILE", help="write the full result as JSON")
    p.set_defaults(func=cmd_coverage)


def cmd_coverage(args) -> int:
    from . import coverage
    from .paths import project_root
    if args.seeds is not None and not args.scenarios and (args.examples or args.corpus):
        raise SetupError("--seeds applies to --scenarios")
    chosen = args.examples or args.scenarios or args.corpus
    corpus = args.corpus if args.corpus else ([] if chosen else [str(project_root() / "fuzz" / "reproducers")])
    sets = coverage.plan(args.examples or not chosen, args.scenarios or not chosen, corpus,
                         args.seeds or coverage.DEFAULT_SEEDS)
    doc = coverage.run(args.stack, sets, log=lambda m: print(m, file=sys.stderr, flush=True),
                       all_options=args.all_options)
    coverage.print_report(doc)
    from .output import write_json, write_text_atomic
    if args.json:
        write_json(args.json, doc)
    if args.out:
        out = Path(args.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SetupError(f"--out {out}: cannot create the folder: {exc.strerror or exc}") from None
        write_json(out / "coverage.json", doc)
        write_text_atomic(out / "coverage.md", coverage.render_markdown(doc))
    return EXIT_OK


STACK_HELP = ("stack to run, repeatable (--stack a --stack b) or a comma list; "
              "name[@version][:key=value,...], e.g. oracle, oracle:idle=last-send, oracle-reno, "
              "quiche@0.26.0 (`ccdiff stacks` lists them)")


def _add_replay(sub) -> None:
    p = add_command(sub, "replay", summary="run a trace through controllers and check every invariant",
                    description="Replay a JSONL trace through one or more controllers, check every "
                                "invariant after every event and compare stacks with the oracle.",
                    examples=["ccdiff replay examples/death-spiral.jsonl --stack oracle "
                              "--stack oracle:idle=last-send",
                              "ccdiff replay examples/death-spiral.jsonl --stack quiche@0.26.0 "
                              "--report reports/death-spiral",
                              "ccdiff replay tests/fixtures/qlog/aioquic-cubic-blackout.qlog --stack oracle"])
    p.add_argument("traces", nargs="+", metavar="TRACE",
                   help="trace file (.jsonl, docs/trace-format.md), or a qlog (.qlog/.sqlog, imported as "
                        "`ccdiff import` does); one: several are `ccdiff matrix`'s")
    p.add_argument("--stack", action=StackSpecs, metavar="SPEC", help=STACK_HELP + "; default: oracle")
    p.add_argument("--json", metavar="FILE", help="also write the findings as JSON")
    p.add_argument("--build", action="store_true", help="build missing stacks first")
    p.add_argument("--report", metavar="DIR", help="also write an HTML/Markdown/qlog/JUnit report there")
    add_qlog_option(p)
    _add_isolation_options(p)
    p.set_defaults(func=cmd_replay)


def _add_matrix(sub) -> None:
    p = add_command(sub, "matrix", summary="replay traces through every stack: a stack x invariant matrix",
                    description="Replay every trace through every stack (default: the oracles and "
                                "every built stack) and print a stack x invariant matrix.",
                    examples=["ccdiff matrix examples/*.jsonl",
                              "ccdiff matrix examples/*.jsonl --stack oracle --stack quiche@0.26.0 "
                              "--json matrix.json",
                              "ccdiff matrix examples/*.jsonl --stack ngtcp2@git-1a2b3c4d5e --against ngtcp2@1.25.0"])
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace files (.jsonl)")
    p.add_argument("--stack", action=StackSpecs, metavar="SPEC",
                   help=STACK_HELP + "; default: the oracles and every built stack")
    p.add_argument("--json", metavar="FILE", help="also write the matrix and every finding as JSON")
    p.add_argument("--report", metavar="DIR", help="also write an HTML/Markdown/qlog/JUnit report there")
    p.add_argument("--against", metavar="BASELINE",
                   help="a build to compare the --stack builds with (a release, or the checkout a patch "
                        "starts from): lists every trace where their snapshots differ, and exits 1 only "
                        "on a violation BASELINE does not have on the same trace (docs/detection-power.md)")
    add_qlog_option(p)
    _add_isolation_options(p)
    p.set_defaults(func=cmd_matrix)


def _add_report(sub) -> None:
    p = add_command(sub, "report", summary="HTML, Markdown bug reports, qlog and JUnit from a findings JSON",
                    description="Turn the findings JSON of `ccdiff replay --json` or `ccdiff matrix "
                                "--json` into a report folder (docs/reports.md); the traces are "
                                "replayed again for the plots and qlog.",
                    examples=["ccdiff matrix examples/*.jsonl --json matrix.json; "
                              "ccdiff report matrix.json --out reports/html"])
    p.add_argument("input", metavar="FINDINGS_JSON", help="output of `ccdiff replay/matrix --json FILE`")
    p.add_argument("--out", metavar="DIR", required=True, help="report folder (new, empty, or an earlier report)")
    add_qlog_option(p)
    p.set_defaults(func=cmd_report)


def _add_validate(sub) -> None:
    p = add_command(sub, "validate", summary="check traces for syntax and causal consistency",
                    description="Parse each trace and check it is well formed and causally consistent "
                                "(time never goes back, packet numbers increase, an ACK or a loss names "
                                "only packets in flight). Each error names the file and line. Exit 0 "
                                "when every trace is valid, 2 otherwise.",
                    examples=["ccdiff validate examples/idle-restart.jsonl",
                              "ccdiff validate examples/*.jsonl"])
    p.add_argument("traces", nargs="+", metavar="TRACE",
                   help="trace files (.jsonl), docs/trace-format.md; a scenario file (.toml) is checked "
                        "against the scenario schema that sim and conform use (scenarios/README.md)")
    p.set_defaults(func=cmd_validate)


def _add_stacks(sub) -> None:
    p = add_command(sub, "stacks", summary="list the stacks and versions, and which are built",
                    description="List every stack (implementations/*/stack.toml and the oracles), its "
                                "pinned versions, whether its adapter is built (or stale), and the "
                                "options its SPEC accepts.",
                    examples=["ccdiff stacks", "ccdiff build all && ccdiff stacks --json",
                              "ccdiff stacks --waivers"])
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--waivers", action="store_true",
                   help="list every documented deviation's excuses instead: the mechanism-checked ones "
                        "(profile.toml `explains`) and every remaining whole-invariant waiver "
                        "(`tolerates`) with the reason no mechanism checks it")
    p.set_defaults(func=cmd_stacks)


def _add_build(sub) -> None:
    p = add_command(sub, "build", summary="fetch (pinned, sha256-checked) and build stack adapters",
                    description="Build stack adapters from their pinned registry releases "
                                "(implementations/<stack>/stack.toml), or from a local checkout.",
                    examples=["ccdiff build all", "ccdiff build quiche@0.26.0",
                              "ccdiff build quiche --source ~/src/quiche"])
    p.add_argument("specs", nargs="+", metavar="STACK[@VERSION]",
                   help="quiche (all pinned versions), quiche@0.26.0, or all")
    p.add_argument("--source", metavar="DIR", help="build from this local source tree instead (named by its "
                   "content: STACK@git-<sha>[-dirty-<digest>] or STACK@local-<digest>; docs/versions.md)")
    p.add_argument("--sanitize", action="store_true", help="build with ASan+UBSan (C adapters)")
    p.add_argument("--force", action="store_true", help="rebuild even if built")
    p.set_defaults(func=cmd_build)


def _add_decode(sub) -> None:
    p = add_command(sub, "decode", summary="decode fuzzer bytes into a JSONL trace (docs/fuzz-encoding.md)",
                    description="Decode a fuzzer input (any byte string is a valid event stream, "
                                "docs/fuzz-encoding.md) into the JSONL trace the harness replays, on "
                                "standard output.",
                    examples=["ccdiff decode fuzz/vectors/basic.bin > basic.jsonl",
                              "head -c 64 /dev/urandom | ccdiff decode - | ccdiff validate /dev/stdin"])
    p.add_argument("input", help="binary file, or - for stdin")
    p.set_defaults(func=cmd_decode)


def _add_encode(sub) -> None:
    p = add_command(sub, "encode", summary="encode a trace as fuzzer bytes: a seed for `ccdiff fuzz --seeds`",
                    description="Write the fuzz encoding (docs/fuzz-encoding.md) whose decoding comes "
                                "closest to TRACE: a seed for the byte-mutating engines from a trace "
                                "written by hand, a closed-loop run (`ccdiff sim --trace`) or a stack's "
                                "own connection (`ccdiff import`).  The encoding is coarser than a trace "
                                "(1200-byte packets, waits in steps, an ACK at least 10 ms after the "
                                "newest packet it covers, ACK frames split into runs, no application "
                                "idle/data marks): what it left out is counted on standard error; "
                                "`ccdiff decode` shows what it kept.",
                    examples=["ccdiff encode examples/idle-restart.jsonl -o seeds/idle-restart.bin",
                              "ccdiff fuzz --stack ngtcp2 --engine afl --time 10m --seeds seeds/"])
    p.add_argument("trace", help="a JSONL trace (docs/trace-format.md)")
    p.add_argument("-o", "--output", required=True, help="the binary file to write")
    p.set_defaults(func=cmd_encode)


def _add_minimize(sub) -> None:
    p = add_command(sub, "minimize", summary="shrink a trace to the fewest events that still show a finding",
                    description="Cut the trace at the invariant's first violation on the stack, shrink it "
                                "by delta debugging over events (what fuzz triage does), then repair its "
                                "timings so that a real connection's loss detection would produce every "
                                "event (RFC 9002 §6.1, docs/trace-format.md 'Strict or lenient'), keeping it "
                                "only if the same finding still fires. A trace whose sends fit the stack's own "
                                "congestion window shrinks to one that does too (RFC 9002 §7); the last line "
                                "says whether the result does. Writes the minimal trace (stdout or "
                                "-o). Exit 0 with the trace, 2 if the invariant does not fire or on errors.",
                    examples=["ccdiff minimize examples/death-spiral.jsonl --stack quiche@0.26.0 "
                              "--invariant future-recovery-start -o min.jsonl",
                              "ccdiff minimize reports/conform/traces/x.jsonl --stack ngtcp2 "
                              "--invariant idle-inflation"])
    p.add_argument("trace", metavar="TRACE", help="trace file (.jsonl)")
    p.add_argument("--stack", required=True, metavar="SPEC", help="the stack it fires on, e.g. quiche@0.26.0")
    p.add_argument("--invariant", required=True, metavar="ID", help="the invariant to keep, e.g. future-recovery-start")
    p.add_argument("-o", "--output", metavar="FILE", help="write the minimal trace here (default: stdout)")
    p.set_defaults(func=cmd_minimize)


def _add_serve(sub) -> None:
    p = add_command(sub, "serve", summary="serve built adapters over TCP (adapter containers; docs/containers.md)",
                    description="Serve this machine's built adapters over TCP (JSON Lines, "
                                "ccdiff/remote.py); clients set CCDIFF_REMOTE_<STACK>=host:port.",
                    examples=["ccdiff serve --stack quiche --host 0.0.0.0 --port 7000",
                              "CCDIFF_REMOTE_QUICHE=localhost:7000 ccdiff replay examples/death-spiral.jsonl "
                              "--stack quiche@0.26.0"])
    p.add_argument("--stack", metavar="NAME", action=Once, help="serve only this stack (e.g. quiche); default: every built one")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (containers: 0.0.0.0)")
    p.add_argument("--port", type=int, default=7000, help="TCP port (0: any free one, printed)")
    p.allow_abbrev = False      # `--token SECRET` must not pass as an abbreviation of --token-file
    p.add_argument("--token-file", metavar="FILE",
                   help="read the shared secret every request must carry from FILE (default: "
                        "$CCDIFF_SERVE_TOKEN; clients send theirs from that variable). There is no "
                        "--token SECRET: `ps` would show it to every user of the machine")
    p.set_defaults(func=cmd_serve)


def _add_serve_reports(sub) -> None:
    p = add_command(sub, "serve-reports", summary="serve the HTML reports under a folder over HTTP (read-only)",
                    description="Serve FOLDER over HTTP: / lists every report under it (a folder with "
                                "an index.html), the rest are its files. Read-only; hidden folders "
                                "(fuzzer corpora) are not served. The compose `report` service runs it.",
                    examples=["ccdiff serve-reports reports --port 8080"])
    p.add_argument("folder", nargs="?", default="reports", metavar="FOLDER",
                   help="folder holding the reports (default: reports)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (containers: 0.0.0.0)")
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080; 0: any free one, printed)")
    p.set_defaults(func=cmd_serve_reports)


def _add_conform(sub) -> None:
    p = add_command(sub, "conform", summary="closed-loop conformance: stacks x scenarios x seeds in the simulator",
                    description="Run every stack through every scenario (scenarios/*.toml) with N seeds "
                                "in the closed-loop simulator, in parallel; write summary.json, junit.xml "
                                "and the traces of failing runs. The Reno controls (oracle-reno and each "
                                "stack's Reno alias) always run too. Exit 0 all pass, 1 failures, 2 errors.",
                    examples=["ccdiff conform --stack quiche@0.26.0 --stack quiche@0.30.0 --seeds 20",
                              "ccdiff conform --stack oracle --scenario death-spiral,tail-loss --seeds 3",
                              "ccdiff conform --stack quiche@0.30.0 --baseline last/summary.json",
                              "ccdiff conform --stack ngtcp2@git-1a2b3c4d5e --against ngtcp2@1.25.0 "
                              "--scenario death-spiral --seeds 5"])
    p.add_argument("--stack", "--stacks", dest="stacks", action=StackSpecs, metavar="SPEC",
                   help=STACK_HELP + "; NAME=SPEC reports SPEC as NAME (oracle=oracle:idle=last-send); "
                        "default: the oracles and every built stack")
    p.add_argument("--scenario", "--scenarios", dest="scenarios", action="append", metavar="NAME",
                   help="scenario name or .toml path, repeatable or a comma list (default: all of "
                        "scenarios/; `ccdiff scenarios` lists them)")
    p.add_argument("--seeds", type=int, default=10, metavar="N", help="seeds per case (default 10)")
    p.add_argument("--first-seed", type=int, default=0, metavar="S",
                   help="first seed; the run uses S .. S+N-1 (default 0)")
    p.add_argument("--out", default="reports/conform", metavar="DIR",
                   help="output folder: index.html (the overview), summary.json, junit.xml, cases.jsonl, "
                        "traces/, report/ (default reports/conform)")
    p.add_argument("--jobs", type=int, default=0, metavar="N", help="worker processes (default: cores)")
    p.add_argument("--traces", choices=["failing", "all", "none"], default="failing",
                   help="which runs keep a replayable trace under DIR/traces (default failing)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="per-case time limit: a case still running after S seconds (a hung stack) is "
                        "killed and reported as an error, and the run goes on (default 300; the slowest "
                        "catalog case takes a few seconds; 0: no limit)")
    _add_memory_limit(p, "per-case memory bound: a case whose worker holds more than MB MiB resident (a "
                         "stack or scenario that grows without end) is killed and reported as an error, "
                         "and the run goes on")
    p.add_argument("--baseline", metavar="FILE",
                   help="an earlier summary.json: exit 1 only on regressions (a seed that passed there "
                        "fails now, or a pass-rate drop beyond --tolerance), 0 otherwise, 2 on errors")
    p.add_argument("--tolerance", type=float, default=0.05, metavar="X",
                   help="pass-rate drop that counts as a regression when seed sets differ (default 0.05)")
    p.add_argument("--against", metavar="BASELINE",
                   help="a build to run beside the --stack builds on the same scenarios and seeds (a "
                        "release, or the checkout a patch starts from): exit 1 only on a violation "
                        "BASELINE has on no seed of that scenario; one it has on another seed is listed "
                        "as reshuffled, not new (summary.json \"against\", docs/detection-power.md)")
    p.add_argument("--mode", choices=("closed-loop", "connection"), default="closed-loop",
                   help="closed-loop (default): each stack's controller behind its adapter in ccdiff's "
                        "closed loop; connection: each stack's own client and server over the scenario's "
                        "path (default stacks: those with a connection shim), the controls in the closed "
                        "loop beside them (docs/connection-mode.md)")
    p.add_argument("--build", action="store_true", help="build missing stacks first")
    p.add_argument("--fresh", action="store_true",
                   help="ignore DIR/cases.jsonl (by default finished cases of an interrupted run of "
                        "the same matrix are reused, and only the rest run)")
    p.add_argument("--no-report", dest="report", action="store_false",
                   help="skip the HTML reports of failing stacks (DIR/report/<stack>/, from the first "
                        "failing seed of each scenario)")
    p.add_argument("--shard", metavar="K/N",
                   help="run only the K-th of N parts of the matrix (1-based; case i of the ordered "
                        "matrix is shard (i mod N)+1's) and write DIR/shard.json last; no reports: "
                        "`ccdiff merge` joins the N folders and writes them (docs/sharding.md)")
    add_qlog_option(p)
    p.set_defaults(func=cmd_conform)


def _add_merge(sub) -> None:
    p = add_command(sub, "merge", summary="join the shards of a `conform --shard K/N` run",
                    description="Join the N shard folders of one `ccdiff conform --shard K/N` run into one "
                                "conform output: summary.json, junit.xml, index.html, traces/ and the reports "
                                "of failing stacks, byte-identical to `ccdiff conform` run unsharded with the "
                                "same arguments and the same --out. Refuses (exit 2, one line) shards of "
                                "different arguments, scenario files, stack builds or ccdiff, a missing or "
                                "duplicated shard, a half-written shard folder, and an --out that is or "
                                "overlaps an input. Exit codes as conform: 0 all pass, 1 failures (or "
                                "regressions with --baseline), 2 errors.",
                    examples=["ccdiff conform --seeds 100 --shard 2/3 --out shards/2     # on runner 2 of 3",
                              "ccdiff merge shards/1 shards/2 shards/3 --out reports/conform",
                              "ccdiff merge shards/* --out reports/conform --baseline last/summary.json"])
    p.add_argument("shards", nargs="+", metavar="DIR", help="the shard folders (each one's conform --out)")
    p.add_argument("--out", default="reports/conform", metavar="DIR",
                   help="output folder, as conform's (default reports/conform); never one of the inputs")
    p.add_argument("--baseline", metavar="FILE",
                   help="an earlier summary.json: exit 1 only on regressions, as `conform --baseline`")
    p.add_argument("--tolerance", type=float, default=0.05, metavar="X",
                   help="pass-rate drop that counts as a regression when seed sets differ (default 0.05)")
    p.add_argument("--no-report", dest="report", action="store_false",
                   help="skip the HTML reports of failing stacks even if the shards' run asked for them "
                        "(then the stacks need not be built where merge runs)")
    p.set_defaults(func=cmd_merge)


def _add_sim(sub) -> None:
    p = add_command(sub, "sim", summary="run one scenario once: the stack beside the oracle and the Reno control",
                    description="Simulate one scenario with one seed in the closed-loop simulator, for each "
                                "--stack and, on the same scenario and seed, the CUBIC oracle and the Reno "
                                "control (oracle-reno); print them side by side with the verdict of each, "
                                "optionally write the replayable traces. Exit 1 if a --stack does not pass.",
                    examples=["ccdiff sim death-spiral --stack quiche@0.26.0 --seed 3",
                              "ccdiff sim death-spiral --stack quiche@0.26.0 --set deadline_us=20000000 --json",
                              "ccdiff sim tail-loss --trace tail.jsonl && ccdiff replay tail.jsonl",
                              "ccdiff sim death-spiral --mode connection --stack aioquic --seed 3"])
    p.add_argument("scenario", help="scenario name or .toml path (`ccdiff scenarios` lists them)")
    p.add_argument("--stack", action=StackSpecs, metavar="SPEC", help=STACK_HELP + "; default: oracle")
    p.add_argument("--seed", type=int, default=0, help="random seed of the scenario's loss and jitter (default 0)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a scenario field (a JSON value, e.g. base_rtt_us=40000), repeatable; "
                        "the field names are those of scenarios/README.md, flat")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="give up on a simulation still running after S seconds (exit 2, as conform's "
                        "per-case --timeout; default 300, 0: no limit)")
    _add_memory_limit(p, "give up on a simulation whose process holds more than MB MiB resident (exit 2, "
                         "as conform's per-case --memory-limit")
    p.add_argument("--trace", metavar="FILE",
                   help="write each --stack run's trace (JSONL; FILE-<stack>.jsonl when several)")
    p.add_argument("--mode", choices=("closed-loop", "connection"), default="closed-loop",
                   help="closed-loop (default): ccdiff's sender drives each stack's controller through "
                        "its adapter; connection: each stack's own client and server (handshake, loss "
                        "detection, PTO, pacing, controller: all the stack's) over the scenario's path in "
                        "virtual time, its adapter's closed loop beside it (docs/connection-mode.md)")
    p.add_argument("--qlog", metavar="FILE",
                   help="--mode connection: write the client's own qlog (stacks whose shim writes one: "
                        "aioquic) and judge the connection's own events with every invariant, with the "
                        "adapter's fidelity to the window the stack logged (FILE-<stack>.qlog when several)")
    p.add_argument("--no-controls", dest="controls", action="store_false",
                   help="run only the --stack runs, not the oracle and the Reno control beside them")
    p.add_argument("--json", action="store_true", help="print raw results (µs, bytes) as JSON instead")
    p.set_defaults(func=cmd_sim)


def _add_scenarios(sub) -> None:
    p = add_command(sub, "scenarios", summary="list the scenario catalog",
                    description="List the network scenarios of scenarios/*.toml with what each one "
                                "exercises (docs: scenarios/README.md).",
                    examples=["ccdiff scenarios", "ccdiff sim $(ccdiff scenarios --names | head -1)"])
    p.add_argument("--names", action="store_true", help="print only the names, one a line")
    p.set_defaults(func=cmd_scenarios)


# Bounds of numeric options, by dest (the option's name with '_'): a value outside them is a
# usage error (exit 2) before any work starts, instead of a run of nothing (--seeds 0), a
# wrapped or overflowing value deep inside (a port of 70000, a timeout of inf), or a campaign
# that cannot end (--seeds 10**18).  A numeric option not listed must be finite and >= 0.
NUMERIC_BOUNDS = {
    ("conform", "seeds"): (1, 100_000),     # by (subcommand, dest) first, then by dest
    ("coverage", "seeds"): (1, 100_000),
    ("bisect", "seeds"): (1, 100_000),
    ("bisect", "pass_below"): (0, 1),
    ("confirm", "budget"): (1, 10_000),     # connection runs, each seconds
    "seeds": (0, 100_000),
    "first_seed": (0, 2**32 - 1),
    "seed": (0, 2**32 - 1),
    "jobs": (0, 1024),
    "port": (0, 65535),
    "timeout": (0, 7 * 86400),
    "tolerance": (0, 1),
    "memory_limit": (0, 1 << 24),           # MiB: 16 TiB
}


def numeric_bounds(command: str, dest: str) -> tuple:
    return NUMERIC_BOUNDS.get((command, dest), NUMERIC_BOUNDS.get(dest, (0, math.inf)))


def _add_memory_limit(p, what: str) -> None:
    from .limits import DEFAULT_MEMORY_MIB
    p.add_argument("--memory-limit", type=int, default=DEFAULT_MEMORY_MIB, metavar="MB",
                   help=f"{what}; default {DEFAULT_MEMORY_MIB}, 0: no bound)")


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


def main(argv=None, supervise: bool = False) -> int:
    """Exit 0: no finding; 1: findings or regressions, and nothing else; 2: every error that
    is not a finding (usage, input, setup, I/O, out of memory, a bug), as one line."""
    parser = build_parser()
    # A command line from the OS cannot hold a NUL byte, but main() called in-process can,
    # and open() raises ValueError (not OSError) on one: refuse it here, once for every path.
    for arg in sys.argv[1:] if argv is None else argv:
        if "\0" in arg:
            parser.error(f"argument {arg!r} contains a NUL byte")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["fuzz", "triage"]:      # `ccdiff fuzz triage DIR` is the fuzz-triage command
        argv[:2] = ["fuzz-triage"]
    args = parser.parse_args(argv)
    check_numbers(parser, args)
    from .streams import guarded
    with guarded(sys):
        if supervise and ((args.command in SUPERVISED and not getattr(args, "isolate", True))
                          or args.command in CRASH_NAMED):
            return _supervised(args)
        return _run(args)


def entry() -> int:
    """The `ccdiff` command (console script and `python -m ccdiff`): main, supervised."""
    return main(supervise=True)


# Commands that run stacks' native code in ccdiff's own process unless --isolate.
SUPERVISED = ("replay", "matrix")
# Commands that run a stack in process with no --isolate to rerun under: a crash signal there is
# named as the stack's crash (a finding, exit 1), never a silent exit 139 (issue #32).
CRASH_NAMED = ("sim", "minimize", "check-harness")
CRASH_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE", "SIGSYS", "SIGTRAP")


def _supervised(args) -> int:
    """A segfault in a stack's native code would end the command with no finding and no
    output (exit 139).  The command runs in a forked child; when a crash signal ends it, it
    runs again with every stack isolated (--isolate), where the crash is that stack's
    adapter-error finding and the other stacks' results stand.  Replay is deterministic, so
    the second run meets the same crash; nothing was written by the first (its outputs come
    at its end)."""
    import os
    import signal
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:                         # the child: the command itself
        code = EXIT_ERROR
        try:
            code = _run(args)
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except KeyboardInterrupt:        # the child has it too; wait for its own exit
            continue
    if not os.WIFSIGNALED(status):
        return os.waitstatus_to_exitcode(status)
    name = signal.Signals(os.WTERMSIG(status)).name
    if name not in CRASH_SIGNALS:
        print(f"error: the {args.command} process was ended by {name} (out of memory? killed?)", file=sys.stderr)
        return EXIT_ERROR
    if args.command in CRASH_NAMED:
        given = getattr(args, "stack", None) or []
        specs = [given] if isinstance(given, str) else [spec for spec in given if spec] or ["the stack"]
        which = specs[0] if len(specs) == 1 else "one of " + ", ".join(specs)
        print(f"adapter-error: a stack's native code crashed the {args.command} process ({name}): "
              f"{which}. That is the stack's crash, a finding; `ccdiff replay TRACE --stack SPEC "
              "--isolate` (a trace from `sim --trace` of another run, or the input) names the event",
              file=sys.stderr, flush=True)
        return EXIT_FINDINGS
    print(f"a stack crashed ccdiff's process ({name}); running again with every stack isolated "
          "(--isolate) to find which", file=sys.stderr, flush=True)
    args.isolate = True
    return _run(args)


def _run(args) -> int:
    try:
        from .cli_paths import check_paths
        check_paths(args)
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

"""`ccdiff versions STACK` and `ccdiff bisect` (docs/versions.md)."""
from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

from .cli_help import add_command
from .errors import SetupError

EXIT_OK, EXIT_NONE, EXIT_ERROR = 0, 1, 2


def version_rows(stack: str, offline: bool = False) -> tuple[list, object, str]:
    """One row per release: published (registry), pinned, locked, built, supported, features."""
    from .probe import describe
    from .registry import load_config, load_lock, published, support, version_key
    from .stacks import checkout_source, features_of, load_recipes
    recipes = load_recipes()
    if stack not in recipes:
        raise SetupError(f"unknown stack {stack!r}; known: {', '.join(sorted(recipes))}")
    recipe = recipes[stack]
    config = load_config(recipe.folder, recipe.name)
    if config is None:
        raise SetupError(f"{stack}: no implementations/{stack}/registry.toml: its releases are not looked up")
    lock = load_lock(config.lock_path)
    warning = ""
    releases = []
    if not offline:
        try:
            releases = published(config)
        except SetupError as exc:
            warning = f"registry not reachable ({exc}); showing pinned, locked and built releases only"
    by_url = {pin["url"]: v for v, pin in {**lock, **recipe.versions}.items()}
    rows, seen = [], set()
    for r in releases:
        version = r.version if config.same_version else by_url.get(r.url)
        row = {"version": version, "package": config.package, "package_version": r.version,
               "published": True, "yanked": r.yanked, "sha256": r.sha256}
        rows.append(row)
        if version:
            seen.add(version)
    for version in set(recipe.versions) | set(lock):
        if version not in seen:
            pin = recipe.versions.get(version) or lock[version]
            rows.append({"version": version, "package": config.package,
                         "package_version": pin.get("package_version") or version,
                         "published": None, "yanked": bool(pin.get("yanked")), "sha256": pin["sha256"]})
    folder = recipe.build_folder("x").parent
    for row in rows:
        v = row["version"]
        row["pinned"] = v in recipe.versions
        row["locked"] = v in lock
        row["built"] = bool(v) and recipe.library(v).exists()
        if v:
            ok, why = support(config, v)
        else:
            ok, why = False, f"{config.package} {row['package_version']}: its {stack} version is unknown " \
                             f"(not pinned or locked)"
        row["supported"] = ok
        row["why_not"] = why
        row["features"] = describe(features_of(recipe, v)) if row["built"] else ""
    if folder.is_dir():
        for p in sorted(folder.iterdir()):
            if p.name.startswith(("local-", "git-")) and (p / "libccdiff_adapter.so").exists():
                rows.append({"version": p.name, "package": "", "package_version": "", "published": False,
                             "yanked": False, "sha256": "", "pinned": False, "locked": False, "built": True,
                             "supported": True, "why_not": "", "features": describe(features_of(recipe, p.name)),
                             **checkout_source(recipe, p.name)})
    rows.sort(key=lambda r: version_key(r["package_version"] or r["version"] or ""))
    return rows, config, warning


def cmd_versions(args) -> int:
    rows, config, warning = version_rows(args.stack, offline=args.offline)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps({"stack": args.stack, "registry": config.kind, "package": config.package,
                          "supported": config.supported_text(), "releases": rows}, indent=2))
        return EXIT_OK
    from rich.table import Table
    from .report_terminal import console, source_gone_note
    table = Table(title=f"{args.stack}: releases of {config.package} "
                        f"({'crates.io' if config.kind == 'crates' else 'PyPI'}); adapter supports "
                        f"{config.supported_text()}", title_justify="left")
    table.add_column("version", no_wrap=True)
    if not config.same_version:
        table.add_column(config.package, no_wrap=True)
    table.add_column("registry")
    table.add_column("built")
    table.add_column("supported", overflow="fold")
    table.add_column("supports (probed from the code)", overflow="fold")
    for r in rows:
        reg = ("yanked" if r["yanked"] else "published") if r["published"] else \
            "checkout" if r["published"] is False else "not listed"
        reg += " pinned" if r["pinned"] else " locked" if r["locked"] else ""
        cells = [r["version"] or "?"]
        if not config.same_version:
            cells.append(r["package_version"])
        built = "[green]yes[/]" if r["built"] else "no"
        built += source_gone_note(r)
        sup = "[green]yes[/]" if r["supported"] else "no"
        cells += [reg, built, sup, r["features"]]
        table.add_row(*cells)
    out = console()
    out.print(table)
    unsupported = [r for r in rows if not r["supported"] and r["version"]]
    if unsupported:
        out.print(f"not supported ({len(unsupported)}): {unsupported[0]['why_not']}", soft_wrap=True)
    built = sum(r["built"] for r in rows)
    out.print(f"{len([r for r in rows if r['published']])} published, "
              f"{sum(r['supported'] for r in rows)} supported, {built} built")
    return EXIT_OK


def cmd_bisect(args) -> int:
    from .bisect import Judge, candidate_releases, expected_steps, print_result, result_document, \
        scenario_check, search, trace_check
    from .spec import parse_spec
    from .stacks import load_recipes, resolve
    spec = parse_spec(args.stack)
    if spec.version:
        raise SetupError(f"--stack {args.stack}: name the stack without a version (the releases are "
                         "what bisect varies); use --good/--bad or --all")
    target = resolve(spec.name)
    if target.kind != "native":
        raise SetupError(f"--stack {args.stack}: the oracle has no releases to bisect")
    recipe = target.recipe
    options = ",".join(f"{k}={v}" for k, v in spec.options)
    if args.invariant is not None:
        from .invariants import CATALOG
        if args.invariant not in CATALOG:
            raise SetupError(f"--invariant {args.invariant!r}: unknown; one of {', '.join(sorted(CATALOG))}")
    if (args.trace is None) == (args.scenario is None):
        raise SetupError("give a TRACE or --scenario NAME (one of them)")
    if args.trace is not None:
        if not args.invariant:
            raise SetupError("a TRACE is judged by --invariant ID (bad when the stack violates it)")
        if args.pass_below is not None:
            raise SetupError("--pass-below judges a --scenario's pass rate; with a TRACE use --invariant")
        check = trace_check(args.trace, args.invariant)
        question = {"trace": args.trace, "invariant": args.invariant}
    else:
        if (args.invariant is None) == (args.pass_below is None):
            raise SetupError("a --scenario is judged by --pass-below RATE or by --invariant ID (one of them)")
        if args.pass_below is not None and not 0 < args.pass_below <= 1:
            raise SetupError(f"--pass-below {args.pass_below}: expected a rate in (0, 1]")
        check = scenario_check(args.scenario, args.seeds, args.pass_below, args.invariant)
        question = {"scenario": args.scenario, "seeds": args.seeds, "pass_below": args.pass_below,
                    "invariant": args.invariant}
    if options:
        question["options"] = options
    if args.json and args.json != "-":         # found out before minutes of builds, not after
        parent = Path(args.json).parent
        if not parent.is_dir():
            raise SetupError(f"--json {args.json}: {parent} is not a folder")
    if args.all == (args.good is not None or args.bad is not None):
        raise SetupError("give --good V --bad V, or --all (the adapter's supported range)")
    if not args.all and (args.good is None or args.bad is None):
        raise SetupError("--good and --bad go together")
    from .registry import support, load_config, version_key
    order = candidate_releases(recipe, include_yanked=args.include_yanked)
    if not args.all:
        config = load_config(recipe.folder, recipe.name)
        for v in (args.good, args.bad):
            if config is not None and not support(config, v)[0]:
                raise SetupError(support(config, v)[1])
            if v not in order:
                order.append(v)          # named explicitly (a yanked or pre-release one)
        order.sort(key=version_key)
        lo, hi = sorted((order.index(args.good), order.index(args.bad)))
        order = order[lo:hi + 1]
    question["range"] = f"{order[0]} .. {order[-1]}" if order else ""
    print(f"bisect {recipe.name}: {len(order)} releases ({', '.join(order)}); about "
          f"{expected_steps(len(order))} to judge", file=sys.stderr)
    judge = Judge(recipe.name, options, check, json.dumps(question), expected_steps(len(order)))
    started = time.monotonic()
    found = search(order, judge, args.good, args.bad)
    doc = result_document(recipe, question, order, found, judge, time.monotonic() - started)
    if args.json == "-":
        print(json.dumps(doc, indent=2))
        with contextlib.redirect_stdout(sys.stderr):
            print_result(doc)
    else:
        if args.json:
            from .output import write_json
            write_json(args.json, doc)
        print_result(doc)
    return EXIT_OK if found.direction != "none" else EXIT_NONE


def add_parsers(sub) -> None:
    p = add_command(sub, "versions", summary="a stack's published releases: built, supported, features",
                    description="List the releases a stack's registry publishes (crates.io's index, PyPI's "
                                "JSON API), which are pinned or locked, which are built, which the adapter "
                                "supports, and what each built one supports (probed from its code).",
                    examples=["ccdiff versions quiche", "ccdiff versions ngtcp2 --json"])
    p.add_argument("stack", metavar="STACK", help="a stack with a registry.toml (e.g. quiche, ngtcp2, picoquic)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--offline", action="store_true",
                   help="do not read the registry: pinned, locked and built releases only")
    p.set_defaults(func=cmd_versions)

    p = add_command(sub, "bisect", summary="which release broke it, which fixed it",
                    description="Judge a stack's releases in binary-search order (building each once; "
                                "builds are reused, so a rerun resumes) and name the first bad release "
                                "and the first good one after it, with upstream links and the commit range. "
                                "A TRACE is bad when the stack violates --invariant ID; a --scenario is bad "
                                "when its pass rate over --seeds is below --pass-below (or when a seed "
                                "violates --invariant).  Exit 0 found, 1 no transition between the ends, "
                                "2 errors.",
                    examples=["ccdiff bisect examples/death-spiral.jsonl --stack quiche "
                              "--invariant future-recovery-start --all",
                              "ccdiff bisect --scenario death-spiral --seeds 10 --pass-below 0.5 "
                              "--stack quiche --good 0.26.1 --bad 0.26.0 --json bisect.json"])
    p.add_argument("trace", nargs="?", metavar="TRACE", help="a JSONL trace to replay")
    p.add_argument("--scenario", metavar="NAME", help="a closed-loop scenario instead of a trace")
    p.add_argument("--stack", required=True, metavar="STACK[:opts]", help="the stack, without a version")
    p.add_argument("--invariant", metavar="ID", help="bad when this invariant is violated")
    p.add_argument("--pass-below", type=float, metavar="RATE",
                   help="with --scenario: bad when the pass rate is below RATE (0..1)")
    p.add_argument("--seeds", type=int, default=10, metavar="N", help="with --scenario: seeds 0..N-1 (default 10)")
    p.add_argument("--good", metavar="V", help="a release known good")
    p.add_argument("--bad", metavar="V", help="a release known bad")
    p.add_argument("--all", action="store_true", help="search the adapter's whole supported range")
    p.add_argument("--include-yanked", action="store_true", help="search yanked releases too")
    p.add_argument("--json", metavar="FILE", help="write the result as JSON ('-' for stdout)")
    p.set_defaults(func=cmd_bisect)

"""`ccdiff fuzz triage DIR --stack SPEC`: triage a folder of inputs that came from
elsewhere -- the crash files ClusterFuzzLite or OSS-Fuzz report (`crash-<sha1>`,
`clusterfuzz-testcase-minimized-<target>-<id>`), a libFuzzer artifact folder, files
someone mailed -- with the same triage as `ccdiff fuzz` (triage.py): each file is run
through the stack's harness first, with ASan + UBSan for the C stacks (a crash, sanitizer
report or hang of the stack's own code is stored as `native-crash--<kind>`, never
replayed in-process), then decoded and replayed
with the oracle, deduplicated by signature, minimized and stored in FINDINGS/<stack>/.

Every regular file under DIR is an input (sorted by path, so the first file of each
signature is the same on every run); hidden files and folders are skipped."""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import SetupError
from ..stacks import resolve
from .conclude import conclude, require_built
from .triage import Triage

# No engine writes a larger input: fz_main.c and the engines cap an input at 1 MiB.
MAX_INPUT_BYTES = 1 << 20
ENGINE = "external"      # finding.json found_by: the input came from outside ccdiff fuzz


def add_parser(sub) -> None:
    from ..cli_help import add_qlog_option
    from ..cli_help import Once, add_command
    p = add_command(sub, "fuzz-triage", summary="triage a folder of fuzz inputs (ClusterFuzzLite / OSS-Fuzz "
                    "crashes): `ccdiff fuzz triage DIR`",
                    description="Triage every file under DIR as a fuzz input (docs/fuzz-encoding.md) for one "
                    "stack, as `ccdiff fuzz` triages what its engines find: a crash or hang of the stack's own "
                    "code in its harness is stored as native-crash--<kind>; every other input is replayed with "
                    "the oracle, and each new signature is minimized into "
                    "FINDINGS/<stack>/<signature>/reproducer.jsonl. For the crash files ClusterFuzzLite and "
                    "OSS-Fuzz report. Spelled `ccdiff fuzz triage DIR` (or `ccdiff fuzz-triage DIR`). Each stored "
                    "finding is judged as `ccdiff fuzz` judges it. Exit 1 when a strict bug report (new or not "
                    "checked upstream) is stored, 0 otherwise, 2 errors (DIR missing or holding no file).",
                    examples=["ccdiff fuzz triage cflite-crashes/ --stack quiche@0.26.0",
                              "ccdiff fuzz-triage artifacts/ --stack ngtcp2 --findings findings/   (the same command)"])
    p.prog = "ccdiff fuzz triage"
    p.add_argument("inputs", metavar="DIR", help="a folder of input files (searched recursively)")
    p.add_argument("--stack", required=True, metavar="SPEC", action=Once,
                   help="the stack the inputs were found on, e.g. quiche@0.26.0 (target quiche_0_26_0)")
    p.add_argument("--findings", default="findings", metavar="DIR", help="findings folder (default findings/)")
    p.add_argument("--no-report", action="store_true",
                   help="skip the HTML report of the stored findings (FINDINGS/<stack>/report/)")
    add_qlog_option(p)
    p.set_defaults(func=cmd_fuzz_triage)


def input_files(folder: Path) -> list:
    """Every regular, non-hidden file under `folder`, sorted by path."""
    if not folder.is_dir():
        raise SetupError(f"{folder}: not a folder of inputs")
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    if not files:
        raise SetupError(f"{folder}: no input files in it")
    return files


def _read(path: Path) -> bytes | None:
    with open(path, "rb") as fh:
        data = fh.read(MAX_INPUT_BYTES + 1)
    return None if len(data) > MAX_INPUT_BYTES else data


def cmd_fuzz_triage(args) -> int:
    from .harness import harness, harness_env
    files = input_files(Path(args.inputs))
    target = resolve(args.stack)
    if target.kind != "native":
        raise SetupError(f"{args.stack}: triage replays inputs through a stack's adapter; the oracle is "
                         "the judge, not a target")
    require_built(target)
    # The services found these with ASan or UBSan builds: a C stack's memory error or UB
    # must show as a native crash here too, not reach the in-process replay (and ccdiff).
    # The Rust stacks have no sanitizer build (harness.py); their overflow checks are on.
    exe = None
    if target.recipe.language != "rust":
        try:
            exe = harness(target, "plain", sanitize=True)
        except SetupError as exc:    # e.g. the fuzzer image: read-only, sanitizer builds not pre-built
            print(f"note: no ASan + UBSan harness ({exc}); checking crashes with the plain build, which "
                  "misses memory errors that do not crash it", file=sys.stderr)
    exe = exe or harness(target, "plain")
    env = harness_env(target)
    triage = Triage(Path(args.findings), args.stack, target.label)
    known = set(triage.stored)
    skipped = 0
    for path in files:
        try:
            data = _read(path)
        except OSError as exc:
            raise SetupError(f"{path}: {exc.strerror}") from None
        if data is None:
            print(f"skipped {path}: larger than {MAX_INPUT_BYTES} bytes, no engine writes such an input",
                  file=sys.stderr)
            skipped += 1
            continue
        triage.add_crash(data, ENGINE, exe, env, str(path))
    # New to the folder, or stored lenient before and strict now (Triage.upgraded).
    new = [stored for key, stored in triage.stored.items() if key not in known or key in triage.upgraded]
    print(f"{len(files) - skipped} input(s) from {args.inputs} triaged on {target.label}"
          + (f", {skipped} skipped" if skipped else ""), file=sys.stderr)
    return conclude(triage, new, args)

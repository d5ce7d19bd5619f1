"""Mutation score of a stack's controller (issue #21 item 4): every stack but the oracle.

A small, fixed set of C mutation operators (ngtcp2, picoquic, and Linux's tcp_cubic.c, taken
out of Debian's linux-source tarball into a kernel tree once per campaign), the same operators
over Python's tokens (aioquic's cubic.py, bench/mutation_python.py), or cargo-mutants' mutants
(quiche, quinn, s2n-quic, below), is applied, one change at a time, to the pinned source of a
stack's controller file; each mutant is built with
`ccdiff build STACK --source` into a scratch build folder (bench/planted_bugs.py's
path: the pinned builds are never touched) and judged against the pristine pinned
build on the same inputs.

Operators (sites found by a small C tokenizer: comments, string and character
literals and preprocessor lines, #include and #define among them, are never mutated):

  ror  relational:  <  -> <= >=   <= -> < >   >  -> >= <=   >= -> > <   == <-> !=
  aor  arithmetic:  binary + <-> -,  * <-> /,  += <-> -=,  *= <-> /=
       (a `*` that reads as a pointer declarator, `TYPE *name` followed by , ) = ; [,
       or a dereference is left alone; so are unary + and -)
  lcr  logical:     && <-> ||
  icr  integer constant: n -> n+1 and n -> n-1 (so 0 -> 1 and 1 -> 0); not array sizes
       in declarations, not floating-point literals, not octal ones
  neg  condition negation: if (c) -> if (!(c))

Sites are sorted by position and every mutant has an id FILE:LINE:COL:OP:NEW (NEW is
`!` for neg): the same pinned source and arguments always give the same mutants, the
same --sample and the same table.

Rust (quiche, src/recovery/congestion/cubic.rs; quinn, src/congestion/cubic.rs; s2n-quic,
src/recovery/cubic.rs): cargo-mutants is the generator only.
`cargo mutants --list --json --file FILE` in the extracted pinned crate lists its mutants
(function bodies replaced by a value of the return type, binary and unary operators
swapped or deleted; #[cfg(test)] code is skipped); each becomes a Mutant with the id
FILE:LINE:COL:cargo-mutants:NEW (NEW `delete` for a deletion) and is planted, built and
judged exactly as a C mutant.  --functions takes cargo-mutants' function names
(State::w_cubic, on_packet_acked).  Needs cargo-mutants (bench only, not the tests):
cargo install --locked cargo-mutants; without it the Rust path exits 2 saying so.

Judging (the issue's rule: a mutant is killed only by a finding the pristine build does
not have on the same inputs):

- replay: every example trace through the pristine build and the mutant; a new
  violated invariant on a trace kills (bench/planted_bugs.py's judge);
- conform: the scenarios below, --seeds N each, for the mutant and the pristine build
  (conform also runs the stack's Reno variant and the oracle's Reno control).  A
  closed loop reshuffles when the trajectory changes, so a new (invariant, scenario,
  seed) kills only when the pristine build has that invariant on NO seed of that
  scenario; otherwise it is counted as `reshuffled` (a visible difference, not a kill);
- a crash or hang of the mutant where the pristine build runs is a kill, shown apart;
- with --fuzz-seconds N (after column only): `ccdiff fuzz --stack MUTANT --against
  PRISTINE --engine E --time Ns` (docs/fuzzing.md, differential fuzzing between builds);
  an input on which the mutant violates an invariant the pristine build does not kills,
  an input whose snapshots merely differ makes the mutant visible.  AFL++ and honggfuzz
  build an instrumented harness per mutant (removed after it); Hypothesis needs none.

Verdicts: killed; survived-visible (some snapshot or conform metric differs, no new
violation: a blind spot of the checks); survived-identical, split with the pristine
build's line coverage (ccdiff/coverage.py, gcov) into `unreached` (the mutated line
never ran on these inputs) and `other` (ran: equivalent, or run without effect).
score = killed / (mutants - build errors - unreached).

Two columns from one build per mutant: before = the two original examples
(death-spiral, idle-restart), no conform; after = every examples/*.jsonl + conform.

    python3 bench/mutation.py ngtcp2 --functions ngtcp2_cc_cubic_cc_on_ack_recv --list
    python3 bench/mutation.py ngtcp2 --functions cubic_cc_compute_w_cubic,ngtcp2_cc_cubic_cc_on_ack_recv \\
        --sample 60 --seed 1 --json rows.json
    python3 bench/mutation.py picoquic --sample 40 --seeds 5
    python3 bench/mutation.py ngtcp2 --only ngtcp2_cc.c:501:39:icr:9 --seeds 0 --fuzz-seconds 60

Exit 0 when it ran (whatever the score), 2 with one line when it could not (unknown
stack or function, the control mutant not identical to the pinned build, a pristine
run failing).
"""
from __future__ import annotations

import argparse
import bisect
import glob
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from planted_bugs import REPLAY, Failed, ccdiff, judge, pristine_tree  # noqa: E402

from mutation_ops import AOR, LCR, OPERATORS, ROR, Mutant, int_replacements  # noqa: E402

from ccdiff.baseline import split_by_baseline  # noqa: E402
from ccdiff.fuzzing.triage import invariant_only_in_candidate  # noqa: E402

# The controller file(s) of each stack, inside the stack's source tree.
STACK_FILES = {"ngtcp2": ("lib/ngtcp2_cc.c",), "picoquic": ("picoquic/cubic.c",),
               "linux": ("net/ipv4/tcp_cubic.c",), "aioquic": ("src/aioquic/quic/congestion/cubic.py",),
               "quiche": ("src/recovery/congestion/cubic.rs",), "quinn": ("src/congestion/cubic.rs",),
               "s2n-quic": ("src/recovery/cubic.rs",), "msquic": ("src/core/cubic.c",)}
# Linux's source is a tarball inside Debian's linux-source package; implementations/linux/build.sh
# also takes a kernel tree holding these files, which source_tree extracts once per campaign.
KERNEL_FILES = ("net/ipv4/tcp_cubic.c", "net/ipv4/tcp_cong.c", "include/net/tcp.h", "Makefile")
RUST_STACKS = {"quiche", "quinn", "s2n-quic"}     # mutants from cargo-mutants, not the C operators
PYTHON_STACKS = {"aioquic"}                       # the C operators over Python tokens (mutation_python.py)
CARGO_MUTANTS_HINT = "install with: cargo install --locked cargo-mutants"
CONFORM_SCENARIOS = ("death-spiral", "idle-restart", "tail-loss", "persistent-congestion", "shallow-buffer")
BEFORE_TRACES = ("death-spiral.jsonl", "idle-restart.jsonl")   # the two original examples
REPLAY_TIMEOUT = 30       # s, all examples; the pristine build takes about 1 s
CONFORM_RUN_TIMEOUT = 10  # s per conform run (--timeout): a mutant that loops forever is an error
# A mutant's whole conform may take this many times the pristine one before it counts as hung
# (a loop that never ends in every run would otherwise cost CONFORM_RUN_TIMEOUT per run).
CONFORM_SLOWDOWN = 4
FUZZ_ENGINES = ("afl", "honggfuzz", "hypothesis")
FUZZ_OVERHEAD = 1800      # s a fuzz run may take beyond --fuzz-seconds: the instrumented build, triage

# ---------------------------------------------------------------- tokenizer

PUNCTUATORS = sorted("""<<= >>= ... -> ++ -- << >> <= >= == != && || += -= *= /= %= &= |= ^= ##
                        < > = ! ~ + - * / % & | ^ ? : ; , . ( ) [ ] { } #""".split(), key=len, reverse=True)
TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?[fFlL]?|\d+[eE][+-]?\d+[fFlL]?)
  | (?P<int>0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*)
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<punct>""" + "|".join(re.escape(p) for p in PUNCTUATORS) + r")", re.S | re.X)
# After these words a + - * is unary, and `TYPE *name` is a declarator.
KEYWORDS = {"return", "sizeof", "case", "if", "while", "for", "switch", "else", "do", "goto",
            "const", "static", "struct", "union", "enum", "unsigned", "signed", "volatile", "inline"}


@dataclass(frozen=True)
class Token:
    kind: str     # int, float, ident, punct
    text: str
    start: int    # offsets in the file's text
    end: int


def tokenize(text: str) -> list[Token]:
    """C tokens, without whitespace, comments, string/char literals and preprocessor lines."""
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos] == "#" and not text[text.rfind("\n", 0, pos) + 1:pos].strip():
            pos = _end_of_directive(text, pos)
            continue
        match = TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"cannot tokenize at offset {pos}: {text[pos:pos + 20]!r}")
        kind = match.lastgroup
        if kind not in ("space", "comment", "string"):
            tokens.append(Token(kind, match.group(), match.start(), match.end()))
        pos = match.end()
    return tokens


def _end_of_directive(text: str, pos: int) -> int:
    """A preprocessor line ends at a newline not escaped by a backslash."""
    while True:
        nl = text.find("\n", pos)
        if nl < 0:
            return len(text)
        if text[nl - 1] != "\\" and not (text[nl - 1] == "\r" and text[nl - 2] == "\\"):
            return nl + 1
        pos = nl + 1


def function_spans(tokens: list[Token]) -> list[tuple[int, int, str]]:
    """(first token index, last token index, name) of every function body: a `{` at file
    scope right after the `)` of NAME(...)."""
    spans, depth, i = [], 0, 0
    while i < len(tokens):
        text = tokens[i].text
        if text == "{" and depth == 0 and i > 0 and tokens[i - 1].text == ")":
            name = _name_before_parameters(tokens, i - 1)
            end = _matching(tokens, i, "{", "}")
            if name:
                spans.append((i, end, name))
            i = end + 1
            continue
        depth += {"{": 1, "}": -1}.get(text, 0)
        i += 1
    return spans


def _name_before_parameters(tokens: list[Token], close: int) -> str | None:
    depth = 0
    for j in range(close, -1, -1):
        depth += {")": 1, "(": -1}.get(tokens[j].text, 0)
        if depth == 0:
            return tokens[j - 1].text if j > 0 and tokens[j - 1].kind == "ident" else None
    return None


def _matching(tokens: list[Token], open_index: int, opening: str, closing: str) -> int:
    depth = 0
    for j in range(open_index, len(tokens)):
        depth += (tokens[j].text == opening) - (tokens[j].text == closing)
        if depth == 0:
            return j
    raise ValueError(f"unbalanced {opening} at offset {tokens[open_index].start}")


def _is_operand_end(token: Token) -> bool:
    """Can a binary operator follow this token? (an operand ends with it)"""
    return (token.kind in ("int", "float") or (token.kind == "ident" and token.text not in KEYWORDS)
            or token.text in (")", "]", "++", "--"))


def _is_binary(tokens: list[Token], i: int) -> bool:
    return i > 0 and _is_operand_end(tokens[i - 1])


def _is_multiplication(tokens: list[Token], i: int) -> bool:
    """`a * b`, not `TYPE *name` (a declarator), `*p` (a dereference) or `(TYPE *)`."""
    if not _is_binary(tokens, i) or i + 2 >= len(tokens):
        return False
    prev, nxt, after = tokens[i - 1], tokens[i + 1], tokens[i + 2]
    if nxt.kind not in ("ident", "int", "float") and nxt.text != "(":
        return False
    declarator = (prev.kind == "ident" and nxt.kind == "ident" and after.text in (",", ")", "=", ";", "[")
                  and (i < 2 or tokens[i - 2].text in ("(", ",", "{", "}", ";") or tokens[i - 2].text in KEYWORDS))
    return not declarator


def _is_array_size(tokens: list[Token], i: int) -> bool:
    """The N of `TYPE name[N]` in a declaration (not an index: `x = a[0]`)."""
    if i < 3 or i + 1 >= len(tokens) or tokens[i - 1].text != "[" or tokens[i + 1].text != "]":
        return False
    before_name = tokens[i - 3]
    return tokens[i - 2].kind == "ident" and (
        (before_name.kind == "ident" and before_name.text not in ("return", "case", "sizeof"))
        or before_name.text == "*")


def token_sites(tokens: list[Token]) -> list[tuple[str, int, int, str, list[str]]]:
    """(operator, start, end, old text, [new texts]) for each mutable site, in file order."""
    sites = []
    for i, tok in enumerate(tokens):
        if tok.text in ROR:
            sites.append(("ror", tok.start, tok.end, tok.text, list(ROR[tok.text])))
        elif tok.text in LCR:
            sites.append(("lcr", tok.start, tok.end, tok.text, list(LCR[tok.text])))
        elif tok.text in AOR and (tok.text.endswith("=") or (
                _is_multiplication(tokens, i) if tok.text == "*" else _is_binary(tokens, i))):
            sites.append(("aor", tok.start, tok.end, tok.text, list(AOR[tok.text])))
        elif tok.kind == "int" and not _is_array_size(tokens, i):
            news = int_replacements(tok.text)
            if news:
                sites.append(("icr", tok.start, tok.end, tok.text, news))
        elif tok.text == "if" and i + 1 < len(tokens) and tokens[i + 1].text == "(":
            close = _matching(tokens, i + 1, "(", ")")
            start, end = tokens[i + 1].end, tokens[close].start
            sites.append(("neg", start, end, None, [None]))   # texts filled in by mutants()
    return sites


def mutants(text: str, file: str, functions: list[str] | None = None,
            operators: tuple[str, ...] = OPERATORS) -> list[Mutant]:
    """Every mutant of one file's text, sorted by position then replacement; only inside
    the named functions when `functions` is given."""
    tokens = tokenize(text)
    spans = function_spans(tokens)
    starts = [tokens[a].start for a, _, _ in spans]
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    out = []
    for operator, start, end, old, news in token_sites(tokens):
        if operator not in operators:
            continue
        k = bisect.bisect_right(starts, start) - 1
        function = spans[k][2] if k >= 0 and start <= tokens[spans[k][1]].start else ""
        if functions is not None and function not in functions:
            continue
        line = bisect.bisect_right(line_starts, start)
        col = start - line_starts[line - 1] + 1
        if operator == "neg":
            old = text[start:end]
            news = [f"!({old})"]
        for new in news:
            out.append(Mutant(file, function, line, col, operator, start, end, old, new))
    return sorted(out, key=lambda m: (m.file, m.start, m.end, m.new))


def functions_in(text: str) -> list[str]:
    return [name for _, _, name in function_spans(tokenize(text))]


# ---------------------------------------------------------------- Rust: cargo-mutants


def cargo_mutants_listing(source: Path, files: tuple[str, ...]) -> list[dict]:
    """`cargo mutants --list --json` of the given files of the crate at `source` (no build)."""
    if shutil.which("cargo-mutants") is None:
        raise BadInput(f"cargo-mutants not found: {CARGO_MUTANTS_HINT}")
    args = ["cargo", "mutants", "--list", "--json", "--no-config", "-d", str(source)]
    for file in files:
        args += ["--file", file]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise Failed(f"cargo mutants --list exit {done.returncode}: {tail}")
    return json.loads(done.stdout)


def _offset(line_starts: list[int], position: dict) -> int:
    """cargo-mutants' 1-based line and column (in characters) as an offset in the text."""
    return line_starts[position["line"] - 1] + position["column"] - 1


def rust_mutants(listing: list[dict], texts: dict[str, str], functions: list[str] | None = None) -> list[Mutant]:
    """cargo-mutants' listed mutants of the files in `texts` as Mutants (the span of the
    text it replaces and the replacement), sorted by position then replacement; only in
    the named functions (cargo-mutants' names, State::w_cubic) when `functions` is given."""
    out = {}
    for entry in listing:
        file = entry["file"]
        if file not in texts:
            continue
        function = (entry.get("function") or {}).get("function_name", "")
        if functions is not None and function not in functions:
            continue
        text = texts[file]
        line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        start, end = _offset(line_starts, entry["span"]["start"]), _offset(line_starts, entry["span"]["end"])
        mutant = Mutant(file, function, entry["span"]["start"]["line"], entry["span"]["start"]["column"],
                        "cargo-mutants", start, end, text[start:end], entry["replacement"], entry["genre"])
        out.setdefault(mutant.id, mutant)
    return sorted(out.values(), key=lambda m: (m.file, m.start, m.end, m.new))


def choose(all_mutants: list[Mutant], sample: int | None, seed: int) -> list[Mutant]:
    """A deterministic subset (the same for the same list, sample and seed), in file order."""
    if sample is None or sample >= len(all_mutants):
        return list(all_mutants)
    picked = random.Random(seed).sample(range(len(all_mutants)), sample)
    return [all_mutants[i] for i in sorted(picked)]


# ---------------------------------------------------------------- running one build


def run_bounded(args: list[str], build_dir: Path | None, timeout: float,
                fuzz_build_dir: Path | None = None) -> subprocess.CompletedProcess:
    """Run a child in its own process group and kill the whole group on timeout: a mutant
    that loops forever must not survive in a conform worker after its parent is gone."""
    env = dict(os.environ)
    if build_dir is not None:
        env["CCDIFF_BUILD_DIR"] = str(build_dir)
    if fuzz_build_dir is not None:
        env["CCDIFF_FUZZ_BUILD_DIR"] = str(fuzz_build_dir)
    child = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise
    return subprocess.CompletedProcess(args, child.returncode, out, err)


def run_replay(spec: str, traces: list[str], build_dir: Path | None) -> dict:
    """planted_bugs's replay (per trace: violated invariants, sha256 of the snapshots), or
    {"error": why} when the build crashes or hangs on it."""
    try:
        done = run_bounded(["-c", REPLAY, spec, *traces], build_dir, REPLAY_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"error": f"replay hung (> {REPLAY_TIMEOUT} s)"}
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        return {"error": f"replay exit {done.returncode}: {tail}"}
    return {"traces": json.loads(done.stdout)}


def family(spec: str) -> str:
    """ngtcp2@1.25.0 and ngtcp2@local-1234 are the same stack, mutated or not."""
    return spec.split("@", 1)[0]


def run_conform(spec: str, seeds: int, out: Path, build_dir: Path | None, timeout: float) -> dict:
    """{"cases": {"family|scenario|seed": {"status", "violations", "metrics"}}} or {"error"}."""
    if out.exists():
        shutil.rmtree(out)
    args = ["conform", "--stack", spec, "--seeds", str(seeds), "--jobs", "1", "--out", str(out),
            "--no-report", "--traces", "none", "--timeout", str(CONFORM_RUN_TIMEOUT)]
    for scenario in CONFORM_SCENARIOS:
        args += ["--scenario", scenario]
    try:
        done = run_bounded(["-m", "ccdiff", *args], build_dir, timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"conform hung (> {timeout:.0f} s)"}
    if done.returncode not in (0, 1) or not (out / "summary.json").is_file():
        tail = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        return {"error": f"conform exit {done.returncode}: {tail}"}
    cases = {}
    for case in json.loads((out / "summary.json").read_text())["cases"]:
        key = f"{family(case['stack'])}|{case['scenario']}|{case['seed']}"
        metrics = json.dumps(case["metrics"], sort_keys=True)
        cases[key] = {"status": case["status"],
                      "violations": sorted({f["invariant"] for f in case["findings"] if f["status"] == "violation"}),
                      "metrics": hashlib.sha256(metrics.encode()).hexdigest()}
    return {"cases": cases}


def judge_conform(pristine: dict, mutant: dict) -> dict:
    """New violations split into kills (the invariant is on no pristine seed of that
    scenario) and reshuffles (it is on some: a changed trajectory moved it): ccdiff/baseline.py's
    rule, the one `conform --against` applies, on the seeds both runs have."""
    def by_seed(cases: dict) -> dict:
        out = {}
        for key, case in cases.items():
            fam, scenario, seed = key.split("|")
            out[((fam, scenario), int(seed))] = set(case["violations"])
        return out
    killed, reshuffled, errors, differs = {}, {}, [], []
    for key, case in sorted(mutant.items()):
        base = pristine.get(key)
        if base is None:
            continue
        if case["status"] == "error" and base["status"] != "error":
            errors.append(key)
        if case["metrics"] != base["metrics"] or case["status"] != base["status"]:
            differs.append(key)
    # Only the cases both runs have are judged, as before the rule moved to ccdiff/baseline.py.
    new, moved = split_by_baseline(by_seed({k: c for k, c in mutant.items() if k in pristine}), by_seed(pristine))
    for bucket, found in ((killed, new), (reshuffled, moved)):
        for (fam, scenario), seed, inv in found:
            bucket.setdefault(f"{fam}|{scenario}|{inv}", []).append(seed)
    return {"killed": killed, "reshuffled": reshuffled, "errors": errors, "differs": differs}


def run_fuzz(spec: str, pristine: str, engine: str, seconds: int, work: Path, build_dir: Path) -> dict:
    """`ccdiff fuzz --stack MUTANT --against PRISTINE` (docs/fuzzing.md, "Differential fuzzing
    between builds"): the inputs on which the two builds differ, from the stored findings
    under work/findings.  {"killed": [invariants only the mutant violates, on one input],
    "differs": signatures whose snapshots differ, "inputs": stored differences} or {"error"}.
    The mutant's instrumented harness is built under work/fuzz-build and removed after."""
    findings = work / "findings"
    if findings.exists():
        shutil.rmtree(findings)
    fuzz_build = work / "fuzz-build"
    try:
        done = run_bounded(["-m", "ccdiff", "fuzz", "--stack", spec, "--against", pristine, "--engine", engine,
                            "--time", f"{seconds}s", "--findings", str(findings)], build_dir,
                           seconds + FUZZ_OVERHEAD, fuzz_build)
    except subprocess.TimeoutExpired:
        return {"error": f"fuzz hung (> {seconds + FUZZ_OVERHEAD} s)"}
    finally:
        name, version = spec.split("@", 1)
        shutil.rmtree(fuzz_build / name / version, ignore_errors=True)   # one instrumented build per mutant
    if done.returncode not in (0, 1):
        tail = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        return {"error": f"fuzz exit {done.returncode}: {tail}"}
    stored = [json.loads(p.read_text()) for p in sorted(findings.glob("*/against-*/*/finding.json"))]
    signatures = sorted(info["invariant"] for info in stored)
    killed = sorted({inv for inv in map(invariant_only_in_candidate, signatures) if inv})
    return {"killed": killed, "differs": len(signatures), "inputs": signatures}


# ---------------------------------------------------------------- verdicts


def verdict(replay_result: dict, conform_result: dict | None, fuzz_result: dict | None = None) -> dict:
    """One column's verdict from a replay judgement (planted_bugs.judge or an error), a
    conform judgement and a differential fuzz run (None: not part of this column).  A fuzz
    run that fails is reported (fuzz_error), never a kill: it says nothing about the mutant."""
    crash = [e for e in (replay_result.get("error"), (conform_result or {}).get("error")) if e]
    if conform_result and conform_result.get("errors"):
        crash.append(f"conform errors on {', '.join(conform_result['errors'][:3])}")
    kills = [f"replay {t}: {', '.join(inv)}" for t, inv in replay_result.get("new_violations", {}).items()]
    if conform_result:
        kills += [f"conform {k} seeds {s}" for k, s in conform_result.get("killed", {}).items()]
    fuzz = fuzz_result or {}
    kills += [f"fuzz {inv} (an input only the mutant violates it on)" for inv in fuzz.get("killed", [])]
    visible = bool(replay_result.get("traces_that_differ")) or bool(
        conform_result and (conform_result.get("differs") or conform_result.get("reshuffled"))) or bool(
        fuzz.get("differs"))
    if crash:
        name = "killed"
    elif kills:
        name = "killed"
    elif visible:
        name = "survived-visible"
    else:
        name = "survived-identical"
    sources = sorted({k.split(" ", 1)[0] for k in kills} | ({"crash"} if crash else set()))
    return {"verdict": name, "killed_by": sources, "crash": crash, "kills": kills,
            "reshuffled": [f"{k} seeds {s}" for k, s in (conform_result or {}).get("reshuffled", {}).items()],
            "replay_differs": replay_result.get("traces_that_differ", []),
            "conform_differs": len((conform_result or {}).get("differs", [])),
            **({"fuzz_differs": fuzz.get("inputs", []), "fuzz_error": fuzz.get("error")} if fuzz_result else {})}


def judge_replay(pristine: dict, mutant: dict, names: tuple[str, ...] | None) -> dict:
    if "error" in mutant:
        return {"error": mutant["error"]}
    keep = lambda rows: {k: v for k, v in rows.items() if names is None or k in names}   # noqa: E731
    return judge(keep(pristine["traces"]), keep(mutant["traces"]))


def nearest_instrumented(line: int, covered: set, uncovered: set) -> bool | None:
    """Did the statement holding `line` run?  gcov counts a statement on its first line:
    the nearest instrumented line at or above it tells.  None: no instrumented line."""
    for n in range(line, 0, -1):
        if n in covered:
            return True
        if n in uncovered:
            return False
    return None


def split_identical(column: dict, mutant: Mutant, coverage: dict | None) -> None:
    if column["verdict"] != "survived-identical":
        return
    if coverage is None:
        column["identical"] = "not-split"
        return
    lines = coverage.get(mutant.file)
    if lines is None:     # the coverage run does not report this file: reachability unknown
        column["identical"] = "unknown"
        return
    reached = nearest_instrumented(mutant.line, lines["covered"], lines["uncovered"])
    column["identical"] = "unreached" if reached is False else "other"


# ---------------------------------------------------------------- coverage


def line_coverage(spec: str, traces: list[str], seeds: int, work: Path) -> dict:
    """{column: {file: {"covered": set, "uncovered": set}}} of the pristine build, gcov on a
    --coverage build (ccdiff/coverage.py) in the scratch folder."""
    from ccdiff import coverage
    os.environ["CCDIFF_COVERAGE_BUILD_DIR"] = str(work / "coverage")
    before = [t for t in traces if Path(t).name in BEFORE_TRACES]
    plans = {"before": {"examples": {"traces": before}},
             "after": {"examples": {"traces": traces},
                       "scenarios": {"scenarios": list(CONFORM_SCENARIOS), "seeds": list(range(seeds))}}}
    out = {}
    for column, sets in plans.items():
        doc = coverage.run(spec, sets, log=lambda m: None)
        out[column] = {rel: {"covered": set(f["covered_lines"]), "uncovered": set(f["uncovered_lines"])}
                       for rel, f in doc["files"].items()}
    return out


# ---------------------------------------------------------------- campaign


def source_tree(stack: str, work: Path) -> tuple[str, Path]:
    """The pinned spec and a source tree to mutate: planted_bugs's pristine_tree, except for
    Linux, whose package holds the kernel as one tarball: the files its build.sh reads are
    taken out of it into a kernel tree (net/ipv4/tcp_cubic.c at its top), which build.sh
    builds as it builds a checkout."""
    spec, source = pristine_tree(stack, work)
    if stack != "linux":
        return spec, source
    tree = work / "linux-tree"
    if not (tree / KERNEL_FILES[0]).exists():
        (tarball,) = sorted(source.glob("linux-source-*.tar.xz"))
        top = tarball.name[:-len(".tar.xz")]
        wanted = {f"{top}/{f}": f for f in KERNEL_FILES}
        with tarfile.open(tarball, "r:xz") as tar:
            for member in tar:
                if member.name in wanted and member.isfile():
                    target = tree / wanted.pop(member.name)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tar.extractfile(member).read())
                    if not wanted:
                        break
        if wanted:
            raise Failed(f"{tarball.name} lacks {', '.join(sorted(wanted.values()))}")
    return spec, tree


class Campaign:
    """The pristine tree and verdicts of one stack, and one scratch tree mutated in place."""

    def __init__(self, stack: str, work: Path, traces: list[str], seeds: int, log=print,
                 fuzz_seconds: int = 0, fuzz_engine: str = "afl"):
        self.stack, self.work, self.traces, self.seeds, self.log = stack, work, traces, seeds, log
        self.fuzz_seconds, self.fuzz_engine = fuzz_seconds, fuzz_engine
        self.spec, self.source = source_tree(stack, work)
        self.tree = work / f"{stack}-mutant"
        if self.tree.exists():
            shutil.rmtree(self.tree)
        shutil.copytree(self.source, self.tree)
        self.build_dir = work / "build"
        self.pristine_replay = run_replay(self.spec, traces, None)
        if "error" in self.pristine_replay:
            raise Failed(f"pristine {self.spec}: {self.pristine_replay['error']}")
        self.pristine_conform = None
        self.conform_timeout = 0.0
        if seeds:
            started = time.monotonic()
            result = run_conform(self.spec, seeds, work / "conform-pristine", None, timeout=3600)
            self.conform_timeout = max(60.0, CONFORM_SLOWDOWN * (time.monotonic() - started))
            if "error" in result:
                raise Failed(f"pristine {self.spec}: {result['error']}")
            self.pristine_conform = result["cases"]

    def text(self, file: str) -> str:
        return (self.source / file).read_bytes().decode()

    def build(self, mutant: Mutant | None) -> tuple[str | None, str]:
        """Plant (None: the control, no change) and build; (spec, "") or (None, build log)."""
        for file in STACK_FILES[self.stack]:
            text = self.text(file)
            if mutant is not None and mutant.file == file:
                text = mutant.apply(text)
            (self.tree / file).write_bytes(text.encode())
        done = ccdiff("build", self.stack, "--source", str(self.tree), build_dir=self.build_dir, timeout=600)
        if done.returncode != 0:
            return None, (done.stdout + done.stderr)[-2000:]
        library = Path(done.stdout.strip().splitlines()[-1])
        return f"{self.stack}@{library.parent.name}", ""

    def judge(self, mutant: Mutant | None, coverage: dict | None) -> dict:
        started = time.monotonic()
        spec, log = self.build(mutant)
        row = {"id": mutant.id if mutant else "control", **(asdict(mutant) if mutant else {})}
        if spec is None:
            return {**row, "build": "error", "build_log": log, "seconds": round(time.monotonic() - started, 1)}
        replay_rows = run_replay(spec, self.traces, self.build_dir)
        conform = None
        # A mutant that crashes or hangs on the examples is killed already: its conform
        # would only cost a timeout per run.
        if self.seeds and "error" not in replay_rows:
            result = run_conform(spec, self.seeds, self.work / "conform-mutant", self.build_dir, self.conform_timeout)
            conform = result if "error" in result else judge_conform(self.pristine_conform, result["cases"])
        fuzz = None
        if self.fuzz_seconds and "error" not in replay_rows:
            fuzz = run_fuzz(spec, self.spec, self.fuzz_engine, self.fuzz_seconds, self.work / "fuzz", self.build_dir)
        before = verdict(judge_replay(self.pristine_replay, replay_rows, BEFORE_TRACES), None)
        after = verdict(judge_replay(self.pristine_replay, replay_rows, None), conform, fuzz)
        if mutant is not None:
            split_identical(before, mutant, coverage and coverage["before"])
            split_identical(after, mutant, coverage and coverage["after"])
        return {**row, "build": "ok", "before": before, "after": after,
                "seconds": round(time.monotonic() - started, 1)}


def tally(rows: list[dict], column: str) -> dict:
    built = [r for r in rows if r["build"] == "ok"]
    verdicts = Counter(r[column]["verdict"] for r in built)
    unreached = sum(r[column].get("identical") == "unreached" for r in built)
    unknown = sum(r[column].get("identical") == "unknown" for r in built)
    crashed = sum(bool(r[column]["crash"]) for r in built)
    counted = len(built) - unreached
    killed = verdicts["killed"]
    # closed-loop and fuzz kills are reported apart: the examples alone did not see these
    conform_only = sum(r[column]["killed_by"] == ["conform"] for r in built)
    fuzz_only = sum(r[column]["killed_by"] == ["fuzz"] for r in built)
    reshuffled = sum(bool(r[column]["reshuffled"]) and r[column]["verdict"] != "killed" for r in built)
    return {"mutants": len(rows), "build_errors": len(rows) - len(built), "killed": killed, "crashed": crashed,
            "killed_by_conform_only": conform_only, "killed_by_fuzz_only": fuzz_only,
            "survived_reshuffled": reshuffled,
            "survived_visible": verdicts["survived-visible"],
            "survived_identical": verdicts["survived-identical"], "unreached": unreached,
            "identical_other": verdicts["survived-identical"] - unreached - unknown, "identical_unknown": unknown,
            "score": round(killed / counted, 3) if counted else None}


def survivors(rows: list[dict], column: str) -> dict:
    """Counted survivors (not unreached) by operator (cargo-mutants' genre for Rust) and by function."""
    alive = [r for r in rows if r["build"] == "ok" and r[column]["verdict"] != "killed"
             and r[column].get("identical") != "unreached"]
    return {"by_operator": dict(sorted(Counter(r.get("kind") or r["operator"] for r in alive).items())),
            "by_function": dict(sorted(Counter(r["function"] or "(file scope)" for r in alive).items()))}


def render(spec: str, rows: list[dict], seeds: int, coverage: bool, fuzz: str = "") -> str:
    """fuzz: "" or how the after column fuzzed ("hypothesis 60 s"), which it then names."""
    lines = [f"{spec}: {len(rows)} mutants",
             "| column | mutants | build errors | killed (crash/hang; conform only) | survived-visible "
             "(reshuffled) | survived-identical (unreached / other) | score |", "|---|---|---|---|---|---|---|"]
    labels = {"before": "before: 2 examples",
              "after": f"after: {len(glob_examples())} examples + conform x{seeds}" + (f" + fuzz {fuzz}" if fuzz else "")}
    for column in ("before", "after"):
        t = tally(rows, column)
        split = f"{t['unreached']} / {t['identical_other']}" if coverage else "not split"
        if coverage and t.get("identical_unknown"):
            split += f" / {t['identical_unknown']} unknown"
        score = f"{t['score']:.2f}" if t["score"] is not None else "-"
        lines.append(f"| {labels[column]} | {t['mutants']} | {t['build_errors']} | {t['killed']} ({t['crashed']}; "
                     f"{t['killed_by_conform_only']}) | {t['survived_visible']} ({t['survived_reshuffled']}) | "
                     f"{t['survived_identical']} ({split}) | {score} |")
    if fuzz:
        lines.append(f"killed by the differential fuzz only: {tally(rows, 'after')['killed_by_fuzz_only']}")
    for column in ("before", "after"):
        s = survivors(rows, column)
        lines.append(f"survivors {column}: by operator {s['by_operator']}; by function {s['by_function']}")
    return "\n".join(lines)


def glob_examples() -> list[str]:
    return sorted(glob.glob(str(ROOT / "examples" / "*.jsonl")))


# ---------------------------------------------------------------- command


class BadInput(Exception):
    pass


def plan(stack: str, functions: list[str] | None, sample: int | None, seed: int, work: Path) -> list[Mutant]:
    """The mutants to run, from the pinned source, with clear errors for bad names."""
    if stack not in STACK_FILES:
        raise BadInput(f"unknown stack {stack!r}: the stacks with mutants are {', '.join(STACK_FILES)}")
    if stack in RUST_STACKS and shutil.which("cargo-mutants") is None:
        raise BadInput(f"cargo-mutants not found: {CARGO_MUTANTS_HINT}")
    _, source = source_tree(stack, work)
    texts = {file: (source / file).read_bytes().decode() for file in STACK_FILES[stack]}
    listing = cargo_mutants_listing(source, STACK_FILES[stack]) if stack in RUST_STACKS else None
    from mutation_python import python_function_names, python_mutants
    names_in = python_function_names if stack in PYTHON_STACKS else functions_in
    if functions is not None:
        known = ({(e.get("function") or {}).get("function_name", "") for e in listing} - {""}
                 if listing is not None else {name for text in texts.values() for name in names_in(text)})
        missing = [f for f in functions if f not in known]
        if missing:
            raise BadInput(f"no function {', '.join(missing)} in {', '.join(STACK_FILES[stack])} "
                           f"(known: {', '.join(sorted(known))})")
    if listing is not None:
        everything = rust_mutants(listing, texts, functions)
    elif stack in PYTHON_STACKS:
        everything = [m for file, text in texts.items() for m in python_mutants(text, file, functions)]
    else:
        everything = [m for file, text in texts.items() for m in mutants(text, file, functions)]
    if sample is not None and sample < 1:
        raise BadInput("--sample must be at least 1")
    return choose(everything, sample, seed)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stack", help=f"one of {', '.join(STACK_FILES)} (its pinned version)")
    parser.add_argument("--functions", type=lambda s: [f for f in s.split(",") if f],
                        help="comma list: mutate only inside these functions (default: the whole file)")
    parser.add_argument("--sample", type=int, metavar="N", help="run a deterministic subset of N mutants")
    parser.add_argument("--seed", type=int, default=0, help="which subset --sample picks (default 0)")
    parser.add_argument("--seeds", type=int, default=10, metavar="N",
                        help="conform seeds per scenario (default 10; 0: no conform)")
    parser.add_argument("--only", nargs="+", metavar="ID", help="run only these mutant ids (see --list)")
    parser.add_argument("--list", action="store_true", help="print the mutants and exit (no build)")
    parser.add_argument("--no-coverage", dest="coverage", action="store_false",
                        help="do not split survived-identical with line coverage")
    parser.add_argument("--fuzz-seconds", type=int, default=0, metavar="N",
                        help="also fuzz each mutant against the pristine build for N seconds (`ccdiff fuzz "
                             "--against`); an input only the mutant violates an invariant on kills it (default 0: no fuzz)")
    parser.add_argument("--fuzz-engine", choices=FUZZ_ENGINES, default="afl",
                        help="the engine of --fuzz-seconds (default afl: an instrumented build per mutant)")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temporary one, removed)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the rows and tables as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ccdiff-mutation-") as scratch:
        work = (args.work or Path(scratch)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        try:
            if args.fuzz_seconds < 0:
                raise BadInput("--fuzz-seconds must be 0 or more")
            if args.seeds < 0:
                raise BadInput("--seeds must be 0 or more")
            chosen = plan(args.stack, args.functions, args.sample, args.seed, work)
            if args.only:
                ids = {m.id: m for m in chosen}
                unknown = [i for i in args.only if i not in ids]
                if unknown:
                    raise BadInput(f"no mutant {', '.join(unknown)} in this plan (see --list)")
                chosen = [ids[i] for i in args.only]
            if args.list:
                for m in chosen:
                    old = m.old if "\n" not in m.old else m.old.split("\n", 1)[0] + " ..."
                    print(f"{m.id:40} {m.function:40} {old!r} -> {m.new!r}")
                print(f"{len(chosen)} mutants")
                return 0
            return campaign(args, chosen, work)
        except BadInput as err:
            print(f"mutation: error: {err}", file=sys.stderr)
            return 2
        except Failed as err:
            print(f"mutation: error: {err}", file=sys.stderr)
            return 2


def campaign(args, chosen: list[Mutant], work: Path) -> int:
    started = time.monotonic()
    traces = glob_examples()
    run = Campaign(args.stack, work, traces, args.seeds, fuzz_seconds=args.fuzz_seconds, fuzz_engine=args.fuzz_engine)
    coverage = line_coverage(run.spec, traces, args.seeds, work) if args.coverage else None
    control = run.judge(None, None)
    if control["build"] != "ok" or control["before"]["verdict"] != "survived-identical" \
            or control["after"]["verdict"] != "survived-identical" or control["after"].get("fuzz_error"):
        raise Failed(f"the control (no change) is not identical to {run.spec}: "
                     f"{control.get('after', control.get('build_log'))}")
    rows = []
    for n, mutant in enumerate(chosen, 1):
        row = run.judge(mutant, coverage)
        rows.append(row)
        after = row["after"]["verdict"] if row["build"] == "ok" else "build-error"
        extra = row["after"].get("identical", "") if row["build"] == "ok" else ""
        print(f"[{n}/{len(chosen)}] {mutant.id:40} {after} {extra} ({row['seconds']} s)", flush=True)
    fuzzed = f"{args.fuzz_engine} {args.fuzz_seconds} s" if args.fuzz_seconds else ""
    table = render(run.spec, rows, args.seeds, coverage is not None, fuzzed)
    print(table)
    wall = round(time.monotonic() - started, 1)
    print(f"wall time {wall} s")
    if args.json:
        doc = {"stack": run.spec, "argv": sys.argv[1:], "seeds": args.seeds, "scenarios": list(CONFORM_SCENARIOS),
               "fuzz": {"engine": args.fuzz_engine, "seconds": args.fuzz_seconds} if args.fuzz_seconds else None,
               "traces": {"before": list(BEFORE_TRACES), "after": [Path(t).name for t in traces]},
               "wall_seconds": wall, "tables": {c: tally(rows, c) for c in ("before", "after")},
               "survivors": {c: survivors(rows, c) for c in ("before", "after")},
               "control": control, "rows": rows}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

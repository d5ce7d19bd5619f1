"""`ccdiff fuzz --stack SPEC --engine afl|honggfuzz|libfuzzer|hypothesis|atheris --time DURATION [--jobs N]`."""
from __future__ import annotations

import re
import signal
import socket
import sys
import time
from pathlib import Path

from ..errors import SetupError
from ..paths import project_root
from ..stacks import resolve
from .triage import DiffTriage, Triage, stack_folder_name
from .conclude import conclude, require_built
from .verdicts import reachability_of

# Every subfolder (AFL++ and libFuzzer read a seed folder recursively; honggfuzz gets a copy):
# no-loss/ (slow start, rounds, an idle restart) and shapes/ (congestion avoidance after an
# ECN-CE mark, pauses, app-limited sends), none of which shows a finding (docs/fuzzing.md).
DEFAULT_SEEDS = "fuzz/seeds"
DEFAULT_DICT = "fuzz/ccdiff.dict"
IN_PROCESS = ("numeric-error", "cwnd-below-minimum", "future-recovery-start", "adapter-error")  # fz_check.h


def parse_duration(text: str) -> float:
    """"90", "90s", "10m", "1h", "1m30s" -> seconds."""
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s?)?", text.strip())
    if not text.strip() or not match or not any(match.groups()):
        raise SetupError(f"--time {text!r}: expected a duration like 90s, 10m or 1h")
    h, m, s = match.groups()
    return int(h or 0) * 3600 + int(m or 0) * 60 + float(s or 0)


def worker_name(text: str) -> str:
    """--worker NAME ("auto": the host name, unique per container replica) -> an engine
    instance name.  `main` and `s<N>` are the instance names of a run without --worker."""
    name = socket.gethostname() if text == "auto" else text
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", name)[:20].strip("-")   # AFL++: sync ids <= 24 chars
    if not name or re.fullmatch(r"main|s\d+", name):
        raise SetupError(f"--worker {text!r}: expected a name of letters, digits, '-' or '_' "
                         "(not 'main' or 's<N>', which a run without --worker uses), or 'auto'")
    return name


def add_parser(sub) -> None:
    from ..cli_help import Once, add_command
    p = add_command(sub, "fuzz", summary="fuzz a stack's controller (AFL++, honggfuzz, libFuzzer, Hypothesis or "
                    "atheris), with triage",
                    description="Fuzz a stack's controller with AFL++, honggfuzz, libFuzzer (coverage-guided, "
                    "in-process harnesses, fuzz/driver/), Hypothesis (generated event streams, the oracle in the loop) "
                    "or atheris (libFuzzer for Python: coverage-guided, in process, for a stack whose "
                    "controller is Python, such as aioquic, which the C harnesses cannot drive). "
                    "Findings are replayed through the oracle, deduplicated and minimized into "
                    "FINDINGS/<stack>/<signature>/reproducer.jsonl; with --against BASELINE, the inputs on which "
                    "the two builds differ, into FINDINGS/<stack>/against-<baseline>/. A checkout built with "
                    "`ccdiff build STACK --source DIR` fuzzes under its name. The instrumented build happens first; "
                    "--time counts fuzzing time only. A second run resumes from the stored corpus; Ctrl-C "
                    "keeps everything found so far. Each stored finding is judged as replay judges it: new, "
                    "not checked upstream, known, fixed upstream, consequence, or lenient (a trace a real "
                    "connection cannot produce), in its finding.json and the summary. Exit 1 when a strict "
                    "finding that is a bug report (new or not checked) is stored, 0 otherwise (known bugs, "
                    "their consequences and lenient traces are reported, not failed on); with --against, 1 "
                    "when a difference is stored; 2 setup errors or a run that executed no input.",
                    examples=["ccdiff fuzz --stack quiche@0.26.0 --engine afl --time 10m",
                              "ccdiff fuzz --stack ngtcp2 --engine honggfuzz --time 1h --jobs 4",
                              "ccdiff fuzz --stack ngtcp2 --engine libfuzzer --time 10m",
                              "ccdiff fuzz --stack quiche@0.26.0 --engine hypothesis --time 90s",
                              "ccdiff fuzz --stack aioquic --engine atheris --time 10m",
                              "ccdiff fuzz --stack ngtcp2@git-1a2b3c4d5e --against ngtcp2@1.25.0 --engine afl "
                              "--time 60s",
                              "ccdiff fuzz triage cflite-crashes/ --stack quiche@0.26.0   (a folder of crash "
                              "files from ClusterFuzzLite / OSS-Fuzz; --help there)"])
    p.add_argument("--stack", required=True, metavar="SPEC", action=Once,
                   help="the one stack to fuzz, e.g. quiche@0.26.0, ngtcp2, picoquic")
    p.add_argument("--against", default="", metavar="SPEC",
                   help="differential fuzzing between builds: report the inputs on which --stack (the "
                   "candidate, which the engine fuzzes) and this baseline build differ -- in any snapshot "
                   "field at some event, or in an invariant one violates and the other does not -- into "
                   "FINDINGS/<candidate>/against-<baseline>/ (docs/fuzzing.md)")
    p.add_argument("--engine", required=True, choices=["afl", "honggfuzz", "libfuzzer", "hypothesis", "atheris"],
                   help="afl, honggfuzz and libfuzzer mutate bytes (fuzz/install-deps.sh installs them; C and "
                   "Rust stacks; AFL++ jobs are pinned each to a free CPU where there is one; libfuzzer runs "
                   "clang's libFuzzer in fork mode, so it goes on after a crash); hypothesis generates event "
                   "streams in Python (every stack); atheris mutates bytes with Python coverage (Python "
                   "stacks, e.g. aioquic; pip install atheris)")
    p.add_argument("--time", required=True, metavar="DURATION",
                   help="fuzzing time, not counting the build, e.g. 90s, 10m, 1h30m")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="parallel fuzzers: AFL++ -M/-S instances, honggfuzz threads, libFuzzer -fork jobs "
                   "(default 1; "
                   "hypothesis runs one)")
    p.add_argument("--worker", default="", metavar="NAME",
                   help="run as one of several workers (processes or containers) sharing one findings "
                   "folder: corpora are shared, each finding is stored once. NAME is unique per worker; "
                   "'auto' takes the host name (a container's is unique per replica)")
    p.add_argument("--findings", default="findings", metavar="DIR", help="findings folder (default findings/)")
    p.add_argument("--seeds", default=None, metavar="DIR", help=f"seed corpus (default {DEFAULT_SEEDS})")
    p.add_argument("--sanitize", action="store_true", help="ASan+UBSan builds (C stacks)")
    p.add_argument("--invariants", default="", metavar="LIST",
                   help="in-process invariants that abort (default: numeric-error, cwnd-below-minimum, "
                   "future-recovery-start, adapter-error)")
    p.add_argument("--no-queue", action="store_true",
                   help="afl/honggfuzz/libfuzzer: triage only the inputs the harness aborted on, not every "
                   "corpus entry that added coverage")
    p.add_argument("--no-report", action="store_true",
                   help="skip the HTML report of the stored findings (FINDINGS/<stack>/report/)")
    from ..cli_help import add_qlog_option
    add_qlog_option(p)
    p.set_defaults(func=cmd_fuzz)


# A --time run that executed fewer inputs than this checked nothing: "0 new findings" and
# exit 0 would be a silent false negative in a nightly (an engine that never started, a
# budget spent building).  One input is the least that shows the engine and the harness
# ran; it says nothing about whether the run was long enough.
MIN_EXECUTIONS = 1


class Status:
    """One live line on a terminal; a line every 10 s otherwise.  Words per engine:
    AFL++, honggfuzz and libFuzzer execute inputs, measure coverage and keep the inputs on which the
    harness aborted (an in-process invariant or a crash); Hypothesis generates examples in
    rounds and stops a round on an example that violates an invariant."""

    def __init__(self, engine: str):
        self.engine, self.tty, self.last = engine, sys.stderr.isatty(), 0.0

    def line(self, elapsed: float, stats: dict, findings: int) -> str:
        speed = stats.get("execs_per_sec", 0)
        if self.engine == "hypothesis":
            return (f"[hypothesis] {elapsed:6.0f} s  {stats.get('execs', 0)} examples ({speed:.0f}/s)  "
                    f"{stats.get('rounds', 0)} rounds  violations {stats.get('violations', 0)}  "
                    f"findings {findings}")
        if self.engine == "atheris":
            return (f"[atheris] {elapsed:6.0f} s  {stats.get('execs', 0)} executions ({speed:.0f}/s)  "
                    f"new violations {stats.get('violations', 0)}  findings {findings}")
        return (f"[{self.engine}] {elapsed:6.0f} s  {stats.get('execs', 0)} executions ({speed:.0f}/s)  "
                f"coverage {stats.get('coverage', '-')}  corpus {stats.get('corpus', 0)}  "
                f"aborted {stats.get('crashes', 0)}  findings {findings}")

    def show(self, elapsed: float, stats: dict, findings: int, final: bool = False) -> None:
        line = self.line(elapsed, stats, findings)
        if self.tty:
            print("\r" + line.ljust(110), end="\n" if final else "", file=sys.stderr, flush=True)
        elif final or time.monotonic() - self.last >= 10:
            print(line, file=sys.stderr, flush=True)
            self.last = time.monotonic()


def check_executions(engine: str, executed: int, seconds: float) -> None:
    """Exit 2 (SetupError) when a run that was not interrupted executed too few inputs."""
    if executed < MIN_EXECUTIONS:
        where = "" if engine == "hypothesis" else "; the engine's log is under FINDINGS/<stack>/.work/"
        raise SetupError(f"fuzz: {engine} executed {executed} inputs in {seconds:g} s of fuzzing (at least "
                         f"{MIN_EXECUTIONS} expected): nothing was checked, so 'no finding' would mean "
                         f"nothing{where}; give it a longer --time")


def _triage_files(triage: Triage, files: list, engine: str, done: set, campaign=None,
                  until: float | None = None) -> None:
    """Replay each new file.  A crash or hang (campaign given) first runs through the harness
    itself: if the stack's own code crashes or hangs on it, it is stored as such and never
    replayed in this process.  until: a time.monotonic() after which the rest waits for the
    next call (triage while the engine runs must not hold the campaign past --time)."""
    for path in files:
        if path in done:
            continue
        if until is not None and time.monotonic() >= until:
            return
        done.add(path)
        data = path.read_bytes()
        if campaign is None:
            triage.add_input(data, engine, str(path))
        else:
            triage.add_crash(data, engine, campaign.runner, campaign.direct_env, str(path))


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def cmd_fuzz(args) -> int:
    # Ctrl-C and a polite kill both stop the engine and keep what it found (a shell
    # starts background jobs with SIGINT ignored, so SIGTERM matters for scripts).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    seconds = parse_duration(args.time)
    if args.jobs < 1:
        raise SetupError("--jobs must be at least 1")
    worker = worker_name(args.worker) if args.worker else ""
    unknown = [name for name in args.invariants.split(",") if name and name not in IN_PROCESS]
    if unknown:
        raise SetupError(f"--invariants: {', '.join(unknown)} cannot be checked in-process; "
                         f"choose from {', '.join(IN_PROCESS)}")
    target = resolve(args.stack)
    if target.kind != "native":
        raise SetupError(f"{args.stack}: fuzzing drives a stack's adapter; the oracle is the judge, not a target")
    seeds = Path(args.seeds) if args.seeds else project_root() / DEFAULT_SEEDS
    if not seeds.is_dir() or not any(seeds.iterdir()):
        raise SetupError(f"--seeds {seeds}: not a folder with seed inputs")
    baseline = None
    if args.against:
        baseline = resolve(args.against)
        if baseline.kind != "native":
            raise SetupError(f"--against {args.against}: a stack build to compare with, not the oracle "
                             "(without --against, every input is judged against the oracle)")
        if baseline.label == target.label:
            raise SetupError(f"--against {args.against}: the same build as --stack")
        require_built(baseline)
        triage = DiffTriage(Path(args.findings), args.stack, target.label, args.against, baseline.label)
    else:
        triage = Triage(Path(args.findings), args.stack, target.label)
    if target.recipe.language == "python" and args.engine in ("afl", "honggfuzz", "libfuzzer"):
        raise SetupError(f"{args.stack}: a Python stack runs in process, with no C harness for {args.engine}; "
                         "use --engine atheris (coverage-guided) or --engine hypothesis")
    if args.engine == "atheris":
        from .atheris_engine import require
        require()
        if target.recipe.language != "python":
            raise SetupError(f"{args.stack}: --engine atheris instruments Python code; a "
                             f"{target.recipe.language or 'native'} stack is fuzzed with afl, honggfuzz or libfuzzer")
    campaign = _build(args, target, triage.folder / ".work", seeds, worker)
    status = Status(args.engine)
    known = set(triage.stored)
    print(f"fuzzing {target.label} with {args.engine} for {seconds:.0f} s; findings in {triage.folder}",
          file=sys.stderr)
    started = time.monotonic()       # --time is fuzzing time: the build is done
    if args.engine == "atheris":
        stats, interrupted = _run_atheris(args, target, triage, seconds, status, started, seeds)
    elif campaign is None:
        stats, interrupted = _run_hypothesis(args, triage, seconds, status, started)
    else:
        stats, interrupted = _run_engine(args, campaign, triage, seconds, status, started)
    if "fuzz_seconds" not in stats:      # an engine's own line: fuzzing seconds, triage apart
        status.show(time.monotonic() - started, stats, len(triage.stored), final=True)
    if not interrupted:
        check_executions(args.engine, stats.get("execs", 0), seconds)
    # New to the folder, or stored lenient before and strict now (Triage.upgraded).
    new = [stored for key, stored in triage.stored.items() if key not in known or key in triage.upgraded]
    if baseline is not None:
        compared = stats.get("execs", 0) if args.engine in ("hypothesis", "atheris") else len(triage.seen_inputs)
        return _summary_against(triage, new, compared)
    return conclude(triage, new, args)


def _summary_against(triage, new: list, compared: int) -> int:
    """The differences of this run, each with the command that replays both builds on it."""
    print(f"\n{compared} inputs replayed through both builds", file=sys.stderr)
    print(f"\n{len(new)} new difference(s) between {triage.stack_label} and {triage.against_label} "
          f"({len(triage.stored)} stored in {triage.folder})")
    # Strict inputs first, apart: a difference a real connection can show is the regression
    # signal; one on a lenient input (events loss detection would not produce) may be neither's.
    reach = {stored.signature.key: reachability_of(stored.folder) for stored in new}
    for kind in ("strict", "lenient"):
        group = [stored for stored in new if reach[stored.signature.key] == kind]
        if group:
            print(f" on {kind} inputs: {len(group)}")
        for stored in group:
            sig = stored.signature
            first = triage.details.get(sig.key, {})
            where = (f"event {first['event_index']}: {first['field']} {first['candidate']!r} vs "
                     f"{first['baseline']!r}" if "field" in first else
                     f"event {first.get('event_index', '?')}: {first.get('invariant', '')} in "
                     f"{first.get('only_in', '')} only")
            print(f"  {sig.key}, {stored.events} events ({where}):\n    {triage.replay_command(stored)}")
    if triage.native:
        print(f"{len(triage.native)} input(s) crashed or hung the candidate's harness natively and were not "
              f"compared (first: {triage.native[0][0]}, {triage.native[0][1]}); fuzz it without --against "
              "to store them")
    return 1 if triage.stored else 0


def _build(args, target, work: Path, seeds: Path, worker: str):
    """Everything the run needs built, before the clock starts: the ordinary build (triage
    replays through it) and, for AFL++, honggfuzz and libFuzzer, the instrumented harness (the
    Campaign builds it).  Returns the campaign, or None for Hypothesis and atheris (in process)."""
    print(f"building {target.label} for {args.engine} (not counted in --time) ...", file=sys.stderr, flush=True)
    began = time.monotonic()
    require_built(target)
    campaign = None
    if args.engine not in ("hypothesis", "atheris"):
        from .engines import ENGINES
        dictionary = project_root() / DEFAULT_DICT
        campaign = ENGINES[args.engine](target, work, seeds, dictionary if dictionary.exists() else None,
                                        args.jobs, args.sanitize, args.invariants, worker)
    print(f"built {target.label} for {args.engine} in {time.monotonic() - began:.0f} s", file=sys.stderr)
    return campaign


def _run_hypothesis(args, triage, seconds: float, status, started: float):
    from . import hypo

    def progress(stats, found):
        status.show(time.monotonic() - started, stats, len(triage.stored))
    try:
        result = hypo.run(args.stack, triage, seconds, triage.folder / ".work" / "hypothesis-db", progress)
    except KeyboardInterrupt:
        return {}, True
    return {key: result[key] for key in ("execs_per_sec", "execs", "rounds", "violations")}, False


def _run_atheris(args, target, triage, seconds: float, status, started: float, seeds: Path):
    from . import atheris_engine

    def progress(stats, found):
        status.show(time.monotonic() - started, stats, len(triage.stored))
    try:
        result = atheris_engine.run(args.stack, target.label, triage, seconds, triage.folder / ".work", seeds,
                                    progress)
    except KeyboardInterrupt:
        return {}, True
    return {key: result[key] for key in ("execs_per_sec", "execs", "violations")}, False


def _run_engine(args, campaign, triage, seconds: float, status, started: float):
    """Run the engine for `seconds`, triaging its aborting inputs as they come.  "execs" in
    the stats returned counts this run's executions only (AFL++ keeps counting across
    resumed runs)."""
    done: set = set()
    stats, interrupted = {}, False
    before = campaign.executions()
    end = started + seconds
    deadline = None
    try:
        campaign.start()
        # The engine stops at --time on a clock of its own: one input's triage below may run
        # long (a slow stack, a loaded machine) and must not hold the engine past it.
        deadline = campaign.halt_at(end)
        next_triage = 0.0
        while time.monotonic() < end and campaign.running():
            time.sleep(1)
            stats = campaign.stats()
            stats["execs"] = _since(before, stats.get("execs", 0))
            if time.monotonic() >= next_triage:
                # At most 2 s of triage per turn, never past --time: the line stays live and
                # the engine stops on time; what is left waits for the next turn or the end.
                _triage_files(triage, campaign.crash_files(), args.engine, done, campaign,
                              until=min(time.monotonic() + 2, end))
                next_triage = time.monotonic() + 5
            status.show(time.monotonic() - started, stats, len(triage.stored))
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: stopping the engine, keeping what was found", file=sys.stderr)
    finally:
        if deadline is not None:
            deadline.cancel()
        campaign.stop()
    stopped = time.monotonic()
    halted = campaign.halted_at if campaign.halted_at is not None else stopped
    failure = None if interrupted or halted >= end else campaign.failure()
    if failure:
        raise SetupError(failure)
    stats = campaign.stats() or stats
    stats["execs"] = _since(before, campaign.executions())
    stats["fuzz_seconds"] = halted - started      # until the engine was told to stop
    status.show(stats["fuzz_seconds"], stats, len(triage.stored), final=True)
    triaged = len(done)
    try:
        _triage_files(triage, campaign.crash_files(), args.engine, done, campaign)
        if not args.no_queue:
            _triage_files(triage, campaign.queue_files(), args.engine, done)
    except KeyboardInterrupt:
        print("\ninterrupted again: triage cut short", file=sys.stderr)
    print(f"triage after the engine stopped: {len(done) - triaged} input(s) in {time.monotonic() - stopped:.0f} s "
          f"({triaged} during the campaign); findings {len(triage.stored)}", file=sys.stderr, flush=True)
    return stats, interrupted


def _since(before: int, now: int) -> int:
    """Executions of this run from an engine counter read before it and now: a counter
    that went down was restarted by the engine, and counts this run alone."""
    return now - before if now >= before else now


__all__ = ["add_parser", "cmd_fuzz", "parse_duration", "stack_folder_name"]

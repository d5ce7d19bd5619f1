"""`ccdiff fuzz --engine atheris`: coverage-guided fuzzing of a stack in process, for a
stack whose controller is Python (aioquic) and so has no C harness for AFL++ or honggfuzz.

atheris (Google's libFuzzer for Python, PyPI `atheris`) mutates bytes; every byte string
is a valid event stream (docs/fuzz-encoding.md), replayed with the stack's reference
oracle like a Hypothesis example, so every invariant is checked.  Coverage: the worker
opens the stack once (which imports its modules) and then `atheris.instrument_func`
is applied to every function of the stack's modules (its adapter and the upstream
modules it imported), not to ccdiff's oracle and checker.

A worker process (`python -m ccdiff.fuzzing.atheris_engine`) runs libFuzzer; an input that
violates an invariant not stored yet raises, libFuzzer writes it to the crash folder and
exits.  The parent triages it (minimize, store, as for every engine) and restarts the
worker for the time left, which then skips what is stored.  A crash of the stack itself
is an adapter-error finding (ccdiff/pyadapter.py); the worker dies with ccdiff.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from ..errors import SetupError

ATHERIS_PIN = "atheris==3.0.0"
_EXECS = re.compile(r"^#(\d+)\s")


def available() -> bool:
    return importlib.util.find_spec("atheris") is not None


def require() -> None:
    if not available():
        raise SetupError(f"--engine atheris needs the atheris package, which is not installed here: "
                         f"pip install '{ATHERIS_PIN}' (or pip install '.[atheris]'); "
                         "--engine hypothesis needs nothing more")


def run(spec: str, label: str, triage, seconds: float, work: Path, seeds: Path, on_progress=None) -> dict:
    """Workers until `seconds` have passed; returns the stats the CLI shows."""
    require()
    corpus, crashes = work / "atheris" / "corpus", work / "atheris" / "crashes"
    corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    started, execs, violations, new = time.monotonic(), 0, 0, []
    from ..isolation import die_with_parent
    while (left := seconds - (time.monotonic() - started)) >= 1:
        for stale in crashes.iterdir():       # an earlier run's, already triaged
            stale.unlink()
        cmd = [sys.executable, "-m", "ccdiff.fuzzing.atheris_engine", spec, label, str(triage.folder),
               f"-max_total_time={int(left)}", f"-artifact_prefix={crashes}/", "-print_final_stats=1",
               str(corpus), str(seeds)]
        worker = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  preexec_fn=die_with_parent(), env=dict(os.environ, PYTHONHASHSEED="0"))
        run_execs, tail = 0, []
        try:
            for line in worker.stderr:
                tail = (tail + [line.rstrip()])[-30:]
                match = _EXECS.match(line)
                if match:
                    run_execs = int(match.group(1))
                    if on_progress:
                        elapsed = time.monotonic() - started
                        on_progress({"execs": execs + run_execs, "violations": violations,
                                     "execs_per_sec": (execs + run_execs) / max(elapsed, 1e-9)}, new)
            worker.wait()
        except BaseException:
            worker.kill()
            worker.wait()
            raise
        execs += run_execs
        found = sorted(crashes.iterdir())
        if worker.returncode != 0 and not found:
            raise SetupError(f"the atheris worker exited ({worker.returncode}) without a finding:\n"
                             + "\n".join(tail[-12:]))
        for path in found:
            violations += 1
            new += triage.add_input(path.read_bytes(), "atheris", str(path))
            path.unlink()
        if worker.returncode == 0:
            break                              # its -max_total_time ran out
    elapsed = time.monotonic() - started
    return {"execs": execs, "execs_per_sec": execs / max(elapsed, 1e-9), "violations": violations, "new": new}


class NewFinding(Exception):
    """An input violating an invariant this store does not hold yet: libFuzzer keeps it."""


def _instrument_stack(atheris) -> int:
    """Coverage of the stack's own code only: the adapter module and what it imported from
    the build folder (ccdiff/pyadapter.py names them _ccdiff_pyadapter_* and the aioquic
    adapter _ccdiff_aioquic_*).  instrument_all() would also instrument ccdiff's oracle and
    checker, which run on every input whatever the stack does, at a tenth of the speed."""
    import inspect
    count = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith(("_ccdiff_pyadapter_", "_ccdiff_aioquic_")) or module is None:
            continue
        for value in list(vars(module).values()):
            functions = [value] if inspect.isfunction(value) else \
                [v for v in vars(value).values() if inspect.isfunction(v)] if inspect.isclass(value) else []
            for func in functions:
                if getattr(func, "__module__", None) == name:
                    atheris.instrument_func(func)
                    count += 1
    return count


def _worker(argv: list) -> None:
    import atheris

    from ..encoding import decode
    from .triage import Triage
    spec, label, folder, fuzzer_args = argv[1], argv[2], Path(argv[3]), argv[4:]
    triage = Triage(folder.parent, spec, label, folder=folder)
    triage.judge(decode(bytes(16)))           # opens the stack once: its modules are loaded
    instrumented = _instrument_stack(atheris)
    print(f"ccdiff atheris worker: {instrumented} functions of the stack instrumented", file=sys.stderr)

    def test_one_input(data: bytes) -> None:
        unknown = triage.wanted(decode(data))    # not stored, or stored lenient and this input strict
        if unknown:
            raise NewFinding(", ".join(sorted(unknown)))

    atheris.Setup([argv[0]] + fuzzer_args, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    _worker(sys.argv)

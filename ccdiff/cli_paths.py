"""What each command reads and writes, checked once, before any work (ccdiff/outdir.py's
rules): an output that is also an input, a report folder that holds an input, a --json that
names a folder or a missing folder, are refused in the first second -- not after minutes of
builds, and never by overwriting the input."""
from __future__ import annotations

from .outdir import check_output_file, check_output_folder

# command: (input arguments, output file arguments, output folder arguments).  An argument
# missing from a command's namespace, or None, is skipped; a list holds several paths.
PATHS = {
    "replay": (("traces",), ("json",), ("report",)),
    "matrix": (("traces",), ("json",), ("report",)),
    "report": (("input",), (), ("out",)),
    "import": (("qlog",), ("output", "json", "scenario"), ()),
    "fidelity": (("qlog",), ("json",), ("out",)),
    "coverage": (("corpus",), ("json",), ("out",)),
    "minimize": (("trace",), ("output",), ()),
    "encode": (("trace",), ("output",), ()),
    "conform": (("baseline",), (), ("out",)),
    "merge": (("shards", "baseline"), (), ("out",)),
    "sim": ((), ("trace", "qlog"), ()),
    "bisect": (("trace",), ("json",), ()),
    "check-harness": (("traces",), ("json",), ()),
}


def _values(args, names) -> list:
    out = []
    for name in names:
        value = getattr(args, name, None)
        if isinstance(value, (list, tuple)):
            out += [v for v in value if isinstance(v, str)]
        elif isinstance(value, str):
            out.append(value)
    return out


def _option(name: str) -> str:
    return {"output": "-o/--output"}.get(name, "--" + name.replace("_", "-"))


def check_paths(args) -> None:
    """SetupError for the first output that could not be written, or would eat an input.
    Two outputs of one command that are the same file are refused too (--json X --report X)."""
    inputs_of, files, folders = PATHS.get(getattr(args, "command", None), ((), (), ()))
    inputs = _values(args, inputs_of)
    outputs = []
    for name in files:
        for path in _values(args, (name,)):
            check_output_file(path, _option(name), inputs + outputs)
            outputs.append(path)
    for name in folders:
        for path in _values(args, (name,)):
            check_output_folder(path, _option(name), inputs + outputs)
            outputs.append(path)

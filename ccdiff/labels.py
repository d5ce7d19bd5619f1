"""A stack's report name in a closed-loop run (conform, shard, merge): NAME=SPEC, the checks on
NAME, the target a NAME=SPEC item resolves to, and the folder a name gets under OUT
(OUT/report/<label>, OUT/traces/<scenario>/<label>).  Below conform.py, shard.py, merge.py and
report/overview.py, which all name stacks and folders the same way."""
from __future__ import annotations

import re

from .errors import SetupError
from .recipes import resolve


def split_label(item: str) -> tuple:
    """'NAME=SPEC' runs SPEC under the report name NAME (e.g. to compare a local build or a
    mutant with a baseline recorded under another name); a plain SPEC is its own name.
    A SPEC's own options come after ':' (quiche:idle_fix=off), so an '=' before any ':'
    is the label separator."""
    eq, colon = item.find("="), item.find(":")
    if eq > 0 and (colon < 0 or eq < colon):
        return item[:eq], item[eq + 1:]
    return None, item


def check_label(label: str) -> str:
    """A report name becomes a folder name (OUT/report/<label>, OUT/traces/<scenario>/<label>):
    refuse what could name a folder outside its place ('..', '.'), be empty, or hide
    control characters.  Returns the label."""
    if not label or not label.strip():
        raise SetupError("a stack's report name is empty (expected NAME=SPEC with a non-empty NAME)")
    if set(label) <= {"."}:
        raise SetupError(f"a stack's report name may not be {label!r}: it would name a folder "
                         "outside the report's own")
    if any(ord(c) < 32 or ord(c) == 127 for c in label):
        raise SetupError(f"a stack's report name has a control character: {label!r}")
    if "/" in label or "\\" in label:
        raise SetupError(f"a stack's report name may not contain a path separator: {label!r}")
    return label


def labelled_target(item: str, recipes: dict):
    label, spec = split_label(item)
    target = resolve(spec, recipes)
    if label is not None:
        target.label = check_label(label)
    return target


def folder_name(label: str) -> str:
    """The folder name of a label: never '', '.' or '..' (check_label refuses those first)."""
    name = re.sub(r"[^A-Za-z0-9@._-]+", "_", label)
    if set(name) <= {"."}:
        raise SetupError(f"{label!r} cannot name a folder")
    return name

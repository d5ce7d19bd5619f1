"""A stack folder's entry-point contract (docs/entry-points.md, "The contract").

implementations/<stack>/entry_points.py defines `members(src) -> set[str]`: the members of
the stack's controller interface (callbacks, trait methods, ops fields) parsed from its
pinned source tree `src` (build/<stack>/<version>/src/<subdir>), and, where that folder is
not the source tree (linux: the .deb's kernel tarball), `source_tree(src) -> Path`, the tree
the table's references are read from.  implementations/<stack>/entry-points.md is the table:
one row per member, marked `<!-- entry-points: STACK VERSION... -->`.  tests/test_entry_points.py
checks every stack folder against both; nothing lists the stacks.
"""
from __future__ import annotations

from pathlib import Path

from .recipes import folder_module


def block(text: str, start: str, end: str) -> str:
    """The text between the first `start` and the next line that is exactly `end`."""
    i = text.index(start)
    j = text.index("\n" + end, i)
    return text[i:j]


def parser(folder: Path):
    """The folder's entry_points.py as a module (members, maybe source_tree), or None."""
    return folder_module(folder, "entry_points")

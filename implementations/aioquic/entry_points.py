"""aioquic's controller interface, parsed from its pinned source: tests/test_entry_points.py
checks entry-points.md beside this file against it (ccdiff/entry_points.py, docs/entry-points.md)."""
from __future__ import annotations

import ast
from pathlib import Path


def members(src: Path) -> set[str]:
    """The methods and the annotated attributes of aioquic's controller base class."""
    tree = ast.parse((src / "src" / "aioquic" / "quic" / "congestion" / "base.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "QuicCongestionControl")
    methods = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return methods | fields

"""quinn's controller interface, parsed from its pinned source: tests/test_entry_points.py
checks entry-points.md beside this file against it (ccdiff/entry_points.py, docs/entry-points.md)."""
from __future__ import annotations

import re
from pathlib import Path

from ccdiff.entry_points import block


def members(src: Path) -> set[str]:
    rs = (src / "src" / "congestion.rs").read_text()
    body = block(rs, "pub trait Controller", "}")
    return set(re.findall(r"^\s*fn (\w+)", body, re.M))

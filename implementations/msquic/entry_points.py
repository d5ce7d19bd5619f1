"""msquic's controller interface, parsed from its pinned source: tests/test_entry_points.py
checks entry-points.md beside this file against it (ccdiff/entry_points.py, docs/entry-points.md)."""
from __future__ import annotations

import re
from pathlib import Path

from ccdiff.entry_points import block


def members(src: Path) -> set[str]:
    """The callbacks of msquic's QUIC_CONGESTION_CONTROL table (`(*name)(`; Name and the
    algorithm state are not entry points)."""
    h = (src / "src" / "core" / "congestion_control.h").read_text()
    body = block(h, "typedef struct QUIC_CONGESTION_CONTROL {", "} QUIC_CONGESTION_CONTROL;")
    return set(re.findall(r"\(\*(\w+)\)\s*\(", body))

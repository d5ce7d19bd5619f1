"""s2n-quic's controller interface, parsed from its pinned source: tests/test_entry_points.py
checks entry-points.md beside this file against it (ccdiff/entry_points.py, docs/entry-points.md)."""
from __future__ import annotations

import re
from pathlib import Path

from ccdiff.entry_points import block


def members(src: Path) -> set[str]:
    """The methods of s2n-quic-core's `trait CongestionController` (the associated type
    PacketInfo is not an entry point)."""
    rs = (src / "src" / "recovery" / "congestion_controller.rs").read_text()
    body = block(rs, "pub trait CongestionController:", "}")
    return set(re.findall(r"^\s*fn (\w+)", body, re.M))

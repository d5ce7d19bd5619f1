"""ngtcp2's controller interface, parsed from its pinned source: tests/test_entry_points.py
checks entry-points.md beside this file against it (ccdiff/entry_points.py, docs/entry-points.md)."""
from __future__ import annotations

import re
from pathlib import Path

from ccdiff.entry_points import block


def members(src: Path) -> set[str]:
    h = (src / "lib" / "ngtcp2_cc.h").read_text()
    body = block(h, "typedef struct ngtcp2_cc {", "} ngtcp2_cc;")
    return set(re.findall(r"^\s*ngtcp2_cc_\w+\s+(\w+);", body, re.M))

"""picoquic's controller interface, parsed from its pinned source: tests/test_entry_points.py
checks entry-points.md beside this file against it (ccdiff/entry_points.py, docs/entry-points.md)."""
from __future__ import annotations

import re
from pathlib import Path

from ccdiff.entry_points import block


def members(src: Path) -> set[str]:
    h = (src / "picoquic" / "picoquic.h").read_text()
    enum = block(h, "picoquic_congestion_notification_acknowledgement", "} picoquic_congestion_notification_t;")
    kinds = set(re.findall(r"picoquic_congestion_notification_(\w+)", enum))
    alg = block(h, "typedef struct st_picoquic_congestion_algorithm_t {", "} picoquic_congestion_algorithm_t;")
    hooks = set(re.findall(r"^\s*picoquic_congestion_algorithm_\w+\s+(\w+);", alg, re.M))
    return kinds | hooks

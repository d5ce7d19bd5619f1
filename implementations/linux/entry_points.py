"""linux's controller interface, parsed from its pinned source: tests/test_entry_points.py
checks entry-points.md beside this file against it (ccdiff/entry_points.py, docs/entry-points.md)."""
from __future__ import annotations

import atexit
import functools
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

from ccdiff.entry_points import block


def members(src: Path) -> set[str]:
    """struct tcp_congestion_ops: its callbacks (`(*name)(`) and its data members."""
    h = (src / "include" / "net" / "tcp.h").read_text()
    body = block(h, "struct tcp_congestion_ops {", "} ____cacheline_aligned_in_smp;")
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    hooks = set(re.findall(r"\(\*(\w+)\)\s*\(", body))
    fields = set(re.findall(r"^\s*(?:char|u32|struct \w+)\s+\**(\w+)\s*(?:\[[^]]*\])?;", body, re.M))
    return hooks | fields


# The kernel files entry-points.md cites.  build.sh takes only what it compiles (tcp_cubic.c,
# tcp_cong.c, include/net/tcp.h) out of the tarball; the callers (tcp_input.c, tcp_output.c,
# tcp.c) are read here, never written into build/.
FILES = ("include/net/tcp.h", "net/ipv4/tcp.c", "net/ipv4/tcp_cong.c", "net/ipv4/tcp_cubic.c",
         "net/ipv4/tcp_input.c", "net/ipv4/tcp_output.c")


@functools.lru_cache(maxsize=None)
def source_tree(usr_src: Path) -> Path:
    """FILES from the pinned linux-source-<v>.tar.xz under usr_src (as build.sh finds
    it), in a temporary kernel tree removed when the run ends."""
    tarballs = sorted(usr_src.glob("linux-source-*.tar.xz"))
    assert len(tarballs) == 1, f"{usr_src}: expected one linux-source-*.tar.xz, found {tarballs}"
    top = tarballs[0].name[:-len(".tar.xz")]
    dest = Path(tempfile.mkdtemp(prefix="ccdiff-entry-points-"))
    atexit.register(shutil.rmtree, dest, True)
    wanted = {f"{top}/{f}" for f in FILES}
    with tarfile.open(tarballs[0], "r:xz") as tar:
        for member in tar:
            if member.name in wanted and member.isfile():
                tar.extract(member, dest, set_attrs=False)
                wanted.discard(member.name)
                if not wanted:
                    break
    assert not wanted, f"{tarballs[0]} lacks {sorted(wanted)}"
    return dest / top

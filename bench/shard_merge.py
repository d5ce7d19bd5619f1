"""Three shards of the whole default matrix merged are the unsharded run, byte for byte.

    python3 bench/shard_merge.py [--seeds 2] [--shards 3]

tests/test_shard.py checks this on every built stack and four scenarios; this runs it on
the default matrix (every scenario of the catalog x every built stack), 9 minutes on a
2-core machine with 2 seeds (2026-11-28), too long for every CI run.  Exit 0 when merge's summary.json,
junit.xml, index.html, traces/ and report/ equal the unsharded run's; 1 when they differ
(the first differing files are printed); 2 when a run could not be made.
"""
from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from ccdiff.outdir import MANIFEST  # noqa: E402


def tree(folder: Path, skip=()) -> dict[str, str]:
    """Relative path -> sha256 of every file under folder (tests/test_shard.py's too)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in skip}


def ccdiff(cwd: Path, *argv: str) -> int:
    cwd.mkdir(parents=True, exist_ok=True)
    code = subprocess.call([sys.executable, "-m", "ccdiff", *argv], cwd=cwd,
                           stdout=subprocess.DEVNULL)
    if code not in (0, 1):
        print(f"shard_merge: `ccdiff {' '.join(argv)}` exited {code}", file=sys.stderr)
        sys.exit(2)
    return code


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=2, help="seeds per cell (default 2)")
    ap.add_argument("--shards", type=int, default=3, help="how many shards (default 3)")
    args = ap.parse_args()
    seeds = ["--seeds", str(args.seeds)]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ccdiff-shard-merge.") as tmp:
        root = Path(tmp)
        whole = ccdiff(root / "whole", "conform", *seeds, "--out", "out")
        for k in range(1, args.shards + 1):
            ccdiff(root / "shards", "conform", *seeds, "--shard", f"{k}/{args.shards}", "--out", str(k))
        merged = ccdiff(root / "merged", "merge",
                        *[f"../shards/{k}" for k in range(1, args.shards + 1)], "--out", "out")
        # conform's resume journal (completion order) is the unsharded run's only: merge
        # writes none; each folder's manifest lists the files it wrote (compared in the test)
        one = tree(root / "whole" / "out", skip={"cases.jsonl", MANIFEST})
        joined = tree(root / "merged" / "out", skip={MANIFEST})
        differ = sorted(n for n in one.keys() | joined.keys() if one.get(n) != joined.get(n))
    elapsed = time.monotonic() - started
    print(f"shard_merge: default matrix, {args.seeds} seeds, {args.shards} shards: {len(one)} files, "
          f"exit {whole} unsharded / {merged} merged, {elapsed:.0f} s")
    if differ or whole != merged:
        print("shard_merge: DIFFERENT:", *differ[:20], sep="\n  ")
        return 1
    print("shard_merge: merged == unsharded, byte for byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())

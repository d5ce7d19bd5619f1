"""Report scale: `ccdiff report` on a findings JSON with thousands of findings.

    python3 bench/bench_report.py [--traces N]

Writes N renamed copies of examples/death-spiral.jsonl, runs `ccdiff matrix`
on them with three oracle mutants (no native build needed; each copy yields
several findings), then times `ccdiff report`, the size of index.html and
how long headless Chromium takes to load it.  Not part of the tests.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ccdiff.matrix import run_matrix           # noqa: E402
from ccdiff.report import build_report         # noqa: E402

STACKS = ["oracle:idle=last-send", "oracle:idle=none,fast_convergence=off", "oracle-reno"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=300)
    args = parser.parse_args()
    lines = (ROOT / "examples" / "death-spiral.jsonl").read_text().splitlines()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = []
        for i in range(args.traces):
            header = json.loads(lines[0])
            header["name"] = f"death-spiral-{i:04d}"
            path = folder / f"t{i:04d}.jsonl"
            path.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
            paths.append(str(path))
        started = time.perf_counter()
        matrix = run_matrix(paths, STACKS)
        replayed = time.perf_counter() - started
        started = time.perf_counter()
        summary = build_report(matrix, folder / "report")
        reported = time.perf_counter() - started
        index = folder / "report" / "index.html"
        print(f"{args.traces} traces x {len(STACKS)} stacks: {summary['totals']['findings']} findings")
        print(f"matrix {replayed:.1f} s; report {reported:.1f} s "
              f"({reported / max(summary['totals']['findings'], 1) * 1000:.0f} ms per finding)")
        print(f"index.html {index.stat().st_size / 1024:.0f} KiB")
        chromium = shutil.which("chromium")
        if chromium:
            started = time.perf_counter()
            subprocess.run([chromium, "--headless", "--disable-gpu", "--no-sandbox", "--dump-dom",
                            f"--user-data-dir={folder / 'profile'}", index.as_uri()],
                           capture_output=True, check=True, timeout=300)
            print(f"chromium loads index.html in {time.perf_counter() - started:.1f} s (process start included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

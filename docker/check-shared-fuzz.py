"""Checks a findings folder after N AFL++ workers fuzzed one stack side by side
(docker/ci.sh, the compose fuzz profile):

  - one corpus: N instance folders under the one STACK_DIR/.work/afl, and each
    imported queue entries from another (AFL++ names those `...,sync:<instance>,...`);
  - each finding stored once: every signature is one folder, its finding.json
    naming that same signature and the engine in found_by, nothing else beside them,
    nothing left half-published in .staging/;
  - every finding judged (finding.json "status"), and the workers found quiche@0.26.0's
    future-recovery-start, which is never judged new (fixed upstream in 0.26.1).

    check-shared-fuzz.py STACK_DIR N     exit 0 ok, 1 with what is wrong
"""
import json
import re
import sys
from pathlib import Path

SYNC = re.compile(r",sync:([^,]+),")
# ccdiff/status.py's kinds, as fuzzing/verdicts.py writes them into finding.json
STATUSES = ("new", "unchecked", "known", "fixed", "consequence", "lenient", "local", "gone")


def check(folder: Path, workers: int) -> list:
    problems = []
    afl = folder / ".work" / "afl"
    instances = sorted(p.name for p in afl.glob("*") if (p / "queue").is_dir())
    if len(instances) != workers:
        problems.append(f"{afl}: {len(instances)} AFL++ instance folders {instances}, expected {workers}")
    for name in instances:
        sources = {m.group(1) for f in (afl / name / "queue").iterdir() if (m := SYNC.search(f.name))}
        if not sources - {name}:
            problems.append(f"{name} imported no queue entry from another worker")
        else:
            print(f"{name}: imported entries from {', '.join(sorted(sources - {name}))}")
    signatures = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name == "report":
            continue
        info = entry / "finding.json"
        if not info.is_file():
            problems.append(f"{entry}: not a stored finding (no finding.json)")
            continue
        data = json.loads(info.read_text())
        if f"{data['invariant']}--{data['shape']}" != entry.name:
            problems.append(f"{info}: signature {data['invariant']}--{data['shape']} stored as {entry.name}")
        if data["found_by"] != ["afl"]:
            problems.append(f"{info}: found_by {data['found_by']}, expected ['afl']")
        if data.get("status") not in STATUSES:
            problems.append(f"{info}: status {data.get('status')!r}, expected one of {', '.join(STATUSES)}")
        elif entry.name.startswith("future-recovery-start--") and data["status"] in ("new", "unchecked"):
            problems.append(f"{info}: the death spiral's root cause, fixed in 0.26.1, judged {data['status']}")
        signatures.append(entry.name)
    staging = folder / ".staging"
    if staging.is_dir() and any(staging.iterdir()):
        problems.append(f"{staging}: unpublished findings left behind")
    if not any(name.startswith("future-recovery-start--") for name in signatures):
        problems.append(f"no future-recovery-start finding among {signatures}")
    print(f"{folder.name}: {len(signatures)} finding(s), one folder each: {', '.join(signatures)}")
    return problems


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    found = check(Path(sys.argv[1]), int(sys.argv[2]))
    for problem in found:
        print(f"check-shared-fuzz: {problem}", file=sys.stderr)
    sys.exit(1 if found else 0)

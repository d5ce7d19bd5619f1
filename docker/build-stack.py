"""`ccdiff build STACK [--source DIR]` for the image builder stage: the same
build_spec(), without the CLI's other imports (docker/Dockerfile copies only
the modules this needs, so unrelated changes keep the stack layers cached)."""
import sys
from pathlib import Path

from ccdiff.build import build_spec
from ccdiff.errors import SetupError

if len(sys.argv) not in (2, 3):
    sys.exit("usage: build-stack.py STACK [SOURCE_DIR]")
try:
    for library in build_spec(sys.argv[1], source=Path(sys.argv[2]) if len(sys.argv) == 3 else None):
        print(library)
except SetupError as exc:
    sys.exit(f"error: {exc}")

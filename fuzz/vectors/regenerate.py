"""Rewrite every fuzz/vectors/NAME.jsonl from NAME.bin with the Python decoder.

Run after a deliberate change to the encoding (docs/fuzz-encoding.md), then check
that the C decoder agrees: `python3 -m pytest -q tests/test_fuzz_encoding.py
tests/test_fuzz_driver.py`.  Usage: python3 fuzz/vectors/regenerate.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ccdiff.encoding import decode  # noqa: E402
from ccdiff.trace import dump_trace  # noqa: E402

VECTORS = Path(__file__).resolve().parent


def main() -> int:
    for binary in sorted(VECTORS.glob("*.bin")):
        expected = binary.with_suffix(".jsonl")
        text = dump_trace(decode(binary.read_bytes(), name=binary.stem))
        changed = not expected.exists() or expected.read_text() != text
        expected.write_text(text)
        print(f"{expected.name}: {'rewritten' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

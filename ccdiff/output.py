"""Writing results: atomically (a reader never sees half a file) and with a clear error."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .errors import SetupError


def write_text_atomic(path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename it into place."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise SetupError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_json(path, document) -> None:
    write_text_atomic(path, json.dumps(document, indent=2) + "\n")

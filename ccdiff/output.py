"""Writing results atomically (a reader never sees half a file), reading JSON inputs with a
size cap; every failure a SetupError with a clear message."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from .errors import SetupError


def write_text_atomic(path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename it into place.  A path that
    exists and is not a regular file (/dev/null, /dev/full, a FIFO) is written in place:
    renaming over it would replace a device node (as root) with a plain file."""
    path = Path(path)
    if path.exists() and not path.is_file():
        _write_in_place(path, text)
        return
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)   # a full disk leaves no half-written temporary file behind
        raise SetupError(f"cannot write {path}: {exc.strerror or exc}") from None


def _write_in_place(path: Path, text: str) -> None:
    if path.is_dir():
        raise SetupError(f"cannot write {path}: it is a folder")
    try:
        with open(path, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
    except OSError as exc:
        raise SetupError(f"cannot write {path}: {exc.strerror or exc}") from None


def read_json_input(path, what: str, limit: int = 64 << 20):
    """A JSON document from a file, read with a size cap: memory stays bounded on
    /dev/zero or a huge file, and every failure is a SetupError naming the file."""
    try:
        with open(path, "rb") as file:
            data = file.read(limit + 1)
    except OSError as exc:
        raise SetupError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > limit:
        raise SetupError(f"{path}: {what} larger than {limit >> 20} MiB")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise SetupError(f"{path}: not a JSON {what} ({exc})") from None


def write_json(path, document) -> None:
    write_text_atomic(path, json.dumps(document, indent=2) + "\n")

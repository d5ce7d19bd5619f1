"""Writing results atomically (a reader never sees half a file), reading JSON inputs with a
size cap; every failure a SetupError with a clear message."""
from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path

from .errors import SetupError


def file_mode() -> int:
    """The mode open() would give a new file under the current umask (mkstemp gives 0600:
    a report's summary.json unreadable by the web server that serves its 0644 pages)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_text_atomic(path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename it into place.  A path that
    exists and is not a regular file (/dev/null, /dev/full, a FIFO) is written in place:
    renaming over it would replace a device node (as root) with a plain file."""
    write_bytes_atomic(path, text.encode("utf-8", errors="backslashreplace"))


def write_bytes_atomic(path, data: bytes) -> None:
    """write_text_atomic's rule for bytes (a copied trace, a PNG)."""
    path = Path(path)
    if path.exists() and not path.is_file():
        _write_in_place(path, data)
        return
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)   # a full disk leaves no half-written temporary file behind
        raise SetupError(f"cannot write {path}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def atomic_file(path):
    """A binary file handle for streaming writes (a qlog, a copied trace): the data go to a
    temporary file beside `path`, renamed into place when the block ends without an error;
    an error (a full disk included) leaves `path` as it was and no temporary file."""
    path = Path(path)
    if path.exists() and not path.is_file():
        if path.is_dir():
            raise SetupError(f"cannot write {path}: it is a folder")
        with _opened(path, "wb") as fh:
            yield fh
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    except OSError as exc:
        raise SetupError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise SetupError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _opened(path: Path, mode: str):
    try:
        with open(path, mode) as fh:
            yield fh
    except OSError as exc:
        raise SetupError(f"cannot write {path}: {exc.strerror or exc}") from None


def _write_in_place(path: Path, data: bytes) -> None:
    if path.is_dir():
        raise SetupError(f"cannot write {path}: it is a folder")
    try:
        with open(path, "wb") as fh:
            fh.write(data)
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


# XML 1.0 §2.2: Char ::= #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF].
# One character outside that (a trace path or a reason with ESC) makes a whole junit.xml
# ill-formed, and CI rejects the file: such characters are written as \xNN text.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text):
    if not isinstance(text, str):
        return text
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else
                        f"\\u{ord(m.group()):04x}", text)


def xml_safe(root):
    """Every text, tail and attribute value under an ElementTree root made XML 1.0 text."""
    for element in root.iter():
        element.text, element.tail = xml_text(element.text), xml_text(element.tail)
        for key, value in element.attrib.items():
            element.attrib[key] = xml_text(value)
    return root


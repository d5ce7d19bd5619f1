"""The one output layer (issue #32): every folder and file ccdiff writes goes through here.

Four rules, each a class of data loss made impossible rather than one instance fixed:
- an output never overlaps an input: a file output is never an input file, and an output
  folder never holds an input (a report folder that holds its own trace would delete it);
- a folder is written by one run at a time: an exclusive lock on the folder itself, so two
  `conform --out X` runs cannot mix one run's summary with the other's reports;
- ccdiff deletes only what it wrote: OUT/.ccdiff-manifest lists, one JSON string a line,
  every file ccdiff wrote there.  A later run into the same folder removes the files of the
  earlier run that it did not write again, and nothing else; a non-empty folder with no
  manifest is somebody else's, and is refused;
- every file is written atomically (ccdiff/output.py), with the mode the umask gives.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from pathlib import Path

from .errors import SetupError
from .output import write_bytes_atomic, write_text_atomic

MANIFEST = ".ccdiff-manifest"


def _identity(path: Path):
    """(device, inode) of an existing regular file or folder, else None: hard links and
    different spellings of one file compare equal; devices and pipes (/dev/stdin,
    /dev/null) are never the same "file" as an output."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return None
    return st.st_dev, st.st_ino


def _inside(path: Path, folder: Path) -> bool:
    """Whether path is folder or lies below it, by resolved path and by identity."""
    try:
        path, folder = path.resolve(), folder.resolve()
    except (OSError, RuntimeError):
        return False
    return path == folder or folder in path.parents


def refuse_overlap(output, inputs, option: str, folder: bool = False) -> None:
    """SetupError when writing `output` could replace or delete one of `inputs`:
    the output is an input (any spelling, a hard link), the output folder holds an input,
    or the output lies inside an input folder (a shard folder read by `merge`)."""
    out = Path(output)
    out_id = _identity(out)
    for item in inputs:
        if item is None or str(item) in ("-", ""):
            continue
        inp = Path(item)
        inp_id = _identity(inp)
        if inp_id is None and not _inside(inp, out):
            continue
        if out_id is not None and out_id == inp_id or (out_id is None and _same_path(inp, out)):
            raise SetupError(f"{option} {output}: is also an input ({item}); ccdiff never writes "
                             "into its inputs. Choose another path")
        if folder and _inside(inp, out):
            raise SetupError(f"{option} {output}: that folder holds the input {item}; ccdiff never "
                             "writes into its inputs. Choose another folder, or copy the input out of "
                             "it first")
        if inp_id is not None and inp.is_dir() and _inside(out, inp):
            raise SetupError(f"{option} {output}: lies inside the input folder {item}; ccdiff never "
                             "writes into its inputs. Choose a folder outside it")


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):
        return False


def check_output_file(path, option: str, inputs=()) -> None:
    """Before any work: the output file can be written (its folder exists, it is not a
    folder) and overlaps no input, so a long run never fails only at its last step."""
    if path is None or str(path) == "-":
        return
    refuse_overlap(path, inputs, option)
    target = Path(path)
    if target.is_dir():
        raise SetupError(f"{option} {path}: is a folder; name a file")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise SetupError(f"{option} {path}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK) and not (target.exists() and os.access(target, os.W_OK)):
        raise SetupError(f"{option} {path}: the folder {parent} is not writable")


def check_output_folder(path, option: str, inputs=()) -> None:
    """Before any work, the checks OutputFolder makes when it opens, without creating it."""
    if path is None:
        return
    refuse_overlap(path, inputs, option, folder=True)
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise SetupError(f"{option} {path}: exists and is not a folder")
    if target.is_dir():
        _earlier_files(target, option)      # refuses a folder somebody else filled


def _earlier_files(root: Path, option: str) -> set | None:
    """The files the manifest names (None: no manifest); a non-empty folder without one is
    refused.  A torn last line (a killed run) is ignored: it names a file being written."""
    manifest = root / MANIFEST
    if not manifest.is_file():
        try:
            entries = [p.name for p in root.iterdir()]
        except OSError as exc:
            raise SetupError(f"{option} {root}: cannot read the folder: {exc.strerror or exc}") from None
        legacy = _legacy_files(root)
        if legacy is not None:
            return legacy
        if entries:
            shown = ", ".join(sorted(entries)[:3]) + (" ..." if len(entries) > 3 else "")
            raise SetupError(f"{option} {root}: the folder is not empty ({shown}) and ccdiff did not "
                             f"write it (no {MANIFEST}); choose an empty or new folder, or one an "
                             "earlier ccdiff run wrote")
        return None
    files = set()
    try:
        text = manifest.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise SetupError(f"{manifest}: cannot read: {exc.strerror or exc}") from None
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            rel = json.loads(line)
            if isinstance(rel, str) and _safe_relative(rel):
                files.add(rel)
    return files


# Outputs of a ccdiff from before the manifest (a report, a conform folder): the files the
# old code itself replaced on the next run, so an upgrade does not refuse the folder it
# wrote last night.  Anything else in the folder stays the user's.
_LEGACY = {
    "ccdiff_report": (("index.html", "summary.json", "junit.xml"), ("findings", "plots", "qlog", "traces")),
    "ccdiff-conform/1": (("summary.json", "junit.xml", "cases.jsonl", "index.html", "shard.json"),
                         ("traces", "report")),
}


def _legacy_files(root: Path) -> set | None:
    try:
        head = (root / "summary.json").read_bytes()[:1 << 20]
    except OSError:
        return None
    for marker, (files, folders) in _LEGACY.items():
        if marker.encode() in head:
            owned = {name for name in files if (root / name).is_file()}
            for folder in folders:
                base = root / folder
                if base.is_dir() and not base.is_symlink():
                    owned |= {p.relative_to(root).as_posix() for p in base.rglob("*")
                              if p.is_file() or p.is_symlink()}
            return owned
    return None


def _safe_relative(rel: str) -> bool:
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts and rel != MANIFEST


class OutputFolder:
    """A folder this run writes: opened (checked, created, locked) with `with`, written with
    claim / write_text / copy_file, closed with finish() (the earlier run's leftovers
    removed, the manifest rewritten).  An exception leaves the earlier run's files and a
    manifest naming them and everything written since: a later run still owns them all."""

    def __init__(self, root, option: str = "--out", inputs=()):
        self.root = Path(root)
        self.option = option
        self.inputs = list(inputs)
        self._written: set = set()
        self.earlier: set = set()
        self._lock_fd = None
        self._log = None

    def __enter__(self):
        refuse_overlap(self.root, self.inputs, self.option, folder=True)
        if self.root.exists() and not self.root.is_dir():
            raise SetupError(f"{self.option} {self.root}: exists and is not a folder")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise SetupError(f"{self.option} {self.root}: cannot create the folder: "
                             f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise SetupError(f"{self.option} {self.root}: another ccdiff run is writing into this "
                             "folder; wait for it to end, or choose another folder") from None
        try:
            self.earlier = _earlier_files(self.root, self.option) or set()
            self._log = open(self.root / MANIFEST, "a", encoding="utf-8")
        except OSError as exc:           # the manifest, in a folder we may not write
            self._unlock()
            raise SetupError(f"{self.option} {self.root}: cannot write: {exc.strerror or exc}") from None
        except BaseException:
            self._unlock()
            raise
        return self

    def __exit__(self, kind, exc, tb):
        # The manifest's close flushes, and fails on a full disk: the folder's lock (a file
        # descriptor on it) is released all the same, or the process keeps the folder busy.
        try:
            if self._log is not None:
                log, self._log = self._log, None
                log.close()
        finally:
            self._unlock()
        return False

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- writing -----------------------------------------------------------------
    def claim(self, rel) -> Path:
        """The path of OUT/rel, recorded as ccdiff's before anything writes it (ours or a
        library's, e.g. matplotlib): refused when it is a file ccdiff did not write, or
        would lie outside OUT (a '..', a symbolic link to elsewhere)."""
        rel = Path(rel).as_posix()
        if not _safe_relative(rel):
            raise SetupError(f"{self.option} {self.root}: {rel!r} is not a path inside the folder")
        path = self.root / rel
        if rel not in self._written:
            if (path.exists() or path.is_symlink()) and rel not in self.earlier:
                raise SetupError(f"{path}: exists and ccdiff did not write it; it is left alone. Move it "
                                 f"away or choose another {self.option} folder")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SetupError(f"cannot create {path.parent}: {exc.strerror or exc}") from None
            if not _inside(path.parent, self.root):
                raise SetupError(f"{path}: its folder leads outside {self.root} (a symbolic link); "
                                 "nothing is written there")
            self._written.add(rel)
            try:
                self._log.write(json.dumps(rel) + "\n")
                self._log.flush()
            except OSError as exc:
                raise SetupError(f"cannot write {self.root / MANIFEST}: {exc.strerror or exc}") from None
        return path

    @property
    def written(self) -> frozenset:
        """The files this run has claimed so far (relative paths)."""
        return frozenset(self._written)

    def adopt(self, rel) -> None:
        """A file this run's own worker processes wrote (conform's traces), or that an earlier,
        interrupted run of the same matrix wrote and this one reuses: recorded as ccdiff's."""
        rel = Path(rel).as_posix()
        if _safe_relative(rel) and rel not in self._written and (self.root / rel).is_file():
            self.earlier.add(rel)
            self.claim(rel)

    def write_text(self, rel, text: str) -> Path:
        path = self.claim(rel)
        write_text_atomic(path, text)
        return path

    def write_bytes(self, rel, data: bytes) -> Path:
        path = self.claim(rel)
        write_bytes_atomic(path, data)
        return path

    def copy_file(self, source, rel) -> Path:
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise SetupError(f"{source}: cannot read: {exc.strerror or exc}") from None
        return self.write_bytes(rel, data)

    def sub(self, prefix) -> "SubFolder":
        return SubFolder(self, Path(prefix).as_posix())

    # -- the end of the run ------------------------------------------------------------
    def finish(self) -> list:
        """Remove the earlier run's files this run did not write again (and the folders that
        leaves empty), then rewrite the manifest with this run's files.  Returns the paths
        removed."""
        removed = []
        for rel in sorted(self.earlier - self._written):
            path = self.root / rel
            if path.is_symlink() or path.is_file():
                if not _inside(path.parent, self.root):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                removed.append(path)
                self._prune(path.parent)
        write_text_atomic(self.root / MANIFEST, "".join(json.dumps(r) + "\n" for r in sorted(self._written)))
        self.earlier = set(self._written)
        return removed

    def _prune(self, folder: Path) -> None:
        root = self.root.resolve()
        while folder.resolve() != root and _inside(folder, root):
            try:
                folder.rmdir()        # only an empty folder: a user's file inside keeps it
            except OSError:
                return
            folder = folder.parent


class SubFolder:
    """A part of an OutputFolder (conform's report/<stack>/), with the same write calls."""

    def __init__(self, parent: OutputFolder, prefix: str):
        self.parent, self.prefix = parent, prefix
        self.root = parent.root / prefix

    def claim(self, rel) -> Path:
        return self.parent.claim(f"{self.prefix}/{Path(rel).as_posix()}")

    def write_text(self, rel, text: str) -> Path:
        return self.parent.write_text(f"{self.prefix}/{Path(rel).as_posix()}", text)

    def write_bytes(self, rel, data: bytes) -> Path:
        return self.parent.write_bytes(f"{self.prefix}/{Path(rel).as_posix()}", data)

    def copy_file(self, source, rel) -> Path:
        return self.parent.copy_file(source, f"{self.prefix}/{Path(rel).as_posix()}")


@contextlib.contextmanager
def held(target, option: str = "--out"):
    """An OutputFolder for an API caller that passes a folder path (tests, bench) where the
    CLI passes the folder it already holds: opened and closed here, without finish(), so
    what the manifest lists stays listed for the caller's later steps."""
    if hasattr(target, "claim"):
        yield target
        return
    with OutputFolder(target, option) as folder:
        yield folder


"""`ccdiff build`: fetch a pinned release, check its sha256, unpack, run build.sh.

Nothing upstream is committed: the archive comes from its registry at build
time, is checked against the sha256 pinned in stack.toml, and is unpacked
under build/ (git-ignored).  ``--source DIR`` builds a maintainer's checkout
instead; it lands in build/<stack>/git-<sha>/ or local-<digest>/ (named by its content,
_local_version) and is never modified.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

from .errors import SetupError
from .paths import build_dir, implementations_dir
from .recipes import StackRecipe, Target, load_recipes, resolve

CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def run_build_script(script: Path, src: Path, out: Path, version: str, **extra_env: str) -> tuple[int, Path]:
    """`bash SCRIPT SRC OUT` (a stack's build.sh or connection/build.sh), its output into
    OUT/build.log: the exit code and the log.  PYTHON is the interpreter ccdiff runs in (a .venv
    on a Debian python, PEP 668), whose packages a Python stack needs (aioquic's connection
    shim: cryptography, pylsqpack, ...), which `python3` on PATH may lack."""
    env = dict(os.environ, CCDIFF_INCLUDE=str(implementations_dir() / "include"),
               CCDIFF_STACK_VERSION=version, PYTHON=sys.executable, **extra_env)
    log_path = out / "build.log"
    with open(log_path, "w") as log:
        result = subprocess.run(["bash", str(script), str(src), str(out)], env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    return result.returncode, log_path


def log_tail(log_path: Path, lines: int = 15) -> str:
    """The last lines of a build log, for the error that names it."""
    return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(url: str, sha256: str) -> Path:
    """Download once into build/downloads/, verified; a bad checksum is fatal."""
    downloads = build_dir() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    target = downloads / url.rsplit("/", 1)[-1]
    if target.exists() and sha256_of(target) == sha256:
        return target
    _log(f"  fetching {url}")
    partial = target.with_suffix(target.suffix + ".part")
    context = None
    if os.path.exists(CA_BUNDLE):
        import ssl
        context = ssl.create_default_context(cafile=CA_BUNDLE)
    try:
        with urllib.request.urlopen(url, timeout=120, context=context) as response, open(partial, "wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise SetupError(f"cannot download {url}: {exc}") from None
    actual = sha256_of(partial)
    if actual != sha256:
        partial.unlink()
        raise SetupError(f"sha256 mismatch for {url}: expected {sha256}, got {actual}; "
                         "refusing to build from an unverified archive")
    partial.replace(target)
    return target


def unpack(archive: Path, dest: Path) -> None:
    """A tarball (crates.io, PyPI), or a Debian .deb: an ar archive whose data.tar.* member
    is the package's file tree (the linux stack's kernel source tarball sits in it)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if archive.suffix == ".deb":
        with _deb_data(archive) as data:
            _extract_tar(archive, tarfile.open(fileobj=data), dest)
        return
    _extract_tar(archive, tarfile.open(archive), dest)


@contextlib.contextmanager
def _deb_data(archive: Path):
    """The data.tar.* member of a .deb (ar format: an 8-byte magic, then 60-byte headers,
    each member padded to an even length), as a file object over that byte range."""
    with open(archive, "rb") as fh:
        if fh.read(8) != b"!<arch>\n":
            raise SetupError(f"{archive.name}: not a Debian package (no ar header)")
        while True:
            header = fh.read(60)
            if len(header) < 60:
                raise SetupError(f"{archive.name}: no data.tar member")
            name = header[:16].decode("ascii", "replace").strip().rstrip("/")
            try:
                size = int(header[48:58].decode("ascii").strip())
            except ValueError:
                raise SetupError(f"{archive.name}: malformed ar header") from None
            if name.startswith("data.tar"):
                start = fh.tell()
                yield _Slice(fh, start, size)
                return
            fh.seek(size + (size & 1), os.SEEK_CUR)


class _Slice:
    """Read-only window [start, start + size) of an open file, for tarfile."""

    def __init__(self, fh, start: int, size: int):
        self.fh, self.start, self.size, self.pos = fh, start, size, 0

    def read(self, n: int = -1) -> bytes:
        left = self.size - self.pos
        n = left if n is None or n < 0 else min(n, left)
        self.fh.seek(self.start + self.pos)
        data = self.fh.read(n)
        self.pos += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, min(self.size, base + offset))
        return self.pos

    def tell(self) -> int:
        return self.pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def _extract_tar(archive: Path, tar: tarfile.TarFile, dest: Path) -> None:
    with tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")  # "data" refuses links and paths outside dest
        else:  # Python < 3.11.4 (Debian bookworm's 3.11.2, the container images' python3)
            for member in tar.getmembers():
                _check_member(archive, member)
            tar.extractall(dest)


def _check_member(archive: Path, member: tarfile.TarInfo) -> None:
    """What the "data" filter refuses: paths or links leaving dest, devices, fifos."""
    def leaves(path: str) -> bool:
        norm = os.path.normpath(path)
        return os.path.isabs(path) or norm == ".." or norm.startswith("../")
    unsafe = leaves(member.name) or not (member.isfile() or member.isdir() or member.issym() or member.islnk())
    if member.issym():
        unsafe = unsafe or leaves(os.path.join(os.path.dirname(member.name), member.linkname))
    elif member.islnk():
        unsafe = unsafe or leaves(member.linkname)
    if unsafe:
        raise SetupError(f"{archive.name}: refusing unsafe archive member {member.name!r}")


# A stack folder's files that no build reads: what ccdiff reads about the stack at run time
# (its profile, its mechanisms, its coverage files, where its code comes from, which releases
# exist) and the entry-point parser and table its contract test reads.  Editing them leaves
# every build current (docs/adding-a-stack.md, "The folder").
NOT_BUILT = ("profile.toml", "provenance.toml", "registry.toml", "releases.lock", "coverage.toml", "mechanisms.py",
             "entry_points.py", "entry-points.md")


def recipe_digest(recipe: StackRecipe) -> str | None:
    """A hash of what a stack's build is made from besides upstream: its folder (adapter,
    build.sh, patches, locks; not NOT_BUILT, which no build reads, nor connection/, the
    connection shim's own build), the adapter ABI header and the shared build steps build.sh
    sources.  A build made from other files is stale and is rebuilt: after a `git pull` or an
    edit to an adapter, nothing runs yesterday's library.  None where the recipe's sources
    are not present (a runtime image holds only the built libraries)."""
    if not (recipe.folder / "build.sh").exists():
        return None
    root = implementations_dir()
    files = sorted(p for p in recipe.folder.rglob("*") if p.is_file()
                   and p.name not in NOT_BUILT
                   and not any(part.startswith(".") or part in ("target", "connection", "__pycache__")
                               for part in p.relative_to(recipe.folder).parts))
    files.append(root / "include" / "ccdiff_adapter.h")
    # and the shared build steps its build.sh sources (include/rust_build.sh)
    script = (recipe.folder / "build.sh").read_text()
    files += [p for p in sorted((root / "include").glob("*.sh")) if p.name in script]
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _build_info(recipe: StackRecipe, version: str) -> dict:
    """What build-info.json recorded of the last build ({} if there is none)."""
    try:
        return json.loads((recipe.build_folder(version) / "build-info.json").read_text())
    except (OSError, ValueError):
        return {}


def build_state(recipe: StackRecipe, version: str) -> str:
    """"missing" (no library), "stale" (built from adapter sources that have changed since),
    "modified" (the library is not the file the build wrote: truncated, overwritten, replaced)
    or "current".  A build records its library's sha256; one made before it did is not checked."""
    library = recipe.library(version)
    if not library.exists():
        return "missing"
    info = _build_info(recipe, version)
    digest = recipe_digest(recipe)
    if digest is not None and info.get("recipe") != digest:
        return "stale"
    if info.get("library_sha256") not in (None, sha256_of(library)):
        return "modified"
    return "current"


def is_current(recipe: StackRecipe, version: str) -> bool:
    return build_state(recipe, version) == "current"


def is_stale(recipe: StackRecipe, version: str) -> bool:
    """Built, but not usable as it is: stale or modified (rebuild it)."""
    return build_state(recipe, version) in ("stale", "modified")


def unusable_build(recipe: StackRecipe, version: str) -> str | None:
    """Why a built library may not be run, with the command that fixes it; None when it may."""
    state = build_state(recipe, version)
    fix = f"run: ccdiff build {recipe.name}@{version}"
    if state == "stale":
        return (f"{recipe.name}@{version} was built from an older adapter "
                f"(implementations/{recipe.name}/ changed since); {fix}")
    if state == "modified":
        return (f"{recipe.name}@{version}: {recipe.library(version)} is not the library its build wrote "
                f"(its sha256 differs from build-info.json's); {fix}")
    return None


def _git(folder: Path, *args: str) -> str | None:
    """A git command's output in `folder`, stripped; None where git fails or is absent.
    --no-optional-locks: `git status` would otherwise refresh the user's index under
    index.lock, and a run killed then leaves the lock behind (a test left one in this
    checkout); ccdiff only reads a checkout."""
    try:
        done = subprocess.run(["git", "--no-optional-locks", "-C", str(folder), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


# What a content hash leaves out: git's own store, and cargo's output folders, which the
# Rust stacks' build.sh leaves out of the copy it builds (`tar --exclude=./.git
# --exclude=./target`): every other file may be read by a build.
_NOT_CONTENT = (".git", "target")


def tree_digest(folder: Path) -> str:
    """sha256 over a tree's files (relative path, executable bit, bytes; a symlink by its
    target), in path order: two trees get one digest only when a build reads the same."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _NOT_CONTENT)
        for name in sorted(files):
            path = Path(root) / name
            rel = path.relative_to(folder).as_posix().encode()
            if path.is_symlink():
                digest.update(b"l\0" + rel + b"\0" + os.readlink(path).encode() + b"\0")
                continue
            try:
                executable = b"x" if os.access(path, os.X_OK) else b"f"
                digest.update(executable + b"\0" + rel + b"\0" + str(path.stat().st_size).encode() + b"\0")
                with open(path, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        digest.update(block)
            except OSError as exc:
                raise SetupError(f"--source {folder}: cannot read {path}: {exc.strerror}") from None
    return digest.hexdigest()


def _local_version(source: Path) -> str:
    """The name of a --source build, from what the tree is (issue 32):

    git-<sha>                    a clean checkout at the top of its own repository (`git
                                 status --porcelain` empty): the commit names its content;
    git-<sha>-dirty-<digest>     the same checkout with changes: two edits of one commit
                                 are two builds, not one that replaces the other;
    local-<digest>               any other folder: not a git tree, or a folder *inside* an
                                 enclosing repository, whose commit says nothing about
                                 this folder (four copies of ngtcp2 in one repository were
                                 all named after its commit, and each build replaced the last).

    <digest> is tree_digest's first 12 hex digits."""
    src = source.resolve()
    top = _git(src, "rev-parse", "--show-toplevel")
    if top and Path(top).resolve() == src:
        sha = _git(src, "rev-parse", "--short=10", "HEAD")
        status = _git(src, "status", "--porcelain")
        if sha and re.fullmatch(r"[0-9a-f]{7,40}", sha) and status is not None:
            return f"git-{sha}" if not status else f"git-{sha}-dirty-{tree_digest(src)[:12]}"
    return "local-" + tree_digest(src)[:12]


def is_checkout_version(version: str) -> bool:
    """A --source build's name (no pin, no registry digest)."""
    return version.startswith(("local-", "git-"))


@contextlib.contextmanager
def build_lock(out: Path):
    """One build of a folder at a time, across processes: two `build --force` of one stack
    unpacked into the same src/ and wrote the same library at once.  The second waits,
    then finds the first's build current (or rebuilds it, with --force)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_target(recipe: StackRecipe, version: str, source: Path | None = None,
                 sanitize: bool = False, force: bool = False) -> Path:
    """Build one version (or a local checkout); returns the library path."""
    out = recipe.build_folder(version)
    with build_lock(out):
        existed = out.exists()
        try:
            return _build_target(recipe, version, source, sanitize, force)
        except BaseException:
            if not existed:
                _remove_failed(out)
            raise


def _remove_failed(out: Path) -> None:
    """A build that failed before build.sh ran (no such release, a bad download, an archive
    or a --source folder refused) leaves no folder behind: an empty build/<stack>/<version>/
    looked like a build to whoever listed the folder.  Once build.sh ran, its build.log stays
    (the error names it).  Only a folder this build created is removed."""
    if (out / "build.log").exists():
        return
    shutil.rmtree(out, ignore_errors=True)


def _build_target(recipe: StackRecipe, version: str, source: Path | None, sanitize: bool, force: bool) -> Path:
    out = recipe.build_folder(version)
    library = recipe.library(version)
    info_path = out / "build-info.json"
    if not force and source is None and is_current(recipe, version) \
            and _build_info(recipe, version).get("sanitize", False) == sanitize:
        return library
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    if source is None:
        pin = recipe.versions.get(version)
        if pin is None:                 # a published release: the registry's digest, locked
            from .registry import resolve_release
            pin = resolve_release(recipe, version, record=False)
            if pin.get("yanked"):
                _log(f"  warning: {recipe.name} {version} is yanked on its registry; building it anyway")
        archive = fetch(pin["url"], pin["sha256"])
        if version not in recipe.versions:
            from .registry import record_release
            record_release(recipe, version, pin)    # verified: the lock learns it (once)
        unpack(archive, out / "src")
        src = out / "src" / pin.get("subdir", "")
        origin = {"url": pin["url"], "sha256": pin["sha256"]}
        if pin.get("yanked"):
            origin["yanked"] = True
        if version not in recipe.versions:
            _check_requirements(recipe, version, src)
    else:
        src = source.resolve()
        if not src.is_dir():
            raise SetupError(f"--source {source}: not a folder")
        origin = {"source": str(src)}
    script = recipe.folder / "build.sh"
    _log(f"  building {recipe.name}@{version} ({script.relative_to(implementations_dir().parent)})")
    code, log_path = run_build_script(script, src, out, version, CCDIFF_SANITIZE="1" if sanitize else "0")
    if code != 0 or not library.exists():
        _explain_failure(recipe, version, log_path)
        raise SetupError(f"building {recipe.name}@{version} failed (exit {code}); "
                         f"full log: {log_path}\n" + log_tail(log_path))
    from .probe import probe
    info = dict(origin, stack=recipe.name, version=version, sanitize=sanitize, recipe=recipe_digest(recipe),
                library_sha256=sha256_of(library) if library.is_file() else None,
                seconds=round(time.monotonic() - started, 1), features=probe(recipe.name, src),
                vcs=_vcs_info(src))
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    _log(f"  built {library} in {info['seconds']} s")
    return library


def _vcs_info(src: Path) -> dict:
    """The commit a crate was packaged from (.cargo_vcs_info.json), where it ships one."""
    for folder in (src, src.parent):
        try:
            data = json.loads((folder / ".cargo_vcs_info.json").read_text())
            return {"commit": data["git"]["sha1"], "path_in_vcs": data.get("path_in_vcs", "")}
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return {}


def _check_requirements(recipe: StackRecipe, version: str, src: Path) -> None:
    """What the adapter needs from the code (registry.toml [[supported.requires]]), checked
    before compiling: a release that lacks it fails with the range and what changed."""
    from .registry import load_config
    config = load_config(recipe.folder, recipe.name)
    if config is None:
        return
    for need in config.extra.get("supported", {}).get("requires", []):
        text = ""
        for candidate in (src / need["file"], src / recipe.name / need["file"]):
            if candidate.is_file():
                text = candidate.read_text(errors="replace")
                break
        if not re.search(need["pattern"], text):
            raise SetupError(f"{recipe.name} {version} cannot be driven by the adapter (supported: "
                             f"{config.supported_text()}): it lacks {need['what']} ({need['file']})")


def _explain_failure(recipe: StackRecipe, version: str, log_path: Path) -> None:
    """A patch that does not apply is a layout change, not a compiler error: say so."""
    from .registry import load_config
    config = load_config(recipe.folder, recipe.name)
    if config is None:
        return
    lines = log_path.read_text(errors="replace").splitlines()
    reason = next((line for line in lines if line.startswith("apply.py:") and
                   any(word in line for word in ("anchor", "not found", "found 0 times", "not supported"))), None)
    if reason is None:
        errors = [line for line in lines if line.startswith("error[")]
        if errors and version not in recipe.versions:
            reason = f"{len(errors)} compile errors in the adapter/facade, first: {errors[0]}"
    if reason:
        raise SetupError(f"{recipe.name} {version} cannot be driven by the adapter (supported: "
                         f"{config.supported_text()}): {reason}; full log: {log_path}")


def build_spec(text: str, source: Path | None = None, sanitize: bool = False, force: bool = False) -> list[Path]:
    """`stack`, `stack@version`, or `all` (every pinned version of every stack)."""
    recipes = load_recipes()
    if text == "all":
        return [build_target(r, v, sanitize=sanitize, force=force)
                for r in recipes.values() for v in r.versions]
    target = resolve(text, recipes)
    if target.kind == "oracle":
        return []
    if source is not None:
        if not source.is_dir():
            raise SetupError(f"--source {source}: not a folder")
        version = _local_version(source)
        return [build_target(target.recipe, version, source=source, sanitize=sanitize)]
    if target.spec.version is None and "@" not in text:
        return [build_target(target.recipe, v, sanitize=sanitize, force=force) for v in target.recipe.versions]
    return [build_target(target.recipe, target.version, sanitize=sanitize, force=force)]


def ensure_built(spec: str | Target) -> None:
    """Build a spec's library if it is missing or stale (tests and `replay --build` use this)."""
    target = resolve(spec) if isinstance(spec, str) else spec
    if target.kind != "native" or is_checkout_version(target.version):
        return                                      # a local checkout is built by `build --source`
    recipe = target.recipe
    if not is_current(recipe, target.version):      # a sanitizer build stays a sanitizer build
        sanitize = bool(_build_info(recipe, target.version).get("sanitize", False))
        build_target(recipe, target.version, sanitize=sanitize, force=True)

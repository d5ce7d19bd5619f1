"""Where a stack's code comes from upstream, and code references as permalinks.

implementations/<stack>/provenance.toml names, per pinned version, the upstream
repository, the exact commit (or tag) and where the packaged tree sits in that
repository.  Profiles and notes write code references the way a reader does
("src/recovery/congestion/cubic.rs:151-176, mod.rs:169-176 (0.30.0)"); this
module turns each line range into a link to those lines at that commit -- and
leaves it plain text whenever the file or the version cannot be pinned down,
because a wrong link is worse than none.
"""
from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

# A file reference: a path ending in a source suffix, optionally ":lines".
_FILE = re.compile(r"([A-Za-z0-9_][\w/.-]*\.(?:rs|c|h|cc|cpp|py))(?::(\d+(?:-\d+)?))?")   # .py: aioquic
# Further line ranges of the same file: ", 189", ", 274-285", " then 954-962", ",91".
_MORE = re.compile(r"(\s*(?:,|then)\s*)(\d+(?:-\d+)?)(?![\w.:/-])")
# "(0.30.0" or "(1.25.0, fix ..." : the version the references before it are about.
_VERSION = re.compile(r"\((\d+(?:\.\d+)+)\b")


def pin(recipe, version: str) -> dict:
    """provenance.toml's entry for one version, with the stack's upstream_repo and its web
    front end (`web`: "github", the default, or "cgit" for git.kernel.org); {} if none."""
    if recipe is None:
        return {}
    entry = recipe.provenance.get("versions", {}).get(version)
    if not entry:
        return {}
    return dict(entry, upstream_repo=recipe.provenance.get("upstream_repo", ""),
                web=recipe.provenance.get("web", "github"))


def report_to(recipe) -> dict:
    """Where the stack takes bug reports, from its provenance.toml (`report_to`, words, and
    `report_url`): {"text", "url"}, or {} when not recorded -- never a guessed GitHub tracker
    (Linux takes reports by email, and its GitHub copies are mirrors)."""
    data = recipe.provenance if recipe is not None else {}
    if not data.get("report_to"):
        return {}
    return {"text": data["report_to"], "url": data.get("report_url", "")}


def source_root(recipe, version: str) -> Path | None:
    """The unpacked packaged tree of a pinned version (build/<stack>/<version>/src/<subdir>)."""
    spec = recipe.versions.get(version) if recipe is not None else None
    if not spec:
        return None
    root = recipe.build_folder(version) / "src" / spec.get("subdir", "")
    return root if root.is_dir() else None


@lru_cache(maxsize=16)
def _files(root: str) -> tuple:
    """Every file of a tree, as '/'-joined relative paths (read once per report)."""
    out = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(folder, root)
        out += [n if rel == "." else f"{rel}/{n}".replace(os.sep, "/") for n in sorted(names)]
    return tuple(out)


def resolve_path(name: str, files, near: str | None = None) -> str | None:
    """The one file of the tree `name` means, or None (missing or ambiguous).

    `name` may be bare ("cubic.rs") or partial ("congestion/mod.rs"): it must
    match a whole trailing part of exactly one path.  A bare name written right
    after a full path ("cubic.rs:292-309, mod.rs:169-176") means the sibling,
    as a reader takes it, so the sibling of `near` wins when it exists."""
    if near and "/" not in name:
        sibling = near.rsplit("/", 1)[0] + "/" + name if "/" in near else name
        if sibling in files:
            return sibling
    hits = [f for f in files if f == name or f.endswith("/" + name)]
    return hits[0] if len(hits) == 1 else None


def permalink(pinned: dict, path: str, lines: str) -> str:
    """https://github.com/OWNER/REPO/blob/COMMIT/PATH#L152-L176 (commit preferred: tags move);
    on cgit (git.kernel.org) REPO/tree/PATH?h=TAG#n152: cgit anchors one line, not a range."""
    prefix = pinned.get("path_in_repo", "").strip("/")
    full = f"{prefix + '/' if prefix else ''}{path}"
    if pinned.get("web") == "cgit":
        return f"{tree_url(pinned, full)}#n{lines.split('-')[0]}"
    ref = pinned.get("upstream_commit") or pinned["upstream_tag"]
    anchor = "#" + "-".join(f"L{n}" for n in lines.split("-"))
    return f"{pinned['upstream_repo']}/blob/{ref}/{full}{anchor}"


def tree_url(pinned: dict, path: str = "") -> str:
    """The repository's tree (or one file) at the pinned commit or tag."""
    repo, commit, tag = pinned["upstream_repo"], pinned.get("upstream_commit"), pinned.get("upstream_tag")
    if pinned.get("web") == "cgit":
        return f"{repo}/tree/{path}?{'id=' + commit if commit else 'h=' + tag}"
    return f"{repo}/tree/{commit or tag}" + (f"/{path}" if path else "")


def _version_after(text: str, pos: int, default: str | None) -> str | None:
    """The version a reference at `pos` is about: the next '(X.Y...' annotation, else default."""
    match = _VERSION.search(text, pos)
    return match.group(1) if match else default


def link_code(text: str, recipe, default_version: str | None = None) -> list:
    """`text` split into pieces [{"text", "url"}]; url is None for plain text.

    `default_version` is the version a reference without a '(VERSION)' after it
    is about (a stack.toml note is about its own version; a profile entry has none)."""
    pieces, pos, near = [], 0, None
    for match in _FILE.finditer(text):
        name, lines = match.group(1), match.group(2)
        version = _version_after(text, match.end(), default_version)
        pinned = pin(recipe, version) if version else {}
        root = source_root(recipe, version) if pinned else None
        path = resolve_path(name, _files(str(root)), near) if root else None
        near = path or (name if "/" in name else near)
        _plain(pieces, text[pos:match.start()])
        if not (path and lines and (pinned.get("upstream_commit") or pinned.get("upstream_tag"))):
            _plain(pieces, match.group(0))
            pos = match.end()
            continue
        pieces.append({"text": match.group(0), "url": permalink(pinned, path, lines)})
        pos = _more_ranges(text, match.end(), pinned, path, pieces)
    _plain(pieces, text[pos:])
    return pieces


def _more_ranges(text: str, pos: int, pinned: dict, path: str, pieces: list) -> int:
    """Link ', 189, 274-285' after a linked reference to the same file; returns the new position."""
    while (more := _MORE.match(text, pos)) is not None:
        _plain(pieces, more.group(1))
        pieces.append({"text": more.group(2), "url": permalink(pinned, path, more.group(2))})
        pos = more.end()
    return pos


def _plain(pieces: list, text: str) -> None:
    if not text:
        return
    if pieces and pieces[-1]["url"] is None:
        pieces[-1] = {"text": pieces[-1]["text"] + text, "url": None}
    else:
        pieces.append({"text": text, "url": None})


@lru_cache(maxsize=1)
def ccdiff_version() -> str:
    """ccdiff's version with its commit, e.g. '0.1.0 (5502c43+dirty)'; just the version
    outside a git checkout.  '+dirty' counts tracked files only (as `git describe --dirty`):
    reports written into the checkout are ignored files and must not change the next
    report's bytes.  Computed once per process: one report, one answer."""
    from . import __version__
    root = Path(__file__).resolve().parent.parent
    sha = _git(root, "rev-parse", "--short", "HEAD")
    if not sha:
        return __version__
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    return f"{__version__} ({sha}{'+dirty' if dirty else ''})"


def _git(root: Path, *args: str) -> str:
    """git's stdout, stripped; '' when git or the checkout is not there."""
    import subprocess
    try:
        done = subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""

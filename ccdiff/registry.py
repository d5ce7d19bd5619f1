"""Every published release of a stack: the registry's own index, a lock file, a supported range.

A stack's ``implementations/<stack>/registry.toml`` names where its releases are
published (crates.io or PyPI), how an archive unpacks, and the range of releases
its adapter can drive.  ``ccdiff build STACK@VERSION`` for a version that
stack.toml does not pin looks the release up in the registry's index (crates.io's
sparse index: the ``cksum`` field is the .crate's sha256, ``yanked`` its flag;
PyPI's JSON API: the sdist's ``digests.sha256``), downloads it, verifies it against
that digest, and records the release in ``implementations/<stack>/releases.lock``
(committed, like Cargo.lock).  Later builds use the lock's digest, not the index:
a release republished with other bytes is refused.

Neither registry.toml nor releases.lock is read by build.sh, so neither is part of
the recipe digest (ccdiff/build.py): recording a release does not make builds stale.

Endpoints can be pointed elsewhere (tests use local file:// fixtures):
CCDIFF_CRATES_INDEX (default https://index.crates.io), CCDIFF_CRATES_DL
(default https://static.crates.io/crates), CCDIFF_PYPI (default https://pypi.org/pypi).
"""
from __future__ import annotations

import json
import os
import re
import sys
import tomllib
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SetupError

CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
LOCK_NAME = "releases.lock"
CONFIG_NAME = "registry.toml"


@dataclass
class Release:
    """One published release as its registry's index lists it."""
    version: str                 # the package's version (crate / sdist)
    sha256: str
    url: str
    yanked: bool = False
    rust_version: str | None = None


@dataclass
class RegistryConfig:
    stack: str
    kind: str                    # "crates" or "pypi"
    package: str
    subdir: str                  # template: {package}, {version}
    supported_min: str | None = None
    supported_max: str | None = None
    verified_max: str | None = None
    unsupported_reason: str = ""
    same_version: bool = True    # the stack's version is the package's (quiche), else mapped
    upstream_repo: str = ""      # https://github.com/owner/name (links only)
    changelog: str = ""          # template: {tag}
    tag: str = "{version}"
    folder: Path | None = None
    extra: dict = field(default_factory=dict)

    @property
    def lock_path(self) -> Path:
        return self.folder / LOCK_NAME

    def supported_text(self) -> str:
        low = self.supported_min or "the first release"
        high = self.supported_max or (f"{self.verified_max} (newest verified)" if self.verified_max else "latest")
        return f"{low} .. {high}"


def version_key(text: str) -> tuple:
    """Numeric release order: 0.9.0 < 0.23.6 < 0.26.1; pre-releases (rc1, a2, dev) before the release."""
    parts = []
    for piece in re.split(r"[.\-+]", text):
        m = re.match(r"^(\d+)(.*)$", piece)
        if m:
            parts.append((int(m.group(1)), 1 if not m.group(2) else 0, m.group(2)))
        else:
            parts.append((-1, 0, piece))
    return tuple(parts)


def is_prerelease(version: str) -> bool:
    return bool(re.search(r"[A-Za-z]", version))


def load_config(folder: Path, stack: str) -> RegistryConfig | None:
    path = folder / CONFIG_NAME
    if not path.exists():
        return None
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SetupError(f"{path}: {exc}") from None
    supported = data.get("supported", {})
    upstream = data.get("upstream", {})
    return RegistryConfig(
        stack=stack, kind=data["kind"], package=data["package"], subdir=data.get("subdir", "{package}-{version}"),
        supported_min=supported.get("min"), supported_max=supported.get("max"),
        verified_max=supported.get("verified_max"), unsupported_reason=supported.get("reason", ""),
        same_version=bool(data.get("same_version", True)), upstream_repo=upstream.get("repo", ""),
        changelog=upstream.get("changelog", ""), tag=upstream.get("tag", "{version}"), folder=folder, extra=data)


# --- registry indexes -------------------------------------------------------------------------

def crates_index_path(name: str) -> str:
    """The sparse index's path of a crate (https://doc.rust-lang.org/cargo/reference/registry-index.html)."""
    n = name.lower()
    if len(n) <= 2:
        return f"{len(n)}/{n}"
    if len(n) == 3:
        return f"3/{n[0]}/{n}"
    return f"{n[0:2]}/{n[2:4]}/{n}"


def parse_crates_index(text: str, package: str, download_base: str) -> list[Release]:
    """One JSON object per line: vers, cksum (sha256 of the .crate), yanked."""
    releases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            version, cksum = entry["vers"], entry["cksum"]
        except (ValueError, KeyError, TypeError) as exc:
            raise SetupError(f"crates.io index of {package}: line {number}: not an index entry ({exc})") from None
        if not re.fullmatch(r"[0-9a-f]{64}", str(cksum)):
            raise SetupError(f"crates.io index of {package}: line {number}: cksum {cksum!r} is not a sha256")
        releases.append(Release(version, cksum, f"{download_base}/{package}/{package}-{version}.crate",
                                bool(entry.get("yanked", False)), entry.get("rust_version")))
    return releases


def parse_pypi_json(data: dict, package: str, base_url: str) -> list[Release]:
    """PyPI's JSON API: per release its files; the sdist's digests.sha256 and yanked flag."""
    releases = []
    try:
        items = data["releases"].items()
    except (KeyError, AttributeError, TypeError):
        raise SetupError(f"PyPI JSON of {package}: no 'releases'") from None
    for version, files in items:
        for f in files or []:
            if f.get("packagetype") != "sdist":
                continue
            sha = (f.get("digests") or {}).get("sha256", "")
            if not re.fullmatch(r"[0-9a-f]{64}", sha):
                raise SetupError(f"PyPI JSON of {package} {version}: sdist without a sha256 digest")
            url = f.get("url", "")
            if not urllib.parse.urlparse(url).scheme:          # some mirrors answer relative links
                url = "https://files.pythonhosted.org/" + re.sub(r"^(\.\./)*(packages/)?", "", url)
            releases.append(Release(version, sha, url, bool(f.get("yanked", False))))
            break
    return releases


def _get(url: str) -> bytes:
    context = None
    if url.startswith("https:") and os.path.exists(CA_BUNDLE):
        import ssl
        context = ssl.create_default_context(cafile=CA_BUNDLE)
    try:
        with urllib.request.urlopen(url, timeout=60, context=context) as response:
            return response.read()
    except OSError as exc:
        raise SetupError(f"cannot read the registry index {url}: {exc}") from None


_CACHE: dict = {}


def published(config: RegistryConfig) -> list[Release]:
    """Every release the registry lists, oldest first (one index read per process)."""
    key = (config.kind, config.package)
    if key in _CACHE:
        return _CACHE[key]
    if config.kind == "crates":
        base = os.environ.get("CCDIFF_CRATES_INDEX", "https://index.crates.io").rstrip("/")
        dl = os.environ.get("CCDIFF_CRATES_DL", "https://static.crates.io/crates").rstrip("/")
        text = _get(f"{base}/{crates_index_path(config.package)}").decode()
        releases = parse_crates_index(text, config.package, dl)
    elif config.kind == "pypi":
        base = os.environ.get("CCDIFF_PYPI", "https://pypi.org/pypi").rstrip("/")
        url = f"{base}/{config.package}/json"
        try:
            data = json.loads(_get(url))
        except ValueError:
            raise SetupError(f"{url}: not JSON") from None
        releases = parse_pypi_json(data, config.package, url)
    else:
        raise SetupError(f"{config.folder / CONFIG_NAME}: unknown registry kind {config.kind!r}")
    releases.sort(key=lambda r: version_key(r.version))
    _CACHE[key] = releases
    return releases


# --- the lock file ------------------------------------------------------------------------------

def load_lock(path: Path) -> dict:
    """version -> {url, sha256, subdir, yanked, package_version}; {} without a lock."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        releases = data["releases"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SetupError(f"{path}: not a releases lock ({exc})") from None
    for version, entry in releases.items():
        if not isinstance(entry, dict) or not re.fullmatch(r"[0-9a-f]{64}", str(entry.get("sha256", ""))) \
                or not entry.get("url"):
            raise SetupError(f"{path}: release {version}: needs url and a sha256")
    return releases


def save_lock(path: Path, stack: str, registry: str, releases: dict) -> None:
    ordered = {v: {k: releases[v][k] for k in sorted(releases[v])} for v in sorted(releases, key=version_key)}
    document = {"comment": "Releases built by name (ccdiff build STACK@VERSION): the registry's own digest, "
                           "recorded the first time; later builds must match it. Generated; commit it.",
                "stack": stack, "registry": registry, "releases": ordered}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n")
    tmp.replace(path)


def lock_entry(config: RegistryConfig, release: Release) -> dict:
    return {"url": release.url, "sha256": release.sha256, "yanked": release.yanked,
            "package_version": release.version,
            "subdir": config.subdir.format(package=config.package, version=release.version)}


# --- support -----------------------------------------------------------------------------------

def support(config: RegistryConfig, version: str) -> tuple[bool, str]:
    """(drivable, why not) from the adapter's declared range."""
    key = version_key(version)
    if config.supported_min and key < version_key(config.supported_min):
        return False, (f"{config.stack} {version} is older than the adapter's supported range "
                       f"{config.supported_text()}: {config.unsupported_reason}")
    if config.supported_max and key > version_key(config.supported_max):
        return False, (f"{config.stack} {version} is newer than the adapter's supported range "
                       f"{config.supported_text()}")
    return True, ""


def resolve_release(recipe, version: str, record: bool = True) -> dict:
    """The pin of a release that stack.toml does not pin: from the lock, else from the registry
    (then recorded in the lock).  SetupError when it is unpublished or outside the supported range."""
    config = load_config(recipe.folder, recipe.name)
    if config is None:
        raise SetupError(f"{recipe.name} has no pinned version {version}; pinned: {', '.join(recipe.versions)} "
                         f"(and no implementations/{recipe.name}/{CONFIG_NAME} to look releases up)")
    ok, why = support(config, version)
    if not ok:
        raise SetupError(why)
    if config.verified_max and version_key(version) > version_key(config.verified_max):
        print(f"  warning: {recipe.name} {version} is newer than the newest release the adapter was "
              f"verified with ({config.verified_max}); trying it", file=sys.stderr)
    lock = load_lock(config.lock_path)
    if version in lock:
        return dict(lock[version], version=version)
    if not config.same_version:
        raise SetupError(f"{recipe.name} {version}: the {config.package} package's versions are not "
                         f"{recipe.name}'s; known {recipe.name} releases: {', '.join(known_versions(recipe))}")
    releases = {r.version: r for r in published(config)}
    if version not in releases:
        recent = [v for v in releases if not releases[v].yanked][-8:]
        raise SetupError(f"{recipe.name} {version} is not published on {registry_name(config)} "
                         f"({config.package}); newest: {', '.join(recent)}")
    entry = dict(lock_entry(config, releases[version]), version=version)
    if record:
        record_release(recipe, version, entry)
    return entry


def record_release(recipe, version: str, entry: dict) -> None:
    """Add a release to the lock file (after its download matched the digest); a no-op when
    the lock has it already."""
    config = load_config(recipe.folder, recipe.name)
    lock = load_lock(config.lock_path)
    if version in lock:
        return
    lock[version] = {k: v for k, v in entry.items() if k != "version"}
    save_lock(config.lock_path, recipe.name, f"{registry_name(config)}:{config.package}", lock)
    print(f"  recorded {recipe.name} {version} (sha256 {entry['sha256'][:16]}..., from the "
          f"{registry_name(config)} index) in {config.lock_path}", file=sys.stderr)


def registry_name(config: RegistryConfig) -> str:
    return {"crates": "crates.io", "pypi": "PyPI"}.get(config.kind, config.kind)


def known_versions(recipe) -> list[str]:
    config = load_config(recipe.folder, recipe.name)
    lock = load_lock(config.lock_path) if config else {}
    return sorted(set(recipe.versions) | set(lock), key=version_key)


def upstream_links(config: RegistryConfig | None, version: str) -> dict:
    if config is None or not config.upstream_repo:
        return {}
    tag = config.tag.format(version=version)
    links = {"tag": f"{config.upstream_repo}/releases/tag/{tag}"}
    if config.changelog:
        links["changelog"] = config.changelog.format(tag=tag, version=version)
    return links

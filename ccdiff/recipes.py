"""The recipes ccdiff knows -- the built-in oracles and implementations/<stack>/stack.toml, and a
spec resolved against them -- with nothing about building them, so build.py can use them while
stacks.py (opening a controller, listing what is built) uses build.py."""
from __future__ import annotations

import importlib.util
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SetupError
from .paths import build_dir, implementations_dir
from .spec import Spec, parse_spec

ORACLES = {
    "oracle": "RFC 9438 CUBIC reference (options: idle=correct|last-send|none, fast_convergence=on|off, "
              "undo=on|off; variants a profile selects: epoch=ca-start|congestion-event, reno_friendly=max|set, "
              "ecn=on|off, app_limited=on|off, growth=per-packet|per-ack, recovery=send-time|largest-acked)",
    "oracle-reno": "RFC 9002 NewReno reference, the control (variants: ecn=on|off, app_limited=on|off, "
                   "growth=per-packet|per-ack, recovery=send-time|largest-acked)",
}
LIBRARY_NAME = "libccdiff_adapter.so"
PYTHON_ADAPTER_NAME = "ccdiff_adapter.py"   # a language = "python" stack's build (ccdiff/pyadapter.py)


@dataclass
class StackRecipe:
    name: str
    folder: Path
    language: str
    default_version: str
    versions: dict            # version -> {"url", "sha256", "subdir"}
    options: list
    aliases: dict             # alias -> "key=value,..."
    description: str = ""
    loss_applied_with_ack: bool = False  # loss snapshots are provisional (docs/adapters.md)
    provenance: dict = field(default_factory=dict)   # provenance.toml (ccdiff/provenance.py)
    coverage: dict = field(default_factory=dict)     # coverage.toml (ccdiff/coverage.py)

    def build_folder(self, version: str) -> Path:
        return build_dir() / self.name / version

    @property
    def artifact_name(self) -> str:
        """What build.sh leaves in the build folder: the C ABI library, or for a stack
        whose controller is Python, the adapter module run in process."""
        return PYTHON_ADAPTER_NAME if self.language == "python" else LIBRARY_NAME

    def library(self, version: str) -> Path:
        return self.build_folder(version) / self.artifact_name


@dataclass
class Target:
    """A spec resolved to something that can be opened."""
    spec: Spec
    label: str                   # what reports call it, e.g. quiche@0.26.0:idle_fix=off
    kind: str                    # "oracle" or "native"
    family: str                  # "cubic" or "reno": which reference oracle it is compared with
    recipe: StackRecipe | None = None
    version: str | None = None
    options: tuple = field(default=())

    @property
    def options_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.options)


def load_recipes() -> dict[str, StackRecipe]:
    recipes = {}
    root = implementations_dir()
    for path in sorted(root.glob("*/stack.toml")):
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise SetupError(f"{path}: {exc}") from None
        versions = {v["version"]: v for v in data.get("versions", [])}
        recipes[data["name"]] = StackRecipe(
            name=data["name"], folder=path.parent, language=data.get("language", ""),
            default_version=data.get("default_version") or next(iter(versions), ""),
            versions=versions, options=data.get("options", []),
            aliases=data.get("aliases", {}), description=data.get("description", ""),
            loss_applied_with_ack=bool(data.get("loss_applied_with_ack", False)),
            provenance=_load_toml(path.with_name("provenance.toml")),
            coverage=_load_toml(path.with_name("coverage.toml")))
    return recipes


def _load_toml(path: Path) -> dict:
    """One of the folder's data files (provenance.toml: upstream repository, commit and path
    per pinned version; coverage.toml: the controller's files); {} where there is none."""
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SetupError(f"{path}: {exc}") from None


def _family(options: tuple) -> str:
    cc = dict(options).get("cc", "cubic")
    return "reno" if cc in ("reno", "newreno") else "cubic"


def resolve(spec: Spec | str, recipes: dict | None = None) -> Target:
    if isinstance(spec, str):
        spec = parse_spec(spec)
    if spec.name in ORACLES:
        if spec.version:
            raise SetupError(f"{spec}: the oracle has no versions")
        family = "reno" if spec.name == "oracle-reno" else "cubic"
        return Target(spec, str(spec), "oracle", family, options=spec.options)
    recipes = load_recipes() if recipes is None else recipes
    name, options = spec.name, spec.options
    if name not in recipes:
        for recipe in recipes.values():
            if name in recipe.aliases:
                alias_opts = parse_spec(f"x:{recipe.aliases[name]}").options
                name, options = recipe.name, alias_opts + options
                break
        else:
            known = sorted(ORACLES) + sorted(recipes) + sorted(a for r in recipes.values() for a in r.aliases)
            raise SetupError(f"unknown stack {spec.name!r}; known: {', '.join(known)}")
    recipe = recipes[name]
    version = spec.version or recipe.default_version
    if version not in recipe.versions and not version.startswith(("local-", "git-")) \
            and not (recipe.folder / "registry.toml").exists():
        raise SetupError(f"{spec}: {name} has no pinned version {version}; pinned: "
                         f"{', '.join(recipe.versions)} (or build a local checkout with "
                         f"`ccdiff build {name} --source DIR`)")
    return Target(spec, str(spec), "native", _family(options), recipe, version, options)


_MODULES: dict = {}


def folder_module(folder: Path, stem: str):
    """A stack folder's own Python file, implementations/<stack>/<stem>.py, as a module
    (its mechanisms.py, which ccdiff/mechanisms.py registers; its entry_points.py, which
    tests/test_entry_points.py calls), or None where the folder has none.  Loaded once per
    file; it may import ccdiff, never another stack's folder."""
    path = (folder / f"{stem}.py").resolve()
    if path in _MODULES:
        return _MODULES[path]
    module = None
    if path.is_file():
        name = "ccdiff_stack_" + "".join(c if c.isalnum() else "_" for c in folder.name) + "_" + stem
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module      # dataclasses and pickle look a class's module up by name
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
    _MODULES[path] = module
    return module

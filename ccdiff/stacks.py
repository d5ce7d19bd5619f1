"""The stacks ccdiff knows: the built-in oracles and implementations/<stack>/stack.toml."""
from __future__ import annotations

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
            provenance=_load_provenance(path.with_name("provenance.toml")))
    return recipes


def _load_provenance(path: Path) -> dict:
    """Upstream repository, commit and path per pinned version; {} where there is none."""
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


def open_controller(target: Target, max_datagram_size: int, initial_rtt_us: int):
    """A fresh controller for one run.  Raises SetupError with the fixing command."""
    if target.kind == "oracle":
        from oracle import NewReno
        opts = dict(target.options)
        if target.spec.name == "oracle-reno":
            return NewReno(max_datagram_size, initial_rtt_us, **_oracle_options(target.label, opts, False))
        return _open_cubic_oracle(target.label, opts, max_datagram_size, initial_rtt_us)
    from .clock import clock_base_us
    from .remote import RemoteController, remote_address
    base = clock_base_us()
    address = remote_address(target.recipe.name)
    if address is not None:          # an adapter container (ccdiff/remote.py)
        return RemoteController(address, target, max_datagram_size, initial_rtt_us, base)
    library = target.recipe.library(target.version)
    if not library.exists():
        raise SetupError(f"{target.recipe.name}@{target.version} is not built; run: "
                         f"ccdiff build {target.recipe.name}@{target.version}")
    _refuse_stale(target)
    from .probe import filter_options
    options = filter_options(target.label, target.version, features_of(target.recipe, target.version),
                             target.options)
    options_text = ",".join(f"{k}={v}" for k, v in options)
    return open_adapter(target.recipe, library, max_datagram_size, initial_rtt_us, options_text, base)


def open_adapter(recipe: StackRecipe, library: Path, max_datagram_size: int, initial_rtt_us: int,
                 options_text: str, base: int):
    """The built adapter in this process: a C ABI library through ctypes, or a Python
    adapter module (ccdiff/pyadapter.py).  `ccdiff serve` opens through here too, so
    --isolate and adapter containers treat both alike."""
    if recipe.language == "python":
        from .pyadapter import PythonController
        return PythonController(str(library), max_datagram_size, initial_rtt_us, options_text, base)
    from .native import NativeController
    return NativeController(str(library), max_datagram_size, initial_rtt_us, options_text, base)


def build_info(recipe: StackRecipe, version: str) -> dict:
    import json
    try:
        return json.loads((recipe.build_folder(version) / "build-info.json").read_text())
    except (OSError, ValueError):
        return {}


def features_of(recipe: StackRecipe, version: str) -> dict:
    """What a built release supports, probed from its code (build-info.json "features");
    builds made before the probe existed are probed from their unpacked source now."""
    info = build_info(recipe, version)
    if "features" in info:
        return info["features"]
    from .probe import probe
    src = recipe.build_folder(version) / "src"
    pin = recipe.versions.get(version, {})
    if pin.get("subdir") and (src / pin["subdir"]).is_dir():
        return probe(recipe.name, src / pin["subdir"])
    if info.get("source"):
        return probe(recipe.name, Path(info["source"]))
    return {}


_CURRENT_BUILDS: set = set()   # (stack, version) found current in this process: hashed once


def _refuse_stale(target: Target) -> None:
    """A library built from adapter sources that changed since would answer for code that
    is no longer in the repository: every command refuses it (conform did already), and
    --build rebuilds it."""
    key = (target.recipe.name, target.version)
    if key in _CURRENT_BUILDS or target.version.startswith(("local-", "git-")):
        return                       # a local checkout (build --source) has no pinned digest
    from .build import is_stale
    if is_stale(target.recipe, target.version):
        raise SetupError(f"{target.recipe.name}@{target.version} was built from an older adapter "
                         f"(implementations/{target.recipe.name}/ changed since); run: "
                         f"ccdiff build {target.recipe.name}@{target.version}")
    _CURRENT_BUILDS.add(key)


def oracle_option_values(cubic: bool) -> dict:
    """Each option an oracle accepts, with its values (oracle/base.py, oracle/cubic.py): the
    mutants that measure detection power and the variants a profile selects."""
    from oracle import EPOCH_MODES, GROWTH_MODES, IDLE_MODES, RECOVERY_MODES, RENO_FRIENDLY_MODES
    switch = ("on", "off")
    both = {"ecn": switch, "app_limited": switch, "growth": GROWTH_MODES, "recovery": RECOVERY_MODES}
    if not cubic:
        return both
    return {"idle": IDLE_MODES, "fast_convergence": switch, "undo": switch, "epoch": EPOCH_MODES,
            "reno_friendly": RENO_FRIENDLY_MODES, **both}


def _oracle_options(label: str, opts: dict, cubic: bool) -> dict:
    """The keyword arguments of an oracle's options; SetupError names what it accepts."""
    accepted = oracle_option_values(cubic)
    kwargs = {}
    for key, value in opts.items():
        if value not in accepted.get(key, ()):
            raise SetupError(f"{label}: unknown option {key}={value}; it accepts "
                             + ", ".join(f"{k}={'|'.join(v)}" for k, v in accepted.items()))
        kwargs[key] = {"on": True, "off": False}.get(value, value) if accepted[key] == ("on", "off") else value
    return kwargs


def _open_cubic_oracle(label: str, opts: dict, mds: int, initial_rtt_us: int):
    from oracle import Cubic
    return Cubic(mds, initial_rtt_us, **_oracle_options(label, opts, True))


def available() -> list[dict]:
    """Every stack and version, with whether it is built (for `ccdiff stacks`)."""
    from .build import is_stale
    from .remote import hello
    rows = [{"stack": name, "version": "", "built": True, "stale": False, "note": note}
            for name, note in ORACLES.items()]
    for recipe in load_recipes().values():
        versions = list(recipe.versions)
        remote = hello(recipe.name)      # served by an adapter container: what it has built
        if remote is not None:
            served = remote["versions"].get(recipe.name, [])
            versions += [v for v in served if v not in versions]
        folder = build_dir() / recipe.name
        if folder.is_dir():
            from .registry import version_key
            artifact = recipe.artifact_name
            releases = [p.name for p in folder.iterdir() if p.name not in versions
                        and (p / artifact).exists() and not p.name.startswith(("local-", "git-"))]
            versions += sorted(releases, key=version_key)
            versions += sorted(p.name for p in folder.iterdir() if p.name.startswith(("local-", "git-"))
                               and (p / artifact).exists())     # a checkout build under way: not yet
        for version in versions:
            # The default run (conform, matrix without --stack) takes the reviewed pins only,
            # built here or served by a container; other releases built by name (bisect) and
            # checkout builds (build --source) only when named: leftover builds of a deleted
            # temp folder joined every default run silently (issue 30).
            default = version in recipe.versions
            built = version in served if remote is not None else recipe.library(version).exists()
            stale = remote is None and not version.startswith(("local-", "git-")) and is_stale(recipe, version)
            supports = ""
            if remote is None and built:
                from .probe import describe
                supports = describe(features_of(recipe, version))
            names = [recipe.name] + sorted(recipe.aliases)
            checkout = checkout_source(recipe, version) if remote is None else None
            for name in names:
                row = {"stack": name, "version": version, "built": built, "stale": stale,
                       "default": default, "supports": supports if name == recipe.name else "",
                       "note": recipe.aliases.get(name, "") or ", ".join(recipe.options)}
                if checkout is not None and name == recipe.name:     # an alias: the same build
                    row.update(checkout)
                rows.append(row)
    return rows


def checkout_source(recipe: StackRecipe, version: str) -> dict | None:
    """For a checkout build (build --source): {"source": the folder it was built from,
    "source_gone": whether that folder is gone} (a build of a deleted temp folder can be
    neither rebuilt nor compared with its tree); None for a release."""
    if not version.startswith(("local-", "git-")):
        return None
    source = build_info(recipe, version).get("source", "")
    return {"source": source, "source_gone": not (source and Path(source).is_dir())}

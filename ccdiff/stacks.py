"""The stacks ccdiff knows: the built-in oracles and implementations/<stack>/stack.toml.

The recipes themselves and resolving a spec live in ccdiff/recipes.py (below build.py, which
needs them); this module opens controllers and lists what is built, and re-exports the recipe
names its many importers take from here."""
from __future__ import annotations

from pathlib import Path

from .errors import SetupError
from .paths import build_dir
from .reach import DEFAULT_MAX_ACK_DELAY_US
from .recipes import LIBRARY_NAME, ORACLES, PYTHON_ADAPTER_NAME, StackRecipe, Target, load_recipes, resolve


def open_controller(target: Target, max_datagram_size: int, initial_rtt_us: int,
                    max_ack_delay_us: int = DEFAULT_MAX_ACK_DELAY_US):
    """A fresh controller for one run: the trace header's (or scenario's) datagram size,
    initial RTT and peer max_ack_delay.  Raises SetupError with the fixing command."""
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
        return RemoteController(address, target, max_datagram_size, initial_rtt_us, base, max_ack_delay_us)
    library = target.recipe.library(target.version)
    if not library.exists():
        raise SetupError(f"{target.recipe.name}@{target.version} is not built; run: "
                         f"ccdiff build {target.recipe.name}@{target.version}")
    _refuse_stale(target)
    from .probe import filter_options
    options = filter_options(target.label, target.version, features_of(target.recipe, target.version),
                             target.options)
    options_text = ",".join(f"{k}={v}" for k, v in options)
    return open_adapter(target.recipe, library, max_datagram_size, initial_rtt_us, options_text, base,
                        max_ack_delay_us)


def open_adapter(recipe: StackRecipe, library: Path, max_datagram_size: int, initial_rtt_us: int,
                 options_text: str, base: int, max_ack_delay_us: int = DEFAULT_MAX_ACK_DELAY_US):
    """The built adapter in this process: a C ABI library through ctypes, or a Python
    adapter module (ccdiff/pyadapter.py).  `ccdiff serve` opens through here too, so
    --isolate and adapter containers treat both alike."""
    if recipe.language == "python":
        from .pyadapter import PythonController
        return PythonController(str(library), max_datagram_size, initial_rtt_us, options_text, base,
                                max_ack_delay_us)
    from .native import NativeController
    return NativeController(str(library), max_datagram_size, initial_rtt_us, options_text, base,
                            max_ack_delay_us)


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
    from .build import unusable_build
    reason = unusable_build(target.recipe, target.version)
    if reason:
        raise SetupError(reason)
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
    from .build import build_state
    from .remote import hello
    rows = [{"stack": name, "version": "", "built": True, "stale": False, "modified": False, "note": note}
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
            state = build_state(recipe, version) if remote is None else "current"
            # a checkout build has no pinned recipe digest, but its library is checked all the same
            stale = state == "stale" and not version.startswith(("local-", "git-"))
            supports = ""
            if remote is None and built:
                from .probe import describe
                supports = describe(features_of(recipe, version))
            names = [recipe.name] + sorted(recipe.aliases)
            checkout = checkout_source(recipe, version) if remote is None else None
            for name in names:
                row = {"stack": name, "version": version, "built": built, "stale": stale,
                       "modified": state == "modified", "default": default, "supports": supports if name == recipe.name else "",
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


# The recipe names are re-exported: most modules import them from here (ccdiff/recipes.py).
__all__ = ["LIBRARY_NAME", "ORACLES", "PYTHON_ADAPTER_NAME", "StackRecipe", "Target", "load_recipes", "resolve",
           "open_controller", "open_adapter", "build_info", "features_of", "oracle_option_values", "available",
           "checkout_source"]

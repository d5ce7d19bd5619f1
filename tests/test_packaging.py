"""The installed tool holds every package of the checkout.  The runner image installs ccdiff
with pip (docker/Dockerfile) and once lacked ccdiff.connection, which an explicit package list
in pyproject.toml left out: compose `conformance` then died on `import ccdiff.connection`
while every test, run from the checkout, passed."""
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent


def checkout_packages() -> set:
    return {".".join(init.parent.relative_to(ROOT).parts)
            for top in ("ccdiff", "oracle") for init in (ROOT / top).rglob("__init__.py")
            if "__pycache__" not in init.parts}


def installed_packages() -> set:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    if "packages" in config and isinstance(config["packages"], list):
        return set(config["packages"])
    find = config["packages"]["find"]
    return set(find_packages(where=str(ROOT), include=find.get("include", ("*",)),
                             exclude=find.get("exclude", ())))


def test_every_package_is_installed():
    missing = checkout_packages() - installed_packages()
    assert not missing, f"pyproject.toml leaves out {sorted(missing)}: pip install . would not install them"
    assert "ccdiff.connection" in installed_packages()


def test_nothing_but_ccdiff_and_oracle_is_installed():
    # tests/, bench/ and implementations/ are not part of the installed tool
    assert all(name.split(".")[0] in ("ccdiff", "oracle") for name in installed_packages())

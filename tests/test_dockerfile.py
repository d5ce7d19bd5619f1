"""The image build stages copy only part of ccdiff (docker/Dockerfile): every module those
parts import, at the top or inside a function, must be copied too.  A missing one fails
the image build deep in `docker build` (ccdiff.probe, when bisect made build.py use it)."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Imported only when a controller is opened (stacks.open_controller), never while building.
RUNTIME_ONLY = {"clock", "remote", "native"}


def copied_sets():
    """Per image folder that receives ccdiff/*.py files one by one: the module names copied."""
    sets = {}
    for line in (ROOT / "docker" / "Dockerfile").read_text().splitlines():
        files = re.findall(r"\bccdiff/((?:fuzzing/)?\w+)\.py\b", line)
        if line.startswith("COPY") and files:
            package_root = line.split()[-1].rsplit("/ccdiff/", 1)[0]      # e.g. /src, /opt/ccdiff/buildsrc
            sets.setdefault(package_root, set()).update(f.replace("/", ".") for f in files)
    return sets


def relative_imports(module: str) -> set:
    path = ROOT / "ccdiff" / (module.replace(".", "/") + ".py")
    package = module.rsplit(".", 1)[0] if "." in module else ""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if package else []
            name = ".".join([p for p in base if p] + ([node.module] if node.module else []))
            found.add(name)
    return found


def test_every_partial_copy_of_ccdiff_is_self_contained():
    groups = copied_sets()
    assert set(groups) == {"/src", "/opt/ccdiff/buildsrc"}   # the adapter builder, the fuzzer image
    for root, modules in groups.items():
        for module in sorted(modules):
            if module.endswith("__init__"):
                continue
            missing = relative_imports(module) - modules - RUNTIME_ONLY
            assert not missing, f"docker/Dockerfile copies ccdiff/{module}.py to {root} without {sorted(missing)}"

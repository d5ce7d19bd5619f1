"""The image build stages copy only part of ccdiff (docker/Dockerfile): every module those
parts import, at the top or inside a function, must be copied too.  A missing one fails
the image build deep in `docker build` (ccdiff.probe, when bisect made build.py use it)."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Imported only when a controller is opened (stacks.open_controller, open_adapter), never while
# building.
RUNTIME_ONLY = {"clock", "remote", "native", "pyadapter"}


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


def test_every_file_a_partial_copy_reads_beside_its_modules_is_copied_too():
    """A module that reads a file next to itself (Path(__file__).with_name("X"): harness.py's
    RUSTC_WRAPPER script) needs X in the same COPY: the fuzzer image once failed deep in
    `docker build` without ccdiff/fuzzing/sancov_rustc.sh."""
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    for root, modules in copied_sets().items():
        copied = {source for line in dockerfile.splitlines()
                  if line.startswith("COPY") and line.split()[-1].startswith(f"{root}/ccdiff/")
                  for source in line.split()[1:-1]}
        for module in sorted(modules):
            path = ROOT / "ccdiff" / (module.replace(".", "/") + ".py")
            for name in re.findall(r'Path\(__file__\)\.with_name\("([^"]+)"\)', path.read_text()):
                beside = str(path.relative_to(ROOT).with_name(name))
                assert beside in copied, f"docker/Dockerfile copies {path.relative_to(ROOT)} to {root} without {beside}"


def _dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps `path` (relative to the repository) out of the build context;
    its patterns are plain names and globs, each applied to a path and its parents."""
    import fnmatch
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatch(prefix, pattern) for pattern in patterns for prefix in prefixes)


def test_clusterfuzzlite_image_starts_from_the_upstream_builder_and_gets_what_build_sh_reads():
    """.clusterfuzzlite/Dockerfile builds FROM the name ClusterFuzzLite and OSS-Fuzz use, which
    docker/oss-fuzz/make-base-builder.sh gives the local stand-in; `COPY . $SRC/ccdiff` must carry
    every file build.sh and the smoke run read (the context's .dockerignore drops some folders)."""
    dockerfile = (ROOT / ".clusterfuzzlite" / "Dockerfile").read_text()
    froms = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert froms == ["gcr.io/oss-fuzz-base/base-builder-rust"]
    assert "TAG=gcr.io/oss-fuzz-base/base-builder-rust\n" in (ROOT / "docker/oss-fuzz/make-base-builder.sh").read_text()
    needed = ["ccdiff/fuzzing/ossfuzz.py", "ccdiff/build.py", "fuzz/driver/fz_harness.c", "fuzz/ccdiff.dict",
              "fuzz/seeds/no-loss", "implementations/quiche/build.sh", "implementations/include/ccdiff_adapter.h",
              "docker/oss-fuzz/smoke.sh", ".clusterfuzzlite/build.sh"]
    for path in needed:
        assert (ROOT / path).exists(), path
        assert not _dockerignored(path), f".dockerignore drops {path}, which the fuzz target build needs"
    # the stand-in's build context: the package list its install step reads
    stand_in = (ROOT / "docker" / "oss-fuzz" / "Dockerfile").read_text()
    for copied in re.findall(r"^COPY (.+) \S+$", stand_in, re.M):
        for path in copied.split():
            assert not _dockerignored(path), path

"""Where the fuzzing tools are; fuzz/install-deps.sh installs them."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..errors import SetupError
from ..paths import project_root

INSTALL_HINT = "install them with: bash setup/install.sh test (or bash fuzz/install-deps.sh)"


def fuzz_build_dir() -> Path:
    """Instrumented builds and tools: CCDIFF_FUZZ_BUILD_DIR, else build/fuzz of this checkout."""
    env = os.environ.get("CCDIFF_FUZZ_BUILD_DIR")
    return Path(env).resolve() if env else project_root() / "build" / "fuzz"


def driver_dir() -> Path:
    return project_root() / "fuzz" / "driver"


def include_dir() -> Path:
    return project_root() / "implementations" / "include"


def program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SetupError(f"{name} not found; {INSTALL_HINT}")
    return path


def honggfuzz_home() -> Path:
    """honggfuzz built from the `honggfuzz` crate's C source (HONGGFUZZ_HOME overrides)."""
    home = Path(os.environ.get("HONGGFUZZ_HOME") or fuzz_build_dir() / "tools" / "honggfuzz")
    for part in ("honggfuzz", "libhfuzz/libhfuzz.a", "libhfcommon/libhfcommon.a"):
        if not (home / part).exists():
            raise SetupError(f"honggfuzz is not built ({home / part} missing); {INSTALL_HINT}")
    return home


def libfuzzer_runtime() -> Path:
    """clang's libFuzzer (libclang_rt.fuzzer), which -fsanitize=fuzzer links: Debian ships it
    in libclang-rt-<major>-dev, only a recommendation of the clang package, so a clang
    installed with --no-install-recommends links nothing and says only that a file is missing."""
    clang = program("clang")
    try:
        found = subprocess.run([clang, "-print-file-name=libclang_rt.fuzzer-x86_64.a"], capture_output=True,
                               text=True, timeout=30).stdout.strip()
        major = subprocess.run([clang, "-dumpversion"], capture_output=True, text=True,
                               timeout=30).stdout.strip().split(".")[0]
    except (OSError, subprocess.SubprocessError):
        found, major = "", ""
    path = Path(found)
    if not path.is_absolute() or not path.exists():
        package = f"libclang-rt-{major}-dev" if major.isdigit() else "libclang-rt-<clang major>-dev"
        raise SetupError(f"libFuzzer's runtime (libclang_rt.fuzzer-x86_64.a) is not installed for {clang}: "
                         f"install the Debian package {package} (apt-get install {package}; "
                         "bash setup/install.sh system fuzz installs it)")
    return path

"""Where the project's folders are: CCDIFF_HOME, else this checkout, else the current folder."""
from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    env = os.environ.get("CCDIFF_HOME")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parent.parent
    if (here / "implementations").is_dir():
        return here
    return Path.cwd()


def implementations_dir() -> Path:
    return project_root() / "implementations"


def build_dir() -> Path:
    env = os.environ.get("CCDIFF_BUILD_DIR")
    return Path(env).resolve() if env else project_root() / "build"

"""Shared test setup. Hypothesis runs derandomized: the same examples every run, so CI is deterministic.
Explore more locally with: HYPOTHESIS_PROFILE=explore python3 -m pytest tests.  quiche_releases builds
releases a test names but setup does not pin."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.register_profile("explore", max_examples=2000, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


@pytest.fixture(scope="session")
def quiche_releases():
    """Build quiche releases by name (crates.io, sha256 from implementations/quiche/releases.lock)
    when a test needs one that `make test`'s setup does not pin: about a minute each on a
    clean machine, nothing when built.  ccdiff's build lock serializes parallel workers."""
    def ensure(*versions):
        for version in versions:
            done = subprocess.run([sys.executable, "-m", "ccdiff", "build", f"quiche@{version}"],
                                  cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]
    return ensure

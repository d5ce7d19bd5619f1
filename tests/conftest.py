"""Hypothesis runs derandomized: the same examples every run, so CI is deterministic.
Explore more locally with: HYPOTHESIS_PROFILE=explore python3 -m pytest tests"""
import os

from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.register_profile("explore", max_examples=2000, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

"""The monotonic clock every adapter maps trace time onto (docs/adapters.md, "Clock").

Real applications hand their stack a monotonic clock counted from boot, so no
connection ever sees time 0.  Stacks compare sums of timestamps (ngtcp2's CUBIC
epoch arithmetic, picoquic's "0 means never" stamps); near 0 those comparisons
come out as no real connection can make them.  Every adapter therefore runs
at stack time = base + trace time, one base for all stacks, and reports
times back in trace time.
"""
from __future__ import annotations

import os

from .errors import SetupError

# ccdiff_adapter.h CCD_DEFAULT_CLOCK_BASE_US: 3 days of uptime plus an odd
# number of microseconds, so no stack time is a round number by accident.
DEFAULT_CLOCK_BASE_US = 3 * 86_400_000_000 + 1_234_567
# ccdiff_adapter.h CCD_MAX_CLOCK_BASE_US: ten years of uptime.
MAX_CLOCK_BASE_US = 315_360_000_000_000
ENV_VAR = "CCDIFF_CLOCK_BASE_US"


def check_clock_base(value: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_CLOCK_BASE_US:
        raise SetupError(f"{where}: clock base {value!r} is not an integer in 1..{MAX_CLOCK_BASE_US} us")
    return value


def clock_base_us() -> int:
    """This run's base: CCDIFF_CLOCK_BASE_US if set (the per-run override), else the default."""
    text = os.environ.get(ENV_VAR, "").strip()
    if not text:
        return DEFAULT_CLOCK_BASE_US
    try:
        value = int(text, 10)
    except ValueError:
        raise SetupError(f"{ENV_VAR}: {text!r} is not an integer number of microseconds") from None
    return check_clock_base(value, ENV_VAR)

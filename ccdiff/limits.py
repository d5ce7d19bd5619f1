"""Bounds on one run's time and memory (issue #32: a scenario or a stack that grows without
end must cost one error, never the machine).

`conform` bounds each case in its worker process from the parent (conform._Pool: killed,
reported as that case's error, the run goes on); `sim` runs in process and bounds itself with
`run_limits`.  Memory is the process's resident set, read from /proc: a bound on address space
(RLIMIT_AS) would also refuse sanitizer builds, whose shadow memory is terabytes of reserved,
untouched address space."""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

from .errors import SetupError

# Far above any correct run: measured 2026-11-28 (GNU time, peak resident), `sim high-bdp` on
# quiche 33 MB, quiche's own connection on death-spiral-loopback 35 MB, aioquic's own connection
# on idle-restart with its qlog judged 58 MB.
DEFAULT_MEMORY_MIB = 4096
CHECK_EVERY_S = 0.25


def resident_mib(pid: int | str = "self") -> float | None:
    """The resident set of process `pid` in MiB; None where /proc cannot tell (gone, not Linux)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            pages = int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def over_memory(pid: int | str, limit_mib: float | None) -> float | None:
    """The resident MiB of `pid` when it is above `limit_mib` (None or 0: no bound), else None."""
    if not limit_mib:
        return None
    rss = resident_mib(pid)
    return rss if rss is not None and rss > limit_mib else None


@contextlib.contextmanager
def run_limits(seconds: float, memory_mib: float, what: str):
    """SetupError when the block runs longer than `seconds` or its process holds more than
    `memory_mib` MiB (0: no bound).  A timer checks both every CHECK_EVERY_S; the simulator
    returns to Python on every event, so the handler runs even inside a stack."""
    if not (seconds or memory_mib) or threading.current_thread() is not threading.main_thread():
        yield
        return
    started = time.monotonic()

    def check(signum, frame):
        if seconds and time.monotonic() - started >= seconds:
            # Re-armed first: an exception raised while Python runs a gc callback or a __del__
            # is printed and dropped ("Exception ignored in ..."), and the run would go on
            # unbounded; the next alarm, 50 ms on, lands in ordinary code.
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            raise SetupError(f"{what}: still running after {seconds:g} s (--timeout); a scenario this "
                             "long belongs in `ccdiff conform`, whose cases each have their own limit")
        rss = over_memory("self", memory_mib)
        if rss is not None:
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            raise SetupError(f"{what}: {rss:.0f} MiB resident, above the bound of {memory_mib:g} MiB "
                             "(--memory-limit); the run was stopped")
        signal.setitimer(signal.ITIMER_REAL, _next_check(seconds, started))

    previous = signal.signal(signal.SIGALRM, check)
    signal.setitimer(signal.ITIMER_REAL, 0.001)     # the first check at once: a short run is bounded too
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _next_check(seconds: float, started: float) -> float:
    if not seconds:
        return CHECK_EVERY_S
    return max(0.001, min(CHECK_EVERY_S, seconds - (time.monotonic() - started)))

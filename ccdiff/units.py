"""Human units for terminal output: durations in µs/ms/s, sizes in B/kB/MB (SI, as
network rates are quoted).  Raw integers (µs, bytes) stay in every --json output."""
from __future__ import annotations


def _three_digits(value: float) -> str:
    """3.38, 13.5, 422, 1350: three significant digits, never an exponent."""
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def duration(us) -> str:
    """Microseconds -> "850 µs", "42 ms", "3.38 s"; None -> "-"."""
    if us is None:
        return "-"
    if us == 0:
        return "0"
    if us < 1_000:
        return f"{us:.0f} µs"
    if us < 999_500:           # 999.6 ms would print as "1000 ms"
        return f"{_three_digits(us / 1_000)} ms"
    return f"{_three_digits(us / 1_000_000)} s"


def size(n) -> str:
    """Bytes -> "900 B", "2.7 kB", "2.34 MB"; None -> "-"."""
    if n is None:
        return "-"
    if n < 1_000:
        return f"{n:.0f} B"
    if n < 999_500:
        return f"{_three_digits(n / 1_000)} kB"
    return f"{_three_digits(n / 1_000_000)} MB"


def rate(bytes_per_s) -> str:
    """Bytes per second -> "1.2 MB/s"."""
    return "-" if bytes_per_s is None else f"{size(bytes_per_s)}/s"

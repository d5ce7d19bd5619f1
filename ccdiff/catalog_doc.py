"""Writes docs/invariants.md from the catalog: python3 -m ccdiff.catalog_doc > docs/invariants.md"""
from .invariants import CATALOG


def render() -> str:
    out = ["# Invariant catalog", "",
           "Generated from `ccdiff/invariants.py` (`python3 -m ccdiff.catalog_doc > docs/invariants.md`;",
           "a test keeps the two in sync). Each id is stable: findings, reports and baselines use it.",
           "", "Waivable: a stack's profile may document the behaviour as an intentional deviation, "
           "and findings are then listed as deviations. Only an RFC MUST is never waivable (and the "
           "harness checks, which are no RFC rule). **RFC text** is verbatim from the RFC sources in "
           "`rfc/` (`tests/test_rfc_quotes.py` checks it); **Keyword** is the RFC keyword the invariant "
           "rests on, or `descriptive` where the RFC states the behaviour without one.", "",
           "Slow start or congestion avoidance (`ss-growth-bound`, `ca-growth-bound`, `idle-inflation`) is "
           "the phase the stack's snapshot reports (recovery counts as congestion avoidance, RFC 9002 "
           "§7.3.2); `cwnd < ssthresh` decides only where no phase is reported.", ""]
    for inv in CATALOG.values():
        out += [f"## `{inv.id}` — {inv.title}", "",
                f"- **Rule:** {inv.rfc}",
                f"- **Keyword:** {inv.keyword}"]
        if inv.quote:
            out += [f"- **RFC text:** {inv.quote_from}: “{inv.quote}”"]
        out += [
                f"- **Why it matters:** {inv.why}",
                f"- **Waivable by a profile:** {'yes' if inv.waivable else 'no'}", ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")

"""Writes docs/invariants.md from the catalog: python3 -m ccdiff.catalog_doc > docs/invariants.md"""
from .invariants import CATALOG


def render() -> str:
    out = ["# Invariant catalog", "",
           "Generated from `ccdiff/invariants.py` (`python3 -m ccdiff.catalog_doc > docs/invariants.md`;",
           "a test keeps the two in sync). Each id is stable: findings, reports and baselines use it.",
           "", "Waivable: a stack's profile may document the behaviour as an intentional deviation, "
           "and findings are then listed as deviations. RFC MUSTs are never waivable.", ""]
    for inv in CATALOG.values():
        out += [f"## `{inv.id}` — {inv.title}", "",
                f"- **Rule:** {inv.rfc}" + (f": “{inv.quote}”" if inv.quote != "—" else ""),
                f"- **Why it matters:** {inv.why}",
                f"- **Waivable by a profile:** {'yes' if inv.waivable else 'no'}", ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")

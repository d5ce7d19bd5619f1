"""Writes docs/invariants.md from the catalog: python3 -m ccdiff.catalog_doc > docs/invariants.md"""
from .invariants import CATALOG
from .mechanisms import registry


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
           "§7.3.2); `cwnd < ssthresh` decides only where no phase is reported.", "",
           "## Deviations: mechanism-checked or wholesale", "",
           "A deviation in `implementations/<stack>/profile.toml` excuses findings in one of two ways "
           "(`ccdiff/profiles.py`):", "",
           "- **Mechanism-checked** (`mechanism = NAME`, `explains = [invariants]`): the checker feeds "
           "the mechanism, an executable model of the stack's own rule with its upstream file:line "
           "(`implementations/<stack>/mechanisms.py`; the shape they share and the rules several stacks run "
           "in `ccdiff/mechanisms.py`), every event of the run, and asks it at each occurrence of those "
           "invariants whether the rule produced that step. An occurrence it reproduces is a "
           "deviation; any other occurrence is a violation, reported at the first unexplained one (its "
           "detail counts the explained ones). A finding is a deviation only when every occurrence "
           "was explained. The model sees what the harness sees (resolved events, the stack's "
           "snapshots), never the stack's private state: a patched build cannot explain itself.",
           "- **Wholesale** (`tolerates = [invariants]`): every finding of the invariant is a "
           "deviation, whether or not the mechanism happened in that trace. Left only where no "
           "mechanism expresses the deviation yet, with the reason in `why_wholesale`; "
           "`ccdiff stacks --waivers` lists every such waiver, stack by stack, with its reason, and "
           "every mechanism-checked one.",
           "- **trajectory-divergence** is compared with the oracle configured with the stack's "
           "`variant`s (its deviations made executable); a deviation the oracle cannot run yet "
           "excuses a divergence only when its trigger (`observed`, ccdiff/triggers.py) occurred at "
           "or before it. No stack waives it wholesale (docs/detection-power.md).", "",
           "Neither applies to an invariant that is not waivable. The mechanisms (the shared ones first, "
           "then each stack folder's):", "",
           "| mechanism | explains | upstream rule |", "|---|---|---|"]
    for m in registry().values():
        out.append(f"| `{m.name}` | {', '.join(f'`{i}`' for i in sorted(m.invariants))} | {m.rule} |")
    out.append("")
    for inv in CATALOG.values():
        out += [f"## `{inv.id}` — {inv.title}", "",
                f"- **Rule:** {inv.rfc}",
                f"- **Keyword:** {inv.keyword}"]
        if inv.quote:
            out += [f"- **RFC text:** {inv.quote_from}: “{inv.quote}”"]
        out += [f"- **RFC text:** {where}: “{text}”" for text, where in inv.more_quotes]
        out += [
                f"- **Why it matters:** {inv.why}",
                f"- **Waivable by a profile:** {'yes' if inv.waivable else 'no'}", ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")

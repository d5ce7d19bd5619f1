"""Every sentence ccdiff presents as RFC text appears word for word in the RFC sources.

Sources: rfc/ (the editors' kramdown files).  Markup is normalised (ccdiff/rfctext.py); an
ellipsis "..." joins fragments that must each appear, in order, in the same section.

Marker convention for prose (docs/*.md, README.md, profiles, the stacks' entry-points.md,
scenarios): an RFC quote is written
`RFC NNNN §X.Y: “verbatim text”` -- the citation, a colon, then the text in curly quotes.
Everything written that way is checked against that section.
"""
import re
from pathlib import Path

import pytest

from ccdiff.invariants import CATALOG, KEYWORDS
from ccdiff.rfctext import find_quote, fragments, load_rfc

ROOT = Path(__file__).resolve().parent.parent
MARKED = re.compile(r"RFC (9438|9002) §([A-Z0-9][\w.]*): “([^”]+)”")
CITATION = re.compile(r"RFC (9438|9002) §([A-Z0-9][\w.]*)$")
NORMATIVE = ("MUST", "SHOULD", "RECOMMENDED", "MAY")


def prose_files() -> list:
    files = sorted(ROOT.glob("docs/*.md")) + [ROOT / "README.md"]
    return files + sorted(ROOT.glob("implementations/*/profile.toml")) + sorted(ROOT.glob("implementations/*/entry-points.md")) \
        + sorted(ROOT.glob("scenarios/*.toml"))


def marked_quotes() -> list:
    found = []
    for path in prose_files():
        text = re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))
        found += [(path.relative_to(ROOT).as_posix(), m.group(1), m.group(2), m.group(3))
                  for m in MARKED.finditer(text)]
    return found


def test_normalisation_renders_references_as_the_rfc_does():
    """The issue's own example: RFC 9438 §4.2 with its {{eq1}} and {{app-limited}} references."""
    quote = ("The elapsed time t in Figure 1 MUST NOT include periods during which cwnd has not "
             "been updated due to application-limited behavior (see Section 5.8).")
    assert find_quote(quote, "9438", "4.2") == "4.2"
    assert find_quote(quote, "9438", "4.3") is None
    invented = "t MUST NOT include periods during which the sender was idle (not sending because it had no data)."
    assert find_quote(invented, "9438") is None


def test_ellipsis_needs_every_fragment_in_order_in_one_section():
    assert find_quote("In this region, cwnd MUST be incremented by ... for each received new ACK",
                      "9438", "4.4") == "4.4"
    assert find_quote("for each received new ACK ... In this region, cwnd MUST be incremented by",
                      "9438", "4.4") is None
    # Fragments from two different sections do not make a quote.
    assert find_quote("The parameter β_cubic SHOULD be set to 0.7 ... K is set to 0", "9438") is None
    assert fragments("a ... b") == ["a", "b"]


@pytest.mark.parametrize("inv", CATALOG.values(), ids=lambda inv: inv.id)
def test_catalog_quote_is_verbatim_rfc_text(inv):
    assert inv.keyword in KEYWORDS
    if inv.keyword in ("harness", "differential"):
        assert inv.quote == "" and inv.quote_from == "" and inv.more_quotes == ()
        return
    for quote, where in ((inv.quote, inv.quote_from),) + inv.more_quotes:
        citation = CITATION.match(where)
        assert citation, f"{inv.id}: {where!r} is not 'RFC NNNN §X.Y'"
        rfc, section = citation.groups()
        assert section in load_rfc(rfc).sections, f"{inv.id}: no section {section} in RFC {rfc}"
        assert find_quote(quote, rfc, section), f"{inv.id}: “{quote}” not in RFC {rfc} §{section}"
        assert f"RFC {rfc}" in inv.rfc, f"{inv.id}: the rule cites {inv.rfc!r}, a quote RFC {rfc}"


def test_growth_in_recovery_quotes_the_rule_itself():
    """The report quotes RFC 9002's own line (Appendix B.5) and RFC 9438's word that CUBIC keeps
    fast recovery, beside §7.3.2's end of the recovery period."""
    inv = CATALOG["growth-in-recovery"]
    quoted = [(inv.quote, inv.quote_from)] + list(inv.more_quotes)
    assert [where for _, where in quoted] == ["RFC 9002 §B.5", "RFC 9002 §7.3.2", "RFC 9438 §4.2"]
    assert "Do not increase congestion window in recovery period." in inv.quote
    # A sentence near the rule but not in its section is refused: B.5 is not §7.3.2.
    assert find_quote(inv.quote, "9002", "7.3.2") is None


@pytest.mark.parametrize("inv", CATALOG.values(), ids=lambda inv: inv.id)
def test_keyword_is_the_one_in_the_quote(inv):
    """The keyword an invariant rests on is in its quote; a descriptive one quotes none."""
    words = set(re.findall(r"\b[A-Z]{3,}\b", inv.quote)) & set(NORMATIVE)
    more = {w for text, _ in inv.more_quotes for w in re.findall(r"\b[A-Z]{3,}\b", text)} & set(NORMATIVE)
    if inv.keyword in NORMATIVE:
        assert inv.keyword in words
    else:
        assert not words | more, f"{inv.id} quotes {words | more} but says {inv.keyword}"


@pytest.mark.parametrize("inv", [i for i in CATALOG.values() if not i.waivable], ids=lambda i: i.id)
def test_only_a_must_is_not_waivable(inv):
    """Only an RFC MUST can stop a profile from documenting a deviation; harness checks (a
    crash, a NaN window) are no RFC rule and no profile can waive them either."""
    if inv.keyword == "harness":
        return
    assert inv.keyword == "MUST" and "MUST" in inv.quote


def test_recommended_minimum_window_is_waivable():
    """RFC 9002 §7.2 only RECOMMENDS 2 * max_datagram_size."""
    assert CATALOG["cwnd-below-minimum"].keyword == "RECOMMENDED"
    assert CATALOG["cwnd-below-minimum"].waivable


def test_prose_quotes_are_verbatim():
    quotes = marked_quotes()
    assert any(path == "docs/invariants.md" for path, *_ in quotes), "the generated catalog uses the marker"
    for path, rfc, section, quote in quotes:
        assert find_quote(quote, rfc, section), f"{path}: “{quote}” is not in RFC {rfc} §{section}"


def test_scenario_targets_quote_the_rfc_verbatim_or_say_they_paraphrase():
    """A target written `RFC NNNN §X: text` reads as a quote: it must be a marked verbatim quote
    (checked above); a summary says so: `RFC NNNN §X (in short: ...)`."""
    loose = re.compile(r'^\s*"RFC \d+[^:"(]*: (?!“)')   # a target line: "RFC ... §X: text"
    offenders = [(p.name, line) for p in sorted(ROOT.glob("scenarios/*.toml"))
                 for line in p.read_text(encoding="utf-8").splitlines() if loose.search(line)]
    assert offenders == []

"""Which congestion controller a window trajectory looks like, from its cuts at losses.

    >>> recognise([(20000, 20000, 10000, 8800), (18000, 15000, 9000, 7800)], 1200).name
    'NewReno'

Used by `ccdiff fidelity` (#34 item 4) on both the stack's own logged window and the
adapter's, so a comparison of two different algorithms is said before any number.  The
multiplicative decrease names the family: NewReno halves the window on a congestion event
(RFC 9002 §7.3.2, kLossReductionFactor 0.5), CUBIC multiplies it by beta_cubic = 0.7
(RFC 9438 §4.6); BBR does not cut the window in proportion at a loss (draft-ietf-ccwg-bbr
§5.3.3: it bounds inflight by its model instead), so a trajectory with losses and no cut
is "no cut at loss" (BBR-like; picoquic's CUBIC in slow start also ignores isolated
losses, so the name says what was seen, not which algorithm).  A collapse to the minimum window (persistent congestion, RFC 9002 §7.6.2)
and cuts from a window under 4 datagrams (the floor clamps them) say nothing and are skipped.
"""
from __future__ import annotations

from dataclasses import dataclass
from statistics import median


@dataclass
class Shape:
    name: str          # "NewReno", "CUBIC", "no cut at loss" (BBR-like) or "" (cannot tell)
    why: str


def _near(ratios, target: float) -> bool:
    return any(r is not None and abs(r - target) <= 0.05 for r in ratios)


def recognise(cuts: list, max_datagram_size: int) -> Shape:
    """cuts: (window before, bytes in flight before, window after, bytes in flight after)
    at each settled point where a loss was applied (None: not known).  The reduction is
    taken from the window or from the flight size, whichever explains it (RFC 8312 §4.5
    reduces flight_size; aioquic's Cubic takes bytes in flight once the lost packets are
    removed, cubic.py on_packets_lost)."""
    floor = 2 * max_datagram_size
    counts = {"NewReno": 0, "CUBIC": 0}
    losses = uncut = cut = 0
    for before, flight, after, flight_after in cuts:
        if before is None or after is None or before < 4 * max_datagram_size:
            continue
        losses += 1
        if after >= before:
            uncut += 1
            continue
        if after <= floor:
            continue                               # persistent congestion or the floor: no factor
        cut += 1
        ratios = (after / before, after / flight if flight else None, after / flight_after if flight_after else None)
        counts["NewReno"] += _near(ratios, 0.5)    # RFC 9002 §7.3.2 kLossReductionFactor
        counts["CUBIC"] += _near(ratios, 0.7)      # RFC 9438 §4.6 beta_cubic
    best = max(counts, key=lambda k: (counts[k], k))
    if counts[best] and counts[best] * 2 > cut and counts["NewReno"] != counts["CUBIC"]:
        factor = "x0.5, RFC 9002 §7.3.2" if best == "NewReno" else "x0.7, RFC 9438 §4.6"
        return Shape(best, f"{counts[best]} of {cut} window cuts at losses are {factor}")
    if losses >= 3 and uncut == losses:
        return Shape("no cut at loss", f"no window cut at any of {losses} losses: BBR-like, or a loss filter")
    return Shape("", f"{cut} window cut(s) at {losses} loss(es), {counts['NewReno']} x0.5, "
                     f"{counts['CUBIC']} x0.7: cannot tell")

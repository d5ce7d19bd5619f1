"""quinn's mechanisms: the executable form of its profile's mechanism-checked deviations,
quinn-proto 0.11.19 (src/connection/mod.rs).

Loaded by ccdiff/mechanisms.py (`registry`), which registers every Mechanism subclass
defined here under its `name`; the shape they share is that module's (docs/adding-a-stack.md).
quinn's other mechanisms (acks-credited-before-losses, w-est-closed-form, k-from-w-max) are
the shared ones, named as they are."""
from __future__ import annotations

from ccdiff.mechanisms import Ngtcp2EcnOnNewLargestOnly


class QuinnEcnOnNewLargestOnly(Ngtcp2EcnOnNewLargestOnly):
    """quinn examines an ACK frame's ECN counts only when the frame raises the largest
    acknowledged packet number (mod.rs:1474-1486 new_largest: ack.largest > the largest so
    far; 1563-1572: "We only examine ECN counters from ACKs that we are certain we received in
    transmit order"): a CE count on a reordered ACK frame starts no recovery period.  The
    connection's rule, for either controller.  Explains a missing reduction only on such a
    frame that carries CE and reveals no loss; a CE count on a frame with a new largest
    reaches process_ecn, where a window left larger than before (acks-before-losses) stays a
    violation."""
    name = "quinn-ecn-on-new-largest-only"
    invariants = frozenset({"missing-reduction"})
    rule = "src/connection/mod.rs:1474-1486, 1563-1572 (quinn-proto 0.11.19)"
    families = ("cubic", "reno")

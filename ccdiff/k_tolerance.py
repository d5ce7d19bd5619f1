"""RFC 9438's C and how far a stack's K may be from Eq. 2: the k-mismatch invariant
(invariants.py) and the mechanism that explains a K computed from W_max (mechanisms.py,
KFromWMax) judge with one tolerance."""

# k-mismatch: C in segments / s^3 (RFC 9438 §5.1, "C SHOULD be set to 0.4"), and how far a
# stack's K may be from Eq. 2: fixed-point K (ngtcp2 and Linux count 1/1024 s and approximate
# the cube root; 0.8 and 2.7 ms off at K = 3.1 s) passes, a C or a β off by a few percent not.
CUBIC_C = 0.4
K_TOLERANCE = 0.01
K_SLACK_S = 0.005

#!/usr/bin/env python3
"""Build-time facade for s2n-quic-core (ccdiff).  Usage: apply.py S2N_QUIC_CORE_CRATE_DIR

The snapshot needs private fields of CubicCongestionController (src/recovery/cubic.rs):
its state (SlowStart / Recovery(start, _) / CongestionAvoidance { start_time, .. }),
HybridSlowStart.threshold, and Cubic's w_max, k and max_datagram_size.  The adapter
read them from the controller's derived Debug, formatting the whole controller twice
per step: most of a fuzz execution (docs/fuzzing.md, "The Rust stacks' harnesses").
This appends one `impl CubicCongestionController` block at the END of cubic.rs
(upstream line numbers unchanged) with one #[doc(hidden)] read-only accessor that
returns those fields as they are.  No logic, nothing else touched.  The facade is
unconditional: only the adapter builds this staged copy.

Fails loudly if the fields are not there; idempotent.
"""
import pathlib
import sys

MARK = "// ccdiff-facade"
NEEDS = ("pub struct CubicCongestionController {", "    slow_start: HybridSlowStart,", "    state: State,",
         "    SlowStart,", "    Recovery(Timestamp, FastRetransmission),",
         "    CongestionAvoidance(CongestionAvoidanceTiming),", "    start_time: Timestamp,",
         "struct Cubic {", "    w_max: f32,", "    k: Duration,")
FACADE = f"""
{MARK}: appended at build time by ccdiff (implementations/s2n-quic/patches/apply.py).
impl CubicCongestionController {{
    /// (state: 0 SlowStart, 1 Recovery, 2 CongestionAvoidance; the recovery start or the
    /// congestion-avoidance start_time; slow_start.threshold; cubic.w_max; cubic.k;
    /// cubic.max_datagram_size): read-only.
    #[doc(hidden)]
    pub fn ccdiff_state(&self) -> (u8, Option<Timestamp>, f32, f32, Duration, u16) {{
        let (state, time) = match &self.state {{
            State::SlowStart => (0, None),
            State::Recovery(start, _) => (1, Some(*start)),
            State::CongestionAvoidance(timing) => (2, Some(timing.start_time)),
        }};
        (state, time, self.slow_start.threshold, self.cubic.w_max, self.cubic.k, self.cubic.max_datagram_size)
    }}
}}
"""


def main():
    crate = pathlib.Path(sys.argv[1])
    cubic = crate / "src/recovery/cubic.rs"
    if not cubic.is_file():
        sys.exit(f"apply.py: {cubic} not found: not an s2n-quic-core crate")
    src = cubic.read_text()
    if MARK in src:
        return
    for needle in NEEDS:
        if src.count(needle) != 1:
            sys.exit(f"apply.py: {needle!r} found {src.count(needle)} times in {cubic} "
                     "(expected once); this s2n-quic-core layout is not supported")
    cubic.write_text(src + FACADE)


if __name__ == "__main__":
    main()

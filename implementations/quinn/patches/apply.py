#!/usr/bin/env python3
"""Build-time facade for quinn-proto (ccdiff).  Usage: apply.py QUINN_PROTO_CRATE_DIR

quinn's congestion controllers are public (congestion::{Cubic, NewReno} and the
Controller trait), but Controller::on_ack takes `&RttEstimator`, and
RttEstimator::new / ::update are pub(crate) (src/connection/paths.rs): nothing
outside the crate can make one.  quinn-proto has no cargo feature that exposes
them, so this appends one `impl RttEstimator` block at the END of paths.rs
(upstream line numbers unchanged) with two #[doc(hidden)] pub methods that
forward to new() and update().  The snapshot reads private fields: one read-only
accessor block at the END of congestion/cubic.rs (recovery_start_time, the
cubic state's w_max and k) and of congestion/new_reno.rs (recovery_start_time).
They return the values the derived Debug prints (which the adapter parsed before:
formatting the whole controller twice per step cost most of a fuzz execution,
docs/fuzzing.md).  No logic, nothing else touched.  The facade is
unconditional: only the adapter builds this staged copy.

Fails loudly if the forwarded signatures are not there; idempotent.
"""
import pathlib
import sys

MARK = "// ccdiff-facade"
NEEDS = ("pub(crate) fn new(initial_rtt: Duration) -> Self {",
         "pub(crate) fn update(&mut self, ack_delay: Duration, rtt: Duration) {",
         "pub struct RttEstimator {")
FACADE = f"""
{MARK}: appended at build time by ccdiff (implementations/quinn/patches/apply.py).
impl RttEstimator {{
    #[doc(hidden)]
    pub fn ccdiff_new(initial_rtt: Duration) -> Self {{
        Self::new(initial_rtt)
    }}

    #[doc(hidden)]
    pub fn ccdiff_update(&mut self, ack_delay: Duration, rtt: Duration) {{
        self.update(ack_delay, rtt)
    }}
}}
"""

CUBIC_NEEDS = ("pub struct Cubic {", "recovery_start_time: Option<Instant>,", "cubic_state: State,",
               "    k: f64,", "    w_max: f64,")
CUBIC_FACADE = f"""
{MARK}: appended at build time by ccdiff (implementations/quinn/patches/apply.py).
impl Cubic {{
    /// (recovery_start_time, cubic_state.w_max, cubic_state.k): read-only.
    #[doc(hidden)]
    pub fn ccdiff_state(&self) -> (Option<Instant>, f64, f64) {{
        (self.recovery_start_time, self.cubic_state.w_max, self.cubic_state.k)
    }}
}}
"""
RENO_NEEDS = ("pub struct NewReno {", "recovery_start_time: Instant,")
RENO_FACADE = f"""
{MARK}: appended at build time by ccdiff (implementations/quinn/patches/apply.py).
impl NewReno {{
    /// recovery_start_time: read-only.
    #[doc(hidden)]
    pub fn ccdiff_recovery_start_time(&self) -> Instant {{
        self.recovery_start_time
    }}
}}
"""


def append(path, needs, facade):
    if not path.is_file():
        sys.exit(f"apply.py: {path} not found: not a quinn-proto crate")
    src = path.read_text()
    if MARK in src:
        return
    for needle in needs:
        if src.count(needle) != 1:
            sys.exit(f"apply.py: {needle!r} found {src.count(needle)} times in {path} "
                     "(expected once); this quinn-proto layout is not supported")
    path.write_text(src + facade)


def main():
    crate = pathlib.Path(sys.argv[1])
    append(crate / "src/connection/paths.rs", NEEDS, FACADE)
    append(crate / "src/congestion/cubic.rs", CUBIC_NEEDS, CUBIC_FACADE)
    append(crate / "src/congestion/new_reno.rs", RENO_NEEDS, RENO_FACADE)

if __name__ == "__main__":
    main()

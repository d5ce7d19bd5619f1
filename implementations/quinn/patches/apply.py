#!/usr/bin/env python3
"""Build-time facade for quinn-proto (ccdiff).  Usage: apply.py QUINN_PROTO_CRATE_DIR

quinn's congestion controllers are public (congestion::{Cubic, NewReno} and the
Controller trait), but Controller::on_ack takes `&RttEstimator`, and
RttEstimator::new / ::update are pub(crate) (src/connection/paths.rs): nothing
outside the crate can make one.  quinn-proto has no cargo feature that exposes
them, so this appends one `impl RttEstimator` block at the END of paths.rs
(upstream line numbers unchanged) with two #[doc(hidden)] pub methods that
forward to new() and update().  No logic, no other file touched.  The facade is
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


def main():
    crate = pathlib.Path(sys.argv[1])
    paths = crate / "src/connection/paths.rs"
    if not paths.is_file():
        sys.exit(f"apply.py: {paths} not found: not a quinn-proto crate")
    src = paths.read_text()
    if MARK in src:
        return
    for needle in NEEDS:
        if src.count(needle) != 1:
            sys.exit(f"apply.py: {needle!r} found {src.count(needle)} times in {paths} "
                     "(expected once); this quinn-proto layout is not supported")
    paths.write_text(src + FACADE)


if __name__ == "__main__":
    main()

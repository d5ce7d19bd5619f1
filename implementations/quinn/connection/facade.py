#!/usr/bin/env python3
"""Build-time read-only accessors for quinn-proto (ccdiff connection shim).
Usage: facade.py QUINN_PROTO_CRATE_DIR

quinn-proto's public API gives the window (Connection::stats().path.cwnd,
congestion_state()), ssthresh (Controller::metrics()), smoothed and minimum RTT,
packet and loss counts.  Five values ccdiff reads are private:
  - bytes in flight: PathData.in_flight.bytes (Connection::bytes_in_flight()
    exists but is #[cfg(test)], src/connection/mod.rs);
  - the latest RTT sample: RttEstimator.latest (src/connection/paths.rs);
  - whether an RTT sample exists yet: RttEstimator.smoothed is an Option
    (RttEstimator::get() returns the configured initial RTT until then);
  - whether the last send loop ran out of data with room in the window:
    Connection.app_limited (set by every poll_transmit, src/connection/mod.rs:947),
    which gates the controller's growth and which quinn's qlog does not carry;
  - which packet number spaces still have keys: PacketSpace.crypto (discard_space,
    src/connection/mod.rs:2210-2228, takes them and their packets out of flight
    without a congestion event; quinn's qlog does not log it).
This appends one `impl` block at the END of src/connection/paths.rs and one at
the END of src/connection/mod.rs (upstream line numbers unchanged) with
#[doc(hidden)] pub methods that return those fields.  No logic, nothing else
touched, no behaviour changed.  Fails loudly when a field it reads is not there
(each needle must occur exactly once); idempotent.
"""
import pathlib
import sys

MARK = "// ccdiff-connection-facade"
EDITS = {
    "src/connection/paths.rs": (
        ("pub struct RttEstimator {", "    latest: Duration,", "    smoothed: Option<Duration>,",
         "pub(super) in_flight: InFlight,", "    pub(super) bytes: u64,"),
        f"""
{MARK}: appended at build time by ccdiff (implementations/quinn/connection/facade.py).
impl RttEstimator {{
    #[doc(hidden)]
    pub fn ccdiff_latest(&self) -> Duration {{
        self.latest
    }}

    #[doc(hidden)]
    pub fn ccdiff_smoothed(&self) -> Option<Duration> {{
        self.smoothed
    }}
}}
"""),
    "src/connection/mod.rs": (
        ("pub struct Connection {", "    path: PathData,", "pub use paths::RttEstimator;", "    app_limited: bool,",
         "    spaces: [PacketSpace; 3],"),
        f"""
{MARK}: appended at build time by ccdiff (implementations/quinn/connection/facade.py).
impl Connection {{
    #[doc(hidden)]
    pub fn ccdiff_bytes_in_flight(&self) -> u64 {{
        self.path.in_flight.bytes
    }}

    #[doc(hidden)]
    pub fn ccdiff_rtt(&self) -> &RttEstimator {{
        &self.path.rtt
    }}

    #[doc(hidden)]
    pub fn ccdiff_app_limited(&self) -> bool {{
        self.app_limited
    }}

    #[doc(hidden)]
    pub fn ccdiff_has_keys(&self) -> [bool; 3] {{
        [self.spaces[0].crypto.is_some(), self.spaces[1].crypto.is_some(), self.spaces[2].crypto.is_some()]
    }}
}}
"""),
}


def main():
    crate = pathlib.Path(sys.argv[1])
    for rel, (needles, block) in EDITS.items():
        path = crate / rel
        if not path.is_file():
            sys.exit(f"facade.py: {path} not found: not a quinn-proto crate")
        src = path.read_text()
        if MARK in src:
            continue
        for needle in needles:
            if src.count(needle) != 1:
                sys.exit(f"facade.py: {needle!r} found {src.count(needle)} times in {path} "
                         "(expected once); this quinn-proto layout is not supported")
        path.write_text(src + block)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Build-time clock facade for quiche's connection shim (ccdiff).
Usage: clock.py QUICHE_CRATE_DIR        (clock.py --count DIR: print the sites only)

quiche reads the clock itself (`Instant::now()` in lib.rs, path.rs, recovery/,
...), so connection mode gives it a clock the shim sets (issue #31):

  1. copies ccdiff_clock.rs (ours, next to this script) into src/ and declares
     it after the anchor line `mod rand;` of src/lib.rs as `pub mod ccdiff_clock;`;
  2. rewrites every `Instant::now()` / `std::time::Instant::now()` in src/**/*.rs
     (comment lines excepted) to `crate::ccdiff_clock::now()`;
  3. rewrites the one `Instant::elapsed()` (lib.rs, the ACK delay) to
     `crate::ccdiff_clock::now().saturating_duration_since(..)` (what elapsed() is);
  3b. rewrites every qlog `.add_event_data_now(x)` (lib.rs 1, h3/mod.rs 15: the
     qlog crate reads Instant::now() itself there) to
     `.add_event_data_with_instant(x, crate::ccdiff_clock::now())`, so the
     client's qlog (the shim's qlog=PATH option) is in virtual time too;
  4. rand.rs: `RAND_bytes(buf.as_mut_ptr(), buf.len());` (quiche's own draws:
     packet-number skips, path challenge data, the client's initial DCID) to
     `crate::ccdiff_clock::rand_bytes(buf);`, seeded per endpoint by the shim;
  5. appends to ccdiff_clock.rs the shim's idle_fix switch (idle_fix_switch);
  6. tls/mod.rs: after the anchor `impl Context {`, one accessor of the
     SSL_CTX, ccdiff_ssl_ctx(), so ccdiff_clock::verify_ed25519 can add Ed25519
     to the client's signature_algorithms (SSL_CTX_set_verify_algorithm_prefs;
     BoringSSL's client leaves it out by default, quiche has no setting, and
     the contract's test certificate is Ed25519).

ccdiff_clock.rs also has one read-only accessor, bytes_in_flight() (the active
path's RecoveryOps::bytes_in_flight(), not in quiche's public stats).

The sites per file and version are listed in SITES below and checked: a count
that differs from the table (a new quiche version, a moved call) fails the
build, so no clock read slips past the facade:
    0.26.0, 0.26.1: 67 Instant::now() in 16 files;  0.30.0: 105 in 21 files;
    all three: 1 elapsed(), 16 add_event_data_now(), 1 RAND_bytes.
Sites in #[cfg(test)] code (tests.rs, test_utils.rs, the *_tests.rs files and
the tests modules at the end of most files) are rewritten too; they are not
compiled here.  17 per version are compiled:
lib.rs 9 (Connection::new, send, recv, timeout/on_timeout, path and qlog
events), minmax.rs 1, packet.rs 1, recovery/mod.rs 1,
recovery/congestion/delivery_rate.rs 1 (initial values), gcongestion 4 (BBR2,
not driven).  `clock.py --count DIR` prints every site's line.

quiche's only other clock read is `SystemTime::now()` (0.30.0 lib.rs), the
wall-clock reference_time in the qlog header: it changes that one field of a
qlog, never a time of the run.
Idempotent: a second run changes nothing.
"""
import pathlib
import re
import sys

MARK = "// ccdiff-clock"
NOW = re.compile(r"\b(?:std::time::)?Instant::now\(\)")
NEW_NOW = "crate::ccdiff_clock::now()"
# qlog: the qlog crate's add_event_data_now() reads Instant::now() itself.
QLOG_NOW = re.compile(r"\.add_event_data_now\((\w+)\)")
NEW_QLOG_NOW = r".add_event_data_with_instant(\1, crate::ccdiff_clock::now())"
QLOG_SITES = {"lib.rs": 1, "h3/mod.rs": 15}   # the same in 0.26.0, 0.26.1, 0.30.0
ELAPSED = ("let ack_delay = pkt_space.largest_rx_pkt_time.elapsed();",
           "let ack_delay = crate::ccdiff_clock::now()"
           ".saturating_duration_since(pkt_space.largest_rx_pkt_time);")
RAND = ("RAND_bytes(buf.as_mut_ptr(), buf.len());",
        "crate::ccdiff_clock::rand_bytes(buf);")
TLS = ("impl Context {\n",
       "impl Context {\n    " + MARK + "\n"
       "    pub(crate) fn ccdiff_ssl_ctx(&mut self) -> *mut std::ffi::c_void {\n"
       "        self.as_mut_ptr() as *mut std::ffi::c_void\n    }\n\n")

# Instant::now() sites per file (src/-relative), per quiche version.
SITES_026 = {
    "flowcontrol.rs": 3, "lib.rs": 9, "minmax.rs": 11, "packet.rs": 2, "path.rs": 8,
    "recovery/bytes_in_flight.rs": 2, "recovery/congestion/delivery_rate.rs": 5,
    "recovery/congestion/test_sender.rs": 1, "recovery/gcongestion/bbr/bandwidth_sampler.rs": 4,
    "recovery/gcongestion/bbr2/mode.rs": 1, "recovery/gcongestion/bbr2/network_model.rs": 1,
    "recovery/gcongestion/bbr2/probe_rtt.rs": 1, "recovery/mod.rs": 12, "stream/mod.rs": 1,
    "test_utils.rs": 1, "tests.rs": 5,
}
SITES = {
    "0.26.0": SITES_026,
    "0.26.1": SITES_026,
    "0.30.0": {
        "flowcontrol.rs": 3, "lib.rs": 9, "minmax.rs": 11, "packet.rs": 2, "path.rs": 8,
        "recovery/bytes_in_flight.rs": 2, "recovery/congestion/delivery_rate.rs": 5,
        "recovery/congestion/recovery.rs": 1, "recovery/congestion/test_sender.rs": 1,
        "recovery/gcongestion/bbr/bandwidth_sampler.rs": 4, "recovery/gcongestion/bbr2/mode.rs": 1,
        "recovery/gcongestion/bbr2/network_model.rs": 9, "recovery/gcongestion/bbr2/probe_rtt.rs": 1,
        "recovery/gcongestion/bbr2/rtt_jump_detector/global_min_tests.rs": 9,
        "recovery/gcongestion/bbr2/rtt_jump_detector/hmm_tests.rs": 16,
        "recovery/gcongestion/bbr2/rtt_jump_detector/mod.rs": 1,
        "recovery/gcongestion/recovery.rs": 1, "recovery/mod.rs": 14, "stream/mod.rs": 1,
        "test_utils.rs": 1, "tests.rs": 5,
    },
}


def die(msg):
    sys.exit(f"clock.py: {msg}")


def version(crate):
    m = re.search(r'^version = "([^"]+)"$', (crate / "Cargo.toml").read_text(), re.M)
    if not m:
        die(f"cannot read the version from {crate}/Cargo.toml")
    return m.group(1)


def sites(src, pattern=NOW):
    """{file: [line numbers]} of the pattern outside comment lines."""
    found = {}
    for path in sorted(src.rglob("*.rs")):
        if path.name == "ccdiff_clock.rs":
            continue
        for no, line in enumerate(path.read_text().split("\n"), 1):
            if not line.lstrip().startswith("//") and pattern.search(line):
                found.setdefault(str(path.relative_to(src)), []).extend([no] * len(pattern.findall(line)))
    return found


def rewrite(src, found, pattern, new):
    for f in found:
        path = src / f
        lines = path.read_text().split("\n")
        lines = [l if l.lstrip().startswith("//") else pattern.sub(new, l) for l in lines]
        path.write_text("\n".join(lines))


def replace_once(path, old, new):
    text = path.read_text()
    if new in text and old not in text:
        return
    n = text.count(old)
    if n != 1:
        die(f"anchor {old!r} found {n} times in {path} (expected exactly once)")
    path.write_text(text.replace(old, new))


def idle_fix_switch(src):
    """The shim's idle_fix option: Config::set_enable_cubic_idle_restart_fix where
    quiche has it (>= 0.28), else the behaviour built into cubic.rs (0.26.1 has the
    fix, measured from max(last_ack_time, last_sent_time); 0.26.0 does not)."""
    if "pub fn set_enable_cubic_idle_restart_fix(" in (src / "lib.rs").read_text():
        return ("\n/// quiche has the switch; its default is on.\n"
                "pub const IDLE_FIX_BUILTIN: bool = true;\n\n"
                "/// Sets RecoveryConfig.enable_cubic_idle_restart_fix; always possible here.\n"
                "pub fn set_idle_restart_fix(c: &mut crate::Config, on: bool) -> bool {\n"
                "    c.set_enable_cubic_idle_restart_fix(on);\n    true\n}\n")
    builtin = "last_ack_time" in (src / "recovery/congestion/cubic.rs").read_text()
    return ("\n/// No switch in this quiche: whether cubic.rs has the idle-restart fix.\n"
            f"pub const IDLE_FIX_BUILTIN: bool = {'true' if builtin else 'false'};\n\n"
            "/// No switch: only the built-in behaviour is accepted.\n"
            "pub fn set_idle_restart_fix(_c: &mut crate::Config, on: bool) -> bool {\n"
            "    on == IDLE_FIX_BUILTIN\n}\n")


def main():
    args = sys.argv[1:]
    count_only = args[:1] == ["--count"]
    if count_only:
        args = args[1:]
    if len(args) != 1:
        die("usage: clock.py [--count] QUICHE_CRATE_DIR")
    crate = pathlib.Path(args[0])
    src = crate / "src"
    if not (src / "lib.rs").is_file():
        die(f"{src}/lib.rs not found: not a quiche crate")
    ver = version(crate)
    found = sites(src)
    if count_only:
        for f, lines in found.items():
            print(f"{f}: {len(lines)} at {', '.join(map(str, lines))}")
        print(f"total {sum(map(len, found.values()))} in {len(found)} files")
        for f, lines in sites(src, QLOG_NOW).items():
            print(f"qlog add_event_data_now {f}: {len(lines)} at {', '.join(map(str, lines))}")
        return
    lib = src / "lib.rs"
    if MARK in lib.read_text():
        if found:
            die(f"{crate} is marked as patched but still has Instant::now() in {sorted(found)}")
        return  # already patched
    expected = SITES.get(ver)
    if expected is None:
        die(f"quiche {ver}: no site table; check `clock.py --count` and add SITES[{ver!r}]")
    counts = {f: len(lines) for f, lines in found.items()}
    if counts != expected:
        diff = sorted(f"{f}: {counts.get(f, 0)} (expected {expected.get(f, 0)})"
                      for f in set(counts) | set(expected) if counts.get(f, 0) != expected.get(f, 0))
        die(f"quiche {ver}: Instant::now() sites differ from the table: " + "; ".join(diff))
    qlog_found = sites(src, QLOG_NOW)
    qlog_counts = {f: len(lines) for f, lines in qlog_found.items()}
    if qlog_counts != QLOG_SITES:
        die(f"quiche {ver}: add_event_data_now() sites {qlog_counts}, expected {QLOG_SITES}")
    rewrite(src, found, NOW, NEW_NOW)
    rewrite(src, qlog_found, QLOG_NOW, NEW_QLOG_NOW)
    replace_once(lib, *ELAPSED)
    replace_once(src / "rand.rs", *RAND)
    replace_once(src / "tls/mod.rs", *TLS)
    (src / "ccdiff_clock.rs").write_text(
        pathlib.Path(__file__).with_name("ccdiff_clock.rs").read_text() + idle_fix_switch(src))
    lines = lib.read_text().split("\n")
    hits = [i for i, l in enumerate(lines) if l == "mod rand;"]
    if len(hits) != 1:
        die(f"anchor 'mod rand;' found {len(hits)} times in {lib} (expected exactly once)")
    lines[hits[0] + 1:hits[0] + 1] = [MARK, "/// ccdiff connection mode: the clock the shim sets.", "pub mod ccdiff_clock;"]
    lib.write_text("\n".join(lines))
    left = {**sites(src), **sites(src, QLOG_NOW)}
    if left:
        die(f"clock reads left after the rewrite: {left}")
    print(f"clock.py: quiche {ver}: {sum(counts.values())} Instant::now() sites in "
          f"{len(counts)} files, 1 elapsed(), {sum(QLOG_SITES.values())} qlog add_event_data_now(), "
          "1 RAND_bytes -> crate::ccdiff_clock")


if __name__ == "__main__":
    main()

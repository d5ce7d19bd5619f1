#!/usr/bin/env python3
"""Build-time patch for quiche (ccdiff).  Usage: apply.py QUICHE_CRATE_DIR

Exposes quiche's legacy congestion controller (src/recovery/congestion/) behind
quiche's existing cargo feature "internal", without touching any upstream logic:

  1. copies ccdiff_internal.rs (ours, next to this script) into
     src/recovery/congestion/ and declares it as a child module of cubic.rs,
     so it may read cubic::State (k, w_max) and Congestion's private fields;
  2. adds three `pub use` re-exports (congestion -> recovery -> crate root) so
     the adapter crate can name it as `quiche::ccdiff_internal`.

Every insertion is anchored on an exact upstream line and the script fails
loudly if an anchor is missing.  Idempotent: a second run changes nothing.
Lines of ccdiff_internal.rs tagged `// ccdiff:idle_fix` are kept only when the
source has RecoveryConfig.enable_cubic_idle_restart_fix (quiche >= 0.28),
lines tagged `// ccdiff:no_idle_fix` only when it does not.
"""
import pathlib
import sys

MARK = "// ccdiff-internal"


def insert_after(path, anchor, text):
    src = path.read_text()
    if MARK in src:
        return  # already patched
    lines = src.split("\n")
    hits = [i for i, l in enumerate(lines) if l == anchor]
    if len(hits) != 1:
        sys.exit(f"apply.py: anchor {anchor!r} found {len(hits)} times in {path} "
                 "(expected exactly once); this quiche layout is not supported")
    lines[hits[0] + 1:hits[0] + 1] = [MARK, '#[cfg(feature = "internal")]', text]
    path.write_text("\n".join(lines))


def main():
    crate = pathlib.Path(sys.argv[1])
    cc = crate / "src/recovery/congestion"
    if not (cc / "cubic.rs").is_file():
        sys.exit(f"apply.py: {cc}/cubic.rs not found: not a quiche crate with the "
                 "legacy congestion module")
    has_fix = "enable_cubic_idle_restart_fix" in (cc / "mod.rs").read_text()
    drop = "// ccdiff:no_idle_fix" if has_fix else "// ccdiff:idle_fix"
    facade = pathlib.Path(__file__).with_name("ccdiff_internal.rs").read_text()
    facade = "\n".join(l for l in facade.split("\n") if not l.rstrip().endswith(drop))
    (cc / "ccdiff_internal.rs").write_text(facade)

    # cubic.rs has no unique trailing anchor, so append (once).
    cubic = cc / "cubic.rs"
    if MARK not in cubic.read_text():
        with cubic.open("a") as f:
            f.write(f'\n{MARK}\n#[cfg(feature = "internal")]\n'
                    '#[path = "ccdiff_internal.rs"]\npub mod ccdiff_internal;\n')
    insert_after(cc / "mod.rs", "mod cubic;", "pub use self::cubic::ccdiff_internal;")
    insert_after(crate / "src/recovery/mod.rs", "mod congestion;",
                 "pub use self::congestion::ccdiff_internal;")
    insert_after(crate / "src/lib.rs", "mod recovery;",
                 "pub use crate::recovery::ccdiff_internal;")
    print(f"apply.py: patched {crate} (idle fix field: {'yes' if has_fix else 'no'})")


if __name__ == "__main__":
    main()

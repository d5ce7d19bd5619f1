#!/usr/bin/env bash
# Build the ccdiff adapter for quiche:  build.sh SRC_DIR OUT_DIR
#   SRC_DIR: the unpacked quiche crate (quiche-<ver>/ from crates.io), or a git
#            checkout of github.com/cloudflare/quiche (the crate is quiche/ in it).
#   OUT_DIR: receives libccdiff_adapter.so; work/ and target/ live under it.
# SRC_DIR is never modified: it is copied to OUT_DIR/work/ and patched there
# (patches/apply.py).  Re-running only rebuilds what changed.
# Env: CCDIFF_STACK_VERSION (informational), CCDIFF_SANITIZE=1 (no-op, see below),
#      CARGO (default: cargo), RUSTFLAGS (e.g. coverage instrumentation for the fuzz
#      harnesses) with CARGO_BUILD_TARGET set so build scripts and proc macros are
#      built without them (cargo then puts the output under target/<triple>/).
# Needs: cargo/rustc >= 1.88 (quiche's rust-version), python3.
# apt: (none)
set -euo pipefail

die() { echo "quiche/build.sh: error: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: build.sh SRC_DIR OUT_DIR"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -d "$1" ] || die "SRC_DIR $1 is not a directory"
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
CARGO=${CARGO:-cargo}
command -v "$CARGO" >/dev/null || die "cargo not found (install rustup/cargo >= 1.88)"
command -v python3 >/dev/null || die "python3 not found"

# A crate archive has the crate at its top; a repository checkout has it at quiche/.
if [ -f "$SRC/src/recovery/congestion/cubic.rs" ]; then
    KIND=crate; CRATE_REL=.
elif [ -f "$SRC/quiche/src/recovery/congestion/cubic.rs" ]; then
    KIND=checkout; CRATE_REL=quiche
else
    die "$SRC is neither a quiche crate (src/recovery/congestion/cubic.rs) nor a quiche checkout (quiche/src/...)"
fi
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$SRC/$CRATE_REL/Cargo.toml" | head -n1)
[ -n "$VERSION" ] || die "cannot read the version from $SRC/$CRATE_REL/Cargo.toml"
echo "quiche/build.sh: quiche $VERSION ($KIND) from $SRC${CCDIFF_STACK_VERSION:+, requested $CCDIFF_STACK_VERSION}"
if [ "${CCDIFF_SANITIZE:-0}" = 1 ]; then
    echo "quiche/build.sh: CCDIFF_SANITIZE=1 ignored: pure Rust (ASan needs nightly);" \
         "overflow-checks and debug-assertions are always on" >&2
fi

# The steps the Rust builds share: stage_upstream, use_lock, sync_tree, cargo_build_library
. "$HERE/../include/rust_build.sh"
WORK=$OUT/work
STAGE=$WORK/stage
rm -rf "$STAGE"
mkdir -p "$STAGE/adapter"
# Stage: copy the source (minus VCS and build output), patch it, add the adapter.
stage_upstream "$SRC" "$STAGE/upstream"
python3 "$HERE/patches/apply.py" "$STAGE/upstream/$CRATE_REL"
cp -R "$HERE/adapter/Cargo.toml" "$HERE/adapter/src" "$STAGE/adapter/"
# The adapter's path dependency is ../quiche: point it at the crate.
sed -i "s|path = \"../quiche\"|path = \"../upstream/$CRATE_REL\"|" "$STAGE/adapter/Cargo.toml"

# No committed lock (a checkout, or a release not pinned yet): start from upstream's own
# lock so versions match what quiche pins, and let cargo add/prune the rest.
LOCK=$HERE/adapter/locks/$VERSION.lock
use_lock quiche/build.sh "$KIND" "$LOCK" "$STAGE/adapter/Cargo.lock" \
    "$SRC/$CRATE_REL/Cargo.lock" "$SRC/Cargo.lock"

sync_tree "$STAGE" "$WORK/tree"

cargo_build_library "$WORK/tree/adapter/Cargo.toml" libccdiff_adapter.so "$OUT"
echo "quiche/build.sh: built $OUT/libccdiff_adapter.so"

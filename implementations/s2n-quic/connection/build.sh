#!/usr/bin/env bash
# Build the ccdiff connection shim for s2n-quic:  build.sh SRC_DIR OUT_DIR
#   SRC_DIR: the unpacked s2n-quic-core crate (s2n-quic-core-<ver>/ from crates.io: the
#            adapter's pinned, sha256-checked source).  Its version names the release: the
#            shim links the s2n-quic crate of the same release line (s2n-quic 1.M.P goes with
#            s2n-quic-core 0.M.P: s2n-quic 1.91.0 pins s2n-quic-core =0.91.0), and every s2n
#            crate comes from crates.io, pinned with checksums by locks/<core version>.lock
#            (--locked).  SRC_DIR's own code is not compiled: the lock's s2n-quic-core is the
#            same release from the same registry.
#   OUT_DIR: receives libccdiff_connection.so; work/ and target/ live under it.
# SRC_DIR is never modified.  Nothing of s2n-quic is patched: the shim drives the endpoint
# through its public I/O provider trait (src/lib.rs).  TLS is rustls with aws-lc-rs
# (s2n-quic's provider-tls-rustls); aws-lc-sys 0.47 builds its C with the cc crate's builder
# ("Building with: CC"): gcc only, no cmake, no Go, no NASM (x86_64 Linux).
# Re-running only rebuilds what changed.
# Env: CCDIFF_STACK_VERSION (informational), CARGO (default: cargo),
#      CARGO_BUILD_JOBS (e.g. 1 on a shared machine), CARGO_NET_OFFLINE=true to
#      build from the local cargo registry cache only.
# Needs: cargo/rustc >= 1.95 (s2n-quic 1.91.0's rust-version), python3, a C compiler.
# apt: (none)
set -euo pipefail

die() { echo "s2n-quic/connection/build.sh: error: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: build.sh SRC_DIR OUT_DIR"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -d "$1" ] || die "SRC_DIR $1 is not a directory"
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
CARGO=${CARGO:-cargo}
command -v "$CARGO" >/dev/null || die "cargo not found (install rustup/cargo >= 1.95)"
command -v python3 >/dev/null || die "python3 not found"

[ -f "$SRC/Cargo.toml" ] && [ -f "$SRC/src/recovery/cubic.rs" ] \
    || die "$SRC is not an s2n-quic-core crate (Cargo.toml, src/recovery/cubic.rs)"
NAME=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$SRC/Cargo.toml" | head -n1)
[ "$NAME" = s2n-quic-core ] || die "$SRC/Cargo.toml names $NAME, not s2n-quic-core"
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$SRC/Cargo.toml" | head -n1)
case $VERSION in
    0.*.*) S2N_QUIC_VERSION=1.${VERSION#0.} ;;
    *) die "s2n-quic-core $VERSION: expected 0.M.P (s2n-quic 1.M.P)" ;;
esac
echo "s2n-quic/connection/build.sh: s2n-quic $S2N_QUIC_VERSION with s2n-quic-core $VERSION (from $SRC)${CCDIFF_STACK_VERSION:+, requested $CCDIFF_STACK_VERSION}"

# The steps the Rust builds share: use_lock, sync_tree, cargo_build_library
. "$HERE/../../include/rust_build.sh"
WORK=$OUT/work
STAGE=$WORK/stage
rm -rf "$STAGE"
mkdir -p "$STAGE/shim"
cp -R "$HERE/Cargo.toml" "$HERE/src" "$STAGE/shim/"
sed -i -e "s|s2n-quic = { version = \"=[^\"]*\"|s2n-quic = { version = \"=$S2N_QUIC_VERSION\"|" \
       -e "s|s2n-quic-core = { version = \"=[^\"]*\"|s2n-quic-core = { version = \"=$VERSION\"|" \
    "$STAGE/shim/Cargo.toml"
grep -q "s2n-quic = { version = \"=$S2N_QUIC_VERSION\"" "$STAGE/shim/Cargo.toml" || die "Cargo.toml: s2n-quic version not set"
grep -q "s2n-quic-core = { version = \"=$VERSION\"" "$STAGE/shim/Cargo.toml" || die "Cargo.toml: s2n-quic-core version not set"

LOCK=$HERE/locks/$VERSION.lock
use_lock s2n-quic/connection/build.sh crate "$LOCK" "$STAGE/shim/Cargo.lock"

sync_tree "$STAGE" "$WORK/tree"

cargo_build_library "$WORK/tree/shim/Cargo.toml" libccdiff_connection.so "$OUT"
echo "s2n-quic/connection/build.sh: built $OUT/libccdiff_connection.so"

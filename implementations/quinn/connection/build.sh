#!/usr/bin/env bash
# Build the ccdiff connection shim for quinn:  build.sh SRC_DIR OUT_DIR
#   SRC_DIR: the unpacked quinn-proto crate (quinn-proto-<ver>/ from crates.io, the
#            adapter's pinned, sha256-checked source), or a git checkout of
#            github.com/quinn-rs/quinn (the crate is quinn-proto/ in it).
#   OUT_DIR: receives libccdiff_connection.so; work/ and target/ live under it.
# SRC_DIR is never modified: it is copied to OUT_DIR/work/ and the read-only
# accessors of facade.py are appended there.  Re-running only rebuilds what changed.
# quinn-proto is built with rustls + ring (feature rustls-ring): every dependency
# comes from crates.io, pinned by locks/<version>.lock (--locked); ring's C and
# assembly need only cc (gcc), no cmake.
# Env: CCDIFF_STACK_VERSION (informational), CARGO (default: cargo),
#      CARGO_BUILD_JOBS (e.g. 1 on a shared machine), CARGO_NET_OFFLINE=true to
#      build from the local cargo registry cache only.
# Needs: cargo/rustc >= 1.85 (quinn-proto's rust-version), python3, a C compiler.
# apt: (none)
set -euo pipefail

die() { echo "quinn/connection/build.sh: error: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: build.sh SRC_DIR OUT_DIR"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -d "$1" ] || die "SRC_DIR $1 is not a directory"
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
CARGO=${CARGO:-cargo}
command -v "$CARGO" >/dev/null || die "cargo not found (install rustup/cargo >= 1.85)"
command -v python3 >/dev/null || die "python3 not found"

if [ -f "$SRC/src/connection/paths.rs" ] && [ -f "$SRC/src/endpoint.rs" ]; then
    KIND=crate; CRATE_REL=.
elif [ -f "$SRC/quinn-proto/src/connection/paths.rs" ]; then
    KIND=checkout; CRATE_REL=quinn-proto
else
    die "$SRC is neither a quinn-proto crate (src/connection/paths.rs) nor a quinn checkout (quinn-proto/src/...)"
fi
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$SRC/$CRATE_REL/Cargo.toml" | head -n1)
[ -n "$VERSION" ] || VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$SRC/Cargo.toml" 2>/dev/null | head -n1)
[ -n "$VERSION" ] || die "cannot read the version from $SRC/$CRATE_REL/Cargo.toml"
echo "quinn/connection/build.sh: quinn-proto $VERSION ($KIND) from $SRC${CCDIFF_STACK_VERSION:+, requested $CCDIFF_STACK_VERSION}"

# The steps the Rust builds share: stage_upstream, use_lock, sync_tree, cargo_build_library
. "$HERE/../../include/rust_build.sh"
WORK=$OUT/work
STAGE=$WORK/stage
rm -rf "$STAGE"
mkdir -p "$STAGE/shim"
stage_upstream "$SRC" "$STAGE/upstream"
python3 "$HERE/facade.py" "$STAGE/upstream/$CRATE_REL"
cp -R "$HERE/Cargo.toml" "$HERE/src" "$STAGE/shim/"
sed -i "s|path = \"../quinn-proto\"|path = \"../upstream/$CRATE_REL\"|" "$STAGE/shim/Cargo.toml"
grep -q "path = \"../upstream/$CRATE_REL\"" "$STAGE/shim/Cargo.toml" || die "Cargo.toml: quinn-proto path not rewritten"

LOCK=$HERE/locks/$VERSION.lock
use_lock quinn/connection/build.sh "$KIND" "$LOCK" "$STAGE/shim/Cargo.lock"

sync_tree "$STAGE" "$WORK/tree"

cargo_build_library "$WORK/tree/shim/Cargo.toml" libccdiff_connection.so "$OUT"
echo "quinn/connection/build.sh: built $OUT/libccdiff_connection.so"

#!/usr/bin/env bash
# Build the ccdiff adapter for quinn:  build.sh SRC_DIR OUT_DIR
#   SRC_DIR: the unpacked quinn-proto crate (quinn-proto-<ver>/ from crates.io), or a
#            git checkout of github.com/quinn-rs/quinn (the crate is quinn-proto/ in it).
#   OUT_DIR: receives libccdiff_adapter.so; work/ and target/ live under it.
# SRC_DIR is never modified: it is copied to OUT_DIR/work/ and the facade is added
# there (patches/apply.py).  Re-running only rebuilds what changed.
# Env: CCDIFF_STACK_VERSION (informational), CCDIFF_SANITIZE=1 (no-op, see below),
#      CARGO (default: cargo), RUSTFLAGS (e.g. the fuzz harnesses' sancov
#      instrumentation) with CARGO_BUILD_TARGET set so build scripts and proc macros
#      are built without them (cargo then puts the output under target/<triple>/),
#      CARGO_NET_OFFLINE=true to build from the local cargo registry cache only.
# Needs: cargo/rustc >= 1.85 (quinn-proto's rust-version), python3.
# apt: (none)
set -euo pipefail

die() { echo "quinn/build.sh: error: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: build.sh SRC_DIR OUT_DIR"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -d "$1" ] || die "SRC_DIR $1 is not a directory"
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
CARGO=${CARGO:-cargo}
command -v "$CARGO" >/dev/null || die "cargo not found (install rustup/cargo >= 1.85)"
command -v python3 >/dev/null || die "python3 not found"

# A crate archive has the crate at its top; a repository checkout has it at quinn-proto/.
if [ -f "$SRC/src/congestion/cubic.rs" ] && [ -f "$SRC/src/connection/paths.rs" ]; then
    KIND=crate; CRATE_REL=.
elif [ -f "$SRC/quinn-proto/src/congestion/cubic.rs" ]; then
    KIND=checkout; CRATE_REL=quinn-proto
else
    die "$SRC is neither a quinn-proto crate (src/congestion/cubic.rs) nor a quinn checkout (quinn-proto/src/...)"
fi
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$SRC/$CRATE_REL/Cargo.toml" | head -n1)
[ -n "$VERSION" ] || VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$SRC/Cargo.toml" 2>/dev/null | head -n1)
[ -n "$VERSION" ] || die "cannot read the version from $SRC/$CRATE_REL/Cargo.toml"
echo "quinn/build.sh: quinn-proto $VERSION ($KIND) from $SRC${CCDIFF_STACK_VERSION:+, requested $CCDIFF_STACK_VERSION}"
if [ "${CCDIFF_SANITIZE:-0}" = 1 ]; then
    echo "quinn/build.sh: CCDIFF_SANITIZE=1 ignored: pure Rust (ASan needs nightly);" \
         "overflow-checks and debug-assertions are always on" >&2
fi

# The steps the Rust builds share: stage_upstream, use_lock, sync_tree, cargo_build_library
. "$HERE/../include/rust_build.sh"
WORK=$OUT/work
STAGE=$WORK/stage
rm -rf "$STAGE"
mkdir -p "$STAGE/adapter"
# Stage: copy the source (minus VCS and build output), add the facade, add the adapter.
stage_upstream "$SRC" "$STAGE/upstream"
python3 "$HERE/patches/apply.py" "$STAGE/upstream/$CRATE_REL"
cp -R "$HERE/adapter/Cargo.toml" "$HERE/adapter/src" "$STAGE/adapter/"
# The adapter's path dependency is ../quinn-proto: point it at the crate.
sed -i "s|path = \"../quinn-proto\"|path = \"../upstream/$CRATE_REL\"|" "$STAGE/adapter/Cargo.toml"

# The committed lock pins every dependency by version and checksum (the crate itself
# is pinned by stack.toml's sha256).  A checkout builds unlocked.
LOCK=$HERE/adapter/locks/$VERSION.lock
use_lock quinn/build.sh "$KIND" "$LOCK" "$STAGE/adapter/Cargo.lock"

sync_tree "$STAGE" "$WORK/tree"

cargo_build_library "$WORK/tree/adapter/Cargo.toml" libccdiff_adapter.so "$OUT"
echo "quinn/build.sh: built $OUT/libccdiff_adapter.so"

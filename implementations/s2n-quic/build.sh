#!/usr/bin/env bash
# Build the ccdiff adapter for s2n-quic:  build.sh SRC_DIR OUT_DIR
#   SRC_DIR: the unpacked s2n-quic-core crate (s2n-quic-core-<ver>/ from crates.io), or a
#            git checkout of github.com/aws/s2n-quic (the crate is quic/s2n-quic-core/).
#   OUT_DIR: receives libccdiff_adapter.so; work/ and target/ live under it.
# SRC_DIR is never modified: it is copied to OUT_DIR/work/ (no patch: the controller's
# API is public).  Re-running only rebuilds what changed.
# Env: CCDIFF_STACK_VERSION (informational), CCDIFF_SANITIZE=1 (no-op, see below),
#      CARGO (default: cargo), RUSTFLAGS (e.g. the fuzz harnesses' sancov
#      instrumentation) with CARGO_BUILD_TARGET set so build scripts and proc macros
#      are built without them (cargo then puts the output under target/<triple>/),
#      CARGO_NET_OFFLINE=true to build from the local cargo registry cache only.
# Needs: cargo/rustc >= 1.95 (s2n-quic-core 0.91's rust-version), python3.
# apt: (none)
set -euo pipefail

die() { echo "s2n-quic/build.sh: error: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: build.sh SRC_DIR OUT_DIR"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -d "$1" ] || die "SRC_DIR $1 is not a directory"
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
CARGO=${CARGO:-cargo}
command -v "$CARGO" >/dev/null || die "cargo not found (install rustup/cargo >= 1.95)"
command -v python3 >/dev/null || die "python3 not found"

# A crate archive has the crate at its top; a repository checkout has it at
# quic/s2n-quic-core/ (and path dependencies on sibling crates, which an unlocked build
# resolves inside the checkout).
if [ -f "$SRC/src/recovery/cubic.rs" ] && [ -f "$SRC/src/recovery/congestion_controller.rs" ]; then
    KIND=crate; CRATE_REL=.
elif [ -f "$SRC/quic/s2n-quic-core/src/recovery/cubic.rs" ]; then
    KIND=checkout; CRATE_REL=quic/s2n-quic-core
else
    die "$SRC is neither an s2n-quic-core crate (src/recovery/cubic.rs) nor an s2n-quic checkout (quic/s2n-quic-core/src/...)"
fi
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$SRC/$CRATE_REL/Cargo.toml" | head -n1)
[ -n "$VERSION" ] || VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$SRC/Cargo.toml" 2>/dev/null | head -n1)
[ -n "$VERSION" ] || die "cannot read the version from $SRC/$CRATE_REL/Cargo.toml"
echo "s2n-quic/build.sh: s2n-quic-core $VERSION ($KIND) from $SRC${CCDIFF_STACK_VERSION:+, requested $CCDIFF_STACK_VERSION}"
if [ "${CCDIFF_SANITIZE:-0}" = 1 ]; then
    echo "s2n-quic/build.sh: CCDIFF_SANITIZE=1 ignored: pure Rust (ASan needs nightly);" \
         "overflow-checks and debug-assertions are always on" >&2
fi

# The steps the Rust builds share: stage_upstream, use_lock, sync_tree, cargo_build_library
. "$HERE/../include/rust_build.sh"
WORK=$OUT/work
STAGE=$WORK/stage
rm -rf "$STAGE"
mkdir -p "$STAGE/adapter"
# Stage: copy the source (minus VCS and build output), add the read-only facade
# (patches/apply.py), add the adapter.
stage_upstream "$SRC" "$STAGE/upstream"
python3 "$HERE/patches/apply.py" "$STAGE/upstream/$CRATE_REL"
cp -R "$HERE/adapter/Cargo.toml" "$HERE/adapter/src" "$STAGE/adapter/"
# The adapter's path dependency is ../s2n-quic-core: point it at the crate.
sed -i "s|path = \"../s2n-quic-core\"|path = \"../upstream/$CRATE_REL\"|" "$STAGE/adapter/Cargo.toml"

# The committed lock pins every dependency by version and checksum (the crate itself
# is pinned by stack.toml's sha256).  A checkout builds unlocked.
LOCK=$HERE/adapter/locks/$VERSION.lock
use_lock s2n-quic/build.sh "$KIND" "$LOCK" "$STAGE/adapter/Cargo.lock"

sync_tree "$STAGE" "$WORK/tree"

cargo_build_library "$WORK/tree/adapter/Cargo.toml" libccdiff_adapter.so "$OUT"
echo "s2n-quic/build.sh: built $OUT/libccdiff_adapter.so"

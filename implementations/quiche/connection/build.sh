#!/usr/bin/env bash
# Build quiche's connection shim (docs/connection-mode.md):  build.sh SRC_DIR OUT_DIR
#   SRC_DIR: the unpacked quiche crate (quiche-<ver>/ from crates.io, or the folder
#            holding it), or a checkout of github.com/cloudflare/quiche (quiche/ in it).
#   OUT_DIR: receives libccdiff_connection.so; work/ and target/ live under it.
# SRC_DIR is never modified: it is copied to OUT_DIR/work/ and given the clock
# facade there (patches/clock.py: every Instant::now() of src/ reads the
# virtual time the shim sets).  The shim crate (shim/) depends on it by path,
# with quiche's default TLS: BoringSSL compiled from source (0.26.x: the
# vendored deps/boringssl; 0.30.0: the boring-sys crate's), hence cmake and a
# C++ compiler.  Re-running only rebuilds what changed.
# Env: CARGO (default: cargo), CARGO_BUILD_JOBS (default: 2), CCDIFF_STACK_VERSION
#      (informational).
# Needs: cargo/rustc >= 1.88 (quiche's rust-version), python3, cmake, g++
#        (BoringSSL).  0.30.0's boring-sys also runs bindgen: libclang.
# apt: cmake g++ libclang-dev (setup/debian-packages.txt, group connection)
set -euo pipefail

die() { echo "quiche/connection/build.sh: error: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: build.sh SRC_DIR OUT_DIR"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -d "$1" ] || die "SRC_DIR $1 is not a directory"
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
CARGO=${CARGO:-cargo}
command -v "$CARGO" >/dev/null || die "cargo not found (install rustup/cargo >= 1.88)"
command -v python3 >/dev/null || die "python3 not found"
command -v cmake >/dev/null || die "cmake not found (BoringSSL's build; apt-get install cmake)"
command -v c++ >/dev/null || command -v g++ >/dev/null || die "no C++ compiler (BoringSSL's libssl; apt-get install g++)"

# The crate itself, a repository checkout (crate at quiche/), or the folder a
# crate archive was unpacked into (one quiche-<ver>/ in it).
if [ ! -f "$SRC/src/lib.rs" ]; then
    if [ -f "$SRC/quiche/src/lib.rs" ]; then
        SRC=$SRC/quiche
    else
        shopt -s nullglob
        CANDIDATES=("$SRC"/quiche-*/src/lib.rs)
        shopt -u nullglob
        [ ${#CANDIDATES[@]} -eq 1 ] || die "$SRC is not a quiche crate (src/lib.rs), a checkout (quiche/src/lib.rs) or a folder with one quiche-<ver>/"
        SRC=$(dirname "$(dirname "${CANDIDATES[0]}")")
    fi
fi
[ -f "$SRC/Cargo.toml" ] || die "$SRC has no Cargo.toml"
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$SRC/Cargo.toml" | head -n1)
[ -n "$VERSION" ] || die "cannot read the version from $SRC/Cargo.toml"
echo "quiche/connection/build.sh: quiche $VERSION from $SRC${CCDIFF_STACK_VERSION:+, requested $CCDIFF_STACK_VERSION}"

# The steps the Rust builds share: stage_upstream, use_lock, sync_tree, cargo_build_library
. "$HERE/../../include/rust_build.sh"
WORK=$OUT/work
STAGE=$WORK/stage
rm -rf "$STAGE"
mkdir -p "$STAGE/shim"
stage_upstream "$SRC" "$STAGE/quiche"
python3 "$HERE/patches/clock.py" "$STAGE/quiche"
cp -R "$HERE/shim/Cargo.toml" "$HERE/shim/src" "$STAGE/shim/"

# No committed lock: start from quiche's own lock so versions match what it pins, and let
# cargo add/prune the rest.
LOCK=$HERE/locks/$VERSION.lock
use_lock quiche/connection/build.sh crate "$LOCK" "$STAGE/shim/Cargo.lock" "$SRC/Cargo.lock"

sync_tree "$STAGE" "$WORK/tree"

export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
# BoringSSL's cmake build honours CMAKE_BUILD_PARALLEL_LEVEL (the cmake crate sets it
# from cargo's jobs).
cargo_build_library "$WORK/tree/shim/Cargo.toml" libccdiff_connection.so "$OUT"
echo "quiche/connection/build.sh: built $OUT/libccdiff_connection.so"

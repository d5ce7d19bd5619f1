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

WORK=$OUT/work
STAGE=$WORK/stage
rm -rf "$STAGE"
mkdir -p "$STAGE/shim" "$STAGE/quiche"
tar -C "$SRC" --exclude=./.git --exclude=./target -cf - . | tar -C "$STAGE/quiche" -xf -
python3 "$HERE/patches/clock.py" "$STAGE/quiche"
cp -R "$HERE/shim/Cargo.toml" "$HERE/shim/src" "$STAGE/shim/"

LOCK=$HERE/locks/$VERSION.lock
LOCKED=()
if [ -f "$LOCK" ]; then
    cp "$LOCK" "$STAGE/shim/Cargo.lock"
    LOCKED=(--locked)
else
    # No committed lock: start from quiche's own lock so versions match what it
    # pins, and let cargo add/prune the rest.
    [ -f "$SRC/Cargo.lock" ] && cp "$SRC/Cargo.lock" "$STAGE/shim/Cargo.lock"
    echo "quiche/connection/build.sh: note: no committed lock for $VERSION; building unlocked" >&2
    echo "quiche/connection/build.sh: pin it with: cp $WORK/tree/shim/Cargo.lock $LOCK" >&2
fi

# Sync the stage into work/tree, touching only files whose content changed, so
# cargo's mtime fingerprints keep a re-run incremental (BoringSSL is minutes).
python3 - "$STAGE" "$WORK/tree" <<'PY'
import filecmp, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
for root, dirs, files in os.walk(src):
    rel = os.path.relpath(root, src)
    os.makedirs(os.path.join(dst, rel), exist_ok=True)
    for f in files:
        s, d = os.path.join(root, f), os.path.join(dst, rel, f)
        if not (os.path.isfile(d) and filecmp.cmp(s, d, shallow=False)):
            shutil.copy2(s, d)
for root, dirs, files in os.walk(dst, topdown=False):
    rel = os.path.relpath(root, dst)
    for f in files:
        if not os.path.exists(os.path.join(src, rel, f)):
            os.remove(os.path.join(root, f))
    if not os.path.exists(os.path.join(src, rel)):
        os.rmdir(root)
PY
rm -rf "$STAGE"

export CARGO_TARGET_DIR=$OUT/target
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
# BoringSSL's cmake build honours CMAKE_BUILD_PARALLEL_LEVEL (the cmake crate sets it
# from cargo's jobs).
"$CARGO" build --release "${LOCKED[@]}" --manifest-path "$WORK/tree/shim/Cargo.toml" \
    || die "cargo build failed (see above)"
RELEASE=$CARGO_TARGET_DIR/release
cp "$RELEASE/libccdiff_connection.so" "$OUT/libccdiff_connection.so.tmp"
mv "$OUT/libccdiff_connection.so.tmp" "$OUT/libccdiff_connection.so"
echo "quiche/connection/build.sh: built $OUT/libccdiff_connection.so"

#!/usr/bin/env bash
# Build the ccdiff adapter for ngtcp2: build.sh SRC_DIR OUT_DIR
#   SRC_DIR  an ngtcp2 source tree (lib/ at its top): the ngtcp2-sys crate's
#            deps/ngtcp2, a release tarball, or a maintainer's git checkout.
#            It is only read, never modified.
#   OUT_DIR  receives libccdiff_adapter.so (and gen/ngtcp2/version.h).
# env: CCDIFF_INCLUDE (folder of ccdiff_adapter.h), CCDIFF_STACK_VERSION
#      (reported version; default: from SRC_DIR's CMakeLists.txt),
#      CCDIFF_SANITIZE=1 (ASan+UBSan), CC (default gcc),
#      CCDIFF_EXTRA_CFLAGS / CCDIFF_EXTRA_LDFLAGS (space-separated; the fuzz
#      harnesses add coverage instrumentation and -Wl,-z,undefs: the engine's
#      runtime lives in the harness executable).
# apt: (none beyond gcc)
set -euo pipefail

die() { echo "ngtcp2/build.sh: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: build.sh SRC_DIR OUT_DIR"
SRC_DIR=$(cd "$1" && pwd) || die "no such SRC_DIR: $1"
mkdir -p "$2"
OUT_DIR=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
INCLUDE=${CCDIFF_INCLUDE:-$HERE/../include}
CC=${CC:-gcc}

LIB=$SRC_DIR/lib
[ -f "$LIB/ngtcp2_cc.c" ] || die "$SRC_DIR is not an ngtcp2 tree (no lib/ngtcp2_cc.c)"
[ -f "$LIB/includes/ngtcp2/version.h.in" ] || die "no lib/includes/ngtcp2/version.h.in in $SRC_DIR"
grep -q 'ngtcp2_cc_cubic_init(ngtcp2_cc_cubic \*cc' "$LIB/ngtcp2_cc.h" ||
  die "$SRC_DIR has an older controller API (ngtcp2 0.x: ngtcp2_cc_cubic_cc_init); this adapter needs ngtcp2 >= 1.x's ngtcp2_cc_cubic_init"
[ -f "$INCLUDE/ccdiff_adapter.h" ] || die "no ccdiff_adapter.h in $INCLUDE (set CCDIFF_INCLUDE)"

# Version: CMakeLists.txt "project(ngtcp2 VERSION x.y.z ...)"; a local
# checkout (CCDIFF_STACK_VERSION=local-<hash>) reports both.
cmake_version=$(sed -n 's/^project(ngtcp2 VERSION \([0-9][0-9.]*\).*/\1/p' "$SRC_DIR/CMakeLists.txt" 2>/dev/null | head -n1)
version=${CCDIFF_STACK_VERSION:-$cmake_version}
case $version in
  local-*) version="${cmake_version:-unknown} ($version)" ;;
esac
[ -n "$version" ] || die "cannot tell the ngtcp2 version; set CCDIFF_STACK_VERSION"
[ -n "$cmake_version" ] || cmake_version=$version
IFS=. read -r major minor patch <<<"$cmake_version"
version_num=$(printf '0x%02x%02x%02x' "${major:-0}" "${minor:-0}" "${patch%%[!0-9]*}")

# Generated version.h (what CMake's configure_file does with version.h.in).
GEN=$OUT_DIR/gen
mkdir -p "$GEN/ngtcp2"
sed -e "s/@PACKAGE_VERSION@/$version/" -e "s/@PACKAGE_VERSION_NUM@/$version_num/" \
  "$LIB/includes/ngtcp2/version.h.in" >"$GEN/ngtcp2/version.h.tmp"
mv "$GEN/ngtcp2/version.h.tmp" "$GEN/ngtcp2/version.h"

# The controller and the rate sampler, plus what they link against (checked
# with -z defs): ngtcp2_log.h's macros need ngtcp2_log, ngtcp2_fmt (+ str,
# conv, vec); ngtcp2_unreachable.h needs ngtcp2_unreachable.  ngtcp2_mem.c is
# not needed.
UPSTREAM="ngtcp2_cc.c ngtcp2_rst.c ngtcp2_log.c ngtcp2_fmt.c ngtcp2_str.c ngtcp2_conv.c ngtcp2_vec.c ngtcp2_unreachable.c"
srcs=()
for f in $UPSTREAM; do
  [ -f "$LIB/$f" ] || die "missing $LIB/$f"
  srcs+=("$LIB/$f")
done

CFLAGS=(-std=c11 -D_GNU_SOURCE -fPIC -O2 -g -Wall -fvisibility=hidden
  -DNGTCP2_STATICLIB -I"$GEN" -I"$LIB/includes" -I"$LIB" -I"$INCLUDE" -I"$HERE")
LDFLAGS=(-shared -Wl,-z,defs -lm)
if [ "${CCDIFF_SANITIZE:-0}" = 1 ]; then
  CFLAGS+=(-fsanitize=address,undefined -fno-omit-frame-pointer)
  LDFLAGS+=(-fsanitize=address,undefined)
fi
read -r -a extra_cflags <<<"${CCDIFF_EXTRA_CFLAGS:-}"
read -r -a extra_ldflags <<<"${CCDIFF_EXTRA_LDFLAGS:-}"
CFLAGS+=("${extra_cflags[@]}")
LDFLAGS+=("${extra_ldflags[@]}")

"$CC" "${CFLAGS[@]}" -o "$OUT_DIR/libccdiff_adapter.so.tmp" \
  "$HERE/adapter.c" "$HERE/ngd_rtb.c" "${srcs[@]}" "${LDFLAGS[@]}"
mv "$OUT_DIR/libccdiff_adapter.so.tmp" "$OUT_DIR/libccdiff_adapter.so"
echo "ngtcp2/build.sh: built $OUT_DIR/libccdiff_adapter.so (ngtcp2 $version)"

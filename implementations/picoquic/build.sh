#!/usr/bin/env bash
# Build the ccdiff adapter for picoquic's CUBIC / NewReno.
#   build.sh SRC_DIR OUT_DIR  ->  OUT_DIR/libccdiff_adapter.so
# SRC_DIR: a picoquic source tree (the folder holding picoquic/cubic.c), e.g.
#   the aiopquic sdist's aiopquic-0.6.1/third_party/picoquic, or a maintainer's
#   git checkout of private-octopus/picoquic.  The aiopquic root is accepted too.
#   SRC_DIR is only read, never modified.
# Env: CCDIFF_INCLUDE (folder of ccdiff_adapter.h; default: ../include next to
#   this script), CCDIFF_SANITIZE=1 (ASan+UBSan), CC (default gcc),
#   CCDIFF_EXTRA_CFLAGS / CCDIFF_EXTRA_LDFLAGS (space-separated; the fuzz harnesses
#   add coverage instrumentation and -Wl,-z,undefs: the engine's runtime lives in
#   the harness executable),
#   PICOTLS_INCLUDE (optional extra -I; picoquic 1.1.53.0's CC files do not need
#   picotls headers: picoquic_internal.h only forward-declares ptls types. For
#   the sdist, SRC_DIR/../picotls/include is added when present.)
#
# Only the congestion-control files are compiled, unmodified:
#   cubic.c + newreno.c (#included by adapter.c, which reads their private state),
#   cc_common.c, pacing.c (the real picoquic_update_pacing_data that every
#   notification calls; HyStart reads the pacing packet time), and frames.c for
#   picoquic_estimate_max_path_bandwidth (slow start reads peak_bandwidth_estimate).
#   frames.c is built with -ffunction-sections and linked with --gc-sections and a
#   version script exporting only ccd_*, so everything else in it (and the rest of
#   picoquic it would pull in) is dropped; -z defs proves no symbol is left open.
# apt: (none; gcc only)
set -euo pipefail

die() { echo "picoquic build.sh: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: build.sh SRC_DIR OUT_DIR"
SRC_DIR=$(cd "$1" 2>/dev/null && pwd) || die "SRC_DIR '$1' does not exist"
mkdir -p "$2"
OUT_DIR=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CCDIFF_INCLUDE=${CCDIFF_INCLUDE:-$HERE/../include}
CC=${CC:-gcc}

if [ -f "$SRC_DIR/picoquic/cubic.c" ]; then
  PQ_ROOT=$SRC_DIR
elif [ -f "$SRC_DIR/third_party/picoquic/picoquic/cubic.c" ]; then
  PQ_ROOT=$SRC_DIR/third_party/picoquic
else
  die "no picoquic/cubic.c under '$SRC_DIR' (expected a picoquic tree or the aiopquic sdist root)"
fi
PQ=$PQ_ROOT/picoquic
for f in cubic.c newreno.c cc_common.c pacing.c frames.c picoquic_internal.h; do
  [ -f "$PQ/$f" ] || die "missing $PQ/$f"
done
[ -f "$CCDIFF_INCLUDE/ccdiff_adapter.h" ] || die "ccdiff_adapter.h not found in CCDIFF_INCLUDE='$CCDIFF_INCLUDE'"

VERSION=$(sed -n 's/^#define PICOQUIC_VERSION "\(.*\)"/\1/p' "$PQ/picoquic.h")
[ -n "$VERSION" ] || die "PICOQUIC_VERSION not found in $PQ/picoquic.h"
if [ -n "${CCDIFF_STACK_VERSION:-}" ] && [ "$CCDIFF_STACK_VERSION" != "$VERSION" ] \
   && [ "${CCDIFF_STACK_VERSION#local}" = "$CCDIFF_STACK_VERSION" ]; then
  die "source says PICOQUIC_VERSION $VERSION, expected $CCDIFF_STACK_VERSION"
fi

INC=(-I "$PQ" -I "$CCDIFF_INCLUDE")
if [ -n "${PICOTLS_INCLUDE:-}" ]; then
  INC+=(-I "$PICOTLS_INCLUDE")
elif [ -d "$PQ_ROOT/../picotls/include" ]; then
  INC+=(-I "$PQ_ROOT/../picotls/include")
fi

CFLAGS=(-std=gnu11 -fPIC -O2 -g -ffunction-sections -fdata-sections -Wall -Wno-unused-function -Wno-unused-variable -Wno-unused-but-set-variable)
LDFLAGS=(-shared -Wl,--gc-sections -Wl,--version-script="$OUT_DIR/work/exports.map" -Wl,-z,defs)
if [ "${CCDIFF_SANITIZE:-0}" = "1" ]; then
  CFLAGS+=(-fsanitize=address,undefined -fno-omit-frame-pointer)
  LDFLAGS+=(-fsanitize=address,undefined)
fi
read -r -a extra_cflags <<<"${CCDIFF_EXTRA_CFLAGS:-}"
read -r -a extra_ldflags <<<"${CCDIFF_EXTRA_LDFLAGS:-}"
CFLAGS+=("${extra_cflags[@]}")
LDFLAGS+=("${extra_ldflags[@]}")

WORK=$OUT_DIR/work
rm -rf "$WORK"
mkdir -p "$WORK"
printf '{ global: ccd_*; local: *; };\n' > "$WORK/exports.map"

"$CC" "${CFLAGS[@]}" "${INC[@]}" -c "$HERE/adapter.c" -o "$WORK/adapter.o"
for f in cc_common pacing frames; do
  "$CC" "${CFLAGS[@]}" -w "${INC[@]}" -c "$PQ/$f.c" -o "$WORK/$f.o"
done
"$CC" "${LDFLAGS[@]}" -o "$OUT_DIR/libccdiff_adapter.so.tmp" \
  "$WORK/adapter.o" "$WORK/cc_common.o" "$WORK/pacing.o" "$WORK/frames.o" -lm
mv "$OUT_DIR/libccdiff_adapter.so.tmp" "$OUT_DIR/libccdiff_adapter.so"
echo "picoquic build.sh: built $OUT_DIR/libccdiff_adapter.so (picoquic $VERSION)"

#!/usr/bin/env bash
# Build the ccdiff connection shim for picoquic:  build.sh SRC_DIR OUT_DIR
#   SRC_DIR: the picoquic tree of the adapter's pinned, sha256-checked source (the
#            aiopquic 0.6.1 sdist's third_party/picoquic; its sibling
#            third_party/picotls is the TLS library), or the sdist root, or a
#            picoquic checkout with PICOTLS_SRC=<a picotls checkout>.
#   OUT_DIR: receives libccdiff_connection.so; work/ lives under it.
# SRC_DIR is never modified: picoquic and picotls are copied to OUT_DIR/work/src/
# and built there as tests/fixtures/qlog/make_picoquic_fixtures.py builds them:
# picotls with cmake against Debian's OpenSSL (libssl-dev; picotls-core,
# picotls-openssl, picotls-minicrypto), then picoquic's core library with
# PICOQUIC_FETCH_PTLS=OFF and those picotls libraries named explicitly (no
# FetchContent, no git), every static library position-independent.  Then
# picoquic-log (loglib/: its qlog writer qlog_fns.c, for qlog=PATH) is built the
# same way (BUILD_LOGLIB, on by default in picoquic's CMakeLists.txt).  Then
# shim.c is compiled against picoquic's headers with picoquic-core's own compile
# definitions (read from its CMake flags) and everything is linked into one
# shared library that exports only ccd_conn_* (OpenSSL's libcrypto stays shared).
# Re-running rebuilds picotls/picoquic only when their sources changed.
# Env: CC (default gcc), CCDIFF_INCLUDE (folder of ccdiff_connection.h),
#      CCDIFF_STACK_VERSION (checked against PICOQUIC_VERSION),
#      CCDIFF_BUILD_JOBS (cmake -j, default 1: a shared machine), PICOTLS_SRC.
# Needs: cmake, make, a C compiler, pkg-config, libssl-dev.
# apt: cmake libssl-dev pkg-config
set -euo pipefail

die() { echo "picoquic/connection/build.sh: error: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: build.sh SRC_DIR OUT_DIR"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$1" 2>/dev/null && pwd) || die "SRC_DIR '$1' does not exist"
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
CC=${CC:-gcc}
JOBS=${CCDIFF_BUILD_JOBS:-1}
CCDIFF_INCLUDE=${CCDIFF_INCLUDE:-$HERE/../../include}
for tool in cmake make "$CC" python3; do
    command -v "$tool" >/dev/null || die "$tool not found (apt: cmake libssl-dev pkg-config)"
done
[ -f "$CCDIFF_INCLUDE/ccdiff_connection.h" ] || die "no ccdiff_connection.h in CCDIFF_INCLUDE=$CCDIFF_INCLUDE"

if [ -f "$SRC/picoquic/quicctx.c" ]; then
    PQ_SRC=$SRC
elif [ -f "$SRC/third_party/picoquic/picoquic/quicctx.c" ]; then
    PQ_SRC=$SRC/third_party/picoquic
else
    die "no picoquic/quicctx.c under $SRC (a picoquic tree or the aiopquic sdist root)"
fi
PTLS_SRC=${PICOTLS_SRC:-$PQ_SRC/../picotls}
[ -f "$PTLS_SRC/include/picotls.h" ] || die "no picotls at $PTLS_SRC (set PICOTLS_SRC)"
PTLS_SRC=$(cd "$PTLS_SRC" && pwd)
VERSION=$(sed -n 's/^#define PICOQUIC_VERSION "\(.*\)"/\1/p' "$PQ_SRC/picoquic/picoquic.h")
[ -n "$VERSION" ] || die "PICOQUIC_VERSION not found in $PQ_SRC/picoquic/picoquic.h"
if [ -n "${CCDIFF_STACK_VERSION:-}" ] && [ "$CCDIFF_STACK_VERSION" != "$VERSION" ] \
   && [ "${CCDIFF_STACK_VERSION#local}" = "$CCDIFF_STACK_VERSION" ]; then
    die "source says PICOQUIC_VERSION $VERSION, expected $CCDIFF_STACK_VERSION"
fi
echo "picoquic/connection/build.sh: picoquic $VERSION from $PQ_SRC, picotls from $PTLS_SRC"

WORK=$OUT/work
LOG=$WORK/cmake.log
mkdir -p "$WORK"
# The upstream trees' stamp: paths, sizes and contents' digest.
STAMP=$( (cd "$PQ_SRC" && find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum;
          cd "$PTLS_SRC" && find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum) \
        | sha256sum | cut -c1-16)
LIBS=("$WORK/pq/libpicoquic-log.a" "$WORK/pq/libpicoquic-core.a" "$WORK/ptls/libpicotls-openssl.a" "$WORK/ptls/libpicotls-core.a"
      "$WORK/ptls/libpicotls-minicrypto.a")
have_libs() { for f in "${LIBS[@]}"; do [ -f "$f" ] || return 1; done; }
if [ "$(cat "$WORK/upstream.stamp" 2>/dev/null)" = "$STAMP" ] && have_libs \
   && [ -f "$WORK/pq/CMakeFiles/picoquic-core.dir/flags.make" ]; then
    echo "picoquic/connection/build.sh: picotls and picoquic-core up to date ($STAMP)"
else
    rm -rf "$WORK/src" "$WORK/ptls" "$WORK/pq" "$WORK/upstream.stamp"
    mkdir -p "$WORK/src/picoquic" "$WORK/src/picotls" "$WORK/ptls" "$WORK/pq"
    tar -C "$PQ_SRC" --exclude=./.git -cf - . | tar -C "$WORK/src/picoquic" -xf -
    tar -C "$PTLS_SRC" --exclude=./.git -cf - . | tar -C "$WORK/src/picotls" -xf -
    : > "$LOG"
    run() { echo "\$ $*" >> "$LOG"; "$@" >> "$LOG" 2>&1 || { tail -n 30 "$LOG" >&2; die "'$*' failed (log: $LOG)"; }; }
    export GIT_CEILING_DIRECTORIES=$WORK
    (cd "$WORK/ptls" && run cmake -DCMAKE_BUILD_TYPE=Release -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
        -DWITH_FUSION=OFF -DWITH_DTRACE=OFF "$WORK/src/picotls")
    (cd "$WORK/ptls" && run cmake --build . -j "$JOBS" --target picotls-core picotls-openssl picotls-minicrypto)
    (cd "$WORK/pq" && run cmake -DCMAKE_BUILD_TYPE=Release -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
        -DPICOQUIC_FETCH_PTLS=OFF -Dpicoquic_BUILD_TESTS=OFF -DBUILD_PICO_SIM=OFF -DBUILD_PQBENCH=OFF \
        -DBUILD_LOGREADER=OFF -DBUILD_DEMO=OFF -DBUILD_HTTP=OFF \
        -DPTLS_INCLUDE_DIR="$WORK/src/picotls/include" \
        -DPTLS_CORE_LIBRARY="$WORK/ptls/libpicotls-core.a" \
        -DPTLS_OPENSSL_LIBRARY="$WORK/ptls/libpicotls-openssl.a" \
        -DPTLS_MINICRYPTO_LIBRARY="$WORK/ptls/libpicotls-minicrypto.a" \
        -DPTLS_FUSION_LIBRARY=PTLS_FUSION_LIBRARY-NOTFOUND "$WORK/src/picoquic")
    (cd "$WORK/pq" && run cmake --build . -j "$JOBS" --target picoquic-core picoquic-log)
    have_libs || die "missing static libraries after the build (log: $LOG)"
    echo "$STAMP" > "$WORK/upstream.stamp"
fi

# The controllers' state layouts are private to cubic.c and newreno.c: copy the two
# typedefs (as they are in this source) into a generated header; never committed.
GEN=$WORK/gen
mkdir -p "$GEN"
python3 - "$WORK/src/picoquic/picoquic" "$GEN/ccdiff_pq_private.h" <<'PY' || die "cannot extract the controllers' state types"
import re, sys
src, out = sys.argv[1], sys.argv[2]
parts = []
for name, pattern in (
        ("cubic.c", r"typedef enum \{\s*picoquic_cubic_alg_slow_start.*?\} picoquic_cubic_alg_state_t;"),
        ("cubic.c", r"typedef struct st_picoquic_cubic_state_t \{.*?\} picoquic_cubic_state_t;"),
        ("newreno.c", r"typedef struct st_picoquic_newreno_state_t \{.*?\} picoquic_newreno_state_t;")):
    text = open(f"{src}/{name}").read()
    found = re.findall(pattern, text, re.S)
    if len(found) != 1:
        sys.exit(f"{name}: expected one match of {pattern!r}, found {len(found)}")
    parts.append(f"/* from picoquic/{name} (this build's source) */\n" + found[0] + "\n")
open(out, "w").write("/* Generated by implementations/picoquic/connection/build.sh: do not edit. */\n"
                     "#ifndef CCDIFF_PQ_PRIVATE_H\n#define CCDIFF_PQ_PRIVATE_H\n#include \"cc_common.h\"\n"
                     + "\n".join(parts) + "#endif\n")
PY

# picoquic-core's own compile definitions (e.g. PTLS_WITHOUT_FUSION): the shim reads
# picoquic_internal.h's structures, which must have the library's layout.
FLAGS=$WORK/pq/CMakeFiles/picoquic-core.dir/flags.make
read -r -a DEFINES <<<"$(sed -n 's/^C_DEFINES = //p' "$FLAGS")"
CFLAGS=(-std=gnu11 -fPIC -O2 -g -Wall -Wno-unused-function -fvisibility=hidden)
INC=(-I "$GEN" -I "$WORK/src/picoquic/picoquic" -I "$WORK/src/picoquic/loglib" -I "$WORK/src/picotls/include" -I "$CCDIFF_INCLUDE")
"$CC" "${CFLAGS[@]}" "${DEFINES[@]}" "${INC[@]}" -c "$HERE/shim.c" -o "$WORK/shim.o"
printf '{ global: ccd_conn_*; local: *; };\n' > "$WORK/exports.map"
# --wrap: every read of the real clock by picoquic, picotls or the shim goes through
# the shim's counting wrappers (shim.c, "the real clock").
"$CC" -shared -o "$OUT/libccdiff_connection.so.tmp" "$WORK/shim.o" \
    -Wl,--start-group "${LIBS[@]}" -Wl,--end-group \
    -Wl,--wrap=gettimeofday -Wl,--wrap=clock_gettime -Wl,--wrap=time \
    -Wl,--version-script="$WORK/exports.map" -Wl,-z,defs -lssl -lcrypto -lpthread -lm
mv "$OUT/libccdiff_connection.so.tmp" "$OUT/libccdiff_connection.so"
echo "picoquic/connection/build.sh: built $OUT/libccdiff_connection.so (picoquic $VERSION)"

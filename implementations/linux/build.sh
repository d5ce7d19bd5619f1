#!/usr/bin/env bash
# Build the ccdiff adapter for Linux's tcp_cubic (and Reno): build.sh SRC_DIR OUT_DIR
#   SRC_DIR  either the unpacked Debian linux-source-<v> package (its usr/src,
#            holding linux-source-<v>.tar.xz: stack.toml's subdir), or a kernel
#            tree (net/ipv4/tcp_cubic.c at its top, e.g. a git checkout).  It is
#            only read, never modified.
#   OUT_DIR  receives libccdiff_adapter.so; work/ holds the few kernel files
#            taken from the tarball and the generated parts.
# Nothing of the kernel is compiled but:
#   net/ipv4/tcp_cubic.c             whole and unmodified (#included by adapter.c,
#                                    which calls its static tcp_congestion_ops)
#   net/ipv4/tcp_cong.c              from tcp_slow_start through the tcp_reno ops
#                                    (tcp_slow_start, tcp_cong_avoid_ai, Reno's
#                                    cong_avoid / ssthresh / undo_cwnd), verbatim
#   include/net/tcp.h                the inline helpers the two call, verbatim
# against shim/ (the socket fields they read, clocks, no-op module macros).
# env: CCDIFF_INCLUDE, CCDIFF_STACK_VERSION, CCDIFF_SANITIZE=1 (ASan+UBSan),
#      CC (default gcc), CCDIFF_EXTRA_CFLAGS / CCDIFF_EXTRA_LDFLAGS (the fuzz
#      harnesses' instrumentation, as for the other C stacks).
# apt: gcc, python3 (ccdiff's own)
set -euo pipefail

die() { echo "linux/build.sh: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: build.sh SRC_DIR OUT_DIR"
SRC_DIR=$(cd "$1" 2>/dev/null && pwd) || die "SRC_DIR '$1' does not exist"
mkdir -p "$2"
OUT_DIR=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
INCLUDE=${CCDIFF_INCLUDE:-$HERE/../include}
CC=${CC:-gcc}
[ -f "$INCLUDE/ccdiff_adapter.h" ] || die "no ccdiff_adapter.h in $INCLUDE (set CCDIFF_INCLUDE)"

WORK=$OUT_DIR/work
rm -rf "$WORK"
mkdir -p "$WORK/kernel" "$WORK/gen"
FILES="net/ipv4/tcp_cubic.c net/ipv4/tcp_cong.c include/net/tcp.h Makefile"
if [ -f "$SRC_DIR/net/ipv4/tcp_cubic.c" ]; then
  KTREE=$SRC_DIR
else
  shopt -s nullglob
  tarballs=("$SRC_DIR"/linux-source-*.tar.xz "$SRC_DIR"/usr/src/linux-source-*.tar.xz)
  shopt -u nullglob
  [ ${#tarballs[@]} -eq 1 ] || die "expected one linux-source-*.tar.xz in $SRC_DIR (or a kernel tree with net/ipv4/tcp_cubic.c); found ${#tarballs[@]}"
  top=$(basename "${tarballs[0]}" .tar.xz)
  members=()
  for f in $FILES; do members+=("$top/$f"); done
  # python3's tarfile (lzma built in): no xz binary needed in the build image.
  python3 - "${tarballs[0]}" "$WORK/kernel" "${members[@]}" <<'PY' ||
import sys, tarfile
tarball, dest, wanted = sys.argv[1], sys.argv[2], set(sys.argv[3:])
with tarfile.open(tarball, "r:xz") as tar:
    for member in tar:
        if member.name in wanted and member.isfile():
            tar.extract(member, dest, set_attrs=False)
            wanted.discard(member.name)
            if not wanted:
                break
sys.exit(1 if wanted else 0)
PY
    die "cannot extract ${members[*]} from ${tarballs[0]}"
  KTREE=$WORK/kernel/$top
fi
for f in $FILES; do [ -f "$KTREE/$f" ] || die "missing $KTREE/$f"; done

# Version from the tree's Makefile (VERSION.PATCHLEVEL.SUBLEVEL).
kv=$(awk -F' = ' '/^VERSION =/{v=$2} /^PATCHLEVEL =/{p=$2} /^SUBLEVEL =/{s=$2} END{print v "." p "." s}' "$KTREE/Makefile")
[[ $kv =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "cannot read the kernel version from $KTREE/Makefile"
case ${CCDIFF_STACK_VERSION:-} in
  ""|local-*|git-*) ;;
  *) [ "${kv%.*}" = "$CCDIFF_STACK_VERSION" ] || die "the tree is Linux $kv, expected $CCDIFF_STACK_VERSION.x" ;;
esac

# tcp_cong.c: from tcp_slow_start's definition to the end of the tcp_reno ops.
awk '/^(__bpf_kfunc )?u32 tcp_slow_start\(/{on=1} on{print} on && /^};/{exit}' \
  "$KTREE/net/ipv4/tcp_cong.c" >"$WORK/gen/tcp_cong_part.c"
grep -q '^struct tcp_congestion_ops tcp_reno = {' "$WORK/gen/tcp_cong_part.c" &&
  grep -q 'tcp_cong_avoid_ai(struct tcp_sock \*tp, u32 w, u32 acked)' "$WORK/gen/tcp_cong_part.c" ||
  die "tcp_cong.c: tcp_slow_start .. tcp_reno not found where expected (the file changed shape)"

# include/net/tcp.h: the inline helpers, each from its first line to the next "}".
: >"$WORK/gen/tcp_h_part.h"
for fn in tcp_snd_cwnd tcp_snd_cwnd_set tcp_in_slow_start tcp_is_cwnd_limited tcp_in_cwnd_reduction \
          tcp_current_ssthresh; do
  awk -v name="$fn" '!on && $0 ~ ("^static inline [a-z0-9_ ]*[ *]" name "\\(") {on=1}
                      on {print} on && /^}/ {exit}' "$KTREE/include/net/tcp.h" >"$WORK/gen/part.h"
  [ -s "$WORK/gen/part.h" ] || die "include/net/tcp.h: no static inline $fn()"
  cat "$WORK/gen/part.h" >>"$WORK/gen/tcp_h_part.h"
done
rm -f "$WORK/gen/part.h"
cp "$KTREE/net/ipv4/tcp_cubic.c" "$WORK/gen/tcp_cubic.c"

CFLAGS=(-std=gnu11 -fPIC -O2 -g -Wall -Wno-unused-function -Wno-unused-variable
  -DCCDL_KERNEL_VERSION="\"$kv\""
  -I"$HERE/shim" -I"$WORK/gen" -I"$INCLUDE")
LDFLAGS=(-shared -Wl,-z,defs -Wl,--version-script="$WORK/exports.map")
printf '{ global: ccd_*; local: *; };\n' >"$WORK/exports.map"
if [ "${CCDIFF_SANITIZE:-0}" = 1 ]; then
  CFLAGS+=(-fsanitize=address,undefined -fno-omit-frame-pointer)
  LDFLAGS+=(-fsanitize=address,undefined)
fi
read -r -a extra_cflags <<<"${CCDIFF_EXTRA_CFLAGS:-}"
read -r -a extra_ldflags <<<"${CCDIFF_EXTRA_LDFLAGS:-}"
CFLAGS+=("${extra_cflags[@]}")
LDFLAGS+=("${extra_ldflags[@]}")

"$CC" "${CFLAGS[@]}" -o "$OUT_DIR/libccdiff_adapter.so.tmp" "$HERE/adapter.c" "${LDFLAGS[@]}"
mv "$OUT_DIR/libccdiff_adapter.so.tmp" "$OUT_DIR/libccdiff_adapter.so"
echo "linux/build.sh: built $OUT_DIR/libccdiff_adapter.so (Linux $kv tcp_cubic)"

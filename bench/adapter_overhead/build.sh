#!/usr/bin/env bash
# Build the adapter-overhead drivers:  build.sh OUT_DIR
# env (set by bench/bench_adapters.py from the stacks' build folders); a stack
# whose variable is unset is skipped (bench/run_all.py --quick builds the C ones only):
#   NGTCP2_SRC    ngtcp2 tree (lib/ at its top), NGTCP2_GEN its generated
#                 version.h folder (build/ngtcp2/<v>/gen)
#   PICOQUIC_SRC  picoquic tree (picoquic/cubic.c under it)
#   QUICHE_TREE   the patched quiche work tree, build/quiche/<v>/work/tree
#                 (upstream/ = patched quiche, adapter/Cargo.lock)
# The bare loops use the adapters' own CFLAGS / cargo profile (see
# implementations/<stack>/build.sh), so the upstream code compiles the same.
# apt: (none beyond gcc; cargo for quiche)
set -euo pipefail
die() { echo "adapter_overhead/build.sh: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: build.sh OUT_DIR"
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
INCLUDE=$HERE/../../implementations/include
CC=${CC:-gcc}

# The ABI driver: plain C, loads any adapter with dlopen.
"$CC" -std=gnu11 -O2 -g -Wall -I"$INCLUDE" -o "$OUT/adapter_loop" "$HERE/adapter_loop.c" -ldl

# ngtcp2: adapter build.sh's CFLAGS and upstream files (the rtb stand-in
# ngd_rtb.c is the adapter's, not needed here).
if [ -n "${NGTCP2_SRC:-}" ]; then
LIB=$NGTCP2_SRC/lib
"$CC" -std=c11 -D_GNU_SOURCE -fPIC -O2 -g -Wall -fvisibility=hidden \
  -DNGTCP2_STATICLIB -I"$NGTCP2_GEN" -I"$LIB/includes" -I"$LIB" -I"$INCLUDE" \
  -o "$OUT/ngtcp2_bare" "$HERE/ngtcp2_bare.c" \
  "$LIB"/ngtcp2_{cc,rst,log,fmt,str,conv,vec,unreachable}.c -lm
fi

# picoquic: adapter build.sh's CFLAGS; cubic.c/newreno.c are #included by
# picoquic_bare.c as by adapter.c; --gc-sections drops the rest of frames.c.
if [ -n "${PICOQUIC_SRC:-}" ]; then
PQ=$PICOQUIC_SRC/picoquic
PQINC=(-I "$PQ" -I "$INCLUDE")
[ -d "$PICOQUIC_SRC/../picotls/include" ] && PQINC+=(-I "$PICOQUIC_SRC/../picotls/include")
PQCFLAGS=(-std=gnu11 -fPIC -O2 -g -ffunction-sections -fdata-sections -Wall
  -Wno-unused-function -Wno-unused-variable -Wno-unused-but-set-variable)
mkdir -p "$OUT/picoquic"
"$CC" "${PQCFLAGS[@]}" "${PQINC[@]}" -c "$HERE/picoquic_bare.c" -o "$OUT/picoquic/bare.o"
for f in cc_common pacing frames; do
  "$CC" "${PQCFLAGS[@]}" -w "${PQINC[@]}" -c "$PQ/$f.c" -o "$OUT/picoquic/$f.o"
done
"$CC" -Wl,--gc-sections -o "$OUT/picoquic_bare" "$OUT/picoquic/bare.o" \
  "$OUT"/picoquic/{cc_common,pacing,frames}.o -lm
fi

# quiche: stage the crate, point it at the patched quiche, start from the
# adapter's lock so every dependency has the adapter's version.
if [ -n "${QUICHE_TREE:-}" ]; then
CRATE=$OUT/quiche-bare
mkdir -p "$CRATE/src"
cp "$HERE/quiche/src/main.rs" "$CRATE/src/main.rs"
sed "s|path = \"../quiche\"|path = \"$QUICHE_TREE/upstream\"|" "$HERE/quiche/Cargo.toml" >"$CRATE/Cargo.toml"
cp "$QUICHE_TREE/adapter/Cargo.lock" "$CRATE/Cargo.lock"
CARGO_TARGET_DIR=$OUT/target ${CARGO:-cargo} build --release --quiet --manifest-path "$CRATE/Cargo.toml" \
  || die "cargo build failed"
cp "$OUT/target/release/quiche_bare" "$OUT/quiche_bare"
fi
echo "adapter_overhead/build.sh: built the drivers in $OUT" >&2

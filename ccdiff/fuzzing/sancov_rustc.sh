#!/bin/sh
# RUSTC_WRAPPER of the instrumented Rust stack builds (ccdiff/fuzzing/harness.py): cargo runs
# it as `sancov_rustc.sh RUSTC ARGS...`.  RUSTFLAGS would put the sancov pass on every crate
# (libm, smallvec, slab, ...), whose edges are not the controller's yet cost a callback per
# edge on every execution; this adds CCDIFF_SANCOV_RUSTFLAGS to the crates named in
# CCDIFF_SANCOV_CRATES (space-separated rustc crate names) and nothing else.
rustc=$1
shift
crate=
prev=
for arg in "$@"; do
  [ "$prev" = --crate-name ] && crate=$arg
  prev=$arg
done
case " $CCDIFF_SANCOV_CRATES " in
  *" $crate "*) exec "$rustc" "$@" $CCDIFF_SANCOV_RUSTFLAGS ;;
esac
exec "$rustc" "$@"

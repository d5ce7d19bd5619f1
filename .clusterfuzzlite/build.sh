#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build script (docs/oss-fuzz.md): one fuzz target per stack
# and pinned release in $OUT, each with <target>_seed_corpus.zip and <target>.dict.
# The builder image's `compile` sets what this honours: CC CXX CFLAGS CXXFLAGS RUSTFLAGS
# LIB_FUZZING_ENGINE SANITIZER FUZZING_ENGINE OUT SRC WORK.  The work is
# ccdiff/fuzzing/ossfuzz.py's, with ccdiff's own stack recipes; name targets to build
# only those (`build.sh ngtcp2 quiche_0_30_0`; default: every one).
cd "$SRC/ccdiff"
# No C++ in ccdiff: CXX and CXXFLAGS reach only what cargo's cc crate might compile.
export CXX="${CXX:-clang++}" CXXFLAGS="${CXXFLAGS:-}"
# cargo's own default (a job per core) unless told; docker/oss-fuzz-check.sh passes 1
# on a shared machine.
exec python3 -m ccdiff.fuzzing.ossfuzz "$@"

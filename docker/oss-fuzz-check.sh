#!/usr/bin/env bash
# The OSS-Fuzz / ClusterFuzzLite build checked here (docs/oss-fuzz.md): build
# .clusterfuzzlite/Dockerfile FROM gcr.io/oss-fuzz-base/base-builder-rust (without a
# registry, docker/oss-fuzz/make-base-builder.sh makes a local one under that name),
# run its `compile` with the variables the services set -- FUZZING_ENGINE, SANITIZER,
# ARCHITECTURE, FUZZING_LANGUAGE -- for libfuzzer+address, afl+address and
# libfuzzer+undefined, and run every target it wrote for RUNS inputs (default 10,000)
# on its seed corpus (docker/oss-fuzz/smoke.sh).
#
#   docker/oss-fuzz-check.sh [OUTDIR]      default OUTDIR: ./oss-fuzz-check
#
# Writes only OUTDIR: OUTDIR/<engine>-<sanitizer>/ is that build's $OUT (targets, seed
# corpora, dictionaries, smoke/), OUTDIR/summary.tsv the smoke table with build times.
# CONFIGS overrides the list ("libfuzzer:address afl:address libfuzzer:undefined");
# TARGETS builds only those targets (e.g. "ngtcp2 quiche_0_30_0"); JOBS is cargo's
# job count (default 1: a shared machine).  Exit 0 all clean, 1 a build or a smoke run
# failed, 2 on a setup error.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUTDIR=${1:-oss-fuzz-check}
CONFIGS=${CONFIGS:-libfuzzer:address afl:address libfuzzer:undefined}
RUNS=${RUNS:-10000}
JOBS=${JOBS:-1}
IMAGE=ccdiff/oss-fuzz-builder:dev
die() { echo "oss-fuzz-check.sh: $*" >&2; exit 2; }
log() { echo "oss-fuzz-check.sh: $*" >&2; }
command -v docker >/dev/null || die "docker not found"
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)

bash "$ROOT/docker/oss-fuzz/make-base-builder.sh"
log "docker build -f .clusterfuzzlite/Dockerfile -> $IMAGE"
docker build -q -f "$ROOT/.clusterfuzzlite/Dockerfile" -t "$IMAGE" "$ROOT" >/dev/null

printf 'target\tengine\tsanitizer\tinputs\tcrashes\tinvariant_reports\tseconds\tbuild_seconds\n' >"$OUTDIR/summary.tsv"
failed=0
for config in $CONFIGS; do
  engine=${config%%:*} sanitizer=${config#*:}
  out=$OUTDIR/$engine-$sanitizer
  rm -rf "$out"; mkdir -p "$out"
  log "compile: FUZZING_ENGINE=$engine SANITIZER=$sanitizer -> $out"
  started=$SECONDS
  # What ClusterFuzzLite's build_fuzzers and OSS-Fuzz's helper.py pass to `compile`.
  if ! docker run --rm -e FUZZING_ENGINE="$engine" -e SANITIZER="$sanitizer" -e ARCHITECTURE=x86_64 \
      -e FUZZING_LANGUAGE=rust -e CARGO_BUILD_JOBS="$JOBS" -v "$out:/out" "$IMAGE" \
      bash -c "compile ${TARGETS:-}" >"$out.build.log" 2>&1; then
    log "compile failed for $engine+$sanitizer; log: $out.build.log"
    tail -30 "$out.build.log" >&2
    failed=1
    continue
  fi
  build_seconds=$((SECONDS - started))
  log "built $(ls "$out" | grep -c '_seed_corpus.zip$') targets in $build_seconds s; smoke runs of $RUNS inputs"
  # The same image runs the targets (the services run them in their base-runner image).
  docker run --rm -e FUZZING_ENGINE="$engine" -e SANITIZER="$sanitizer" -e RUNS="$RUNS" -v "$out:/out" "$IMAGE" \
      bash /src/ccdiff/docker/oss-fuzz/smoke.sh || failed=1
  tail -n +2 "$out/smoke/summary.tsv" | sed "s/\$/\t$build_seconds/" >>"$OUTDIR/summary.tsv"
done
column -t -s "$(printf '\t')" "$OUTDIR/summary.tsv" >&2 || cat "$OUTDIR/summary.tsv" >&2
if [ "$failed" = 0 ]; then
  log "$(($(wc -l <"$OUTDIR/summary.tsv") - 1)) targets built and run for $RUNS inputs each, no crash"
else
  log "FAILED: see the logs above and under $OUTDIR"
fi
exit $failed

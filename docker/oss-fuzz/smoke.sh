#!/usr/bin/env bash
# Inside the builder image, after `compile`: run every fuzz target in $OUT on its seed
# corpus for RUNS inputs (default 10,000) with the engine it was built for, and write one
# line per target to $OUT/smoke/summary.tsv:
#   target  engine  sanitizer  inputs  crashes  invariant-reports  seconds
# Invariant violations (the stacks' findings, e.g. quiche 0.26.0's future recovery start
# on a seed) are reported, not aborted on (CCDIFF_FUZZ_NO_ABORT=1), so the run checks the
# build: any crash left -- a sanitizer report, a signal, a harness error -- fails it.
# Exit 1 if a target crashed or ran fewer inputs, 2 on a setup error.
set -uo pipefail
RUNS=${RUNS:-10000}
die() { echo "smoke.sh: $*" >&2; exit 2; }
[ -d "$OUT" ] || die "no \$OUT folder"
SMOKE=$OUT/smoke
rm -rf "$SMOKE"; mkdir -p "$SMOKE"
export CCDIFF_FUZZ_NO_ABORT=1
export ASAN_OPTIONS=abort_on_error=1:symbolize=1:detect_leaks=1:external_symbolizer_path=$OUT/llvm-symbolizer
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:silence_unsigned_overflow=1
bad=0 n=0
printf 'target\tengine\tsanitizer\tinputs\tcrashes\tinvariant_reports\tseconds\n' >"$SMOKE/summary.tsv"
for exe in "$OUT"/*; do
  name=${exe##*/}
  [ -f "$exe" ] && [ -x "$exe" ] && [ -f "$OUT/${name}_seed_corpus.zip" ] || continue
  n=$((n + 1))
  dir=$SMOKE/$name
  mkdir -p "$dir/seeds"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
    "$OUT/${name}_seed_corpus.zip" "$dir/seeds" || die "cannot unpack ${name}_seed_corpus.zip"
  start=$SECONDS
  if [ "$FUZZING_ENGINE" = afl ]; then
    # -E: stop after about RUNS executions; the crash count is AFL++'s own.
    # AFL++ wants ASan to abort without symbolizing (afl-fuzz-init.c check_asan_opts).
    ASAN_OPTIONS=abort_on_error=1:symbolize=0:detect_leaks=1 \
    AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_NO_AFFINITY=1 \
    AFL_QUIET=1 \
      "$OUT/afl-fuzz" -i "$dir/seeds" -o "$dir/afl" -E "$RUNS" -x "$OUT/$name.dict" -- "$exe" \
      >"$dir/log" 2>&1
    status=$?
    inputs=$(sed -n 's/^execs_done *: *//p' "$dir/afl/default/fuzzer_stats" 2>/dev/null)
    crashes=$(find "$dir/afl/default/crashes" -type f -name 'id:*' 2>/dev/null | wc -l)
    # The target's stderr is not kept by afl-fuzz: count the reports by replaying the queue.
    reports=$(for f in "$dir/afl/default/queue"/id:*; do "$exe" "$f" 2>&1; done | grep -c '^ccdiff-fuzz: violation')
  else
    "$exe" -runs="$RUNS" -dict="$OUT/$name.dict" -artifact_prefix="$dir/" "$dir/seeds" >"$dir/log" 2>&1
    status=$?
    inputs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$dir/log")
    crashes=$(find "$dir" -maxdepth 1 -name 'crash-*' -o -maxdepth 1 -name 'leak-*' -o -maxdepth 1 -name 'oom-*' | wc -l)
    reports=$(grep -c '^ccdiff-fuzz: violation' "$dir/log")
  fi
  inputs=${inputs:-0}
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$FUZZING_ENGINE" "$SANITIZER" "$inputs" "$crashes" \
    "$reports" "$((SECONDS - start))" | tee -a "$SMOKE/summary.tsv"
  if [ "$status" != 0 ] || [ "$crashes" != 0 ] || [ "$inputs" -lt "$RUNS" ]; then
    echo "smoke.sh: $name: exit $status, $crashes crash(es), $inputs inputs; log: $dir/log" >&2
    tail -30 "$dir/log" >&2
    bad=1
  fi
done
[ "$n" -gt 0 ] || die "no fuzz targets in $OUT"
exit $bad

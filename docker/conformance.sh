#!/bin/sh
# The compose `conformance` service (docker-compose run --rm conformance [TRACE...]).
# Runs in the runner image with the checkout at /work (read-only) and the
# reports folder at /reports; the adapters are the compose services.
#
# The nightly's two halves: closed-loop `ccdiff conform` (CCDIFF_CONFORM_ARGS,
# default --seeds 10) -> /reports/conform/summary.json, junit.xml; and the
# open-loop matrix of the example traces -> /reports/matrix.json.
#
# CCDIFF_SHARD=K/N (e.g. 2/3) runs only shard K of N of the closed loop, into
# /reports/conform-shard-K-of-N (ccdiff conform --shard, docs/sharding.md); the
# open-loop matrix runs on shard 1 only.  Join the N folders afterwards with
#   docker-compose run --rm ccdiff merge /reports/conform-shard-*-of-N --out /reports/conform
set -eu
[ "$#" -gt 0 ] || set -- examples/*.jsonl
shard=${CCDIFF_SHARD:-}
out=/reports/conform
if [ -n "$shard" ]; then
  # digits/digits only: it names the output folder (ccdiff checks 1 <= K <= N)
  case "$shard" in
    [0-9]*/[0-9]*) case "$shard" in *[!0-9/]* | */*/*) bad=1 ;; *) bad=0 ;; esac ;;
    *) bad=1 ;;
  esac
  if [ "$bad" -ne 0 ]; then
    echo "conformance: error: CCDIFF_SHARD=$shard: expected K/N, e.g. 2/3" >&2
    exit 2
  fi
  out="/reports/conform-shard-${shard%/*}-of-${shard#*/}"
fi
worst=0
conform=0
# shellcheck disable=SC2086  # CCDIFF_CONFORM_ARGS is a list of arguments
ccdiff conform --out "$out" --no-report ${shard:+--shard "$CCDIFF_SHARD"} ${CCDIFF_CONFORM_ARGS:---seeds 10} \
  || conform=$?
matrix=0
wrote="$out/summary.json (exit $conform)"
if [ -z "$shard" ] || [ "${shard%/*}" = 1 ]; then
  ccdiff matrix "$@" --json /reports/matrix.json || matrix=$?
  wrote="$wrote and /reports/matrix.json (exit $matrix)"
fi
# 0 clean, 1 findings (the JSON has them): both are a completed run; 2 is an error.
for status in "$conform" "$matrix"; do
  [ "$status" -le 1 ] || exit "$status"
  [ "$status" -le "$worst" ] || worst=$status
done
echo "conformance: wrote $wrote" >&2
exit "$worst"

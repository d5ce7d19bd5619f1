#!/bin/sh
# The compose `conformance` service (docker-compose run --rm conformance [TRACE...]).
# Runs in the runner image with the checkout at /work (read-only) and the
# reports folder at /reports; the adapters are the compose services.
#
# The nightly's two halves: closed-loop `ccdiff conform` (CCDIFF_CONFORM_ARGS,
# default --seeds 10) -> /reports/conform/summary.json, junit.xml; and the
# open-loop matrix of the example traces -> /reports/matrix.json.
set -eu
[ "$#" -gt 0 ] || set -- examples/*.jsonl
worst=0
conform=0
# shellcheck disable=SC2086  # CCDIFF_CONFORM_ARGS is a list of arguments
ccdiff conform --out /reports/conform --no-report ${CCDIFF_CONFORM_ARGS:---seeds 10} || conform=$?
matrix=0
ccdiff matrix "$@" --json /reports/matrix.json || matrix=$?
# 0 clean, 1 findings (the JSON has them): both are a completed run; 2 is an error.
for status in "$conform" "$matrix"; do
  [ "$status" -le 1 ] || exit "$status"
  [ "$status" -le "$worst" ] || worst=$status
done
echo "conformance: wrote /reports/conform/summary.json (exit $conform) and /reports/matrix.json (exit $matrix)" >&2
exit "$worst"

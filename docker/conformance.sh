#!/bin/sh
# The compose `conformance` service (docker-compose run --rm conformance [TRACE...]).
# Runs in the runner image with the checkout at /work (read-only) and the
# reports folder at /reports; the adapters are the compose services.
#
# Hook: when `ccdiff conform` (closed-loop scenarios, summary.json) is
# available, it goes here, e.g.
#     ccdiff conform --out /reports "$@"
# and the matrix below stays as the open-loop half of the nightly.
set -eu
[ "$#" -gt 0 ] || set -- examples/*.jsonl
status=0
ccdiff matrix "$@" --json /reports/matrix.json || status=$?
# 0 clean, 1 findings (the matrix JSON has them): both are a completed run.
[ "$status" -le 1 ] || exit "$status"
echo "conformance: wrote /reports/matrix.json (matrix exit $status)" >&2
exit "$status"

#!/usr/bin/env bash
# CI stage for the containers (called by .ci/run after `make test`, which has
# built the stacks natively): make the base images (offline), build every
# image with docker-compose, run the compose `conformance` service and check
# that its matrix JSON equals the native run's byte for byte (same verdicts,
# same findings), and that `replay` of the death-spiral reproducer against the
# quiche@0.26.0 container shows the violation (exit 1).  Prints the times.
#   docker/ci.sh            (needs docker, docker-compose or `docker compose`, root for debootstrap)
set -euo pipefail
cd "$(dirname "$0")/.."
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-ccdiffci}
if docker compose version >/dev/null 2>&1; then COMPOSE=(docker compose); else COMPOSE=(docker-compose); fi
now() { date +%s; }
fail() { echo "docker/ci.sh: FAIL: $*" >&2; exit 1; }

reports=$(mktemp -d /tmp/ccdiff-compose.XXXXXX)
chmod 0777 "$reports"                  # the runner is uid 10001
export CCDIFF_REPORTS=$reports
cleanup() { "${COMPOSE[@]}" down --remove-orphans >/dev/null 2>&1 || true; rm -rf "$reports"; }
trap cleanup EXIT

# Short closed-loop run for CI: its summary.json must equal the native one byte for byte.
CONFORM_ARGS="--scenarios death-spiral,tail-loss --seeds 1 --jobs 2"
t0=$(now)
docker/base/make-base-images.sh
t1=$(now)
"${COMPOSE[@]}" build >"$reports/build.log" 2>&1 || { tail -40 "$reports/build.log"; fail "image build"; }
t2=$(now)
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep '^ccdiff/' | sort

set +e
CCDIFF_CONFORM_ARGS="$CONFORM_ARGS" "${COMPOSE[@]}" run --rm conformance
code=$?
set -e
t3=$(now)
[ "$code" -eq 1 ] || fail "conformance exit $code (expected 1: the examples hold violations)"
python3 -m ccdiff matrix examples/*.jsonl --json "$reports/native.json" >/dev/null || [ $? -eq 1 ]
cmp "$reports/native.json" "$reports/matrix.json" \
  || { diff <(python3 -m json.tool "$reports/native.json") <(python3 -m json.tool "$reports/matrix.json") | head -40;
       fail "the containers' matrix differs from the native run's"; }
# shellcheck disable=SC2086
python3 -m ccdiff conform --out "$reports/native-conform" --no-report $CONFORM_ARGS >/dev/null || [ $? -eq 1 ]
cmp "$reports/native-conform/summary.json" "$reports/conform/summary.json" \
  || fail "the containers' conform summary.json differs from the native run's"
echo "compose conform summary.json == native summary.json ($CONFORM_ARGS)"
python3 - "$reports/matrix.json" <<'PY' || fail "the compose matrix is missing expected stacks or findings"
import json, sys
doc = json.load(open(sys.argv[1]))
stacks = set(doc["stacks"])
for s in ("quiche@0.26.0", "quiche@0.30.0", "ngtcp2@1.25.0", "picoquic@1.1.53.0"):
    assert s in stacks, f"{s} not served by the containers"
assert not doc["errors"], doc["errors"]
assert any(f["stack"] == "quiche@0.26.0" and f["invariant"] == "future-recovery-start" for f in doc["findings"])
print(f"compose matrix == native matrix: {len(doc['stacks'])} stacks, {len(doc['findings'])} findings")
PY

# Hardening, as running: adapters read-only, no capabilities, non-root, internal network only.
for svc in quiche ngtcp2 picoquic; do
  id=$("${COMPOSE[@]}" ps -q "$svc")
  [ -n "$id" ] || fail "adapter service $svc is not running"
  got=$(docker inspect -f '{{.HostConfig.ReadonlyRootfs}} {{.HostConfig.CapDrop}} {{.Config.User}} {{.HostConfig.Memory}}' "$id")
  [ "$got" = "true [ALL] ccdiff 536870912" ] || fail "$svc hardening: $got"
done
"${COMPOSE[@]}" run --rm --no-deps --entrypoint sh ccdiff -c '
  [ "$(id -u)" = 10001 ] || { echo "runner is uid $(id -u)"; exit 1; }
  if touch /var/tmp/probe 2>/dev/null; then echo "root fs is writable"; exit 1; fi
  if python3 -c "import socket; socket.create_connection((\"deb.debian.org\", 80), timeout=3)" 2>/dev/null; then
    echo "the compose network reaches the internet"; exit 1; fi' || fail "runner hardening"
echo "hardening: read-only root fs, cap_drop ALL, uid 10001, 512 MB adapters, no route out: ok"

set +e
"${COMPOSE[@]}" run --rm replay examples/death-spiral.jsonl --stack quiche@0.26.0 >"$reports/replay.txt" 2>&1
code=$?
set -e
t4=$(now)
cat "$reports/replay.txt"
[ "$code" -eq 1 ] || fail "replay exit $code (expected 1)"
grep -q "future-recovery-start" "$reports/replay.txt" || fail "replay does not show future-recovery-start"
echo "docker/ci.sh: ok; base images $((t1 - t0)) s, image build $((t2 - t1)) s," \
     "conformance run $((t3 - t2)) s, replay $((t4 - t3)) s, total $((t4 - t0)) s"

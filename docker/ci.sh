#!/usr/bin/env bash
# CI stage for the containers (called by .ci/run after `make test`, which has
# built the stacks natively): make the base images (offline), build every
# image with docker-compose, run the compose `conformance` service and check
# that its matrix JSON equals the native run's byte for byte (same verdicts,
# same findings), and that `replay` of the death-spiral reproducer against the
# quiche@0.26.0 container shows the violation (exit 1).  Then the fuzz profile
# (two AFL++ workers, one findings folder: a shared corpus, each finding stored
# once), the `report` service (curl on its loopback port), and quiche built
# from a local checkout (replay against quiche@local-<hash>).  Prints the times.
#   docker/ci.sh            (needs docker, docker-compose or `docker compose`, root for debootstrap)
set -euo pipefail
cd "$(dirname "$0")/.."
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-ccdiffci}
if docker compose version >/dev/null 2>&1; then COMPOSE=(docker compose); else COMPOSE=(docker-compose); fi
now() { date +%s; }
fail() { echo "docker/ci.sh: FAIL: $*" >&2; exit 1; }
# `replay` of the death-spiral example against SPEC (a container) must exit 1 with future-recovery-start.
replay_death_spiral() {
  local spec=$1 out=$2 code
  set +e
  "${COMPOSE[@]}" run --rm replay examples/death-spiral.jsonl --stack "$spec" >"$out" 2>&1
  code=$?
  set -e
  cat "$out"
  [ "$code" -eq 1 ] || fail "replay against $spec exit $code (expected 1)"
  grep -q "future-recovery-start" "$out" || fail "replay against $spec does not show future-recovery-start"
}

reports=$(mktemp -d /tmp/ccdiff-compose.XXXXXX)
findings=$(mktemp -d /tmp/ccdiff-findings.XXXXXX)
chmod 0777 "$reports" "$findings"      # the containers run as uid 10001
export CCDIFF_REPORTS=$reports CCDIFF_FINDINGS=$findings
cleanup() {
  "${COMPOSE[@]}" --profile fuzz down --remove-orphans >/dev/null 2>&1 || true
  rm -rf "$reports" "$findings"
}
trap cleanup EXIT

# Short closed-loop run for CI: its summary.json must equal the native one byte for byte.
CONFORM_ARGS="--scenarios death-spiral,tail-loss --seeds 1 --jobs 2"
t0=$(now)
docker/base/make-base-images.sh
t1=$(now)
"${COMPOSE[@]}" build >"$reports/build.log" 2>&1 || { tail -40 "$reports/build.log"; fail "image build"; }
# The fuzzer image with the one stack the fuzz profile below fuzzes: its build, stage for
# stage, is the all-stacks one's (FUZZ_TARGETS=all, the compose default), which builds two
# Rust variants per Rust stack, 10 more minutes of a cold CI machine.  A later
# `docker-compose --profile fuzz build` with CCDIFF_FUZZ_TARGETS unset rebuilds it whole.
CCDIFF_FUZZ_TARGETS=${CCDIFF_CI_FUZZ_TARGETS:-quiche@0.26.0} \
  "${COMPOSE[@]}" --profile fuzz build fuzz-afl >"$reports/build-fuzzer.log" 2>&1 \
  || { tail -40 "$reports/build-fuzzer.log"; fail "fuzzer image build"; }
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
import glob, json, sys, tomllib
doc = json.load(open(sys.argv[1]))
stacks = set(doc["stacks"])
# every stack folder of this checkout at every pinned version (its stack.toml)
recipes = [tomllib.load(open(path, "rb")) for path in sorted(glob.glob("implementations/*/stack.toml"))]
expected = [f"{r['name']}@{v['version']}" for r in recipes for v in r.get("versions", [])]
assert len(expected) >= 10, expected
for s in expected:
    assert s in stacks, f"{s} not served by the containers"
assert not doc["errors"], doc["errors"]
assert any(f["stack"] == "quiche@0.26.0" and f["invariant"] == "future-recovery-start" for f in doc["findings"])
print(f"compose matrix == native matrix: {len(doc['stacks'])} stacks, {len(doc['findings'])} findings")
PY

# Hardening, as running: adapters read-only, no capabilities, non-root, internal network only.
# every stack folder's adapter service (tests/test_compose_file.py: one per stack.toml, named after it)
for svc in $(for f in implementations/*/stack.toml; do basename "$(dirname "$f")"; done); do
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

replay_death_spiral quiche@0.26.0 "$reports/replay.txt"
t4=$(now)

# The fuzz profile: two AFL++ workers (scaled replicas, `--worker auto`) on one findings
# folder.  Both fuzz in one .work/afl, import each other's queue entries, and every
# finding is stored once: one folder per signature.  90 s: AFL++ elects one worker
# to act as main, which syncs every 30 s, the other every minute (AFL_SYNC_TIME=1, the
# least) once its current queue entry is done; in 60 s that one often had not yet.
CCDIFF_FUZZ_TIME=${CCDIFF_CI_FUZZ_TIME:-90s} "${COMPOSE[@]}" --profile fuzz up --no-color --scale fuzz-afl=2 fuzz-afl \
  >"$reports/fuzz.log" 2>&1 || { tail -40 "$reports/fuzz.log"; fail "fuzz profile"; }
t5=$(now)
ids=$("${COMPOSE[@]}" --profile fuzz ps -q fuzz-afl)
[ "$(echo "$ids" | wc -w)" -eq 2 ] || fail "expected 2 fuzz-afl workers, got: $ids"
for id in $ids; do
  got=$(docker inspect -f '{{.State.ExitCode}} {{.HostConfig.ReadonlyRootfs}} {{.HostConfig.CapDrop}} {{.HostConfig.NetworkMode}} {{.Config.User}}' "$id")
  # exit 1 only when a strict, new finding is stored (quiche 0.26.0's root cause is fixed
  # upstream: 0 is as right); the findings themselves are checked below
  case "$got" in
    "0 true [ALL] none 10001:10001"|"1 true [ALL] none 10001:10001") ;;
    *) tail -40 "$reports/fuzz.log"; fail "fuzz worker $id: $got (expected exit 0 or 1, read-only, no capabilities, no network, user 10001)";;
  esac
done
python3 docker/check-shared-fuzz.py "$findings/quiche@0.26.0" 2 || { tail -40 "$reports/fuzz.log"; fail "fuzz profile: shared corpus / findings"; }

# The report service: the HTML reports on a loopback port (here the fuzzers' report).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
CCDIFF_REPORT_PORT=$port "${COMPOSE[@]}" up -d --no-color report >"$reports/report.log" 2>&1 \
  || { cat "$reports/report.log"; fail "report service"; }
for _ in $(seq 50); do curl -fsS "http://127.0.0.1:$port/" -o "$reports/index.html" 2>/dev/null && break; sleep 0.2; done
grep -q 'href="/findings/quiche%400.26.0/report/"' "$reports/index.html" 2>/dev/null \
  || { cat "$reports/index.html" 2>/dev/null; "${COMPOSE[@]}" logs report | tail; fail "report index page"; }
curl -fsS "http://127.0.0.1:$port/findings/quiche%400.26.0/report/" -o "$reports/findings-report.html" \
  && grep -q future-recovery-start "$reports/findings-report.html" \
  || fail "report service: the findings report does not show future-recovery-start"
id=$("${COMPOSE[@]}" ps -q report)
got=$(docker inspect -f '{{.HostConfig.ReadonlyRootfs}} {{.HostConfig.CapDrop}} {{range $p, $b := .HostConfig.PortBindings}}{{range $b}}{{.HostIp}}{{end}}{{end}}' "$id")
[ "$got" = "true [ALL] 127.0.0.1" ] || fail "report hardening: $got"
echo "report service: index and findings report served on 127.0.0.1:$port only, read-only: ok"
t6=$(now)

# quiche from a local checkout: the pinned 0.26.0 crate, fetched and sha256-checked by
# ccdiff's own fetcher, built into the quiche image (CCDIFF_QUICHE_SOURCE), replayed.
local_src=local-src/ci-quiche
python3 -c 'import sys; from pathlib import Path; from ccdiff.build import fetch, unpack; from ccdiff.stacks import load_recipes
pin = load_recipes()["quiche"].versions["0.26.0"]; unpack(fetch(pin["url"], pin["sha256"]), Path(sys.argv[1]))' "$local_src"
CCDIFF_QUICHE_SOURCE=$local_src/quiche-0.26.0 "${COMPOSE[@]}" build quiche >"$reports/build-local.log" 2>&1 \
  || { tail -40 "$reports/build-local.log"; fail "quiche image from a local checkout"; }
"${COMPOSE[@]}" up -d --no-deps --force-recreate quiche >/dev/null 2>&1
local_label=$("${COMPOSE[@]}" run --rm -T ccdiff stacks --json \
  | python3 -c 'import json, sys; print(*{r["version"] for r in json.load(sys.stdin) if r["version"].startswith("local-")})')
[ -n "$local_label" ] || fail "the local-checkout quiche image serves no local-<hash> version"
replay_death_spiral "quiche@$local_label" "$reports/replay-local.txt"
t7=$(now)
# Leave the pinned quiche image behind (cached layers: seconds).
"${COMPOSE[@]}" build quiche >"$reports/build.log" 2>&1 || { tail -40 "$reports/build.log"; fail "quiche image rebuild"; }
t8=$(now)
echo "docker/ci.sh: ok; base images $((t1 - t0)) s, image build $((t2 - t1)) s," \
     "conformance run $((t3 - t2)) s, replay $((t4 - t3)) s, fuzz profile $((t5 - t4)) s," \
     "report service $((t6 - t5)) s, local-checkout build + replay $((t7 - t6)) s," \
     "pinned quiche image again $((t8 - t7)) s, total $((t8 - t0)) s"

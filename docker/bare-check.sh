#!/usr/bin/env bash
# The README's two commands, verbatim, on a bare Debian bookworm: a container from the
# offline base image (docker/base/make-base-images.sh) with only what README.md names
# as prerequisites (python3 with pip, cargo, gcc, make, git), a fresh clone of this
# repository's HEAD, then `make test` and `make run` exactly as README.md writes them.
# Either failing (a non-zero exit) fails the check.  Whatever the tests
# use must therefore be installed by the README's own commands (setup/install.sh),
# never by CI.  Prints each command's wall time.
#   docker/bare-check.sh                 (needs docker and root, like docker/ci.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "docker/bare-check.sh: FAIL: $*" >&2; exit 1; }
RUST_IMAGE=rust:1.95-slim-bookworm
IMAGE=ccdiff/bare-bookworm:dev

# The two commands, read from README.md, so the check runs what a reader runs.
readme_cmd() {   # the command in the README table row whose text starts with $1
  python3 - "$1" <<'PY'
import re, sys
for line in open("README.md", encoding="utf-8"):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 2 and cells[0].startswith(sys.argv[1]):
        print(re.fullmatch(r"`([^`]+)`", cells[1]).group(1)); break
else:
    sys.exit(f"README.md has no command row starting with {sys.argv[1]!r}")
PY
}
run_cmd=$(readme_cmd "set up everything and run the main job") || fail "README main command"
test_cmd=$(readme_cmd "run the tests") || fail "README test command"
echo "README: main job \`$run_cmd\`, tests \`$test_cmd\`"

docker/base/make-base-images.sh
# The bare machine: the README's prerequisites and nothing else.
docker build -q -t "$IMAGE" - >/dev/null <<DOCKERFILE || fail "bare image"
FROM $RUST_IMAGE
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-pip make git \
 && rm -rf /var/lib/apt/lists/*
DOCKERFILE
for tool in chromium clang afl-fuzz honggfuzz; do
  if docker run --rm "$IMAGE" sh -c "command -v $tool" >/dev/null; then fail "$tool is already in the bare image"; fi
done
echo "bare image: python3, pip, cargo, gcc, make, git; no chromium, clang, afl-fuzz, honggfuzz"

git rev-parse HEAD >/dev/null || fail "not a git checkout"
name=ccdiff-bare-$$
trap 'docker rm -f "$name" >/dev/null 2>&1 || true' EXIT
# The host's CA settings travel as environment, as on the host (a proxy's CA); chromium
# wants more shared memory than docker's 64 MB default.  CAP_SYS_ADMIN (and no AppArmor
# profile, where the host has AppArmor) lets tests/test_hostile_options.py mount its
# 64 KiB tmpfs, as root on a bare machine can: without it that test is skipped here.
caps=(--cap-add SYS_ADMIN)
if [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ]; then
  caps+=(--security-opt apparmor=unconfined)
fi
docker run --name "$name" --shm-size 1g "${caps[@]}" -v "$PWD:/origin:ro" \
  -e PIP_CERT=/etc/ssl/certs/ca-certificates.crt -e CARGO_HTTP_CAINFO=/etc/ssl/certs/ca-certificates.crt \
  -e RUN_CMD="$run_cmd" -e TEST_CMD="$test_cmd" "$IMAGE" bash -c '
    set -uo pipefail
    git config --global --add safe.directory "*"
    git clone -q /origin /work/ccdiff && cd /work/ccdiff || exit 3
    echo "clone: $(git log --oneline -1)"
    t0=$SECONDS
    bash -c "$TEST_CMD" > /tmp/test.log 2>&1; code=$?
    tail -n 15 /tmp/test.log
    echo "bare-check: \`$TEST_CMD\` exit $code in $((SECONDS - t0)) s"
    [ "$code" -eq 0 ] || exit 4
    t1=$SECONDS
    bash -c "$RUN_CMD" > /tmp/run.log 2>&1; code=$?
    tail -n 15 /tmp/run.log
    echo "bare-check: \`$RUN_CMD\` exit $code in $((SECONDS - t1)) s"
    [ "$code" -eq 0 ] || exit 5
  ' || fail "a README command failed on the bare machine (exit $?)"
echo "docker/bare-check.sh: ok"

#!/usr/bin/env bash
# The one setup step: `make run`, `make test`, .ci/run (through the Makefile) and
# docker/Dockerfile all install through this script, from one package list
# (setup/debian-packages.txt).  Idempotent: what is already there is left alone, so a
# second run takes seconds.
#
#   setup/install.sh run        base tools, ccdiff + Python deps, every pinned stack built
#   setup/install.sh test       `run` + what the tests use: chromium, AFL++, clang, honggfuzz
#   setup/install.sh system GROUP...   only the Debian packages of those groups
#   setup/install.sh honggfuzz  only honggfuzz (built from the pinned `honggfuzz` crate's C source)
#   setup/install.sh python     only ccdiff and its Python deps (pip install -e .[test])
#
# Needs: bash, apt-get (Debian bookworm), cargo and gcc for the stacks.  Root or sudo for
# apt-get, only when a package is missing.  Environment: PYTHON (default python3),
# CCDIFF_FUZZ_BUILD_DIR (where honggfuzz is built; default build/fuzz).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
LIST=$HERE/debian-packages.txt
PYTHON=${PYTHON:-python3}
HONGGFUZZ_VERSION=0.5.62
say() { echo "setup: $*" >&2; }
die() { echo "setup: error: $*" >&2; exit 2; }

packages_of() {   # the packages of the given groups, in list order
  awk -v groups=" $* " '{ sub(/#.*/, "") } NF >= 2 {
      for (i = 2; i <= NF; i++) if (index(groups, " " $i " ")) { print $1; break } }' "$LIST"
}

installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

apt_install() {   # apt_install PKG...: install those not installed yet
  local need=() pkg
  for pkg in "$@"; do installed "$pkg" || need+=("$pkg"); done
  [ ${#need[@]} -eq 0 ] && return 0
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "missing Debian packages: ${need[*]}; run as root: apt-get install ${need[*]}"
    sudo=(sudo)
  fi
  command -v apt-get >/dev/null || die "missing packages ${need[*]} and no apt-get (ccdiff's setup knows Debian only)"
  say "apt-get install ${need[*]}"
  local started=$SECONDS
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  say "installed ${#need[@]} package(s) in $((SECONDS - started)) s"
}

system() { [ $# -gt 0 ] || die "system: name a group (python, test, fuzz, oss-fuzz, containers, qlog, coverage)"; apt_install $(packages_of "$@"); }

# PEP 668: a Debian python refuses `pip install` into its site-packages; then ccdiff
# goes into the project's .venv, which setup/python (the Makefile's interpreter) prefers.
externally_managed() {
  "$PYTHON" -c 'import os, sys, sysconfig
sys.exit(0 if sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'
}

python_deps() {
  command -v "$PYTHON" >/dev/null || system python
  local py=$PYTHON
  if [ -x "$ROOT/.venv/bin/python" ]; then
    py=$ROOT/.venv/bin/python
  elif externally_managed; then
    "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || system python
    say "$PYTHON is managed by Debian (PEP 668): installing ccdiff into $ROOT/.venv"
    "$PYTHON" -m venv "$ROOT/.venv"
    py=$ROOT/.venv/bin/python
  else
    "$py" -m pip --version >/dev/null 2>&1 || system python
  fi
  local started=$SECONDS
  (cd "$ROOT" && "$py" -m pip install --quiet --disable-pip-version-check -e ".[test]")
  say "ccdiff and its Python packages installed into $("$py" -c 'import sys; print(sys.prefix)') ($((SECONDS - started)) s)"
}

stacks() {
  local started=$SECONDS
  "$HERE/python" -m ccdiff build all
  say "stacks ready ($((SECONDS - started)) s)"
}

honggfuzz() {
  local build=${CCDIFF_FUZZ_BUILD_DIR:-$ROOT/build/fuzz}
  local hf=$build/tools/honggfuzz
  if [ -x "$hf/honggfuzz" ] && [ -f "$hf/libhfuzz/libhfuzz.a" ] && [ -f "$hf/libhfcommon/libhfcommon.a" ]; then
    return 0
  fi
  local cargo_home=${CARGO_HOME:-$HOME/.cargo} src started=$SECONDS
  src=$(ls -d "$cargo_home"/registry/src/*/honggfuzz-$HONGGFUZZ_VERSION/honggfuzz 2>/dev/null | head -n1 || true)
  if [ -z "$src" ]; then
    say "cargo install honggfuzz@$HONGGFUZZ_VERSION (for its C source)"
    cargo install --quiet --locked honggfuzz --version "$HONGGFUZZ_VERSION"
    src=$(ls -d "$cargo_home"/registry/src/*/honggfuzz-$HONGGFUZZ_VERSION/honggfuzz | head -n1)
  fi
  say "building honggfuzz $HONGGFUZZ_VERSION in $hf"
  rm -rf "$hf"
  mkdir -p "$(dirname "$hf")"
  cp -R "$src" "$hf"
  # hfuzz_cc is not in the crate; targets are compiled with clang's -fsanitize-coverage
  # and linked with libhfuzz (ccdiff/fuzzing/harness.py).
  make -s -C "$hf" -j"$(nproc)" honggfuzz libhfuzz/libhfuzz.a libhfcommon/libhfcommon.a >/dev/null
  say "honggfuzz built ($((SECONDS - started)) s)"
}

step=${1:-}
[ $# -gt 0 ] && shift
case "$step" in
  run)       system base; python_deps; stacks ;;
  test)      system base test; python_deps; honggfuzz; stacks ;;
  system)    system "$@" ;;
  python)    python_deps ;;
  honggfuzz) honggfuzz ;;
  stacks)    stacks ;;
  -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' ;;
  *)         die "unknown step '${step}'; expected run, test, system GROUP..., python, honggfuzz or stacks (--help)" ;;
esac

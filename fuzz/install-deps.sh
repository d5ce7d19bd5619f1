#!/usr/bin/env bash
# What `ccdiff fuzz` needs: the `fuzz` group of setup/debian-packages.txt (AFL++, clang,
# lld, sanitizer runtimes, honggfuzz's build dependencies) and honggfuzz itself, built
# from the pinned `honggfuzz` crate's C source.  A thin name for setup/install.sh, kept
# because docs and the fuzzer image call it; quick when everything is there.
set -euo pipefail
SETUP="$(cd "$(dirname "${BASH_SOURCE[0]}")/../setup" && pwd)/install.sh"
bash "$SETUP" system fuzz
bash "$SETUP" honggfuzz
echo "install-deps: afl-fuzz $(command -v afl-fuzz), honggfuzz ${CCDIFF_FUZZ_BUILD_DIR:-build/fuzz}/tools/honggfuzz/honggfuzz"

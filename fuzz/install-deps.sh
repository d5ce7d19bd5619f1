#!/usr/bin/env bash
# Installs what `ccdiff fuzz` and the fuzzing tests need; quick when already there.
#   apt:   afl++ (afl-fuzz, afl-clang-fast), clang + lld (honggfuzz targets, lld for
#          --gc-sections with sancov), libunwind-dev binutils-dev libblocksruntime-dev
#          (honggfuzz's build dependencies), libclang-rt-14-dev (sanitizer runtimes)
#   cargo: the `honggfuzz` crate (pinned), whose C source builds honggfuzz and
#          libhfuzz into $CCDIFF_FUZZ_BUILD_DIR/tools/honggfuzz (default build/fuzz/).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FUZZ_BUILD=${CCDIFF_FUZZ_BUILD_DIR:-$HERE/../build/fuzz}
HONGGFUZZ_VERSION=0.5.62

need=()
command -v afl-fuzz >/dev/null && command -v afl-clang-fast >/dev/null || need+=(afl++)
command -v clang >/dev/null || need+=(clang)
command -v ld.lld >/dev/null || need+=(lld)
# libclang-rt-14-dev: clang's sanitizer and sancov runtimes (ASan+UBSan builds); apt brings
# it only as a recommendation of clang, which an install without recommends skips.
for pkg in libunwind-dev binutils-dev libblocksruntime-dev libclang-rt-14-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${need[*]}"
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

HF=$FUZZ_BUILD/tools/honggfuzz
if [ ! -x "$HF/honggfuzz" ] || [ ! -f "$HF/libhfuzz/libhfuzz.a" ] || [ ! -f "$HF/libhfcommon/libhfcommon.a" ]; then
  CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}
  src=$(ls -d "$CARGO_HOME"/registry/src/*/honggfuzz-$HONGGFUZZ_VERSION/honggfuzz 2>/dev/null | head -n1 || true)
  if [ -z "$src" ]; then
    echo "install-deps: cargo install honggfuzz@$HONGGFUZZ_VERSION (for its C source)"
    cargo install --quiet --locked honggfuzz --version "$HONGGFUZZ_VERSION"
    src=$(ls -d "$CARGO_HOME"/registry/src/*/honggfuzz-$HONGGFUZZ_VERSION/honggfuzz | head -n1)
  fi
  echo "install-deps: building honggfuzz $HONGGFUZZ_VERSION in $HF"
  rm -rf "$HF"
  mkdir -p "$(dirname "$HF")"
  cp -R "$src" "$HF"
  # hfuzz_cc is not in the crate; targets are compiled with clang's
  # -fsanitize-coverage and linked with libhfuzz (ccdiff/fuzzing/harness.py).
  make -s -C "$HF" -j"$(nproc)" honggfuzz libhfuzz/libhfuzz.a libhfcommon/libhfcommon.a >/dev/null
fi
echo "install-deps: afl-fuzz $(command -v afl-fuzz), honggfuzz $HF/honggfuzz"

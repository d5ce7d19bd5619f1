#!/usr/bin/env bash
# Build aioquic's connection shim:  build.sh SRC_DIR OUT_DIR
#   SRC_DIR: the unpacked aioquic sdist (the adapter build's src/aioquic-<ver>/), never modified.
#   OUT_DIR: receives ccdiff_connection.py (the shim, docs/connection-mode.md) and site/aioquic,
#            the whole package compiled from SRC_DIR (its one C extension, _buffer.c).
# aioquic's own dependencies (cryptography, pylsqpack, pyOpenSSL, service-identity, certifi)
# come from ccdiff's environment: `pip install -e .[test]` installs them.
# Needs: python3 >= 3.11 with its headers (Python.h) and gcc.
# apt: python3-dev
set -euo pipefail
die() { echo "aioquic/connection/build.sh: error: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: build.sh SRC_DIR OUT_DIR"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -f "$1/src/aioquic/quic/connection.py" ] || die "$1 is not an aioquic source tree (src/aioquic/quic/connection.py)"
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
PY=${PYTHON:-python3}
"$PY" -c 'import cryptography, pylsqpack, OpenSSL, service_identity, certifi' 2>/dev/null ||
    die "aioquic needs cryptography, pylsqpack, pyOpenSSL, service-identity and certifi: pip install -e .[test]"
rm -rf "$OUT/site"
mkdir -p "$OUT/site"
cp -R "$SRC/src/aioquic" "$OUT/site/aioquic"
# The one C extension, compiled as aioquic's setup.py does (C99, the limited API of 3.11).
INCLUDE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
SUFFIX=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
[ -f "$INCLUDE/Python.h" ] || die "Python.h not found in $INCLUDE (apt-get install python3-dev)"
${CC:-gcc} -std=c99 -O2 -fPIC -shared -DPy_LIMITED_API=0x030B0000 -I"$INCLUDE" \
    "$OUT/site/aioquic/_buffer.c" -o "$OUT/site/aioquic/_buffer$SUFFIX"
[ -f "$OUT/site/aioquic/quic/connection.py" ] || die "pip left no aioquic in $OUT/site"
ls "$OUT"/site/aioquic/_buffer*.so >/dev/null 2>&1 || die "aioquic's C extension (_buffer) was not built"
cp "$HERE/ccdiff_connection.py" "$OUT/ccdiff_connection.py"
echo "aioquic/connection/build.sh: built $OUT/ccdiff_connection.py"

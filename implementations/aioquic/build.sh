#!/usr/bin/env bash
# Build the ccdiff adapter for aioquic:  build.sh SRC_DIR OUT_DIR
#   SRC_DIR: the unpacked aioquic sdist (aioquic-<ver>/ from PyPI) or a git checkout of
#            github.com/aiortc/aioquic (same layout: src/aioquic/).
#   OUT_DIR: receives ccdiff_adapter.py (the adapter, run in process by
#            ccdiff/pyadapter.py) and upstream/aioquic/: aioquic's package __init__
#            files and its four congestion modules, copied unmodified.  Nothing else of
#            aioquic is copied (its C extension, TLS and packet code are never needed).
# SRC_DIR is never modified.  Env: CCDIFF_STACK_VERSION (informational),
# CCDIFF_SANITIZE=1 (a no-op: pure Python; an exception in the stack is an adapter-error).
# Needs: python3 >= 3.11 (aioquic 1.7.2's `int | None` annotations are evaluated at import).
# apt: (none)
set -euo pipefail

die() { echo "aioquic/build.sh: error: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: build.sh SRC_DIR OUT_DIR"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -d "$1" ] || die "SRC_DIR $1 is not a directory"
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || die "python3 not found"

PKG=$SRC/src/aioquic
CC_DIR=$PKG/quic/congestion
for f in "$PKG/__init__.py" "$PKG/quic/__init__.py" "$CC_DIR/__init__.py" \
         "$CC_DIR/base.py" "$CC_DIR/cubic.py" "$CC_DIR/reno.py"; do
    [ -f "$f" ] || die "$f missing: not an aioquic source tree (src/aioquic/quic/congestion/)"
done
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$PKG/__init__.py")
[ -n "$VERSION" ] || die "cannot read __version__ from $PKG/__init__.py"
echo "aioquic/build.sh: aioquic $VERSION from $SRC${CCDIFF_STACK_VERSION:+, requested $CCDIFF_STACK_VERSION}"
[ "${CCDIFF_SANITIZE:-0}" = 1 ] && echo "aioquic/build.sh: CCDIFF_SANITIZE=1 ignored: pure Python" >&2

# The adapter provides only quic.packet_builder.QuicSentPacket (an annotation there).
# Any other import of the congestion modules would reach code not copied: refuse the
# release by name instead of failing at the first replay.
"$PY" - "$CC_DIR" <<'PYEOF' || exit 1
import ast, pathlib, sys
allowed = {"abc", "collections.abc", "typing", "..packet_builder", ".base"}
folder = pathlib.Path(sys.argv[1])
for name in ("base.py", "cubic.py", "reno.py"):
    tree = ast.parse((folder / name).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = ["." * node.level + (node.module or "")]
            if mods[0] == "..packet_builder" and [a.name for a in node.names] != ["QuicSentPacket"]:
                sys.exit(f"aioquic/build.sh: error: {name}:{node.lineno} imports "
                         f"{[a.name for a in node.names]} from packet_builder; the adapter provides "
                         "only QuicSentPacket (implementations/aioquic/adapter.py)")
        else:
            continue
        for mod in mods:
            if mod not in allowed:
                sys.exit(f"aioquic/build.sh: error: {name}:{node.lineno} imports {mod}, which the "
                         "adapter does not provide (it copies only the congestion modules)")
PYEOF

rm -rf "$OUT/upstream"
mkdir -p "$OUT/upstream/aioquic/quic/congestion"
cp "$PKG/__init__.py" "$OUT/upstream/aioquic/"
cp "$PKG/quic/__init__.py" "$OUT/upstream/aioquic/quic/"
cp "$CC_DIR/__init__.py" "$CC_DIR/base.py" "$CC_DIR/cubic.py" "$CC_DIR/reno.py" "$OUT/upstream/aioquic/quic/congestion/"
cp "$HERE/adapter.py" "$OUT/ccdiff_adapter.py.tmp"
# Compile-check both, then load the adapter and open each controller once.
"$PY" -c 'import sys; [compile(open(f).read(), f, "exec") for f in sys.argv[1:]]' \
    "$OUT/ccdiff_adapter.py.tmp" "$OUT"/upstream/aioquic/quic/congestion/*.py
mv "$OUT/ccdiff_adapter.py.tmp" "$OUT/ccdiff_adapter.py"
PYTHONDONTWRITEBYTECODE=1 "$PY" - "$OUT" <<'PYEOF' || { rm -f "$OUT/ccdiff_adapter.py"; die "the adapter does not load"; }
import importlib.util, sys
out = sys.argv[1]
spec = importlib.util.spec_from_file_location("_ccdiff_aioquic_build_check", f"{out}/ccdiff_adapter.py")
mod = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mod        # dataclasses look their module up there
spec.loader.exec_module(mod)
for cc in ("cubic", "reno"):
    mod.open(max_datagram_size=1200, max_ack_delay_us=25000, initial_rtt_us=333000, options=f"cc={cc}",
             clock_base_us=1, folder=out)
print("aioquic/build.sh:", mod.describe())
PYEOF
echo "aioquic/build.sh: built $OUT/ccdiff_adapter.py"

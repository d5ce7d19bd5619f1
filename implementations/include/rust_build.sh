# The steps every Rust build script shares (quiche, quinn and s2n-quic adapters; quiche's and
# quinn's connection shims), sourced by them:
#     . "$HERE/../include/rust_build.sh"      # connection/build.sh: "$HERE/../../include/..."
# The caller defines die() (its own error prefix) and keeps what is its own: how to find the
# crate in SRC, its patch or facade, and which lock it may use.  Bash, `set -euo pipefail`.

# stage_upstream SRC DEST: copy the source tree, minus VCS and build output (SRC is never
# modified; the copy is patched).
stage_upstream() {
    mkdir -p "$2"
    tar -C "$1" --exclude=./.git --exclude=./target -cf - . | tar -C "$2" -xf -
}

# use_lock SCRIPT KIND LOCK DEST [FALLBACK...]: a crate (KIND "crate") with a committed lock
# LOCK builds --locked (LOCKED) from a copy of it at DEST (in $STAGE).  Else -- a checkout, or
# a release not pinned yet -- it starts from the first FALLBACK lock that exists (upstream's
# own, so versions match what it pins), lets cargo add and prune the rest, and says so; for a
# crate, with the command that pins the lock cargo writes ($WORK/tree).  Reads VERSION.
use_lock() {
    local script=$1 kind=$2 lock=$3 dest=$4 fallback
    LOCKED=()
    if [ "$kind" = crate ] && [ -f "$lock" ]; then
        cp "$lock" "$dest"
        LOCKED=(--locked)
        return
    fi
    for fallback in "${@:5}"; do
        if [ -f "$fallback" ]; then cp "$fallback" "$dest"; break; fi
    done
    echo "$script: note: no committed lock for $kind $VERSION; building unlocked" >&2
    if [ "$kind" = crate ]; then
        echo "$script: pin it with: cp $WORK/tree/${dest#"$STAGE"/} $lock" >&2
    fi
}

# sync_tree STAGE TREE: make TREE a copy of STAGE, touching only files whose content changed,
# so cargo's mtime fingerprints keep a re-run incremental; then remove STAGE.  A Cargo.lock
# that cargo wrote into TREE on an unlocked build stays (the next unlocked build reuses it).
sync_tree() {
    python3 - "$1" "$2" <<'PY'
import filecmp, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
for root, dirs, files in os.walk(src):
    rel = os.path.relpath(root, src)
    os.makedirs(os.path.join(dst, rel), exist_ok=True)
    for f in files:
        s, d = os.path.join(root, f), os.path.join(dst, rel, f)
        if not (os.path.isfile(d) and filecmp.cmp(s, d, shallow=False)):
            shutil.copy2(s, d)
for root, dirs, files in os.walk(dst, topdown=False):
    rel = os.path.relpath(root, dst)
    for f in files:
        if not os.path.exists(os.path.join(src, rel, f)) and f != "Cargo.lock":
            os.remove(os.path.join(root, f))
    if not os.path.exists(os.path.join(src, rel)) and not os.listdir(root):
        os.rmdir(root)
PY
    rm -rf "$1"
}

# cargo_build_library MANIFEST LIBRARY OUT: cargo build --release (with LOCKED) into
# OUT/target, then OUT/LIBRARY replaced in one rename.  CARGO_BUILD_TARGET (the fuzz
# harnesses' instrumented builds) puts cargo's output under target/<triple>/.
cargo_build_library() {
    export CARGO_TARGET_DIR=$3/target
    "${CARGO:-cargo}" build --release "${LOCKED[@]}" --manifest-path "$1" || die "cargo build failed (see above)"
    local release=$CARGO_TARGET_DIR/${CARGO_BUILD_TARGET:+$CARGO_BUILD_TARGET/}release
    cp "$release/$2" "$3/$2.tmp"
    mv "$3/$2.tmp" "$3/$2"
}

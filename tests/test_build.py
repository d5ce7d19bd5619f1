"""`ccdiff build`: a build made from adapter sources that changed since is stale and rebuilt."""
import hashlib
import io
import json
import tarfile

from ccdiff.build import build_state, ensure_built, is_stale, recipe_digest, sha256_of
from ccdiff.stacks import load_recipes

from .test_planted_bugs import pristine_source  # noqa: F401  (the pinned ngtcp2 tree, unpacked)

BUILD_SH = """#!/bin/sh
# $1: upstream source (unused here), $2: output folder
cc -shared -fPIC -o "$2/libccdiff_adapter.so" "$(dirname "$0")/adapter.c"
echo built >> "$2/times-built"
"""


def _home(tmp_path, monkeypatch):
    """A stack `tiny` whose 'upstream' is nothing and whose adapter is one C file."""
    stack = tmp_path / "implementations" / "tiny"
    stack.mkdir(parents=True)
    (tmp_path / "implementations" / "include").mkdir()
    (tmp_path / "implementations" / "include" / "ccdiff_adapter.h").write_text("/* ABI */\n")
    archive = tmp_path / "tiny-1.0.tar.gz"               # the pinned "release": one README
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("tiny-1.0/README")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"tiny\n"))
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    (stack / "stack.toml").write_text(f'name = "tiny"\nlanguage = "c"\ndefault_version = "1.0"\n[[versions]]\n'
                                      f'version = "1.0"\nurl = "{archive.as_uri()}"\nsha256 = "{sha}"\n')
    (stack / "build.sh").write_text(BUILD_SH)
    (stack / "adapter.c").write_text("int ccd_abi_version(void) { return 1; }\n")
    (stack / "profile.toml").write_text("")
    monkeypatch.setenv("CCDIFF_HOME", str(tmp_path))
    monkeypatch.setenv("CCDIFF_BUILD_DIR", str(tmp_path / "build"))
    out = tmp_path / "build" / "tiny" / "1.0"
    out.mkdir(parents=True)
    return stack, out


def test_an_adapter_edit_makes_the_build_stale_and_ensure_built_rebuilds_it(tmp_path, monkeypatch):
    stack, out = _home(tmp_path, monkeypatch)
    recipe = load_recipes()["tiny"]
    digest = recipe_digest(recipe)
    (out / "libccdiff_adapter.so").write_bytes(b"")      # a build of these very sources
    (out / "build-info.json").write_text(json.dumps({"recipe": digest, "sanitize": False}))
    assert not is_stale(recipe, "1.0")
    (stack / "profile.toml").write_text("# deviations are read at run time, not built\n")
    assert recipe_digest(recipe) == digest and not is_stale(recipe, "1.0")
    (stack / "adapter.c").write_text("int ccd_abi_version(void) { return 2; }\n")
    assert recipe_digest(recipe) != digest and is_stale(recipe, "1.0")
    (out / "times-built").write_text("")
    ensure_built("tiny")
    assert (out / "times-built").read_text() == "built\n" and not is_stale(recipe, "1.0")
    library = out / "libccdiff_adapter.so"
    assert json.loads((out / "build-info.json").read_text())["library_sha256"] == sha256_of(library)
    ensure_built("tiny")                                    # current now: not built again
    assert (out / "times-built").read_text() == "built\n"
    library.write_bytes(library.read_bytes() + b"\0")        # not the file the build wrote
    assert build_state(recipe, "1.0") == "modified" and is_stale(recipe, "1.0")
    ensure_built("tiny")                                    # so it is built again
    assert (out / "times-built").read_text() == "built\nbuilt\n" and build_state(recipe, "1.0") == "current"
    (tmp_path / "implementations" / "include" / "ccdiff_adapter.h").write_text("/* ABI v2 */\n")
    assert is_stale(recipe, "1.0")                          # the ABI header counts too


def test_the_shared_build_steps_a_build_sh_sources_count_and_no_others(tmp_path, monkeypatch):
    """implementations/include/rust_build.sh is part of the Rust stacks' builds: an edit to it
    makes a build whose build.sh sources it stale, and leaves the others current."""
    stack, _ = _home(tmp_path, monkeypatch)
    shared = tmp_path / "implementations" / "include" / "rust_build.sh"
    shared.write_text("sync_tree() { :; }\n")
    recipe = load_recipes()["tiny"]
    digest = recipe_digest(recipe)
    shared.write_text("sync_tree() { true; }\n")
    assert recipe_digest(recipe) == digest                  # tiny's build.sh does not source it
    (stack / "build.sh").write_text(BUILD_SH + '. "$(dirname "$0")/../include/rust_build.sh"\n')
    sourcing = recipe_digest(recipe)
    shared.write_text("sync_tree() { false; }\n")
    assert recipe_digest(recipe) != sourcing


EXCLUSIVE_BUILD_SH = """#!/bin/sh
# Fails if another build of this folder is running: the marker is created atomically.
mkdir "$2/building" || { echo "another build is running in $2"; exit 1; }
sleep 1
cc -shared -fPIC -o "$2/libccdiff_adapter.so" "$(dirname "$0")/adapter.c"
rmdir "$2/building"
echo built >> "$2/times-built"
"""


def test_two_concurrent_forced_builds_of_one_stack_take_turns(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys
    from pathlib import Path
    stack, out = _home(tmp_path, monkeypatch)
    (stack / "build.sh").write_text(EXCLUSIVE_BUILD_SH)
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root))
    builds = [subprocess.Popen([sys.executable, "-m", "ccdiff", "build", "tiny", "--force"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [b.communicate(timeout=120)[0] for b in builds]
    assert [b.returncode for b in builds] == [0, 0], outputs
    assert (out / "times-built").read_text() == "built\nbuilt\n"


def _ar(members) -> bytes:
    """An ar archive (the .deb container): magic, then 60-byte headers, even padding."""
    out = b"!<arch>\n"
    for name, data in members:
        header = f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
        assert len(header) == 60
        out += header + data + (b"\n" if len(data) % 2 else b"")
    return out


def test_a_deb_unpacks_its_data_tar(tmp_path):
    """ccdiff build unpacks a Debian package (the linux stack's linux-source-<v>.deb): the
    data.tar.* member's tree, not the control files; an odd-sized member before it is
    padded; anything that is not an ar archive, or has no data.tar, is a setup error."""
    import lzma

    import pytest

    from ccdiff.build import unpack
    from ccdiff.errors import SetupError
    payload = io.BytesIO()
    with tarfile.open(fileobj=payload, mode="w") as tar:
        info = tarfile.TarInfo("./usr/src/linux-source-6.12.tar.xz")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"xyz"))
    deb = tmp_path / "linux-source-6.12_6.12.117-1_all.deb"
    deb.write_bytes(_ar([("debian-binary", b"2.0\n"), ("control.tar.xz", b"odd"),
                         ("data.tar.xz", lzma.compress(payload.getvalue()))]))
    unpack(deb, tmp_path / "src")
    assert (tmp_path / "src" / "usr" / "src" / "linux-source-6.12.tar.xz").read_bytes() == b"xyz"
    assert not (tmp_path / "src" / "control.tar.xz").exists()
    bad = tmp_path / "bad.deb"
    bad.write_bytes(b"not an ar archive")
    with pytest.raises(SetupError, match="not a Debian package"):
        unpack(bad, tmp_path / "src2")
    empty = tmp_path / "empty.deb"
    empty.write_bytes(_ar([("debian-binary", b"2.0\n")]))
    with pytest.raises(SetupError, match="no data.tar"):
        unpack(empty, tmp_path / "src3")


def test_a_failed_build_leaves_no_empty_build_folder(tmp_path, monkeypatch):
    """Issue 32: failed builds left empty build/<stack>/<version>/ folders behind.  A build
    that fails before build.sh runs (here: an archive whose sha256 is not the pinned one, a
    --source that is not a folder) removes the folder it created; once build.sh ran, its
    build.log stays, since the error names it; a folder that existed before is kept."""
    import pytest

    from ccdiff.build import build_spec, build_target
    from ccdiff.errors import SetupError
    stack, out = _home(tmp_path, monkeypatch)
    out.rmdir()
    archive = tmp_path / "tiny-1.0.tar.gz"
    archive.write_bytes(archive.read_bytes() + b"\0")       # no longer what stack.toml pins
    recipe = load_recipes()["tiny"]
    with pytest.raises(SetupError, match="sha256 mismatch"):
        build_target(recipe, "1.0")
    assert not out.exists()
    with pytest.raises(SetupError, match="not a folder"):
        build_spec("tiny", source=tmp_path / "no-such-folder")
    assert [p.name for p in (tmp_path / "build" / "tiny").iterdir() if not p.name.startswith(".")] == []
    (stack / "build.sh").write_text("#!/bin/sh\necho compiler says no\nexit 3\n")
    source = tmp_path / "checkout"
    source.mkdir()
    with pytest.raises(SetupError, match="exit 3") as failed:
        build_spec("tiny", source=source)
    kept = [p for p in (tmp_path / "build" / "tiny").iterdir() if not p.name.startswith(".")]
    assert len(kept) == 1 and (kept[0] / "build.log").read_text() == "compiler says no\n"
    assert str(kept[0] / "build.log") in str(failed.value)
    out.mkdir()
    (out / "mine").write_text("a file this build did not write")
    with pytest.raises(SetupError, match="sha256 mismatch"):
        build_target(recipe, "1.0", force=True)
    assert (out / "mine").exists()


def test_four_source_trees_in_one_repository_get_four_builds(pristine_source, tmp_path):  # noqa: F811
    """Issue 32: four ngtcp2 trees inside one enclosing git repository all became
    ngtcp2@git-<its sha>, and each build replaced the last.  Named by their content, they
    build side by side: four names, four libraries, each recording its own tree."""
    import json
    import re
    import shutil
    import subprocess
    from pathlib import Path

    from .test_planted_bugs import CC, ccdiff
    enclosing = tmp_path / "enclosing"
    trees = [enclosing / f"tree-{n}" for n in range(4)]
    for n, tree in enumerate(trees):
        shutil.copytree(pristine_source, tree)
        with open(tree / CC, "a") as fh:            # a different tree each: one comment apart
            fh.write(f"/* tree {n} */\n")
    git = ["git", "-C", str(enclosing), "-c", "user.email=t@t", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "four trees"]):
        subprocess.run(git + args, check=True)
    sha = subprocess.run(git + ["rev-parse", "--short=10", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    build_dir = tmp_path / "build"
    libraries = []
    for tree in trees:
        done = ccdiff("build", "ngtcp2", "--source", str(tree), build_dir=build_dir)
        assert done.returncode == 0, done.stdout + done.stderr
        libraries.append(Path(done.stdout.strip().splitlines()[-1]))
    names = [library.parent.name for library in libraries]
    assert len(set(names)) == 4 and all(re.fullmatch(r"local-[0-9a-f]{12}", name) for name in names), names
    assert not any(sha in name for name in names)
    for tree, library in zip(trees, libraries):
        assert library.is_file()
        assert json.loads((library.parent / "build-info.json").read_text())["source"] == str(tree.resolve())
    assert sorted(p.name for p in (build_dir / "ngtcp2").iterdir() if not p.name.startswith(".")) == sorted(names)

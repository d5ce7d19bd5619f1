"""`ccdiff coverage`: line and branch coverage of a stack's own controller files.

The stack's build.sh builds the adapter once more with gcc `--coverage -O0` into
its own folder, coverage_dir()/<stack>/<version>/ (default build/coverage/: the
normal build in build/<stack>/<version>/ is never touched).  Each input set
(examples, scenarios, corpus) then runs in a child process whose CCDIFF_BUILD_DIR
is that coverage folder, so every command opens the instrumented library; the
.gcda counters are written when the child exits, read with `gcov --json-format`
and cleared before the next set.  "all" is the union of the sets.

Only the controller's own files are reported (the stack's coverage.toml); the adapter and
the files the adapter links only to satisfy symbols are not.  The Rust stacks build with
-C instrument-coverage and are read with llvm-profdata/llvm-cov of rustc's own LLVM
major version (rust_tools); stable rustc gives lines, no branch counters.  A Python stack
(aioquic) runs in process: its build is the ordinary one (build.sh copies the pinned
modules unmodified), and the child process measures the copied controller modules with
coverage.py (the `coverage` package, branch=True); lines are coverage.py's statements,
branches its arcs out of a line that has more than one destination."""
from __future__ import annotations

import ast
import fcntl
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .build import fetch, recipe_digest, unpack
from .errors import SetupError
from .paths import build_dir, implementations_dir, project_root
from .stacks import LIBRARY_NAME, Target, resolve

# What is measured is each stack's own data, in its folder's coverage.toml (recipe.coverage):
# controller_files (relative to the pinned source root, build/<stack>/<version>/src/<subdir>,
# which is the upstream repository's root + provenance.toml's path_in_repo), and where a stack
# needs them extracted_tree (a stack whose pinned source is an archive inside the download:
# the tree build.sh extracts the controller files into, relative to the coverage folder, a glob
# with one match), compiled_copies (files build.sh compiles as copies of pinned files, relative
# to the coverage folder -> the pinned file; gcov's lines of the copy are mapped back with a
# line diff, _line_map), python_copies (a Python stack's copy of a controller file, relative to
# its build folder: the pinned path with its leading first element replaced by the second) and
# not_driven (whole functions of the controller files that no ccdiff input can run, and why;
# docs/coverage.md has the line-level list.  Reported apart: "driven" coverage leaves them out;
# the plain numbers do not).


def controller_files(recipe) -> tuple:
    """The stack's controller files (coverage.toml controller_files); () where it names none."""
    return tuple(recipe.coverage.get("controller_files", ()))


def not_driven(recipe) -> dict:
    """Function name -> why no ccdiff input can run it (coverage.toml [not_driven])."""
    return dict(recipe.coverage.get("not_driven", {}))


SETS = ("examples", "scenarios", "corpus")
GCOV_CFLAGS = "--coverage -O0 -fprofile-update=single"
GCOV_LDFLAGS = "--coverage"
RUST_FLAGS = "-C instrument-coverage"     # stable rustc: line (region) coverage, no branch counters
RUST_TARGET = "x86_64-unknown-linux-gnu"
DEFAULT_SEEDS = 3
PYCOV_DATA = "pycov.data"       # coverage.py's data file in the coverage folder
PYCOV_PIN = "coverage==7.17.3"  # pyproject.toml's test extra


def coverage_module():
    """The coverage.py package, or one clear error saying how to install it."""
    try:
        import coverage as module
    except ImportError:
        raise SetupError(f"Python coverage needs the coverage package (coverage.py): pip install '{PYCOV_PIN}' "
                         "(or pip install -e '.[test]')") from None
    return module


def coverage_dir() -> Path:
    env = os.environ.get("CCDIFF_COVERAGE_BUILD_DIR")
    return Path(env).resolve() if env else build_dir() / "coverage"


def _rustc_llvm_major() -> str:
    try:
        out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        raise SetupError("no rustc on PATH: the Rust stacks cannot be built") from None
    match = re.search(r"^LLVM version: (\d+)", out, re.M)
    if not match:
        raise SetupError("rustc -vV names no LLVM version")
    return match.group(1)


def rust_tools() -> tuple[str, str]:
    """llvm-profdata and llvm-cov of rustc's own LLVM major version (-C instrument-coverage
    writes that version's profile format; other versions cannot read it)."""
    major = _rustc_llvm_major()
    found = [shutil.which(f"{name}-{major}") or _rustup_tool(name) for name in ("llvm-profdata", "llvm-cov")]
    if None in found:
        raise SetupError(f"Rust coverage needs llvm-profdata and llvm-cov of rustc's LLVM {major} "
                         f"(-C instrument-coverage writes LLVM {major} profiles); this machine has "
                         f"{_installed_llvm()}, which cannot read them: apt-get install llvm-{major} "
                         "(Debian bookworm-security) or rustup component add llvm-tools")
    return found[0], found[1]


def _rustup_tool(name: str) -> str | None:
    home = Path(os.environ.get("RUSTUP_HOME", Path.home() / ".rustup"))
    hits = sorted(home.glob(f"toolchains/*/lib/rustlib/*/bin/{name}"))
    return str(hits[0]) if hits else None


def _installed_llvm() -> str:
    versions = sorted({p.name.rsplit("-", 1)[1] for p in Path("/usr/bin").glob("llvm-profdata-*")})
    return "LLVM " + ", ".join(versions) + "'s llvm-profdata" if versions else "no llvm-profdata"


# ---------------------------------------------------------------- build


def build(target: Target, log=None) -> Path:
    """The adapter built with gcc --coverage, in coverage_dir()/<stack>/<version>/."""
    recipe, version = target.recipe, target.version
    pin = recipe.versions.get(version)
    if pin is None:
        raise SetupError(f"{target.label}: coverage builds pinned versions only")
    out = coverage_dir() / recipe.name / version
    library = out / recipe.artifact_name
    info_path = out / "build-info.json"
    rust, python = recipe.language == "rust", recipe.language == "python"
    how = {"rustflags": RUST_FLAGS} if rust else {"measure": "coverage.py"} if python else {"cflags": GCOV_CFLAGS}
    made_of = {"recipe": recipe_digest(recipe), "sha256": pin["sha256"], "coverage": True, **how}
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError):
        info = {}
    if library.exists() and {k: info.get(k) for k in made_of} == made_of:
        return library
    if out.resolve() == recipe.build_folder(version).resolve():
        raise SetupError(f"the coverage folder {out} is the normal build's: set CCDIFF_COVERAGE_BUILD_DIR")
    if log:
        how = RUST_FLAGS if rust else "its own build.sh (measured with coverage.py)" if python else "gcc --coverage"
        log(f"building {target.recipe.name}@{version} with {how} into {out}")
    src = out / "src"
    if not (src / ".unpacked").exists() or (src / ".unpacked").read_text().strip() != pin["sha256"]:
        unpack(fetch(pin["url"], pin["sha256"]), src)
        (src / ".unpacked").write_text(pin["sha256"] + "\n")
    for old in out.glob("**/*.gc[dn][ao]"):
        old.unlink()
    env = dict(os.environ, CCDIFF_INCLUDE=str(implementations_dir() / "include"), CCDIFF_STACK_VERSION=version,
               CCDIFF_SANITIZE="0")
    if rust:   # naming the target keeps the flags off build scripts and proc macros (as the fuzz builds)
        env.update(RUSTFLAGS=RUST_FLAGS, CARGO_BUILD_TARGET=RUST_TARGET)
    elif python:   # nothing to instrument: coverage.py measures the copied modules at run time
        pass
    else:
        env.update(CC="gcc", CCDIFF_EXTRA_CFLAGS=GCOV_CFLAGS, CCDIFF_EXTRA_LDFLAGS=GCOV_LDFLAGS)
    build_log = out / "build.log"
    with open(build_log, "w") as fh:
        result = subprocess.run(["bash", str(recipe.folder / "build.sh"), str(src / pin.get("subdir", "")), str(out)],
                                env=env, stdout=fh, stderr=subprocess.STDOUT)
    if result.returncode != 0 or not library.exists():
        raise SetupError(f"coverage build of {target.label} failed (exit {result.returncode}); log: {build_log}")
    # The child processes open this library through CCDIFF_BUILD_DIR=coverage_dir(): the
    # same build-info.json keys as a normal build, so it is not refused as stale.
    info_path.write_text(json.dumps(dict(made_of, stack=recipe.name, version=version, sanitize=False),
                                     indent=2) + "\n")
    return library


def source_root(target: Target) -> Path:
    pin = target.recipe.versions[target.version]
    tree = target.recipe.coverage.get("extracted_tree")
    if tree:
        hits = sorted(_folder(target).glob(tree))
        if len(hits) != 1:
            raise SetupError(f"{target.label}: expected one {tree} in {_folder(target)} (its build.sh extracts "
                             f"the controller files there), found {len(hits)}")
        return hits[0]
    return coverage_dir() / target.recipe.name / target.version / "src" / pin.get("subdir", "")


# ---------------------------------------------------------------- inputs


def variants(target: Target, all_options: bool = False) -> list[str]:
    """One spec per congestion controller the stack offers (cc=cubic|reno ...): the
    controller files hold both, and ccdiff drives both.  all_options: also every other
    value of every other option (stack.toml `options`, first value = the default), one at a
    time, with each controller."""
    base = f"{target.recipe.name}@{target.version}"
    options = [(o.partition("=")[0], o.partition("=")[2].split("|")) for o in target.recipe.options]
    ccs = next((values for key, values in options if key == "cc"), [])
    specs = [f"{base}:cc={v}" for v in ccs] or [base]
    if all_options:
        for cc in ccs or [None]:
            first = f"cc={cc}," if cc else ""
            specs += [f"{base}:{first}{key}={v}" for key, values in options if key != "cc" for v in values[1:]]
    return specs


def default_traces(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.iterdir() if p.suffix in (".jsonl", ".bin") and p.is_file())


def plan(examples: bool, scenarios: bool, corpus: list[str], seeds: int) -> dict:
    """Which inputs go into which set.  corpus: folders (default fuzz/reproducers/)."""
    root = project_root()
    sets = {}
    if examples:
        sets["examples"] = {"traces": default_traces(root / "examples")}
    if scenarios:
        from .sim.scenario import available_scenarios
        # the catalog, plus the coverage-only scenarios (scenarios/coverage/, by path: not in
        # `ccdiff conform` until their findings are settled, docs/coverage.md)
        names = list(available_scenarios()) + sorted(str(p) for p in (root / "scenarios" / "coverage").glob("*.toml"))
        sets["scenarios"] = {"scenarios": names, "seeds": list(range(seeds))}
    if corpus:
        traces = []
        for folder in corpus:
            path = Path(folder)
            if not path.is_dir():
                raise SetupError(f"--corpus {folder}: not a folder")
            traces += default_traces(path)
        if not traces:
            raise SetupError(f"--corpus {', '.join(corpus)}: no .jsonl or .bin trace in it")
        sets["corpus"] = {"traces": traces}
    return sets


def _run_set(target: Target, inputs: dict, specs: list[str]) -> dict:
    """Run one set in a child process against the coverage build; returns its tally."""
    env = dict(os.environ, CCDIFF_BUILD_DIR=str(coverage_dir()), CCDIFF_HOME=str(project_root()))
    env.pop("CCDIFF_REMOTE", None)
    if target.recipe.language == "rust":
        env["LLVM_PROFILE_FILE"] = str(_folder(target) / "profraw" / "%p-%m.profraw")
    job = {"inputs": inputs, "specs": specs}
    if target.recipe.language == "python":
        job["pycov"] = {"data_file": str(_folder(target) / PYCOV_DATA),
                        "include": [str(python_copy(target, rel)) for rel in controller_files(target.recipe)]}
    job = json.dumps(job)
    result = subprocess.run([sys.executable, "-m", "ccdiff.coverage", job], env=env, capture_output=True,
                            text=True, cwd=str(project_root()))
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SetupError(f"running the coverage inputs failed (exit {result.returncode}): {tail}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _child(job: dict) -> dict:
    """Inside the child: replay traces / simulate scenarios through the specs."""
    inputs, specs = job["inputs"], job["specs"]
    tally = {"runs": 0, "errors": []}
    pycov = None
    if "pycov" in job:     # a Python stack: its modules load at the first replay, after start()
        pycov = coverage_module().Coverage(data_file=job["pycov"]["data_file"], branch=True,
                                           include=job["pycov"]["include"])
        pycov.start()
    try:
        _child_runs(inputs, specs, tally)
    finally:
        if pycov is not None:
            pycov.stop()
            pycov.save()
    return tally


def _child_runs(inputs: dict, specs: list[str], tally: dict) -> None:
    from .encoding import decode
    from .replay import replay
    from .sim.engine import simulate
    from .sim.scenario import load_scenario
    from .trace import load_trace
    for path in inputs.get("traces", []):
        try:
            trace = decode(Path(path).read_bytes(), Path(path).name) if path.endswith(".bin") else load_trace(path)
        except Exception as exc:   # noqa: BLE001 - a bad corpus file is reported, not fatal
            tally["errors"].append(f"{path}: {exc}")
            continue
        for spec in specs:
            try:
                replay(trace, [spec])
                tally["runs"] += 1
            except Exception as exc:   # noqa: BLE001
                tally["errors"].append(f"{path} {spec}: {exc}")
    for name in inputs.get("scenarios", []):
        scenario = load_scenario(name)
        for seed in inputs.get("seeds", [1]):
            for spec in specs:
                try:
                    simulate(scenario, spec, seed, record=False)
                    tally["runs"] += 1
                except Exception as exc:   # noqa: BLE001
                    tally["errors"].append(f"{name} seed {seed} {spec}: {exc}")


# ---------------------------------------------------------------- gcov


def _gcov(target: Target) -> dict:
    """{relative path: {line: [count, [branch counts]]}} for the controller files, from the
    .gcda counters (zero where there are none) of the coverage build."""
    out = coverage_dir() / target.recipe.name / target.version
    root = source_root(target).resolve()
    wanted = set(controller_files(target.recipe))
    copies = target.recipe.coverage.get("compiled_copies", {})
    maps: dict = {}
    files: dict = {}
    notes = sorted(out.glob("**/*.gcno"))
    if not notes:
        raise SetupError(f"no .gcno files in {out}: the coverage build did not instrument anything")
    scratch = out / "gcov-out"
    scratch.mkdir(exist_ok=True)
    for note in notes:
        result = subprocess.run(["gcov", "--json-format", "--branch-probabilities", "--object-directory",
                                 str(note.parent), str(note.with_suffix(".gcda") if note.with_suffix(".gcda").exists()
                                                       else note)],
                                cwd=scratch, capture_output=True)
        if result.returncode != 0:
            raise SetupError(f"gcov failed on {note.name}: {result.stderr.decode(errors='replace').strip()}")
        for made in scratch.glob("*.gcov.json.gz"):
            data = json.loads(gzip.decompress(made.read_bytes()))
            made.unlink()
            for entry in data.get("files", []):
                path = Path(entry["file"])
                path = (Path(data.get("current_working_directory", "")) / path) if not path.is_absolute() else path
                mapping = None
                try:
                    rel = str(path.resolve().relative_to(root))
                except ValueError:
                    try:
                        copy = str(path.resolve().relative_to(out.resolve()))
                    except ValueError:
                        continue
                    rel = copies.get(copy)
                    if rel is None:
                        continue
                    if copy not in maps:
                        maps[copy] = _line_map(path.resolve(), root / rel)
                    mapping = maps[copy]
                if rel not in wanted:
                    continue
                lines = files.setdefault(rel, {})
                for line in entry["lines"]:
                    n = line["line_number"] if mapping is None else mapping.get(line["line_number"])
                    if n is None:
                        continue
                    branches = [b["count"] for b in line.get("branches", []) if not b.get("throw")]
                    old = lines.get(n)
                    if old is None:
                        lines[n] = [line["count"], branches, line.get("function_name", "")]
                    else:
                        old[0] += line["count"]
                        if len(old[1]) == len(branches):
                            old[1] = [a + b for a, b in zip(old[1], branches)]
    missing = wanted - set(files)
    if missing:
        raise SetupError(f"{target.label}: gcov reported nothing for {', '.join(sorted(missing))}")
    return files


def _folder(target: Target) -> Path:
    return coverage_dir() / target.recipe.name / target.version


def _clear_counters(target: Target) -> None:
    for pattern in ("**/*.gcda", "profraw/*.profraw", PYCOV_DATA + "*"):
        for old in _folder(target).glob(pattern):
            old.unlink()


def _collect(target: Target) -> dict:
    if target.recipe.language == "python":
        return _pycov(target)
    return _llvm_cov(target) if target.recipe.language == "rust" else _gcov(target)


def python_copy(target: Target, rel: str) -> Path:
    """Where a Python stack's build keeps its copy of the pinned controller file rel."""
    pinned_prefix, copy_prefix = target.recipe.coverage["python_copies"]
    if not rel.startswith(pinned_prefix):
        raise SetupError(f"{target.label}: {rel} is not under {pinned_prefix}")
    return _folder(target) / (copy_prefix + rel[len(pinned_prefix):])


def _python_functions(path: Path) -> dict:
    """line -> the qualified name of the innermost class or function around it
    (Class.method), "" at module level: the "function" of a line in the report."""
    names: dict = {}

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                for n in range(first, child.end_lineno + 1):
                    names[n] = name
                visit(child, name + ".")
            else:
                visit(child, prefix)
    visit(ast.parse(path.read_text()), "")
    return names


def _pycov(target: Target) -> dict:
    """The same shape as _gcov, from coverage.py's data of the child: every statement
    (count 1 if it ran, else 0) and, for a line with more than one destination, one
    outcome per destination in line order (1 taken, 0 not).  The measured files are
    the build's copies; they must equal the pinned files the report names."""
    module = coverage_module()
    out = _folder(target)
    data = out / PYCOV_DATA
    if not data.exists():
        raise SetupError(f"{target.label}: no coverage.py data written in {out}: nothing ran")
    cov = module.Coverage(data_file=str(data), branch=True)
    cov.load()
    root = source_root(target)
    report = out / "pycov.json"
    copies = {rel: python_copy(target, rel) for rel in controller_files(target.recipe)}
    for rel, copy in copies.items():
        if not copy.is_file() or copy.read_bytes() != (root / rel).read_bytes():
            raise SetupError(f"{target.label}: {copy} is not the pinned {rel}: rebuild (ccdiff coverage rebuilds "
                             f"when the recipe changes; remove {out} to force it)")
    try:
        cov.json_report(morfs=[str(c) for c in copies.values()], outfile=str(report))
    except module.CoverageException as exc:
        raise SetupError(f"{target.label}: coverage.py: {exc}") from None
    measured = {}
    for name, entry in json.loads(report.read_text())["files"].items():
        measured[(Path.cwd() / name).resolve()] = entry
    report.unlink()
    files: dict = {}
    for rel, copy in copies.items():
        entry = measured.get(copy.resolve())
        if entry is None:
            raise SetupError(f"{target.label}: coverage.py reported nothing for {rel}")
        functions = _python_functions(copy)
        arcs: dict = {}
        for taken, key in ((1, "executed_branches"), (0, "missing_branches")):
            for src, dst in entry.get(key, []):
                arcs.setdefault(src, []).append((dst, taken))
        lines = {}
        for taken, key in ((1, "executed_lines"), (0, "missing_lines")):
            for n in entry[key]:
                lines[n] = [taken, [t for _, t in sorted(arcs.get(n, []))], functions.get(n, "")]
        files[rel] = lines
    return files


def _llvm_cov(target: Target) -> dict:
    """The same shape as _gcov, from -C instrument-coverage profiles: llvm-profdata merge,
    then llvm-cov export -format=lcov (DA lines; BRDA only where rustc emitted branch
    counters, which stable rustc does not).  Lines are mapped back from the patched copy
    build.sh compiles (work/tree/upstream/) to the pinned upstream file."""
    profdata_tool, cov_tool = rust_tools()
    out = _folder(target)
    raws = sorted((out / "profraw").glob("*.profraw"))
    if not raws:
        raise SetupError(f"{target.label}: no .profraw written in {out / 'profraw'}: nothing ran")
    merged = out / "merged.profdata"
    for cmd in ([profdata_tool, "merge", "-sparse", *map(str, raws), "-o", str(merged)],):
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise SetupError(f"llvm-profdata merge failed: {result.stderr.strip().splitlines()[-1:]}")
    result = subprocess.run([cov_tool, "export", "-format=lcov", "-instr-profile", str(merged),
                             str(out / LIBRARY_NAME)], capture_output=True, text=True)
    if result.returncode != 0:
        raise SetupError(f"llvm-cov export failed: {result.stderr.strip().splitlines()[-1:]}")
    tree = (out / "work" / "tree" / "upstream").resolve()
    wanted = set(controller_files(target.recipe))
    root = source_root(target).resolve()
    files: dict = {}
    current, rel, functions = None, None, []
    for line in result.stdout.splitlines():
        if line.startswith("SF:"):
            path = Path(line[3:]).resolve()
            rel = None
            try:
                rel = str(path.relative_to(tree))
            except ValueError:
                pass
            current = None
            if rel in wanted:
                current = files.setdefault(rel, {})
                functions = []
                mapping = _line_map(path, root / rel)
        elif current is None:
            continue
        elif line.startswith("FN:"):
            start, _, name = line[3:].partition(",")
            functions.append((int(start), name))
        elif line.startswith("DA:"):
            n, count = (int(x) for x in line[3:].split(",")[:2])
            up = mapping.get(n)
            if up is None:
                continue                      # a line build.sh's patch added
            fn = max((f for f in functions if f[0] <= n), default=(0, ""))[1]
            old = current.get(up)
            current[up] = [count + (old[0] if old else 0), old[1] if old else [], fn]
        elif line.startswith("BRDA:"):
            n, _, _, taken = line[5:].split(",")
            up = mapping.get(int(n))
            if up is not None and up in current:
                current[up][1].append(0 if taken == "-" else int(taken))
        elif line == "end_of_record":
            current = None
    missing = wanted - set(files)
    if missing:
        raise SetupError(f"{target.label}: llvm-cov reported nothing for {', '.join(sorted(missing))}")
    names = _demangle_all({v[2] for lines in files.values() for v in lines.values()}, cov_tool)
    for lines in files.values():
        for v in lines.values():
            v[2] = names.get(v[2], v[2])
    return files


def _demangle_all(names: set, cov_tool: str) -> dict:
    """Rust symbol names (v0 or legacy) demangled by the llvm-cxxfilt beside llvm-cov."""
    names = sorted(n for n in names if n)
    tool = shutil.which(Path(cov_tool).name.replace("llvm-cov", "llvm-cxxfilt")) or \
        str(Path(cov_tool).with_name(Path(cov_tool).name.replace("llvm-cov", "llvm-cxxfilt")))
    try:
        out = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True,
                             check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return {n: _demangle(n) for n in names}
    return {n: re.sub(r"::h[0-9a-f]{16}$", "", d) for n, d in zip(names, out)} if len(out) == len(names) else {}


def _line_map(patched: Path, upstream: Path) -> dict:
    """patched line number -> upstream line number, for the lines both have."""
    import difflib
    a = patched.read_text(errors="replace").splitlines()
    b = upstream.read_text(errors="replace").splitlines()
    mapping = {}
    for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            mapping[block.a + k + 1] = block.b + k + 1
    return mapping


def _demangle(name: str) -> str:
    """Rust legacy mangling (_ZN...17h<hash>E) to a::b::c; other names as they are."""
    if not name.startswith("_ZN"):
        return name
    parts, i = [], 3
    while i < len(name) and name[i].isdigit():
        j = i
        while name[j].isdigit():
            j += 1
        size = int(name[i:j])
        parts.append(name[j:j + size])
        i = j + size
    if parts and re.fullmatch(r"h[0-9a-f]{16}", parts[-1]):
        parts.pop()
    text = "::".join(parts)
    for code, char in (("$LT$", "<"), ("$GT$", ">"), ("$u20$", " "), ("$C$", ","), ("..", "::"), ("$RF$", "&")):
        text = text.replace(code, char)
    return text


def _union(tallies: list[dict]) -> dict:
    files: dict = {}
    for tally in tallies:
        for rel, lines in tally.items():
            into = files.setdefault(rel, {})
            for n, (count, branches, fn) in lines.items():
                if n not in into:
                    into[n] = [count, list(branches), fn]
                else:
                    into[n][0] += count
                    into[n][1] = [a + b for a, b in zip(into[n][1], branches)]
    return files


def summarize(lines: dict) -> dict:
    total = len(lines)
    hit = sum(1 for c, _, _ in lines.values() if c > 0)
    branches = sum(len(b) for _, b, _ in lines.values())
    taken = sum(1 for _, b, _ in lines.values() for x in b if x > 0)
    return {"lines": total, "lines_covered": hit, "line_pct": _pct(hit, total),
            "branches": branches, "branches_covered": taken, "branch_pct": _pct(taken, branches)}


def _pct(a: int, b: int) -> float | None:
    return round(100.0 * a / b, 1) if b else None     # None: no branch counters (stable Rust)


def uncovered_ranges(lines: dict) -> list[dict]:
    """Runs of consecutive instrumented lines that never ran (lines without code between
    them do not break a run), with the function they are in."""
    ranges = []
    current = None
    for n in sorted(lines):
        count, _, fn = lines[n]
        if count == 0:
            if current is not None and current["function"] == fn:
                current["end"] = n
                current["lines"] += 1
            else:
                current = {"start": n, "end": n, "lines": 1, "function": fn}
                ranges.append(current)
        else:
            current = None
    return ranges


def partial_branches(lines: dict) -> list[dict]:
    """Lines that ran but where some branch outcome never happened."""
    return [{"line": n, "function": fn, "taken": sum(1 for x in b if x > 0), "branches": len(b)}
            for n, (count, b, fn) in sorted(lines.items()) if count > 0 and b and any(x == 0 for x in b)]


# ---------------------------------------------------------------- command


def run(spec: str, sets: dict, log=print, all_options: bool = False) -> dict:
    target = resolve(spec)
    if target.kind != "native":
        raise SetupError(f"{spec}: coverage measures a stack's own code; the oracle is Python")
    if not controller_files(target.recipe):
        raise SetupError(f"{target.recipe.name}: no controller files known for coverage (controller_files in "
                         f"{target.recipe.folder / 'coverage.toml'})")
    if target.recipe.language == "rust":
        rust_tools()          # before a build of minutes that could not be read
    if target.recipe.language == "python":
        coverage_module()
    if not sets:
        raise SetupError("no input set chosen")
    folder = coverage_dir() / target.recipe.name / target.version
    folder.mkdir(parents=True, exist_ok=True)
    # One coverage run of a stack at a time (parallel pytest workers, two terminals): the
    # .gcda counters are shared files, cleared between sets.
    with open(folder.parent / f".{target.version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _run_locked(target, sets, log, all_options)


def _run_locked(target: Target, sets: dict, log, all_options: bool) -> dict:
    build(target, log)
    from . import provenance
    pinned = provenance.pin(target.recipe, target.version)
    specs = variants(target, all_options)
    per_set, runs = {}, {}
    for name, inputs in sets.items():
        _clear_counters(target)
        log(f"running {name} through {', '.join(specs)} (coverage build)")
        runs[name] = _run_set(target, inputs, specs)
        per_set[name] = _collect(target)
    _clear_counters(target)
    if len(per_set) > 1:
        per_set["all"] = _union(list(per_set.values()))
    final = per_set.get("all") or next(iter(per_set.values()))
    files = {}
    for rel in controller_files(target.recipe):
        uncovered = uncovered_ranges(final[rel])
        for r in uncovered:
            span = f"{r['start']}-{r['end']}" if r["end"] != r["start"] else str(r["start"])
            r["url"] = provenance.permalink(pinned, rel, span) if pinned else ""
        files[rel] = {"sets": {name: summarize(tally[rel]) for name, tally in per_set.items()},
                      "uncovered": uncovered, "partial_branches": partial_branches(final[rel]),
                      "covered_lines": sorted(n for n, v in final[rel].items() if v[0] > 0),
                      "uncovered_lines": sorted(n for n, v in final[rel].items() if v[0] == 0)}
    totals = {name: summarize({(rel, n): v for rel, t in tally.items() for n, v in t.items()})
              for name, tally in per_set.items()}
    skip = not_driven(target.recipe)
    driven = {name: summarize({(rel, n): v for rel, t in tally.items() for n, v in t.items() if v[2] not in skip})
              for name, tally in per_set.items()}
    for entry in files.values():
        for r in entry["uncovered"]:
            r["not_driven"] = skip.get(r["function"], "")
    return {"stack": target.label, "version": target.version, "specs": specs,
            "upstream": pinned.get("upstream_repo", ""), "commit": pinned.get("upstream_commit", ""),
            "build": str(coverage_dir() / target.recipe.name / target.version),
            "inputs": {name: {k: v for k, v in inp.items()} for name, inp in sets.items()},
            "runs": runs, "totals": totals, "driven": driven, "files": files}


def render_markdown(doc: dict) -> str:
    out = [f"# Coverage of {doc['stack']}'s controller files", "",
           f"Upstream {doc['upstream']} at {doc['commit']}; driven as {', '.join(doc['specs'])}.", "",
           "| file | set | lines | line % | branches | branch % |", "|---|---|---|---|---|---|"]
    for rel, entry in doc["files"].items():
        for name, s in entry["sets"].items():
            out.append(f"| {rel} | {name} | {s['lines_covered']}/{s['lines']} | {_fmt(s['line_pct'])} | "
                       f"{s['branches_covered']}/{s['branches']} | {_fmt(s['branch_pct'])} |")
    for label, key in (("**total**", "totals"), ("**driven** (not_driven functions left out)", "driven")):
        for name, s in doc[key].items():
            out.append(f"| {label} | {name} | {s['lines_covered']}/{s['lines']} | {_fmt(s['line_pct'])} | "
                       f"{s['branches_covered']}/{s['branches']} | {_fmt(s['branch_pct'])} |")
    out += ["", "## Lines never run", ""]
    for rel, entry in doc["files"].items():
        for r in entry["uncovered"]:
            span = f"{r['start']}-{r['end']}" if r["end"] != r["start"] else str(r["start"])
            why = f": not driven, {r['not_driven']}" if r.get("not_driven") else ""
            out.append(f"- [{rel}:{span}]({r['url']}) in `{r['function']}` ({r['lines']} lines){why}")
    return "\n".join(out) + "\n"


def _fmt(pct) -> str:
    return "n/a" if pct is None else f"{pct:.1f}"


def print_report(doc: dict, stream=sys.stdout) -> None:
    sets = list(next(iter(doc["files"].values()))["sets"])
    width = max([len(rel) for rel in doc["files"]] + [len("driven (see not_driven)")]) + 2
    print(f"coverage of {doc['stack']} (controller files; specs {', '.join(doc['specs'])})", file=stream)
    print("file".ljust(width) + "".join(f"{name:>22}" for name in sets), file=stream)
    print(" " * width + "".join(f"{'line% / branch%':>22}" for _ in sets), file=stream)
    rows = [(rel, e["sets"]) for rel, e in doc["files"].items()] + [("total", doc["totals"]),
                                                                     ("driven (see not_driven)", doc["driven"])]
    for rel, by in rows:
        cells = "".join(f"{_fmt(by[n]['line_pct']):>10} / {_fmt(by[n]['branch_pct']):<9}" for n in sets)
        print(rel.ljust(width) + cells, file=stream)
    for name, tally in doc["runs"].items():
        print(f"{name}: {tally['runs']} runs" + (f", {len(tally['errors'])} errors (first: {tally['errors'][0]})"
                                                  if tally["errors"] else ""), file=stream)
    print("never run:", file=stream)
    for rel, entry in doc["files"].items():
        for r in entry["uncovered"]:
            span = f"{r['start']}-{r['end']}" if r["end"] != r["start"] else str(r["start"])
            why = "  [not driven]" if r.get("not_driven") else ""
            print(f"  {rel}:{span}  {r['function']}{why}  {r['url']}", file=stream)


if __name__ == "__main__":     # the child process of _run_set
    print(json.dumps(_child(json.loads(sys.argv[1]))))

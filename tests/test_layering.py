"""Layering: no import circles among ccdiff's modules, and no private name crosses a module border.

The import graph is read from the source with `ast`, not by importing anything, and it counts every
import statement wherever it stands: inside a function, under `if TYPE_CHECKING:`, in a `try:`.  A
lazy import inside a function is how circles were hidden (issue #33 measured six), so it is an arrow
like any other.  The graph covers the packages ccdiff/ and oracle/ and the scripts in bench/ (which
run with bench/ on sys.path, so `import mutation` there means bench/mutation.py).

Two rules, each failing with the offending modules named:

- no cycle: the strongly connected components of the graph are all single modules without a
  self-loop; a failure lists every circle, one shortest cycle each (a -> b -> a);
- no private name across modules: `from .a import _x` and `a._x` (where `a` was bound by an import
  to one of our modules) are refused unless the pair is in ALLOWED_PRIVATE below, each entry with
  the reason it cannot be made public yet.  Dunder names (`__version__`) are public.

`python3 tests/test_layering.py` prints the whole picture: modules, arrows, circles, private
imports (the numbers quoted in issue #33 were measured with it).
"""
from __future__ import annotations

import ast
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ccdiff", "oracle")   # importable packages, resolved by dotted name
SCRIPTS = "bench"                 # a folder of scripts run with itself on sys.path

# Circles that may stay for now, as frozensets of the modules in one strongly connected component,
# each with why.  Empty is the goal.
ALLOWED_CYCLES: dict[frozenset[str], str] = {}

# (importing module, imported module, private name) -> why it may cross the border for now.
# Empty is the goal.
ALLOWED_PRIVATE: dict[tuple[str, str, str], str] = {}


@dataclass(frozen=True)
class Arrow:
    """One import of `target` (a module of ours) by `source`, at `line` of source's file."""
    source: str
    target: str
    line: int


@dataclass(frozen=True)
class PrivateUse:
    """`source` uses `name` of module `target`, at `line` (an import or an attribute access)."""
    source: str
    target: str
    name: str
    line: int


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def discover(root: Path = ROOT) -> dict[str, Path]:
    """Every module of ours by dotted name: ccdiff.report.overview, oracle.cubic, bench.mutation."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    for path in sorted((root / SCRIPTS).glob("*.py")):
        modules[f"{SCRIPTS}.{path.stem}"] = path
    return modules


class _Module:
    """Resolves one module's imports against the set of our modules."""

    def __init__(self, name: str, path: Path, modules: dict[str, Path]):
        self.name, self.path, self.modules = name, path, modules
        self.is_package = path.name == "__init__.py"
        self.is_script = name.startswith(SCRIPTS + ".")

    def absolute(self, dotted: str) -> str | None:
        """Our module that an absolute `import dotted` names, or None (stdlib, third party).
        A bench script's top-level name is first looked up among the bench scripts."""
        if self.is_script and f"{SCRIPTS}.{dotted}" in self.modules:
            return f"{SCRIPTS}.{dotted}"
        if dotted.split(".")[0] not in PACKAGES:
            return None
        while dotted and dotted not in self.modules:   # `import ccdiff.x.y` where y is a name
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    def relative(self, level: int, dotted: str | None) -> str:
        package = self.name.split(".") if self.is_package else self.name.split(".")[:-1]
        base = package[:len(package) - (level - 1)] if level > 1 else package
        return ".".join(base + ([dotted] if dotted else []))

    def scan(self) -> tuple[list[Arrow], list[PrivateUse]]:
        tree = ast.parse(self.path.read_text(), str(self.path))
        arrows: list[Arrow] = []
        private: list[PrivateUse] = []
        aliases: dict[str, str] = {}   # a local name bound to one of our modules -> that module

        def arrow(target: str | None, line: int) -> None:
            if target and target != self.name:
                arrows.append(Arrow(self.name, target, line))

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = self.absolute(alias.name)
                    arrow(target, node.lineno)
                    if target is None:
                        continue
                    if alias.asname:
                        aliases[alias.asname] = target
                    elif target == alias.name or target == f"{SCRIPTS}.{alias.name}":
                        aliases[alias.name.split(".")[0]] = self.absolute(alias.name.split(".")[0]) or target
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    origin = self.relative(node.level, node.module)
                else:
                    origin = self.absolute(node.module or "")
                    if origin is not None and origin != node.module and origin != f"{SCRIPTS}.{node.module}":
                        origin = None   # `from ccdiff.x.missing import y`: not ours to judge
                if origin is None or origin not in self.modules:
                    continue
                for alias in node.names:
                    submodule = f"{origin}.{alias.name}"
                    if submodule in self.modules:   # `from ccdiff.report import overview`
                        arrow(submodule, node.lineno)
                        aliases[alias.asname or alias.name] = submodule
                        if _is_private(alias.name):
                            private.append(PrivateUse(self.name, origin, alias.name, node.lineno))
                        continue
                    arrow(origin, node.lineno)
                    if _is_private(alias.name) and origin != self.name:
                        private.append(PrivateUse(self.name, origin, alias.name, node.lineno))
        # `mod._x` where mod is a name an import bound to one of our modules.  A function-local
        # name that shadows such an alias would be misread; none does today, and a false alarm
        # here is cheap to see.
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                continue
            chain, value = [], node.value          # ccdiff.report.overview._x: walk down the modules
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if not isinstance(value, ast.Name) or value.id not in aliases:
                continue
            target = aliases[value.id]
            for part in reversed(chain):
                target = f"{target}.{part}"
                if target not in self.modules:
                    break
            else:
                if target != self.name:
                    private.append(PrivateUse(self.name, target, node.attr, node.lineno))
        return arrows, private


@functools.lru_cache(maxsize=None)
def scan(root: Path = ROOT) -> tuple[dict[str, Path], list[Arrow], list[PrivateUse]]:
    modules = discover(root)
    arrows: list[Arrow] = []
    private: list[PrivateUse] = []
    for name, path in modules.items():
        a, p = _Module(name, path, modules).scan()
        arrows += a
        private += p
    return modules, arrows, private


def components(nodes, edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def shortest_cycle(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest circle through the component's first module, as a -> b -> ... -> a."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges.get(node, ()) & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return component


def describe_cycle(component: list[str], edges: dict[str, set[str]], arrows: list[Arrow]) -> str:
    cycle = shortest_cycle(component, edges)
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        lines = sorted({arrow.line for arrow in arrows if arrow.source == a and arrow.target == b})
        steps.append(f"{a} -(line {','.join(map(str, lines))})-> {b}")
    extra = f" (component of {len(component)}: {', '.join(component)})" if len(component) > len(cycle) - 1 else ""
    return " ; ".join(steps) + extra


def graph(arrows: list[Arrow]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for arrow in arrows:
        edges.setdefault(arrow.source, set()).add(arrow.target)
    return edges


# ---------------------------------------------------------------------------------------- the tests

def test_no_import_cycles():
    modules, arrows, _ = scan()
    edges = graph(arrows)
    circles = [c for c in components(modules, edges) if frozenset(c) not in ALLOWED_CYCLES]
    assert not circles, "import circles (move the shared thing to the lower module):\n  " + \
        "\n  ".join(describe_cycle(c, edges, arrows) for c in circles)


def test_allowed_cycles_still_exist():
    """An allow-list entry that no longer matches a circle is stale: remove it."""
    modules, arrows, _ = scan()
    present = {frozenset(c) for c in components(modules, graph(arrows))}
    assert not set(ALLOWED_CYCLES) - present


def test_no_private_names_across_modules():
    _, _, private = scan()
    crossing = sorted({(p.source, p.target, p.name, p.line) for p in private
                       if (p.source, p.target, p.name) not in ALLOWED_PRIVATE})
    assert not crossing, "private names used across modules (make them public or move them):\n  " + \
        "\n  ".join(f"{s}:{line} uses {t}.{n}" for s, t, n, line in crossing)


def test_allowed_private_still_used():
    _, _, private = scan()
    used = {(p.source, p.target, p.name) for p in private}
    assert not set(ALLOWED_PRIVATE) - used


# Self-checks of the scanner on a tiny tree, so a green run means "no circle", not "saw nothing".

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in (*PACKAGES, SCRIPTS):
        (tmp_path / package).mkdir(exist_ok=True)
    return tmp_path


def test_scanner_sees_lazy_relative_and_script_imports(tmp_path):
    root = _tree(tmp_path, {
        "ccdiff/__init__.py": "",
        "ccdiff/a.py": "def f():\n    from .b import _hidden\n",
        "ccdiff/b.py": "from ccdiff import a\nX = a._private\n",
        "ccdiff/sub/__init__.py": "from .. import c\n",
        "ccdiff/c.py": "import ccdiff.sub.d as d\n",
        "ccdiff/sub/d.py": "from . import e\n",
        "ccdiff/sub/e.py": "import json\nfrom ccdiff.c import Public\nimport ccdiff.sub.d\nY = ccdiff.sub.d._deep\n"
                           "Z = ccdiff.c.Public._method\n",
        "bench/m.py": "from n import _shared\nimport bisect\n",
        "bench/n.py": "def g():\n    import m\n",
    })
    modules, arrows, private = scan(root)
    edges = graph(arrows)
    assert components(modules, edges) == [["bench.m", "bench.n"], ["ccdiff.a", "ccdiff.b"],
                                          ["ccdiff.c", "ccdiff.sub.d", "ccdiff.sub.e"]]
    assert shortest_cycle(["ccdiff.a", "ccdiff.b"], edges) == ["ccdiff.a", "ccdiff.b", "ccdiff.a"]
    assert sorted((p.source, p.target, p.name) for p in private) == [
        ("bench.m", "bench.n", "_shared"), ("ccdiff.a", "ccdiff.b", "_hidden"),
        ("ccdiff.b", "ccdiff.a", "_private"), ("ccdiff.sub.e", "ccdiff.sub.d", "_deep")]


if __name__ == "__main__":
    modules, arrows, private = scan()
    edges = graph(arrows)
    circles = components(modules, edges)
    print(f"{len(modules)} modules, {len({(a.source, a.target) for a in arrows})} arrows")
    print(f"{len(circles)} import circles:")
    for c in circles:
        allowed = " [allowed: fuzzing]" if frozenset(c) in ALLOWED_CYCLES else ""
        print("  " + describe_cycle(c, edges, arrows) + allowed)
    uses = sorted({(p.source, p.target, p.name, p.line) for p in private})
    print(f"{len(uses)} private names used across modules "
          f"({len({(s, t, n) for s, t, n, _ in uses})} distinct source/target/name):")
    for s, t, n, line in uses:
        print(f"  {s}:{line} uses {t}.{n}" + (" [allowed]" if (s, t, n) in ALLOWED_PRIVATE else ""))
    refused = [c for c in circles if frozenset(c) not in ALLOWED_CYCLES] + \
        [u for u in uses if u[:3] not in ALLOWED_PRIVATE]
    sys.exit(1 if refused else 0)

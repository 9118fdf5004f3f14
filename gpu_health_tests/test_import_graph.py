"""The package's import graph has no cycle.

Rule: every import inside ``gpu_health`` — at module level and inside
functions alike — is an edge of one directed graph, and no strongly connected
component of that graph holds more than one module. A cycle hidden inside a
function body is still a cycle: it means two modules each need the other, so
neither can be read, tested or moved alone, and the order they are imported in
decides whether the process starts at all.

Edges name what the importing code depends on: ``from gpu_health.x import y``
is an edge to ``gpu_health.x.y`` when that is a submodule, else to
``gpu_health.x`` (its ``__init__``); ``import a.b.c`` is an edge to ``a.b.c``.
Package ``__init__`` modules are nodes with their own edges, so an
``__init__`` that imports a module which imports the package back (the old
``metrics`` <-> ``storage.schema`` registration) is a cycle. The parent
packages Python runs on the way to ``a.b.c`` are not edges: a package
``__init__`` that re-exports its own submodules is a table of contents, not a
mutual dependency, unless a submodule imports a name from it — which is an
explicit edge and is counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gpu_health

ROOT = Path(gpu_health.__file__).resolve().parent
PACKAGE = "gpu_health"

# Edges OUT of these modules are left out of the graph, and only those.
# ``gpu_health.metrics.pipeline`` reads the warehouse and calls into
# ``diagnosis`` (which imports ``metrics``): it is being moved into its own
# package between ``metrics``/``diagnosis`` and ``defs`` (issue #14, item 1).
# Once it has moved this set must be emptied — nothing else may be added.
ALLOWED_EDGES_FROM: frozenset[str] = frozenset()

# Cycles found in files the branch that added this test could not edit (another change owned them at the
# time). Each entry must still be a cycle — test_known_cycles_are_still_cycles fails once it is fixed, so the
# entry is removed with the fix — and no new cycle may be added here.
# defs.common (asset factory) needs defs.resources (WarehouseResource, STORED_BY_STEP) and defs.resources needs
# defs.common (transient_retry): moving the retry policy into a module of its own below both breaks it.
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


def module_names(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package, by dotted name (``__init__`` is its package)."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = [package, *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def _deepest(name: str, modules: dict[str, Path]) -> set[str]:
    """The deepest module of the package that ``name`` names (empty if none)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in modules:
            return {".".join(parts[:i])}
    return set()


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``module`` imports anywhere in its body."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= _deepest(alias.name, modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _resolve_relative(module, is_package, node.level, node.module)
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found |= {sub} if sub in modules else _deepest(base, modules)
    found.discard(module)
    return found


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    modules = module_names() if modules is None else modules
    return {
        name: set() if name in ALLOWED_EDGES_FROM else imports_of(name, path, modules)
        for name, path in modules.items()
    }


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    return sorted(c for c in strongly_connected(graph) if len(c) > 1)


def _describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    edges = [f"  {a} -> {b}" for a in component for b in sorted(graph[a] & members)]
    return "cycle among " + ", ".join(component) + ":\n" + "\n".join(edges)


# --- the detector itself ---------------------------------------------------


def test_detector_finds_a_two_module_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from ..a import f\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    mods = module_names(pkg, "pkg")
    graph = {n: imports_of(n, p, mods) for n, p in mods.items()}
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b"]]


def test_detector_counts_a_package_init(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import x\n")
    (pkg / "a.py").write_text("import pkg\nx = 1\n")
    mods = module_names(pkg, "pkg")
    graph = {n: imports_of(n, p, mods) for n, p in mods.items()}
    assert cycles(graph) == [["pkg", "pkg.a"]]


def test_detector_allows_an_init_that_lists_its_submodules(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg import a, common\n")
    (pkg / "common.py").write_text("X = 1\n")
    (pkg / "a.py").write_text("from pkg.common import X\n")
    mods = module_names(pkg, "pkg")
    graph = {n: imports_of(n, p, mods) for n, p in mods.items()}
    assert graph["pkg"] == {"pkg.a", "pkg.common"}
    assert cycles(graph) == []


# --- the package -------------------------------------------------------------


def test_allow_list_names_real_modules():
    stale = ALLOWED_EDGES_FROM - module_names().keys()
    assert not stale, f"ALLOWED_EDGES_FROM names modules that no longer exist (empty it): {sorted(stale)}"


def test_known_cycles_are_still_cycles():
    found = {frozenset(c) for c in cycles(import_graph())}
    fixed = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not fixed, f"fixed cycles still listed in KNOWN_CYCLES (remove them): {fixed}"


def test_no_import_cycle():
    graph = import_graph()
    found = [c for c in cycles(graph) if frozenset(c) not in KNOWN_CYCLES]
    assert not found, "import cycles:\n" + "\n".join(_describe(c, graph) for c in found)

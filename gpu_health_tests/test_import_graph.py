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

The same graph holds the floors of the design's layout.md: every
top-level part of the package has a floor (:data:`FLOORS`), a module imports
only its own floor and the floors below, and each "Never" rule of the layout
is a test of its own. A rule's violations are edges (importer, imported), and
none is allowed.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

import gpu_health

ROOT = Path(gpu_health.__file__).resolve().parent
PACKAGE = "gpu_health"

# Edges OUT of these modules are left out of the graph, and only those. Empty: a module that needs an upward
# import moves to the floor it belongs on instead of being listed here.
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


# --- the floors (the design's layout.md) -----------------------------------------------------------------------
# Every top-level module or package of gpu_health -> its floor; a part missing here fails
# test_every_module_has_a_floor, so a new one is placed on purpose. Floor 1 holds facts and small helpers.
FLOORS: dict[str, int] = {
    "cli": 7, "report": 7, "traces": 7,                      # the command; importers of public traces
    "definitions": 6, "defs": 6, "evaluation": 6,            # Dagster wiring; scoring, the static-rules peer
    "steps": 5, "kpi_export": 5, "delivery": 5,              # the step graph and runners; Prometheus, Alertmanager
    "diagnosis": 4, "storage": 4,
    "metrics": 3, "sources": 3, "sim": 3,
    "catalog": 2, "contracts": 2,
    "__init__": 1,                                           # the package itself: pandas' Copy-on-Write switch
    "constants": 1,                                          # the partition, DCGM / device facts, cause families
    "partitions": 6, "settings": 6,                          # Dagster's partitions definitions; settings read for them
    "codes": 1, "timestamps": 1, "arrow_text": 1,            # column helpers
    "landing": 3,                                            # the landing zone's layout (from the catalogue), its writer
    "serving_families": 1,                                   # the serving service's metric names
    "faults": 1,                                             # which errors are transient
    "polling": 1,                                            # the bounded wait for a server
    "allocator": 1,                                          # the C allocator of a range-running process
    "dev": 7,                                                # what make dev starts besides dagster dev
}
# Dagster's own packages, and the libraries that hold a connection (a database, HTTP, a socket).
DAGSTER = frozenset({"dagster", "dagster_pandera"})
CONNECTIONS = frozenset({"sqlalchemy", "sqlite3", "psycopg", "psycopg2", "duckdb", "requests", "urllib", "http",
                         "socket"})
# The parts the Dagster wiring may live in; the parts that must run without Dagster (the logic and the bulk path).
WIRING = frozenset({"defs", "definitions", "partitions", "cli"})
WITHOUT_DAGSTER = frozenset({"metrics", "diagnosis", "contracts", "sim", "steps"})



def part(module: str) -> str:
    """The top-level part of the package a module belongs to (``__init__`` for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def third_party_imports(path: Path) -> set[str]:
    """The top-level names of the modules outside the package that a file imports anywhere in its body."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found - {PACKAGE}


@dataclass(frozen=True)
class House:
    graph: dict[str, set[str]]          # module -> the package modules it imports
    external: dict[str, set[str]]       # module -> the outside modules it imports (top-level names)

    def reach(self, module: str) -> set[str]:
        """Every package module ``module`` loads, through any chain of imports (itself excluded)."""
        seen: set[str] = set()
        todo = [module]
        while todo:
            for nxt in self.graph.get(todo.pop(), ()):
                if nxt not in seen and nxt != module:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    def edges(self, src: Callable[[str], bool], dst: Callable[[str], bool]) -> set[tuple[str, str]]:
        return {(a, b) for a, bs in self.graph.items() if src(a) for b in bs if dst(b)}


@cache
def the_house() -> House:
    modules = module_names()
    return House(import_graph(modules), {name: third_party_imports(path) for name, path in modules.items()})


def _floor(module: str) -> int:
    """A module's floor; a part missing from FLOORS counts as floor 1 here (test_every_module_has_a_floor names it)."""
    return FLOORS.get(part(module), 1)


def _in(*parts: str) -> Callable[[str], bool]:
    return lambda module: part(module) in parts


# Each rule: the house -> its violations. The names are the tests'.
def floors(h: House) -> set[tuple[str, str]]:
    """A floor imports only its own floor and the floors below."""
    return {(a, b) for a, b in h.edges(lambda m: True, lambda m: True) if _floor(b) > _floor(a)}


def floor_one_imports_only_floor_one(h: House) -> set[tuple[str, str]]:
    """Floor 1 imports nothing of the package but floor 1: its facts may build on each other (the partition key
    format on the partition width), nothing else."""
    return h.edges(lambda m: _floor(m) == 1, lambda m: _floor(m) != 1)


def logic_runs_without_dagster(h: House) -> set[tuple[str, str]]:
    """metrics/, diagnosis/, contracts/, sim/, steps/ load no Dagster, neither themselves nor through a module they
    import: (module, the package module that imports Dagster, or ``dagster`` itself)."""
    out = set()
    for m in filter(lambda m: part(m) in WITHOUT_DAGSTER, h.graph):
        out |= {(m, d) for d in sorted(DAGSTER & h.external[m])}
        out |= {(m, x) for x in h.reach(m) if DAGSTER & h.external[x]}
    return out


def dagster_only_in_the_wiring(h: House) -> set[tuple[str, str]]:
    """Only defs/, definitions and the CLI import Dagster."""
    return {(m, d) for m, names in h.external.items() if part(m) not in WIRING for d in DAGSTER & names}


def logic_takes_frames(h: House) -> set[tuple[str, str]]:
    """metrics/ and diagnosis/ take frames: they import no storage/ module and no connection library."""
    logic = _in("metrics", "diagnosis")
    return h.edges(logic, _in("storage")) | {(m, c) for m in filter(logic, h.external) for c in CONNECTIONS & h.external[m]}


def tables_know_no_computation(h: House) -> set[tuple[str, str]]:
    """storage/ and catalog.py import no metric or detector code."""
    return h.edges(_in("storage", "catalog"), _in("metrics", "diagnosis"))


def logic_imports_no_adapter(h: House) -> set[tuple[str, str]]:
    """metrics/ and diagnosis/ import nothing of sources/: facts they share with adapters live on floor 1."""
    return h.edges(_in("metrics", "diagnosis"), _in("sources"))


def metrics_import_no_diagnosis(h: House) -> set[tuple[str, str]]:
    """metrics/ does not import diagnosis/: the steps run both."""
    return h.edges(_in("metrics"), _in("diagnosis"))


def sim_runs_no_tested_code(h: House) -> set[tuple[str, str]]:
    """sim/ loads no metrics/ or diagnosis/ module, directly or through another: it never runs the code it tests."""
    tested = _in("metrics", "diagnosis")
    return {(m, x) for m in filter(_in("sim"), h.graph) for x in h.reach(m) if tested(x)}


def nothing_drives_the_cli(h: House) -> set[tuple[str, str]]:
    """traces/ and evaluation/ call steps or write landing zones: they load no CLI, directly or through another."""
    return {(m, x) for m in filter(_in("traces", "evaluation"), h.graph) for x in h.reach(m) if part(x) == "cli"}


def nothing_loads_the_code_location(h: House) -> set[tuple[str, str]]:
    """The code location (definitions.py) builds the Definitions from the environment when imported: only Dagster's
    workspace loads it; code that needs the Definitions builds them (defs.build)."""
    return {(m, x) for m, targets in h.graph.items() for x in targets if x == f"{PACKAGE}.definitions"}


RULES = {rule.__name__: rule for rule in (
    floors, floor_one_imports_only_floor_one, logic_runs_without_dagster, dagster_only_in_the_wiring,
    logic_takes_frames, tables_know_no_computation, logic_imports_no_adapter, metrics_import_no_diagnosis,
    sim_runs_no_tested_code, nothing_drives_the_cli, nothing_loads_the_code_location)}


def _check(rule) -> None:
    found = rule(the_house())
    assert not found, f"{rule.__doc__}\n" + "\n".join(f"  {a} -> {b}" for a, b in sorted(found))


# --- the rules themselves ---------------------------------------------------


@pytest.mark.parametrize("rule, graph, external, expected", [
    (floors, {"gpu_health.metrics.a": {"gpu_health.steps.b"}, "gpu_health.steps.b": {"gpu_health.metrics.a"}}, {},
     {("gpu_health.metrics.a", "gpu_health.steps.b")}),
    (floor_one_imports_only_floor_one, {"gpu_health.codes": {"gpu_health.constants", "gpu_health.contracts"}}, {},
     {("gpu_health.codes", "gpu_health.contracts")}),
    (logic_runs_without_dagster, {"gpu_health.steps.a": {"gpu_health.codes"}, "gpu_health.codes": set(),
                                  "gpu_health.sim.b": set()},
     {"gpu_health.codes": {"dagster"}, "gpu_health.sim.b": {"dagster_pandera"}},
     {("gpu_health.steps.a", "gpu_health.codes"), ("gpu_health.sim.b", "dagster_pandera")}),
    (dagster_only_in_the_wiring, {}, {"gpu_health.defs.a": {"dagster"}, "gpu_health.report": {"dagster", "yaml"}},
     {("gpu_health.report", "dagster")}),
    (logic_takes_frames, {"gpu_health.diagnosis.a": {"gpu_health.storage.warehouse"}},
     {"gpu_health.metrics.b": {"pandas", "sqlalchemy"}},
     {("gpu_health.diagnosis.a", "gpu_health.storage.warehouse"), ("gpu_health.metrics.b", "sqlalchemy")}),
    (tables_know_no_computation, {"gpu_health.catalog": {"gpu_health.metrics.kpis", "gpu_health.contracts"}}, {},
     {("gpu_health.catalog", "gpu_health.metrics.kpis")}),
    (logic_imports_no_adapter, {"gpu_health.metrics.a": {"gpu_health.sources.slurm", "gpu_health.constants"}}, {},
     {("gpu_health.metrics.a", "gpu_health.sources.slurm")}),
    (metrics_import_no_diagnosis, {"gpu_health.metrics.a": {"gpu_health.diagnosis.detect"}}, {},
     {("gpu_health.metrics.a", "gpu_health.diagnosis.detect")}),
    (sim_runs_no_tested_code, {"gpu_health.sim.a": {"gpu_health.contracts"},
                               "gpu_health.contracts": {"gpu_health.metrics.models"}}, {},
     {("gpu_health.sim.a", "gpu_health.metrics.models")}),
    (nothing_drives_the_cli, {"gpu_health.traces.a": {"gpu_health.report"}, "gpu_health.report": {"gpu_health.cli"}},
     {}, {("gpu_health.traces.a", "gpu_health.cli")}),
    (nothing_loads_the_code_location, {"gpu_health.defs.a": {"gpu_health.definitions", "gpu_health.defs.build"}}, {},
     {("gpu_health.defs.a", "gpu_health.definitions")}),
], ids=lambda v: v.__name__ if callable(v) else "")
def test_rule_finds_its_violation(rule, graph, external, expected):
    graph = {**{m: set() for targets in graph.values() for m in targets}, **graph}
    house = House(graph, {m: external.get(m, set()) for m in {*graph, *external}})
    assert rule(house) == expected


# --- the package's floors -------------------------------------------------------


def test_every_module_has_a_floor():
    parts = {part(m) for m in module_names()}
    assert not parts - FLOORS.keys(), f"parts of the package with no floor in FLOORS: {sorted(parts - FLOORS.keys())}"
    assert not FLOORS.keys() - parts, f"FLOORS names parts that no longer exist: {sorted(FLOORS.keys() - parts)}"


def test_no_module_imports_a_higher_floor():
    _check(floors)


def test_floor_one_imports_only_floor_one():
    _check(floor_one_imports_only_floor_one)


def test_logic_and_bulk_path_run_without_dagster():
    _check(logic_runs_without_dagster)


def test_dagster_only_in_the_wiring():
    _check(dagster_only_in_the_wiring)


def test_metrics_and_diagnosis_take_frames_not_a_warehouse():
    _check(logic_takes_frames)


def test_storage_and_catalog_import_no_metric_or_detector():
    _check(tables_know_no_computation)


def test_metrics_and_diagnosis_import_no_adapter():
    _check(logic_imports_no_adapter)


def test_metrics_do_not_import_diagnosis():
    _check(metrics_import_no_diagnosis)


def test_simulator_runs_no_code_it_tests():
    _check(sim_runs_no_tested_code)


def test_traces_and_evaluation_do_not_drive_the_cli():
    _check(nothing_drives_the_cli)


def test_nothing_loads_the_code_location():
    _check(nothing_loads_the_code_location)

"""The table catalogue is the one list of tables: the schema, the source assets and the docs derive from it."""

import re
from pathlib import Path

import pytest

from gpu_health import catalog as C
from gpu_health.contracts.models import CONTRACTS
from gpu_health.storage import schema

REPO = Path(__file__).resolve().parents[1]
REGENERATE = ".venv/bin/python -m gpu_health.catalog docs/tables.md"


def test_every_table_is_declared_once_with_known_values():
    assert len(C.CATALOG) == len(set(C.CATALOG))
    assert set(C.SOURCES) == set(CONTRACTS)
    for t in C.CATALOG.values():
        assert t.cadence in C.CADENCES and t.storage in C.STORAGES and t.group in C.GROUPS and t.owner in C.OWNERS
        assert t.grain.startswith("one row per"), t.name
        if t.model is not None and t.partition_column is not None:
            assert t.partition_column in t.model.to_schema().columns, t.name


def test_a_bad_entry_is_refused():
    with pytest.raises(ValueError, match="cadence"):
        C.Table("x", "derived", None, None, "hourly", "sql", "kpis", "infra", "one row per x", "x")
    with pytest.raises(ValueError, match="no pandera model"):
        C.Table("x", "derived", None, None, "daily", "sql", "kpis", "infra", "one row per x", "x")


def test_the_schema_is_the_catalogue():
    assert set(schema.metadata.tables) == set(C.CATALOG)
    assert schema.COLUMNAR_TABLES == C.COLUMNAR_TABLES
    assert {t.name for t in schema.sql_tables()} == {n for n, t in C.CATALOG.items() if t.storage == "sql"}
    for name, t in C.CATALOG.items():
        assert schema.partition_column(name) == t.partition_column
        if t.partition_column:
            assert t.partition_column in schema.metadata.tables[name].c, name
        if t.model is not None:
            assert list(schema.metadata.tables[name].c.keys()) == list(t.model.to_schema().columns), name


def test_tables_that_grow_with_the_fleet_are_columnar_and_what_finance_joins_is_sql():
    # minute-grain rows grow with fleet x minutes: they are the telemetry store's, never SQL rows
    assert {n for n, t in C.CATALOG.items() if t.cadence == "minute"} <= C.COLUMNAR_TABLES
    # and so do the event sources, the loss tree's per-node facts, the inventory and the per-partition model state
    assert C.COLUMNAR_TABLES - {n for n, t in C.CATALOG.items() if t.cadence == "minute"} == {
        "scheduler_events", "job_metadata", "goodput_leaves", "goodput_node_states", "node_inventory",
        "kpi_baselines", "step_time_baselines", "workload_step_stats"}
    finance = {"kpi_values", "goodput_states", "cluster_goodput", "cluster_goodput_daily", "goodput_decomposition",
               "wasted_spend", "alerts", "job_failures", "cost_capacity", "capacity_demand_daily",
               "capacity_forecast", "capacity_headroom", "maintenance_windows", "change_events"}
    assert all(C.table(n).storage == "sql" for n in finance)


def test_docs_table_list_is_generated_from_the_catalogue():
    path = REPO / "docs" / "tables.md"
    if path.read_text() != C.markdown():
        pytest.fail(f"docs/tables.md has drifted from gpu_health/catalog.py. Regenerate it with\n    {REGENERATE}")


def test_readme_asset_tables_name_the_catalogue():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Asset graph"):readme.index("Jobs: `five_minute_job`")]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    named = {n for line in rows for n in re.findall(r"`([a-z_]+)`", line.split("|")[2])}
    assert named == {n for n, t in C.CATALOG.items() if t.kind != "quality"}
    for line in rows:  # the source rows: group and owner as the catalogue says
        cells = [c.strip() for c in line.strip("|").split("|")]
        name = cells[1].strip("`")
        if name in C.SOURCES:
            assert cells[0] == C.CATALOG[name].group and cells[-1] == C.CATALOG[name].owner.replace("_", "-"), line


def test_source_assets_take_owner_and_grain_from_the_catalogue():
    from gpu_health.defs.telemetry import assets

    assert assets.OWNER == {n: C.CATALOG[n].owner for n in C.SOURCES}
    assert assets.GRAIN == {n: C.CATALOG[n].grain for n in C.SOURCES}


def test_every_asset_matches_its_catalogue_entry():
    from gpu_health.defs.common import OWNER_TAGS as OWNERS
    from gpu_health.definitions import defs

    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string(): k for k in graph.get_all_asset_keys()}
    assert set(keys) == {n for n, t in C.CATALOG.items() if t.kind != "quality"}
    for name, key in keys.items():
        node, t = graph.get(key), C.CATALOG[name]
        assert node.group_name == t.group, name
        assert list(node.owners) == OWNERS[t.owner], name
        assert (node.metadata or {}).get("grain") == t.grain, name


# --- every list of sources is computed from the entries -------------------------------------------------------------
def _sources():
    return [C.CATALOG[n] for n in C.SOURCES]


def test_the_lists_of_sources_derive_from_the_catalogue():
    from gpu_health import landing
    from gpu_health.contracts import models as M
    from gpu_health.sources.serving_metrics import SERVING_TABLES

    src = _sources()
    assert M.CONTRACTS == {t.name: t.model for t in src}
    assert M.PARTITION_COLUMN == {t.name: t.partition_column for t in src}
    assert M.FIVE_MINUTE_SOURCES == [t.name for t in src if t.landing == C.FIVE_MINUTE and t.optional is None]
    assert M.OPTIONAL_SOURCES == [t.name for t in src if t.optional is not None]
    for family, names in (("serving", M.SERVING_SOURCES), ("facility", M.FACILITY_SOURCES),
                          ("platform", M.PLATFORM_SOURCES)):
        assert names == [t.name for t in src if t.optional == family] and names, family
    assert SERVING_TABLES == frozenset(M.SERVING_SOURCES)
    assert M.OPTIONAL_COLUMNS == {t.name: t.optional_columns for t in src if t.optional_columns}
    # a minute-grain table is one whose contract floors ts to the minute, and the other way round
    assert M.MINUTE_GRAIN_SOURCES == {t.name for t in src if t.cadence == C.EVERY_MINUTE} == {
        t.name for t in src if issubclass(t.model, M._MinuteGrain)}
    assert landing.DAILY_SOURCES == {t.name for t in src if t.landing == C.DAILY}
    assert landing.WHOLE_SOURCES == {t.name for t in src if t.landing == C.CALENDAR}
    for t in src:
        assert set(t.optional_columns) <= set(t.model.to_schema().columns), t.name
        # the grain a user reads says the table is optional exactly when the entry does
        assert ("(optional:" in t.grain) == (t.optional is not None), t.name


def test_steps_and_catalogue_spell_cadences_alike():
    from gpu_health.steps import graph
    from gpu_health.steps.registry import step

    assert (graph.FIVE_MINUTE, graph.DAILY, graph.CALENDAR) == (C.FIVE_MINUTE, C.DAILY, C.CALENDAR)
    for t in _sources():  # a source's step runs on the partitions its files land in
        assert step(t.name).cadence == t.landing, t.name


def _families() -> dict[str, set[str]]:
    """Every set of 2+ source tables the catalogue defines: by one fact of the entries, and the named lists."""
    src = _sources()
    out: dict[str, set[str]] = {"every source": {t.name for t in src},
                                "required 5-minute": {t.name for t in src if t.landing == C.FIVE_MINUTE and not t.optional},
                                "optional": {t.name for t in src if t.optional},
                                "with optional columns": {t.name for t in src if t.optional_columns}}
    for fact in ("cadence", "storage", "owner", "landing", "optional"):
        for t in src:
            out.setdefault(f"{fact}={getattr(t, fact)}", set()).add(t.name)
    return {k: v for k, v in out.items() if len(v) >= 2}


def restated_families(root: Path) -> list[str]:
    """Literal tuples, lists, sets and dict keys, in the package's modules, that spell out a family of sources."""
    import ast

    families = {frozenset(v): k for k, v in _families().items()}
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                elts = node.elts
            elif isinstance(node, ast.Dict):
                elts = [k for k in node.keys if k is not None]
            else:
                continue
            names = frozenset(e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
            if len(elts) >= 2 and len(names) == len(elts) and names in families:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {families[names]} {sorted(names)}")
    return found


def test_no_module_writes_out_a_list_of_sources_again():
    """A set of sources named in a literal is a second list that a new source table does not update: derive it
    from the entries (contracts.models, landing, the adapters import the derived lists). Lists of the tables one
    step or adapter reads are not families and are not flagged."""
    found = restated_families(REPO / "gpu_health")
    assert not found, "source families written out instead of derived from the catalogue:\n" + "\n".join(found)


def test_the_scan_finds_a_written_out_family(tmp_path):
    pkg = tmp_path / "gpu_health"
    pkg.mkdir()
    (pkg / "m.py").write_text('PLATFORM = ("kube_nodes", "kube_pods")\nREAD = ["gpu_telemetry", "node_telemetry"]\n')
    assert [f.split(": ")[1] for f in restated_families(pkg)] == ["optional=platform ['kube_nodes', 'kube_pods']"]


def test_every_asset_is_described_and_partitioned_as_its_entry_says():
    from gpu_health.definitions import defs
    from gpu_health.partitions import daily_partitions, five_minute_partitions

    cron = {C.FIVE_MINUTE: five_minute_partitions().cron_schedule, C.DAILY: daily_partitions().cron_schedule,
            C.CALENDAR: None}
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        name, node = key.to_user_string(), graph.get(key)
        t = C.CATALOG[name]
        # one description per table: the catalogue's (docs/tables.md shows the same text)
        assert node.description.startswith(t.description), name
        # a source is partitioned as its files land, a derived table as its rows' cadence
        assert (node.partitions_def.cron_schedule if node.partitions_def else None) == cron[t.landing or t.cadence], name

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

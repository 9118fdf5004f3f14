"""The code location: it loads, every asset is described the same way, nothing appears unnoticed.

The asset-key snapshot below is deliberate: adding or removing an asset must
update it in the same commit.
"""

import importlib
import inspect
from pathlib import Path

import dagster as dg
import pytest

import gpu_health.metrics  # noqa: F401  (registers the derived tables)
from gpu_health.contracts import CONTRACTS, FIVE_MINUTE_SOURCES
from gpu_health.definitions import defs
from gpu_health.partitions import daily_partitions, five_minute_partitions
from gpu_health.storage.schema import metadata as warehouse_schema

DEFS_DIR = Path(importlib.import_module("gpu_health.defs").__file__).parent
GROUPS = {"status", "telemetry", "kpis", "baselines", "diagnosis", "alerting", "finance"}  # style.md: one folder per group
OWNERS = {"team:infra", "team:ml-platform", "team:finance"}

ASSET_KEYS = [
    "alerts",
    "capacity_demand_daily",
    "capacity_forecast",
    "capacity_headroom",
    "change_events",
    "cluster_goodput",
    "cluster_goodput_daily",
    "cluster_status",
    "cost_capacity",
    "goodput_decomposition",
    "goodput_leaves",
    "goodput_node_states",
    "goodput_states",
    "gpu_telemetry",
    "inference_latency_buckets",
    "inference_requests",
    "job_failures",
    "job_metadata",
    "job_runtime_metrics",
    "facility_telemetry",
    "kpi_baselines",
    "kpi_values",
    "kube_nodes",
    "kube_pods",
    "maintenance_windows",
    "network_telemetry",
    "node_inventory",
    "node_telemetry",
    "scheduler_events",
    "rack_facility",
    "serving_slis",
    "slo_error_budgets",
    "slo_version_events",
    "step_time_baselines",
    "wasted_spend",
    "workload_step_stats",
]


@pytest.fixture(scope="module")
def graph():
    return defs.resolve_asset_graph()


def all_keys(graph) -> list[dg.AssetKey]:
    return sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string())


def test_the_code_location_loads():
    dg.Definitions.validate_loadable(defs)
    assert {j.name for j in defs.resolve_all_job_defs()} >= {"five_minute_job", "daily_job", "calendar_job"}


def test_asset_keys_snapshot(graph):
    keys = [k.to_user_string() for k in all_keys(graph)]
    assert keys == sorted(ASSET_KEYS), (
        "the asset graph changed: update ASSET_KEYS in gpu_health_tests/test_definitions.py in the same commit "
        f"(added: {sorted(set(keys) - set(ASSET_KEYS))}, removed: {sorted(set(ASSET_KEYS) - set(keys))})")


def test_every_asset_states_group_owners_kinds_and_grain(graph):
    for key in all_keys(graph):
        node = graph.get(key)
        name = key.to_user_string()
        assert node.group_name in GROUPS, f"{name}: group {node.group_name!r} is not a defs/ folder"
        assert node.owners and set(node.owners) <= OWNERS, f"{name}: owners {node.owners}"
        assert node.kinds, f"{name}: no kinds"
        grain = node.metadata.get("grain")
        assert isinstance(grain, str) and grain.startswith("one row per"), f"{name}: metadata 'grain' = {grain!r}"
        assert grain in (node.description or ""), f"{name}: the description does not state its grain ({grain!r})"


def test_every_asset_publishes_the_column_schema_of_its_table(graph):
    for key in all_keys(graph):
        name = key.to_user_string()
        schema = graph.get(key).metadata.get("dagster/column_schema")
        assert isinstance(schema, dg.TableSchema), f"{name}: no dagster/column_schema"
        # asset name = table name: the schema shown in the UI is the table's, column for column
        assert name in warehouse_schema.tables, f"{name}: no warehouse table of that name"
        assert [c.name for c in schema.columns] == [c.name for c in warehouse_schema.tables[name].columns], name
        assert all(c.description for c in schema.columns), f"{name}: a column without description"


def test_each_source_asset_has_exactly_one_blocking_contract_check():
    by_key = {k.to_user_string(): ad for ad in defs.assets for k in ad.keys}
    for table in CONTRACTS:
        specs = [s for s in by_key[table].check_specs if s.asset_key == dg.AssetKey(table)]
        assert [s.name for s in specs] == [f"{table}_contract"], table
        assert specs[0].blocking, f"{table}: its contract check must block downstream"


def test_group_names_are_the_folders_under_defs():
    folders = {p.name for p in DEFS_DIR.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == GROUPS
    # each folder's assets carry its name: build them the way definitions.py does
    partitions = {"five_minute": five_minute_partitions(), "daily": daily_partitions()}
    built: set[str] = set()
    for folder in sorted(folders):
        if not (DEFS_DIR / folder / "assets.py").exists():
            continue
        module = importlib.import_module(f"gpu_health.defs.{folder}.assets")
        builders = [f for n, f in vars(module).items() if n.startswith("build_") and n.endswith("_assets")
                    and inspect.isfunction(f) and f.__module__ == module.__name__]
        assert len(builders) == 1, f"defs/{folder}/assets.py: expected one build_*_assets function"
        params = list(inspect.signature(builders[0]).parameters)
        assert set(params) <= set(partitions), f"{builders[0].__name__}{params}: unknown parameters"
        for assets_def in builders[0](**{p: partitions[p] for p in params}):
            for key in assets_def.keys:
                assert assets_def.group_names_by_key[key] == folder, f"{key.to_user_string()} is built in defs/{folder}/"
                built.add(key.to_user_string())
    assert built == set(ASSET_KEYS), "every asset is built by the assets.py of its group folder"


def test_jobs_cover_the_graph_by_partitioning_and_run_in_process(graph):
    five, daily = five_minute_partitions(), daily_partitions()
    by_job = {name: {k.to_user_string() for k in defs.resolve_job_def(name).asset_layer.executable_asset_keys}
              for name in ("five_minute_job", "daily_job", "calendar_job")}
    partitioning = {k.to_user_string(): graph.get(k).partitions_def for k in all_keys(graph)}
    assert by_job["five_minute_job"] == {n for n, p in partitioning.items() if p == five}
    assert by_job["daily_job"] == {n for n, p in partitioning.items() if p == daily}
    assert by_job["calendar_job"] == {n for n, p in partitioning.items() if p is None}
    assert set().union(*by_job.values()) == set(ASSET_KEYS)
    assert by_job["five_minute_job"] >= set(FIVE_MINUTE_SOURCES)
    for name in by_job:
        # the multiprocess executor costs seconds per step (stack-notes.md)
        assert defs.resolve_job_def(name).executor_def.name == "in_process", name


def test_sensor_and_schedules_exist_and_start_running():
    sensor = defs.resolve_sensor_def("five_minute_partition_sensor")
    assert sensor.job_name == "five_minute_job"
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    names = {s.name for s in defs.schedules}
    assert names == {"daily_job_schedule", "calendar_job_schedule"}
    schedules = {n: defs.resolve_schedule_def(n) for n in names}
    assert schedules["daily_job_schedule"].job_name == "daily_job"
    assert schedules["calendar_job_schedule"].job_name == "calendar_job"
    assert all(s.default_status == dg.DefaultScheduleStatus.RUNNING for s in schedules.values())


def test_resources_the_assets_need_are_bound():
    required = set()
    for ad in defs.assets:
        required |= set(ad.required_resource_keys)
    required.discard("io_manager")  # check results only: Dagster's default serves them
    assert required <= set(defs.resources), f"unbound resources: {sorted(required - set(defs.resources))}"
    assert {"warehouse", "warehouse_io_manager", "source"} <= required


def test_the_kinds_say_where_a_table_is_stored(graph):
    """Parquet in the telemetry store or the SQL warehouse, as the catalogue's ``storage`` says."""
    from gpu_health.catalog import CATALOG, COLUMNAR

    for key in all_keys(graph):
        name = key.to_user_string()
        expected = "parquet" if CATALOG[name].storage == COLUMNAR else "sql"
        other = {"parquet", "sql"} - {expected}
        kinds = set(graph.get(key).kinds)
        assert expected in kinds and not kinds & other, f"{name}: kinds {sorted(kinds)}, stored as {expected}"

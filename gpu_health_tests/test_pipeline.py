"""Graph tests: the 5-minute job materialized in-process against a temporary SQLite warehouse.

* one partition of ``five_minute_job`` with the simulator source;
* a single-run range (``dagster/asset_partition_range_start/end``) of the source
  assets writes the same rows as the same partitions run one by one;
* a landing partition with bad rows keeps the good ones, quarantines the bad
  ones with reason and origin file, and fails its contract check with WARN;
* a landing file missing a column is quarantined whole, named in ``source_rejects`` and the check.

``dg.materialize`` ignores the Definitions' resources (stack-notes.md): every
call here passes them explicitly.
"""

import dagster as dg
import pandas as pd
import pytest

from gpu_health.contracts import FIVE_MINUTE_SOURCES, PARTITION_COLUMN
from gpu_health.contracts.validate import validate_frame
from gpu_health.defs.build import build_definitions
from gpu_health.defs.resources import TelemetrySourceResource, WarehouseIOManager, WarehouseResource
from gpu_health.landing import partition_path
from gpu_health.settings import Settings
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window
from gpu_health.storage.schema import metadata
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import LANDING_START, THERMAL_WEEK

FIVE = pd.Timedelta(minutes=5)
FMT = "%Y-%m-%d-%H:%M"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
# a small cluster keeps a dozen partition runs cheap; same shape as the default (2 regions, 2 SKUs)
SMALL_SCENARIO = """\
seed: 11
start: 2026-11-03T00:00:00Z
end: 2026-11-04T00:00:00Z
cluster: {gpus: 120}
incidents:
  - kind: thermal_throttle
    start: 2026-11-03T14:20:00Z
    duration: 30m
    severity: high
    scope: {region: us-east, nodes: 1}
"""


def resources(url: str, **source) -> dict:
    return {"warehouse": WarehouseResource(url=url), "warehouse_io_manager": WarehouseIOManager(url=url),
            "source": TelemetrySourceResource(**source)}


def materialize_sources(url: str, *, partition_key=None, tags=None, **source) -> dg.ExecuteInProcessResult:
    """The seven 5-minute source assets (and their contract checks) of the code location."""
    res = resources(url, **source)
    defs = build_definitions(Settings(), res)
    return dg.materialize(list(defs.assets), selection=[dg.AssetKey(t) for t in FIVE_MINUTE_SOURCES], partition_key=partition_key,
                          tags=tags, resources=res, run_config=QUIET, raise_on_error=False)


def table_rows(url: str, table: str) -> pd.DataFrame:
    """All rows of ``table``, in primary-key order (all columns when it has no key)."""
    frame = Warehouse(url).read_window(table)
    keys = [c.name for c in metadata.tables[table].primary_key.columns] or list(frame.columns)
    return frame.sort_values(keys).reset_index(drop=True)


def stored(url: str, table: str, start=None, end=None, **kw) -> pd.DataFrame:
    """What the database holds (not the process's write-through cache of what the run just wrote)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPU_HEALTH_WAREHOUSE_CACHE", "0")
        return Warehouse(url).read_window(table, start, end, **kw)


def check_evaluations(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


# --- one partition of the deployed job -----------------------------------------------------
def test_one_partition_of_the_five_minute_job_fills_every_source_table(sqlite_url):
    start = pd.Timestamp("2026-11-03T14:10:00Z")
    defs = build_definitions(Settings(), resources(sqlite_url, kind="simulator", scenario=str(THERMAL_WEEK)))
    job = defs.resolve_job_def("five_minute_job")
    result = job.execute_in_process(partition_key=start.strftime(FMT), instance=dg.DagsterInstance.ephemeral(),
                                    run_config=QUIET)
    assert result.success

    wh = Warehouse(sqlite_url)
    assert wh.count("gpu_telemetry") == 1200 * 5  # every GPU of the default cluster, every minute
    assert wh.count("node_telemetry") == 80 * 5
    assert wh.count("network_telemetry") == 640 * 5
    # the others: exactly what the simulator generates for the window, all of it valid
    expected = Window(load_scenario(THERMAL_WEEK), start, start + FIVE).tables()
    for table in FIVE_MINUTE_SOURCES:
        assert wh.count(table) == len(expected[table]), table
        placed = stored(sqlite_url, table, columns=[PARTITION_COLUMN[table]]).iloc[:, 0]
        assert placed.empty or (placed.min() >= start and placed.max() < start + FIVE), table
    assert wh.count("source_rejects") == 0
    checks = check_evaluations(result)
    assert all(checks[f"{t}_contract"].passed for t in FIVE_MINUTE_SOURCES)
    # every asset of the job was materialized, for that partition
    materialized = {(e.asset_key, e.partition) for e in result.get_asset_materialization_events()}
    assert materialized == {(k, start.strftime(FMT)) for k in job.asset_layer.executable_asset_keys}


# --- a range run == partition runs -------------------------------------------------------------
def test_a_single_run_range_writes_what_partition_runs_write(tmp_path):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SMALL_SCENARIO)
    # an hour (12 partitions) across the incident's start; each partition run costs ~1.7 s, so two
    # hours would double the test's cost and cover no other boundary (ranges run in 1-day chunks)
    start, end = pd.Timestamp("2026-11-03T13:50:00Z"), pd.Timestamp("2026-11-03T14:50:00Z")
    range_url, parts_url = f"sqlite:///{tmp_path / 'range.db'}", f"sqlite:///{tmp_path / 'parts.db'}"

    ranged = materialize_sources(range_url, kind="simulator", scenario=str(scenario), tags={
        "dagster/asset_partition_range_start": start.strftime(FMT),
        "dagster/asset_partition_range_end": (end - FIVE).strftime(FMT)})
    assert ranged.success
    # one run, one check evaluation per source for the whole range
    assert len(ranged.get_asset_check_evaluations()) == len(FIVE_MINUTE_SOURCES)

    for p in pd.date_range(start, end, freq="5min", inclusive="left"):
        assert materialize_sources(parts_url, partition_key=p.strftime(FMT), kind="simulator",
                                   scenario=str(scenario)).success

    for table in [*FIVE_MINUTE_SOURCES, "source_rejects"]:
        by_range, by_parts = table_rows(range_url, table), table_rows(parts_url, table)
        pd.testing.assert_frame_equal(by_range, by_parts, obj=table)
    gpus = load_scenario(str(scenario)).cluster.spec.total_gpus  # 120 asked, rounded to whole nodes
    assert Warehouse(range_url).count("gpu_telemetry") == gpus * 60


# --- bad landing data ----------------------------------------------------------------------
@pytest.fixture
def bad_rows_landing(copy_landing):
    """A copy of the landing zone whose 14:05 partition has a few bad rows in two files."""
    root = copy_landing()
    start = LANDING_START + FIVE
    gpu_path, net_path = partition_path(root, "gpu_telemetry", start), partition_path(root, "network_telemetry", start)
    gpu = pd.read_parquet(gpu_path)
    gpu.loc[gpu.index[[3, 500, 4000]], "gpu_util_pct"] = 150.0
    gpu.to_parquet(gpu_path, index=False)
    net = pd.read_parquet(net_path)
    net.loc[net.index[[7, 8]], "retransmits"] = -4
    net.to_parquet(net_path, index=False)
    return root, start, {"gpu_telemetry": (gpu_path, gpu, [3, 500, 4000]), "network_telemetry": (net_path, net, [7, 8])}


def test_bad_rows_are_quarantined_good_rows_kept_and_the_check_warns(bad_rows_landing, sqlite_url):
    root, start, broken = bad_rows_landing
    result = materialize_sources(sqlite_url, partition_key=start.strftime(FMT), kind="landing", landing_dir=str(root))
    assert result.success  # a few bad rows never fail the run

    wh = Warehouse(sqlite_url)
    checks = check_evaluations(result)
    for table, (path, frame, bad) in broken.items():
        kept = stored(sqlite_url, table, start, start + FIVE)
        assert len(kept) == len(frame) - len(bad), table
        good = validate_frame(frame.drop(index=bad), table, start=start, end=start + FIVE).valid
        key = [c.name for c in metadata.tables[table].primary_key.columns]
        pd.testing.assert_frame_equal(
            validate_frame(kept, table, start=start, end=start + FIVE).valid.sort_values(key).reset_index(drop=True),
            good.sort_values(key).reset_index(drop=True), obj=table)

        rejects = stored(sqlite_url, "source_rejects", start, start + FIVE, where={"source": table})
        assert sorted(rejects["row_index"].unique()) == bad, table
        assert set(rejects["origin"]) == {str(path)}
        assert rejects["reason"].str.len().gt(0).all()
        assert set(rejects["column"]) == {"gpu_util_pct" if table == "gpu_telemetry" else "retransmits"}

        check = checks[f"{table}_contract"]
        assert not check.passed
        assert check.severity == dg.AssetCheckSeverity.WARN  # < 5 % of the rows
        assert check.metadata["rejected_rows"].value == len(bad)
        assert check.metadata["accepted_rows"].value == len(frame) - len(bad)
    assert checks["node_telemetry_contract"].passed
    assert wh.count("source_rejects") == 5

    # re-running the partition after the files were fixed clears its rejects
    for table, (path, frame, bad) in broken.items():
        fixed = frame.copy()
        fixed.loc[fixed.index[bad], "gpu_util_pct" if table == "gpu_telemetry" else "retransmits"] = 0
        fixed.to_parquet(path, index=False)
    rerun = materialize_sources(sqlite_url, partition_key=start.strftime(FMT), kind="landing", landing_dir=str(root))
    assert rerun.success
    assert wh.count("source_rejects") == 0
    assert len(stored(sqlite_url, "gpu_telemetry", start, start + FIVE)) == len(broken["gpu_telemetry"][1])


def test_a_landing_file_missing_a_column_is_quarantined_whole_naming_file_and_column(copy_landing, sqlite_url):
    root = copy_landing()
    start = LANDING_START + 2 * FIVE
    path = partition_path(root, "node_telemetry", start)
    pd.read_parquet(path).drop(columns=["health"]).to_parquet(path, index=False)

    result = materialize_sources(sqlite_url, partition_key=start.strftime(FMT), kind="landing", landing_dir=str(root))
    assert result.success  # the partition is missing data, not a failed run
    assert stored(sqlite_url, "node_telemetry", start, start + FIVE).empty
    rejects = stored(sqlite_url, "source_rejects", start, start + FIVE, where={"source": "node_telemetry"})
    assert len(rejects) == 1
    reject = rejects.iloc[0]
    assert reject["origin"] == str(path) and reject["row_index"] == -1 and reject["check"] == "file:missing_column"
    assert str(path) in reject["reason"] and "'health'" in reject["reason"] and "missing column" in reject["reason"]
    assert reject["partition_start"] == start
    check = check_evaluations(result)["node_telemetry_contract"]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["files_quarantined"].value == 1
    quarantined = check.metadata["quarantined_files"].value
    assert quarantined[0]["file"] == str(path) and "'health'" in quarantined[0]["reason"]
    # the other sources of the partition landed
    assert len(stored(sqlite_url, "gpu_telemetry", start, start + FIVE)) == 1200 * 5

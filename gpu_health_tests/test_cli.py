"""The ``gpu-health`` command line: ``simulate`` writes the landing zone, ``run`` fills the warehouse.

Commands run in-process through ``gpu_health.cli.main(argv)`` (what the
console script calls). The landing zone is the session's ``landing_zone``
(``gpu-health simulate`` over 30 minutes of the thermal week, see conftest).
"""

import importlib.metadata
import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from gpu_health.cli import main
from gpu_health.contracts import FIVE_MINUTE_SOURCES, PARTITION_COLUMN, columns
from gpu_health.contracts.validate import validate_frame
from gpu_health.landing import partition_path
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import LANDING_END, LANDING_START, iso

PARTITIONS = list(pd.date_range(LANDING_START, LANDING_END, freq="5min", inclusive="left"))
GPUS, NODES, LINKS = 1200, 80, 640  # the default cluster


def landed_rows(root, table: str, starts=PARTITIONS) -> int:
    return sum(pq.ParquetFile(partition_path(root, table, s)).metadata.num_rows for s in starts)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_console_script_is_main():
    scripts = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts.get("gpu-health") == "gpu_health.cli:main"


def test_simulate_writes_the_contracts_layout(landing_zone):
    expected = {f"{t}/2026-11-03/{s:%H%M}.parquet" for t in FIVE_MINUTE_SOURCES for s in PARTITIONS}
    expected |= {"cost_capacity/2026-11-03.parquet", "maintenance_windows.parquet", "labels.parquet"}
    written = {str(p.relative_to(landing_zone)) for p in landing_zone.rglob("*") if p.is_file()}
    assert written == expected  # and no temp files left behind

    zero_row = []
    for table in FIVE_MINUTE_SOURCES:
        for start in PARTITIONS:
            path = partition_path(landing_zone, table, start)
            schema = pq.read_schema(path)
            assert schema.names == columns(table), path
            if pq.ParquetFile(path).metadata.num_rows == 0:
                zero_row.append(path)
    # "nothing happened" is a file with the full schema and no rows (no change in this half hour)
    assert {p.parent.parent.name for p in zero_row} >= {"change_events"}
    empty = pd.read_parquet(partition_path(landing_zone, "change_events", PARTITIONS[0]))
    assert empty.empty and str(empty["ts"].dtype) == "datetime64[ns, UTC]"

    assert landed_rows(landing_zone, "gpu_telemetry") == GPUS * 30
    assert landed_rows(landing_zone, "node_telemetry") == NODES * 30
    assert landed_rows(landing_zone, "network_telemetry") == LINKS * 30
    # a partition's files hold exactly its window and keep their contracts
    start = PARTITIONS[2]
    for table in FIVE_MINUTE_SOURCES:
        frame = pd.read_parquet(partition_path(landing_zone, table, start))
        checked = validate_frame(frame, table, start=start, end=start + pd.Timedelta(minutes=5),
                                 origin=str(partition_path(landing_zone, table, start)))
        assert checked.rejects.empty and len(checked.valid) == len(frame), table
        if len(frame):
            assert frame[PARTITION_COLUMN[table]].min() >= start

    cost = pd.read_parquet(landing_zone / "cost_capacity" / "2026-11-03.parquet")
    assert set(cost["date"].astype(str)) == {"2026-11-03"} and len(cost) == 4  # 2 regions x 2 SKUs
    assert len(pd.read_parquet(landing_zone / "maintenance_windows.parquet")) >= 1

    labels = pd.read_parquet(landing_zone / "labels.parquet")
    assert list(labels.columns) == ["incident_id", "kind", "family", "severity", "start", "end", "scope"]
    assert sorted(labels["kind"]) == ["maintenance", "thermal_throttle"]
    thermal = labels.set_index("kind").loc["thermal_throttle"]
    assert pd.Timestamp(thermal["start"]) == pd.Timestamp("2026-11-03T14:10:00Z")
    scope = json.loads(thermal["scope"])
    assert len(scope["node_ids"]) == 2 and all(n.startswith("use-") for n in scope["node_ids"])


def test_run_over_the_landing_zone_fills_the_warehouse(landing_zone, sqlite_url, capsys):
    code, out, err = run_cli(capsys, "run", "--start", iso(LANDING_START), "--end", iso(LANDING_END),
                             "--landing", str(landing_zone), "--warehouse", sqlite_url, "--quiet")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["source"] == "landing" and summary["partitions"] == 6
    assert not [c for c in summary.get("failed_checks", []) if c.endswith("_contract")], summary
    wh = Warehouse(sqlite_url)
    for table in FIVE_MINUTE_SOURCES:
        assert wh.count(table) == landed_rows(landing_zone, table), table
    assert wh.count("gpu_telemetry") == GPUS * 30
    assert wh.count("cost_capacity") == 4
    assert wh.count("maintenance_windows") == len(pd.read_parquet(landing_zone / "maintenance_windows.parquet"))
    assert wh.count("source_rejects") == 0


def test_run_with_a_file_missing_a_column_quarantines_its_partition_naming_file_and_column(copy_landing, sqlite_url, capsys):
    root = copy_landing()
    start = PARTITIONS[2]
    bad = partition_path(root, "gpu_telemetry", start)
    pd.read_parquet(bad).drop(columns=["power_w"]).to_parquet(bad, index=False)

    code, out, err = run_cli(capsys, "run", "--start", iso(LANDING_START), "--end", iso(LANDING_END),
                             "--landing", str(root), "--warehouse", sqlite_url, "--quiet")
    assert code == 0, err
    summary = json.loads(out)
    assert "gpu_telemetry:gpu_telemetry_contract" in summary["failed_checks"]
    wh = Warehouse(sqlite_url)
    # only the bad file's partition is missing; the five others landed
    assert wh.count("gpu_telemetry") == GPUS * 25
    rejects = wh.read_window("source_rejects", where={"source": "gpu_telemetry"})
    assert list(rejects["origin"]) == [str(bad)] and "'power_w'" in rejects["reason"].iloc[0]
    # derived tables cover every partition of the range, the quarantined one included
    states = wh.read_window("goodput_states")
    assert states["partition_start"].nunique() == 6


@pytest.mark.parametrize("argv, message", [
    (["--start", "2026-11-03T14:00:00", "--end", "2026-11-03T14:05:00Z"], "--start '2026-11-03T14:00:00': has no timezone"),
    (["--start", "2026-11-03T14:02:00Z", "--end", "2026-11-03T14:05:00Z"], "5-minute boundary"),
    (["--start", "2026-11-03T14:05:00Z", "--end", "2026-11-03T14:05:00Z"], "must be after --start"),
    (["--start", "2026-11-03T14:00:00Z", "--end", "2026-11-03T14:05:00Z", "--source", "prometheus"], "--prometheus-url"),
    # day and month read either way round: refused, with the form that is not ambiguous
    (["--start", "03/12/2026 00:00+00:00", "--end", "2026-11-03T14:05:00Z"],
     "--start '03/12/2026 00:00+00:00': not an ISO 8601 time; write e.g. 2026-11-02T00:00:00Z"),
])
def test_run_refuses_ambiguous_ranges(argv, message, tmp_path, capsys):
    code, out, err = run_cli(capsys, "run", *argv, "--landing", str(tmp_path), "--warehouse",
                             f"sqlite:///{tmp_path / 'wh.db'}")
    assert code == 2 and not out and err.count("\n") == 1 and err.startswith("error: ") and message in err, err
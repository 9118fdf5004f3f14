"""A simulated day of live operation, as an operator meets it: the sensor, Dagster partition runs, PostgreSQL,
Alertmanager -- and the faults a real collector fleet produces.

A quiet 144-GPU cluster (no incident but a planned maintenance of two nodes: any page is a false page) is simulated for a day into a staging folder.
A clock then walks the day in 5-minute ticks: each tick delivers the files due by then into the landing zone
(a partition's files half a minute after it closes, as an uploader does), runs the hourly calendar job, asks
the 5-minute sensor for its run requests with the tick as its clock, runs each request as a Dagster run of
``five_minute_job`` on a real PostgreSQL warehouse, and lets the delivery sensor post the alerts to a real
Alertmanager. The faults, one of each class:

* two files of one partition 20 minutes late (past the absence timeout: the partition first runs without them,
  then again when they arrive);
* one file that never arrives;
* one partition's ``job_metadata`` replaced an hour later with another team for its jobs (a correction: the later
  partitions that read it are derived again);
* the last minute of GPU rows re-sent at the head of the next file (at-least-once delivery);
* GPU rows stamped at the scrape instant, 250 ms after the minute;
* a node whose clock is 3 minutes off (its rows fall outside their partition);
* a GPU file with ten times the rows: copies of real GPUs under new UUIDs and nodes (phantom GPUs);
* the maintenance calendar corrupt for a while, while its window holds two nodes;
* the day's ``cost_capacity`` file missing.

Expected: every partition materialized, 0 pages (in the warehouse and in Alertmanager), paid GPU-minutes equal to
a clean run's within 1 %, the corrections in the stored tables, and each fault named where an operator looks:
``source_gaps``, ``source_rejects``, a ticket, a check's metadata.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import requests

from gpu_health.cli import run, simulate
from gpu_health.contracts import FIVE_MINUTE_SOURCES
from gpu_health.defs.build import build_definitions
from gpu_health.defs.alerting.sensors import AlertmanagerResource
from gpu_health.defs.resources import TelemetrySourceResource, WarehouseIOManager, WarehouseResource
from gpu_health.landing import partition_path
from gpu_health.steps.readiness import SensorCursor
from gpu_health.settings import Settings
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import iso
from gpu_health_tests.services.postgres import fresh_database

DAY = pd.Timestamp("2026-11-03T00:00:00Z")
FIVE = pd.Timedelta(minutes=5)
END = DAY + pd.Timedelta(days=1)
PARTITIONS = list(pd.date_range(DAY, END, freq="5min", inclusive="left"))
QUIET = """\
seed: 31
start: 2026-11-02T00:00:00Z
end: 2026-11-04T00:00:00Z
cluster: {gpus: 120}
incidents:
  - kind: maintenance
    start: 2026-11-03T13:00:00Z
    duration: 3h
    severity: low
    scope: {region: us-east, nodes: 2, reason: "firmware update"}
"""
ON_TIME = pd.Timedelta(seconds=30)  # an uploader's delay after a partition closes
TICK_OFFSET = pd.Timedelta(seconds=90)  # each tick after a partition's end: past the sensor's 60 s grace


def at(hhmm: str) -> pd.Timestamp:
    return DAY + pd.Timedelta(hours=int(hhmm[:2]), minutes=int(hhmm[3:]))


LATE = at("02:00")  # gpu_telemetry and node_telemetry 20 minutes late
NEVER = at("04:00")  # network_telemetry never arrives
CORRECTED = at("06:00")  # job_metadata replaced an hour later, another team for its jobs
RESENT = at("09:05")  # 09:00's last minute of GPU rows again at the head of this file
SCRAPE_INSTANT = at("10:00")  # GPU rows stamped 250 ms after the minute
SKEWED = at("11:00")  # one node's clock 3 minutes ahead
PHANTOM = at("14:00")  # ten times the GPUs, under new UUIDs and node names
CALENDAR_BROKEN = (at("12:00"), at("15:00"))  # maintenance_windows.parquet truncated in between
CORRECTED_TEAM = "team-corrected"


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    """The quiet day (and the day before, for the previous day's cost file) in a staging folder."""
    root = tmp_path_factory.mktemp("soak")
    scenario = root / "quiet.yaml"
    scenario.write_text(QUIET)
    simulate(str(scenario), str(root / "staged"), iso(DAY - pd.Timedelta(days=1)), iso(DAY + pd.Timedelta(days=1)),
             quiet=True)
    return root / "staged"


def _deliveries() -> list[tuple[pd.Timestamp, str, pd.Timestamp]]:
    """(when it lands, table, partition) for every 5-minute file of the day, in landing order: on time, late or
    never, as the faults say (what a file holds when it lands: :func:`_faulty`)."""
    out = []
    for table in FIVE_MINUTE_SOURCES:
        for p in PARTITIONS:
            due = p + FIVE + ON_TIME
            if p == NEVER and table == "network_telemetry":
                continue
            if p == LATE and table in ("gpu_telemetry", "node_telemetry"):
                due = p + FIVE + pd.Timedelta(minutes=20)
            out.append((due, table, p))
    return sorted(out, key=lambda d: d[0])


def _faulty(staged: Path, table: str, p: pd.Timestamp) -> pd.DataFrame:
    """The file of ``table`` at ``p`` as the faulty fleet sends it (on first delivery)."""
    frame = pd.read_parquet(partition_path(staged, table, p))
    if table == "gpu_telemetry" and p == RESENT:
        before = pd.read_parquet(partition_path(staged, table, p - FIVE))
        last = before[before["ts"] == before["ts"].max()]
        frame = pd.concat([last, frame], ignore_index=True)
    elif table == "gpu_telemetry" and p == SCRAPE_INSTANT:
        frame = frame.assign(ts=frame["ts"] + pd.Timedelta(milliseconds=250))
    elif table == "gpu_telemetry" and p == SKEWED:
        node = sorted(frame["node_id"].unique())[0]
        skew = frame["node_id"] == node
        frame = frame.assign(ts=frame["ts"].where(~skew, frame["ts"] + pd.Timedelta(minutes=3)))
    elif table == "gpu_telemetry" and p == PHANTOM:
        copies = []
        for k in range(1, 10):
            c = frame.copy()
            c["gpu_uuid"] = c["gpu_uuid"] + f"-phantom{k}"
            c["node_id"] = c["node_id"] + f"-phantom{k}"
            copies.append(c)
        frame = pd.concat([frame, *copies], ignore_index=True)
    return frame


def _write(path: Path, frame: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(path)


@pytest.fixture(scope="module")
def clean(staged, tmp_path_factory) -> Warehouse:
    """The same day through the bulk path from the clean files: what the live run must match."""
    root = tmp_path_factory.mktemp("clean")
    zone = root / "zone"
    shutil.copytree(staged, zone)
    url = f"sqlite:///{root / 'wh.db'}"
    run(iso(DAY), iso(END), landing=str(zone), warehouse=url, direct=True, quiet=True)
    return Warehouse(url)


def test_a_day_of_live_operation_with_a_faulty_fleet(staged, clean, tmp_path, postgres_url, alertmanager_url):
    zone = tmp_path / "zone"
    # the previous day's cost file and the calendar are there from the start; the day's cost file never comes
    shutil.copytree(staged / "cost_capacity", zone / "cost_capacity",
                    ignore=lambda d, names: [n for n in names if n.startswith(f"{DAY:%Y-%m-%d}")])
    shutil.copy(staged / "maintenance_windows.parquet", zone / "maintenance_windows.parquet")
    good_calendar = (zone / "maintenance_windows.parquet").read_bytes()
    good_windows = pd.read_parquet(zone / "maintenance_windows.parquet")
    assert len(good_windows) >= 1

    with fresh_database(postgres_url, "soak") as url:
        resources = {"warehouse": WarehouseResource(url=url, telemetry_dir=str(tmp_path / "store")),
                     "warehouse_io_manager": WarehouseIOManager(url=url, telemetry_dir=str(tmp_path / "store")),
                     "source": TelemetrySourceResource(kind="landing", landing_dir=str(zone)),
                     "alertmanager": AlertmanagerResource(url=alertmanager_url)}
        # the partitions start the day before (its cost file is the last Finance sent); the sensor starts at DAY
        defs = build_definitions(Settings(partition_start=f"{DAY - pd.Timedelta(days=1):%Y-%m-%d-%H:%M}"), resources)
        five_job = defs.resolve_job_def("five_minute_job")
        calendar_job = defs.resolve_job_def("calendar_job")
        daily_job = defs.resolve_job_def("daily_job")
        sensor = defs.resolve_sensor_def("five_minute_partition_sensor")
        delivery = defs.resolve_sensor_def("alertmanager_delivery_sensor")
        instance = dg.DagsterInstance.ephemeral()
        daily_job.execute_in_process(partition_key=f"{DAY - pd.Timedelta(days=1):%Y-%m-%d}", instance=instance)

        pending = _deliveries()
        cursor, delivery_cursor, runs, calendar_kept = SensorCursor(DAY).dumps(), None, [], 0
        now = DAY + TICK_OFFSET
        settled = False
        # past the day: its daily schedule (00:20) settles it, and the next partitions run after that
        while now <= END + pd.Timedelta(minutes=35):
            if not settled and now >= END + pd.Timedelta(minutes=20):
                daily_job.execute_in_process(partition_key=f"{DAY:%Y-%m-%d}", instance=instance, raise_on_error=False)
                settled = True
            while pending and pending[0][0] <= now:
                _, table, p = pending.pop(0)
                _write(partition_path(zone, table, p), _faulty(staged, table, p))
            if now - TICK_OFFSET == CORRECTED + pd.Timedelta(hours=1):
                meta = pd.read_parquet(partition_path(staged, "job_metadata", CORRECTED))
                _write(partition_path(zone, "job_metadata", CORRECTED), meta.assign(team=CORRECTED_TEAM))
            calendar = zone / "maintenance_windows.parquet"
            if CALENDAR_BROKEN[0] <= now < CALENDAR_BROKEN[1]:
                calendar.write_bytes(good_calendar[: len(good_calendar) // 2])
            else:
                calendar.write_bytes(good_calendar)
            if (now - TICK_OFFSET).minute == 5:  # the hourly calendar schedule
                assert calendar_job.execute_in_process(instance=instance, raise_on_error=False).success
                if CALENDAR_BROKEN[0] <= now < CALENDAR_BROKEN[1]:  # the corrupt file named, the calendar kept
                    wh = Warehouse(url, str(tmp_path / "store"))
                    broken = wh.read_window("source_rejects", where={"source": "maintenance_windows"})
                    assert broken["reason"].str.contains("maintenance_windows.parquet").any(), broken
                    assert len(wh.read_window("maintenance_windows")) == len(good_windows)
                    calendar_kept += 1
            context = dg.build_sensor_context(cursor=cursor, resources={"source": resources["source"]},
                                              definitions=defs, instance=instance)
            with dg.partition_loading_context(effective_dt=now.to_pydatetime()):
                tick = sensor.evaluate_tick(context)
            cursor = tick.cursor
            for request in tick.run_requests:
                result = five_job.execute_in_process(partition_key=request.partition_key, instance=instance,
                                                     tags=request.tags, raise_on_error=False)
                runs.append((now, request.partition_key, request.run_key, result.success))
            context = dg.build_sensor_context(cursor=delivery_cursor, resources={
                "warehouse": resources["warehouse"], "alertmanager": resources["alertmanager"]},
                definitions=defs, instance=instance)
            with dg.partition_loading_context(effective_dt=now.to_pydatetime()):
                delivery_cursor = delivery.evaluate_tick(context).cursor or delivery_cursor
            now += FIVE

        wh = Warehouse(url, str(tmp_path / "store"))
        failed = [r for r in runs if not r[3]]
        assert not failed, failed

        # every partition materialized
        states = wh.read_window("cluster_goodput", DAY, END, where={"region": "*"})
        assert sorted(states["partition_start"]) == PARTITIONS

        # no page, in the warehouse or in Alertmanager
        alerts = wh.read_window("alerts", DAY, END)
        pages = alerts[alerts["severity"] == "page"] if len(alerts) else alerts
        assert pages.empty, pages[["partition_start", "detector", "region", "description"]].to_string()
        am = requests.get(f"{alertmanager_url}/api/v2/alerts", timeout=10).json()
        assert not [a for a in am if a["labels"].get("severity") == "page"]

        # paid GPU-minutes as a clean run's, within 1 %
        paid = wh.read_window("goodput_states", DAY, END)["gpu_minutes"].sum()
        paid_clean = clean.read_window("goodput_states", DAY, END)["gpu_minutes"].sum()
        assert abs(paid / paid_clean - 1) < 0.01, (paid, paid_clean)

        # the file that never came: one gap; the late ones: none left once they arrived
        gaps = wh.read_window("source_gaps", DAY, END)
        assert sorted(zip(gaps["source"], gaps["partition_start"])) == [("network_telemetry", NEVER)]
        # the late partition ran twice: without its files, then with them
        assert len({r[2] for r in runs if r[1] == LATE.strftime("%Y-%m-%d-%H:%M")}) == 2
        gpu = wh.read_window("gpu_telemetry", LATE, LATE + FIVE)
        assert len(gpu) == len(pd.read_parquet(partition_path(staged, "gpu_telemetry", LATE)))

        # the re-sent minute, the scrape instants: every GPU-minute once, nothing quarantined
        for p in (RESENT, SCRAPE_INSTANT):
            gpu = wh.read_window("gpu_telemetry", p, p + FIVE)
            assert len(gpu) == len(pd.read_parquet(partition_path(staged, "gpu_telemetry", p))), p
        rejects = wh.read_window("source_rejects", DAY, END)
        whole = rejects[rejects["row_index"] == -1]
        # the only file withheld whole is the day's cost file that never came: named, its money missing data
        assert sorted(zip(whole["source"], whole["partition_start"])) == [("cost_capacity", DAY)], whole.to_string()
        assert "not arrived" in whole["reason"].iloc[0]
        spend = wh.read_window("wasted_spend", DAY, END)
        assert len(spend) and spend["usd"].isna().all()  # the day's GPU-hours kept, its money null, never $0
        # ... and the partitions that ran after the day was settled ticket it
        after = wh.read_window("alerts", END, END + pd.Timedelta(hours=1))
        cost_ticket = after[after["key"] == f"missing_data|cost_capacity|{DAY:%Y-%m-%d}"]
        assert len(cost_ticket) and (cost_ticket["severity"] == "ticket").all()
        # the skewed node's rows are rejected as rows, the rest of the file lands
        skewed = rejects[(rejects["partition_start"] == SKEWED) & (rejects["source"] == "gpu_telemetry")]
        assert len(skewed) > 0 and len(wh.read_window("gpu_telemetry", SKEWED, SKEWED + FIVE)) > 0

        # the correction reached the partitions after it
        # (the partitions computed before the corrected file came, an hour of them, carry the corrected team)
        later = wh.read_window("goodput_states", CORRECTED + FIVE, CORRECTED + pd.Timedelta(hours=1))
        assert later.loc[later["team"] == CORRECTED_TEAM, "gpu_minutes"].sum() > 0

        # the phantom GPUs: a discrepancy ticket, not paid
        tickets = alerts[alerts["severity"] == "ticket"] if len(alerts) else alerts
        excess = tickets[tickets["key"].astype(str).str.startswith("inventory_excess|")]
        assert PHANTOM in set(excess["partition_start"]), tickets[["partition_start", "key"]].to_string()

        # the calendar kept through its corrupt hours
        assert calendar_kept > 0 and len(wh.read_window("maintenance_windows")) == len(good_windows)

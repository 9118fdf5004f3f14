"""Re-runs converge and a step's outputs commit together.

The runs are whole ``gpu-health run`` ranges over a landing zone written by ``gpu-health simulate``: a small
cluster (96 GPUs) for 40 minutes, with a GPU ECC fault at 11:12 on one us-east node (Xid 48 + a double-bit
error, the job killed, the node drained until the end) -- and the same scenario without the incident, whose
files stand in for an exporter's corrected re-delivery of one partition.
"""

import shutil
import uuid
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

from gpu_health.cli import run
from gpu_health.defs.alerting.sensors import latest_alerts
from gpu_health.delivery.alertmanager import alert_to_payload
from gpu_health.steps import diagnosis as D
from gpu_health.steps.registry import inputs_for
from gpu_health.storage.telemetry_store import Staged
from gpu_health.storage.warehouse import Warehouse, engine_for
from gpu_health_tests.conftest import simulate

START, END = "2026-11-03T11:00:00Z", "2026-11-03T11:40:00Z"
FIXED = ("2026-11-03T11:10:00Z", "2026-11-03T11:15:00Z")  # the partition of the fault's onset, re-delivered clean
LAST = pd.Timestamp("2026-11-03T11:35:00Z")
FIVE_MINUTE = ["gpu_telemetry", "node_telemetry", "network_telemetry", "scheduler_events", "job_runtime_metrics",
               "job_metadata", "change_events"]
LOSS_TREE = ["goodput_leaves", "goodput_states", "goodput_node_states", "job_failures", "cluster_goodput"]
ECC = {"kind": "gpu_ecc_fault", "start": "2026-11-03T11:12:00Z", "end": END, "severity": "high",
       "scope": {"region": "us-east", "nodes": 1}}


def _simulate(folder, incidents) -> Path:
    return simulate(folder, {"seed": 3, "start": START, "end": END, "cluster": {"gpus": 96}, "incidents": incidents})


@pytest.fixture(scope="module")
def zones(tmp_path_factory):
    """(landing zone with the incident, the same scenario without it)."""
    return (_simulate(tmp_path_factory.mktemp("incident"), [ECC]),
            _simulate(tmp_path_factory.mktemp("clean"), []))


def _copy(zone, tmp_path, name="landing"):
    target = tmp_path / name
    shutil.copytree(zone, target)
    return target


def _redeliver_clean(landing, clean, partition=FIXED[0]):
    """Replace every 5-minute file of ``partition`` by the clean scenario's (an exporter's corrected file)."""
    ts = pd.Timestamp(partition)
    for source in FIVE_MINUTE:
        rel = f"{source}/{ts:%Y-%m-%d}/{ts:%H%M}.parquet"
        shutil.copy(clean / rel, landing / rel)


def _current(url) -> pd.DataFrame:
    wh = Warehouse(url)
    with wh.engine.connect() as conn:
        return pd.read_sql("SELECT alert_id, partition_start, status, severity, description FROM alerts_current", conn)


def _firing_pages(url) -> list[str]:
    cur = _current(url)
    return sorted(cur[(cur["status"] == "firing") & (cur["severity"] == "page")]["alert_id"])


def _all_alerts(url) -> pd.DataFrame:
    a = Warehouse(url).read_window("alerts")
    return a.sort_values(["partition_start", "alert_id"]).reset_index(drop=True)


def _chain(url) -> pd.DataFrame:
    a = Warehouse(url).read_window("alerts", columns=["partition_start", "alert_id", "status", "severity", "paged_at"])
    return a.sort_values(["partition_start", "alert_id"]).reset_index(drop=True)


def _new_database(postgres_url: str, name: str) -> str:
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    return sa.make_url(postgres_url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def warehouses(request, tmp_path):
    """``warehouses(name)`` -> the URL of a fresh warehouse on the backend under test."""
    made = []

    def make(name: str) -> str:
        if request.param == "sqlite":
            return f"sqlite:///{tmp_path / name}.db"
        url = _new_database(request.getfixturevalue("postgres_url"), f"rerun_{name}_{uuid.uuid4().hex[:6]}")
        made.append(url)
        return url

    yield make
    for url in made:
        engine_for(url).dispose()


def test_a_rerun_partition_whose_evidence_vanished_withdraws_its_page(zones, tmp_path, warehouses, monkeypatch):
    monkeypatch.chdir(tmp_path)  # files a warehouse keeps at its default place (var/...) are this test's own
    incident, clean = zones
    landing = _copy(incident, tmp_path)
    url = warehouses("wh")
    run(START, END, landing=str(landing), warehouse=url, quiet=True)
    paged = _firing_pages(url)
    assert paged == ["hardware_fault-us-east-202611031110"]  # the ECC fault pages, and stays open to the end

    _redeliver_clean(landing, clean)
    run(*FIXED, landing=str(landing), warehouse=url, quiet=True)  # the sensor re-runs the replaced partition alone

    assert _firing_pages(url) == []
    cur = _current(url).set_index("alert_id")
    withdrawn = cur.loc[paged[0]]
    assert withdrawn["status"] == "resolved" and withdrawn["description"].startswith(D.WITHDRAWN)
    # what the delivery sensor reads and posts: the page ends at the end of the partition it opened in
    latest = latest_alerts(Warehouse(url), LAST).set_index("alert_id").loc[paged[0]]
    payload = alert_to_payload({**latest.to_dict(), "alert_id": paged[0]})
    assert payload["endsAt"].startswith("2026-11-03T11:15:00")
    # the later partitions are what a run of the corrected landing zone from scratch gives them (on SQLite: the
    # chain is the same on both backends): the drained node alone is one witness, a ticket from 11:15 on
    fresh_url = f"sqlite:///{tmp_path / 'fresh.db'}"
    run(START, END, landing=str(landing), warehouse=fresh_url, quiet=True)
    rerun = _chain(url)
    rerun = rerun[rerun["alert_id"] != paged[0]].reset_index(drop=True)
    pd.testing.assert_frame_equal(rerun, _chain(fresh_url))
    assert set(rerun[rerun["partition_start"] == LAST]["severity"]) == {"ticket"}

    # the same files again: nothing changes (the first later partition comes out as stored)
    before = _all_alerts(url)
    run(*FIXED, landing=str(landing), warehouse=url, quiet=True)
    pd.testing.assert_frame_equal(_all_alerts(url), before)
    wh, s, e = Warehouse(url), pd.Timestamp(FIXED[0]), pd.Timestamp(FIXED[1])
    _, stop, meta = D.alerts_after_rerun(inputs_for("alerts", wh, s, e), D.alerts(inputs_for("alerts", wh, s, e)))
    assert (stop, meta["alerts_rederived_partitions"], meta["alerts_rederive_converged"]) == (e, 0, True)


def test_without_the_lookahead_the_page_stays_firing(zones, tmp_path, monkeypatch):
    """The control: re-deriving nothing after the re-run partition leaves the page of the vanished evidence firing
    (the failure the look-ahead exists for; if this passed with the look-ahead on, the test above would catch it)."""
    incident, clean = zones
    landing = _copy(incident, tmp_path)
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    run(START, END, landing=str(landing), warehouse=url, quiet=True)
    _redeliver_clean(landing, clean)
    monkeypatch.setattr(D, "ALERT_LOOKAHEAD", pd.Timedelta(0))
    run(*FIXED, landing=str(landing), warehouse=url, quiet=True)
    assert _firing_pages(url) == ["hardware_fault-us-east-202611031110"]
    # a horizon shorter than the stale chain re-derives up to it and says it did not converge
    wh, s, e = Warehouse(url), pd.Timestamp(FIXED[0]), pd.Timestamp(FIXED[1])
    rows, stop, meta = D.alerts_after_rerun(inputs_for("alerts", wh, s, e), D.alerts(inputs_for("alerts", wh, s, e)), horizon=pd.Timedelta(minutes=10))
    assert (stop, meta["alerts_rederived_partitions"], meta["alerts_rederive_converged"]) == (e + pd.Timedelta(minutes=10), 2, False)
    assert set(rows["partition_start"]) <= set(pd.date_range(s, stop, freq="5min", inclusive="left"))


def test_the_loss_tree_of_a_partition_commits_whole_or_not_at_all(zones, tmp_path, monkeypatch):
    """A write that fails after three of the loss tree's five tables leaves all five as they were."""
    incident, clean = zones
    landing = _copy(incident, tmp_path)
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    run(*FIXED, landing=str(landing), warehouse=url, quiet=True)
    wh = Warehouse(url)
    old = {t: wh.read_window(t) for t in LOSS_TREE}

    _redeliver_clean(landing, clean)
    real, written = Warehouse._insert, []
    real_stage = Staged.write

    def insert_then_die(self, conn, table, frame):
        if table.name == "goodput_states":  # after cluster_goodput (SQL); goodput_leaves, goodput_node_states staged
            raise RuntimeError("the process died mid-write")
        written.append(table.name)
        return real(self, conn, table, frame)

    def stage(self, path, data, table):
        written.append(table)
        return real_stage(self, path, data, table)

    monkeypatch.setattr(Warehouse, "_insert", insert_then_die)
    monkeypatch.setattr(Staged, "write", stage)
    with pytest.raises(RuntimeError, match="mid-write"):
        run(*FIXED, landing=str(landing), warehouse=url, quiet=True)
    assert {"cluster_goodput", "goodput_leaves", "goodput_node_states"} <= set(written)
    for t in LOSS_TREE:
        pd.testing.assert_frame_equal(wh.read_window(t), old[t], obj=t)

    monkeypatch.setattr(Warehouse, "_insert", real)
    monkeypatch.setattr(Staged, "write", real_stage)
    single, one_table = [], Warehouse.replace_window
    monkeypatch.setattr(Warehouse, "replace_window",
                        lambda self, name, *a, **k: single.append(name) or one_table(self, name, *a, **k))
    run(*FIXED, landing=str(landing), warehouse=url, quiet=True)
    # the sources write table by table; the loss tree and the alerts only in their steps' one transaction
    assert "gpu_telemetry" in single and not set(single) & {*LOSS_TREE, "alerts"}
    new = {t: wh.read_window(t) for t in LOSS_TREE}
    # the corrected partition has no fault: its loss tree differs (so "as they were" above was not vacuous)
    assert not new["goodput_states"].equals(old["goodput_states"])
    assert len(new["job_failures"]) < len(old["job_failures"])

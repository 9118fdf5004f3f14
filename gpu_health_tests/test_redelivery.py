"""Rows, not files, carry time faults: what a live landing zone delivers and a file-level verdict punished whole.

On the quiet zone of test_bad_input (144 GPUs, no incident: any page is a false page), one fault at a time:

* minute-grain rows stamped at the scrape instant (250 ms into the minute) are their minute's rows;
* one node's clock 3 minutes behind: its rows outside the file's partition are rejected one by one (named file,
  column, value), the rest of the file -- every other GPU of the cluster -- lands;
* at-least-once delivery: the last minute re-sent at the head of the next file, an ``ended`` event re-sent under
  a new event_id, a job's metadata re-sent in a later partition are duplicates: dropped and counted
  (``duplicates_dropped``), never rejected, never quarantining a file, never stored twice;

through the bulk path (a range, then one partition alone: the stored history is what it repeats) and through
Dagster's source asset.
"""

import shutil
from pathlib import Path

import dagster as dg
import pandas as pd

from gpu_health.cli import run
from gpu_health.sources.registry import make_source
from gpu_health.steps.registry import step
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import iso
from gpu_health_tests.test_bad_input import (  # noqa: F401  (quiet_zone: the module's fixture)
    BAD, END, FIVE, GPUS, PARTITIONS, START, _file, assert_pages, clean_rows, quiet_zone, stored_rows)

BEFORE = BAD - FIVE
AFTER = BAD + FIVE


def _zone(quiet_zone, tmp_path) -> Path:
    root = tmp_path / "landing"
    shutil.copytree(quiet_zone, root)
    return root


def _run(root: Path, tmp_path: Path, start=START, end=END) -> tuple[str, dict]:
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    return url, run(iso(start), iso(end), landing=str(root), warehouse=url, quiet=True, direct=True)


def _ingest(url: str, root: Path, table: str, start, end) -> dict:
    """The source step alone (what the asset and the bulk path run): its metadata."""
    return step(table).run(Warehouse(url), start, end, source=make_source("landing", str(root))).metadata


def test_scrape_instant_timestamps_are_their_minutes_rows(quiet_zone, tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_HEALTH_WAREHOUSE_CACHE", "0")
    root = _zone(quiet_zone, tmp_path)
    path = _file(root, "gpu_telemetry")
    frame = pd.read_parquet(path)
    frame.assign(ts=frame["ts"] + pd.Timedelta(milliseconds=250)).to_parquet(path, index=False)
    url, summary = _run(root, tmp_path)
    wh = Warehouse(url)
    assert stored_rows(wh) == clean_rows(quiet_zone)
    assert wh.count("source_rejects") == 0 and not summary.get("quarantined_files")
    back = wh.read_window("gpu_telemetry", BAD, BAD + FIVE)
    assert sorted(back["ts"].unique()) == sorted(frame["ts"].unique())  # floored to the minute
    # the event tables keep their exact times
    events = wh.read_window("scheduler_events", START, END)
    assert (events["ts"].dt.second != 0).any()


def test_a_node_clock_off_rejects_its_rows_not_the_file(quiet_zone, tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_HEALTH_WAREHOUSE_CACHE", "0")
    root = _zone(quiet_zone, tmp_path)
    node, out, values = None, {}, {}
    for p in PARTITIONS:  # one node's clock 3 minutes behind: in every file it writes
        path = _file(root, "gpu_telemetry", p)
        frame = pd.read_parquet(path)
        node = node or sorted(frame["node_id"].unique())[0]
        skewed = frame["node_id"] == node
        frame = frame.assign(ts=frame["ts"].where(~skewed, frame["ts"] - pd.Timedelta(minutes=3)))
        frame.to_parquet(path, index=False)
        out[p] = sorted(int(i) for i in frame.index[frame["ts"] < p])
        values[p] = {str(t) for t in frame.loc[out[p], "ts"]}
        assert 0 < len(out[p]) < len(frame) / 2
    url, summary = _run(root, tmp_path)
    wh = Warehouse(url)
    rows = stored_rows(wh)
    for (table, p), n in clean_rows(quiet_zone).items():
        assert rows[(table, p)] == (n - len(out[p]) if table == "gpu_telemetry" else n), (table, p)
    rejects = wh.read_window("source_rejects")
    assert not summary.get("quarantined_files")
    assert set(rejects["check"]) == {"outside_partition"} and set(rejects["column"]) == {"ts"}
    for p in PARTITIONS:
        mine = rejects[rejects["partition_start"] == p]
        path = str(_file(root, "gpu_telemetry", p))
        assert sorted(mine["row_index"]) == out[p] and set(mine["origin"]) == {path}
        assert set(mine["value"]) == values[p]
        assert all(path in r and f"{p - FIVE:%H:%M}" in r for r in mine["reason"])
    paid = wh.read_window("goodput_states", START, END).groupby("partition_start")["gpu_minutes"].sum()
    assert list(paid.index) == PARTITIONS and (paid.round(6) == GPUS * 5).all()
    assert_pages("clock_off", wh.read_window("alerts").query("severity == 'page'"))


def test_the_last_minute_re_sent_at_the_head_of_the_next_file_is_a_duplicate(quiet_zone, tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_HEALTH_WAREHOUSE_CACHE", "0")
    root = _zone(quiet_zone, tmp_path)
    before = pd.read_parquet(_file(root, "gpu_telemetry", BEFORE))
    tail = before[before["ts"] == before["ts"].max()]
    assert len(tail) == GPUS
    path = _file(root, "gpu_telemetry")
    pd.concat([tail, pd.read_parquet(path)], ignore_index=True).to_parquet(path, index=False)
    url, summary = _run(root, tmp_path)
    wh = Warehouse(url)
    assert stored_rows(wh) == clean_rows(quiet_zone)
    assert wh.count("source_rejects") == 0 and not summary.get("quarantined_files")
    # the partition alone: the re-sent minute is the one stored for 14:05
    assert _ingest(url, root, "gpu_telemetry", BAD, BAD + FIVE)["duplicates_dropped"] == GPUS
    assert stored_rows(Warehouse(url)) == clean_rows(quiet_zone) and wh.count("source_rejects") == 0
    # the range again: counted in the step's metadata, what the asset's metadata shows
    assert _ingest(url, root, "gpu_telemetry", START, END)["duplicates_dropped"] == GPUS


def test_a_job_ending_re_sent_under_a_new_event_id_is_a_duplicate(quiet_zone, tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_HEALTH_WAREHOUSE_CACHE", "0")
    root = _zone(quiet_zone, tmp_path)
    events = pd.read_parquet(_file(root, "scheduler_events"))
    ended = events[events["event"] == "ended"].iloc[[0]]
    resent = ended.assign(event_id=ended["event_id"] + ":again", ts=AFTER + pd.Timedelta(seconds=30),
                          exit_state="failed", reason="NCCL timeout")
    same_file = ended.assign(event_id=ended["event_id"] + ":dup", ts=ended["ts"] + pd.Timedelta(seconds=1))
    path = _file(root, "scheduler_events", AFTER)
    pd.concat([pd.read_parquet(path), resent], ignore_index=True).to_parquet(path, index=False)
    pd.concat([events, same_file], ignore_index=True).to_parquet(_file(root, "scheduler_events"), index=False)
    url, summary = _run(root, tmp_path)
    wh = Warehouse(url)
    assert stored_rows(wh) == clean_rows(quiet_zone)
    stored = wh.read_window("scheduler_events", START, END)
    assert not stored["event_id"].str.endswith((":again", ":dup")).any()
    assert wh.count("source_rejects") == 0 and not summary.get("quarantined_files")
    # the later partition alone: the job's ending is in the stored history
    assert _ingest(url, root, "scheduler_events", AFTER, AFTER + FIVE)["duplicates_dropped"] == 1
    assert _ingest(url, root, "scheduler_events", START, END)["duplicates_dropped"] == 2
    assert len(Warehouse(url).read_window("scheduler_events", START, END)) == len(stored)


def test_job_metadata_re_sent_in_a_later_partition_is_stored_once(quiet_zone, tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_HEALTH_WAREHOUSE_CACHE", "0")
    root = _zone(quiet_zone, tmp_path)
    meta = pd.read_parquet(_file(root, "job_metadata"))
    as_sent = meta.iloc[[0]]  # the same row again, its submission in the partition before
    restamped = meta.iloc[[1]].assign(submitted_at=AFTER + pd.Timedelta(seconds=5))  # re-sent with the send time
    path = _file(root, "job_metadata", AFTER)
    pd.concat([as_sent, pd.read_parquet(path), restamped], ignore_index=True).to_parquet(path, index=False)
    url, summary = _run(root, tmp_path)
    wh = Warehouse(url)
    assert stored_rows(wh) == clean_rows(quiet_zone)
    stored = wh.read_window("job_metadata")
    assert not stored["job_id"].duplicated().any()
    assert wh.count("source_rejects") == 0 and not summary.get("quarantined_files")
    assert _ingest(url, root, "job_metadata", AFTER, AFTER + FIVE)["duplicates_dropped"] == 2
    assert _ingest(url, root, "job_metadata", START, END)["duplicates_dropped"] == 2
    again = Warehouse(url).read_window("job_metadata")
    assert len(again) == len(stored) and not again["job_id"].duplicated().any()


def test_the_source_asset_drops_redeliveries_and_counts_them(quiet_zone, tmp_path, monkeypatch):
    """Through Dagster: partition 14:05, then 14:10 whose file re-sends 14:05's last minute at the scrape
    instant: its rows land, the re-sent ones are counted in the asset's metadata and its contract check's."""
    from gpu_health_tests.test_pipeline import QUIET, resources

    monkeypatch.setenv("GPU_HEALTH_WAREHOUSE_CACHE", "0")
    root = _zone(quiet_zone, tmp_path)
    before = pd.read_parquet(_file(root, "gpu_telemetry", BEFORE))
    tail = before[before["ts"] == before["ts"].max()]
    path = _file(root, "gpu_telemetry")
    frame = pd.concat([tail, pd.read_parquet(path)], ignore_index=True)
    frame.assign(ts=frame["ts"] + pd.Timedelta(milliseconds=250)).to_parquet(path, index=False)
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    res = resources(url, kind="landing", landing_dir=str(root))
    from gpu_health.defs.build import build_definitions
    from gpu_health.settings import Settings

    assets = list(build_definitions(Settings(), res).assets)
    meta, checks = {}, {}
    for p in (BEFORE, BAD):
        result = dg.materialize(assets, selection=[dg.AssetKey("gpu_telemetry")], partition_key=p.strftime("%Y-%m-%d-%H:%M"),
                                resources=res, run_config=QUIET, raise_on_error=False)
        assert result.success
        (mat,) = result.asset_materializations_for_node("gpu_telemetry")
        (check,) = result.get_asset_check_evaluations()
        meta[p] = {k: v.value for k, v in mat.metadata.items()}
        checks[p] = (check.passed, {k: v.value for k, v in check.metadata.items()})
    assert meta[BEFORE]["duplicates_dropped"] == 0
    assert meta[BAD]["duplicates_dropped"] == GPUS and meta[BAD]["rows"] == len(frame) - GPUS
    assert meta[BAD]["rejected_rows"] == 0 and not meta[BAD]["quarantined_files"]
    # the contract check says so too (an operator watching checks sees the re-deliveries); they fail nothing
    assert checks[BEFORE] == (True, {**checks[BEFORE][1], "duplicates_dropped": 0})
    assert checks[BAD] == (True, {**checks[BAD][1], "duplicates_dropped": GPUS})
    wh = Warehouse(url)
    assert len(wh.read_window("gpu_telemetry", BAD, BAD + FIVE)) == len(frame) - GPUS
    assert wh.count("source_rejects") == 0

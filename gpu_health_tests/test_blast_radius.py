"""One bad input costs one partition, on every path (``gpu-health run`` through Dagster and ``--direct``).

The quiet 30-minute zone of ``test_bad_input`` (144 GPUs, no incident), broken in ways that stay bad:

* a GPU file with most rows failing their contract: its partition is quarantined whole (missing data for its
  minutes) whatever the length of the run, the check WARNs, every other partition lands raw and derived, and the
  Dagster path writes the tables the bulk path writes;
* a negative price in the day's ``cost_capacity``, or the day's file missing: the day is quarantined (named with
  file, column and value), the GPU-minute tables land, and the partitions run after the reject is stored carry one
  missing_data ticket naming the file (in a run, the day's; live, where the day settles after its partitions, the
  next ones), which clears once the file lands and the day re-runs;
* the calendar corrupt or absent: the stored calendar is kept, and the run says so;
* the day's cost file missing while a GPU file holds ten times the GPUs: paid stays Finance's capacity of the last
  day it sent, and the day's spend keeps its GPU-hours with the money null;
* a piece of the range that fails (a 5-minute file not arrived yet): the others are finished, the failed one is
  reported in ``failed_partitions`` and the command exits non-zero.
"""

import shutil

import pandas as pd
import pytest

from gpu_health.cli import main, run
from gpu_health.landing import partition_path
from gpu_health.steps.ingest import ERROR_REJECT_SHARE, REJECT_SHARE_CHECK
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import iso, warehouse_tables
from gpu_health_tests.test_bad_input import BAD, END, GPUS, PARTITIONS, START, quiet_zone  # noqa: F401

PATHS = {"dagster": False, "direct": True}
# the tables a bad input must leave equal on both paths (the run's bookkeeping aside)
COMPARED = ["gpu_telemetry", "node_telemetry", "source_rejects", "cost_capacity", "maintenance_windows",
            "goodput_leaves", "goodput_states", "cluster_goodput", "kpi_values", "alerts", "wasted_spend"]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("GPU_HEALTH_WAREHOUSE_CACHE", "0")


def _landing(zone, tmp_path):
    root = tmp_path / "landing"
    shutil.copytree(zone, root)
    return root


def _negative_counters(root, start=BAD):
    """Every GPU row of the partition but a few with a negative ECC counter: far over ERROR_REJECT_SHARE."""
    path = partition_path(root, "gpu_telemetry", start)
    frame = pd.read_parquet(path)
    frame.loc[frame.index[10:], "ecc_sbe_delta"] = -3
    frame.to_parquet(path, index=False)
    assert (len(frame) - 10) / len(frame) > ERROR_REJECT_SHARE
    return path


def _paid(url) -> pd.Series:
    states = Warehouse(url).read_window("goodput_states", START, END)
    return states.groupby("partition_start")["gpu_minutes"].sum()


def _assert_every_partition_derived(url):
    paid = _paid(url)
    assert list(paid.index) == PARTITIONS and (paid.round(6) == GPUS * 5).all(), paid


def test_a_bad_file_costs_its_partition_and_both_paths_write_the_same_tables(quiet_zone, tmp_path):
    root = _landing(quiet_zone, tmp_path)
    bad = _negative_counters(root)
    urls = {}
    for name, direct in PATHS.items():
        urls[name] = f"sqlite:///{tmp_path / name}.db"
        summary = run(iso(START), iso(END), landing=str(root), warehouse=urls[name], quiet=True, direct=direct)
        assert not summary.get("failed_partitions"), summary
        assert "gpu_telemetry:gpu_telemetry_contract" in summary["failed_checks"]
        assert [(f["file"], f["check"]) for f in summary["quarantined_files"]] == [(str(bad), REJECT_SHARE_CHECK)]
        wh = Warehouse(urls[name])
        gpu = wh.read_window("gpu_telemetry", START, END)
        per_partition = gpu.groupby(gpu["ts"].dt.floor("5min")).size()
        assert BAD not in per_partition.index  # quarantined whole: its good rows do not feed the loss tree
        assert sorted(per_partition.index) == [p for p in PARTITIONS if p != BAD]
        reject = wh.read_window("source_rejects", where={"source": "gpu_telemetry"})
        whole = reject[reject["row_index"] == -1]
        assert len(whole) == 1 and str(bad) in whole["reason"].iloc[0] and "ecc_sbe_delta" in whole["reason"].iloc[0]
        _assert_every_partition_derived(urls[name])
        states = wh.read_window("goodput_states", BAD, BAD + pd.Timedelta(minutes=5))
        assert set(states["state"]) == {"no_data"}  # missing data for its minutes, not a number from a sample
    dagster, direct = warehouse_tables(urls["dagster"]), warehouse_tables(urls["direct"])
    for table in COMPARED:
        pd.testing.assert_frame_equal(dagster[table], direct[table], obj=table)


def test_the_same_file_is_judged_alike_in_a_five_minute_run_and_in_the_range(quiet_zone, tmp_path):
    """Severity per partition: the partition's own share, not the run's (a file ERROR in an hour, WARN in a day)."""
    root = _landing(quiet_zone, tmp_path)
    _negative_counters(root)
    got = {}
    for label, (s, e) in {"range": (START, END), "one": (BAD, BAD + pd.Timedelta(minutes=5))}.items():
        url = f"sqlite:///{tmp_path / label}.db"
        summary = run(iso(s), iso(e), landing=str(root), warehouse=url, quiet=True)
        assert not summary.get("failed_partitions"), summary
        rej = Warehouse(url).read_window("source_rejects")
        got[label] = sorted(zip(rej["row_index"], rej["check"]))
    assert got["range"] == got["one"]


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("fault", ["negative_price", "missing_file"])
def test_a_bad_or_missing_cost_day_never_blocks_the_five_minute_tables(quiet_zone, tmp_path, fault, path):
    root = _landing(quiet_zone, tmp_path)
    cost = partition_path(root, "cost_capacity", START.normalize())
    if fault == "negative_price":
        frame = pd.read_parquet(cost)
        frame.loc[1, "reserved_gpu_hour_usd"] = -1.7
        frame.to_parquet(cost, index=False)
    else:
        cost.unlink()
    url = f"sqlite:///{tmp_path / 'w'}.db"
    summary = run(iso(START), iso(END), landing=str(root), warehouse=url, quiet=True, direct=PATHS[path])
    assert not summary.get("failed_partitions"), summary
    assert "cost_capacity:cost_capacity_contract" in summary["failed_checks"]
    assert [f["file"] for f in summary["quarantined_files"]] == [str(cost)]
    wh = Warehouse(url)
    assert wh.count("cost_capacity") == 0  # the day's prices are missing data, never a partial blend
    assert wh.count("gpu_telemetry") == GPUS * 30
    _assert_every_partition_derived(url)  # paid minutes from the GPUs seen
    rejects = wh.read_window("source_rejects", where={"source": "cost_capacity"})
    if fault == "negative_price":
        row = rejects[rejects["row_index"] == 1].iloc[0]
        assert (row["origin"], row["column"], float(row["value"])) == (str(cost), "reserved_gpu_hour_usd", -1.7)
        whole = rejects[rejects["row_index"] == -1]["reason"].iloc[0]
        assert str(cost) in whole and "reserved_gpu_hour_usd" in whole and "-1.7" in whole
    else:
        assert "not arrived" in rejects["reason"].iloc[0] and str(cost) in rejects["reason"].iloc[0]
    # the day's cost was ingested before its partitions: each of them carries one ticket naming the file
    tickets = _cost_tickets(wh)
    assert list(tickets["partition_start"]) == PARTITIONS and tickets["alert_id"].nunique() == 1
    assert (tickets["severity"] == "ticket").all() and (tickets["status"] == "firing").all()
    assert str(cost) in tickets["description"].iloc[0]
    assert ("-1.7" if fault == "negative_price" else "not arrived") in tickets["description"].iloc[0]


def _cost_tickets(wh, day=START) -> pd.DataFrame:
    """The alerts of Finance's cost file of ``day``, in partition order."""
    alerts = wh.read_window("alerts")
    key = f"missing_data|cost_capacity|{day:%Y-%m-%d}"
    return alerts[alerts["key"] == key].sort_values("partition_start").reset_index(drop=True)


@pytest.mark.parametrize("fault", ["negative_price", "missing_file"])
def test_a_cost_day_stored_after_its_partitions_tickets_the_partitions_run_after_it(quiet_zone, tmp_path, fault):
    """Live order: a day's 5-minute partitions run as they land, its cost file is settled after them (00:20 the
    next day, with the day before's file read before it): the partitions run after the reject is stored carry the
    ticket, never a page; once the file landed and the day re-ran, the ticket clears."""
    from gpu_health.sources.landing import LandingSource
    from gpu_health.steps.graph import FIVE_MINUTE
    from gpu_health.steps.registry import step, steps_of

    root = _landing(quiet_zone, tmp_path)
    day = START.normalize()
    cost = partition_path(root, "cost_capacity", day)
    good = pd.read_parquet(cost)
    source, wh = LandingSource(root), Warehouse(f"sqlite:///{tmp_path / 'w'}.db")
    five = pd.Timedelta(minutes=5)

    def partition(p):
        for s in steps_of(FIVE_MINUTE):
            s.run(wh, p, p + five, **({"source": source} if s.is_source else {}))

    # yesterday's file never came: its reject was stored when yesterday settled, before today's partitions
    step("cost_capacity").run(wh, day - pd.Timedelta(days=1), day, source=source)
    for p in PARTITIONS[:3]:
        partition(p)
    yesterday = _cost_tickets(wh, day - pd.Timedelta(days=1))
    assert list(yesterday["partition_start"]) == PARTITIONS[:3] and (yesterday["status"] == "firing").all()
    assert "not arrived" in yesterday["description"].iloc[0]
    if fault == "negative_price":
        good.assign(reserved_gpu_hour_usd=-1.7).to_parquet(cost, index=False)
    else:
        cost.unlink()
    step("cost_capacity").run(wh, day, day + pd.Timedelta(days=1), source=source)
    partition(PARTITIONS[3])
    tickets = _cost_tickets(wh)
    assert list(tickets["partition_start"]) == [PARTITIONS[3]], tickets
    assert tickets["severity"].iloc[0] == "ticket" and tickets["cause_family"].iloc[0] == "missing_data"
    assert str(cost) in tickets["description"].iloc[0] and "null" in tickets["description"].iloc[0]
    assert not len(wh.read_window("alerts", where={"severity": "page"}))
    # Finance sends the file, the day re-runs: the reject is gone and the ticket clears
    good.to_parquet(cost, index=False)
    step("cost_capacity").run(wh, day, day + pd.Timedelta(days=1), source=source)
    partition(PARTITIONS[4])
    tickets = _cost_tickets(wh)
    assert list(tickets["partition_start"]) == PARTITIONS[3:5]
    assert tickets["status"].iloc[-1] != "firing" and tickets["alert_id"].nunique() == 1


@pytest.mark.parametrize("path", list(PATHS))
def test_a_day_without_its_cost_file_is_paid_as_the_last_capacity_finance_sent(quiet_zone, tmp_path, path):
    from gpu_health.sources.landing import LandingSource
    from gpu_health.steps.registry import step

    root = _landing(quiet_zone, tmp_path)
    day = START.normalize()
    cost = partition_path(root, "cost_capacity", day)
    before = partition_path(root, "cost_capacity", day - pd.Timedelta(days=1))
    # yesterday's prices were sent and stored (the daily job settled it); today's file never comes
    frame = pd.read_parquet(cost)
    frame.assign(date=(day - pd.Timedelta(days=1)).date()).to_parquet(before, index=False)
    cost.unlink()
    gpu = partition_path(root, "gpu_telemetry", BAD)
    rows = pd.read_parquet(gpu)
    pd.concat([rows] + [rows.assign(node_id=rows["node_id"] + f"-copy{k}", gpu_uuid=rows["gpu_uuid"] + f"-copy{k}")
                        for k in range(9)], ignore_index=True).to_parquet(gpu, index=False)
    url = f"sqlite:///{tmp_path / 'w'}.db"
    step("cost_capacity").run(Warehouse(url), day - pd.Timedelta(days=1), day, source=LandingSource(root))
    summary = run(iso(START), iso(END), landing=str(root), warehouse=url, quiet=True, direct=PATHS[path])
    assert not summary.get("failed_partitions"), summary
    _assert_every_partition_derived(url)  # the phantom GPUs are not paid: yesterday's capacity bounds them
    spend = Warehouse(url).read_window("wasted_spend", day, day + pd.Timedelta(days=1))
    assert len(spend) and spend["gpu_hours"].sum() > 0
    assert spend["usd"].isna().all() and spend["blended_gpu_hour_usd"].isna().all()  # unpriced, never $0


CALENDAR = pd.DataFrame({"window_id": ["mw-1"], "start": [START], "end": [END], "region": ["*"],
                         "node_ids": ["*"], "reason": ["firmware"]})


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("fault", ["corrupt", "absent"])
def test_a_bad_or_absent_calendar_keeps_the_stored_one(quiet_zone, tmp_path, fault, path):
    root = _landing(quiet_zone, tmp_path)
    calendar = root / "maintenance_windows.parquet"
    CALENDAR.to_parquet(calendar, index=False)
    url = f"sqlite:///{tmp_path / 'w'}.db"
    run(iso(START), iso(END), landing=str(root), warehouse=url, quiet=True, direct=PATHS[path])
    before = Warehouse(url).read_window("goodput_states", START, END)
    assert "maintenance" in set(before["state"])
    if fault == "corrupt":
        calendar.write_bytes(b"window_id,start\nmw-1,yesterday\n")
    else:
        calendar.unlink()
    summary = run(iso(START), iso(END), landing=str(root), warehouse=url, quiet=True, direct=PATHS[path])
    assert not summary.get("failed_partitions"), summary
    assert [f["file"] for f in summary["quarantined_files"]] == [str(calendar)]
    wh = Warehouse(url)
    assert wh.read_window("maintenance_windows")["window_id"].tolist() == ["mw-1"]  # kept, never wiped
    after = wh.read_window("goodput_states", START, END)
    pd.testing.assert_frame_equal(after.reset_index(drop=True), before.reset_index(drop=True))
    alerts = wh.read_window("alerts")
    assert not len(alerts[alerts["detector"].str.contains("hardware", na=False)])


@pytest.mark.parametrize("path", list(PATHS))
def test_a_failed_piece_never_stops_the_range_and_the_command_exits_non_zero(quiet_zone, tmp_path, path, capsys):
    root = _landing(quiet_zone, tmp_path)
    never = partition_path(root, "node_telemetry", BAD)
    # a file not arrived yet, still within the time a late producer is waited for (a run launched while it is
    # late): its piece fails (DataNotReady: never written half), the others go on
    never.unlink()
    url = f"sqlite:///{tmp_path / 'w'}.db"
    argv = ["run", "--start", iso(START), "--end", iso(END), "--landing", str(root), "--warehouse", url, "--quiet",
            "--absent-after", "36500d"]
    assert main(argv + (["--direct", "--chunk-hours", "0.25"] if PATHS[path] else [])) == 1
    out = capsys.readouterr()
    assert str(never) in out.err
    summary = __import__("json").loads(out.out.strip().splitlines()[-1])
    (failed,) = summary["failed_partitions"]
    assert failed["step"] == "node_telemetry" and str(never) in failed["reason"]
    wh = Warehouse(url)
    assert wh.count("gpu_telemetry") == GPUS * 30  # the sources of the failed piece that did arrive landed
    assert wh.count("cluster_goodput_daily") > 0  # the day's finance ran after the failed piece
    if PATHS[path]:  # the pieces after the failed one got their derived tables
        paid = _paid(url)
        later = [p for p in PARTITIONS if p >= BAD + pd.Timedelta(minutes=5)]
        assert set(later) <= set(paid.index)

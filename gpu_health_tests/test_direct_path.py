"""The bulk path (``gpu-health run --direct``, in one process or pipelined over two or three) writes exactly the
tables the Dagster path writes, and so does the Dagster path pipelined over three processes.

One landing zone, run both ways into two warehouses: a window across midnight (two day-runs, two finance days)
with an ECC fault that pages, a maintenance window, a damaged file (rejects) and late data -- a partition's files
re-delivered corrected after the range ran, and that partition re-run alone (which re-derives the alerts after it).
Every table (SQL and the columnar store) must hold the same rows in both warehouses.
"""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from gpu_health.catalog import CATALOG
from gpu_health.cli import UsageError, run
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import simulate, warehouse_tables

START, END = "2026-11-03T23:00:00Z", "2026-11-04T00:40:00Z"
LATE = pd.Timestamp("2026-11-03T23:45:00Z")  # re-delivered after the run
FIVE_MINUTE = ["gpu_telemetry", "node_telemetry", "network_telemetry", "scheduler_events", "job_runtime_metrics",
               "job_metadata", "change_events"]
ECC = {"kind": "gpu_ecc_fault", "start": "2026-11-03T23:22:00Z", "duration": "60m", "severity": "high",
       "scope": {"region": "us-east", "nodes": 1}}
MAINTENANCE = {"kind": "maintenance", "start": "2026-11-03T23:30:00Z", "duration": "30m", "severity": "low",
               "scope": {"region": "eu-west", "nodes": 2}}


def _simulate(folder, seed: int) -> Path:
    return simulate(folder, {"seed": seed, "start": START, "end": END, "cluster": {"gpus": 96},
                             "incidents": [ECC, MAINTENANCE]})


@pytest.fixture(scope="module")
def zones(tmp_path_factory):
    """(the landing zone, a corrected re-delivery of it: the same cluster simulated with another seed)."""
    zone = _simulate(tmp_path_factory.mktemp("zone"), 3)
    damaged = zone / "gpu_telemetry" / "2026-11-04" / "0010.parquet"
    damaged.write_bytes(damaged.read_bytes()[:200])  # a truncated file: quarantined whole
    return zone, _simulate(tmp_path_factory.mktemp("late"), 4)




def _run_both_ways(zone, late, tmp_path):
    landing = tmp_path / "landing"
    shutil.copytree(zone, landing)
    # pipelined: the sources in a second process; staged: and the diagnosis in a third; dagster_staged: the same
    # stages as Dagster runs of their assets
    paths = {"dagster": 1, "direct": 1, "pipelined": 2, "staged": 3, "dagster_staged": 3}
    urls = {path: f"sqlite:///{tmp_path / path}.db" for path in paths}
    for path, url in urls.items():
        run(START, END, landing=str(landing), warehouse=url, quiet=True, direct=not path.startswith("dagster"),
            workers=paths[path])
    for source in FIVE_MINUTE:  # late data: the partition's files arrive again, corrected
        rel = f"{source}/{LATE:%Y-%m-%d}/{LATE:%H%M}.parquet"
        shutil.copy(late / rel, landing / rel)
    p0, p1 = LATE.isoformat(), (LATE + pd.Timedelta(minutes=5)).isoformat()
    for path, url in urls.items():
        run(p0, p1, landing=str(landing), warehouse=url, quiet=True, direct=not path.startswith("dagster"),
            partition_start=START.replace("T", "-")[:16])
    return urls


def test_the_bulk_path_writes_what_dagster_writes(zones, tmp_path):
    urls = _run_both_ways(*zones, tmp_path)
    dagster, direct, pipelined, staged, dagster_staged = (
        warehouse_tables(urls[p]) for p in ("dagster", "direct", "pipelined", "staged", "dagster_staged"))
    assert len(dagster["alerts"]) and (dagster["alerts"]["severity"] == "page").any(), "the ECC fault pages"
    assert len(dagster["source_rejects"]), "the truncated file is quarantined"
    assert len(dagster["goodput_leaves"]) and len(dagster["wasted_spend"])
    for name in dagster:
        pd.testing.assert_frame_equal(dagster[name], direct[name], check_dtype=False, obj=name)
        pd.testing.assert_frame_equal(dagster[name], pipelined[name], check_dtype=False, obj=f"{name} (pipelined)")
        pd.testing.assert_frame_equal(dagster[name], staged[name], check_dtype=False, obj=f"{name} (staged)")
        pd.testing.assert_frame_equal(dagster[name], dagster_staged[name], check_dtype=False,
                                      obj=f"{name} (Dagster, staged)")


def test_the_sensors_five_minute_runs_write_what_a_range_run_writes(zones, tmp_path):
    """The sensor runs one partition at a time; a backfill (and ``gpu-health evaluate``) a day at a time. No
    partition's rows may depend on what comes after it in a longer run: a job's later events or metadata, its
    later runtime rows, slices or pages seen later (goodput, KPIs and their baselines alike)."""
    landing = tmp_path / "landing"
    shutil.copytree(zones[0], landing)
    urls = {k: f"sqlite:///{tmp_path / k}.db" for k in ("range", "partitions")}
    run(START, END, landing=str(landing), warehouse=urls["range"], quiet=True, direct=True)
    for p in pd.date_range(START, END, freq="5min", inclusive="left"):
        run(p.isoformat(), (p + pd.Timedelta(minutes=5)).isoformat(), landing=str(landing),
            warehouse=urls["partitions"], quiet=True, direct=True)
    whole, partitions = warehouse_tables(urls["range"]), warehouse_tables(urls["partitions"])
    assert (whole["alerts"]["severity"] == "page").any() and len(whole["kpi_baselines"])
    # (the daily tables settle a day once it ended, with the failures of the day after: the daily schedule's)
    for name in (n for n in whole if CATALOG[n].cadence != "daily"):
        pd.testing.assert_frame_equal(whole[name], partitions[name], check_dtype=False, check_exact=False,
                                      rtol=1e-9, obj=name)


def test_a_run_for_some_tables_computes_only_what_they_need_and_writes_them_alike(zones, tmp_path):
    """``targets`` (``gpu-health run --direct --only``, what ``gpu-health evaluate`` runs): the steps feeding the
    alerts and the capacity headroom, in one process or pipelined, write those tables (and every one upstream)
    exactly as a full run does, and skip the rest (the KPIs, the drill-down, finance)."""
    from gpu_health.evaluation.harness import SCORED
    from gpu_health.steps.graph import feeding
    from gpu_health.steps.registry import STEPS

    landing = tmp_path / "landing"
    shutil.copytree(zones[0], landing)
    urls = {k: f"sqlite:///{tmp_path / k}.db" for k in ("full", "only", "only_staged")}
    run(START, END, landing=str(landing), warehouse=urls["full"], quiet=True, direct=True)
    run(START, END, landing=str(landing), warehouse=urls["only"], quiet=True, direct=True, targets=list(SCORED))
    run(START, END, landing=str(landing), warehouse=urls["only_staged"], quiet=True, direct=True, workers=3,
        targets=list(SCORED))
    full, only, staged = (warehouse_tables(urls[k]) for k in ("full", "only", "only_staged"))
    written = {t for s in feeding(SCORED, STEPS) for t in (*s.writes, *s.side_writes)}
    assert {"alerts", "capacity_headroom", "goodput_leaves", "gpu_telemetry"} <= written
    assert not {"kpi_values", "goodput_decomposition", "wasted_spend"} & written
    assert (full["alerts"]["severity"] == "page").any()
    for name in written:
        pd.testing.assert_frame_equal(full[name], only[name], check_dtype=False, obj=name)
        pd.testing.assert_frame_equal(full[name], staged[name], check_dtype=False, obj=f"{name} (staged)")
    for name in ("kpi_values", "goodput_decomposition", "wasted_spend"):
        assert len(full[name]) and not len(only[name]) and not len(staged[name]), name
    with pytest.raises(ValueError, match="no step writes"):
        feeding(["alert"], STEPS)
    with pytest.raises(UsageError, match="--only 'alerts': needs --direct"):
        run(START, END, landing=str(landing), warehouse=urls["only"], quiet=True, targets=["alerts"])


def test_a_range_run_in_short_pieces_writes_what_whole_days_write(zones, tmp_path):
    """``--chunk-hours``: the 5-minute steps run a day in pieces (8 hours by default) to hold less at once. In
    20-minute pieces over three processes (each stage caching and handing on a piece, the look-backs reaching
    back over several) every table is the one a run in whole days in one process writes."""
    landing = tmp_path / "landing"
    shutil.copytree(zones[0], landing)
    urls = {k: f"sqlite:///{tmp_path / k}.db" for k in ("days", "pieces")}
    whole = run(START, END, landing=str(landing), warehouse=urls["days"], quiet=True, direct=True, chunk_hours=24)
    pieces = run(START, END, landing=str(landing), warehouse=urls["pieces"], quiet=True, direct=True, workers=3,
                 chunk_hours=1 / 3)
    assert pieces["runs"] == whole["runs"] + 3  # five pieces of the 100 minutes instead of the two days' parts
    days, short = warehouse_tables(urls["days"]), warehouse_tables(urls["pieces"])
    assert (days["alerts"]["severity"] == "page").any() and len(days["kpi_baselines"])
    for name in days:
        pd.testing.assert_frame_equal(days[name], short[name], check_dtype=False, obj=name)
    with pytest.raises(UsageError, match="--chunk-hours '12': needs --direct"):
        run(START, END, landing=str(landing), warehouse=urls["days"], quiet=True, chunk_hours=12)
    with pytest.raises(ValueError, match="whole 5-minute partitions"):
        run(START, END, landing=str(landing), warehouse=urls["days"], quiet=True, direct=True, chunk_hours=0.1)


def test_a_pipelined_run_settles_its_finance_days_before_its_diagnosis_stage_ends(zones, tmp_path):
    """The finance days read only what the sources and the loss tree write: a run over three processes computes
    them once that stage has finished the range, while the diagnosis stage still works on its last day (not after
    it, with every core but one idle). When the last stage reports its last day, they are written."""
    from gpu_health.defs.resources import SourceSpec, TelemetrySourceResource
    from gpu_health.steps.direct import feeding_stage, run_range, stages
    from gpu_health.steps.graph import DAILY
    from gpu_health.steps.registry import steps_of

    assert feeding_stage(stages(3), steps_of(DAILY)) == 1  # the loss tree's stage, before the diagnosis
    landing = tmp_path / "landing"
    shutil.copytree(zones[0], landing)
    wh = Warehouse(f"sqlite:///{tmp_path / 'w.db'}")
    src = TelemetrySourceResource(kind="landing", landing_dir=str(landing))
    finance_days = []

    def progress(c_start, c_end):  # the last stage finished a day: which finance days are written by now
        finance_days.append(set(wh.read_window("wasted_spend")["date"].astype(str)))

    run_range(wh, src.get(), pd.Timestamp(START), pd.Timestamp(END), progress=progress, source_spec=SourceSpec(src),
              processes=3)
    assert finance_days[-1] == set(wh.read_window("wasted_spend")["date"].astype(str)) and len(finance_days[-1]) == 2


def test_the_pipeline_stages_never_wait_on_a_later_stage():
    """Every cut the bulk path runs is safe by the declared reads, and a cut that is not is refused."""
    from gpu_health.steps.direct import check_stages, stages
    from gpu_health.steps.graph import FIVE_MINUTE as FIVE
    from gpu_health.steps.registry import steps_of

    for processes in (1, 2, 3):
        cut = stages(processes)
        assert [s.name for stage in cut for s in stage] == [s.name for s in steps_of(FIVE)]
    five = steps_of(FIVE)
    names = [s.name for s in five]
    goodput = names.index("goodput")
    with pytest.raises(ValueError, match="written by later stage"):  # the loss tree reads node_inventory
        check_stages([[s for s in five if s.name != "node_inventory"], [five[names.index("node_inventory")]]])
    with pytest.raises(ValueError, match="past its window"):  # finance reads a day of failures past its window
        from gpu_health.steps.graph import DAILY
        wasted = next(s for s in steps_of(DAILY) if s.name == "wasted_spend")
        check_stages([five[:goodput + 1], [wasted]])



def test_a_run_caches_as_many_windows_as_its_steps_look_back():
    """cache_depths: the day-long windows a read of ``[start - before, end)`` spans, per table, the longest read
    winning; a read of a whole table keeps no windows. The KPI baselines' two weeks and 35 minutes span 16 days."""
    from gpu_health.steps.direct import cache_depths
    from gpu_health.steps.graph import FIVE_MINUTE, Read, Step
    from gpu_health.steps.registry import STEPS

    def step(*reads):
        return Step(name="s", cadence=FIVE_MINUTE, writes=(), reads=reads, run=lambda *a: None)

    hour, day = pd.Timedelta(hours=1), pd.Timedelta(days=1)
    got = cache_depths([step(Read("a"), Read("b", before=hour)), step(Read("b", before=2 * day), Read("c", whole=True)),
                        step(Read("d", before=hour, after=day))])
    assert got == {"a": 1, "b": 3, "d": 2}  # (a run in order reads past its window only at its end)
    assert cache_depths(STEPS)["kpi_values"] == 16


def test_a_stage_keeps_the_day_it_hands_on_and_what_its_steps_look_back_to_nothing_more():
    """A stage process's cache: a table its steps read without look-back (the loss tree's day of GPU telemetry)
    keeps one day, the one handed on; the KPI history the diagnosis looks back to keeps its 16."""
    from gpu_health.steps.direct import stage_cache, stages

    derived, diagnosis = stages(3)[1], stages(3)[2]
    cache = stage_cache(derived)
    frame = pd.DataFrame({"ts": [pd.Timestamp("2026-11-02", tz="UTC")]})
    days = pd.date_range("2026-11-02", periods=20, freq="D", tz="UTC")
    for d0, d1 in zip(days[:-1], days[1:]):
        cache.adopt([("gpu_telemetry", "ts", d0, d1, frame), ("goodput_leaves", "partition_start", d0, d1, frame)])
    assert [e[2] for e in cache.window(["gpu_telemetry"], days[-2], days[-1])] == [days[-2]]
    assert not cache.window(["gpu_telemetry"], days[-3], days[-2])  # the day before: gone
    assert not cache.window(["goodput_leaves"], days[-3], days[-2])  # written, handed on, never read here
    history = stage_cache(diagnosis)
    for d0, d1 in zip(days[:-1], days[1:]):
        history.adopt([("kpi_values", "partition_start", d0, d1, frame)])
    assert sum(bool(history.window(["kpi_values"], d0, d1)) for d0, d1 in zip(days[:-1], days[1:])) == 16


def test_a_file_over_the_reject_share_costs_only_its_partition_in_the_dagster_run_staged_or_not(zones, tmp_path):
    """A file with more than ERROR_REJECT_SHARE of its rows rejected is judged on its own partition: quarantined
    whole (missing data), the check WARNs, and the Dagster run lands every other partition, in one process and
    pipelined (before, the share was the run's: a blocking ERROR failed the day's whole single-run backfill)."""
    from gpu_health.defs.common import ERROR_REJECT_SHARE

    landing = tmp_path / "landing"
    shutil.copytree(zones[0], landing)
    bad = landing / "gpu_telemetry" / "2026-11-03" / "2330.parquet"
    frame = pd.read_parquet(bad)
    frame["gpu_util_pct"] = 150.0  # every row of one of the first day's 12 files: 1/12 of its rows
    frame.to_parquet(bad, index=False)
    assert 1 / 12 > ERROR_REJECT_SHARE
    for workers in (1, 3):
        url = f"sqlite:///{tmp_path}/w{workers}.db"
        summary = run(START, END, landing=str(landing), warehouse=url, quiet=True, workers=workers)
        assert not summary.get("failed_partitions"), summary
        assert str(bad) in [f["file"] for f in summary["quarantined_files"]]
        states = Warehouse(url).read_window("goodput_states")
        assert states["partition_start"].nunique() == int((pd.Timestamp(END) - pd.Timestamp(START)) / pd.Timedelta(minutes=5))

"""The 5-minute sensor: which partitions it requests, and what its cursor remembers.

Two layers: the pure planner (``gpu_health.steps.readiness.plan_requests``) against a
real ``LandingSource`` in a tmp dir, with "now" passed in; and the Dagster
sensor of the assembled code location through ``dg.build_sensor_context``,
with "now" pinned by ``dg.partition_loading_context(effective_dt=...)``.

Landing files here are zero-row files of the full schema (a partition in which
nothing happened): readiness depends on which files exist and their versions,
not on their rows.
"""

import functools
import json
from dataclasses import replace

import dagster as dg
import pandas as pd
import pytest

from gpu_health.contracts import FIVE_MINUTE_SOURCES, empty_frame
from gpu_health.defs.build import build_definitions
from gpu_health.defs.resources import TelemetrySourceResource, WarehouseIOManager, WarehouseResource
from gpu_health.landing import partition_path, write_partition
from gpu_health.defs.telemetry.sensors import build_partition_sensor, latest_partition_runs
from gpu_health.partitions import five_minute_partitions
from gpu_health.steps.readiness import (Correction, PartitionRun, RangeRun, Request, SensorCursor, Settle, data_version,
                                  plan_range_retries, plan_rederive, plan_requests, plan_retries, plan_settles)
from gpu_health.settings import Settings
from gpu_health.sim.scenario import default_scenario
from gpu_health.sources.landing import LandingSource
from gpu_health.sources.simulator import SimulatorSource

T0 = pd.Timestamp("2026-11-03T14:00:00Z")
FIVE = pd.Timedelta(minutes=5)
GRACE = pd.Timedelta(seconds=60)
PLAN = {"partitions_start": T0, "grace": GRACE, "lookback": pd.Timedelta(hours=24),
        "initial_lookback": pd.Timedelta(minutes=60), "max_requests": 48}


def at(minutes: float) -> pd.Timestamp:
    """T0 + ``minutes``."""
    return T0 + pd.Timedelta(minutes=minutes)


def key(minutes: float) -> str:
    return at(minutes).strftime("%Y-%m-%d-%H:%M")


@functools.cache
def _zero_rows(table: str) -> bytes:
    return empty_frame(table).to_parquet(index=False)


def land(root, start: pd.Timestamp, tables=FIVE_MINUTE_SOURCES) -> None:
    """Every (or the given) 5-minute source file of the partition starting at ``start``: zero rows."""
    for table in tables:
        path = partition_path(root, table, start)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_zero_rows(table))


def one_change(ts: pd.Timestamp) -> pd.DataFrame:
    """A change_events file holding one change (a replacement for a zero-row file)."""
    return pd.DataFrame([{"event_id": "chg-1", "ts": ts, "kind": "kernel_upgrade", "scope": "eu-west",
                          "from_version": "6.8.0-49-generic", "to_version": "6.8.0-51-generic",
                          "description": "late correction"}])


def tick(source, cursor_json: str | None, now: pd.Timestamp, **overrides):
    """One tick as the sensor runs it: cursor text in, (requests, cursor text) out."""
    requests, cursor = plan_requests(source, SensorCursor.loads(cursor_json), now=now, **{**PLAN, **overrides})
    return requests, cursor.dumps()


def keys(requests) -> list[str]:
    return [r.partition_key for r in requests]


def next_start(cursor_json: str) -> pd.Timestamp:
    return SensorCursor.loads(cursor_json).next_start


@pytest.fixture
def landing(tmp_path):
    root = tmp_path / "landing"
    root.mkdir()
    return root


@pytest.fixture
def source(landing) -> LandingSource:
    return LandingSource(landing)


# --- the pure planner ----------------------------------------------------------------------
def test_new_files_give_one_request_per_ready_partition(landing, source):
    for m in (0, 5, 10):
        land(landing, at(m))
    requests, cursor = tick(source, None, now=at(16.5))
    assert keys(requests) == [key(0), key(5), key(10)]
    assert len({r.run_key for r in requests}) == 3
    assert all(r.run_key == f"{r.partition_key}@{r.version}" for r in requests)
    assert next_start(cursor) == at(15)

    # the next tick with nothing new requests nothing and keeps the cursor
    again, cursor2 = tick(source, cursor, now=at(19))
    assert again == []
    assert next_start(cursor2) == at(15)


def test_missing_file_holds_the_cursor_later_partitions_still_run_and_late_file_is_requested(landing):
    source = LandingSource(landing, absent_after="1h")  # the gpu file stays late (not absent) throughout
    land(landing, at(0))
    land(landing, at(5), [t for t in FIVE_MINUTE_SOURCES if t != "gpu_telemetry"])  # gpu file late
    land(landing, at(10))
    requests, cursor = tick(source, None, now=at(16.5))
    assert keys(requests) == [key(0), key(10)]
    assert next_start(cursor) == at(5), "a partition with a missing file must hold the cursor"

    land(landing, at(15))
    requests, cursor = tick(source, cursor, now=at(21.5))
    assert keys(requests) == [key(15)]  # 14:00 and 14:10 are not requested twice
    assert next_start(cursor) == at(5)

    land(landing, at(5), ["gpu_telemetry"])  # the late file arrives
    requests, cursor = tick(source, cursor, now=at(23))
    assert keys(requests) == [key(5)]
    assert next_start(cursor) == at(20), "once the gap is filled the cursor moves past every run partition"

    requests, cursor = tick(source, cursor, now=at(24))
    assert requests == []


def test_replaced_file_is_requested_again_with_a_new_run_key(landing, source):
    land(landing, at(0))
    land(landing, at(5))
    first, cursor = tick(source, None, now=at(11))
    assert keys(first) == [key(0), key(5)]

    # a corrected file replaces 14:00's (different content: one change event instead of none)
    write_partition(landing, "change_events", at(0), one_change(at(2)))
    second, cursor = tick(source, cursor, now=at(12))
    assert keys(second) == [key(0)]
    assert second[0].run_key != first[0].run_key
    assert second[0].version != first[0].version

    # the replaced data is not requested a third time
    third, cursor = tick(source, cursor, now=at(13))
    assert third == []


def test_unchanged_data_is_never_requested_twice(landing):
    source = LandingSource(landing, absent_after="1h")  # the partitions after 14:25 stay late, not absent
    for m in range(0, 30, 5):
        land(landing, at(m))
    seen: list[str] = []
    cursor = None
    for now_min in [7, 12, 16.5, 21, 22, 31.5, 40, 40, 55]:  # incl. a repeated tick at the same time
        requests, cursor = tick(source, cursor, now=at(now_min))
        seen += [r.run_key for r in requests]
    assert len(seen) == len(set(seen)) == 6
    assert sorted(r.split("@")[0] for r in seen) == [key(m) for m in range(0, 30, 5)]


def test_grace_period_is_respected(landing, source):
    land(landing, at(0))
    # the partition closes at 14:05; with a 60 s grace it is ready at 14:06, not a second before
    requests, cursor = tick(source, None, now=at(6) - pd.Timedelta(seconds=1))
    assert requests == []
    assert next_start(cursor) == at(0)
    requests, cursor = tick(source, cursor, now=at(6))
    assert keys(requests) == [key(0)]
    # a longer grace delays it further
    requests, _ = tick(source, None, now=at(9), grace=pd.Timedelta(minutes=5))
    assert requests == []
    requests, _ = tick(source, None, now=at(10), grace=pd.Timedelta(minutes=5))
    assert keys(requests) == [key(0)]
    assert data_version(source, at(0), at(6) - pd.Timedelta(seconds=1), GRACE) is None
    assert data_version(source, at(0), at(6), GRACE) is not None


def test_max_requests_caps_a_tick_without_skipping_partitions(landing, source):
    for m in range(0, 60, 5):
        land(landing, at(m))
    requested: list[str] = []
    cursor = None
    for _ in range(4):
        requests, cursor = tick(source, cursor, now=at(70), max_requests=5, initial_lookback=pd.Timedelta(hours=2))
        assert len(requests) <= 5
        requested += keys(requests)
    assert requested == [key(m) for m in range(0, 60, 5)]
    assert next_start(cursor) == at(60)


def test_a_fresh_cursor_starts_initial_lookback_back_not_the_whole_lookback(landing, source):
    # a landing zone that already holds two hours when the sensor is first turned on
    for m in range(-120, 15, 5):
        land(landing, at(m))
    requests, cursor = tick(source, None, now=at(16.5), partitions_start=at(-24 * 60),
                            initial_lookback=pd.Timedelta(minutes=30), lookback=pd.Timedelta(hours=24))
    assert keys(requests) == [key(m) for m in range(-15, 15, 5)]  # 13:45 .. 14:10
    assert next_start(cursor) == at(15)


def test_versions_are_kept_for_the_lookbacks_worth_of_partitions_by_count(landing):
    source = LandingSource(landing, absent_after="1d")  # the later partitions stay late: no new record
    for m in range(0, 100, 5):
        land(landing, at(m))
    hour = {"lookback": pd.Timedelta(hours=1), "initial_lookback": pd.Timedelta(hours=2)}
    requests, cursor = tick(source, None, now=at(101.5), **hour)
    assert len(requests) == 20
    assert set(json.loads(cursor)["versions"]) == {key(m) for m in range(35, 100, 5)}  # the newest 13 = 1 h + 1
    # hours later, with nothing new run, the records are not dropped by the clock (a late partition could then
    # outlive them, and every partition after it would be requested again)
    _, cursor = tick(source, cursor, now=at(400), **hour)
    assert set(json.loads(cursor)["versions"]) == {key(m) for m in range(35, 100, 5)}


def test_cursor_json_round_trip():
    cursor = SensorCursor(at(15), {key(0): "a1b2", key(10): "c3d4"})
    text = cursor.dumps()
    assert json.loads(text) == {"next": "2026-11-03T14:15:00+00:00", "versions": {key(0): "a1b2", key(10): "c3d4"}}
    back = SensorCursor.loads(text)
    assert back == cursor
    assert back.next_start.tz is not None
    assert back.dumps() == text
    assert SensorCursor.loads(None) == SensorCursor.loads("") == SensorCursor()
    assert SensorCursor.loads(SensorCursor().dumps()) == SensorCursor()


def test_simulator_source_follows_the_clock():
    sim = SimulatorSource(default_scenario())
    requests, cursor = tick(sim, None, now=at(16.5))
    assert keys(requests) == [key(0), key(5), key(10)]
    assert {r.version for r in requests} == {"clock"}
    # the clock moves on: only the newly closed partition, and never one that has not closed + grace
    requests, cursor = tick(sim, cursor, now=at(21))
    assert keys(requests) == [key(15)]
    requests, cursor = tick(sim, cursor, now=at(21))
    assert requests == []
    requests, cursor = tick(sim, cursor, now=at(36.5))
    assert keys(requests) == [key(20), key(25), key(30)]
    assert next_start(cursor) == at(35)


# --- the Dagster sensor ----------------------------------------------------------------------
def _location(landing, tmp_path, partition_start: str = "2026-11-03-14:00"):
    """The code location over the ``landing`` zone and a SQLite warehouse in ``tmp_path``: (definitions, resources)."""
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    resources = {"warehouse": WarehouseResource(url=url), "warehouse_io_manager": WarehouseIOManager(url=url),
                 "source": TelemetrySourceResource(kind="landing", landing_dir=str(landing))}
    return build_definitions(Settings(partition_start=partition_start), resources), resources


@pytest.fixture
def sensor_and_resources(landing, tmp_path):
    defs, resources = _location(landing, tmp_path)
    return defs.resolve_sensor_def("five_minute_partition_sensor"), {"source": resources["source"]}, defs


def evaluate(sensor, resources, cursor, now: pd.Timestamp, defs, instance=None):
    # the definitions let Dagster resolve the partitioned run requests against five_minute_job; the
    # instance holds the runs the sensor reads to re-request failed partitions
    context = dg.build_sensor_context(cursor=cursor, resources=resources, definitions=defs,
                                      instance=instance or dg.DagsterInstance.ephemeral())
    with dg.partition_loading_context(effective_dt=now.to_pydatetime()):
        return sensor.evaluate_tick(context)


def test_dagster_sensor_requests_ready_partitions_and_keeps_its_cursor(landing, sensor_and_resources):
    sensor, resources, defs = sensor_and_resources
    assert sensor.job_name == "five_minute_job"
    land(landing, at(0))
    land(landing, at(5), [t for t in FIVE_MINUTE_SOURCES if t != "node_telemetry"])
    land(landing, at(10))

    result = evaluate(sensor, resources, None, now=at(16.5), defs=defs)
    assert [r.partition_key for r in result.run_requests] == [key(0), key(10)]
    for r in result.run_requests:
        assert r.run_key == f"{r.partition_key}@{r.tags['gpu_health/data_version']}"
    assert next_start(result.cursor) == at(5)

    # nothing new: a skip, same cursor
    idle = evaluate(sensor, resources, result.cursor, now=at(18), defs=defs)
    assert not idle.run_requests
    assert idle.skip_message and "2026-11-03 14:05" in idle.skip_message
    assert next_start(idle.cursor) == at(5)

    # the late file arrives, and a 14:10 file is replaced
    land(landing, at(5), ["node_telemetry"])
    old_run_key = {r.partition_key: r.run_key for r in result.run_requests}[key(10)]
    write_partition(landing, "change_events", at(10), one_change(at(11)))
    late = evaluate(sensor, resources, idle.cursor, now=at(19), defs=defs)
    assert sorted(r.partition_key for r in late.run_requests) == [key(5), key(10)]
    assert {r.partition_key: r.run_key for r in late.run_requests}[key(10)] != old_run_key
    assert next_start(late.cursor) == at(15)


def test_dagster_sensor_honours_the_pinned_clock_and_grace(landing, sensor_and_resources):
    sensor, resources, defs = sensor_and_resources
    land(landing, at(0))
    assert partition_path(landing, "gpu_telemetry", at(0)).exists()
    early = evaluate(sensor, resources, None, now=at(5.5), defs=defs)  # closed, but within the 60 s grace
    assert not early.run_requests
    ready = evaluate(sensor, resources, early.cursor, now=at(6), defs=defs)
    assert [r.partition_key for r in ready.run_requests] == [key(0)]


def test_dagster_sensor_with_the_simulator_follows_the_pinned_clock(tmp_path):
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    source = TelemetrySourceResource(kind="simulator")
    defs = build_definitions(Settings(partition_start="2026-11-03-14:00"), {
        "warehouse": WarehouseResource(url=url), "warehouse_io_manager": WarehouseIOManager(url=url), "source": source})
    sensor = defs.resolve_sensor_def("five_minute_partition_sensor")
    first = evaluate(sensor, {"source": source}, None, now=at(16.5), defs=defs)
    assert [r.partition_key for r in first.run_requests] == [key(0), key(5), key(10)]
    assert {r.tags["gpu_health/data_version"] for r in first.run_requests} == {"clock"}
    later = evaluate(sensor, {"source": source}, first.cursor, now=at(26.5), defs=defs)
    assert [r.partition_key for r in later.run_requests] == [key(15), key(20)]


# --- failed partitions are requested again -----------------------------------------------------------
def _run(key_: str, version: str | None, status: str, *, attempt: int = 0, ended_min: float | None = None):
    return PartitionRun(key_, version, attempt, status, None if ended_min is None else at(ended_min))


def test_a_failed_partition_is_retried_after_backoff_with_its_own_run_key():
    versions = {key(0): "v0", key(5): "v5"}
    latest = [_run(key(0), "v0", "success", ended_min=8), _run(key(5), "v5", "failure", ended_min=12)]
    backoff = pd.Timedelta(minutes=1)
    assert plan_retries(latest, versions, now=at(12.5), max_retries=3, backoff=backoff) == []  # backing off
    (retry,) = plan_retries(latest, versions, now=at(13), max_retries=3, backoff=backoff)
    assert (retry.partition_key, retry.version, retry.attempt) == (key(5), "v5", 1)
    assert retry.run_key == f"{key(5)}@v5#retry1" != Request(key(5), "v5").run_key


def test_retries_back_off_exponentially_and_stop_at_the_bound():
    versions = {key(5): "v5"}
    backoff = pd.Timedelta(minutes=1)
    second = [_run(key(5), "v5", "failure", attempt=1, ended_min=20)]
    assert plan_retries(second, versions, now=at(21.5), max_retries=3, backoff=backoff) == []  # waits 2 min
    assert [r.attempt for r in plan_retries(second, versions, now=at(22), max_retries=3, backoff=backoff)] == [2]
    last = [_run(key(5), "v5", "failure", attempt=3, ended_min=20)]
    assert plan_retries(last, versions, now=at(120), max_retries=3, backoff=backoff) == []  # stays failed


@pytest.mark.parametrize("run", [
    _run(key(5), "v5", "success", ended_min=12),      # it worked
    _run(key(5), "v5", "canceled", ended_min=12),     # stopped on purpose
    _run(key(5), "v5", "in_progress"),                # still running
    _run(key(5), "v4", "failure", ended_min=12),      # failed on data since replaced: plan_requests asks anew
    _run(key(5), None, "failure", ended_min=12),      # a manual run, not the sensor's
    _run(key(10), "v10", "failure", ended_min=12),    # no record in the cursor (past the lookback)
])
def test_only_a_failure_on_the_data_the_partition_still_holds_is_retried(run):
    assert plan_retries([run], {key(5): "v5"}, now=at(60), max_retries=3, backoff=pd.Timedelta(minutes=1)) == []


def test_dagster_sensor_requests_a_failed_partition_again_until_it_succeeds(landing, tmp_path):
    defs, resources = _location(landing, tmp_path)
    job = defs.resolve_job_def("five_minute_job")
    sensor = build_partition_sensor(job, five_minute_partitions("2026-11-03-14:00"), max_retries=2,
                                    retry_backoff_seconds=0)
    instance = dg.DagsterInstance.ephemeral()

    def record(request, status):
        """The run Dagster launched for ``request``, ended with ``status``."""
        tags = {**request.tags, "dagster/partition": request.partition_key}
        run = instance.create_run_for_job(job_def=job, tags=tags, status=dg.DagsterRunStatus.STARTED)
        if status == "failure":
            instance.report_run_failed(run, message="database connection lost")
        else:
            instance.handle_run_event(run.run_id, dg.DagsterEvent(
                event_type_value="PIPELINE_SUCCESS", job_name=job.name, message="ok"))

    for m in (0, 5):
        land(landing, at(m))
    first = evaluate(sensor, {"source": resources["source"]}, None, at(11.5), defs, instance)
    by_key = {r.partition_key: r for r in first.run_requests}
    assert sorted(by_key) == [key(0), key(5)]
    record(by_key[key(0)], "success")
    record(by_key[key(5)], "failure")
    runs = {r.partition_key: r for r in latest_partition_runs(instance, job.name, pd.Timestamp.now(tz="UTC") - FIVE)}
    assert {k: (r.status, r.version, r.attempt) for k, r in runs.items()} == {
        key(0): ("success", by_key[key(0)].tags["gpu_health/data_version"], 0),
        key(5): ("failure", by_key[key(5)].tags["gpu_health/data_version"], 0)}
    assert runs[key(5)].ended_at is not None

    cursor = first.cursor
    for attempt in (1, 2):  # the failed partition, and only it, again; each retry its own run key
        tick_ = evaluate(sensor, {"source": resources["source"]}, cursor, at(12 + attempt), defs, instance)
        (retry,) = tick_.run_requests
        assert retry.partition_key == key(5)
        assert retry.run_key == f"{by_key[key(5)].run_key}#retry{attempt}"
        assert retry.tags["gpu_health/retry"] == str(attempt)
        record(retry, "failure")
        cursor = tick_.cursor
    bounded = evaluate(sensor, {"source": resources["source"]}, cursor, at(16), defs, instance)
    assert not bounded.run_requests  # max_retries=2 spent: it stays failed, visible in Dagster


def test_routed_source_waits_for_a_late_producer_then_degrades(landing):
    """Slurm dumps absent: the partition waits absent_after past its end, then runs (not forever held)."""
    from gpu_health.sources.registry import RoutedSource
    from gpu_health.sources.slurm import SlurmSource

    slurm_dir = landing.parent / "slurm"
    slurm_dir.mkdir()
    clock = {"now": at(0)}
    routed = RoutedSource(SlurmSource(slurm_dir, absent_after="10min", clock=lambda: clock["now"]), LandingSource(landing))
    others = [t for t in FIVE_MINUTE_SOURCES if t not in ("scheduler_events", "job_metadata")]
    for m in (0, 5):
        land(landing, at(m), others)
    clock["now"] = at(12)  # partition 0 closed 7 min ago: the dump may still come
    requests, cursor = tick(routed, None, now=clock["now"])
    assert requests == [] and next_start(cursor) == at(0)
    clock["now"] = at(15)  # 10 min past its end with no dump: missing data, it runs; partition 5 still waits
    requests, cursor = tick(routed, cursor, now=clock["now"])
    assert keys(requests) == [key(0)] and next_start(cursor) == at(5)
    # a dump covering both arrives: partition 5 is ready at once, and the degraded partition 0 runs
    # again with the scheduler's data (its version moved from "closed" to "complete", like a late file)
    (slurm_dir / "sacct_now.txt").write_text("JobID|State|Submit\n")
    clock["now"] = at(16)
    requests, cursor = tick(routed, cursor, now=clock["now"])
    assert keys(requests) == [key(0), key(5)]


# --- a correction re-derives the later partitions ----------------------------------------------------------------
def test_a_replaced_file_plans_a_range_over_the_later_requested_partitions_up_to_the_bound(landing, source):
    for m in (0, 5, 10, 15):
        land(landing, at(m))
    first, cursor = tick(source, None, now=at(21))
    before = SensorCursor.loads(cursor).versions
    write_partition(landing, "change_events", at(5), one_change(at(6)))  # 14:05 corrected
    fix, _ = tick(source, cursor, now=at(22))
    assert keys(fix) == [key(5)]
    day = pd.Timedelta(days=1)
    (rng,) = plan_rederive(fix, before, bound=day)
    assert (rng.first, rng.last, rng.corrected, rng.stale) == (key(5), key(15), (key(5),), None)
    assert rng.run_key.startswith(f"rederive:{key(5)}..{key(15)}@")
    # past the bound: the requested partitions left are stale
    (short,) = plan_rederive(fix, before, bound=FIVE)
    assert (short.last, short.stale) == (key(10), (key(15), key(15)))
    assert short.stale_report() == {"corrected": key(5), "from": key(15), "to": key(15), "partitions": 1}
    # two corrections of one tick: one range from the earliest; a first run or the last partition: none
    write_partition(landing, "change_events", at(10), one_change(at(11)))
    write_partition(landing, "change_events", at(0), one_change(at(1)))
    both, _ = tick(source, cursor, now=at(23))
    (joined,) = plan_rederive(both, before, bound=day)
    assert (joined.first, joined.last, joined.corrected) == (key(0), key(15), (key(0), key(5), key(10)))
    assert plan_rederive(first, {}, bound=day) == []
    write_partition(landing, "change_events", at(15), one_change(at(16)))
    last, _ = tick(source, cursor, now=at(24))
    assert [r.first for r in plan_rederive([r for r in last if r.partition_key == key(15)], before, bound=day)] == []


def test_dagster_sensor_requests_the_correction_and_the_re_derivation_of_the_later_partitions(landing,
                                                                                              sensor_and_resources):
    sensor, resources, defs = sensor_and_resources
    for m in (0, 5, 10, 15):
        land(landing, at(m))
    first = evaluate(sensor, resources, None, now=at(21), defs=defs)
    assert [r.partition_key for r in first.run_requests] == [key(0), key(5), key(10), key(15)]
    write_partition(landing, "change_events", at(5), one_change(at(6)))
    fix = evaluate(sensor, resources, first.cursor, now=at(22), defs=defs)
    single, rng = fix.run_requests
    assert single.partition_key == key(5) and single.tags["gpu_health/judged_later"] == "true"
    assert rng.partition_key is None and rng.run_key.startswith(f"rederive:{key(5)}..{key(15)}@")
    assert (rng.tags["dagster/asset_partition_range_start"], rng.tags["dagster/asset_partition_range_end"]) == (
        key(5), key(15))
    assert rng.tags["gpu_health/judged_later"] == "true" and rng.tags["gpu_health/corrected"] == key(5)
    # Dagster runs the range as one run of the 5-minute job over those partitions
    result = defs.resolve_job_def("five_minute_job").execute_in_process(
        instance=dg.DagsterInstance.ephemeral(), tags=rng.tags, raise_on_error=False)
    assert result.success
    planned = {e.partition for e in result.get_asset_materialization_events() if e.asset_key.path == ["goodput_states"]}
    assert sorted(planned) == [key(5), key(10), key(15)]
    assert not evaluate(sensor, resources, fix.cursor, now=at(23), defs=defs).run_requests  # asked once


def test_dagster_sensor_marks_the_partitions_past_the_bound_stale(landing, sensor_and_resources, monkeypatch):
    from gpu_health.steps import diagnosis as D

    sensor, resources, defs = sensor_and_resources
    for m in (0, 5, 10, 15):
        land(landing, at(m))
    first = evaluate(sensor, resources, None, now=at(21), defs=defs)
    monkeypatch.setattr(D, "ALERT_LOOKAHEAD", FIVE)
    write_partition(landing, "change_events", at(0), one_change(at(1)))
    fix = evaluate(sensor, resources, first.cursor, now=at(22), defs=defs)
    _, rng = fix.run_requests
    assert (rng.tags["dagster/asset_partition_range_end"], rng.tags["gpu_health/stale"]) == (
        key(5), f"{key(10)}..{key(15)}")
    assert json.loads(fix.cursor)["stale"] == {"corrected": key(0), "from": key(10), "to": key(15), "partitions": 2}


# --- a failed re-derivation is requested again; a correction settles the finance days it touched ------------------
def _recorder(instance: dg.DagsterInstance, defs):
    """``record(request, status, job)``: the run Dagster launched for ``request`` (a partition's or a range's of the
    5-minute job; a daily one), started, then ended with ``status``."""
    def record(request, status, job="five_minute_job"):
        job = defs.resolve_job_def(job)
        tags = {**request.tags, **({"dagster/partition": request.partition_key} if request.partition_key else {})}
        run = instance.create_run_for_job(job_def=job, tags=tags)
        instance.handle_run_event(run.run_id, dg.DagsterEvent(
            event_type_value="PIPELINE_START", job_name=job.name, message="started"))
        if status == "failure":
            instance.report_run_failed(run, message="database connection lost")
        elif status == "success":
            instance.handle_run_event(run.run_id, dg.DagsterEvent(
                event_type_value="PIPELINE_SUCCESS", job_name=job.name, message="ok"))
    return record


def _a_range():
    """The range correcting 14:05 after 14:00 .. 14:15 ran, and the versions the cursor holds after it."""
    before = {key(m): f"v{m}" for m in (0, 5, 10, 15)}
    fix = Request(key(5), "v5-corrected")
    (rng,) = plan_rederive([fix], before, bound=pd.Timedelta(days=1))
    return rng, {**before, key(5): fix.version}


def test_a_failed_re_derivation_is_retried_after_backoff_until_the_bound():
    rng, versions = _a_range()
    backoff = pd.Timedelta(minutes=1)
    failed = [RangeRun(rng, "failure", at(30))]
    assert plan_range_retries(failed, versions, now=at(30.5), max_retries=3, backoff=backoff) == []  # backing off
    (retry,) = plan_range_retries(failed, versions, now=at(31), max_retries=3, backoff=backoff)
    assert (retry.first, retry.last, retry.version, retry.corrected, retry.attempt) == (
        rng.first, rng.last, rng.version, rng.corrected, 1)
    assert retry.run_key == f"{rng.run_key}#retry1" and retry.correction_key == rng.run_key
    again = [RangeRun(retry, "failure", at(40))]
    assert plan_range_retries(again, versions, now=at(41.5), max_retries=3, backoff=backoff) == []  # waits 2 min
    assert [r.attempt for r in plan_range_retries(again, versions, now=at(42), max_retries=3, backoff=backoff)] == [2]
    spent = [RangeRun(replace(rng, attempt=3), "failure", at(40))]
    assert plan_range_retries(spent, versions, now=at(120), max_retries=3, backoff=backoff) == []  # stays failed


@pytest.mark.parametrize("status, versions_after", [
    ("success", {}), ("canceled", {}), ("in_progress", {}),
    ("failure", {key(5): "v5-corrected-again"}),  # corrected again: plan_rederive plans a range of its own
])
def test_only_a_re_derivation_failed_on_the_data_it_was_planned_with_is_retried(status, versions_after):
    rng, versions = _a_range()
    latest = [RangeRun(rng, status, None if status == "in_progress" else at(30))]
    assert plan_range_retries(latest, {**versions, **versions_after}, now=at(60), max_retries=3,
                              backoff=pd.Timedelta(minutes=1)) == []
    past_records = {k: v for k, v in versions.items() if k != key(5)}  # its corrected partition's record dropped
    assert plan_range_retries([RangeRun(rng, "failure", at(30))], past_records, now=at(60), max_retries=3,
                              backoff=pd.Timedelta(minutes=1)) == []


def test_a_correction_settles_again_only_the_touched_days_settled_before_it_ended():
    from gpu_health.steps.rederive import finance_days

    rng, _ = _a_range()
    fix = Correction(rng.correction_key, rng.first, rng.last, at(40))
    touched = [d.strftime("%Y-%m-%d") for d in finance_days(at(5), at(20))]
    untouched = (pd.Timestamp(touched[0]) - pd.Timedelta(days=1)).strftime("%Y-%m-%d")
    settled, open_day = touched[0], touched[-1]  # the day before T0 settled; T0's own day not yet
    assert settled != open_day

    def daily(day, status, began):
        return PartitionRun(day, None, 0, status, None if status == "in_progress" else at(began + 1), at(began))

    before = [daily(settled, "success", -600), daily(untouched, "success", -2000)]
    (settle,) = plan_settles([fix], before, finance_days=finance_days)
    assert settle == Settle(settled, rng.correction_key)
    assert settle.run_key == f"settle:{settled}@{rng.correction_key}"
    # a failed settle wrote some of its tables: settled too
    assert plan_settles([fix], [daily(settled, "failure", -600)], finance_days=finance_days) == [settle]
    # a daily run begun after the correction ended read the corrected data; one still running is waited for
    assert plan_settles([fix], [daily(settled, "success", 45)], finance_days=finance_days) == []
    assert plan_settles([fix], [daily(settled, "in_progress", 35)], finance_days=finance_days) == []
    # each correction settles the day once: a second correction is another run key
    other = Correction(Request(key(15), "v15-corrected").run_key, key(15), key(15), at(50))
    both = plan_settles([fix, other], before, finance_days=finance_days)
    assert [s.run_key for s in both] == sorted({settle.run_key, f"settle:{settled}@{key(15)}@v15-corrected"})


@pytest.fixture
def two_days(landing, tmp_path):
    """The code location with daily partitions from the day before T0, an instance and its ``record``."""
    defs, resources = _location(landing, tmp_path, "2026-11-02-00:00")
    instance = dg.DagsterInstance.ephemeral()
    return defs, {"source": resources["source"]}, instance, _recorder(instance, defs)


def test_dagster_sensor_requests_a_failed_re_derivation_again_until_the_bound(landing, two_days):
    defs, resources, instance, record = two_days
    job = defs.resolve_job_def("five_minute_job")
    sensor = build_partition_sensor(job, five_minute_partitions("2026-11-02-00:00"), max_retries=2,
                                    retry_backoff_seconds=0)
    for m in (0, 5, 10, 15):
        land(landing, at(m))
    first = evaluate(sensor, resources, SensorCursor(at(0)).dumps(), at(21), defs, instance)
    for r in first.run_requests:
        record(r, "success")
    write_partition(landing, "change_events", at(5), one_change(at(6)))
    fix = evaluate(sensor, resources, first.cursor, at(22), defs, instance)
    single, rng = fix.run_requests
    record(single, "success")
    record(rng, "failure")  # the database restarted during the re-derivation
    cursor = fix.cursor
    for attempt in (1, 2):  # the range again, as it was, each retry its own run key
        tick_ = evaluate(sensor, resources, cursor, at(22 + attempt), defs, instance)
        (retry,) = tick_.run_requests
        assert retry.partition_key is None and retry.run_key == f"{rng.run_key}#retry{attempt}"
        assert retry.tags == {**rng.tags, "gpu_health/retry": str(attempt)}
        record(retry, "failure")
        cursor = tick_.cursor
    assert not evaluate(sensor, resources, cursor, at(25), defs, instance).run_requests  # max_retries=2 spent
    # a correction needing no range (the last partition) is one on its retries too: their success settles finance
    write_partition(landing, "change_events", at(15), one_change(at(16)))
    last = evaluate(sensor, resources, cursor, at(26), defs, instance)
    (alone,) = last.run_requests
    record(alone, "failure")
    (retry,) = evaluate(sensor, resources, last.cursor, at(27), defs, instance).run_requests
    assert retry.run_key == f"{alone.run_key}#retry1"
    assert retry.tags["gpu_health/corrected"] == alone.tags["gpu_health/corrected"] == key(15)


def test_dagster_settle_sensor_settles_the_touched_days_already_settled_once_per_correction(landing, two_days):
    from gpu_health.steps.rederive import finance_days

    defs, resources, instance, record = two_days
    five = defs.resolve_sensor_def("five_minute_partition_sensor")
    settle = defs.resolve_sensor_def("finance_settle_sensor")
    assert settle.job_name == "daily_job" and settle.default_status == dg.DefaultSensorStatus.RUNNING
    days = [d.strftime("%Y-%m-%d") for d in finance_days(at(5), at(20))]
    settled, open_day = days[0], days[-1]  # the day before T0 settled by its schedule; T0's day still open
    assert settled != open_day
    record(dg.RunRequest(partition_key=settled), "success", "daily_job")

    def settles(now):
        return evaluate(settle, {}, None, now, defs, instance)

    for m in (0, 5, 10, 15):
        land(landing, at(m))
    first = evaluate(five, resources, SensorCursor(at(0)).dumps(), at(21), defs, instance)
    for r in first.run_requests:
        record(r, "success")
    assert not settles(at(21)).run_requests  # first runs correct nothing

    write_partition(landing, "change_events", at(5), one_change(at(6)))
    fix = evaluate(five, resources, first.cursor, at(22), defs, instance)
    single, rng = fix.run_requests
    record(single, "success")
    assert not settles(at(22)).run_requests  # the re-derivation has not run yet
    record(rng, "failure")
    assert not settles(at(23)).run_requests  # nor succeeded
    record(dg.RunRequest(run_key=f"{rng.run_key}#retry1", tags={**rng.tags, "gpu_health/retry": "1"}), "success")
    (request,) = settles(at(24)).run_requests
    assert request.partition_key == settled  # the open day waits for its schedule
    assert request.run_key == f"settle:{settled}@{rng.run_key}"  # the correction's, not its retry's
    record(request, "success", "daily_job")
    assert not settles(at(25)).run_requests  # settled again: once

    # a correction of the last partition needs no range: its own run settles the days it touched
    write_partition(landing, "change_events", at(15), one_change(at(16)))
    last = evaluate(five, resources, fix.cursor, at(26), defs, instance)
    (alone,) = last.run_requests
    assert alone.partition_key == key(15) and alone.tags["gpu_health/corrected"] == key(15)
    record(alone, "success")
    (again,) = settles(at(27)).run_requests
    assert (again.partition_key, again.run_key) == (settled, f"settle:{settled}@{alone.run_key}")

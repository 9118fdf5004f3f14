"""The 5-minute sensor: one run per closed partition whose data is ready.

Readiness comes from :mod:`gpu_health.readiness` (pure, testable without
Dagster). The cursor keeps the oldest partition not yet requested and the data
version each recent partition was run with, so that

* no partition is skipped: the cursor only moves past a partition once it has
  been requested (a partition whose files are late holds it back while later
  ready partitions still run, until its source's ``absent_after``: then it runs
  without them, recorded in ``source_gaps``); the cursor says which partition it
  waits for, which files and until when (``waiting``; the SkipReason too);
* a late or replaced file triggers the partition again (its version changes);
* the versions kept are the newest ``lookback``'s worth of partitions, by count,
  so a partition is never requested again because its record was dropped;
* the same data never runs twice (run_key = partition + data version);
* a partition whose latest run failed is requested again, with backoff and a
  bound (``readiness.plan_retries``; run_key ``partition@version#retryN``), so a
  fault that outlasts the steps' own retries (a database restarting) heals
  without a changed file;
* a replaced file (a correction) re-derives what it changes: besides its own
  partition's run, one single-run range run of the 5-minute job from the
  corrected partition over the partitions already requested after it, up to the
  bound (``readiness.plan_rederive``, ``steps.rederive.default_bound``; run_key ``rederive:first..last@digest``),
  so they are computed again in order from the corrected data. The range holds
  the corrected partition itself, so it is right in whichever order Dagster
  runs the two (both write the same rows for it), and the partition's own run
  keeps its record for retries; that run carries ``judged_later`` (the range
  re-derives the alerts after it). Partitions past the bound are named in the
  range's tags, the cursor (``stale``) and the log.

The clock it judges readiness by is Dagster's partition-loading time, so a test
pins it with ``dg.partition_loading_context(effective_dt=...)``; the retry
backoff is judged by the wall clock, the clock the runs' end times are on.
"""

import dagster as dg
import pandas as pd

from gpu_health.defs.common import JUDGED_LATER_TAG, RANGE_END_TAG, RANGE_START_TAG
from gpu_health.defs.resources import TelemetrySourceResource
from gpu_health.readiness import (PartitionRun, SensorCursor, describe_wait, plan_rederive, plan_requests,
                                  plan_retries)

VERSION_TAG = "gpu_health/data_version"
RETRY_TAG = "gpu_health/retry"
CORRECTED_TAG = "gpu_health/corrected"  # a re-derivation range: the corrected partitions it starts from
STALE_TAG = "gpu_health/stale"  # and the requested partitions past its bound, left stale ("first..last")
_PARTITION_TAG = "dagster/partition"
_STATUS = {dg.DagsterRunStatus.SUCCESS: "success", dg.DagsterRunStatus.FAILURE: "failure",
           dg.DagsterRunStatus.CANCELED: "canceled", dg.DagsterRunStatus.CANCELING: "canceled"}


def latest_partition_runs(instance: dg.DagsterInstance, job_name: str, since: pd.Timestamp,
                          limit: int = 10_000) -> list[PartitionRun]:
    """The newest run of ``job_name`` per partition key, among the runs created since ``since``."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(job_name=job_name, created_after=since.to_pydatetime()), limit=limit)
    latest: dict[str, PartitionRun] = {}
    for record in sorted(records, key=lambda r: r.create_timestamp, reverse=True):
        run = record.dagster_run
        key = run.tags.get(_PARTITION_TAG)
        if key is None or key in latest:
            continue
        try:
            attempt = int(run.tags.get(RETRY_TAG, 0))
        except ValueError:
            attempt = 0
        ended = pd.Timestamp(record.end_time, unit="s", tz="UTC") if record.end_time else None
        latest[key] = PartitionRun(key, run.tags.get(VERSION_TAG), attempt,
                                   _STATUS.get(run.status, "in_progress"), ended)
    return list(latest.values())


def build_partition_sensor(job, partitions_def, *, grace_seconds: int = 60,
                           lookback_hours: int = 24, initial_lookback_minutes: int = 60,
                           max_requests: int = 48, max_retries: int = 3,
                           retry_backoff_seconds: int = 60) -> dg.SensorDefinition:
    """``max_retries`` re-requests per failed partition, after ``retry_backoff_seconds`` x 1, 2, 4, ...
    (with the steps' own 3 retries, a run survives a fault of about a minute, the sensor one of
    about 7 minutes: a database restart or a fail-over, longer than which a person should look)."""

    @dg.sensor(
        name="five_minute_partition_sensor", job=job, minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Requests a run of the 5-minute job for every closed partition whose source data is ready "
                    "(after a grace period), again when a partition's landing files arrive late or are replaced, "
                    f"and again (up to {max_retries} times, with backoff) when its latest run failed.",
    )
    def five_minute_partition_sensor(context: dg.SensorEvaluationContext, source: TelemetrySourceResource):
        # "now" is the partition-loading context's effective time: the wall clock on a real tick,
        # pinned in tests with `dg.partition_loading_context(effective_dt=...)` (stack-notes.md)
        with dg.partition_loading_context() as loading:
            now = pd.Timestamp(loading.effective_dt)
        now = now.tz_localize("UTC") if now.tzinfo is None else now.tz_convert("UTC")
        first = pd.Timestamp(partitions_def.start).tz_convert("UTC")
        cursor = SensorCursor.loads(context.cursor)
        lookback = pd.Timedelta(hours=lookback_hours)
        requests, new_cursor = plan_requests(
            source.get(), cursor, now=now, partitions_start=first, grace=pd.Timedelta(seconds=grace_seconds),
            lookback=lookback, initial_lookback=pd.Timedelta(minutes=initial_lookback_minutes),
            max_requests=max_requests,
        )
        wall = pd.Timestamp.now(tz="UTC")
        fresh = {r.partition_key for r in requests}
        retries = [r for r in plan_retries(latest_partition_runs(context.instance, job.name, wall - lookback),
                                           new_cursor.versions, now=wall, max_retries=max_retries,
                                           backoff=pd.Timedelta(seconds=retry_backoff_seconds))
                   if r.partition_key not in fresh]
        from gpu_health.steps.rederive import default_bound

        ranges = plan_rederive(requests, cursor.versions, bound=default_bound())
        corrected = {k for r in ranges for k in r.corrected}
        requests = requests + retries[:max(0, max_requests - len(requests))]
        for req in requests:
            tags = {VERSION_TAG: req.version, **({RETRY_TAG: str(req.attempt)} if req.attempt else {}),
                    **({JUDGED_LATER_TAG: "true"} if req.partition_key in corrected and not req.attempt else {})}
            yield dg.RunRequest(partition_key=req.partition_key, run_key=req.run_key, tags=tags)
        for rng in ranges:
            tags = {RANGE_START_TAG: rng.first, RANGE_END_TAG: rng.last, JUDGED_LATER_TAG: "true",
                    VERSION_TAG: rng.version, CORRECTED_TAG: ",".join(rng.corrected)}
            if rng.stale is not None:
                tags[STALE_TAG] = "..".join(rng.stale)
                new_cursor.stale = rng.stale_report()
                context.log.warning(f"correction of {rng.first}: re-derived up to {rng.last}; the partitions "
                                    f"{rng.stale[0]} .. {rng.stale[1]} past the bound keep rows of the old data")
            yield dg.RunRequest(run_key=rng.run_key, tags=tags)
        context.update_cursor(new_cursor.dumps())
        if new_cursor.passed_over and new_cursor.passed_over != cursor.passed_over:
            context.log.warning(f"passed over partition {new_cursor.passed_over['partition']}: "
                                f"{new_cursor.passed_over['reason']}")
        if not requests and not ranges:
            yield dg.SkipReason(describe_wait(new_cursor))

    return five_minute_partition_sensor

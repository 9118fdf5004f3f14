"""The 5-minute sensor: one run per closed partition whose data is ready.

Readiness comes from :mod:`gpu_health.steps.readiness` (pure, testable without
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
  range's tags, the cursor (``stale``) and the log. A correction that needs no
  range (no partition requested after it) carries ``gpu_health/corrected`` on
  its own run; a failed range is requested again as a failed partition is
  (``readiness.plan_range_retries``; run_key ``rederive:first..last@digest#retryN``).

Once a correction's run succeeds (its range's, or its own when it needs none),
``finance_settle_sensor`` requests ``daily_job`` for each finance day it touched
that was already settled (``readiness.plan_settles``: the days of
``steps.rederive.finance_days`` whose latest daily run began before the
correction ended; run_key ``settle:day@correction``), as the bulk path and
``gpu-health run`` settle the stored days again (``steps.rederive``). It is a
sensor of its own, on ``daily_job``, reading only the instance's run records:
the five-minute sensor keeps its one job, and settling can be paused apart.

The clock it judges readiness by is Dagster's partition-loading time, so a test
pins it with ``dg.partition_loading_context(effective_dt=...)``; the retry
backoff is judged by the wall clock, the clock the runs' end times are on.
"""

import dagster as dg
import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.defs.common import JUDGED_LATER_TAG, RANGE_END_TAG, RANGE_START_TAG
from gpu_health.defs.resources import TelemetrySourceResource
from gpu_health.steps.readiness import (Correction, PartitionRun, RangeRequest, RangeRun, Request, SensorCursor,
                                  corrections, describe_wait, partition_start, plan_range_retries, plan_rederive,
                                  plan_requests, plan_retries, plan_settles)

VERSION_TAG = "gpu_health/data_version"
RETRY_TAG = "gpu_health/retry"
# a re-derivation range: the corrected partitions it starts from; a corrected partition's run that needed no range:
# its own key (the corrections whose success settles finance again)
CORRECTED_TAG = "gpu_health/corrected"
STALE_TAG = "gpu_health/stale"  # and the requested partitions past its bound, left stale ("first..last")
SETTLES_TAG = "gpu_health/settles"  # a daily run settling a day again: the correction it follows
_PARTITION_TAG = "dagster/partition"
_STATUS = {dg.DagsterRunStatus.SUCCESS: "success", dg.DagsterRunStatus.FAILURE: "failure",
           dg.DagsterRunStatus.CANCELED: "canceled", dg.DagsterRunStatus.CANCELING: "canceled"}


def _records(instance: dg.DagsterInstance, job_name: str, since: pd.Timestamp, limit: int, **filters) -> list:
    """The run records of ``job_name`` created since ``since``, newest first."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(job_name=job_name, created_after=since.to_pydatetime(), **filters), limit=limit)
    return sorted(records, key=lambda r: r.create_timestamp, reverse=True)


def _attempt(run) -> int:
    try:
        return int(run.tags.get(RETRY_TAG, 0))
    except ValueError:
        return 0


def _time(seconds: float | None) -> pd.Timestamp | None:
    return pd.Timestamp(seconds, unit="s", tz="UTC") if seconds else None


def latest_partition_runs(instance: dg.DagsterInstance, job_name: str, since: pd.Timestamp,
                          limit: int = 10_000) -> list[PartitionRun]:
    """The newest run of ``job_name`` per partition key, among the runs created since ``since``."""
    latest: dict[str, PartitionRun] = {}
    for record in _records(instance, job_name, since, limit):
        run = record.dagster_run
        key = run.tags.get(_PARTITION_TAG)
        if key is None or key in latest:
            continue
        latest[key] = PartitionRun(key, run.tags.get(VERSION_TAG), _attempt(run),
                                   _STATUS.get(run.status, "in_progress"), _time(record.end_time),
                                   _time(record.start_time), CORRECTED_TAG in run.tags)
    return list(latest.values())


def _range_request(run) -> RangeRequest | None:
    """The re-derivation range a run of the sensor's is (its tags), or None for any other run."""
    tags = run.tags
    if not (RANGE_START_TAG in tags and RANGE_END_TAG in tags and CORRECTED_TAG in tags and VERSION_TAG in tags):
        return None
    stale = tuple(tags[STALE_TAG].split("..", 1)) if STALE_TAG in tags else None
    return RangeRequest(tags[RANGE_START_TAG], tags[RANGE_END_TAG], tags[VERSION_TAG],
                        tuple(tags[CORRECTED_TAG].split(",")), stale, _attempt(run))


def latest_range_runs(instance: dg.DagsterInstance, job_name: str, since: pd.Timestamp,
                      limit: int = 10_000) -> list[RangeRun]:
    """The newest run of each re-derivation range (first .. last) the sensor requested, among the runs created
    since ``since``."""
    latest: dict[tuple[str, str], RangeRun] = {}
    for record in _records(instance, job_name, since, limit):
        req = _range_request(record.dagster_run)
        if req is None or (req.first, req.last) in latest:
            continue
        latest[(req.first, req.last)] = RangeRun(req, _STATUS.get(record.dagster_run.status, "in_progress"),
                                                 _time(record.end_time))
    return list(latest.values())


def succeeded_corrections(instance: dg.DagsterInstance, job_name: str, since: pd.Timestamp,
                          limit: int = 10_000) -> list[Correction]:
    """The corrections whose run succeeded since ``since``: the re-derivation ranges, and the corrected partitions
    that needed none (their own run carries CORRECTED_TAG); a retry's success is its correction's."""
    out = {}
    for record in _records(instance, job_name, since, limit, statuses=[dg.DagsterRunStatus.SUCCESS]):
        run, ended = record.dagster_run, _time(record.end_time)
        rng = _range_request(run)
        if rng is not None:
            fix = Correction(rng.correction_key, rng.first, rng.last, ended)
        elif CORRECTED_TAG in run.tags and _PARTITION_TAG in run.tags and VERSION_TAG in run.tags:
            key = run.tags[_PARTITION_TAG]
            fix = Correction(Request(key, run.tags[VERSION_TAG]).run_key, key, key, ended)
        else:
            continue
        if ended is not None:
            out.setdefault(fix.key, fix)  # newest first: a correction run twice settles after its last success
    return list(out.values())


def _range_tags(rng: RangeRequest) -> dict[str, str]:
    tags = {RANGE_START_TAG: rng.first, RANGE_END_TAG: rng.last, JUDGED_LATER_TAG: "true",
            VERSION_TAG: rng.version, CORRECTED_TAG: ",".join(rng.corrected)}
    if rng.stale is not None:
        tags[STALE_TAG] = "..".join(rng.stale)
    if rng.attempt:
        tags[RETRY_TAG] = str(rng.attempt)
    return tags


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
        backoff = pd.Timedelta(seconds=retry_backoff_seconds)
        latest = latest_partition_runs(context.instance, job.name, wall - lookback)
        retries = [r for r in plan_retries(latest, new_cursor.versions, now=wall, max_retries=max_retries,
                                           backoff=backoff)
                   if r.partition_key not in fresh]
        from gpu_health.steps.rederive import default_bound

        ranges = plan_rederive(requests, cursor.versions, bound=default_bound())
        corrected = {k for r in ranges for k in r.corrected}
        # a correction with no range settles finance after its own run: tagged, and the retries of its run with it
        alone = set(corrections(requests, cursor.versions)) - corrected
        retried_alone = {r.partition_key for r in latest if r.corrected}
        requests = requests + retries[:max(0, max_requests - len(requests))]
        for req in requests:
            tags = {VERSION_TAG: req.version, **({RETRY_TAG: str(req.attempt)} if req.attempt else {}),
                    **({JUDGED_LATER_TAG: "true"} if req.partition_key in corrected and not req.attempt else {}),
                    **({CORRECTED_TAG: req.partition_key}
                       if req.partition_key in (retried_alone if req.attempt else alone) else {})}
            yield dg.RunRequest(partition_key=req.partition_key, run_key=req.run_key, tags=tags)
        for rng in ranges:
            if rng.stale is not None:
                new_cursor.stale = rng.stale_report()
                context.log.warning(f"correction of {rng.first}: re-derived up to {rng.last}; the partitions "
                                    f"{rng.stale[0]} .. {rng.stale[1]} past the bound keep rows of the old data")
            yield dg.RunRequest(run_key=rng.run_key, tags=_range_tags(rng))
        range_retries = plan_range_retries(latest_range_runs(context.instance, job.name, wall - lookback),
                                           new_cursor.versions, now=wall, max_retries=max_retries, backoff=backoff)
        for rng in range_retries:
            yield dg.RunRequest(run_key=rng.run_key, tags=_range_tags(rng))
        context.update_cursor(new_cursor.dumps())
        if new_cursor.passed_over and new_cursor.passed_over != cursor.passed_over:
            context.log.warning(f"passed over partition {new_cursor.passed_over['partition']}: "
                                f"{new_cursor.passed_over['reason']}")
        if not requests and not ranges and not range_retries:
            yield dg.SkipReason(describe_wait(new_cursor))

    return five_minute_partition_sensor


def build_settle_sensor(five_minute_job, daily_job, *, lookback_hours: int = 24) -> dg.SensorDefinition:
    """The sensor that settles finance again after a correction (the module's docstring): the corrections that
    succeeded within ``lookback_hours`` (the five-minute sensor's: no correction is planned further back), each
    settled once, on the next tick after it succeeded."""

    @dg.sensor(
        name="finance_settle_sensor", job=daily_job, minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Requests the daily finance job again for each day already settled whose finance read a "
                    "partition a correction (a replaced landing file) re-derived, once the correction's run "
                    "succeeded: once per correction and day.",
    )
    def finance_settle_sensor(context: dg.SensorEvaluationContext):
        from gpu_health.steps.rederive import finance_days

        wall = pd.Timestamp.now(tz="UTC")
        done = succeeded_corrections(context.instance, five_minute_job.name,
                                     wall - pd.Timedelta(hours=lookback_hours))
        if not done:
            yield dg.SkipReason("no correction succeeded in the lookback")
            return
        # a daily run of a day is created after the day ended: none of the days touched was settled before them
        first_day = min(finance_days(partition_start(f.first), partition_start(f.first) + PARTITION)[0] for f in done)
        daily = latest_partition_runs(context.instance, daily_job.name, first_day)
        settles = plan_settles(done, daily, finance_days=finance_days)
        for s in settles:
            context.log.info(f"settling {s.day} again after the correction {s.correction}")
            yield dg.RunRequest(partition_key=s.day, run_key=s.run_key, tags={SETTLES_TAG: s.correction})
        if not settles:
            yield dg.SkipReason("no settled day touched by a correction waits to be settled again")

    return finance_settle_sensor

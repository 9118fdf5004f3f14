"""The 5-minute sensor: one run per closed partition whose data is ready.

Readiness comes from :mod:`gpu_health.readiness` (pure, testable without
Dagster). The cursor keeps the oldest partition not yet requested and the data
version each recent partition was run with, so that

* no partition is skipped: the cursor only moves past a partition once it has
  been requested (a partition whose files are late holds it back while later
  ready partitions still run);
* a late or replaced file triggers the partition again (its version changes);
* the same data never runs twice (run_key = partition + data version).

The clock it judges readiness by is Dagster's partition-loading time, so a test
pins it with ``dg.partition_loading_context(effective_dt=...)``.
"""

import dagster as dg
import pandas as pd

from gpu_health.defs.resources import TelemetrySourceResource
from gpu_health.readiness import SensorCursor, plan_requests


def build_partition_sensor(job, partitions_def, *, grace_seconds: int = 60,
                           lookback_hours: int = 24, initial_lookback_minutes: int = 60,
                           max_requests: int = 48) -> dg.SensorDefinition:
    @dg.sensor(
        name="five_minute_partition_sensor", job=job, minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Requests a run of the 5-minute job for every closed partition whose source data is ready "
                    "(after a grace period), and again when a partition's landing files arrive late or are replaced.",
    )
    def five_minute_partition_sensor(context: dg.SensorEvaluationContext, source: TelemetrySourceResource):
        # "now" is the partition-loading context's effective time: the wall clock on a real tick,
        # pinned in tests with `dg.partition_loading_context(effective_dt=...)` (stack-notes.md)
        with dg.partition_loading_context() as loading:
            now = pd.Timestamp(loading.effective_dt)
        now = now.tz_localize("UTC") if now.tzinfo is None else now.tz_convert("UTC")
        first = pd.Timestamp(partitions_def.start).tz_convert("UTC")
        cursor = SensorCursor.loads(context.cursor)
        requests, new_cursor = plan_requests(
            source.get(), cursor, now=now, partitions_start=first, grace=pd.Timedelta(seconds=grace_seconds),
            lookback=pd.Timedelta(hours=lookback_hours), initial_lookback=pd.Timedelta(minutes=initial_lookback_minutes),
            max_requests=max_requests,
        )
        for req in requests:
            yield dg.RunRequest(partition_key=req.partition_key, run_key=req.run_key, tags={"gpu_health/data_version": req.version})
        context.update_cursor(new_cursor.dumps())
        if not requests:
            yield dg.SkipReason(f"no new ready partition; waiting on {new_cursor.next_start}")

    return five_minute_partition_sensor

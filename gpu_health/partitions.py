"""The partitions definitions, defined once.

Five-minute UTC windows for telemetry and everything computed from it; daily
windows for finance. The start is configurable (``GPU_HEALTH_PARTITION_START``):
Dagster advises at most ~100k partitions per asset, about 347 days of 5-minute
keys, so a long-running deployment moves the start forward (docs/running.md: "Partition
horizon").
"""

import dagster as dg

from gpu_health.constants import PARTITION_CRON, PARTITION_KEY_FMT

DEFAULT_START = "2026-11-01-00:00"


def five_minute_partitions(start: str = DEFAULT_START) -> dg.TimeWindowPartitionsDefinition:
    return dg.TimeWindowPartitionsDefinition(
        cron_schedule=PARTITION_CRON, start=start, fmt=PARTITION_KEY_FMT, timezone="UTC", end_offset=0,
    )


def daily_partitions(start: str = DEFAULT_START) -> dg.DailyPartitionsDefinition:
    return dg.DailyPartitionsDefinition(start_date=start[:10], timezone="UTC")

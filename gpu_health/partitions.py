"""The partitions definitions, defined once.

Five-minute UTC windows for telemetry and everything computed from it; daily
windows for finance. The start is configurable (``GPU_HEALTH_PARTITION_START``):
Dagster advises at most ~100k partitions per asset, about 347 days of 5-minute
keys, so a long-running deployment moves the start forward (README: "Partition
horizon").
"""

import dagster as dg

FIVE_MINUTE_FMT = "%Y-%m-%d-%H:%M"
DEFAULT_START = "2026-11-01-00:00"


def five_minute_partitions(start: str = DEFAULT_START) -> dg.TimeWindowPartitionsDefinition:
    return dg.TimeWindowPartitionsDefinition(
        cron_schedule="*/5 * * * *", start=start, fmt=FIVE_MINUTE_FMT, timezone="UTC", end_offset=0,
    )


def daily_partitions(start: str = DEFAULT_START) -> dg.DailyPartitionsDefinition:
    return dg.DailyPartitionsDefinition(start_date=start[:10], timezone="UTC")

"""The partitions definitions, defined once.

Five-minute UTC windows for telemetry and everything computed from it; daily
windows for finance. The start is configurable (``GPU_HEALTH_PARTITION_START``):
Dagster advises at most ~100k partitions per asset, about 347 days of 5-minute
keys, so a long-running deployment moves the start forward (docs/running.md: "Partition
horizon").
"""

import dagster as dg
import pandas as pd

from gpu_health.constants import PARTITION_CRON, PARTITION_KEY_FMT

DEFAULT_START = "2026-11-01-00:00"


def recent_start(now, days: float) -> str:
    """The partition start ``days`` before ``now``, at the beginning of that UTC day (``make dev``'s start): a
    whole day, so the daily partitions begin with the 5-minute ones and the day before ``now`` is complete."""
    if days <= 0:
        raise ValueError(f"days must be positive, got {days!r}")
    now = pd.Timestamp(now)
    now = now.tz_localize("UTC") if now.tzinfo is None else now.tz_convert("UTC")
    return (now - pd.Timedelta(days=days)).floor("D").strftime(PARTITION_KEY_FMT)


def five_minute_partitions(start: str = DEFAULT_START) -> dg.TimeWindowPartitionsDefinition:
    return dg.TimeWindowPartitionsDefinition(
        cron_schedule=PARTITION_CRON, start=start, fmt=PARTITION_KEY_FMT, timezone="UTC", end_offset=0,
    )


def daily_partitions(start: str = DEFAULT_START) -> dg.DailyPartitionsDefinition:
    return dg.DailyPartitionsDefinition(start_date=start[:10], timezone="UTC")

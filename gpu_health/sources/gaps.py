"""Missing data: the 5-minute partitions a live producer left empty (the ``source_gaps`` table).

Rule. A source reading a live producer (an exporter through Prometheus, the
scheduler's dumps) sets :attr:`Fetched.silent_family
<gpu_health.sources.base.Fetched.silent_family>` once it has decided that a
window will not get more data (see :meth:`PrometheusSource.judge
<gpu_health.sources.prometheus.PrometheusSource.judge>`). Every 5-minute
partition of that window without a single row is then *missing data*: it is
written empty (so the partition is computed: GPU telemetry, the loss tree and
the KPIs do not wait for an exporter that is not there) and recorded here,
naming the silent metric family, for the missing-data detector and for the
reader of a KPI who asks why a table is empty. A re-run that finds rows
clears the record (the asset replaces the window's gaps).

Why per partition and not per minute: the loss tree already counts every
paid GPU-minute without a GPU row as ``no_data``; what it cannot know is that
a whole table (nodes, links, scheduler) was silent, which changes what its
other states mean (no node health, no link state, no queue).
"""

import pandas as pd

from gpu_health.constants import PARTITION, PARTITION_FREQ
from gpu_health.contracts import PARTITION_COLUMN
from gpu_health.sources.base import Fetched

COLUMNS = ["source", "partition_start", "partition_end", "missing_family", "origin", "reason"]


def empty_gaps() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="datetime64[ns, UTC]" if c.startswith("partition_") else object)
                         for c in COLUMNS})


def missing_partitions(fetched: Fetched, table: str, start: pd.Timestamp | None, end: pd.Timestamp | None) -> pd.DataFrame:
    """``source_gaps`` rows: the 5-minute partitions of ``[start, end)`` where ``fetched`` has no row.

    Empty when the source does not read a live producer (``silent_family`` is None) or the window is
    not partitioned by 5 minutes.
    """
    if fetched.silent_family is None or start is None or end is None:
        return empty_gaps()
    starts = pd.date_range(start, end, freq=PARTITION_FREQ, inclusive="left")
    col = PARTITION_COLUMN[table]
    frame = fetched.frame
    seen = set(pd.to_datetime(frame[col], utc=True).dt.floor(PARTITION_FREQ)) if len(frame) else set()
    missing = [s for s in starts if s not in seen]
    if not missing:
        return empty_gaps()
    reason = (f"{table}: no {fetched.silent_family} data in the partition; written empty (missing data) so the "
              f"partition is computed without it")
    out = pd.DataFrame({"source": table, "partition_start": missing})
    out["partition_start"] = pd.to_datetime(out["partition_start"], utc=True)
    out["partition_end"] = out["partition_start"] + PARTITION
    out["missing_family"] = fetched.silent_family
    out["origin"] = fetched.origin
    out["reason"] = reason
    return out[COLUMNS]

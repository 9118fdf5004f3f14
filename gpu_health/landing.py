"""The landing zone: one Parquet file per source per partition (contracts.md).

    <landing>/<source>/<YYYY-MM-DD>/<HHMM>.parquet      # 5-minute sources
    <landing>/cost_capacity/<YYYY-MM-DD>.parquet        # daily
    <landing>/maintenance_windows.parquet               # whole calendar

A partition with no rows still gets a file (zero rows, full schema). Files are
written atomically (temp file + rename) so a reader never sees half a file.
"""

import os
from pathlib import Path

import pandas as pd

from gpu_health.contracts.models import SOURCE_TABLES
from gpu_health.contracts.table import CALENDAR, DAILY

# each source's layout is its catalogue entry's ``landing``; every other source has a file per 5-minute partition
DAILY_SOURCES = frozenset(t.name for t in SOURCE_TABLES if t.landing == DAILY)
WHOLE_SOURCES = frozenset(t.name for t in SOURCE_TABLES if t.landing == CALENDAR)


def partition_path(landing: str | Path, source: str, start: pd.Timestamp | None = None) -> Path:
    """Path of the file holding ``source`` for the partition starting at ``start``."""
    root = Path(landing)
    if source in WHOLE_SOURCES:
        return root / f"{source}.parquet"
    if start is None:
        raise ValueError(f"{source} is partitioned: a partition start is required")
    start = pd.Timestamp(start).tz_convert("UTC") if pd.Timestamp(start).tzinfo else pd.Timestamp(start, tz="UTC")
    if source in DAILY_SOURCES:
        return root / source / f"{start:%Y-%m-%d}.parquet"
    return root / source / f"{start:%Y-%m-%d}" / f"{start:%H%M}.parquet"


def write_partition(landing: str | Path, source: str, start: pd.Timestamp | None, frame: pd.DataFrame) -> Path:
    """Write (or replace) one partition file atomically; returns its path."""
    path = partition_path(landing, source, start)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    frame.reset_index(drop=True).to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path


def read_partition(landing: str | Path, source: str, start: pd.Timestamp | None = None) -> pd.DataFrame | None:
    """The partition's frame, or None when its file has not arrived."""
    path = partition_path(landing, source, start)
    if not path.exists():
        return None
    return pd.read_parquet(path)


def file_version(landing: str | Path, source: str, start: pd.Timestamp | None = None) -> str | None:
    """A token that changes when the file is replaced (mtime_ns and size), None if absent."""
    path = partition_path(landing, source, start)
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return f"{st.st_mtime_ns}:{st.st_size}"

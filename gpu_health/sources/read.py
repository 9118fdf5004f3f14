"""Read a window of a contract table from a source and judge it: what a source asset stores.

File sources (the landing zone) are judged file by file
(:func:`gpu_health.contracts.validate.validate_files`): a bad file costs its own
partition, never the range. Other sources (simulator, Prometheus) return one
frame per window; its rejects are keyed by the 5-minute partition of each row
(the day for ``cost_capacity``) and the row's number within it, the same keys a
partition-by-partition run produces, so a re-run of any partition replaces
exactly its own rejects.
"""

import numpy as np
import pandas as pd

from dataclasses import replace

from gpu_health.constants import PARTITION
from gpu_health.contracts import OPTIONAL_COLUMNS, OPTIONAL_SOURCES, PARTITION_COLUMN, empty_frame
from gpu_health.contracts.models import empty_frame_dtypes
from gpu_health.contracts.validate import Validated, validate_files, validate_frame
from gpu_health.landing import DAILY_SOURCES
from gpu_health.sources.gaps import empty_gaps, missing_partitions



def read_validated(source, table: str, start, end) -> Validated:
    """The validated rows of ``table`` in ``[start, end)`` and their rejects (see the module docstring)."""
    return read_window(source, table, start, end)[0]


def read_window(source, table: str, start, end, *, history=None) -> tuple[Validated, pd.DataFrame]:
    """:func:`read_validated`, and the window's missing-data partitions (``source_gaps`` rows): the 5-minute
    partitions a live producer (an exporter, a scheduler dump) left without a row once it was judged silent
    (:mod:`gpu_health.sources.gaps`), and those whose landing file never arrived (``LandingSource.absent_after``).
    An empty file, and the simulator, have none: an empty file is a fact. ``history``: the rows already stored
    that a file may deliver again (:func:`~gpu_health.contracts.validate.validate_files`)."""
    provided = getattr(source, "tables", None)
    if table in OPTIONAL_SOURCES and (provided is None or table not in provided()):
        # no adapter provides serving data (e.g. Prometheus without serving exporters and no landing zone):
        # the optional source is zero rows, never a wait (contracts.models.OPTIONAL_SOURCES)
        return (validate_frame(empty_frame(table), table, start=start, end=end, origin=f"{getattr(source, 'name', 'source')}: no {table}"),
                empty_gaps())
    if hasattr(source, "for_table") and provided is not None and table in provided():
        source = source.for_table(table)  # routed: the landing zone's tables are judged file by file, as alone
    if hasattr(source, "read_files"):
        reader = getattr(source, "read_batches", source.read_files)
        parts = [with_optional_columns(f, table) for f in reader(table, start, end)]
        if hasattr(source, "strays"):
            parts += source.strays(table, start, end)
        # a file judged absent (LandingSource.absent_after) stands for its partition's missing data
        gaps = [missing_partitions(p, table, p.start, p.end) for p in parts if getattr(p, "silent_family", None)]
        return (validate_files(parts, table, start=start, end=end, history=history),
                pd.concat(gaps, ignore_index=True) if gaps else empty_gaps())
    fetched = with_optional_columns(source.read(table, start, end), table)
    partition, row_number = row_keys(fetched.frame, table, start, end)
    return (validate_frame(fetched.frame, table, start=start, end=end, origin=fetched.origin,
                           partition=partition, row_number=row_number),
            missing_partitions(fetched, table, start, end))


def with_optional_columns(fetched, table: str):
    """``fetched`` with the contract's optional columns (contracts.models.OPTIONAL_COLUMNS) it lacks added as
    nulls of the contract's dtype: columns added to a contract after files were written (change_events' actor
    and ticket, job_runtime_metrics' grad_norm) leave the older files valid -- a change recorded without an actor
    is an unknown actor, a minute without a gradient norm a norm not reported (never 0), never a rejected file."""
    optional = OPTIONAL_COLUMNS.get(table, ())
    frame = getattr(fetched, "frame", None)
    if not optional or frame is None or getattr(fetched, "unreadable", None) or getattr(fetched, "ignored", None):
        return fetched
    lacking = [c for c in optional if c not in frame.columns]
    if not lacking:
        return fetched
    dtypes = empty_frame_dtypes(table)
    return replace(fetched, frame=frame.assign(**{c: pd.Series(None, index=frame.index, dtype=dtypes[c]) for c in lacking}))


def row_keys(frame: pd.DataFrame, table: str, start, end) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Each row's partition (its partition column floored to the grain, ``start`` when the value is
    missing, unparseable or outside the window; UTC ``datetime64`` values) and its number within that partition,
    in fetched order."""
    col = PARTITION_COLUMN.get(table)
    if start is None or col is None or col not in frame.columns:
        return None, None
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    values = frame[col]
    if table in DAILY_SOURCES:
        values = values.astype(str)
    try:
        ts = pd.to_datetime(values, utc=True, errors="coerce", format="mixed")
    except (TypeError, ValueError):
        ts = pd.Series(pd.NaT, index=frame.index, dtype="datetime64[ns, UTC]")
    home = ts.dt.normalize() if table in DAILY_SOURCES else ts.dt.floor(PARTITION)
    home = home.where((home >= start.normalize() if table in DAILY_SOURCES else home >= start) & (home < end), start)
    home = home.fillna(start).reset_index(drop=True)
    row_number = home.groupby(home, sort=False).cumcount().to_numpy(dtype=np.int64)
    # UTC datetime64 values, not a Timestamp object per row (a day of GPU telemetry is 1.7 M rows: building them
    # was a fifth of a simulated scenario's evaluation)
    return home.dt.tz_localize(None).to_numpy(), row_number

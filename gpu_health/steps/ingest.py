"""The source steps: read a window of a contract table from the configured source, judge it, store it.

Rows that break the contract go to ``source_rejects`` (keyed by source, file partition and row), partitions a live
producer left silent to ``source_gaps``; the good rows go to the table. A range is read a day at a time so a
week-long backfill never holds a week in memory.
"""

import pandas as pd

from gpu_health.contracts import FIVE_MINUTE_SOURCES, PARTITION_COLUMN
from gpu_health.contracts.validate import ContractViolation
from gpu_health.sources.read import read_window
from gpu_health.steps.graph import StepResult

CHUNK = pd.Timedelta(days=1)


def chunks(start: pd.Timestamp | None, end: pd.Timestamp | None):
    if start is None:
        yield None, None
        return
    t = start
    while t < end:
        yield t, min(t + CHUNK, end)
        t = t + CHUNK


def _stored_before(wh, table: str, start, c_start, lookback, earlier: list):
    """``history(columns)`` for :func:`~gpu_health.contracts.validate.validate_files`: those columns of the rows of
    ``table`` already there before the chunk ``c_start``: stored before the step's window (up to ``lookback``
    back), or validated in the step's earlier chunks (``earlier``: stored only once the step ends)."""
    col = PARTITION_COLUMN[table]

    def history(columns: list[str]) -> pd.DataFrame:
        parts = [wh.read_window(table, start - lookback, start, columns=columns)]
        parts += [f.loc[(f[col] >= c_start - lookback) & (f[col] < c_start), columns] for f in earlier if len(f)]
        parts = [p for p in parts if len(p)]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    return history


def ingest(wh, source, table: str, start, end, *, lookback: pd.Timedelta | None = None) -> StepResult:
    """Read ``table`` for ``[start, end)`` (the whole table when ``start`` is None) from ``source``, store its valid
    rows, its rejects and its missing partitions. ``findings``: ``rejects`` (every reject row), ``dropped_columns``
    (column -> files), ``quarantined`` (files quarantined whole, for warnings), ``gaps``; ``metadata``: counts.

    The calendar (``maintenance_windows``) is read whole: an empty one would turn planned maintenance into pages, so
    a file of it quarantined whole raises :class:`ContractViolation` (naming the file) and the stored calendar stays
    as it was.

    ``lookback``: how far back a file's re-delivered rows are looked up among the rows already stored (the step's
    declared read of its own table); re-deliveries are dropped and counted (``duplicates_dropped``)."""
    start = None if start is None else pd.Timestamp(start)
    end = None if end is None else pd.Timestamp(end)
    valid, rejects, missing, quarantined, nulled, dropped, duplicates = [], [], [], [], 0, {}, 0
    for c_start, c_end in chunks(start, end):
        history = None if c_start is None or lookback is None else _stored_before(wh, table, start, c_start, lookback, list(valid))
        v, gaps = read_window(source, table, c_start, c_end, history=history)
        duplicates += v.duplicates_dropped
        files = v.files_quarantined
        if start is None and len(files):
            raise ContractViolation(table, str(files["origin"].iloc[0]), files["column"].iloc[0], str(files["reason"].iloc[0]))
        quarantined.append(files)
        for col, origins in v.dropped_columns.items():
            dropped.setdefault(col, []).extend(origins)
        valid.append(v.valid)
        rejects.append(v.rejects)
        nulled += v.sentinels_nulled
        wh.replace_window("source_rejects", v.rejects, c_start, c_end, where={"source": table})
        if c_start is not None and table in FIVE_MINUTE_SOURCES:
            wh.replace_window("source_gaps", gaps, c_start, c_end, where={"source": table})
        missing.append(gaps)
    frame = pd.concat(valid, ignore_index=True) if len(valid) > 1 else valid[0]
    wh.replace_window(table, frame, start, end)
    gaps = pd.concat(missing, ignore_index=True)
    return StepResult(
        {table: frame},
        metadata={"rows": len(frame), "dcgm_sentinels_nulled": nulled, "duplicates_dropped": duplicates, "missing_data_partitions": len(gaps),
                  "missing_family": ", ".join(sorted(set(gaps["missing_family"]))) if len(gaps) else ""},
        findings={"rejects": pd.concat(rejects, ignore_index=True), "dropped_columns": dropped,
                  "quarantined": pd.concat(quarantined, ignore_index=True), "gaps": gaps})

"""Plumbing shared by the trace importers: contract-shaped frames and landing-zone writes.

An importer builds a :class:`TraceFrames` (pure: files in, frames out) and
:func:`write_trace` lands it: one file per covered source per 5-minute
partition over the trace's span -- zero-row files included, so "nothing
happened" is distinguishable from "not arrived" -- daily ``cost_capacity``
files, and derived side files under ``<landing>/_derived/`` (not a source:
the leading underscore keeps it apart from the contract tables).

Null policy. Contract columns a trace does not carry are null -- never a
made-up reading (contracts.md: "absence is not a zero reading"). Where the
contract makes such a column required (e.g. ``xid`` on Philly GPUs),
the rows will be quarantined by the contract check until the contract
accepts null there; each importer lists those columns in
``NULL_REQUIRED_COLUMNS`` and :func:`write_trace` reports them. A caller who
wants the rows through anyway passes explicit ``placeholders``
(``{table: {column: value}}``), which fill only the null cells and are
recorded in the summary. String columns a trace lacks carry the documented
placeholder ``"unknown"``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.contracts import PARTITION_COLUMN, columns, empty_frame
from gpu_health.landing import DAILY_SOURCES, write_partition

DERIVED_DIR = "_derived"
UNKNOWN = "unknown"


def default_data_dir() -> Path:
    """``<checkout>/../shared/real-data`` -- where the real public traces live beside the repo."""
    return Path(__file__).resolve().parents[3] / "shared" / "real-data"


@dataclass
class TraceFrames:
    """What an importer produced from the trace files, before landing."""

    trace: str
    tables: dict[str, pd.DataFrame]
    skipped: Counter = field(default_factory=Counter)
    derived: dict[str, pd.DataFrame] = field(default_factory=dict)
    null_required: dict[str, tuple[str, ...]] = field(default_factory=dict)


def conform(frame: pd.DataFrame, table: str, *, nullable: tuple[str, ...] = ()) -> pd.DataFrame:
    """Exactly the contract's columns, in order, with the contract's dtypes.

    Integer and boolean columns listed in ``nullable`` (or holding nulls) use
    pandas' nullable dtypes so that an absent value stays null instead of
    becoming 0/False. Nothing is validated here: that is the contract's job.
    """
    target = empty_frame(table).dtypes
    out = pd.DataFrame(index=frame.index)
    for col in columns(table):
        s = frame[col] if col in frame.columns else pd.Series(pd.NA, index=frame.index, dtype=object)
        dt = target[col]
        if isinstance(dt, pd.DatetimeTZDtype):
            s = pd.to_datetime(s, utc=True).astype("datetime64[ns, UTC]")
        elif pd.api.types.is_integer_dtype(dt):
            s = s.astype("Int64") if (col in nullable or s.isna().any()) else s.astype("int64")
        elif pd.api.types.is_bool_dtype(dt):
            s = s.astype("boolean") if (col in nullable or s.isna().any()) else s.astype(bool)
        elif pd.api.types.is_float_dtype(dt):
            s = pd.to_numeric(s, errors="raise").astype("float64")
        elif isinstance(dt, pd.StringDtype):
            s = s.astype(dt)
        else:  # object, e.g. cost_capacity's date
            s = s.astype(object).where(s.notna(), None)
        out[col] = s
    return out.reset_index(drop=True)


def _placeholders(frame: pd.DataFrame, values: Mapping[str, object] | None) -> pd.DataFrame:
    if not values:
        return frame
    frame = frame.copy()
    for col, value in values.items():
        if col not in frame.columns:
            raise KeyError(f"placeholder for unknown column {col!r}; columns are {list(frame.columns)}")
        frame[col] = frame[col].fillna(value)
    return frame


def _floor5(ts: pd.Timestamp) -> pd.Timestamp:
    return ts.floor(PARTITION)


def trace_span(tables: Mapping[str, pd.DataFrame]) -> tuple[pd.Timestamp, pd.Timestamp] | None:
    """``[first partition start, last partition end)`` over the 5-minute tables' rows."""
    lo, hi = None, None
    for table, df in tables.items():
        if table in DAILY_SOURCES or df.empty:
            continue
        col = df[PARTITION_COLUMN[table]]
        lo = col.min() if lo is None else min(lo, col.min())
        hi = col.max() if hi is None else max(hi, col.max())
    if lo is None:
        return None
    return _floor5(lo), _floor5(hi) + PARTITION


def write_trace(
    landing_dir: str | Path,
    frames: TraceFrames,
    *,
    start: pd.Timestamp | None = None,
    end: pd.Timestamp | None = None,
    placeholders: Mapping[str, Mapping[str, object]] | None = None,
) -> dict:
    """Land ``frames``; returns the import summary (see :func:`gpu_health.traces.import_trace`)."""
    landing = Path(landing_dir)
    skipped = Counter(frames.skipped)
    start = None if start is None else _utc(start)
    end = None if end is None else _utc(end)
    tables: dict[str, pd.DataFrame] = {}
    for table, df in frames.tables.items():
        col = PARTITION_COLUMN[table]
        if table in DAILY_SOURCES:
            keep = pd.Series(True, index=df.index)
            if start is not None:
                keep &= pd.to_datetime(df[col]) >= start.tz_localize(None).normalize()
            if end is not None:
                keep &= pd.to_datetime(df[col]) < end.tz_localize(None)
        else:
            keep = pd.Series(True, index=df.index)
            if start is not None:
                keep &= df[col] >= start
            if end is not None:
                keep &= df[col] < end
        if (~keep).any():
            skipped[f"{table}: outside the requested window"] += int((~keep).sum())
        tables[table] = _placeholders(df[keep], (placeholders or {}).get(table))

    auto = trace_span(tables)
    lo = _floor5(start) if start is not None else (auto[0] if auto else None)
    hi = end.ceil(PARTITION) if end is not None else (auto[1] if auto else None)
    span = (lo, hi) if lo is not None and hi is not None and lo < hi else None

    rows: dict[str, int] = {}
    files: dict[str, int] = {}
    empties: dict[str, int] = {}
    for table, df in tables.items():
        rows[table] = len(df)
        empty = df.iloc[0:0]
        col = PARTITION_COLUMN[table]
        if table in DAILY_SOURCES:
            days = pd.to_datetime(df[col])
            groups = {d: g for d, g in df.groupby(days.dt.normalize(), sort=True)}
            if span is not None:
                all_days = pd.date_range(span[0].tz_localize(None).normalize(), (span[1] - pd.Timedelta(1, "ns")).tz_localize(None).normalize(), freq="D")
            else:
                all_days = pd.DatetimeIndex(sorted(groups))
            n_empty = 0
            for day in all_days:
                g = groups.get(day)
                if g is None:
                    g, n_empty = empty, n_empty + 1
                write_partition(landing, table, pd.Timestamp(day, tz="UTC"), g)
            files[table], empties[table] = len(all_days), n_empty
            continue
        if span is None:
            files[table], empties[table] = 0, 0
            continue
        keys = df[col].dt.floor(PARTITION)
        groups = {k: g for k, g in df.groupby(keys, sort=True)}
        n_empty = 0
        partitions = pd.date_range(span[0], span[1] - PARTITION, freq=PARTITION)
        for p in partitions:
            g = groups.get(p)
            if g is None:
                g, n_empty = empty, n_empty + 1
            write_partition(landing, table, p, g)
        files[table], empties[table] = len(partitions), n_empty

    derived_paths: dict[str, str] = {}
    for name, df in frames.derived.items():
        path = landing / DERIVED_DIR / f"{name}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        df.reset_index(drop=True).to_parquet(tmp, index=False)
        tmp.replace(path)
        derived_paths[name] = str(path)

    null_required = {
        t: [c for c in cols if t in tables and c not in (placeholders or {}).get(t, {}) and tables[t][c].isna().any()]
        for t, cols in frames.null_required.items()
    }
    return {
        "trace": frames.trace,
        "landing_dir": str(landing),
        "span": None if span is None else (span[0].isoformat(), span[1].isoformat()),
        "rows": rows,
        "partitions": files,
        "empty_partitions": empties,
        "skipped": dict(sorted(skipped.items())),
        "null_required_columns": {t: c for t, c in null_required.items() if c},
        "placeholders": {t: dict(v) for t, v in (placeholders or {}).items()},
        "derived": derived_paths,
    }


def _utc(ts: pd.Timestamp | str) -> pd.Timestamp:
    ts = pd.Timestamp(ts)
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def first_n(values: pd.Series, limit: int | None) -> set:
    """The first ``limit`` distinct values in order (all when ``limit`` is None)."""
    uniq = pd.unique(values)
    return set(uniq if limit is None else uniq[:limit])


def numeric_cells(s: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(values as float, mask of non-empty cells that are not numbers)."""
    if pd.api.types.is_numeric_dtype(s):
        return s.astype("float64"), pd.Series(False, index=s.index)
    num = pd.to_numeric(s, errors="coerce")
    bad = num.isna() & s.notna() & (s.astype(str).str.strip() != "")
    return num.astype("float64"), bad


__all__ = [
    "DERIVED_DIR", "PARTITION", "TraceFrames", "UNKNOWN", "conform", "default_data_dir",
    "first_n", "numeric_cells", "trace_span", "write_trace",
]

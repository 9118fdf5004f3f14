"""Time faults: timestamps that are naive or no timestamps (the file fails), scrape instants floored to their
minute, and rows outside their file's partition (a minority rejected row by row; most of the file, and the file is
misplaced: quarantined whole)."""

import numpy as np
import pandas as pd
import pandera.pandas as pa

from gpu_health.constants import PARTITION, PARTITION_FREQ
from gpu_health.contracts.models import MINUTE_GRAIN_SOURCES, PARTITION_COLUMN
from gpu_health.contracts.rejects import MAX_EXAMPLES, OUTSIDE_PARTITION, ContractViolation, _rejects_frame


# A file is *misplaced* (in the wrong folder, under the wrong name) when more than half of its rows -- re-sent
# duplicates not counted -- lie outside its partition: then most of it is another partition's data, and its name is
# what is wrong, so it is quarantined whole. A minority of rows outside is a row fault (one node's clock off, a
# late sample): those rows are rejected one by one and the rest of the file lands. Half is the only share that
# gives every file one partition it mostly belongs to, whatever the cluster's size or the file's length.
MISPLACED_SHARE = 0.5


def _timestamp_columns(schema: pa.DataFrameSchema) -> list[str]:
    return [name for name, col in schema.columns.items() if isinstance(col.dtype.type, pd.DatetimeTZDtype)]


def _normalise_timestamps(df: pd.DataFrame, cols: list[str], source: str, origin: str) -> pd.DataFrame:
    for col in cols:
        s = df[col]
        if isinstance(s.dtype, pd.DatetimeTZDtype):
            if str(s.dtype.tz) != "UTC":
                df[col] = s.dt.tz_convert("UTC")
            continue
        if pd.api.types.is_datetime64_dtype(s.dtype):
            raise ContractViolation(source, origin, col, "naive timestamps (contract: timezone-aware UTC)", s.dropna().head(MAX_EXAMPLES).astype(str).tolist())
        nonnull = s.dropna()
        if nonnull.empty:
            df[col] = pd.to_datetime(s, utc=True)
            continue
        sample = nonnull.iloc[:1000]
        if pd.api.types.is_numeric_dtype(s.dtype):
            raise ContractViolation(source, origin, col, f"numbers where timestamps are expected (dtype {s.dtype})", sample.head(MAX_EXAMPLES).tolist())
        naive = [v for v in sample if (isinstance(v, pd.Timestamp | np.datetime64) and pd.Timestamp(v).tzinfo is None)
                 or (isinstance(v, str) and _string_is_naive(v))]
        if naive:
            raise ContractViolation(source, origin, col, "naive timestamps (contract: timezone-aware UTC)", naive)
        try:
            df[col] = pd.to_datetime(s, utc=True, format="mixed")
        except (ValueError, TypeError) as err:
            bad = [v for v in nonnull.head(200) if pd.isna(pd.to_datetime(v, utc=True, errors="coerce"))]
            raise ContractViolation(source, origin, col, f"values that are not timestamps ({err.__class__.__name__})", bad) from err
    return df


def _string_is_naive(value: str) -> bool:
    try:
        return pd.Timestamp(value).tzinfo is None
    except (ValueError, TypeError):
        return False


def _floor_minutes(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """``df`` with the ``ts`` of a minute-grain table floored to its minute (a shallow copy when any moves).

    A collector stamps the instant it scraped (dcgm-exporter's sample time, 250 ms or 40 s into the minute), not
    the minute's start the contract keys on: the reading is that minute's, so it is floored to it before the key
    and partition checks, instead of every row of such a file failing ``ts_minute_aligned``. Event tables keep
    their exact times (they are not in MINUTE_GRAIN_SOURCES)."""
    if source not in MINUTE_GRAIN_SOURCES or "ts" not in df.columns or not len(df):
        return df
    ts = df["ts"]
    if not isinstance(ts.dtype, pd.DatetimeTZDtype):
        return df
    ns = ts.dt.as_unit("ns").array.asi8
    if ((ns % 60_000_000_000 != 0) & ~ts.isna().to_numpy()).any():
        df = df.copy(deep=False)
        df["ts"] = ts.dt.floor("min")
    return df


def _outside(df: pd.DataFrame, source: str, start, end) -> np.ndarray | None:
    """Rows whose partition column lies outside ``[start, end)`` (a bool per row), None when none does."""
    col = PARTITION_COLUMN.get(source)
    if col is None or start is None or df.empty:
        return None
    if source == "cost_capacity":
        days = pd.to_datetime(df[col].astype(str), errors="coerce", utc=True)
        outside = (days < start) | (days >= end)
    else:
        outside = (df[col] < start) | (df[col] >= end)
    outside = outside.to_numpy(dtype=bool)
    return outside if outside.any() else None


def _check_window(df: pd.DataFrame, source: str, origin: str, start, end) -> None:
    col = PARTITION_COLUMN.get(source)
    outside = _outside(df, source, start, end)
    if outside is not None:
        hint = ""
        if source != "cost_capacity" and end - start == PARTITION:
            homes = pd.unique(df.loc[outside, col].dropna().dt.floor(PARTITION_FREQ))
            if len(homes):
                shown = ", ".join(pd.Timestamp(h).strftime("%Y-%m-%d %H:%M") for h in homes[:3])
                hint = f"; they belong to partition(s) {shown} (a file in the wrong folder or under the wrong name?)"
        raise ContractViolation(
            source, origin, col,
            f"{int(outside.sum())} row(s) outside the partition [{start.isoformat()}, {end.isoformat()}){hint}",
            df.loc[outside, col].astype(str).head(MAX_EXAMPLES).tolist(),
        )


def _misplaced_rejects(frame: pd.DataFrame, misplaced: np.ndarray, source: str, f, col: str) -> pd.DataFrame:
    """One reject per row of file ``f`` outside its partition (a minority of the file: a clock off, a late row),
    naming the file, the column, the value and the partition it belongs to."""
    rows = np.flatnonzero(misplaced)
    values = frame[col].iloc[rows]
    homes = pd.to_datetime(values.astype(str), utc=True, errors="coerce")
    homes = homes.dt.normalize() if source == "cost_capacity" else homes.dt.floor(PARTITION_FREQ)
    span = f"[{pd.Timestamp(f.start).isoformat()}, {pd.Timestamp(f.end).isoformat()})"
    reasons = [f"{f.origin}: {col} {v} outside the file's partition {span}"
               + (f"; it belongs to {h:%Y-%m-%d %H:%M}" if pd.notna(h) else "")
               + f" ({int(misplaced.sum())} of the file's {len(frame)} rows: a clock off, or a late row)"
               for v, h in zip(values.astype(str), homes)]
    failures = pd.DataFrame({"row_index": rows, "column": col, "check": OUTSIDE_PARTITION,
                             "value": values.astype(str).to_numpy(), "reason": reasons})
    return _rejects_frame(frame, failures, source, str(f.origin), pd.Timestamp(f.start))

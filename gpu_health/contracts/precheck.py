"""Table-level checks of one file before its rows are judged (columns, column types, timezone, partition
window), and the files they are run on: a :class:`FileBatch` (files read as one frame) and the rows kept of the
files that passed (:class:`_Kept`)."""

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pandera.pandas as pa

from gpu_health.contracts.models import CONTRACTS, PARTITION_COLUMN, empty_frame_dtypes
from gpu_health.contracts.rejects import ContractViolation
from gpu_health.contracts.rows import _coercion, _judge_types
from gpu_health.contracts.timestamps import (
    _check_window,
    _floor_minutes,
    _normalise_timestamps,
    _outside,
    _timestamp_columns,
)


def _check_columns(df: pd.DataFrame, schema: pa.DataFrameSchema, source: str, origin: str) -> list[str]:
    """Fail on a missing column; return the extra ones (the caller drops them).

    A file that lacks columns but holds every column of *another* contract is
    named as such: it is that table's file, landed in the wrong folder.
    """
    expected = list(schema.columns)
    missing = [c for c in expected if c not in df.columns]
    if missing:
        other = [t for t, m in CONTRACTS.items() if t != source and set(m.to_schema().columns) <= set(df.columns)]
        hint = f"; its columns are {other[0]}'s: a {other[0]} file in the {source} folder" if other else ""
        raise ContractViolation(source, origin, missing[0], f"missing column(s) {missing}; the contract has {expected}{hint}")
    return [c for c in df.columns if c not in expected]


def precheck(df: pd.DataFrame, source: str, *, start=None, end=None, origin: str = "<frame>") -> tuple[pd.DataFrame, list[str]]:
    """The table-level checks alone (columns, column types, timezone, partition window), for one file.

    Returns the file's frame reduced to the contract's columns and the extra
    columns it dropped. Cheap and pure pandas: run it per file, then validate the
    concatenation once (:func:`~gpu_health.contracts.validate.validate_frame` with per-row ``origin``), which is
    far faster than one pandera pass per 5-minute file.
    """
    df, extra, outside = _precheck_file(df, source, start=start, end=end, origin=origin)
    if outside is not None:
        _check_window(df, source, origin, pd.Timestamp(start), pd.Timestamp(end))
    return df, extra


def _precheck_file(df: pd.DataFrame, source: str, *, start=None, end=None,
                   origin: str = "<frame>") -> tuple[pd.DataFrame, list[str], np.ndarray | None]:
    """:func:`precheck` without the partition verdict: also returns which rows lie outside ``[start, end)`` (None
    when none does), for :func:`~gpu_health.contracts.validate.validate_files` to judge once it knows which of them
    are re-sent duplicates."""
    schema = CONTRACTS[source].to_schema()
    df = df.reset_index(drop=True)
    extra = _check_columns(df, schema, source, origin)
    df = _normalise_timestamps(df[list(schema.columns)].copy(), _timestamp_columns(schema), source, origin)
    df = _floor_minutes(df, source)
    outside = _outside(df, source, pd.Timestamp(start) if start is not None else None,
                       pd.Timestamp(end) if end is not None else None)
    _judge_types(df, schema, source, origin)
    return df, extra, outside


@dataclass
class FileBatch:
    """Consecutive files of one table with one physical schema, read as one frame (what a file source
    returns for speed; :func:`~gpu_health.contracts.validate.validate_files` judges each file of it exactly as if
    it had come alone).

    ``frame`` holds the files' rows in file order, ``lengths[i]`` of them from file ``i`` (named
    ``origins[i]``, holding the partition ``[starts[i], ends[i])``).
    """

    frame: pd.DataFrame
    origins: list[str]
    starts: list
    ends: list
    lengths: np.ndarray
    # per text column, its distinct non-null values (from the files' dictionaries); optional
    distinct: dict[str, np.ndarray] | None = None
    # per text column, (one dictionary code per row of frame, the code of a missing value); optional
    codes: dict[str, tuple[np.ndarray, int]] | None = None

    def bounds(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(np.asarray(self.lengths, dtype=np.int64))]).astype(np.int64)

    def files(self, frame: pd.DataFrame | None = None) -> list[SimpleNamespace]:
        """One Fetched-like part per file, its rows (of ``frame``, default the batch's) as its own frame."""
        frame = self.frame if frame is None else frame
        bounds = self.bounds()
        return [SimpleNamespace(frame=frame.iloc[bounds[i]:bounds[i + 1]].reset_index(drop=True), origin=o,
                                start=self.starts[i], end=self.ends[i], unreadable=None, ignored=None)
                for i, o in enumerate(self.origins)]


@dataclass
class _Kept:
    """Rows that passed their files' table-level checks: their files (path, partition, rows of each, in order)."""

    frame: pd.DataFrame
    origins: list
    partitions: list
    lengths: np.ndarray
    file: object = None  # the one file (Fetched-like) of these rows; None for a batch
    batch: FileBatch | None = None
    distinct: dict | None = None
    codes: dict | None = None
    outside: np.ndarray | None = None  # per row of the one file: outside its partition (None: no row is)
    rows: np.ndarray | None = None  # each row's number within its file, when rows were dropped (None: 0, 1, ...)

    @classmethod
    def of_file(cls, f, frame: pd.DataFrame) -> "_Kept":
        return cls(frame, [f.origin], [pd.Timestamp(f.start) if f.start is not None else pd.NaT],
                   np.array([len(frame)], dtype=np.int64), file=f)

    @classmethod
    def of_batch(cls, b: FileBatch, frame: pd.DataFrame) -> "_Kept":
        return cls(frame, list(b.origins), [pd.Timestamp(s) if s is not None else pd.NaT for s in b.starts],
                   np.asarray(b.lengths, dtype=np.int64), batch=b, distinct=b.distinct, codes=b.codes)

    def per_file(self) -> list["_Kept"]:
        """The same rows, one entry per file (the raw file as ``file``, its prechecked rows as ``frame``)."""
        if self.batch is None:
            return [self]
        return [_Kept.of_file(raw, checked.frame)
                for raw, checked in zip(self.batch.files(), self.batch.files(self.frame))]


def _precheck_batch(b: FileBatch, source: str, schema: pa.DataFrameSchema) -> tuple[pd.DataFrame, list[str]] | None:
    """:func:`precheck` of every file of ``b`` at once, when each would pass it; None when any might not (then
    the files are prechecked one by one, so a failing file is named and quarantined alone).

    Every check of :func:`precheck` depends on the file's dtypes (one schema: the same for all files of the
    batch) or on each row alone against its own file's partition, so judged on the concatenation it holds for
    every file exactly when it holds for each."""
    df = b.frame
    expected = list(schema.columns)
    if any(c not in df.columns for c in expected) or any(s is None for s in b.starts) or source == "cost_capacity":
        return None
    extra = [c for c in df.columns if c not in expected]
    df = df if list(df.columns) == expected else df[expected]
    df = df.reset_index(drop=True) if not isinstance(df.index, pd.RangeIndex) or df.index.start != 0 else df
    for col in _timestamp_columns(schema):
        if not isinstance(df[col].dtype, pd.DatetimeTZDtype):
            return None
    df = _floor_minutes(df, source)
    col = PARTITION_COLUMN.get(source)
    if col is not None and len(df):
        s = df[col]
        if s.dtype != _UTC_NS:
            s = s.dt.tz_convert("UTC")
            if s.dtype != _UTC_NS:
                return None
        lengths = np.asarray(b.lengths, dtype=np.int64)
        lo = np.repeat(np.array([pd.Timestamp(x).value for x in b.starts], dtype=np.int64), lengths)
        hi = np.repeat(np.array([pd.Timestamp(x).value for x in b.ends], dtype=np.int64), lengths)
        v = s.to_numpy(dtype="datetime64[ns]").view(np.int64)
        present = ~s.isna().to_numpy()
        if (present & ((v < lo) | (v >= hi))).any():
            return None
    for name, c in schema.columns.items():
        if _coercion(df[name], c) is not None:
            return None
    if df is b.frame:
        df = df.copy(deep=False)
    df = _normalise_timestamps(df, _timestamp_columns(schema), source, b.origins[0] if b.origins else "<batch>")
    return df, extra


_UTC_NS = pd.DatetimeTZDtype("ns", "UTC")


def _empty_contract_frame(frame: pd.DataFrame, source: str) -> bool:
    """A zero-row frame of exactly the contract's columns and dtypes (an absent optional file's stand-in):
    :func:`precheck` would return it unchanged."""
    if len(frame):
        return False
    dtypes = empty_frame_dtypes(source)
    return list(frame.columns) == list(dtypes.index) and frame.dtypes.equals(dtypes)

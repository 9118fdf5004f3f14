"""What a rejection looks like: the table-level :class:`ContractViolation`, the :class:`Validated` result, and
the rejects table (one row per rejected row, or one :data:`WHOLE_FILE` row per file quarantined whole).

Every reject names where it came from (file / URL), the partition of its file, its row within that file, the
column, the check, the value (bounded) and the reason: re-running a partition replaces exactly its rejects."""

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd


MAX_EXAMPLES = 5


# the check of a row rejected because it lies outside its file's partition
OUTSIDE_PARTITION = "outside_partition"


# row_index of a reject that stands for a whole file (quarantined, or found where no partition reads it)
WHOLE_FILE = -1


REJECT_COLUMNS = ["source", "partition_start", "origin", "row_index", "column", "check", "value", "reason", "row_json"]


class ContractViolation(ValueError):
    """The table as a whole breaks its contract; nothing of it is written."""

    def __init__(self, source: str, origin: str, column: str | None, problem: str, examples=()):
        self.source, self.origin, self.column, self.problem = source, origin, column, problem
        self.examples = [_short(v) for v in list(examples)[:MAX_EXAMPLES]]
        where = f"column '{column}'" if column else "table"
        ex = f"; examples: {self.examples}" if self.examples else ""
        super().__init__(f"{origin}: {source}: {where}: {problem}{ex}")


@dataclass
class Validated:
    """The rows that keep their contract, and the rejected ones with their reasons."""

    valid: pd.DataFrame
    rejects: pd.DataFrame
    sentinels_nulled: int = 0
    # extra column -> the origins that carried it (dropped: schema evolution, not corruption)
    dropped_columns: dict[str, list[str]] = field(default_factory=dict)
    # rows dropped as re-deliveries of rows already stored or read (at-least-once delivery: counted, never rejected)
    duplicates_dropped: int = 0

    @property
    def row_rejects(self) -> pd.DataFrame:
        """Rejects of single rows (the files quarantined whole excluded)."""
        return self.rejects[self.rejects["row_index"] != WHOLE_FILE] if len(self.rejects) else self.rejects

    @property
    def files_quarantined(self) -> pd.DataFrame:
        """One row per file quarantined whole: its partition, path and reason."""
        return self.rejects[self.rejects["row_index"] == WHOLE_FILE] if len(self.rejects) else self.rejects

    @property
    def reject_counts(self) -> dict[str, int]:
        rows = self.row_rejects
        if rows.empty:
            return {}
        return (rows.drop_duplicates(["origin", "partition_start", "row_index", "reason"]).groupby("reason").size()
                .sort_values(ascending=False).to_dict())


class PerFile:
    """One value per row (a row's file path, or its file's partition) stored once per file: row ``i``'s value
    is ``values[codes[i]]``. What :func:`~gpu_health.contracts.validate.validate_frame` takes as per-row
    ``origin`` / ``partition`` when files were concatenated: a day of GPU telemetry has 1.7 M rows but 288 files."""

    def __init__(self, values, codes: np.ndarray):
        self.values = np.empty(len(values), dtype=object)
        self.values[:] = list(values)
        self.codes = np.asarray(codes, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, rows) -> np.ndarray:
        return self.values[self.codes[rows]]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.values[self.codes]
        return out if dtype is None else out.astype(dtype)

    def distinct(self) -> np.ndarray:
        """``pd.unique`` of the per-row values (first-seen order)."""
        return pd.unique(self.values[pd.unique(self.codes)])


def _distinct_origins(origins) -> np.ndarray:
    return origins.distinct() if isinstance(origins, PerFile) else pd.unique(origins)


def _label(origins) -> str:
    uniq = _distinct_origins(origins) if len(origins) else np.array(["<empty>"])
    return str(uniq[0]) if len(uniq) == 1 else f"{uniq[0]} (+{len(uniq) - 1} more files)"


def _short(value) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def empty_rejects() -> pd.DataFrame:
    """A rejects frame without rows (a copy of one built once: building it costs a few ms, and a clean source's
    validation returns a few for each table and piece)."""
    return _EMPTY_REJECTS.copy()


def _empty_rejects() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype="object") for c in REJECT_COLUMNS})
    frame["partition_start"] = pd.Series(dtype="datetime64[ns, UTC]")
    frame["row_index"] = pd.Series(dtype="int64")
    return frame


_EMPTY_REJECTS = _empty_rejects()


# the most characters of one value a reject keeps (value and row_json): a reject of an over-long text
# must not store the text it was rejected for
REJECT_VALUE_CHARS = 1024


def _bounded(value):
    """A value as stored in a reject: text over :data:`REJECT_VALUE_CHARS` is cut, with its length."""
    if isinstance(value, str) and len(value) > REJECT_VALUE_CHARS:
        return f"{value[:REJECT_VALUE_CHARS]}...[{len(value):,} characters]"
    return value


_NO_FAILURES = pd.DataFrame(columns=["row_index", "column", "check", "value", "reason"])


def _no_failures() -> pd.DataFrame:
    return _NO_FAILURES.copy()


def _violation_reject(source: str, f, v: ContractViolation) -> dict:
    check = "missing_column" if "missing column" in v.problem else (
        OUTSIDE_PARTITION if "outside the partition" in v.problem else (
            "naive_timestamps" if "naive timestamps" in v.problem else (
                "column_type" if "cannot be coerced" in v.problem or "not timestamps" in v.problem
                or "where timestamps are expected" in v.problem else "table_contract")))
    return _file_reject(source, f, check, v.column, str(v), v.examples)


def _file_reject(source: str, f, check: str, column, reason: str, examples) -> dict:
    """The reject row of a file quarantined whole: its partition, path, the check and the reason (which
    names the file); ``row_json`` describes the file (its rows stay in the landing zone, untouched)."""
    rows = None if (getattr(f, "unreadable", None) or getattr(f, "ignored", None)) else int(len(f.frame))
    return {"source": source, "partition_start": pd.Timestamp(f.start) if f.start is not None else pd.NaT,
            "origin": str(f.origin), "row_index": WHOLE_FILE, "column": column, "check": f"file:{check}",
            "value": None if not examples else json.dumps([_jsonable(e) for e in examples]),
            "reason": reason if str(f.origin) in reason else f"{f.origin}: {reason}",
            "row_json": json.dumps({"file": str(f.origin), "rows": rows,
                                    "columns": None if rows is None else [str(c) for c in f.frame.columns],
                                    "quarantined": "whole file: none of its rows landed" if check != "stray_file"
                                    else "not read: its name is no partition of the landing layout"})}


def _rejects_frame(df: pd.DataFrame, failures: pd.DataFrame, source: str, origin, start,
                   partition=None, row_number=None) -> pd.DataFrame:
    if failures.empty:
        return empty_rejects()
    failures = failures.drop_duplicates(["row_index", "column", "check"])
    raw = df.loc[failures["row_index"].values]
    row_json = [json.dumps({k: _jsonable(_bounded(v)) for k, v in rec.items()}) for rec in raw.to_dict("records")]
    rows = failures["row_index"].to_numpy(dtype=np.int64)
    out = pd.DataFrame({
        "source": source,
        # the rejected rows' partitions only (a PerFile, or one value per row: Timestamps or UTC datetime64)
        "partition_start": (pd.to_datetime(pd.Series(partition[rows] if isinstance(partition, PerFile)
                                                     else np.asarray(partition)[rows]), utc=True).values
                            if partition is not None else (pd.Timestamp(start) if start is not None else pd.NaT)),
        "origin": origin[rows] if not isinstance(origin, str) else origin,
        "row_index": np.asarray(row_number, dtype=np.int64)[rows] if row_number is not None else rows,
        "column": [c if isinstance(c, str) else None for c in failures["column"]],
        "check": failures["check"].values,
        "value": [None if v is None else _bounded(v) for v in failures["value"]],
        "reason": failures["reason"].values,
        "row_json": row_json,
    })
    out["partition_start"] = pd.to_datetime(out["partition_start"], utc=True)
    return out.reset_index(drop=True)


def _jsonable(v):
    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, pd.Timestamp):
        return v.isoformat()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, int | float | str | bool):
        return v
    return str(v)

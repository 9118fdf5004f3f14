"""Judge a frame against its contract: fail the table, or quarantine the rows.

Two kinds of breakage, handled differently (contracts.md, issue #2):

* **Table-level** -- the file as a whole is wrong: unreadable, a missing
  column, a column whose type cannot be coerced, naive timestamps, or
  timestamps outside the partition being read. Whatever rows we kept from it
  would be wrong, so :class:`ContractViolation` names the origin (file / URL),
  the column and up to five example values. Read file by file
  (:func:`validate_files`), such a file is **quarantined whole**: one reject
  row (``row_index`` = :data:`WHOLE_FILE`) carries its path and reason, its
  partition lands no rows, and every other file of the range lands as if it
  had been read alone. The blast radius of a bad file is its own partition.
* **Row-level** -- some rows break a rule (null in a required field, negative
  counter, percentage above 100, ``+-inf``, text over its bound, unknown enum
  value, duplicate key, DCGM "not supported" sentinel in a required field
  ...). Those rows go to the rejects table with their reason and the good
  rows go on.

An **extra column** is schema evolution, not corruption (exporters add fields
with new versions): it is dropped, named in ``Validated.dropped_columns``, and
the rows land.

Rejects are keyed by the partition of the file they came from and the row
number within that file, so re-running a partition replaces exactly its rejects.

DCGM sentinels in *optional* fields become null first: absence is not a zero
reading, and not a reason to reject the row either.
"""

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandas._libs import lib
from pandera.errors import SchemaError, SchemaErrors

from gpu_health.constants import PARTITION, PARTITION_FREQ
from gpu_health.contracts.models import (
    CONTRACTS,
    DCGM_FP64_SENTINEL,
    MINUTE_GRAIN_SOURCES,
    PARTITION_COLUMN,
    POS_INF_ALLOWED_COLUMNS,
    empty_frame,
    empty_frame_dtypes,
    text_bound,
)

MAX_EXAMPLES = 5
# A column is "of the wrong type" (table-level) when at least this share of its
# non-null values cannot be coerced; below it, the odd bad value is a bad row.
WRONG_TYPE_SHARE = 0.5

# A file is *misplaced* (in the wrong folder, under the wrong name) when more than half of its rows -- re-sent
# duplicates not counted -- lie outside its partition: then most of it is another partition's data, and its name is
# what is wrong, so it is quarantined whole. A minority of rows outside is a row fault (one node's clock off, a
# late sample): those rows are rejected one by one and the rest of the file lands. Half is the only share that
# gives every file one partition it mostly belongs to, whatever the cluster's size or the file's length.
MISPLACED_SHARE = 0.5

# the check of a row rejected because it lies outside its file's partition
OUTSIDE_PARTITION = "outside_partition"

# row_index of a reject that stands for a whole file (quarantined, or found where no partition reads it)
WHOLE_FILE = -1

REJECT_COLUMNS = ["source", "partition_start", "origin", "row_index", "column", "check", "value", "reason", "row_json"]

_DCGM_NUMERIC = {
    "gpu_telemetry": [
        "gpu_util_pct", "sm_active", "tensor_active", "fb_used_mib", "power_w", "temp_c",
        "sm_clock_mhz", "throttle_reasons", "ecc_sbe_delta", "ecc_dbe_delta", "xid",
    ],
}


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
    is ``values[codes[i]]``. What :func:`validate_frame` takes as per-row ``origin`` / ``partition`` when
    files were concatenated: a day of GPU telemetry has 1.7 M rows but 288 files."""

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


def _timestamp_columns(schema: pa.DataFrameSchema) -> list[str]:
    return [name for name, col in schema.columns.items() if isinstance(col.dtype.type, pd.DatetimeTZDtype)]


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


def _as_float(s: pd.Series) -> np.ndarray:
    """``pd.to_numeric(s, errors="coerce")`` as float64 (missing and non-numbers NaN), without the round trip
    through pandas when the column already holds numbers. An integer converts exactly up to 2**53; above
    that it rounds to a neighbour, which leaves every comparison with the DCGM blanks (2**47 and up) and
    with +-inf unchanged."""
    if pd.api.types.is_float_dtype(s.dtype) or (pd.api.types.is_integer_dtype(s.dtype)):
        return s.to_numpy(dtype="float64", na_value=np.nan)
    return pd.to_numeric(s, errors="coerce").astype("float64").to_numpy()


def _null_sentinels(df: pd.DataFrame, source: str) -> tuple[pd.DataFrame, int, pd.DataFrame]:
    """Optional DCGM fields: sentinel -> null. Required ones: mark for rejection."""
    schema = CONTRACTS[source].to_schema()
    marks = []
    count = 0
    for col in _DCGM_NUMERIC.get(source, []):
        # int64 sentinels (>= 0x7ffffffffffffff0) are far above the FP64 blank (2**47),
        # so one numeric comparison catches both.
        values = _as_float(df[col])
        # +inf is no DCGM blank (those are finite codes): it is left for _check_values to reject
        with np.errstate(invalid="ignore"):
            mask = pd.Series((values >= DCGM_FP64_SENTINEL) & np.isfinite(values), index=df.index)
        if not mask.any():
            continue
        if schema.columns[col].nullable:
            df[col] = df[col].astype("object").where(~mask, None)
            count += int(mask.sum())
        else:
            marks.append(pd.DataFrame({"row_index": df.index[mask], "column": col, "check": "dcgm_sentinel",
                                       "value": df.loc[mask, col].astype(str).values,
                                       "reason": f"DCGM 'not supported' sentinel in required field {col}"}))
    marked = pd.concat(marks) if marks else pd.DataFrame(columns=["row_index", "column", "check", "value", "reason"])
    return df, count, marked


_BOOL_TEXT = {"true": True, "false": False, "1": True, "0": False}


def _as_bool(v):
    """A bool for the values a bool column may hold, else None (never truthiness)."""
    if isinstance(v, bool | np.bool_):
        return bool(v)
    if isinstance(v, int | np.integer | float | np.floating) and v in (0, 1):
        return bool(v)
    if isinstance(v, str):
        return _BOOL_TEXT.get(v.strip().lower())
    return None


def _coercion(s: pd.Series, col) -> tuple[pd.Series, pd.Series, str, bool, bool] | None:
    """How the non-null values of ``s`` coerce to ``col``'s type: (non-null values, ok mask,
    what a bad one is, boolean column?, integer column?); None when the column needs no coercion
    (already of the type, or not a numeric / bool column)."""
    kind = col.dtype.type
    if isinstance(kind, pd.DatetimeTZDtype):
        return None
    numeric = pd.api.types.is_numeric_dtype(kind) if not isinstance(kind, pd.api.extensions.ExtensionDtype) else kind.kind in "iuf"
    integer = numeric and (kind.kind in "iu" if hasattr(kind, "kind") else pd.api.types.is_integer_dtype(kind))
    boolean = str(col.dtype) == "bool"
    if boolean:
        already = pd.api.types.is_bool_dtype(s.dtype)
    elif integer:
        already = pd.api.types.is_integer_dtype(s.dtype)
    elif numeric:
        already = pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype)
    else:
        return None
    if already:
        return None
    nonnull = s.dropna()
    if nonnull.empty:
        return None
    if boolean:
        return nonnull, nonnull.map(_as_bool).notna(), "not a boolean", True, False
    converted = pd.to_numeric(nonnull, errors="coerce")
    ok = converted.notna()
    what = "not a number"
    if integer:
        whole = ok & (converted.astype("float64") % 1 == 0)
        if (ok & ~whole).any():
            what = "not a whole number"
        ok = whole
    return nonnull, ok, what, False, True


def _judge_types(df: pd.DataFrame, schema: pa.DataFrameSchema, source: str, origin: str) -> None:
    """A column mostly made of values of another type fails its file (see :func:`_check_types`)."""
    for name, col in schema.columns.items():
        judged = _coercion(df[name], col)
        if judged is None:
            continue
        nonnull, ok, _, _, _ = judged
        if (~ok).mean() >= WRONG_TYPE_SHARE:
            raise ContractViolation(source, origin, name, f"type {df[name].dtype} cannot be coerced to {col.dtype}",
                                    nonnull[~ok].head(MAX_EXAMPLES).tolist())


def _check_types(df: pd.DataFrame, schema: pa.DataFrameSchema, source: str, origin: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A column mostly made of values of another type fails the table; the odd bad value is a bad row.

    pandera's own coercion cannot be trusted with either: an uncoercible value
    leaves the column un-coerced, so the range checks then raise on a *string*
    (reported without a row index), ``astype(bool)`` turns ``"False"`` into True,
    and ``astype(int64)`` truncates 2.5 to 2. So numeric and bool columns are
    coerced here; rows whose value cannot be (or is null in a required integer
    column, which pandera reports three times over) are marked for rejection.
    """
    _judge_types(df, schema, source, origin)
    marks = []
    for name, col in schema.columns.items():
        s = df[name]
        judged = _coercion(s, col)
        if judged is not None:
            nonnull, ok, what, boolean, _ = judged
            bad = nonnull.index[~ok.to_numpy()]
            if len(bad):
                marks.append(pd.DataFrame({"row_index": bad, "column": name, "check": f"coerce_dtype('{col.dtype}')",
                                           "value": [_bounded(v) for v in df.loc[bad, name].astype(str)],
                                           "reason": f"value of {name} cannot be coerced to {col.dtype} ({what})"}))
            if boolean:
                df[name] = s.astype("object").where(s.isna(), s.map(_as_bool))
        kind = col.dtype.type
        integer_or_bool = str(col.dtype) == "bool" or (
            not isinstance(kind, pd.DatetimeTZDtype | pd.StringDtype)
            and (pd.api.types.is_integer_dtype(kind) if not isinstance(kind, pd.api.extensions.ExtensionDtype)
                 else kind.kind in "iu"))
        if integer_or_bool and not col.nullable and s.isna().any():
            nulls = s.index[s.isna().to_numpy()]
            marks.append(pd.DataFrame({"row_index": nulls, "column": name, "check": "not_nullable",
                                       "value": df.loc[nulls, name].astype(str).values,
                                       "reason": f"null in required field {name}"}))
    marked = pd.concat(marks, ignore_index=True) if marks else _no_failures()
    return df, marked


def _check_values(df: pd.DataFrame, schema: pa.DataFrameSchema, distinct: dict | None = None) -> pd.DataFrame:
    """Rows with a value no collector can read (contracts.models.SourceModel): ``+-inf`` in a float
    column, text longer than :func:`~gpu_health.contracts.models.text_bound`, or a NUL character
    (PostgreSQL text cannot hold one, so SQLite and PostgreSQL would disagree on the row).

    Text is judged on its distinct values: identifiers repeat across a partition's rows, so this
    costs one hash pass per column, not one Python string scan per row."""
    marks = []
    for name, col in schema.columns.items():
        s = df[name]
        if pd.api.types.is_float_dtype(s.dtype) or (s.dtype == object and _is_float_column(col)):
            values = _as_float(s)
            inf = np.isneginf(values) if name in POS_INF_ALLOWED_COLUMNS else np.isinf(values)
            if inf.any():
                rows = s.index[inf]
                marks.append(pd.DataFrame({"row_index": rows, "column": name, "check": "finite",
                                           "value": [repr(float(v)) for v in values[inf]],
                                           "reason": f"{name} is infinite (a finite number is required)"}))
        elif isinstance(col.dtype.type, pd.StringDtype) and len(s):
            marks += _text_faults(s, name, (distinct or {}).get(name))
    return pd.concat(marks, ignore_index=True) if marks else _no_failures()


def _text_faults(s: pd.Series, name: str, distinct: np.ndarray | None = None) -> list[pd.DataFrame]:
    """Rows of text column ``name`` over :func:`text_bound`, or holding a NUL character."""
    bound = text_bound(name)
    # distinct values first: identifiers repeat, and str() of a contract text value is the value itself
    uniq = distinct if distinct is not None else _distinct_text(s)
    long = [u for u in uniq if len(u) > bound]
    nul = [u for u in uniq if "\x00" in u]
    marks = []
    for bad, check in ((long, f"str_length(max_value={bound})"), (nul, "no_nul")):
        if not bad:
            continue
        hit = s.astype("object").isin(bad).to_numpy()
        reasons = [f"text in {name} is {len(v):,} characters, over its bound of {bound:,}" if check != "no_nul"
                   else f"NUL character in {name} (text cannot hold it)" for v in s[hit]]
        marks.append(pd.DataFrame({"row_index": s.index[hit], "column": name, "check": check,
                                   "value": [_bounded(v) for v in s[hit]], "reason": reasons}))
    return marks


def _is_float_column(col) -> bool:
    kind = col.dtype.type
    return not isinstance(kind, pd.api.extensions.ExtensionDtype) and pd.api.types.is_float_dtype(kind)


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


def _reason(check: str, column: str | None) -> str:
    check = str(check)
    if check.startswith("not_nullable"):
        return f"null in required field {column}"
    if check.startswith("coerce_dtype"):
        return f"value of {column} cannot be coerced ({check})"
    if check.startswith("field_uniqueness") or check.startswith("multiple_fields_uniqueness") or check == "unique":
        return f"duplicate key ({column})"
    if check.startswith("isin"):
        return f"unknown value of {column}"
    if check.startswith("greater_than") or check.startswith("less_than") or check.startswith("in_range"):
        return f"{column} out of range ({check})"
    if check.startswith("str_length"):
        return f"empty {column}"
    return f"{check} failed" + (f" on {column}" if column else "")


# pandera's built-in column checks that judge each value alone (so they hold for a column exactly when they
# hold for each of its distinct values): a text column is judged on its distinct values, which repeat
ELEMENTWISE_BUILTINS = frozenset({
    "equal_to", "not_equal_to", "greater_than", "greater_than_or_equal_to", "less_than", "less_than_or_equal_to",
    "in_range", "isin", "notin", "str_matches", "str_contains", "str_startswith", "str_endswith", "str_length",
})


def _na_mask(s: pd.Series) -> np.ndarray:
    """``s.isna()`` as an array; a text column with no missing value is recognised in one C pass (pandas'
    own isna on text costs a Python-object check per value)."""
    if isinstance(s.dtype, pd.StringDtype) and s.dtype.storage == "python":
        values = s.array._ndarray
        if lib.is_string_array(values, skipna=False):
            return np.zeros(len(s), dtype=bool)
    return s.isna().to_numpy(dtype=bool)


def _distinct_text(s: pd.Series) -> np.ndarray:
    """The distinct non-null values of a text column, as ``str`` (what the text rules judge)."""
    if isinstance(s.dtype, pd.StringDtype) and s.dtype.storage == "python":
        uniq = np.asarray(s.unique().to_numpy(dtype=object, na_value=None), dtype=object)
        return uniq[pd.notna(uniq)] if any(u is None for u in uniq) else uniq
    return pd.unique(s.dropna().astype(str))


def text_codes(df: pd.DataFrame, distinct: dict | None, codes: dict | None) -> tuple[dict, dict]:
    """``distinct`` and ``codes`` (see :func:`passes_contract`) completed for every text column of ``df`` the caller
    gave none for, from one :func:`gpu_health.codes.factorize` of it: its distinct values and a code per row (-1
    missing). A frame handed over in memory (the simulator's, a test's) has no Parquet dictionary to take them from;
    its rows share a string object per value, so factorizing by object costs a fraction of hashing every value for
    the text rules and again for the missing values and duplicate keys (half a simulated day of the six sources at
    1,200 GPUs: 0.91 -> 0.46 CPU s; its 864,000 GPU rows 0.52 -> 0.23)."""
    from gpu_health.codes import factorize

    distinct, codes = dict(distinct or {}), dict(codes or {})
    for name in df.columns:
        s = df[name]
        if not (isinstance(s.dtype, pd.StringDtype) and s.dtype.storage == "python"):
            continue
        if name in distinct and name in codes:
            continue
        row_codes, uniques = factorize(s)
        distinct.setdefault(name, np.asarray(uniques, dtype=object))
        codes.setdefault(name, (row_codes, -1))
    return distinct, codes


def passes_contract(df: pd.DataFrame, schema: pa.DataFrameSchema, distinct: dict | None = None,
                    codes: dict | None = None) -> bool:
    """True only when ``schema.validate(df, lazy=True)`` would pass and return ``df``'s values unchanged.

    The rules are the pandera schema's own -- its columns, dtypes, nullability, uniqueness and checks, each
    check run through pandera (column checks on the non-null values, as pandera runs them; a text column's
    element-wise built-ins on its distinct values; dataframe checks' functions on the frame) -- without
    pandera's per-check bookkeeping (copies, failure-case tables, a null scan per check), which costs more
    than the checks on a large clean frame. Anything this does not judge exactly (a dtype that coercion
    would change, a grouped or element-wise custom check, a schema option it does not model) answers
    False, and the caller runs pandera itself: a False is never a verdict, only "ask pandera".

    ``distinct`` (optional) maps a text column to values that include all of its non-null ones (e.g. a
    Parquet column's dictionary): a superset is enough, since a check that holds for every value of a
    superset holds for the column (and a value absent from the column only ever sends it to pandera).
    ``codes`` (optional) maps a text column to ``(codes, na_code)``: one integer per row of ``df``, equal
    exactly when the values are (a dictionary encoding), ``na_code`` for a missing value; missing values
    and duplicate keys are then found on integers.
    """
    codes = {k: v for k, v in (codes or {}).items() if len(v[0]) == len(df)}
    if (schema.index is not None or schema.ordered or not schema.strict or schema.add_missing_columns
            or schema.drop_invalid_rows or getattr(schema, "parsers", None) or schema.unique_column_names):
        return False
    if list(df.columns) != list(schema.columns) or df.columns.has_duplicates:
        return False
    for name, col in schema.columns.items():
        s = df[name]
        # the same dtype, and not object (whose coercion, e.g. pandera's Date, rewrites values): coercion is a no-op
        if (col.regex or not col.required or getattr(col, "parsers", None) or col.dtype.type != s.dtype
                or s.dtype == object):
            return False
        na = (codes[name][0] == codes[name][1]) if name in codes else _na_mask(s)
        has_na = bool(na.any())
        if has_na and not col.nullable:
            return False
        if col.unique and (pd.Series(codes[name][0]) if name in codes else s).duplicated().any():
            return False
        if not col.checks:
            continue
        values = s[~na] if has_na else s
        known = None
        for check in col.checks:
            if check.groupby is not None or check.element_wise or (has_na and not check.ignore_na):
                return False
            target = values
            if isinstance(s.dtype, pd.StringDtype) and check.name in ELEMENTWISE_BUILTINS:
                if known is None:
                    hint = (distinct or {}).get(name)
                    known = pd.Series(hint if hint is not None else _distinct_text(values), dtype=s.dtype)
                target = known
            if not bool(check(target).check_passed):
                return False
    if schema.unique:
        key = pd.DataFrame({k: codes[k][0] if k in codes else df[k].array for k in schema.unique})
        if key.duplicated().any():
            return False
    for check in schema.checks:
        if check.groupby is not None or check.element_wise:
            return False
        out = check._check_fn(df, **check._check_kwargs)
        if isinstance(out, pd.DataFrame) or not bool(out.all() if hasattr(out, "all") else out):
            return False
    return True


def _pandera_failures(df: pd.DataFrame, model, source: str, origin: str, distinct: dict | None = None,
                      codes: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Row-level failure cases of a lazy validation (first row of a duplicate kept),
    and the validated frame when nothing failed (so a clean frame is validated once).
    A frame :func:`passes_contract` clears is returned as validated without pandera's own pass."""
    schema = model.to_schema()
    if passes_contract(df, schema, distinct, codes):
        return _no_failures(), df
    try:
        return _no_failures(), model.validate(df, lazy=True)
    except SchemaErrors as errs:
        fc = errs.failure_cases.copy()
    rows = fc[fc["index"].notna()]
    table_level = fc[fc["index"].isna()]
    if not table_level.empty:
        first = table_level.iloc[0]
        col = first["column"] if isinstance(first["column"], str) else None
        raise ContractViolation(source, origin, col, f"{first['check']} failed", table_level["failure_case"].tolist())
    rows = rows.assign(row_index=rows["index"].astype("int64"), reason=None)
    # pandera reports every member of a duplicate group: keep the first occurrence.
    unique_cols = schema.unique or []
    dup_checks = rows["check"].astype(str).str.contains("uniqueness|^unique$", regex=True)
    # a dataframe-wide check (e.g. step_time_null_iff_no_steps) is reported once per
    # column of the failing row: one reject per row, named after the check.
    frame_checks = (rows["schema_context"] == "DataFrameSchema") & ~dup_checks
    if frame_checks.any():
        once = rows[frame_checks].drop_duplicates(["row_index", "check"])
        once = once.assign(column=None, failure_case=None, reason=[f"{c} failed" for c in once["check"].astype(str)])
        rows = pd.concat([rows[~frame_checks], once])
        dup_checks = rows["check"].astype(str).str.contains("uniqueness|^unique$", regex=True)
    if dup_checks.any():
        keyed = [c for c in (unique_cols if unique_cols else []) if c in df.columns]
        dup_rows = rows[dup_checks]
        keep_out = set()
        for col in dup_rows["column"].dropna().unique():
            key = keyed if (keyed and col in keyed) else [col]
            dups = df.duplicated(subset=key, keep="first")
            keep_out |= set(df.index[dups])
        dup_rows = dup_rows[dup_rows["row_index"].isin(keep_out)].drop_duplicates("row_index")
        key_of = {c: (keyed if (keyed and c in keyed) else [c]) for c in dup_rows["column"].dropna().unique()}
        dup_rows = dup_rows.assign(reason=[f"duplicate key ({', '.join(key_of.get(c, [c]))})" for c in dup_rows["column"]])
        rows = pd.concat([rows[~dup_checks], dup_rows])
    return pd.DataFrame({
        "row_index": rows["row_index"].values,
        "column": rows["column"].values,
        "check": rows["check"].astype(str).values,
        "value": [None if v is None else str(v) for v in rows["failure_case"]],
        "reason": [r if isinstance(r, str) else _reason(c, col) for r, c, col in zip(rows["reason"], rows["check"], rows["column"])],
    }), None


def precheck(df: pd.DataFrame, source: str, *, start=None, end=None, origin: str = "<frame>") -> tuple[pd.DataFrame, list[str]]:
    """The table-level checks alone (columns, column types, timezone, partition window), for one file.

    Returns the file's frame reduced to the contract's columns and the extra
    columns it dropped. Cheap and pure pandas: run it per file, then validate the
    concatenation once (:func:`validate_frame` with per-row ``origin``), which is
    far faster than one pandera pass per 5-minute file.
    """
    df, extra, outside = _precheck_file(df, source, start=start, end=end, origin=origin)
    if outside is not None:
        _check_window(df, source, origin, pd.Timestamp(start), pd.Timestamp(end))
    return df, extra


def _precheck_file(df: pd.DataFrame, source: str, *, start=None, end=None,
                   origin: str = "<frame>") -> tuple[pd.DataFrame, list[str], np.ndarray | None]:
    """:func:`precheck` without the partition verdict: also returns which rows lie outside ``[start, end)`` (None
    when none does), for :func:`validate_files` to judge once it knows which of them are re-sent duplicates."""
    schema = CONTRACTS[source].to_schema()
    df = df.reset_index(drop=True)
    extra = _check_columns(df, schema, source, origin)
    df = _normalise_timestamps(df[list(schema.columns)].copy(), _timestamp_columns(schema), source, origin)
    df = _floor_minutes(df, source)
    outside = _outside(df, source, pd.Timestamp(start) if start is not None else None,
                       pd.Timestamp(end) if end is not None else None)
    _judge_types(df, schema, source, origin)
    return df, extra, outside


def _default_index(df: pd.DataFrame) -> bool:
    idx = df.index
    return isinstance(idx, pd.RangeIndex) and idx.start == 0 and idx.step == 1


def strip_region(df: pd.DataFrame, distinct: dict | None, codes: dict | None) -> tuple[pd.DataFrame, dict | None, dict | None]:
    """``df`` with its ``region`` labels stripped of surrounding whitespace (``'us-east '`` is ``'us-east'``),
    and ``distinct`` / ``codes`` without the column when it changed (they are recomputed from the new values).

    A region label is an identifier (cloud and Slurm region names are letters, digits and dashes): whitespace
    around it is a typo in a collector's configuration, never a second region, and kept it would split one
    region's GPUs into a phantom region paid and priced apart. Case is not folded here: which spelling is the
    region's is Finance's list to say (cost_capacity), and a region x SKU it does not price is ticketed naming
    the priced spelling (gpu_health.diagnosis.inventory)."""
    if "region" not in df.columns:
        return df, distinct, codes
    uniq = distinct["region"] if distinct and "region" in distinct else _distinct_text(df["region"])
    if not any(isinstance(u, str) and u != u.strip() for u in uniq):
        return df, distinct, codes
    df["region"] = df["region"].str.strip()
    distinct = {k: v for k, v in (distinct or {}).items() if k != "region"}
    codes = {k: v for k, v in (codes or {}).items() if k != "region"}
    return df, distinct, codes


def validate_frame(df: pd.DataFrame, source: str, *, start=None, end=None, origin="<frame>",
                   partition=None, row_number=None, owned: bool = False, distinct: dict | None = None,
                   codes: dict | None = None) -> Validated:
    """Validate ``df`` as contract table ``source`` read for partition ``[start, end)``.

    ``origin`` names where the rows came from: one string, or one per row (when
    files were concatenated). ``partition`` and ``row_number`` (one per row, optional)
    key each reject by the partition of its file and its row within that file;
    without them a reject is filed under ``start`` with its position in ``df``.
    Returns the coerced good rows and the rejects; raises
    :class:`ContractViolation` on a table-level break. ``owned``: the caller hands
    ``df`` over (nobody else holds it), so clean rows may be returned without a copy.
    ``distinct``: per text column, values that include all of its non-null ones
    (see :func:`passes_contract`), so the text rules need not hash the column.
    ``codes``: per text column, ``(codes, na_code)`` for the rows of ``df`` as given
    (see :func:`passes_contract`).
    """
    model = CONTRACTS[source]
    schema = model.to_schema()
    # a shallow copy: every step below replaces whole columns, never writes into the caller's arrays
    df = df.reset_index(drop=True) if not _default_index(df) else df.copy(deep=False)
    per_row = not isinstance(origin, str)
    origins = (origin if isinstance(origin, PerFile) else np.asarray(origin, dtype=object)) if per_row else None
    label = _label(origins) if per_row else origin
    extra = _check_columns(df, schema, source, label)
    dropped = {c: sorted({str(o) for o in _distinct_origins(origins)}) if per_row else [label] for c in extra}
    if list(df.columns) != list(schema.columns):
        df = df[list(schema.columns)]
    df = _floor_minutes(_normalise_timestamps(df, _timestamp_columns(schema), source, label), source)
    start = pd.Timestamp(start) if start is not None else None
    end = pd.Timestamp(end) if end is not None else None
    _check_window(df, source, label, start, end)
    origin = origins if per_row else origin
    df, nulled, sentinel_rejects = _null_sentinels(df, source)
    df, type_rejects = _check_types(df, schema, source, label)
    df, distinct, codes = strip_region(df, distinct, codes)
    distinct, codes = text_codes(df, distinct, codes)
    value_rejects = _check_values(df, schema, distinct)
    # rows already condemned stay out of pandera: their values would break its coercion
    marked = [m for m in (sentinel_rejects, type_rejects, value_rejects) if not m.empty]
    premarked = pd.concat(marked, ignore_index=True) if marked else _no_failures()
    found, valid = _pandera_failures(df.drop(index=pd.Index(premarked["row_index"].unique())) if len(premarked) else df,
                                     model, source, label, distinct, None if len(premarked) else codes)
    parts = [f for f in (premarked, found) if not f.empty]
    failures = pd.concat(parts, ignore_index=True) if parts else _no_failures()
    if not failures.empty or valid is None:
        good = df.drop(index=pd.Index(failures["row_index"].unique()))
        try:
            valid = good if passes_contract(good, schema, distinct) else model.validate(good, lazy=True)
        except (SchemaError, SchemaErrors) as err:  # a rule that only breaks once rows are gone
            raise ContractViolation(source, label, None, f"remaining rows still break the contract: {err}") from err
    rejects = _rejects_frame(df, failures, source, origin, start, partition, row_number)
    if valid is df and not owned:
        valid = valid.copy()  # the caller's arrays stay the caller's
    valid = valid if _default_index(valid) else valid.reset_index(drop=True)
    return Validated(valid=valid, rejects=rejects, sentinels_nulled=nulled, dropped_columns=dropped)


@dataclass
class FileBatch:
    """Consecutive files of one table with one physical schema, read as one frame (what a file source
    returns for speed; :func:`validate_files` judges each file of it exactly as if it had come alone).

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


def validate_files(parts, source: str, *, start=None, end=None, history=None) -> Validated:
    """Validate the files of a window, each judged on its own partition; a bad file costs only its own.

    ``parts`` are :class:`~gpu_health.sources.base.Fetched`, one per file, each with
    the partition ``[start, end)`` it must hold (and ``unreadable`` set when it could
    not be parsed), or :class:`FileBatch` (several files read as one frame: judged as
    if they came one by one). A file that is unreadable, lacks a column, has a column of
    the wrong type, naive timestamps or rows outside its partition is quarantined
    whole (one :data:`WHOLE_FILE` reject naming the file and why; none of its rows
    land). The others are validated together in one pass (so a duplicate
    key across files is still seen); if that pass finds a table-level break only
    the concatenation shows, the files are judged one by one and the culprits
    quarantined. Extra columns are dropped and reported per file.

    Rows re-delivered (at-least-once delivery: :func:`_redelivered`) are dropped and counted in
    ``duplicates_dropped``, never rejected. Of the other rows, those outside their file's partition are rejected
    one by one (``outside_partition``), unless they are most of the file (:data:`MISPLACED_SHARE`): then the file
    is misplaced and quarantined whole. ``history(columns)`` (optional) returns those columns of the rows of this
    table already stored before the window (what a re-sent row may repeat).
    """
    schema = CONTRACTS[source].to_schema()
    quarantined, kept, dropped = [], [], {}
    for item in parts:
        if isinstance(item, FileBatch):
            fast = _precheck_batch(item, source, schema)
            if fast is not None:
                frame, extra = fast
                for c in extra:
                    dropped.setdefault(c, []).extend(item.origins)
                kept.append(_Kept.of_batch(item, frame))
                continue
            files = item.files()
        else:
            files = [item]
        for f in files:
            if getattr(f, "ignored", None):
                quarantined.append(_file_reject(source, f, "stray_file", None, f.ignored, None))
                continue
            if getattr(f, "unreadable", None):
                quarantined.append(_file_reject(source, f, "unreadable_file", None, f.unreadable, None))
                continue
            if _empty_contract_frame(f.frame, source):
                kept.append(_Kept.of_file(f, f.frame))
                continue
            try:
                frame, extra, outside = _precheck_file(f.frame, source, start=f.start, end=f.end, origin=f.origin)
            except ContractViolation as v:
                quarantined.append(_violation_reject(source, f, v))
                continue
            for c in extra:
                dropped.setdefault(c, []).append(f.origin)
            k = _Kept.of_file(f, frame)
            k.outside = outside
            kept.append(k)
    kept, misplaced, duplicates = _settle_redeliveries(kept, source, history, quarantined)
    try:
        result = _validate_kept(kept, source, start, end)
    except ContractViolation:
        alone = []
        for k in [one for k in kept for one in k.per_file()]:
            f = k.file
            try:
                _validate_kept([k], source, f.start, f.end)
                alone.append(k)
            except ContractViolation as v:
                quarantined.append(_violation_reject(source, f, v))
        result = _validate_kept(alone, source, start, end)
    files = pd.DataFrame(quarantined, columns=REJECT_COLUMNS) if quarantined else empty_rejects()
    if len(files):
        files["partition_start"] = pd.to_datetime(files["partition_start"], utc=True)
        files["row_index"] = files["row_index"].astype("int64")
    frames = [r for r in (files, *misplaced, result.rejects) if len(r)]
    rejects = pd.concat(frames, ignore_index=True) if len(frames) > 1 else (frames[0] if frames else empty_rejects())
    return Validated(valid=result.valid, rejects=rejects, sentinels_nulled=result.sentinels_nulled, dropped_columns=dropped,
                     duplicates_dropped=duplicates)


# The event a job ends with (contracts.md: scheduler_events.event). A job ends once: a requeued job is re-opened by
# ``requeued`` (or ``started``) before it can end again, so an ``ended`` that follows the job's ``ended`` is the
# same ending delivered again (with a new event_id by a scheduler that mints one per delivery).
TERMINAL_EVENTS = ("ended",)


def _key_columns(source: str) -> list[str]:
    """The columns that identify a row of ``source`` (its contract's unique key), as the warehouse keys it."""
    schema = CONTRACTS[source].to_schema()
    return list(schema.unique or []) or [n for n, c in schema.columns.items() if c.unique]


def _read_rows(kept: list[_Kept], columns: list[str]) -> pd.DataFrame:
    """``columns`` of every row kept so far, with its file's partition start (``_part``, ns), its entry in ``kept``
    (``_entry``), its position there (``_pos``) and whether it lies inside its file's partition (``_inside``)."""
    parts = []
    for i, k in enumerate(kept):
        n = len(k.frame)
        part = np.repeat(np.array([p.value for p in k.partitions], dtype=np.int64), k.lengths)
        parts.append(k.frame[columns].reset_index(drop=True).assign(
            _part=part, _entry=i, _pos=np.arange(n), _inside=~k.outside if k.outside is not None else True))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=[*columns, "_part", "_entry", "_pos", "_inside"])


def _redelivered(kept: list[_Kept], source: str, history) -> pd.DataFrame:
    """The rows of ``kept`` that repeat what is already stored or read earlier (``_entry``, ``_pos``):

    * a row outside its file's partition whose key (:func:`_key_columns`) a stored row or a row of an earlier
      partition's file holds: the tail of the file before, re-sent at the head of this one;
    * ``job_metadata``: a job already described (one row per job: the first stored wins), whatever partition
      re-sends it;
    * ``scheduler_events``: a :data:`TERMINAL_EVENTS` event of a job whose previous event is one (stored or read
      earlier), under whatever event_id.
    """
    none = pd.DataFrame({"_entry": pd.Series(dtype="int64"), "_pos": pd.Series(dtype="int64")})
    key = _key_columns(source)
    by_job = source in ("job_metadata", "scheduler_events")
    if not key or not kept or not (by_job or any(k.outside is not None for k in kept)):
        return none
    found = []
    if source == "scheduler_events":
        cols = ["job_id", "ts", "event"]
        read = _read_rows(kept, cols)
        stored = history(cols) if history is not None else None
        if stored is not None and len(stored):
            stored = stored[cols].assign(_part=np.iinfo(np.int64).min, _entry=-1, _pos=-1, _inside=True)
            read = pd.concat([stored, read], ignore_index=True)
        read = read.sort_values(["job_id", "ts", "_part", "_entry", "_pos"], kind="stable")
        terminal = read["event"].isin(TERMINAL_EVENTS)
        again = terminal & terminal.groupby(read["job_id"], sort=False).shift(1, fill_value=False).astype(bool)
        found.append(read.loc[again & (read["_entry"] >= 0), ["_entry", "_pos"]])
    if source == "job_metadata":
        key = ["job_id"]
    if by_job or any(k.outside is not None for k in kept):
        read = _read_rows(kept, key)
        candidates = (read if source == "job_metadata" else read[~read["_inside"].astype(bool)])
        earlier = read.loc[read["_inside"].astype(bool), [*key, "_part"]]
        # (the stored keys only matter to rows that may repeat one: none, and nothing is read)
        stored = history(key) if history is not None and len(candidates) else None
        if stored is not None and len(stored):
            earlier = pd.concat([stored[key].assign(_part=np.iinfo(np.int64).min), earlier], ignore_index=True)
        hit = candidates[[*key, "_part", "_entry", "_pos"]].merge(earlier, on=key, suffixes=("", "_before"))
        found.append(hit.loc[hit["_part_before"] < hit["_part"], ["_entry", "_pos"]])
    found = [f for f in found if len(f)]
    return pd.concat(found, ignore_index=True).drop_duplicates() if found else none


def _settle_redeliveries(kept: list[_Kept], source: str, history, quarantined: list) -> tuple[list[_Kept], list, int]:
    """Drop the re-delivered rows (:func:`_redelivered`), reject the other rows outside their file's partition one
    by one, or quarantine the file (appended to ``quarantined``) when they are most of it (:data:`MISPLACED_SHARE`).
    Returns the entries to validate, the frames of row rejects and the count of rows dropped as duplicates."""
    again = _redelivered(kept, source, history)
    if not len(again) and all(k.outside is None for k in kept):
        return kept, [], 0
    dup_of = {e: g["_pos"].to_numpy() for e, g in again.groupby("_entry")}
    out, rejects, duplicates = [], [], 0
    col = PARTITION_COLUMN.get(source)
    for i, k in enumerate(kept):
        if i not in dup_of and k.outside is None:
            out.append(k)
            continue
        dup = np.zeros(len(k.frame), dtype=bool)
        dup[dup_of.get(i, [])] = True
        pieces = k.per_file()
        bounds = np.concatenate([[0], np.cumsum(k.lengths)]).astype(np.int64)
        for j, one in enumerate(pieces):
            d = dup[bounds[j]:bounds[j + 1]]
            o = k.outside if k.outside is not None else np.zeros(len(d), dtype=bool)
            misplaced = o & ~d
            f, frame = one.file, one.frame
            # misplaced: most of its own rows belong elsewhere, or it holds none of its partition's (a copy of an
            # earlier file under a later name: landed as duplicates, its partition would read "nothing happened")
            if misplaced.sum() > MISPLACED_SHARE * (len(frame) - d.sum()) or (len(frame) and o.all()):
                try:
                    _check_window(frame[~d] if misplaced.any() else frame, source, f.origin,
                                  pd.Timestamp(f.start), pd.Timestamp(f.end))
                except ContractViolation as v:
                    quarantined.append(_violation_reject(source, f, v))
                continue
            duplicates += int(d.sum())
            if misplaced.any():
                rejects.append(_misplaced_rejects(frame, misplaced, source, f, col))
            keep = ~(d | misplaced)
            one.frame = frame[keep].reset_index(drop=True)
            one.lengths = np.array([int(keep.sum())], dtype=np.int64)
            one.rows = np.flatnonzero(keep).astype(np.int64)
            out.append(one)
    return out, rejects, duplicates


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


def _validate_kept(kept: list[_Kept], source: str, start, end) -> Validated:
    """One validation pass over the files that passed their precheck, rejects keyed by file partition and row."""
    if not kept:
        return Validated(valid=empty_frame(source), rejects=empty_rejects())
    lengths = np.concatenate([k.lengths for k in kept])
    codes = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    origins = PerFile([o for k in kept for o in k.origins], codes)
    partition = PerFile([p for k in kept for p in k.partitions], codes)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    row_number = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(offsets, lengths)
    if any(k.rows is not None for k in kept):  # files some rows were dropped from: each row keeps its number
        row_number = np.concatenate([k.rows if k.rows is not None else row_number[o:o + int(k.lengths.sum())]
                                     for k, o in zip(kept, np.concatenate([[0], np.cumsum([int(k.lengths.sum()) for k in kept])[:-1]]))])
    non_empty = [k for k in kept if len(k.frame)] or [kept[0]]
    frame = pd.concat([k.frame for k in non_empty], ignore_index=True) if len(non_empty) > 1 else non_empty[0].frame
    distinct = non_empty[0].distinct if len(non_empty) == 1 else None
    codes = non_empty[0].codes if len(non_empty) == 1 else None
    return validate_frame(frame, source, start=start, end=end, origin=origins, partition=partition, row_number=row_number,
                          owned=True, distinct=distinct, codes=codes)


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

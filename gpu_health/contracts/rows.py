"""Row-level checks: the rows that break a rule go to the rejects with their reason, the good rows go on.

DCGM sentinels (null in an optional field, a reject in a required one), values that cannot be coerced to their
column's type (and the column-type verdict that fails a file whose column is mostly of another type), ``+-inf``,
over-long text and NUL characters, and whatever pandera's own schema finds (nulls, ranges, enums, duplicate keys,
dataframe-wide checks)."""

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.errors import SchemaErrors

from gpu_health.contracts.models import CONTRACTS, DCGM_FP64_SENTINEL, POS_INF_ALLOWED_COLUMNS, text_bound
from gpu_health.contracts.passes import _distinct_text, passes_contract
from gpu_health.contracts.rejects import MAX_EXAMPLES, ContractViolation, _bounded, _no_failures


# A column is "of the wrong type" (table-level) when at least this share of its
# non-null values cannot be coerced; below it, the odd bad value is a bad row.
WRONG_TYPE_SHARE = 0.5


_DCGM_NUMERIC = {
    "gpu_telemetry": [
        "gpu_util_pct", "sm_active", "tensor_active", "fb_used_mib", "power_w", "temp_c",
        "sm_clock_mhz", "throttle_reasons", "ecc_sbe_delta", "ecc_dbe_delta", "xid",
    ],
}


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

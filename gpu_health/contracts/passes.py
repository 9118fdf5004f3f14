"""The fast verdict on a clean frame: :func:`passes_contract` says, without pandera's per-check bookkeeping,
when pandera's own validation would pass a frame unchanged (anything it cannot judge exactly answers "ask
pandera"); the text helpers it shares with the row checks (distinct values, dictionary codes, missing values)."""

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandas._libs import lib


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
    the text rules and again for the missing values and duplicate keys."""
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

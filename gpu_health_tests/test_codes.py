"""gpu_health.codes: factorize gives pd.factorize's answer, whatever objects the text column holds; unique_ints np.unique's."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from gpu_health.arrow_text import text_values
from gpu_health.codes import factorize, first_rows, is_missing, unique_ints

VALUES = ["node-b", "node-a", None, "node-c", "node-a", None, "node-b", "node-d", "node-a"]


def _shared(values):
    """A text column as the landing reader and the store build it: one object per distinct value."""
    return pd.Series(text_values(pa.chunked_array([pa.array(values).dictionary_encode()]))[0])


def _fresh(values):
    """The same values, each row its own string object (as a SQL read gives them)."""
    return pd.Series(["".join(list(v)) if v is not None else pd.NA for v in values], dtype="string")


def _equal_uniques(a, b):
    a, b = pd.Series(np.asarray(a, dtype=object)), pd.Series(np.asarray(b, dtype=object))
    pd.testing.assert_series_equal(a.isna(), b.isna())
    assert list(a[a.notna()]) == list(b[b.notna()])


@pytest.mark.parametrize("build", [_shared, _fresh, lambda v: np.array(v, dtype=object),
                                   lambda v: pd.Series(_shared(v * 50), dtype=object), lambda v: _shared(v * 50)])
@pytest.mark.parametrize("kw", [{}, {"sort": True}, {"use_na_sentinel": False},
                                {"sort": True, "use_na_sentinel": False}])
def test_factorize_gives_what_pandas_gives(build, kw):
    values = build(VALUES)
    want_codes, want_uniques = pd.factorize(values, **kw)
    codes, uniques = factorize(values, **kw)
    assert codes.dtype == np.int64
    np.testing.assert_array_equal(codes, want_codes)
    _equal_uniques(uniques, want_uniques)


def test_rows_that_share_objects_are_grouped_by_value_not_by_object():
    # two distinct objects of one value, each shared by many rows: one code, as pandas gives
    a, b = "".join(["gpu", "-1"]), "".join(["gpu-", "1"])
    assert a == b and a is not b
    values = np.array([a, b] * 20 + ["gpu-2"] * 10, dtype=object)
    codes, uniques = factorize(values)
    assert list(uniques) == ["gpu-1", "gpu-2"]
    np.testing.assert_array_equal(codes, [0] * 40 + [1] * 10)


def test_a_strided_slice_is_read_by_its_own_elements():
    values = _shared(VALUES * 10).to_numpy()[::3]
    np.testing.assert_array_equal(factorize(values)[0], pd.factorize(values)[0])


@pytest.mark.parametrize("values", [pd.Series([3, 1, 3, 2]), pd.Series(pd.to_datetime(["2026-01-01", None]))])
def test_other_dtypes_are_factorized_by_pandas(values):
    np.testing.assert_array_equal(factorize(values)[0], pd.factorize(values)[0])


@pytest.mark.parametrize("values", [[], ["gpu-1"], [None]])
def test_empty_and_single_text_columns(values):
    for column in (_shared(values) if values else pd.Series([], dtype="string"), np.array(values, dtype=object)):
        codes, uniques = factorize(column)
        want_codes, want_uniques = pd.factorize(column)
        np.testing.assert_array_equal(codes, want_codes)
        _equal_uniques(uniques, want_uniques)


@pytest.mark.parametrize("keys", [np.zeros(0, np.int64), np.array([7]), np.array([3, -2, 3, 9, -2, 0, 3]),
                                  np.random.default_rng(3).integers(-50, 50, 10_000),
                                  np.random.default_rng(4).integers(0, 2**40, 5_000),  # mostly distinct
                                  np.arange(20, 0, -1)[::-2], np.array([5, 5, 5], dtype=np.int32),
                                  # keys counted in a table over their range: dtypes whose arithmetic would wrap
                                  np.array([-100, 100, 7, -100], dtype=np.int8),
                                  np.array([2**64 - 1, 2**64 - 9, 2**64 - 1], dtype=np.uint64),
                                  np.random.default_rng(5).integers(-2**62, -2**62 + 300, 2_000)])
@pytest.mark.parametrize("flags", [(False, False, False), (True, True, True), (True, False, False),
                                   (False, True, False), (False, False, True)])
def test_unique_ints_gives_what_numpy_gives(keys, flags):
    index, inverse, counts = flags
    want = np.unique(keys, return_index=index, return_inverse=inverse, return_counts=counts)
    got = unique_ints(keys, return_index=index, return_inverse=inverse, return_counts=counts)
    want, got = (want, got) if any(flags) else ((want,), (got,))
    assert len(want) == len(got)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, np.ravel(w))
        assert g.ndim == 1
    assert got[0].dtype == keys.dtype  # the distinct keys as numpy gives them


def test_unique_ints_refuses_what_it_cannot_hash_as_numpy_sorts():
    with pytest.raises(TypeError, match="1-D integer"):
        unique_ints(np.array([1.5, 0.5]))
    with pytest.raises(TypeError, match="1-D integer"):
        unique_ints(np.zeros((2, 2), dtype=np.int64))


def test_first_rows_are_the_rows_a_group_bys_first_takes():
    rng = np.random.default_rng(5)
    groups = rng.integers(0, 40, 2_000)
    values = pd.Series(np.where(rng.random(2_000) < 0.7, rng.integers(0, 9, 2_000).astype(str), None), dtype=object)
    picked = first_rows(groups, values.notna().to_numpy(), 45)  # groups 40-44 have no rows at all
    want = values.groupby(groups).first().reindex(range(45))
    got = pd.Series([values[p] if p >= 0 else None for p in picked], dtype=object)
    pd.testing.assert_series_equal(got, want.astype(object), check_names=False, check_index=False)
    assert (picked[40:] == -1).all()
    assert (first_rows(groups, np.zeros(len(groups), dtype=bool), 40) == -1).all()


def test_missing_is_what_pandas_isna_says_however_the_column_was_built():
    """The address shortcut for string[python] columns (every missing value is the pd.NA singleton) gives
    pd.isna's answer for columns read, built from Python values, written into, sliced and concatenated; other
    dtypes (object arrays holding None and NaN, nullable integers, floats) go to pandas."""
    shared, fresh = _shared(VALUES), _fresh(VALUES)
    written = fresh.copy()
    written.iloc[0] = None  # the setter stores pd.NA for any missing kind
    written.iloc[1] = np.nan
    built = pd.Series(pd.array(["a", None, np.nan, pd.NA, "b"], dtype="string"))
    joined = pd.concat([shared, fresh.iloc[::2], built], ignore_index=True)
    others = [np.array(VALUES + [np.nan], dtype=object), pd.Series([1, None, 3], dtype="Int64"),
              pd.Series([1.0, np.nan]), pd.Index(["x", None], dtype="string"), shared.iloc[::-3], shared.iloc[:0]]
    for column in [shared, fresh, written, built, joined, *others]:
        got = is_missing(column)
        assert isinstance(got, np.ndarray) and got.dtype == bool
        assert got.tolist() == list(np.asarray(pd.isna(column), dtype=bool)), column
    assert is_missing(shared).tolist() == [v is None for v in VALUES]


@pytest.mark.parametrize("values", [["a", None, "b", None], [None, None], ["a", "b"], [np.str_("a"), None],
                                    ["a", np.nan, None], ["a", pd.NA], [None, 3], ["a", pd.NaT], [1.5, None], []])
def test_missing_in_object_columns_is_what_pandas_isna_says(values):
    """An object column of text with None where missing (the shortcut: the rows pointing at None) and any other
    object column (NaN, NA, NaT, numbers: pandas decides) give pd.isna's answer, as arrays and as Series."""
    column = np.array(values, dtype=object)
    for form in (column, pd.Series(column, dtype=object), pd.Index(column, dtype=object)):
        got = is_missing(form)
        assert isinstance(got, np.ndarray) and got.dtype == bool
        assert got.tolist() == list(np.asarray(pd.isna(form), dtype=bool)), values

"""Integer codes of categorical values (pd.factorize's): text hashed once per distinct object, codes re-numbered
without hashing the values again."""

import ctypes

import numpy as np
import pandas as pd
from pandas._libs import lib


def refactorize(codes: np.ndarray, uniques: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What pd.factorize gives for the values ``uniques[codes]`` (-1: missing), from the integer codes alone:
    codes numbered in order of first appearance, -1 kept for missing, and the uniques in that order."""
    sub, seen = pd.factorize(codes)
    missing = np.flatnonzero(seen < 0)
    if len(missing):  # -1 was numbered like a value: take it out, the codes after it move down one
        j = int(missing[0])
        sub = np.where(sub == j, -1, sub - (sub > j))
        seen = np.delete(seen, j)
    return sub.astype(np.int64), uniques[seen]


def factorize(values, *, sort: bool = False, use_na_sentinel: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(values, sort=..., use_na_sentinel=...)``: the same codes (as int64) and uniques (an object
    array when ``values`` hold Python objects, else what pd.factorize returns), hashing each distinct *object* of
    a text column once.

    A text column read from the landing zone or the telemetry store (``arrow_text.text_values``) holds one Python
    string per distinct value and every row points at it: 1.7 M rows of a day's GPU telemetry hold ~1,300 objects,
    and pandas' operations (take, concat, filters) keep the rows pointing at them. Equal objects are equal values,
    so the rows are grouped by the address of their object (integer hashing, 3-5x faster than hashing the strings)
    and only one row of each object is factorized by value. Where most rows hold an object of their own (text read
    from SQL) it hashes the values as pandas does."""
    objects = _object_values(values)
    if objects is None:
        codes, uniques = pd.factorize(values, sort=sort, use_na_sentinel=use_na_sentinel)
        return codes.astype(np.int64, copy=False), uniques
    by_object, addresses = pd.factorize(_addresses(objects))
    if len(addresses) > len(objects) // 2:  # mostly one object per row: nothing to save
        codes, uniques = pd.factorize(objects, sort=sort, use_na_sentinel=use_na_sentinel)
        return codes.astype(np.int64, copy=False), uniques
    first = np.full(len(addresses), len(objects), dtype=np.int64)
    np.minimum.at(first, by_object, np.arange(len(objects), dtype=np.int64))  # each object's first row, ascending
    codes, uniques = pd.factorize(objects[first], sort=sort, use_na_sentinel=use_na_sentinel)
    return codes.astype(np.int64, copy=False)[by_object], uniques


def is_missing(values) -> np.ndarray:
    """``pd.isna(values)`` as a numpy bool array, for a Series, Index or array.

    A pandas ``string[python]`` column holds its missing values as the ``pd.NA`` singleton and nothing else (its
    constructor and its setter turn every other missing kind into it), so its missing rows are the elements
    pointing at that object: one comparison of addresses, where pandas checks each element's type one by one. An
    object column of str and None: the rows pointing at None (below). Anything else as pandas says."""
    arr = values.array if isinstance(values, pd.Series | pd.Index) else values
    if isinstance(arr, pd.arrays.StringArray) and getattr(arr.dtype, "na_value", None) is pd.NA:
        return _addresses(np.ascontiguousarray(arr._ndarray)) == id(pd.NA)
    objects = _object_values(arr) if not isinstance(arr, pd.arrays.StringArray) else None
    if objects is not None and objects.ndim == 1 and len(objects):
        # an object column of text with None where missing (as the pipeline builds them): its missing rows are the
        # elements pointing at None, once every other element is known to be a str (one C pass; 1.7 M rows:
        # ~35 ms where pandas checks each element's kind, ~100 ms); anything else (NaN, NA, numbers) as pandas says
        none = _addresses(objects) == id(None)
        if lib.is_string_array(objects[~none] if none.any() else objects, skipna=False):
            return none
    return np.asarray(pd.isna(values), dtype=bool)


def _object_values(values) -> np.ndarray | None:
    """The object array behind ``values`` (a Series, Index, pandas ``string[python]`` array or object ndarray),
    C-contiguous; None for any other dtype."""
    if isinstance(values, pd.Series | pd.Index):
        values = values.array
    if isinstance(values, pd.arrays.NumpyExtensionArray):  # (``string[python]`` arrays are ones too)
        values = values._ndarray  # its ndarray as is: to_numpy() would first look for missing values row by row
    if not isinstance(values, np.ndarray) or values.dtype != object:
        return None
    return np.ascontiguousarray(values)


def _addresses(objects: np.ndarray) -> np.ndarray:
    """Each element's object address: the pointers a C-contiguous object array stores, read as integers."""
    assert objects.flags.c_contiguous and objects.itemsize == ctypes.sizeof(ctypes.c_void_p)
    if not len(objects):
        return np.zeros(0, dtype=np.uint64)
    pointers = (ctypes.c_uint64 * len(objects)).from_address(objects.ctypes.data)
    return np.ctypeslib.as_array(pointers).copy()  # (a copy: nothing points into ``objects`` once it returns)


def unique_ints(keys: np.ndarray, *, return_index: bool = False, return_inverse: bool = False,
                return_counts: bool = False):
    """``np.unique(keys, return_index=..., return_inverse=..., return_counts=...)`` of a 1-D integer array -- the
    same sorted values, first positions, inverse (1-D) and counts -- hashing the keys (``pd.factorize``) and sorting
    only the distinct ones, where np.unique sorts every key: a day's 1.7 million (minute, job) or (partition, node,
    GPU) keys of GPU telemetry hash in ~40 ms and sort in ~150. Keys that fill much of their range are counted in
    tables over it instead (:func:`_unique_dense`, DENSE_SPAN)."""
    keys = np.asarray(keys)
    if keys.ndim != 1 or keys.dtype.kind not in "iu":
        raise TypeError(f"unique_ints takes a 1-D integer array, not {keys.dtype} of shape {keys.shape}")
    if len(keys):
        low, high = int(keys.min()), int(keys.max())
        if high - low < min(DENSE_SPAN * len(keys) + 1024, DENSE_MAX):
            return _unique_dense(keys, low, high - low + 1, return_index, return_inverse, return_counts)
    codes, seen = pd.factorize(keys)  # codes in order of first appearance
    order = np.argsort(seen, kind="stable")
    rank = np.empty(len(seen), dtype=np.int64)
    rank[order] = np.arange(len(seen))
    out = [seen[order]]
    if return_index:
        # a code first appears where it exceeds every code before it (codes are numbered as they first appear)
        new = np.ones(len(codes), dtype=bool)
        if len(codes) > 1:
            new[1:] = codes[1:] > np.maximum.accumulate(codes)[:-1]
        out.append(np.flatnonzero(new)[order])
    if return_inverse:
        out.append(rank[codes])
    if return_counts:
        out.append(np.bincount(codes, minlength=len(seen))[order])
    return out[0] if len(out) == 1 else tuple(out)


# A key range at most this many times the number of keys is counted in tables over the range rather than hashed:
# the packed keys of the pipeline (minute x node x GPU, partition x job) fill a third to a half of their range, and
# a pass over a table of the range costs less than hashing every key while the range is at most a few times the
# key count (a pass touches each slot once, sequentially; hashing probes at random). DENSE_MAX bounds each table (8 bytes an entry:
# 64 MB), so the shortcut never costs the memory the pieces of a run are cut to save.
DENSE_SPAN = 4
DENSE_MAX = 1 << 23


def _unique_dense(keys: np.ndarray, low: int, span: int, return_index: bool, return_inverse: bool,
                  return_counts: bool):
    """:func:`unique_ints` of keys within ``[low, low + span)``, by counting them in a table over that range."""
    big = keys.dtype == np.uint64  # (its keys may lie past int64; any other integer dtype fits in one)
    offset = (keys - np.uint64(low)).astype(np.intp) if big else keys.astype(np.int64, copy=False) - low
    counts = np.bincount(offset, minlength=span)
    present = counts > 0
    distinct = np.flatnonzero(present)
    out = [distinct.astype(np.uint64) + np.uint64(low) if big else (distinct + low).astype(keys.dtype, copy=False)]
    if return_index:
        first = np.full(span, len(keys), dtype=np.int64)
        np.minimum.at(first, offset, np.arange(len(keys), dtype=np.int64))
        out.append(first[present])
    if return_inverse:
        out.append((np.cumsum(present, dtype=np.int64) - 1)[offset])
    if return_counts:
        out.append(counts[present].astype(np.int64, copy=False))
    return out[0] if len(out) == 1 else tuple(out)


def first_rows(groups: np.ndarray, valid: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group ``0..n_groups-1`` (``groups[i]``: the group of row ``i``): the position of its first row where
    ``valid`` holds, -1 where none does -- the row a group-by's ``first`` takes its value from (the first
    non-null one)."""
    rows = np.flatnonzero(valid)
    got, at = unique_ints(groups[rows], return_index=True)
    out = np.full(n_groups, -1, dtype=np.int64)
    out[got] = rows[at]
    return out

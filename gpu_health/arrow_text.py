"""Arrow text columns as pandas' ``string[python]`` arrays, each distinct value converted once.

pandas converts an Arrow text column value by value into new Python strings (~90 ns each: a day of GPU telemetry
has 8.6 M text cells); from the column's dictionary (as Parquet stores it) the distinct values are converted once
and the rows point at them. The landing-zone reader and the telemetry store's reads both build their text columns
this way.
"""

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandas._libs import lib


def text_values(column: pa.ChunkedArray) -> tuple[pd.arrays.StringArray, np.ndarray, tuple[np.ndarray, int] | None]:
    """A text column (plain or dictionary) as pandas' ``string[python]`` array (nulls as ``pd.NA``), built
    from its dictionary; the dictionary's values; each row's code and the code of a missing value (None
    unless the dictionary holds each value once: only then are two rows' codes equal exactly when their
    values are)."""
    if pa.types.is_dictionary(column.type):
        encoded = pa.Table.from_arrays([column], names=["v"]).unify_dictionaries().column(0).combine_chunks()
    else:
        encoded = pc.dictionary_encode(column).combine_chunks()
    distinct = np.empty(len(encoded.dictionary) + 1, dtype=object)
    distinct[:-1] = encoded.dictionary.to_pylist()
    distinct[-1] = pd.NA
    codes = encoded.indices.fill_null(len(distinct) - 1).to_numpy(zero_copy_only=False)
    values = distinct.take(codes)
    text = (pd.arrays.StringArray(values) if not lib.is_string_array(distinct[:-1], skipna=False)
            else wrap_strings(values))
    each_once = len(set(distinct[:-1])) == len(distinct) - 1
    return text, distinct[:-1], ((codes, len(distinct) - 1) if each_once else None)


_TEXT_PROTOTYPE = pd.arrays.StringArray(np.array([""], dtype=object))


def wrap_strings(values: np.ndarray) -> pd.arrays.StringArray:
    """An object array whose every element is a ``str`` or ``pd.NA`` (the caller knows it) as pandas' ``string[python]``
    array over that very array, without the constructor's check of each value one by one."""
    return _TEXT_PROTOTYPE._from_backing_data(values)

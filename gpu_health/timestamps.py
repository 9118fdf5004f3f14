"""Columns of timestamps as UTC, at the cost of what they hold.

``pd.to_datetime(values, utc=True)`` first asks whether a cache of converted distinct values would pay (pandas'
``should_cache``): it boxes the first 10,000 values as ``Timestamp`` objects to count the distinct ones among 500 of
them, and, when they repeat (every partition column does), hashes the whole column to map it through that cache --
work that converts nothing when the column already holds datetimes, and costs milliseconds a call whatever its
length -- for each table a step writes and each frame it prepares, piece after piece of a range.
"""

from __future__ import annotations

import pandas as pd
from pandas.api.types import is_datetime64_any_dtype


def as_utc(values):
    """``pd.to_datetime(values, utc=True)``, the same result; without the conversion cache when ``values`` (a
    Series or an Index) already holds datetimes, tz-aware or naive (naive ones are read as UTC, as there)."""
    if isinstance(values, pd.Series | pd.Index) and is_datetime64_any_dtype(values.dtype):
        return pd.to_datetime(values, utc=True, cache=False)
    return pd.to_datetime(values, utc=True)

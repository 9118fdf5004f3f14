"""The window's minute grid and the integer codes every join of the loss tree is on."""

import numpy as np
import pandas as pd

from gpu_health.codes import factorize


def _minutes(start, end) -> pd.DatetimeIndex:
    return pd.date_range(pd.Timestamp(start), pd.Timestamp(end), freq="1min", inclusive="left")


def _codes(values, universe: pd.Index) -> np.ndarray:
    """Each value's position in ``universe`` (-1: not in it). The distinct values are looked up, not every row
    (codes.factorize hashes a text column's shared objects once: a piece's 576,000 node or job ids of GPU rows)."""
    values = np.asarray(values, dtype=object)
    codes, distinct = factorize(values)
    out = np.append(universe.get_indexer(pd.Index(distinct, dtype=object)), -1)[codes]  # (code -1: missing)
    if universe.hasnans and (codes < 0).any():  # a missing value the universe holds: as get_indexer finds it
        out[codes < 0] = universe.get_indexer(pd.Index(values[codes < 0]))
    return out

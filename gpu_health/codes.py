"""Integer codes of categorical values (pd.factorize's), re-numbered without hashing the values again."""

import numpy as np
import pandas as pd


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

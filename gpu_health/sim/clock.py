"""The simulator's clock: integer seconds since ORIGIN, a Monday 00:00 UTC (week-periodic demand counts from it).

Below every other simulator module (scenario, jobs, facility, serving import it; it imports none of them)."""

import numpy as np
import pandas as pd

ORIGIN = pd.Timestamp("2020-01-06T00:00:00Z")  # a Monday: integer minutes count from here


def to_s(ts) -> int:
    return int((pd.Timestamp(ts) - ORIGIN) // pd.Timedelta(seconds=1))


def from_s(s) -> pd.DatetimeIndex | pd.Timestamp:
    if np.ndim(s) == 0:
        return ORIGIN + pd.Timedelta(seconds=int(s))
    return pd.DatetimeIndex(ORIGIN + pd.to_timedelta(np.asarray(s, dtype=np.int64), unit="s"))

"""as_utc is pd.to_datetime(values, utc=True) -- the same values, dtype and index -- whatever the column holds."""

import numpy as np
import pandas as pd
import pytest

from gpu_health.timestamps import as_utc

T0 = pd.Timestamp("2026-11-03T10:00:00Z")
MINUTES = pd.date_range(T0, periods=4, freq="1min")


@pytest.mark.parametrize("values", [
    pd.Series(np.repeat(MINUTES, 3000), index=np.arange(12000) * 2),          # UTC, repeating (cached by pandas)
    pd.Series(MINUTES.tz_convert("Europe/Berlin")),                            # another zone: converted to UTC
    pd.Series(MINUTES.tz_localize(None)),                                      # naive: read as UTC
    pd.Series(MINUTES.as_unit("us")),                                          # another unit: kept
    pd.Series([T0, pd.NaT, T0]),                                               # missing values
    pd.Series([str(T0), None, "2026-11-03 11:00:00+01:00"], dtype=object),     # text: pandas' own path
    pd.Series([T0.to_pydatetime(), T0.to_pydatetime()], dtype=object),         # Python datetimes
    pd.Series([], dtype="datetime64[ns, UTC]"),
    pd.DatetimeIndex(MINUTES, name="partition_start"),
])
def test_as_utc_is_to_datetime_utc(values):
    got, want = as_utc(values), pd.to_datetime(values, utc=True)
    if isinstance(want, pd.Series):
        pd.testing.assert_series_equal(got, want)
    else:
        pd.testing.assert_index_equal(got, want)

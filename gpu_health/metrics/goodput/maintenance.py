"""Planned maintenance windows: which rows (minute, region, node) fall inside one."""

import numpy as np
import pandas as pd

from gpu_health.codes import factorize


def maintenance_mask(ts: pd.Series, region: pd.Series, node: pd.Series, windows: pd.DataFrame) -> np.ndarray:
    """Rows inside a planned window for their node (region/node_ids may be '*').

    A row is inside a window when ``start <= ts < end`` and the window's region (unless '*' or null) is the
    row's region and its node list (unless '*' or null) names the row's node. Compared as integer nanoseconds
    and integer region / node codes, factorized once for all windows.
    """
    mask = np.zeros(len(ts), dtype=bool)
    if windows is None or windows.empty or not len(ts):
        return mask
    t = pd.DatetimeIndex(ts)
    aware = t.tz is not None
    bounds = []
    for w in windows.itertuples(index=False):
        lo, hi = pd.Timestamp(w.start), pd.Timestamp(w.end)
        if any(pd.notna(b) and (b.tz is not None) != aware for b in (lo, hi)):
            return _maintenance_mask_by_rows(ts, region, node, windows)  # mixed time zones: as pandas compares
        bounds.append((lo, hi, w.region, w.node_ids))
    ts_ns = (t.tz_convert("UTC") if aware else t).as_unit("ns").asi8
    valid = ~pd.isna(t)
    r_codes = r_uni = n_codes = n_uni = None
    for lo, hi, reg, nodes in bounds:
        if pd.isna(lo) or pd.isna(hi):
            continue  # a comparison with NaT is never true
        lo_ns = (lo.tz_convert("UTC") if aware else lo).as_unit("ns").value
        hi_ns = (hi.tz_convert("UTC") if aware else hi).as_unit("ns").value
        inside = valid & (ts_ns >= lo_ns) & (ts_ns < hi_ns)
        if pd.notna(reg) and reg != "*":
            if r_codes is None:
                r_codes, r_uni = factorize(np.asarray(region, dtype=object))
                r_uni = pd.Index(r_uni, dtype=object)
            inside &= r_codes == (r_uni.get_loc(reg) if reg in r_uni else -2)
        if pd.notna(nodes) and nodes != "*":
            if n_codes is None:
                n_codes, n_uni = factorize(np.asarray(node, dtype=object))
                n_uni = pd.Index(n_uni, dtype=object)
            wanted = n_uni.get_indexer(pd.Index(str(nodes).split(","), dtype=object))
            inside &= np.isin(n_codes, wanted[wanted >= 0])
        mask |= inside
    return mask


def _maintenance_mask_by_rows(ts: pd.Series, region: pd.Series, node: pd.Series, windows: pd.DataFrame) -> np.ndarray:
    """:func:`maintenance_mask` by pandas comparisons (window bounds whose time zone differs from the rows')."""
    mask = np.zeros(len(ts), dtype=bool)
    for w in windows.itertuples(index=False):
        inside = (ts >= w.start) & (ts < w.end)
        if pd.notna(w.region) and w.region != "*":
            inside &= region == w.region
        if pd.notna(w.node_ids) and w.node_ids != "*":
            inside &= node.isin(str(w.node_ids).split(","))
        mask |= np.asarray(inside, dtype=bool)
    return mask

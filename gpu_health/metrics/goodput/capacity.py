"""Paid capacity: Finance's capacity as of a day, and the leaves bounded to it."""

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION_FREQ


def capacity_as_of(cost: pd.DataFrame, days, memory: pd.Timedelta) -> pd.DataFrame:
    """``cost`` (cost_capacity rows) as of each of ``days``: for every region x SKU, its row of that day, or of the
    latest earlier day within ``memory``, dated the day it stands for.

    Installed capacity changes with purchase orders and racking, over weeks, not within a day, while a day's cost
    file lands after the day (the daily job settles yesterday) or not at all: the 5-minute partitions of a day are
    paid against the last capacity Finance sent, never against the GPUs that happen to report. Money settled per
    day (``wasted_spend``) still reads only the day's own rows: a day Finance did not price stays unpriced."""
    if cost is None or cost.empty:
        return cost
    cost = cost.reset_index(drop=True)
    dates = pd.to_datetime(cost["date"].astype(str)).dt.normalize()
    out = []
    for day in days:
        day = pd.Timestamp(day).tz_localize(None).normalize()
        known = cost[(dates <= day) & (dates > day - memory)]
        if known.empty:
            continue
        pick = dates[known.index].groupby([known["region"].astype(object), known["sku"].astype(object)]).idxmax()
        out.append(cost.loc[pick.to_numpy()].assign(date=day.date()))
    return pd.concat(out, ignore_index=True) if out else cost.iloc[0:0]


def bound_to_capacity(reported: pd.DataFrame, missing: pd.DataFrame, capacity: pd.DataFrame | None,
                      minutes: pd.DatetimeIndex) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``reported`` and ``missing`` leaves with the paid GPU-minutes of each partition x region x SKU at most
    Finance's ``capacity_gpus`` x its minutes.

    Finance pays for the GPUs installed, not for the rows that arrive: GPUs seen beyond the installed capacity
    (rows copied under new GPU UUIDs or node names, a renamed node counted under both names) are an inventory
    discrepancy, counted and ticketed (gpu_health.diagnosis.inventory), never paid. GPU-minutes that reported come
    first: over the capacity, each of a slice's reported leaves is scaled by capacity / reported (which of the
    GPUs are the real ones cannot be told from the rows, so the states keep their shares). Expected GPU-minutes
    that did not report (the inventory's memory of a day, the capacity nobody has heard from) fill what is left
    of the capacity, scaled alike. A region x SKU without a cost row keeps the GPUs seen as paid (nothing else
    says what is installed); it is ticketed as telemetry without a price."""
    if capacity is None or not len(capacity) or (reported.empty and missing.empty):
        return reported, missing
    cap = capacity.groupby([capacity["region"].astype(object), capacity["sku"].astype(object)])["capacity_gpus"].max()
    per_partition = pd.Series(1.0, index=minutes).groupby(minutes.floor(PARTITION_FREQ)).sum()  # minutes of each partition
    slices = ["partition_start", "region", "sku"]

    both = pd.concat([x[slices + ["gpu_minutes"]].assign(reported=x is reported) for x in (reported, missing) if len(x)],
                     ignore_index=True).astype({"region": object, "sku": object})
    wide = both.groupby(slices + ["reported"], sort=False)["gpu_minutes"].sum().unstack("reported", fill_value=0.0)
    rep, mis = (wide[k] if k in wide.columns else pd.Series(0.0, index=wide.index) for k in (True, False))
    paid = rep + mis
    keys = paid.index
    bound = (cap.astype(float).reindex(pd.MultiIndex.from_arrays([keys.get_level_values(1), keys.get_level_values(2)],
                                                                   names=["region", "sku"]))
             .to_numpy() * keys.get_level_values(0).map(per_partition).to_numpy(dtype=float))
    # (a relative margin: a slice exactly at its capacity is left as it is, bit for bit)
    over = ~np.isnan(bound) & (paid.to_numpy() > bound * (1 + 1e-9))
    if not over.any():
        return reported, missing
    bound = pd.Series(bound, index=keys)[over]
    r = rep.reindex(bound.index).fillna(0.0)
    m = mis.reindex(bound.index).fillna(0.0)
    r_factor = np.minimum(1.0, bound / r.where(r > 0, 1.0))
    m_factor = ((bound - r * r_factor).clip(lower=0.0) / m.where(m > 0, 1.0)).clip(upper=1.0)

    def scale(leaves: pd.DataFrame, factor: pd.Series) -> pd.DataFrame:
        if leaves.empty:
            return leaves
        at = pd.MultiIndex.from_arrays([leaves[c].astype(object) if c != "partition_start" else leaves[c] for c in slices],
                                       names=slices)
        f = factor.reindex(at).to_numpy()
        hit = ~np.isnan(f)
        out = leaves.copy()
        out.loc[hit, "gpu_minutes"] = out.loc[hit, "gpu_minutes"].to_numpy(dtype=float) * f[hit]
        return out

    return scale(reported, r_factor), scale(missing, m_factor)

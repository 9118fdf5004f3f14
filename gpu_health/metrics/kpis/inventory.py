"""Cost and inventory KPIs: cost per productive GPU-hour, and GPUs reporting beyond the installed capacity."""

import numpy as np
import pandas as pd

from gpu_health.codes import unique_ints
from gpu_health.metrics.kpis.context import _Context, _obj
from gpu_health.timestamps import as_utc


def _cost_per_productive_gpu_hour(ctx: _Context) -> pd.DataFrame:
    gs = ctx.goodput_states
    if gs is None or gs.empty:
        return pd.DataFrame()
    gs = gs[(gs["partition_start"] >= ctx.start) & (gs["partition_start"] < ctx.end)]
    if gs.empty:
        return pd.DataFrame()
    minutes = gs["gpu_minutes"].to_numpy(dtype=float)
    d = pd.DataFrame({"p": as_utc(gs["partition_start"]), "region": _obj(gs["region"]),
                      "sku": _obj(gs["sku"]), "paid": minutes,
                      "prod": np.where(gs["state"].astype(object) == "productive", minutes, 0.0)})
    agg = d.groupby(["p", "region", "sku"], sort=False).sum().reset_index()
    agg["n"] = (agg["paid"] > 0).astype(float)
    rate = np.full(len(agg), np.nan)
    if ctx.cost is not None and len(ctx.cost):
        from gpu_health.metrics.finance import blended_rates

        r = blended_rates(ctx.cost)
        key = pd.MultiIndex.from_arrays([pd.to_datetime(r["date"]).dt.date, _obj(r["region"]), _obj(r["sku"])])
        lookup = pd.Series(r["blended_gpu_hour_usd"].to_numpy(dtype=float), index=key)
        want = pd.MultiIndex.from_arrays([agg["p"].dt.date, agg["region"], agg["sku"]])
        rate = lookup.reindex(want).to_numpy()
    known = ~np.isnan(rate)
    agg["numerator"] = np.where(known, agg["paid"] / 60.0 * np.nan_to_num(rate), np.nan)
    agg["denominator"] = agg["prod"] / 60.0
    agg["covered"] = np.where(known, agg["n"], 0.0)
    agg["kpi"] = "cost_per_productive_gpu_hour"
    return agg


def _inventory_excess(ctx: _Context) -> pd.DataFrame:
    """inventory_excess per region x SKU: distinct GPUs reporting in the partition beyond Finance's capacity_gpus
    of its day, over the distinct GPUs reporting (not covered where the day has no cost row for the slice)."""
    rc, sc, uc = ctx.region_codes, ctx.sku_codes, ctx.uuid_codes
    keep = (rc >= 0) & (sc >= 0) & (uc >= 0)
    if not keep.any():
        return pd.DataFrame()
    nr, ns, nu = len(ctx.region_uni), len(ctx.sku_uni), int(uc.max()) + 1
    cell = (ctx.p_codes[keep].astype(np.int64) * nr + rc[keep]) * ns + sc[keep]
    pairs = unique_ints(cell * nu + uc[keep])  # (slice, GPU) pairs
    cells, seen = unique_ints(pairs // nu, return_counts=True)
    pr, sku = np.divmod(cells, ns)
    p, region = np.divmod(pr, nr)
    out = pd.DataFrame({"p": pd.DatetimeIndex(np.asarray(ctx.p_uni)[p].view("datetime64[ns]")).tz_localize("UTC"),
                        "region": np.asarray(ctx.region_uni, dtype=object)[region],
                        "sku": np.asarray(ctx.sku_uni, dtype=object)[sku], "seen": seen.astype(float)})
    cap = np.full(len(out), np.nan)
    if ctx.cost is not None and len(ctx.cost):
        c = ctx.cost
        key = pd.MultiIndex.from_arrays([pd.to_datetime(c["date"].astype(str)).dt.date, _obj(c["region"]), _obj(c["sku"])])
        lookup = pd.Series(c["capacity_gpus"].to_numpy(dtype=float), index=key)
        lookup = lookup[~lookup.index.duplicated(keep="last")]
        cap = lookup.reindex(pd.MultiIndex.from_arrays([out["p"].dt.date, out["region"], out["sku"]])).to_numpy()
    known = ~np.isnan(cap)
    out["numerator"] = np.where(known, np.clip(out["seen"] - np.nan_to_num(cap), 0, None), np.nan)
    out["denominator"] = out["seen"]
    out["n"] = 1.0
    out["covered"] = known.astype(float)
    out["kpi"] = "inventory_excess"
    return out.drop(columns="seen")

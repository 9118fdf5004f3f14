"""Step-time baselines per workload signature ``(model_type, sku, gpus)``.

Each 5-minute partition contributes robust statistics of its *healthy*
job-minutes (``workload_step_stats``): minutes that made progress on GPUs with
no slowdown throttle bits (hardware slowdown, thermal, power brake), no Xid, on
nodes reporting ``ok`` and outside maintenance windows. Minutes the pipeline
itself flagged as part of an incident can be excluded by passing
``exclude`` (partition starts with an open page).

The baseline a partition is judged against is the weighted median of the last
7 days of those per-partition medians (weights = healthy minutes), so a
regression has to persist for days before it teaches the baseline.

Cold start: a signature with fewer than :data:`MIN_HISTORY_MINUTES` of history
falls back to the current window's own healthy median (a cross-sectional
baseline: right when a minority of jobs regress, blind when all of a
signature's jobs regress at once). The source is recorded per row
(``baseline_source`` = ``history`` | ``cohort``).
"""

import numpy as np
import pandas as pd

from gpu_health.metrics.goodput import SLOW_THROTTLE_BITS, maintenance_mask
from gpu_health.sources.dcgm_fields import XID_GPU_FAULT

SIGNATURE = ["model_type", "sku", "gpus"]
STAT_COLUMNS = ["partition_start", *SIGNATURE, "healthy_minutes", "step_time_s", "data_loader_time_s", "grad_sync_time_s"]
LOOKBACK = pd.Timedelta(days=7)
MIN_HISTORY_MINUTES = 30


def workload_step_stats(frames: dict, *, meta: pd.DataFrame | None, maintenance: pd.DataFrame | None) -> pd.DataFrame:
    """Per partition and signature: healthy job-minutes and median step time / loader / sync."""
    gpu, node, rt = frames["gpu_telemetry"], frames["node_telemetry"], frames["job_runtime_metrics"]
    g = gpu.loc[gpu["job_id"].notna(), ["ts", "region", "node_id", "sku", "job_id", "throttle_reasons", "xid"]]
    if g.empty or rt.empty:
        return pd.DataFrame(columns=STAT_COLUMNS)
    g = g.merge(node[["ts", "node_id", "health"]], on=["ts", "node_id"], how="left")
    bad = ((g["throttle_reasons"].fillna(0).astype("int64") & SLOW_THROTTLE_BITS) > 0).to_numpy()
    bad |= (g["xid"] != 0).to_numpy() | g["xid"].isin(XID_GPU_FAULT).to_numpy()
    bad |= g["health"].astype(object).fillna("ok").ne("ok").to_numpy()
    bad |= maintenance_mask(g["ts"], g["region"], g["node_id"], maintenance)
    g["bad"] = bad
    jm = g.groupby(["ts", "job_id"], observed=True).agg(sku=("sku", "first"), gpus=("sku", "size"), bad=("bad", "any")).reset_index()
    r = rt.loc[rt["steps"] > 0, ["ts", "job_id", "step_time_s", "data_loader_time_s", "grad_sync_time_s"]]
    jm = jm.merge(r, on=["ts", "job_id"], how="inner")
    jm = jm[~jm["bad"]]
    if meta is not None and len(meta):
        mt = meta.drop_duplicates("job_id").set_index("job_id")["model_type"]
        jm["model_type"] = jm["job_id"].map(mt).astype(object).fillna("unknown")
    else:
        jm["model_type"] = "unknown"
    jm = jm[jm["model_type"] != "unknown"]
    if jm.empty:
        return pd.DataFrame(columns=STAT_COLUMNS)
    jm["partition_start"] = jm["ts"].dt.floor("5min")
    out = (jm.groupby(["partition_start", *SIGNATURE], observed=True)
           .agg(healthy_minutes=("step_time_s", "size"), step_time_s=("step_time_s", "median"),
                data_loader_time_s=("data_loader_time_s", "median"), grad_sync_time_s=("grad_sync_time_s", "median"))
           .reset_index())
    out["sku"] = out["sku"].astype(object)
    out["model_type"] = out["model_type"].astype(object)
    return out[STAT_COLUMNS]


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    ok = ~np.isnan(values)
    values, weights = values[ok], weights[ok]
    if not len(values):
        return np.nan
    order = np.argsort(values)
    values, weights = values[order], weights[order]
    cum = np.cumsum(weights)
    return float(values[np.searchsorted(cum, cum[-1] / 2.0)])


def step_baseline(history: pd.DataFrame, current: pd.DataFrame, *, exclude: set | None = None) -> pd.DataFrame:
    """The baseline per signature from 7 days of per-partition stats (and the current window at cold start)."""
    cols = [*SIGNATURE, "step_time_s", "data_loader_time_s", "grad_sync_time_s", "history_minutes", "baseline_source"]
    hist = history if history is not None else pd.DataFrame(columns=STAT_COLUMNS)
    if exclude:
        hist = hist[~hist["partition_start"].isin(exclude)]
    frames = []
    for source, df in (("history", hist), ("cohort", current)):
        if df is None or df.empty:
            continue
        rows = []
        for key, grp in df.groupby(SIGNATURE, observed=True):
            w = grp["healthy_minutes"].to_numpy(dtype=float)
            rows.append((*key, *(_weighted_median(grp[c].to_numpy(dtype=float), w) for c in
                                 ("step_time_s", "data_loader_time_s", "grad_sync_time_s")), float(w.sum()), source))
        frames.append(pd.DataFrame(rows, columns=cols))
    if not frames:
        return pd.DataFrame(columns=cols)
    both = pd.concat(frames, ignore_index=True)
    both["rank"] = np.where((both["baseline_source"] == "history") & (both["history_minutes"] >= MIN_HISTORY_MINUTES), 0, 1)
    both = both.sort_values([*SIGNATURE, "rank"]).drop_duplicates(SIGNATURE, keep="first")
    both["gpus"] = both["gpus"].astype("int64")
    return both[cols].reset_index(drop=True)

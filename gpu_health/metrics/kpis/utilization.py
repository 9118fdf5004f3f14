"""Utilization KPIs: allocation_rate and the device-activity gaming guardrails."""

import numpy as np
import pandas as pd

from gpu_health.codes import factorize
from gpu_health.constants import REPORTED_BUSY_UTIL_PCT
from gpu_health.metrics.device import LOW_POWER_SHARE, device_idle, reference_power
from gpu_health.metrics.kpis.context import _Context, _region_sku_sums


def _allocation_rate(ctx: _Context) -> pd.DataFrame:
    agg = _region_sku_sums(ctx)
    return agg[["p", "region", "sku", "n"]].assign(kpi="allocation_rate", numerator=agg["alloc"],
                                                   denominator=agg["schedulable"])


def _gaming_guardrails(ctx: _Context) -> pd.DataFrame:
    g = ctx.gpu
    sel = (g["allocated"].to_numpy() & (g["util"].to_numpy() >= REPORTED_BUSY_UTIL_PCT))
    if not sel.any():
        return pd.DataFrame()
    rows = np.flatnonzero(sel)
    # progress: the job reported steps in the row's minute (a join on minute and job codes)
    rt = ctx.runtime
    prog_rt = (rt["steps"] > 0).to_numpy()
    g_ns = g["ts"].to_numpy(dtype="datetime64[ns]").view("int64")[rows]
    r_ns = rt["ts"].to_numpy(dtype="datetime64[ns]").view("int64")[prog_rt]
    t_codes, t_uni = pd.factorize(np.concatenate([g_ns, r_ns]))
    # the runtime rows' jobs as codes of the GPU rows' jobs (_Context.job_codes: each distinct runtime job looked up
    # once); a job no GPU row holds (-1) matches no busy row
    r_codes, r_uni = factorize(rt["job_id"].astype(object).to_numpy()[prog_rt])
    r_jobs = np.append(pd.Index(ctx.job_uni).get_indexer(np.asarray(r_uni, dtype=object)), -1)[r_codes]
    j_codes = np.concatenate([ctx.job_codes[rows], r_jobs])
    pair = t_codes.astype(np.int64) * (len(ctx.job_uni) + 1) + j_codes
    progress = pd.Index(pair[:len(rows)]).isin(pair[len(rows):][j_codes[len(rows):] >= 0])  # (hashed: np.isin sorts)
    training = g["workload_class"].to_numpy()[rows] != "interactive"

    power = g["power"].to_numpy()[rows]
    idle, dev_known = device_idle(g["sm"].to_numpy()[rows], g["tensor"].to_numpy()[rows])
    known = dev_known & ~np.isnan(power)  # a collector without power cannot tell low power
    # the reference of each busy row's partition x SKU (none without a SKU)
    key = _p_sku_key(ctx)
    ref = _reference_power(g, key)
    ref_row = ref.reindex(key[rows]).to_numpy(dtype=float) if len(ref) else np.full(len(rows), np.nan)
    ref_row = np.where(key[rows] >= 0, ref_row, np.nan)
    low_power = power < LOW_POWER_SHARE * ref_row
    # grouped by partition and the team's code (the busy rows' teams are their jobs': each job's looked up once);
    # the groups, their order (first appearance) and sums are the team names'
    team_of_job, teams = factorize(ctx.job_team)
    d = pd.DataFrame({
        "p": g["p"].iloc[rows].reset_index(drop=True), "team": team_of_job[ctx.job_codes[rows]],
        "bwp_n": training.astype(float), "bwp_num": (training & ~progress).astype(float),
        "div_n": 1.0, "div_cov": known.astype(float), "div_num": (known & idle & low_power).astype(float),
    })
    agg = d.groupby(["p", "team"], sort=False).sum().reset_index()
    agg["team"] = np.asarray(teams, dtype=object)[agg["team"].to_numpy()]
    keys = agg[["p", "team"]]
    bwp = keys.assign(kpi="gaming_guardrails.busy_without_progress", numerator=agg["bwp_num"],
                      denominator=agg["bwp_n"], n=agg["bwp_n"])
    div = keys.assign(kpi="gaming_guardrails.util_power_divergence", numerator=agg["div_num"],
                      denominator=agg["div_cov"], n=agg["div_n"], covered=agg["div_cov"])
    return pd.concat([bwp[bwp["n"] > 0], div], ignore_index=True)


def _p_sku_key(ctx: _Context) -> np.ndarray:
    """Per GPU row: an integer code of its partition x SKU (-1 without a SKU)."""
    return np.where(ctx.sku_codes >= 0, ctx.p_codes.astype(np.int64) * len(ctx.sku_uni) + ctx.sku_codes, -1)


def _reference_power(g: pd.DataFrame, key: np.ndarray) -> pd.Series:
    """Per partition x SKU code (:func:`_p_sku_key`): the reference power of gpu_health.metrics.device (p95 of
    working GPUs). Grouped on the integer code, not on the timestamps and SKU strings (5x faster); rows without
    a SKU have no group, as a group-by on a missing SKU leaves them out."""
    frame = pd.DataFrame({"k": np.where(key >= 0, key, np.nan), "gpu_util_pct": g["util"], "sm_active": g["sm"],
                          "tensor_active": g["tensor"], "power_w": g["power"],
                          "job_id": np.where(g["allocated"].to_numpy(), 1.0, np.nan)})  # (only its presence counts)
    ref = reference_power(frame, ["k"])
    ref.index = ref.index.astype(np.int64)
    return ref

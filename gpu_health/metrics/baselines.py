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

from gpu_health.constants import PARTITION_FREQ, PARTITION_NS, SLOW_THROTTLE_BITS, XID_GPU_FAULT
from gpu_health.codes import factorize, first_rows, is_missing, unique_ints
from gpu_health.metrics.goodput import maintenance_mask
from gpu_health.timestamps import as_utc

SIGNATURE = ["model_type", "sku", "gpus"]
STAT_COLUMNS = ["partition_start", *SIGNATURE, "healthy_minutes", "step_time_s", "data_loader_time_s", "grad_sync_time_s"]
LOOKBACK = pd.Timedelta(days=7)
MIN_HISTORY_MINUTES = 30


def workload_step_stats(frames: dict, *, meta: pd.DataFrame | None, maintenance: pd.DataFrame | None) -> pd.DataFrame:
    """Per partition and signature: healthy job-minutes and median step time / loader / sync.

    A job-minute is healthy when none of its GPU rows is throttled for slowdown, reports an Xid, sits on a node
    not reporting ``ok`` or inside a maintenance window, and the job made progress (``steps > 0``) that minute.
    Its signature is ``(model_type, sku of its first GPU row, GPUs it held that minute)``; jobs without a known
    model type are left out (nothing to compare them with).

    Implementation: the (minute, node) and (minute, job) joins run on integer codes, not on the id strings.
    """
    gpu, node, rt = frames["gpu_telemetry"], frames["node_telemetry"], frames["job_runtime_metrics"]
    has_job = ~is_missing(gpu["job_id"])
    if not has_job.any() or rt.empty:
        return pd.DataFrame(columns=STAT_COLUMNS)
    g = gpu.loc[has_job, ["ts", "region", "node_id", "sku", "job_id", "throttle_reasons", "xid"]]
    n = len(g)
    g_ts = g["ts"].to_numpy(dtype="datetime64[ns]").view("int64")
    n_ts = node["ts"].to_numpy(dtype="datetime64[ns]").view("int64")
    ts_codes, ts_uni = pd.factorize(np.concatenate([g_ts, n_ts]))
    node_codes, _ = factorize(np.concatenate([np.asarray(g["node_id"], dtype=object),
                                                 np.asarray(node["node_id"], dtype=object)]))
    Nn = int(node_codes.max()) + 1 if len(node_codes) else 1
    gk = ts_codes[:n] * Nn + node_codes[:n]
    nk = ts_codes[n:] * Nn + node_codes[n:]
    # the node's health at the row's minute (a node row per minute; none: 'ok', as a left join leaves it)
    nk_index = pd.Index(nk)
    if not nk_index.is_unique:  # duplicate node rows would duplicate GPU rows in a join: keep the join's meaning
        return _workload_step_stats_joined(frames, meta=meta, maintenance=maintenance)
    at = nk_index.get_indexer(gk)
    node_ok = node["health"].astype(object).fillna("ok").eq("ok").to_numpy()
    health_ok = np.where(at >= 0, node_ok[np.clip(at, 0, None)], True)
    bad = ((g["throttle_reasons"].fillna(0).astype("int64").to_numpy() & SLOW_THROTTLE_BITS) > 0)
    bad |= (g["xid"] != 0).to_numpy() | g["xid"].isin(XID_GPU_FAULT).to_numpy()
    bad |= ~health_ok
    bad |= maintenance_mask(g["ts"], g["region"], g["node_id"], maintenance)

    # job-minutes: (minute, job) groups of the GPU rows
    job_codes, job_uni = factorize(np.concatenate([np.asarray(g["job_id"], dtype=object),
                                                      np.asarray(rt["job_id"], dtype=object)]))
    Nj = len(job_uni) + 1
    rt_ts = rt["ts"].to_numpy(dtype="datetime64[ns]").view("int64")
    key = ts_codes[:n].astype(np.int64) * Nj + job_codes[:n]
    uk, first, inv = unique_ints(key, return_index=True, return_inverse=True)
    inv = inv.ravel()
    gpus = np.bincount(inv, minlength=len(uk))
    any_bad = np.bincount(inv, weights=bad.astype(float), minlength=len(uk)) > 0
    sku = np.asarray(g["sku"], dtype=object)
    sku_known = ~is_missing(g["sku"])
    jm_sku = np.full(len(uk), None, dtype=object)
    pick = first_rows(inv, sku_known, len(uk))  # groupby's 'first': the first non-null value of the group
    jm_sku[pick >= 0] = sku[pick[pick >= 0]]
    jm_ts = g_ts[first]
    jm_job = job_codes[:n][first]

    # runtime rows with progress, joined on (minute, job)
    prog = (rt["steps"] > 0).to_numpy()
    r = pd.DataFrame({"ts": rt_ts[prog], "job": job_codes[n:][prog]})
    for c in ("step_time_s", "data_loader_time_s", "grad_sync_time_s"):
        r[c] = rt[c].to_numpy()[prog]
    left = pd.DataFrame({"ts": jm_ts, "job": jm_job, "gpus": gpus, "bad": any_bad, "sku": jm_sku})
    jm = left.merge(r, on=["ts", "job"], how="inner")
    jm = jm[~jm["bad"].to_numpy()]
    if meta is not None and len(meta):
        mt = meta.drop_duplicates("job_id").set_index("job_id")["model_type"]
        model = pd.Series(np.asarray(job_uni, dtype=object)).map(mt).astype(object).fillna("unknown").to_numpy()
    else:
        model = np.full(len(job_uni), "unknown", dtype=object)
    jm["model_type"] = model[jm["job"].to_numpy()]
    jm = jm[jm["model_type"] != "unknown"]
    if jm.empty:
        return pd.DataFrame(columns=STAT_COLUMNS)
    jm["partition_start"] = pd.DatetimeIndex((jm["ts"].to_numpy() // PARTITION_NS * PARTITION_NS).astype("datetime64[ns]")).tz_localize("UTC")
    return _step_stats_of(jm)


def _step_stats_of(jm: pd.DataFrame) -> pd.DataFrame:
    out = (jm.groupby(["partition_start", *SIGNATURE], observed=True)
           .agg(healthy_minutes=("step_time_s", "size"), step_time_s=("step_time_s", "median"),
                data_loader_time_s=("data_loader_time_s", "median"), grad_sync_time_s=("grad_sync_time_s", "median"))
           .reset_index())
    out["sku"] = out["sku"].astype(object)
    out["model_type"] = out["model_type"].astype(object)
    return out[STAT_COLUMNS]


def _workload_step_stats_joined(frames: dict, *, meta: pd.DataFrame | None, maintenance: pd.DataFrame | None) -> pd.DataFrame:
    """:func:`workload_step_stats` by pandas joins on the id columns (node telemetry with duplicate minutes)."""
    gpu, node, rt = frames["gpu_telemetry"], frames["node_telemetry"], frames["job_runtime_metrics"]
    g = gpu.loc[gpu["job_id"].notna(), ["ts", "region", "node_id", "sku", "job_id", "throttle_reasons", "xid"]]
    if g.empty or rt.empty:
        return pd.DataFrame(columns=STAT_COLUMNS)
    g = g.merge(node[["ts", "node_id", "health"]], on=["ts", "node_id"], how="left")
    bad = ((g["throttle_reasons"].fillna(0).astype("int64") & SLOW_THROTTLE_BITS) > 0).to_numpy()
    bad = bad | (g["xid"] != 0).to_numpy() | g["xid"].isin(XID_GPU_FAULT).to_numpy()
    bad = bad | g["health"].astype(object).fillna("ok").ne("ok").to_numpy()
    bad = bad | maintenance_mask(g["ts"], g["region"], g["node_id"], maintenance)
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
    jm["partition_start"] = jm["ts"].dt.floor(PARTITION_FREQ)
    return _step_stats_of(jm)




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


BASELINE_COLUMNS = ["partition_start", *SIGNATURE, "step_time_s", "data_loader_time_s", "grad_sync_time_s",
                    "history_minutes", "baseline_source"]
_VALUES = ["step_time_s", "data_loader_time_s", "grad_sync_time_s"]


def _grouped_weighted_medians(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group of ``keys``: the weighted median (weights ``healthy_minutes``) of each value column, NaN values
    left out, and the total weight -- :func:`_weighted_median` for every group at once.

    The median of a group is its smallest value whose cumulative weight (values ascending) reaches half the
    group's weight of non-NaN values, exactly as :func:`_weighted_median`; weights are minute counts, so the
    sums are exact in floating point whatever order they are added in. Rows with a null key are dropped (as
    ``groupby`` drops them). Returns one row per group, sorted by ``keys``.
    """
    gone = np.zeros(len(frame), dtype=bool)
    for k in keys:
        gone |= is_missing(frame[k])
    f = frame[~gone]  # (frame.dropna(subset=keys), the text keys' missing values found by address)
    if f.empty:
        return pd.DataFrame(columns=[*keys, *_VALUES, "history_minutes"])
    codes, out = _sorted_groups(f, keys)
    G = len(out[keys[0]])
    w = f["healthy_minutes"].to_numpy(dtype=float)
    for col in _VALUES:
        v = f[col].to_numpy(dtype=float)
        ok = ~np.isnan(v)
        c, vv, ww = codes[ok], v[ok], w[ok]
        order = np.lexsort((vv, c))
        c, vv, ww = c[order], vv[order], ww[order]
        cum = np.cumsum(ww)
        total = np.bincount(c, weights=ww, minlength=G)
        before = np.concatenate([[0.0], np.cumsum(total)[:-1]])  # weight of the groups sorted before each
        res = np.full(G, np.nan)
        if len(c):
            present = np.bincount(c, minlength=G) > 0
            first = np.searchsorted(c, np.arange(G), side="left")
            last = np.searchsorted(c, np.arange(G), side="right")
            # within a group, cumulative weight = cum - before; the first index where it reaches total / 2
            target = before + total / 2.0
            pos = np.searchsorted(cum, target, side="left")
            pos = np.clip(np.maximum(pos, first), 0, len(c) - 1)
            pos = np.minimum(pos, np.maximum(last - 1, 0))
            res = np.where(present, vv[pos], np.nan)
        out[col] = res
    out["history_minutes"] = np.bincount(codes, weights=w, minlength=G)
    return pd.DataFrame(out)


def _sorted_groups(frame: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, dict]:
    """The group of each row of ``frame`` over ``keys`` (no nulls) and the groups' key values, groups numbered in
    sorted key order -- what ``MultiIndex.from_frame(frame[keys]).factorize(sort=True)`` gives, from one sorted
    factorization per column combined into an integer key (the MultiIndex builds a tuple per row: 10x slower)."""
    combined = np.zeros(len(frame), dtype=np.int64)
    labels = []
    for k in keys:
        code, uniq = pd.factorize(frame[k], sort=True)
        combined = combined * len(uniq) + code
        labels.append(uniq)
    cells, inverse = unique_ints(combined, return_inverse=True)
    out = {}
    for k, uniq in zip(reversed(keys), reversed(labels)):
        cells, code = np.divmod(cells, len(uniq))
        out[k] = uniq[code]
    return inverse.ravel(), {k: out[k] for k in keys}


def step_baselines_range(history: pd.DataFrame, current: pd.DataFrame, start, end) -> pd.DataFrame:
    """The ``step_time_baselines`` rows of every 5-minute partition of ``[start, end)``, equal to running
    :func:`step_baseline` per partition: a signature's baseline is the weighted median of its per-partition
    stats of the 7 days before the partition's *hour* (:data:`LOOKBACK`) when those hold at least
    :data:`MIN_HISTORY_MINUTES` healthy minutes (``baseline_source = 'history'``), else its stats in the
    partition itself (``'cohort'``, cold start). Judging every partition of an hour against the same history
    keeps a range run and the partitions' own runs identical.

    ``history``: ``workload_step_stats`` rows of ``[start floored to the hour - LOOKBACK, end)``;
    ``current``: the range's own rows (the cohort). Rows come per partition, history rows first (sorted by
    signature), then the cohort's signatures without history (sorted): one grouped weighted median per hour
    and one for the cohort, no loop over partitions.
    """
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    cols = BASELINE_COLUMNS
    # the partitions as the per-hour runs enumerate them (from ``start`` within its hour, then from each hour)
    hours = pd.date_range(start.floor("1h"), end, freq="1h", inclusive="left")
    parts = [pd.date_range(max(h, start), min(h + pd.Timedelta(hours=1), end), freq=PARTITION_FREQ, inclusive="left")
             for h in hours]
    hour_of = np.concatenate([np.full(len(p), i) for i, p in enumerate(parts)]) if parts else np.zeros(0, int)
    parts = parts[0].append(parts[1:]) if parts else pd.DatetimeIndex([], tz="UTC")
    if not len(parts):
        return pd.DataFrame(columns=cols)
    hist = history if history is not None else pd.DataFrame(columns=STAT_COLUMNS)
    cur = current if current is not None else pd.DataFrame(columns=STAT_COLUMNS)

    # history baselines of each hour, kept when they hold enough minutes
    hp = pd.DatetimeIndex(as_utc(hist["partition_start"])) if len(hist) else None
    per_hour = []
    for i, h in enumerate(hours):
        if hp is None:
            break
        sel = (hp >= h - LOOKBACK) & (hp < h)
        if not sel.any():
            continue
        b = _grouped_weighted_medians(hist[sel], SIGNATURE)
        b = b[b["history_minutes"] >= MIN_HISTORY_MINUTES]
        if len(b):
            per_hour.append(b.assign(_hour=i))
    # the cohort: each partition's own stats, per signature
    cp = pd.DatetimeIndex(as_utc(cur["partition_start"])) if len(cur) else pd.DatetimeIndex([], tz="UTC")
    pi = parts.get_indexer(cp) if len(cur) else np.zeros(0, int)
    cur = cur[pi >= 0].assign(_p=pi[pi >= 0]) if len(cur) else cur.assign(_p=np.zeros(0, int))
    cohort = _grouped_weighted_medians(cur, ["_p", *SIGNATURE]) if len(cur) else None

    frames = []
    p_idx = np.arange(len(parts))
    if per_hour:
        h = pd.concat(per_hour, ignore_index=True)
        # every partition of the hour gets the hour's rows
        counts = np.bincount(h["_hour"].to_numpy(np.int64), minlength=len(hours))
        start_row = np.concatenate([[0], np.cumsum(counts)[:-1]])
        n_rows = counts[hour_of]
        rep_p = np.repeat(p_idx, n_rows)
        offs = np.arange(len(rep_p)) - np.repeat(np.cumsum(n_rows) - n_rows, n_rows)
        hist_rows = h.iloc[np.repeat(start_row[hour_of], n_rows) + offs].reset_index(drop=True)
        hist_rows = hist_rows.drop(columns="_hour").assign(_p=rep_p, baseline_source="history", _rank=0)
        frames.append(hist_rows)
    if cohort is not None and len(cohort):
        frames.append(cohort.assign(baseline_source="cohort", _rank=1))
    if not frames:
        return pd.DataFrame(columns=cols)
    both = pd.concat(frames, ignore_index=True)
    both = both.sort_values(["_p", "_rank"], kind="stable").drop_duplicates(["_p", *SIGNATURE], keep="first")
    both["partition_start"] = parts[both["_p"].to_numpy()]
    both["gpus"] = both["gpus"].astype("int64")
    for c in ("model_type", "sku", "baseline_source"):
        both[c] = both[c].astype(object)
    return both[cols].reset_index(drop=True)

"""The goodput loss tree: every paid GPU-minute in exactly one state.

Pure pandas (no Dagster). Input: the source frames of a window (one 5-minute
partition or a range; everything is computed per minute and summed per
partition), plus the history it needs (scheduler events before the window, job
metadata of long-running jobs, the step-time baseline, the node inventory, the
capacity Finance pays for and the maintenance calendar).

State of a GPU-minute, by precedence:

1. ``no_data`` -- its region's collector is silent (under half of the region's
   expected GPUs report in that minute): missing data, never a GPU incident.
2. ``maintenance`` -- unallocated (or not reporting) inside a planned window.
3. ``hw_unavailable`` -- a fatal Xid / double-bit ECC error this minute; or
   unallocated on a node that is down / drained outside a window; or expected
   but not reporting while its region reports (a node down, a GPU off the bus).
4. unallocated and healthy -> ``idle_blocked`` for the share of idle GPUs that
   pending jobs are waiting for (min(idle, pending GPUs) cluster-wide), the rest
   ``idle_no_demand``.
5. allocated:
   * ``failure_loss`` -- minutes of a job that failed (failed / node_fail /
     timeout) in the window, spent after its last durable checkpoint;
   * ``allocated_idle`` -- the GPU does no work (util < 5 % and SM activity < 0.05);
   * ``allocated_unproductive`` -- busy but no training progress: a
     batch/distributed job reporting no training metrics at all (dummy load
     games utilization this way) or reporting minutes with 0 steps (a hang);
   * busy notebooks (interactive jobs report no steps) count as ``productive``;
   * progressing minutes earn ``productive`` = min(1, baseline / actual step
     time) x (1 - checkpoint share); the rest is ``slowdown_checkpoint`` and the
     step-time excess split over ``slowdown_data_io`` (loader wait over its
     baseline), ``slowdown_network`` (gradient sync over its baseline) and
     ``slowdown_compute`` (the remainder: throttling, faulty GPU, regressions).

Paid GPU-minutes per region x SKU are Finance's ``capacity_gpus`` x minutes (or
the inventory seen, if larger); the states sum to them exactly.
"""

import numpy as np
import pandas as pd

STATES = [
    "no_data", "maintenance", "hw_unavailable", "idle_blocked", "idle_no_demand", "allocated_idle",
    "allocated_unproductive", "failure_loss", "slowdown_data_io", "slowdown_network", "slowdown_checkpoint",
    "slowdown_compute", "productive",
]
SLOWDOWN_STATES = ["slowdown_data_io", "slowdown_network", "slowdown_checkpoint", "slowdown_compute"]
STATE_FAMILY = {
    "no_data": "missing_data", "maintenance": "planned", "hw_unavailable": "hardware", "idle_blocked": "scheduling",
    "idle_no_demand": "capacity", "allocated_idle": "waste", "allocated_unproductive": "gaming",
    "failure_loss": "software", "slowdown_data_io": "data_io", "slowdown_network": "network",
    "slowdown_checkpoint": "checkpoint", "slowdown_compute": "hardware", "productive": "productive",
}
LEAF_DIMS = ["region", "node_id", "sku", "driver_version", "team", "workload_class", "model_type",
             "framework_version", "queue"]
# Xids that mean the GPU itself is unusable (ECC, row remap, NVLink, off the bus). Xid 119/120 (GSP RPC
# timeouts) follow driver and firmware bugs: evidence for software, not a hardware fault.
FATAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95})
LOSS_EXITS = frozenset({"failed", "node_fail", "timeout"})
SLOW_THROTTLE_BITS = 0x8 | 0x20 | 0x40 | 0x80  # hw slowdown, sw/hw thermal, power brake
BUSY_UTIL_PCT = 5.0
BUSY_SM = 0.05
NO_DATA_COVERAGE = 0.5
MINUTE = pd.Timedelta(minutes=1)


def _minutes(start, end) -> pd.DatetimeIndex:
    return pd.date_range(pd.Timestamp(start), pd.Timestamp(end), freq="1min", inclusive="left")


def maintenance_mask(ts: pd.Series, region: pd.Series, node: pd.Series, windows: pd.DataFrame) -> np.ndarray:
    """Rows inside a planned window for their node (region/node_ids may be '*')."""
    mask = np.zeros(len(ts), dtype=bool)
    if windows is None or windows.empty:
        return mask
    for w in windows.itertuples(index=False):
        inside = (ts >= w.start) & (ts < w.end)
        if w.region not in ("*", None):
            inside &= region == w.region
        if w.node_ids not in ("*", None):
            inside &= node.isin(str(w.node_ids).split(","))
        mask |= np.asarray(inside, dtype=bool)
    return mask


def pending_gpus(sched: pd.DataFrame, minutes: pd.DatetimeIndex) -> np.ndarray:
    """GPUs requested by jobs submitted but not yet started, at each minute's middle."""
    if sched is None or sched.empty or not len(minutes):
        return np.zeros(len(minutes))
    ev = sched[["job_id", "event", "ts", "gpus"]]
    sub = ev[ev["event"] == "submitted"].groupby("job_id").agg(sub=("ts", "min"), gpus=("gpus", "max"))
    done = ev[ev["event"].isin(["started", "ended"])].groupby("job_id")["ts"].min().rename("left")
    jobs = sub.join(done, how="left")
    mid = (minutes + pd.Timedelta(seconds=30)).values
    s = jobs["sub"].values
    left = jobs["left"].fillna(pd.Timestamp.max.tz_localize("UTC")).values
    g = jobs["gpus"].to_numpy(dtype=float)
    # sweep: +gpus at submit, -gpus when it starts (or ends without starting)
    times = np.concatenate([s, left])
    deltas = np.concatenate([g, -g])
    order = np.argsort(times, kind="stable")
    times, deltas = times[order], np.cumsum(deltas[order])
    pos = np.searchsorted(times, mid, side="right") - 1
    return np.where(pos >= 0, deltas[np.clip(pos, 0, None)], 0.0).clip(0)


def job_lookup(meta: pd.DataFrame, sched: pd.DataFrame) -> pd.DataFrame:
    """job_id -> team, workload_class, model_type, framework_version, queue ('unknown' when absent)."""
    cols = ["team", "workload_class", "model_type", "framework_version"]
    out = meta.drop_duplicates("job_id").set_index("job_id")[cols] if meta is not None and len(meta) else pd.DataFrame(columns=cols)
    if sched is not None and len(sched):
        q = sched.drop_duplicates("job_id", keep="last").set_index("job_id")["queue"]
        out = out.join(q.rename("queue"), how="outer")
    else:
        out["queue"] = pd.NA
    return out.astype(object).where(out.notna(), "unknown")


def baseline_for(rows: pd.DataFrame, baseline: pd.DataFrame | None) -> pd.DataFrame:
    """Attach the (model_type, sku, gpus) baseline step time and components to job-minute rows."""
    keys = ["model_type", "sku", "gpus"]
    vals = ["base_step_s", "base_loader_s", "base_sync_s"]
    if baseline is None or baseline.empty:
        return rows.assign(**{v: np.nan for v in vals})
    b = baseline.rename(columns={"step_time_s": "base_step_s", "data_loader_time_s": "base_loader_s",
                                 "grad_sync_time_s": "base_sync_s"})[keys + vals]
    if "partition_start" in baseline.columns:  # one baseline per partition
        keys = ["partition_start", *keys]
        b = baseline.rename(columns={"step_time_s": "base_step_s", "data_loader_time_s": "base_loader_s",
                                     "grad_sync_time_s": "base_sync_s"})[keys + vals]
        rows = rows.assign(partition_start=rows["ts"].dt.floor("5min"))
    b = b.astype({"model_type": object, "sku": object, "gpus": "int64"})
    r = rows.astype({"model_type": object, "sku": object, "gpus": "int64"})
    out = r.merge(b, on=keys, how="left")
    return out.drop(columns=["partition_start"]) if "partition_start" in keys else out


def compute_states(frames: dict, *, start, end, capacity: pd.DataFrame | None, inventory: pd.DataFrame,
                   maintenance: pd.DataFrame | None, meta: pd.DataFrame | None, sched_history: pd.DataFrame | None,
                   baseline: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Leaves of the loss tree for ``[start, end)``.

    Returns ``(leaves, failures)``: leaves hold gpu_minutes per partition_start x
    :data:`LEAF_DIMS` x state; failures hold one row per job that failed in the
    window with the GPU-minutes it threw away (for daily settlement).

    ``inventory``: node_id, region, sku, gpus (nodes known from the trailing day).
    """
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    gpu = frames["gpu_telemetry"]
    node = frames["node_telemetry"]
    runtime = frames["job_runtime_metrics"]
    minutes = _minutes(start, end)

    # --- node context per (ts, node) --------------------------------------------------------
    node_ctx = node[["ts", "node_id", "health", "driver_version"]]
    g = gpu[["ts", "region", "node_id", "sku", "gpu_uuid", "job_id", "gpu_util_pct", "sm_active",
             "throttle_reasons", "ecc_dbe_delta", "xid"]].merge(node_ctx, on=["ts", "node_id"], how="left")
    g["health"] = g["health"].astype(object).fillna("ok")
    drivers = node.groupby("node_id")["driver_version"].last() if len(node) else pd.Series(dtype=object)
    g["driver_version"] = g["driver_version"].astype(object).fillna(g["node_id"].map(drivers)).fillna("unknown")
    in_maint = maintenance_mask(g["ts"], g["region"], g["node_id"], maintenance)
    fatal = g["xid"].isin(FATAL_XIDS).to_numpy() | (g["ecc_dbe_delta"].fillna(0).to_numpy() > 0)
    has_job = g["job_id"].notna().to_numpy()
    sm = g["sm_active"].to_numpy(dtype=float)
    busy = (g["gpu_util_pct"].to_numpy() >= BUSY_UTIL_PCT) & ~(np.nan_to_num(sm, nan=1.0) < BUSY_SM)

    # --- job attributes --------------------------------------------------------------------
    lookup = job_lookup(meta, sched_history)
    jid = g["job_id"].astype(object)
    for col in ["team", "workload_class", "model_type", "framework_version", "queue"]:
        g[col] = np.where(has_job, jid.map(lookup[col]).fillna("unknown"), "none") if len(lookup) else np.where(has_job, "unknown", "none")
    g["gpus"] = g.groupby(["ts", "job_id"])["gpu_uuid"].transform("size").fillna(0).astype("int64")

    # runtime metrics of the job this minute
    rt = runtime[["ts", "job_id", "steps", "step_time_s", "data_loader_time_s", "grad_sync_time_s",
                  "checkpoint_time_s", "last_checkpoint_step"]]
    reporting_jobs = set(runtime["job_id"].astype(object).unique())
    g = g.merge(rt, on=["ts", "job_id"], how="left")
    has_row = g["steps"].notna().to_numpy()
    reports = jid.isin(reporting_jobs).to_numpy() if len(reporting_jobs) else np.zeros(len(g), bool)
    interactive = (g["workload_class"] == "interactive").to_numpy()

    # failures: minutes after the last checkpoint of jobs that failed in the window
    failures = _failures(frames["scheduler_events"], runtime, g, start, end)
    lost = np.zeros(len(g), dtype=bool)
    if len(failures):
        f = failures.set_index("job_id")
        lf = jid.map(f["lost_from"])
        fa = jid.map(f["failed_at"])
        lost = has_job & lf.notna().to_numpy() & (g["ts"] >= lf).to_numpy() & (g["ts"] <= fa).to_numpy()

    # --- allocated job-minutes: efficiency against the baseline -------------------------------
    g = baseline_for(g, baseline)
    st = g["step_time_s"].to_numpy(dtype=float)
    base = g["base_step_s"].to_numpy(dtype=float)
    base = np.where(np.isnan(base), st, base)  # no baseline yet: the job is its own baseline
    eff = np.clip(np.where(st > 0, base / st, 1.0), 0.0, 1.0)
    ck = np.clip(g["checkpoint_time_s"].fillna(0).to_numpy(dtype=float) / 60.0, 0.0, 1.0)
    excess = np.clip(st - base, 0, None)
    ex_io = np.clip(g["data_loader_time_s"].to_numpy(dtype=float) - g["base_loader_s"].fillna(g["data_loader_time_s"]).to_numpy(dtype=float), 0, None)
    ex_net = np.clip(g["grad_sync_time_s"].to_numpy(dtype=float) - g["base_sync_s"].fillna(g["grad_sync_time_s"]).to_numpy(dtype=float), 0, None)
    ex_io, ex_net = np.nan_to_num(ex_io), np.nan_to_num(ex_net)
    scale = np.where(ex_io + ex_net > excess, excess / np.maximum(ex_io + ex_net, 1e-12), 1.0)
    ex_io, ex_net = ex_io * scale, ex_net * scale
    ex_cmp = np.clip(excess - ex_io - ex_net, 0, None)
    slow = (1 - eff) * (1 - ck)
    tot = np.maximum(excess, 1e-12)

    n = len(g)
    W = {s: np.zeros(n) for s in STATES}
    unalloc = ~has_job
    W["maintenance"] = np.where(unalloc & in_maint, 1.0, 0.0)
    hw = (fatal | (unalloc & g["health"].isin(["down", "drained"]).to_numpy() & ~in_maint)) & (W["maintenance"] == 0)
    W["hw_unavailable"] = hw.astype(float)
    idle = unalloc & ~hw & (W["maintenance"] == 0)
    alloc = has_job & ~hw
    W["failure_loss"] = (alloc & lost).astype(float)
    live = alloc & ~lost
    W["allocated_idle"] = (live & ~busy).astype(float)
    working = live & busy
    no_metrics = working & ~reports & ~interactive
    W["allocated_unproductive"] = no_metrics.astype(float)
    zero_steps = working & has_row & (g["steps"].fillna(0).to_numpy() == 0)
    ck_minute = zero_steps & (ck >= 20 / 60)
    W["slowdown_checkpoint"] = ck_minute.astype(float)
    W["allocated_unproductive"] += (zero_steps & ~ck_minute).astype(float)
    nb = working & ~reports & interactive
    between = working & reports & ~has_row  # a reporting job with no row this minute (start-up / tear-down)
    W["productive"] = (nb | between).astype(float)
    prog = working & has_row & (g["steps"].fillna(0).to_numpy() > 0)
    W["productive"] += np.where(prog, eff * (1 - ck), 0.0)
    W["slowdown_checkpoint"] += np.where(prog, ck, 0.0)
    W["slowdown_data_io"] = np.where(prog, slow * ex_io / tot, 0.0)
    W["slowdown_network"] = np.where(prog, slow * ex_net / tot, 0.0)
    W["slowdown_compute"] = np.where(prog, slow * np.where(excess > 0, ex_cmp / tot, 1.0), 0.0)

    # idle split by pending demand (cluster-wide, per minute)
    t_idx = ((g["ts"] - start) // MINUTE).to_numpy().astype(np.int64)
    idle_per_min = np.bincount(t_idx[idle], minlength=len(minutes)).astype(float)
    pend = pending_gpus(sched_history, minutes)
    frac_blocked = np.where(idle_per_min > 0, np.minimum(idle_per_min, pend) / np.maximum(idle_per_min, 1), 0.0)
    fb = frac_blocked[np.clip(t_idx, 0, len(minutes) - 1)]
    W["idle_blocked"] = np.where(idle, fb, 0.0)
    W["idle_no_demand"] = np.where(idle, 1 - fb, 0.0)

    rep = g[["ts"] + LEAF_DIMS].copy()
    rep["partition_start"] = g["ts"].dt.floor("5min")
    long = _melt(rep, W)
    missing = _missing_minutes(g, minutes, capacity, inventory, maintenance)
    leaves = pd.concat([long, missing], ignore_index=True)
    leaves = (leaves.groupby(["partition_start"] + LEAF_DIMS + ["state"], observed=True, sort=False)["gpu_minutes"]
              .sum().reset_index())
    leaves = leaves[leaves["gpu_minutes"] > 1e-9].reset_index(drop=True)
    return leaves, failures


def _melt(rep: pd.DataFrame, W: dict) -> pd.DataFrame:
    parts = []
    for state, w in W.items():
        m = w > 0
        if m.any():
            p = rep.loc[m, ["partition_start"] + LEAF_DIMS].copy()
            p["state"] = state
            p["gpu_minutes"] = w[m]
            parts.append(p)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["partition_start"] + LEAF_DIMS + ["state", "gpu_minutes"])


def _missing_minutes(g: pd.DataFrame, minutes: pd.DatetimeIndex, capacity, inventory: pd.DataFrame,
                     maintenance) -> pd.DataFrame:
    """Expected GPU-minutes that did not report: no_data, maintenance or hw_unavailable."""
    if not len(minutes):
        return pd.DataFrame()
    inv = inventory.copy()
    reported = g.groupby(["ts", "node_id"]).size().rename("reported")
    grid = pd.MultiIndex.from_product([minutes, inv["node_id"]], names=["ts", "node_id"]).to_frame(index=False)
    grid = grid.merge(inv, on="node_id", how="left")
    grid = grid.merge(reported.reset_index(), on=["ts", "node_id"], how="left")
    grid["reported"] = grid["reported"].fillna(0)
    grid["gpus"] = np.maximum(grid["gpus"], grid["reported"])
    grid["missing"] = grid["gpus"] - grid["reported"]
    # region coverage per minute
    cov = grid.groupby(["ts", "region"]).agg(exp=("gpus", "sum"), rep=("reported", "sum"))
    cov["silent"] = cov["rep"] < NO_DATA_COVERAGE * cov["exp"]
    grid = grid.merge(cov["silent"].reset_index(), on=["ts", "region"], how="left")
    in_maint = maintenance_mask(grid["ts"], grid["region"], grid["node_id"], maintenance)
    grid["state"] = np.where(grid["silent"], "no_data", np.where(in_maint, "maintenance", "hw_unavailable"))
    # GPUs that report in a silent region minute are classified normally; the missing ones are no_data
    miss = grid[grid["missing"] > 0]
    out = pd.DataFrame({
        "partition_start": miss["ts"].dt.floor("5min"), "region": miss["region"].values, "node_id": miss["node_id"].values,
        "sku": miss["sku"].values, "driver_version": miss["node_id"].map(g.groupby("node_id")["driver_version"].last()).fillna("unknown").values,
        "team": "none", "workload_class": "none", "model_type": "none", "framework_version": "none", "queue": "none",
        "state": miss["state"].values, "gpu_minutes": miss["missing"].astype(float).values,
    })
    # paid capacity above the inventory ever seen: GPUs nobody has heard from in a day
    if capacity is not None and len(capacity):
        seen = inv.groupby(["region", "sku"])["gpus"].sum()
        cap = capacity.groupby(["region", "sku"])["capacity_gpus"].max()
        gap = (cap - seen.reindex(cap.index).fillna(0)).clip(lower=0)
        gap = gap[gap > 0]
        rows = []
        for (region, sku), k in gap.items():
            for p in pd.date_range(minutes[0].floor("5min"), minutes[-1], freq="5min"):
                n_min = int(((minutes >= p) & (minutes < p + pd.Timedelta(minutes=5))).sum())
                rows.append({"partition_start": p, "region": region, "node_id": "unseen", "sku": sku, "driver_version": "unknown",
                             "team": "none", "workload_class": "none", "model_type": "none", "framework_version": "none",
                             "queue": "none", "state": "hw_unavailable", "gpu_minutes": float(k) * n_min})
        if rows:
            out = pd.concat([out, pd.DataFrame(rows)], ignore_index=True)
    return out


def _failures(sched: pd.DataFrame, runtime: pd.DataFrame, g: pd.DataFrame, start, end) -> pd.DataFrame:
    """Jobs that failed in the window and the work they threw away.

    Lost work = steps since the last durable checkpoint (``last_step -
    last_checkpoint_step`` of the job's last runtime row) at its step time; a job
    with no training metrics loses everything since it started. Only the job's
    own counters are used, so the answer does not depend on how much history
    the window holds.
    """
    cols = ["job_id", "failed_at", "exit_state", "reason", "lost_from", "gpus", "lost_gpu_minutes", "lost_in_window"]
    if sched is None or sched.empty:
        return pd.DataFrame(columns=cols)
    ended = sched[(sched["event"] == "ended") & sched["exit_state"].isin(LOSS_EXITS)
                  & (sched["ts"] >= start) & (sched["ts"] < end)]
    if ended.empty:
        return pd.DataFrame(columns=cols)
    ended = ended.drop_duplicates("job_id", keep="last").set_index("job_id")
    failed_at = ended["ts"].dt.floor("1min")
    starts = sched[sched["event"] == "started"].groupby("job_id")["ts"].max().reindex(ended.index)
    last = (runtime[runtime["job_id"].isin(ended.index)].sort_values("ts").groupby("job_id")
            .agg(last_step=("last_step", "last"), ck=("last_checkpoint_step", "last"), step=("step_time_s", "median")))
    last = last.reindex(ended.index)
    since_ck = (last["last_step"] - last["ck"].astype(float).fillna(0)).clip(lower=0)
    lost_min = since_ck * last["step"] / 60.0
    lost_from = failed_at - pd.to_timedelta(lost_min.fillna(0).round(), unit="min")
    no_metrics = last["last_step"].isna()
    lost_from = lost_from.where(~no_metrics, starts.dt.floor("1min"))
    lost_from = lost_from.fillna(failed_at)
    gpus = ended["gpus"].astype(float)
    total_min = ((failed_at - lost_from) / MINUTE).clip(lower=0) + 1
    in_win = ((failed_at - np.maximum(lost_from, start)) / MINUTE).clip(lower=0) + 1
    out = pd.DataFrame({
        "failed_at": failed_at, "exit_state": ended["exit_state"], "reason": ended["reason"],
        "lost_from": pd.to_datetime(lost_from, utc=True), "gpus": gpus,
        "lost_gpu_minutes": total_min * gpus, "lost_in_window": in_win * gpus,
    })
    return out.rename_axis("job_id").reset_index()


def rollup(leaves: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Sum leaves to ``by`` x state (e.g. region, sku, workload_class, team)."""
    return leaves.groupby(["partition_start"] + by + ["state"], observed=True)["gpu_minutes"].sum().reset_index()


def goodput_ratio(leaves: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """Productive / paid per partition (and ``by``), with each state's share of paid."""
    by = by or []
    wide = leaves.pivot_table(index=["partition_start"] + by, columns="state", values="gpu_minutes", aggfunc="sum", fill_value=0.0)
    for s in STATES:
        if s not in wide.columns:
            wide[s] = 0.0
    wide = wide[STATES]
    paid = wide.sum(axis=1)
    out = pd.DataFrame({"paid_gpu_minutes": paid, "productive_gpu_minutes": wide["productive"],
                        "goodput": np.where(paid > 0, wide["productive"] / paid.where(paid > 0, 1), np.nan)})
    shares = wide.div(paid.where(paid > 0, 1), axis=0).add_prefix("share_")
    return pd.concat([out, shares], axis=1).reset_index()

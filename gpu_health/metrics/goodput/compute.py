"""The loss tree of a window: :func:`compute_states` in named stages, and :func:`compute_states_range` over a
range's chunks.

Stages of :func:`compute_states`: align the window's rows on the minute x node grid (:func:`_align_nodes`),
attribute them to jobs as each partition's own run knows them (:func:`_attribute_jobs`), read the jobs' runtime
metrics per row (:func:`_runtime_per_row`), find the failures and the minutes they lost (:func:`_failure_rows`),
weigh each reporting GPU-minute over the states (:func:`_classify_rows`), give the expected GPU-minutes that did
not report theirs (:func:`_missing_leaves`) and roll both up to leaves bounded by the paid capacity
(:func:`_roll_up`).

Implementation: every join is on integer codes (minute x node, minute x job, partition x signature) and the final
aggregation is one ``np.unique`` over a packed key and a ``bincount`` per state, so the cost is a few array passes
per GPU-minute.
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpu_health.codes import is_missing, unique_ints
from gpu_health.constants import FATAL_XIDS as XID_GPU_FAULT
from gpu_health.constants import KERNEL_ACTIVE_SM, KERNEL_ACTIVE_UTIL_PCT, MINUTE, PARTITION, PARTITION_MINUTES
from gpu_health.metrics.goodput.capacity import bound_to_capacity
from gpu_health.metrics.goodput.classify import _baseline_arrays, _progress_split, reported_state_weights
from gpu_health.metrics.goodput.failures import _failures
from gpu_health.metrics.goodput.gaps import _missing_minutes
from gpu_health.metrics.goodput.grid import _codes, _minutes
from gpu_health.metrics.goodput.history import _blocked_fraction, _SchedHistory
from gpu_health.metrics.goodput.jobs import _reports_at_partition_end, _row_attributes, job_lookup, submitted_ns
from gpu_health.metrics.goodput.maintenance import maintenance_mask
from gpu_health.metrics.goodput.rollups import _aggregate
from gpu_health.metrics.goodput.states import FAILURE_LOOKBACK, LEAF_DIMS

HEALTH_CODES = {"ok": 0, "degraded": 1, "down": 2, "drained": 3}  # (classify.DOWN_HEALTH reads them)


@dataclass
class _Window:
    """The window and its gpu_telemetry rows: ``t_idx`` each row's minute since ``start``."""

    start: pd.Timestamp
    end: pd.Timestamp
    minutes: pd.DatetimeIndex
    M: int
    gpu: pd.DataFrame
    n: int
    t_idx: np.ndarray
    has_job: np.ndarray


@dataclass
class _Nodes:
    """The nodes of the window (inventory, GPU rows, node rows) as codes, their health and driver per minute and
    per row, their region and SKU."""

    uni: pd.Index
    Nn: int
    g_node: np.ndarray  # each GPU row's node code
    health_arr: np.ndarray  # (minute, node) -> health code
    drv_uni: pd.Index
    node_last_drv: np.ndarray  # the last driver seen per node in the window
    health: np.ndarray  # per GPU row
    drv: np.ndarray  # per GPU row
    region: np.ndarray
    sku: np.ndarray


@dataclass
class _Jobs:
    """The window's jobs as codes, each row's job attributes as its partition knows them, the GPUs its job holds."""

    uni: pd.Index
    Nj: int
    g_job: np.ndarray  # each GPU row's job code (-1: none)
    jj: np.ndarray  # g_job clipped at 0 (a valid index for per-job arrays)
    jk: np.ndarray  # (minute, job) key of each row
    lookup: pd.DataFrame
    rows: np.ndarray  # the rows with a job
    pair_of_row: np.ndarray  # each of those rows' (partition, job) pair
    pair_t: np.ndarray
    pair_j: np.ndarray
    attr_uni: object
    row_attr: np.ndarray
    meta_known: np.ndarray
    row_gpus: np.ndarray
    interactive: np.ndarray  # per row: a notebook, known as such to its partition


def compute_states(frames: dict, *, start, end, capacity: pd.DataFrame | None, inventory: pd.DataFrame,
                   maintenance: pd.DataFrame | None, meta: pd.DataFrame | None, sched_history: pd.DataFrame | None,
                   baseline: pd.DataFrame | None, runtime_history: pd.DataFrame | None = None,
                   hw_corroborated: pd.DataFrame | None = None,
                   history: "_SchedHistory | None" = None,
                   queue_events: pd.DataFrame | None = None,
                   moved: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Leaves of the loss tree for ``[start, end)``.

    Returns ``(leaves, failures)``: leaves hold gpu_minutes per partition_start x
    :data:`LEAF_DIMS` x state; failures hold one row per job that failed in the
    window with the GPU-minutes it threw away (for daily settlement).

    ``inventory``: node_id, region, sku, gpus (nodes known from the trailing day).
    ``baseline``: step-time baselines per signature (model_type, sku, gpus), with
    ``partition_start`` when each partition has its own.
    ``hw_corroborated``: (partition_start, node_id) pairs whose missing GPUs are hardware
    (:func:`hardware_corroboration`); besides them, a node's missing GPUs are hardware in minutes its
    node reports itself degraded, drained or down and in partitions where it reported a GPU fault.
    None: every missing GPU of a reporting region is hardware (the rule before missing data was told apart).
    ``runtime_history``: job_runtime_metrics of the :data:`FAILURE_LOOKBACK` before
    ``start`` (the work jobs failing early in the window threw away); ``sched_history``
    holds the 'started' events of jobs without training metrics. ``queue_events``: the
    submitted / started events (ts, job_id, queue) of the :data:`JOB_ATTRIBUTE_LOOKBACK` before
    ``start`` to ``end``, which name a job's queue (default: those of ``sched_history``).
    Each row's job is known as its partition's own run would know it (:func:`_row_attributes`).
    ``moved``: GPUs reporting under another name than the inventory's (ts, gpu_uuid, node_id = the old name:
    gpu_health.steps.telemetry.moved_gpus); the old name does not expect them in those minutes.

    The stages are the module docstring's.
    """
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    gpu, runtime = frames["gpu_telemetry"], frames["job_runtime_metrics"]
    minutes = _minutes(start, end)
    n = len(gpu)
    w = _Window(start, end, minutes, len(minutes), gpu, n,
                ((gpu["ts"] - start) // MINUTE).to_numpy(np.int64) if n else np.zeros(0, np.int64),
                ~is_missing(gpu["job_id"]))
    nodes = _align_nodes(w, frames["node_telemetry"], inventory)
    in_maint = maintenance_mask(gpu["ts"], gpu["region"], gpu["node_id"], maintenance) if n else np.zeros(0, bool)
    fatal = gpu["xid"].isin(XID_GPU_FAULT).to_numpy() | (gpu["ecc_dbe_delta"].fillna(0).to_numpy() > 0)
    jobs = _attribute_jobs(w, runtime, meta, sched_history, history, queue_events)
    rt, reports = _runtime_per_row(w, jobs, runtime, runtime_history)
    failures, lost = _failure_rows(w, jobs, frames["scheduler_events"], runtime, runtime_history, sched_history)
    W = _classify_rows(w, nodes, jobs, rt, reports, in_maint, fatal, lost, baseline, sched_history, history)
    NA, ND = len(jobs.attr_uni) + 1, len(nodes.drv_uni) + 1
    key = ((w.t_idx // PARTITION_MINUTES) * nodes.Nn + nodes.g_node) * ND * NA + (nodes.drv + 1) * NA + jobs.row_attr
    leaves = _aggregate(key, W, start, nodes.Nn, ND, NA, nodes.uni, nodes.region, nodes.sku, nodes.drv_uni,
                        jobs.attr_uni)
    missing = _missing_leaves(w, nodes, fatal, capacity, inventory, maintenance, hw_corroborated, moved)
    return _roll_up(leaves, missing, capacity, minutes), failures


def _align_nodes(w: _Window, node: pd.DataFrame, inventory: pd.DataFrame) -> _Nodes:
    """Stage 1: the nodes as codes; their health and driver per (minute, node) and per GPU row; region and SKU
    per node (the GPU rows' over the inventory's)."""
    gpu, n, M = w.gpu, w.n, w.M
    node_uni = pd.Index(pd.unique(np.concatenate([
        np.asarray(inventory["node_id"], dtype=object), np.asarray(gpu["node_id"], dtype=object),
        np.asarray(node["node_id"], dtype=object)])))
    Nn = max(len(node_uni), 1)
    g_node = _codes(gpu["node_id"], node_uni)
    health_arr = np.zeros(M * Nn, dtype=np.int8)
    drv_uni = pd.Index(pd.unique(np.concatenate([np.asarray(node["driver_version"], dtype=object),
                                                 np.array(["unknown"], dtype=object)])))
    drv_arr = np.full(M * Nn, -1, dtype=np.int64)
    node_last_drv = np.full(Nn, drv_uni.get_loc("unknown"), dtype=np.int64)
    if len(node):
        nt = ((node["ts"] - w.start) // MINUTE).to_numpy(np.int64)
        nn = _codes(node["node_id"], node_uni)
        ok = (nt >= 0) & (nt < M)
        nk = nt[ok] * Nn + nn[ok]
        health_arr[nk] = node["health"].astype(object).map(HEALTH_CODES).fillna(0).to_numpy(np.int8)[ok]
        dcode = _codes(node["driver_version"], drv_uni)
        drv_arr[nk] = dcode[ok]
        order = np.argsort(nt, kind="stable")
        node_last_drv[nn[order]] = dcode[order]  # last driver seen per node in the window
    rk = w.t_idx * Nn + g_node
    health = health_arr[rk] if n else np.zeros(0, np.int8)
    drv = np.where(drv_arr[rk] >= 0, drv_arr[rk], node_last_drv[g_node]) if n else np.zeros(0, np.int64)
    node_region = np.full(Nn, None, dtype=object)
    node_sku = np.full(Nn, None, dtype=object)
    inv_codes = _codes(inventory["node_id"], node_uni)
    node_region[inv_codes] = np.asarray(inventory["region"], dtype=object)
    node_sku[inv_codes] = np.asarray(inventory["sku"], dtype=object)
    if n:
        node_region[g_node] = np.asarray(gpu["region"], dtype=object)
        node_sku[g_node] = np.asarray(gpu["sku"], dtype=object)
    return _Nodes(node_uni, Nn, g_node, health_arr, drv_uni, node_last_drv, health, drv, node_region, node_sku)


def _attribute_jobs(w: _Window, runtime: pd.DataFrame, meta, sched_history, history: "_SchedHistory | None",
                    queue_events) -> _Jobs:
    """Stage 2: the jobs as codes, each row's job attributes as its partition's own run knows them
    (:func:`_row_attributes`), the GPUs its job holds in its minute and whether it is a known notebook."""
    gpu, n, has_job = w.gpu, w.n, w.has_job
    job_uni = pd.Index(pd.unique(np.concatenate([np.asarray(gpu.loc[has_job, "job_id"], dtype=object),
                                                 np.asarray(runtime["job_id"], dtype=object)])))
    Nj = max(len(job_uni), 1)
    g_job = np.full(n, -1, dtype=np.int64)
    if n and has_job.any():
        g_job[has_job] = _codes(gpu.loc[has_job, "job_id"], job_uni)
    lookup = history.lookup if history is not None else job_lookup(meta, None)
    lookup = lookup.reindex(job_uni).astype(object).fillna("unknown") if len(job_uni) else lookup.iloc[0:0]
    jj = np.clip(g_job, 0, None)
    if queue_events is None:
        queue_events = history.queue_events if history is not None else sched_history
    submitted = history.submitted if history is not None else submitted_ns(meta)
    # what a partition knows of a job is the same for all its rows: computed per (partition, job) pair (a day's
    # 1.7 M rows are ~0.1 M pairs) and spread over the rows
    rows = np.flatnonzero(has_job)
    pairs, pair_of_row = unique_ints((w.t_idx[rows] // PARTITION_MINUTES) * Nj + jj[rows], return_inverse=True)
    pair_of_row = pair_of_row.ravel()
    pair_t, pair_j = (pairs // Nj) * PARTITION_MINUTES, pairs % Nj
    pair_attr, attr_uni, pair_known = _row_attributes(w.start, pair_t, pair_j, job_uni, lookup, submitted,
                                                      queue_events)
    row_attr, meta_known = np.zeros(n, np.int64), np.zeros(n, bool)
    row_attr[rows], meta_known[rows] = pair_attr[pair_of_row], pair_known[pair_of_row]
    job_interactive = (lookup["workload_class"] == "interactive").to_numpy() if len(job_uni) else np.zeros(0, bool)
    jk = w.t_idx * Nj + jj  # (minute, job) key of each row
    row_gpus = np.zeros(n, np.int64)  # GPUs the row's job holds in the row's minute
    if n and has_job.any():
        _, inv_g, cnt_g = unique_ints(jk[has_job], return_inverse=True, return_counts=True)
        row_gpus[has_job] = cnt_g[inv_g.ravel()]
    interactive = has_job & meta_known & job_interactive[jj] if n and len(job_uni) else np.zeros(n, bool)
    return _Jobs(job_uni, Nj, g_job, jj, jk, lookup, rows, pair_of_row, pair_t, pair_j, attr_uni, row_attr,
                 meta_known, row_gpus, interactive)


RUNTIME_COLUMNS = ("steps", "step_time_s", "data_loader_time_s", "grad_sync_time_s", "checkpoint_time_s")


def _runtime_per_row(w: _Window, jobs: _Jobs, runtime: pd.DataFrame, runtime_history) -> tuple[dict, np.ndarray]:
    """Stage 3: each row's job's runtime metrics in the row's minute (NaN: no row; a (minute, job)'s last runtime
    row, as an assignment keeps it), and whether its job reports at its partition's end
    (:func:`_reports_at_partition_end`)."""
    n, M, Nj = w.n, w.M, jobs.Nj
    rt_keys = np.zeros(0, np.int64)  # sorted (minute, job) keys
    rt_vals: dict[str, np.ndarray] = {}
    rt_codes = None  # (minute, job code) of each runtime row, for the reporting memory too
    if len(runtime):
        rt_t = ((runtime["ts"] - w.start) // MINUTE).to_numpy(np.int64)
        rt_j = _codes(runtime["job_id"], jobs.uni)
        rt_codes = (rt_t, rt_j)
        ok = (rt_t >= 0) & (rt_t < M) & (rt_j >= 0)
        kk = rt_t[ok] * Nj + rt_j[ok]
        rt_keys, first_rev = unique_ints(kk[::-1], return_index=True)
        last = len(kk) - 1 - first_rev
        rt_vals["steps"] = runtime["steps"].to_numpy(dtype=float)[ok][last]
        for col in RUNTIME_COLUMNS[1:]:
            rt_vals[col] = runtime[col].to_numpy(dtype=float, na_value=np.nan)[ok][last]
    at = np.clip(np.searchsorted(rt_keys, jobs.jk), 0, max(len(rt_keys) - 1, 0))
    found = w.has_job & (rt_keys[at] == jobs.jk) if len(rt_keys) else np.zeros(n, dtype=bool)
    per_row = {col: np.where(found, rt_vals[col][at], np.nan) if len(rt_keys) else np.full(n, np.nan)
               for col in RUNTIME_COLUMNS}
    reports = np.zeros(n, bool)
    reports[jobs.rows] = _reports_at_partition_end(w.start, jobs.pair_t, jobs.pair_j, runtime, runtime_history,
                                                   jobs.uni, M, rt_codes)[jobs.pair_of_row]
    return per_row, reports


def _failure_rows(w: _Window, jobs: _Jobs, sched_w: pd.DataFrame, runtime: pd.DataFrame, runtime_history,
                  sched_history) -> tuple[pd.DataFrame, np.ndarray]:
    """Stage 4: the jobs that failed in the window (:func:`_failures`) and, per row, whether it is one of their
    lost minutes (after the last checkpoint) in the failure's own partition."""
    if runtime_history is None or runtime_history.empty:
        rt_fail = runtime
    else:  # only the runtime rows of jobs ending in the window are read (_failures): keep those, in order
        ending = (sched_w.loc[sched_w["event"] == "ended", "job_id"] if sched_w is not None and len(sched_w)
                  else pd.Series([], dtype=object))
        rt_fail = pd.concat([runtime_history[runtime_history["job_id"].isin(ending).to_numpy()],
                             runtime[runtime["job_id"].isin(ending).to_numpy()]])
    failures = _failures(sched_w, rt_fail, w.gpu, w.start, w.end, history=sched_history)
    lost = np.zeros(w.n, dtype=bool)
    if len(failures) and w.n:
        fj = _codes(failures["job_id"], jobs.uni)
        okf = fj >= 0
        lf = np.full(jobs.Nj, np.iinfo(np.int64).max)
        fa = np.full(jobs.Nj, np.iinfo(np.int64).min)
        lf[fj[okf]] = ((failures["lost_from"] - w.start) // MINUTE).to_numpy(np.int64)[okf]
        fa[fj[okf]] = ((failures["failed_at"] - w.start) // MINUTE).to_numpy(np.int64)[okf]
        # only the failure's own partition is failure_loss here: the 5-minute series cannot know a failure
        # before it happens (and a range run must equal partition runs); the daily settlement moves the rest
        t_idx, jj = w.t_idx, jobs.jj
        lost = (w.has_job & (t_idx >= lf[jj]) & (t_idx <= fa[jj])
                & (t_idx // PARTITION_MINUTES == fa[jj] // PARTITION_MINUTES))
    return failures, lost


def _classify_rows(w: _Window, nodes: _Nodes, jobs: _Jobs, rt: dict, reports, in_maint, fatal, lost, baseline,
                   sched_history, history: "_SchedHistory | None") -> dict[str, np.ndarray]:
    """Stage 5: every reporting GPU-minute's share in each state (the precedence rule: reported_state_weights),
    progressing minutes weighed against their baseline (per partition x signature)."""
    gpu, n, has_job, t_idx = w.gpu, w.n, w.has_job, w.t_idx
    sm = gpu["sm_active"].to_numpy(dtype=float, na_value=np.nan)
    busy = ((gpu["gpu_util_pct"].to_numpy(dtype=float) >= KERNEL_ACTIVE_UTIL_PCT)
            & ~(np.nan_to_num(sm, nan=1.0) < KERNEL_ACTIVE_SM))
    steps = rt["steps"]
    with np.errstate(invalid="ignore"):  # NaN step times (no row this minute) propagate by design
        base, base_ld, base_sy = _baseline_arrays(baseline, w.start, t_idx, jobs.g_job, jobs.lookup, jobs.uni,
                                                  gpu["sku"], jobs.row_gpus)
        if (has_job & ~jobs.meta_known).any():  # the job's model type not known to the partition: no baseline
            base, base_ld, base_sy = (np.where(has_job & ~jobs.meta_known, np.nan, b) for b in (base, base_ld, base_sy))
    progress = _progress_split(rt["step_time_s"], rt["data_loader_time_s"], rt["grad_sync_time_s"],
                               rt["checkpoint_time_s"], base, base_ld, base_sy)

    def blocked(idle):
        # idle split by pending demand: a queue's pending GPUs are matched with idle GPUs of its region
        # (queues map to a region by where their jobs run); pending jobs of shared queues with any idle GPU
        row_region = nodes.region[nodes.g_node] if n else np.zeros(0, dtype=object)
        return _blocked_fraction(idle, t_idx, row_region, w.minutes, sched_history, nodes.region, nodes.uni,
                                 history=history, end=w.end)

    return reported_state_weights(has_job=has_job, in_maint=in_maint, fatal=fatal, health=nodes.health, lost=lost,
                                  busy=busy, reports=reports, interactive=jobs.interactive, has_row=~np.isnan(steps),
                                  steps=steps, progress=progress, blocked_fraction=blocked)


def _missing_leaves(w: _Window, nodes: _Nodes, fatal, capacity, inventory, maintenance, hw_corroborated,
                    moved) -> pd.DataFrame:
    """Stage 6: the expected GPU-minutes that did not report (:func:`_missing_minutes`), told hardware where the
    node's own agent, a GPU fault in the partition or ``hw_corroborated`` says so, and not expected of a node
    where its GPUs report under another name (``moved``)."""
    M, Nn, n, t_idx = w.M, nodes.Nn, w.n, w.t_idx
    corroborated = None
    if hw_corroborated is not None:
        corroborated = nodes.health_arr.reshape(M, Nn) >= 1  # the node's own agent: degraded, down or drained
        part_fault = np.zeros((max(-(-M // PARTITION_MINUTES), 1), Nn), dtype=bool)
        if n and fatal.any():
            part_fault[t_idx[fatal] // PARTITION_MINUTES, nodes.g_node[fatal]] = True
        if len(hw_corroborated):
            pc = ((hw_corroborated["partition_start"] - w.start) // PARTITION).to_numpy(np.int64)
            nc = _codes(hw_corroborated["node_id"], nodes.uni)
            ok_c = (pc >= 0) & (pc < len(part_fault)) & (nc >= 0)
            part_fault[pc[ok_c], nc[ok_c]] = True
        corroborated |= np.repeat(part_fault, PARTITION_MINUTES, axis=0)[:M]
    moved_m = None  # minutes x nodes: GPUs of the node's inventory reporting under another name
    if moved is not None and len(moved):
        mt = ((moved["ts"] - w.start) // MINUTE).to_numpy(np.int64)
        mn = _codes(moved["node_id"], nodes.uni)
        ok = (mt >= 0) & (mt < M) & (mn >= 0)
        if ok.any():
            moved_m = np.bincount(mt[ok] * Nn + mn[ok], minlength=M * Nn).reshape(M, Nn).astype(float)
    return _missing_minutes(t_idx, nodes.g_node, w.minutes, nodes.uni, nodes.region, nodes.sku, nodes.node_last_drv,
                            nodes.drv_uni, capacity, inventory, maintenance, corroborated, moved_m)


def _roll_up(leaves: pd.DataFrame, missing: pd.DataFrame, capacity, minutes) -> pd.DataFrame:
    """Stage 7: reported and missing leaves bounded to the paid capacity (:func:`bound_to_capacity`), summed per
    leaf, the empty ones dropped."""
    leaves, missing = bound_to_capacity(leaves, missing, capacity, minutes)
    leaves = pd.concat([x for x in (leaves, missing) if len(x)], ignore_index=True) if len(leaves) or len(missing) else leaves
    leaves = (leaves.groupby(["partition_start"] + LEAF_DIMS + ["state"], observed=True, sort=False)["gpu_minutes"]
              .sum().reset_index())
    return leaves[leaves["gpu_minutes"] > 1e-9].reset_index(drop=True)


def _rows_between(frame: pd.DataFrame, start, end) -> pd.DataFrame:
    """``frame[(frame.ts >= start) & (frame.ts < end)]``; a slice (no mask over every row) when ts is sorted."""
    ts = frame["ts"]
    if ts.is_monotonic_increasing and not ts.hasnans:
        lo, hi = ts.searchsorted(pd.Timestamp(start), side="left"), ts.searchsorted(pd.Timestamp(end), side="left")
        return frame.iloc[lo:hi]
    return frame[(ts >= start) & (ts < end)]


def compute_states_range(frames: dict, chunks, *, capacity: pd.DataFrame | None, maintenance: pd.DataFrame | None,
                         meta: pd.DataFrame | None, sched_history: pd.DataFrame, baseline: pd.DataFrame | None,
                         runtime_history: pd.DataFrame | None, hw_corroborated: pd.DataFrame | None,
                         queue_events: pd.DataFrame | None = None,
                         moved: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`compute_states` of each ``(chunk_start, chunk_end, inventory)`` of ``chunks`` (consecutive, a day
    at most each), concatenated: ``(leaves, failures)``.

    ``frames``: the range's gpu_telemetry, node_telemetry, job_runtime_metrics and scheduler_events (events
    in the range only); ``sched_history``: scheduler events from the look-back before the range to its end;
    ``runtime_history``: job_runtime_metrics from FAILURE_LOOKBACK before the range to its end; ``capacity``,
    ``baseline``, ``hw_corroborated``: the range's rows; ``queue_events``: the submitted / started events from
    :data:`JOB_ATTRIBUTE_LOOKBACK` before the range to its end. Each chunk sees exactly what a call of
    compute_states on it alone would see; the job lookup and the queues' regions are derived from the history once.
    """
    history = _SchedHistory(meta, sched_history, queue_events)
    leaves_parts, fail_parts = [], []
    for c0, c1, inventory in chunks:  # bounded memory; results do not depend on the chunking
        sub = {k: _rows_between(v, c0, c1) for k, v in frames.items()}
        rt = runtime_history
        leaves, failures = compute_states(
            sub, start=c0, end=c1, capacity=capacity[capacity["date"].astype(str) == str(c0.date())],
            inventory=inventory, maintenance=maintenance, meta=meta,
            sched_history=sched_history[sched_history["ts"] < c1],
            baseline=baseline[(baseline["partition_start"] >= c0) & (baseline["partition_start"] < c1)],
            runtime_history=rt[(rt["ts"] >= c0 - FAILURE_LOOKBACK) & (rt["ts"] < c0)],
            hw_corroborated=hw_corroborated[(hw_corroborated["partition_start"] >= c0)
                                            & (hw_corroborated["partition_start"] < c1)],
            history=history, moved=_rows_between(moved, c0, c1) if moved is not None and len(moved) else None)
        leaves_parts.append(leaves)
        fail_parts.append(failures)
    leaves = pd.concat(leaves_parts, ignore_index=True)
    failures = pd.concat([f for f in fail_parts if len(f)] or fail_parts[:1], ignore_index=True)
    return leaves, failures

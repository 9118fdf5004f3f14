"""The goodput loss tree: every paid GPU-minute in exactly one state.

Pure pandas (no Dagster). Input: the source frames of a window (one 5-minute
partition or a range; everything is computed per minute and summed per
partition), plus the history it needs (scheduler events before the window, job
metadata of long-running jobs, the step-time baseline, the node inventory, the
capacity Finance pays for and the maintenance calendar).

State of a GPU-minute, by precedence:

1. ``no_data`` -- its region's collector is silent (under half of the region's
   expected GPUs report in that minute): missing data, never a GPU incident. This
   includes the region's paid capacity above its inventory (node ``unseen``).
2. ``maintenance`` -- unallocated (or not reporting) inside a planned window.
3. ``hw_unavailable`` -- a GPU-fault Xid / double-bit ECC error this minute; or
   unallocated on a node that is down / drained outside a window; or expected
   but not reporting while its region reports *and* something besides the
   absence points at the hardware (the node says it is degraded / drained / down,
   it reported a GPU fault in the last day, or it has been short of GPUs for
   15 minutes: :func:`hardware_corroboration`) -- otherwise the missing GPU is
   ``no_data`` (an exporter gap or a rejected file is missing data, not a broken GPU);
   or paid capacity above the inventory (node ``unseen``) while its region reports.
4. unallocated and healthy -> ``idle_blocked`` for the share of idle GPUs that
   pending jobs are waiting for (min(idle, pending GPUs) cluster-wide), the rest
   ``idle_no_demand``.
5. allocated:
   * ``failure_loss`` -- minutes of a job that failed (failed / node_fail /
     timeout) in the window, spent after its last durable checkpoint;
   * ``allocated_idle`` -- the GPU does no work (util < 5 % or SM activity < 0.05: a hung
     collective spins at ~100 % util with SM activity ~0);
   * ``allocated_unproductive`` -- busy but no training progress: a
     batch/distributed job reporting no training metrics at all (dummy load
     games utilization this way) or reporting minutes with 0 steps (a hang);
   * busy notebooks (interactive jobs report no steps) count as ``productive``;
   * progressing minutes earn ``productive`` = min(1, baseline / actual step
     time) x (1 - checkpoint share); the rest is ``slowdown_checkpoint`` and the
     step-time excess split over ``slowdown_data_io`` (loader wait over its
     baseline), ``slowdown_network`` (gradient sync over its baseline) and
     ``slowdown_compute`` (the remainder: throttling, faulty GPU, regressions).

Paid GPU-minutes per region x SKU are Finance's ``capacity_gpus`` x minutes (the
inventory seen where Finance has no cost row for the region x SKU); the states sum
to them exactly. GPUs seen beyond the capacity are an inventory discrepancy, not
paid (:func:`bound_to_capacity`).
"""

from typing import NamedTuple

import numpy as np
import pandas as pd

from gpu_health.codes import factorize, is_missing, unique_ints
from gpu_health.constants import FATAL_XIDS as XID_GPU_FAULT
from gpu_health.constants import (KERNEL_ACTIVE_SM, KERNEL_ACTIVE_UTIL_PCT, MINUTE, PARTITION, PARTITION_FREQ,
                                  PARTITION_MINUTES, SLOW_THROTTLE_BITS)
from gpu_health.timestamps import as_utc

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
LOSS_EXITS = frozenset({"failed", "node_fail", "timeout"})
# a job pending this long is held back, not being placed (a scheduler places a job within a cycle or two,
# ~30-60 s in Slurm): the one bar of the fragmentation KPI and of the scheduling detector
BLOCKED_WAIT = pd.Timedelta(minutes=3)
NO_DATA_COVERAGE = 0.5
# a failed job's lost work is read from its runtime rows of this span before the failure (the
# caller passes them as ``runtime_history``), so a range and its partitions agree
FAILURE_LOOKBACK = pd.Timedelta(hours=1)
# A job is instrumented ("reports") in a partition when it wrote a job_runtime_metrics row in this span before the
# partition's end: its busy minutes without a row are then start-up, a checkpoint or a collector gap of a training
# loop known to report (productive), not unmeasured work. The span is what the live 5-minute run sees of a job's
# rows (the FAILURE_LOOKBACK it reads before its partition): a day's run must not know that a job will report
# later in its day when the live run could not (a definition of the pipeline, not of any cluster's reporting
# rate: a loop writing less than once an hour counts as uninstrumented between its rows).
REPORTING_MEMORY = FAILURE_LOOKBACK
# the scheduler events a partition's run reads before its start (the backlog it knows of)
SCHED_LOOKBACK = pd.Timedelta(hours=6)
# A job's attributes (its job_metadata row, the queue of its first submitted / started event) are known to a
# partition when they were written in this span before the partition's start, or in the partition: what its live
# run reads (the steps read job metadata and placement events this far back), whatever range it is computed in.
JOB_ATTRIBUTE_LOOKBACK = pd.Timedelta(days=4)


def _minutes(start, end) -> pd.DatetimeIndex:
    return pd.date_range(pd.Timestamp(start), pd.Timestamp(end), freq="1min", inclusive="left")


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


def queue_table(sched: pd.DataFrame) -> pd.DataFrame:
    """One row per submitted job (index job_id): when it was submitted (``sub``), the GPUs it asked for, its
    queue, and when it left the queue (``left``: started, or ended without starting; NaT while it waits).

    The one derivation of queue state: the loss tree's idle_blocked and the scheduling detector both use it.
    """
    cols = ["sub", "gpus", "queue", "left"]
    if sched is None or sched.empty:
        return pd.DataFrame(columns=cols, index=pd.Index([], name="job_id"))
    agg = {"sub": ("ts", "min"), "gpus": ("gpus", "max")}
    if "queue" in sched.columns:
        agg["queue"] = ("queue", "first")
    # grouped by the job ids' codes (sorted as the ids sort; a missing id -1, dropped as groupby drops it): the
    # ids are hashed once for both group-bys (two days of events: 0.66 -> 0.2 s), the result is groupby's
    job, ids = factorize(sched["job_id"], sort=True)
    event = sched["event"]
    submitted = (event == "submitted").to_numpy(dtype=bool, na_value=False) & (job >= 0)
    leaving = event.isin(["started", "ended"]).to_numpy(dtype=bool) & (job >= 0)
    jobs = sched[submitted].groupby(job[submitted]).agg(**agg)
    jobs["left"] = sched["ts"][leaving].groupby(job[leaving]).min().reindex(jobs.index)
    jobs.index = pd.Index(np.asarray(ids, dtype=object)[jobs.index.to_numpy()], dtype=sched["job_id"].dtype,
                          name="job_id")
    return jobs.reindex(columns=cols)


def pending_gpus(sched: pd.DataFrame, minutes: pd.DatetimeIndex, groups: pd.Series | None = None) -> dict:
    """GPUs requested by jobs submitted but not yet started, at each minute's middle, as the minute's partition's
    own run sees them: a job submitted more than :data:`SCHED_LOOKBACK` before the partition's start is not
    among its events, so it no longer counts (whatever a longer run read).

    Returns ``{group: array over minutes}``; ``groups`` maps job_id -> group (e.g. its
    queue's region); jobs without a group are under ``None``.
    """
    if sched is None or sched.empty or not len(minutes):
        return {None: np.zeros(len(minutes))}
    return _pending_sweep(queue_table(sched), minutes, groups)


def _pending_sweep(jobs: pd.DataFrame, minutes: pd.DatetimeIndex, groups: pd.Series | None) -> dict:
    """:func:`pending_gpus` given the queue table (sub, gpus, left per job)."""
    jobs["group"] = jobs.index.map(groups).astype(object) if groups is not None else None
    mid = (minutes + pd.Timedelta(seconds=30)).values
    out = {}
    for group, grp in jobs.groupby("group", dropna=False):
        s = grp["sub"].values
        left = grp["left"].fillna(pd.Timestamp.max.tz_localize("UTC")).values
        # the first partition whose own run no longer reads the submission (its events start SCHED_LOOKBACK back)
        unseen = (pd.DatetimeIndex(s) + SCHED_LOOKBACK).floor(PARTITION) + PARTITION
        left = np.minimum(left, unseen.values)
        g = grp["gpus"].to_numpy(dtype=float)
        # sweep: +gpus at submit, -gpus when it starts (or ends without starting)
        times = np.concatenate([s, left])
        deltas = np.concatenate([g, -g])
        order = np.argsort(times, kind="stable")
        times, deltas = times[order], np.cumsum(deltas[order])
        pos = np.searchsorted(times, mid, side="right") - 1
        out[None if pd.isna(group) else group] = np.where(pos >= 0, deltas[np.clip(pos, 0, None)], 0.0).clip(0)
    return out or {None: np.zeros(len(minutes))}


# a queue belongs to a region when this share of its placements is there (a queue spread over regions has none)
QUEUE_REGION_SHARE = 0.95


def first_node(node_ids: pd.Series, missing: str | None = None) -> pd.Series:
    """The first node of each comma-separated placement (``node_ids``), on the same index; a null placement gives
    ``missing``.

    What ``node_ids.astype(str).str.split(",").str[0]`` gives, split once per distinct placement: a day's events
    repeat a few thousand placements over hundreds of thousands of rows.
    """
    codes, uniques = pd.factorize(node_ids, use_na_sentinel=True)
    firsts = np.array([str(u).split(",", 1)[0] for u in uniques] + [missing], dtype=object)
    return pd.Series(firsts[codes], index=node_ids.index, name=node_ids.name, dtype=object)


def _placing(sched: pd.DataFrame) -> pd.DataFrame:
    """The scheduler events that place a job: started or ended, with nodes."""
    return sched[sched["event"].isin(["started", "ended"]) & sched["node_ids"].notna()]


def placement_events(sched: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """The scheduler events that place a job (:func:`_placing`) and each one's first node: what
    :func:`queue_regions` learns a queue's region from."""
    placed = _placing(sched)
    return placed, first_node(placed["node_ids"])


def queue_regions(sched: pd.DataFrame, node_region: dict) -> dict:
    """queue -> region when (nearly) all of the queue's placements in the history are in one region."""
    if sched is None or sched.empty:
        return {}
    placed, first = placement_events(sched)
    if placed.empty:
        return {}
    return _queue_regions_of(placed["queue"], first, node_region)


def _queue_regions_of(queue: pd.Series, first_node: pd.Series, node_region: dict) -> dict:
    """:func:`queue_regions` given each placement's queue and first node."""
    first = first_node.map(node_region)
    # a share of QUEUE_REGION_SHARE or more is the queue's largest: counts per (queue, region) over its total (what
    # pd.crosstab(normalize="index") divides, without building the table; pairs with a null are not counted)
    pairs = pd.DataFrame({"q": np.asarray(queue, dtype=object), "r": np.asarray(first, dtype=object)})
    counts = pairs.groupby(["q", "r"]).size()
    if counts.empty:
        return {}
    share = counts / counts.groupby(level="q").transform("sum")
    return {q: r for (q, r), v in share.items() if v >= QUEUE_REGION_SHARE}


def placements(sched: pd.DataFrame) -> pd.DataFrame:
    """Every placement of the scheduler events, one row per node: ts, queue, node_id (sorted by ts)."""
    cols = ["ts", "queue", "node_id"]
    if sched is None or sched.empty:
        return pd.DataFrame(columns=cols)
    placed = _placing(sched)
    # one row per node of each placement, in the placement's order (what str.split + explode give), each distinct
    # placement split once
    codes, uniques = pd.factorize(placed["node_ids"].astype(str))
    parts = [np.array(u.split(","), dtype=object) for u in uniques]
    sizes = np.array([len(x) for x in parts], dtype=np.int64)[codes]
    rows = np.repeat(np.arange(len(placed)), sizes)
    nodes = np.concatenate([parts[c] for c in codes]) if len(codes) else np.array([], dtype=object)
    # (the times as datetimes: to_numpy() of a tz-aware column boxes every value into a Timestamp)
    ts = pd.DatetimeIndex(placed["ts"].array.take(rows)).as_unit("ns")
    out = pd.DataFrame({"ts": ts, "queue": placed["queue"].astype(object).to_numpy()[rows], "node_id": nodes})
    out = out.astype({"queue": "category", "node_id": "category"})
    return out.sort_values("ts", kind="stable").reset_index(drop=True)[cols]


def queue_nodes(placed: pd.DataFrame) -> dict:
    """queue -> the nodes its jobs were placed on in ``placed`` (placements() of the history): a Slurm
    partition's / node pool's reach.

    A job waiting in a queue can only use GPUs on the nodes that queue places on; idle GPUs of another
    pool do not block it.
    """
    if placed is None or placed.empty:
        return {}
    pairs = placed[["queue", "node_id"]].drop_duplicates()
    return {q: frozenset(g.astype(object)) for q, g in pairs.groupby("queue", observed=True)["node_id"]}


def job_lookup(meta: pd.DataFrame, sched: pd.DataFrame) -> pd.DataFrame:
    """job_id -> team, workload_class, model_type, framework_version, queue ('unknown' when absent)."""
    cols = ["team", "workload_class", "model_type", "framework_version"]
    out = meta.drop_duplicates("job_id").set_index("job_id")[cols] if meta is not None and len(meta) else pd.DataFrame(columns=cols)
    if sched is not None and len(sched):
        # the queue a job was submitted to, from events before it ran (a later 'ended' event would make a
        # range know more than its partitions)
        placed = sched[sched["event"].isin(["submitted", "started"])].sort_values("ts", kind="stable")
        q = placed.drop_duplicates("job_id", keep="first").set_index("job_id")["queue"]
        out = out.join(q.rename("queue"), how="outer")
    else:
        out["queue"] = pd.NA
    return out.astype(object).where(out.notna(), "unknown")


def submitted_ns(meta: pd.DataFrame | None) -> pd.Series:
    """job_id (object) -> its metadata row's submission time in ns since the epoch (the row job_lookup reads)."""
    if meta is None or not len(meta):
        return pd.Series(np.zeros(0, np.int64), index=pd.Index([], dtype=object))
    first = meta.drop_duplicates("job_id")
    ns = pd.DatetimeIndex(as_utc(first["submitted_at"])).as_unit("ns").asi8
    return pd.Series(ns, index=pd.Index(np.asarray(first["job_id"], dtype=object)))


def _job_ns(values: pd.Series, job_uni: pd.Index) -> np.ndarray:
    """``values`` (:func:`submitted_ns`) per job of ``job_uni``; never: int64's maximum. (The lookup's hash
    table is built once per ``values``: a range's chunks share it.)"""
    never = np.full(len(job_uni), np.iinfo(np.int64).max, dtype=np.int64)
    if not len(values) or not len(job_uni):
        return never
    at = values.index.get_indexer(pd.Index(np.asarray(job_uni, dtype=object)))
    return np.where(at >= 0, values.to_numpy()[np.clip(at, 0, None)], never)


class QueueEvents(NamedTuple):
    """The submitted / started events that name jobs' queues, indexed once for a range: ``keys`` sorted, one per
    event, ``job code * width + (its second - base)``, ``queue`` its queue's code in ``queues``."""
    jobs: pd.Index
    keys: np.ndarray
    queue: np.ndarray
    queues: np.ndarray
    base: int
    width: int

    @classmethod
    def of(cls, events: pd.DataFrame | None) -> "QueueEvents":
        empty = cls(pd.Index([], dtype=object), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, object), 0, 1)
        if events is None or not len(events):
            return empty
        ev = events[events["event"].isin(["submitted", "started"]).to_numpy()]
        if not len(ev):
            return empty
        job, jobs = factorize(np.asarray(ev["job_id"], dtype=object))
        ns = ev["ts"].to_numpy(dtype="datetime64[ns]").view("int64")
        queue, queues = factorize(np.asarray(ev["queue"], dtype=object))  # (no queue: -1, 'unknown')
        order = np.lexsort((ns, job))  # by job, then time (stable: the first of equal times first)
        sec = np.floor_divide(ns[order], 10**9)
        base = int(sec.min())
        width = int(sec.max()) - base + 2
        return cls(pd.Index(np.asarray(jobs, dtype=object)), job[order].astype(np.int64) * width + (sec - base),
                   queue[order], np.asarray(queues, dtype=object), base, width)


def _row_attributes(start, t_idx, jj, job_uni, lookup, submitted: pd.Series,
                    queue_events: "pd.DataFrame | QueueEvents | None"):
    """Each allocated row's job attributes as its partition's own run knows them: team, workload_class,
    model_type and framework_version when the job's metadata row was submitted in the
    :data:`JOB_ATTRIBUTE_LOOKBACK` before the partition's start or in it, the queue of the job's first submitted /
    started event in that span; 'unknown' otherwise. A day's run reads the events of the whole day and more; it
    must not name a queue the partition's live run could not.

    ``t_idx``, ``jj``: minute (since ``start``) and job code of each row, every row with a job.
    Returns (row attribute codes + 1; the attribute tuples; metadata known per row).
    """
    n = len(t_idx)
    if not n or not len(job_uni):
        return np.zeros(n, np.int64), [], np.zeros(n, bool)
    minute = MINUTE.value
    p_start = pd.Timestamp(start).as_unit("ns").value + (t_idx // PARTITION_MINUTES) * PARTITION.value
    p_end, lo = p_start + PARTITION.value, p_start - JOB_ATTRIBUTE_LOOKBACK.value
    meta_ns = _job_ns(submitted, job_uni)[jj]
    meta_known = (meta_ns >= lo) & (meta_ns < p_end)

    queue_code, queue_uni = np.full(n, -1, dtype=np.int64), np.zeros(0, dtype=object)
    events = queue_events if isinstance(queue_events, QueueEvents) else QueueEvents.of(queue_events)
    if len(events.keys):
        queue_uni = events.queues
        rj = events.jobs.get_indexer(pd.Index(np.asarray(job_uni, dtype=object)))[jj]  # -1: no event
        width = events.width
        first = np.clip(lo // 10**9 - events.base, 0, width - 1)  # (seconds since base; the bounds are whole
        last = np.clip(p_end // 10**9 - events.base, 0, width)  # seconds: flooring the events' is exact)
        at = np.searchsorted(events.keys, rj * width + first, side="left")  # the job's first event from ``lo`` on
        hit = events.keys[np.clip(at, 0, len(events.keys) - 1)]
        found = (rj >= 0) & (at < len(events.keys)) & (hit // width == rj) & (hit % width < last)
        queue_code = np.where(found, events.queue[np.clip(at, 0, len(events.keys) - 1)], -1)

    # the distinct (job, metadata known, queue) of the rows, each named once
    Q = len(queue_uni) + 1
    combo = (jj.astype(np.int64) * 2 + meta_known) * Q + (queue_code + 1)
    uniq, inverse = unique_ints(combo, return_inverse=True)
    cj, known, cq = uniq // (2 * Q), (uniq // Q) % 2 == 1, uniq % Q - 1
    meta_cols = ["team", "workload_class", "model_type", "framework_version"]
    names = {c: np.where(known, lookup[c].to_numpy(dtype=object)[cj], "unknown") for c in meta_cols}
    names["queue"] = np.where(cq >= 0, np.concatenate([np.asarray(queue_uni, dtype=object), ["unknown"]])[cq],
                              "unknown")
    codes, attr_uni = pd.factorize(pd.MultiIndex.from_frame(pd.DataFrame(names).astype(object)))
    return codes[inverse.ravel()] + 1, attr_uni, meta_known


def _reports_at_partition_end(start, t_idx, jj, runtime, runtime_history, job_uni, M,
                              runtime_codes: tuple | None = None) -> np.ndarray:
    """Per row: its job wrote a job_runtime_metrics row in the :data:`REPORTING_MEMORY` before the row's
    partition ended (the window's rows and ``runtime_history``, the rows before ``start``). ``runtime_codes``:
    ``runtime``'s (minute since ``start``, job code) when the caller has them already."""
    n = len(t_idx)
    if not n or not len(job_uni):
        return np.zeros(n, bool)
    memory = int(REPORTING_MEMORY / MINUTE)

    def codes(f):
        if f is runtime and runtime_codes is not None:
            return runtime_codes
        return ((f["ts"] - pd.Timestamp(start)) // MINUTE).to_numpy(np.int64), _codes(f["job_id"], job_uni)

    parts = [codes(f) for f in (runtime_history, runtime) if f is not None and len(f)]
    if not parts:
        return np.zeros(n, bool)
    ts, job = np.concatenate([t for t, _ in parts]), np.concatenate([j for _, j in parts])
    ok = (job >= 0) & (ts >= -memory) & (ts < M)
    p_end = (t_idx // PARTITION_MINUTES + 1) * PARTITION_MINUTES  # minutes since start
    width = max(M, int(p_end.max())) + memory + 1
    keys = np.unique(job[ok] * width + (ts[ok] + memory))  # (job, minute + memory) with a row, sorted
    at = np.searchsorted(keys, jj * width + (p_end + memory), side="left") - 1  # the job's last row before p_end
    last = keys[np.clip(at, 0, None)] if len(keys) else np.zeros(n, np.int64)
    return (at >= 0) & (last // width == jj) & (last % width >= p_end)  # (minute + memory >= p_end - memory)


def _codes(values, universe: pd.Index) -> np.ndarray:
    """Each value's position in ``universe`` (-1: not in it). The distinct values are looked up, not every row
    (codes.factorize hashes a text column's shared objects once: a piece's 576,000 node or job ids of GPU rows)."""
    values = np.asarray(values, dtype=object)
    codes, distinct = factorize(values)
    out = np.append(universe.get_indexer(pd.Index(distinct, dtype=object)), -1)[codes]  # (code -1: missing)
    if universe.hasnans and (codes < 0).any():  # a missing value the universe holds: as get_indexer finds it
        out[codes < 0] = universe.get_indexer(pd.Index(values[codes < 0]))
    return out


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
    gpu_health.steps.compute.moved_gpus); the old name does not expect them in those minutes.

    Implementation: every join is on integer codes (minute x node, minute x job,
    partition x signature) and the final aggregation is one ``np.unique`` over a
    packed key and a ``bincount`` per state, so the cost is a few array passes
    per GPU-minute.
    """
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    gpu = frames["gpu_telemetry"]
    node = frames["node_telemetry"]
    runtime = frames["job_runtime_metrics"]
    minutes = _minutes(start, end)
    M = len(minutes)
    n = len(gpu)
    t_idx = ((gpu["ts"] - start) // MINUTE).to_numpy(np.int64) if n else np.zeros(0, np.int64)

    # --- nodes: health and driver per (minute, node) -----------------------------------------
    node_uni = pd.Index(pd.unique(np.concatenate([
        np.asarray(inventory["node_id"], dtype=object), np.asarray(gpu["node_id"], dtype=object),
        np.asarray(node["node_id"], dtype=object)])))
    Nn = max(len(node_uni), 1)
    g_node = _codes(gpu["node_id"], node_uni)
    health_codes = {"ok": 0, "degraded": 1, "down": 2, "drained": 3}
    health_arr = np.zeros(M * Nn, dtype=np.int8)
    drv_uni = pd.Index(pd.unique(np.concatenate([np.asarray(node["driver_version"], dtype=object),
                                                 np.array(["unknown"], dtype=object)])))
    drv_arr = np.full(M * Nn, -1, dtype=np.int64)
    node_last_drv = np.full(Nn, drv_uni.get_loc("unknown"), dtype=np.int64)
    if len(node):
        nt = ((node["ts"] - start) // MINUTE).to_numpy(np.int64)
        nn = _codes(node["node_id"], node_uni)
        ok = (nt >= 0) & (nt < M)
        nk = nt[ok] * Nn + nn[ok]
        health_arr[nk] = node["health"].astype(object).map(health_codes).fillna(0).to_numpy(np.int8)[ok]
        dcode = _codes(node["driver_version"], drv_uni)
        drv_arr[nk] = dcode[ok]
        order = np.argsort(nt, kind="stable")
        node_last_drv[nn[order]] = dcode[order]  # last driver seen per node in the window
    rk = t_idx * Nn + g_node
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

    in_maint = maintenance_mask(gpu["ts"], gpu["region"], gpu["node_id"], maintenance) if n else np.zeros(0, bool)
    fatal = gpu["xid"].isin(XID_GPU_FAULT).to_numpy() | (gpu["ecc_dbe_delta"].fillna(0).to_numpy() > 0)
    has_job = ~is_missing(gpu["job_id"])
    sm = gpu["sm_active"].to_numpy(dtype=float, na_value=np.nan)
    busy = (gpu["gpu_util_pct"].to_numpy(dtype=float) >= KERNEL_ACTIVE_UTIL_PCT) & ~(np.nan_to_num(sm, nan=1.0) < KERNEL_ACTIVE_SM)

    # --- jobs: attributes, GPUs, runtime metrics per (minute, job) -----------------------------
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
    pairs, pair_of_row = unique_ints((t_idx[rows] // PARTITION_MINUTES) * Nj + jj[rows], return_inverse=True)
    pair_of_row = pair_of_row.ravel()
    pair_t, pair_j = (pairs // Nj) * PARTITION_MINUTES, pairs % Nj
    pair_attr, attr_uni, pair_known = _row_attributes(start, pair_t, pair_j, job_uni, lookup, submitted, queue_events)
    row_attr, meta_known = np.zeros(n, np.int64), np.zeros(n, bool)
    row_attr[rows], meta_known[rows] = pair_attr[pair_of_row], pair_known[pair_of_row]
    job_interactive = (lookup["workload_class"] == "interactive").to_numpy() if len(job_uni) else np.zeros(0, bool)
    jk = t_idx * Nj + jj  # (minute, job) key of each row
    row_gpus = np.zeros(n, np.int64)  # GPUs the row's job holds in the row's minute
    if n and has_job.any():
        _, inv_g, cnt_g = unique_ints(jk[has_job], return_inverse=True, return_counts=True)
        row_gpus[has_job] = cnt_g[inv_g.ravel()]

    # runtime metrics per (minute, job) key (sorted keys; a key's last runtime row, as an assignment keeps it)
    rt_keys = np.zeros(0, np.int64)
    rt_vals: dict[str, np.ndarray] = {}
    rt_codes = None  # (minute, job code) of each runtime row, for the reporting memory too
    if len(runtime):
        rt_t = ((runtime["ts"] - start) // MINUTE).to_numpy(np.int64)
        rt_j = _codes(runtime["job_id"], job_uni)
        rt_codes = (rt_t, rt_j)
        ok = (rt_t >= 0) & (rt_t < M) & (rt_j >= 0)
        kk = rt_t[ok] * Nj + rt_j[ok]
        rt_keys, first_rev = unique_ints(kk[::-1], return_index=True)
        last = len(kk) - 1 - first_rev
        rt_vals["steps"] = runtime["steps"].to_numpy(dtype=float)[ok][last]
        for col in ("step_time_s", "data_loader_time_s", "grad_sync_time_s", "checkpoint_time_s"):
            rt_vals[col] = runtime[col].to_numpy(dtype=float, na_value=np.nan)[ok][last]
    at = np.clip(np.searchsorted(rt_keys, jk), 0, max(len(rt_keys) - 1, 0))
    found = has_job & (rt_keys[at] == jk) if len(rt_keys) else np.zeros(n, dtype=bool)

    def per_row(col):
        return np.where(found, rt_vals[col][at], np.nan) if len(rt_keys) else np.full(n, np.nan)

    steps = per_row("steps")
    has_row = ~np.isnan(steps)
    reports = np.zeros(n, bool)
    reports[rows] = _reports_at_partition_end(start, pair_t, pair_j, runtime, runtime_history, job_uni, M,
                                              rt_codes)[pair_of_row]
    interactive = has_job & meta_known & job_interactive[jj] if n and len(job_uni) else np.zeros(n, bool)

    # failures: minutes after the last checkpoint of jobs that failed in the window
    sched_w = frames["scheduler_events"]
    if runtime_history is None or runtime_history.empty:
        rt_fail = runtime
    else:  # only the runtime rows of jobs ending in the window are read (_failures): keep those, in order
        ending = (sched_w.loc[sched_w["event"] == "ended", "job_id"] if sched_w is not None and len(sched_w)
                  else pd.Series([], dtype=object))
        rt_fail = pd.concat([runtime_history[runtime_history["job_id"].isin(ending).to_numpy()],
                             runtime[runtime["job_id"].isin(ending).to_numpy()]])
    failures = _failures(frames["scheduler_events"], rt_fail, gpu, start, end, history=sched_history)
    lost = np.zeros(n, dtype=bool)
    if len(failures) and n:
        fj = _codes(failures["job_id"], job_uni)
        okf = fj >= 0
        lf = np.full(Nj, np.iinfo(np.int64).max)
        fa = np.full(Nj, np.iinfo(np.int64).min)
        lf[fj[okf]] = ((failures["lost_from"] - start) // MINUTE).to_numpy(np.int64)[okf]
        fa[fj[okf]] = ((failures["failed_at"] - start) // MINUTE).to_numpy(np.int64)[okf]
        # only the failure's own partition is failure_loss here: the 5-minute series cannot know a failure
        # before it happens (and a range run must equal partition runs); the daily settlement moves the rest
        lost = has_job & (t_idx >= lf[jj]) & (t_idx <= fa[jj]) & (t_idx // PARTITION_MINUTES == fa[jj] // PARTITION_MINUTES)

    # --- efficiency against the baseline (per partition x signature) ---------------------------
    with np.errstate(invalid="ignore"):  # NaN step times (no row this minute) propagate by design
        st, loader, sync, ckt = (per_row(c) for c in ("step_time_s", "data_loader_time_s", "grad_sync_time_s",
                                                      "checkpoint_time_s"))
        base, base_ld, base_sy = _baseline_arrays(baseline, start, t_idx, g_job, lookup, job_uni, gpu["sku"], row_gpus)
        if (has_job & ~meta_known).any():  # the job's model type not known to the partition: no baseline
            base, base_ld, base_sy = (np.where(has_job & ~meta_known, np.nan, b) for b in (base, base_ld, base_sy))
    progress = _progress_split(st, loader, sync, ckt, base, base_ld, base_sy)

    # --- every reporting GPU-minute in its state (the precedence rule: reported_state_weights) ----
    def blocked(idle):
        # idle split by pending demand: a queue's pending GPUs are matched with idle GPUs of its region
        # (queues map to a region by where their jobs run); pending jobs of shared queues with any idle GPU
        return _blocked_fraction(idle, t_idx, node_region[g_node] if n else np.zeros(0, dtype=object), minutes,
                                 sched_history, node_region, node_uni, history=history, end=end)

    W = reported_state_weights(has_job=has_job, in_maint=in_maint, fatal=fatal, health=health, lost=lost, busy=busy,
                               reports=reports, interactive=interactive, has_row=has_row, steps=steps,
                               progress=progress, blocked_fraction=blocked)

    # --- aggregate: one packed key per (partition, node, driver, job attributes) ----------------
    NA = len(attr_uni) + 1
    ND = len(drv_uni) + 1
    key = ((t_idx // PARTITION_MINUTES) * Nn + g_node) * ND * NA + (drv + 1) * NA + row_attr
    leaves = _aggregate(key, W, start, Nn, ND, NA, node_uni, node_region, node_sku, drv_uni, attr_uni)
    corroborated = None
    if hw_corroborated is not None:
        corroborated = health_arr.reshape(M, Nn) >= 1  # the node's own agent: degraded, down or drained
        part_fault = np.zeros((max(-(-M // PARTITION_MINUTES), 1), Nn), dtype=bool)
        if n and fatal.any():
            part_fault[t_idx[fatal] // PARTITION_MINUTES, g_node[fatal]] = True
        if len(hw_corroborated):
            pc = ((hw_corroborated["partition_start"] - start) // PARTITION).to_numpy(np.int64)
            nc = _codes(hw_corroborated["node_id"], node_uni)
            ok_c = (pc >= 0) & (pc < len(part_fault)) & (nc >= 0)
            part_fault[pc[ok_c], nc[ok_c]] = True
        corroborated |= np.repeat(part_fault, PARTITION_MINUTES, axis=0)[:M]
    moved_m = None  # minutes x nodes: GPUs of the node's inventory reporting under another name
    if moved is not None and len(moved):
        mt = ((moved["ts"] - start) // MINUTE).to_numpy(np.int64)
        mn = _codes(moved["node_id"], node_uni)
        ok = (mt >= 0) & (mt < M) & (mn >= 0)
        if ok.any():
            moved_m = np.bincount(mt[ok] * Nn + mn[ok], minlength=M * Nn).reshape(M, Nn).astype(float)
    missing = _missing_minutes(t_idx, g_node, minutes, node_uni, node_region, node_sku, node_last_drv, drv_uni,
                               capacity, inventory, maintenance, corroborated, moved_m)
    leaves, missing = bound_to_capacity(leaves, missing, capacity, minutes)
    leaves = pd.concat([x for x in (leaves, missing) if len(x)], ignore_index=True) if len(leaves) or len(missing) else leaves
    leaves = (leaves.groupby(["partition_start"] + LEAF_DIMS + ["state"], observed=True, sort=False)["gpu_minutes"]
              .sum().reset_index())
    leaves = leaves[leaves["gpu_minutes"] > 1e-9].reset_index(drop=True)
    return leaves, failures


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


# --- the state-precedence rule (module docstring), in one place ---------------------------------------------
# A reporting GPU-minute (a gpu_telemetry row) is split over the states by reported_state_weights; an expected
# GPU-minute that did not report gets one state from missing_state. Everything else in this module computes the
# flags these two functions read.

DOWN_HEALTH = 2  # node health codes (compute_states): 0 ok, 1 degraded, 2 down, 3 drained; >= 2: unschedulable


def reported_state_weights(*, has_job, in_maint, fatal, health, lost, busy, reports, interactive, has_row, steps,
                           progress: dict, blocked_fraction) -> dict[str, np.ndarray]:
    """The share of each reporting GPU-minute (one row per GPU-minute, boolean / float arrays) in each state of
    :data:`STATES`; the shares of a row sum to 1.

    Precedence (first that applies): ``maintenance`` (unallocated inside a planned window) > ``hw_unavailable``
    (a fatal Xid / DBE this minute, or unallocated on a down / drained node outside a window) > unallocated:
    ``idle_blocked`` for the ``blocked_fraction(idle)`` share of the idle GPUs pending jobs wait for, the rest
    ``idle_no_demand`` > allocated: ``failure_loss`` (``lost``: after the last checkpoint of a job failing in
    its partition) > ``allocated_idle`` (not ``busy``) > ``allocated_unproductive`` (busy, no training
    metrics, not a notebook; or a minute with 0 steps that is not mostly checkpointing -- that one is
    ``slowdown_checkpoint``) > ``productive`` for a busy notebook or a reporting job between its rows, and for
    a progressing minute ``productive`` x efficiency, the rest split over the slowdowns (:func:`_progress_split`).
    """
    n = len(has_job)
    eff, ck, slow = progress["eff"], progress["ck"], progress["slow"]
    ex_io, ex_net, ex_cmp, excess, tot = (progress[k] for k in ("ex_io", "ex_net", "ex_cmp", "excess", "tot"))
    W = {s_: np.zeros(n) for s_ in STATES}
    unalloc = ~has_job
    maint = unalloc & in_maint
    W["maintenance"] = maint.astype(float)
    hw = (fatal | (unalloc & (health >= DOWN_HEALTH) & ~in_maint)) & ~maint
    W["hw_unavailable"] = hw.astype(float)
    idle = unalloc & ~hw & ~maint
    alloc = has_job & ~hw
    W["failure_loss"] = (alloc & lost).astype(float)
    live = alloc & ~lost
    W["allocated_idle"] = (live & ~busy).astype(float)
    working = live & busy
    W["allocated_unproductive"] = (working & ~reports & ~interactive).astype(float)
    zero_steps = working & has_row & (np.nan_to_num(steps) == 0)
    ck_minute = zero_steps & (ck >= 20 / 60)
    W["slowdown_checkpoint"] = ck_minute.astype(float)
    W["allocated_unproductive"] += (zero_steps & ~ck_minute).astype(float)
    nb = working & ~reports & interactive
    between = working & reports & ~has_row  # a reporting job with no row this minute (start-up / tear-down)
    prog = working & has_row & (np.nan_to_num(steps) > 0)
    W["productive"] = (nb | between).astype(float) + np.where(prog, eff * (1 - ck), 0.0)
    W["slowdown_checkpoint"] += np.where(prog, ck, 0.0)
    W["slowdown_data_io"] = np.where(prog, slow * ex_io / tot, 0.0)
    W["slowdown_network"] = np.where(prog, slow * ex_net / tot, 0.0)
    W["slowdown_compute"] = np.where(prog, slow * np.where(excess > 0, ex_cmp / tot, 1.0), 0.0)
    fb = blocked_fraction(idle)
    W["idle_blocked"] = np.where(idle, fb, 0.0)
    W["idle_no_demand"] = np.where(idle, 1 - fb, 0.0)
    return W


def missing_state(silent: np.ndarray, in_maint: np.ndarray, hw_corroborated: np.ndarray) -> np.ndarray:
    """The state of expected GPU-minutes that did not report: ``no_data`` while their region is silent, else
    ``maintenance`` inside a planned window, else ``hw_unavailable`` where something besides the absence points
    at the hardware (:func:`hardware_corroboration`), else ``no_data`` (missing is not broken)."""
    return np.where(silent, "no_data", np.where(in_maint, "maintenance",
                                                np.where(hw_corroborated, "hw_unavailable", "no_data")))


def _progress_split(st, loader, sync, ckt, base, base_ld, base_sy) -> dict[str, np.ndarray]:
    """Per row: efficiency against the baseline step time (``eff``), checkpoint share of the minute (``ck``),
    the slowdown share (``slow``) and the step-time excess over the baseline split into data loading, gradient
    sync and the compute remainder (``ex_io``, ``ex_net``, ``ex_cmp``; ``excess``; ``tot`` its guarded total)."""
    with np.errstate(invalid="ignore"):  # NaN step times (no row this minute) propagate by design
        base = np.where(np.isnan(base), st, base)  # no baseline yet: the job is its own baseline
        eff = np.clip(np.where(st > 0, base / st, 1.0), 0.0, 1.0)
        ck = np.clip(np.nan_to_num(ckt) / 60.0, 0.0, 1.0)
        excess = np.clip(np.nan_to_num(st - base), 0, None)
        ex_io = np.nan_to_num(np.clip(loader - np.where(np.isnan(base_ld), loader, base_ld), 0, None))
        ex_net = np.nan_to_num(np.clip(sync - np.where(np.isnan(base_sy), sync, base_sy), 0, None))
        scale = np.where(ex_io + ex_net > excess, excess / np.maximum(ex_io + ex_net, 1e-12), 1.0)
        ex_io, ex_net = ex_io * scale, ex_net * scale
        ex_cmp = np.clip(excess - ex_io - ex_net, 0, None)
        slow = (1 - eff) * (1 - ck)
        tot = np.maximum(excess, 1e-12)
    return {"eff": eff, "ck": ck, "slow": slow, "ex_io": ex_io, "ex_net": ex_net, "ex_cmp": ex_cmp,
            "excess": excess, "tot": tot}


class _SchedHistory:
    """What :func:`compute_states` derives from the scheduler history, computed once for a range of chunks:
    the job lookup and each placement's first node over the whole history, cut per chunk to the events
    before its end -- as the chunk's own ``sched_history`` (events before the chunk's end) would give them."""

    def __init__(self, meta: pd.DataFrame | None, sched: pd.DataFrame | None,
                 queue_events: pd.DataFrame | None = None):
        self.sched = sched
        self.lookup = job_lookup(meta, None)  # the metadata; queues come from queue_events, per partition
        self.submitted = submitted_ns(meta)
        self.queue_events = QueueEvents.of(sched if queue_events is None else queue_events)
        self.has_events = sched is not None and len(sched) > 0
        if self.has_events:
            placed, self.placed_first = placement_events(sched)
            self.placed_ts = placed["ts"]
            self.placed_queue = placed["queue"]
            # per job (integer codes): first row, submitted span, most GPUs asked, first start / end
            n = len(sched)
            self.ts = sched["ts"].to_numpy(dtype="datetime64[ns]").view("int64")
            self.codes, uni = factorize(np.asarray(sched["job_id"], dtype=object))
            self.jobs = pd.Index(np.asarray(uni, dtype=object))
            J = len(uni)
            big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
            known = self.codes >= 0
            self.first_row = np.full(J, n, dtype=np.int64)
            np.minimum.at(self.first_row, self.codes[known], np.flatnonzero(known))
            sub = (sched["event"] == "submitted").to_numpy() & known
            self.sub_min, self.sub_max = np.full(J, big), np.full(J, small)
            np.minimum.at(self.sub_min, self.codes[sub], self.ts[sub])
            np.maximum.at(self.sub_max, self.codes[sub], self.ts[sub])
            self.gpus = np.full(J, -np.inf)
            np.fmax.at(self.gpus, self.codes[sub], sched["gpus"].to_numpy(dtype=float, na_value=np.nan)[sub])
            self.gpus[np.isinf(self.gpus)] = np.nan  # (groupby's max of no value)
            go = sched["event"].isin(["started", "ended"]).to_numpy() & known
            self.left = np.full(J, big)
            np.minimum.at(self.left, self.codes[go], self.ts[go])
            self.queue = np.asarray(sched["queue"].astype(object), dtype=object)

    def pending_gpus(self, end, minutes: pd.DatetimeIndex, groups: pd.Series | None) -> dict:
        """pending_gpus(sched[ts < end], minutes, groups): a job submitted only before ``end`` is taken from the
        whole history; one also submitted (again) after it is re-derived from its events before ``end``."""
        if not self.has_events or not len(minutes):
            return {None: np.zeros(len(minutes))}
        end_ns = pd.Timestamp(end).as_unit("ns").value
        if not (self.ts < end_ns).any():
            return {None: np.zeros(len(minutes))}
        seen = self.sub_min < end_ns
        clean = seen & (self.sub_max < end_ns)
        idx = np.flatnonzero(clean)
        left = self.left[idx]
        table = pd.DataFrame({
            "sub": pd.DatetimeIndex(self.sub_min[idx].view("datetime64[ns]")).tz_localize("UTC"),
            "gpus": self.gpus[idx],
            "left": pd.DatetimeIndex(np.where(left < end_ns, left, np.iinfo(np.int64).min).view("datetime64[ns]")).tz_localize("UTC"),
        }, index=pd.Index(self.jobs[idx], name="job_id"))
        dirty = np.flatnonzero(seen & ~clean)
        if len(dirty):
            rows = np.isin(self.codes, dirty) & (self.ts < end_ns)
            again = queue_table(self.sched[rows])[["sub", "gpus", "left"]]
            table = pd.concat([table, again.astype({"gpus": float})])
        table = table.iloc[np.argsort(np.asarray(table.index, dtype=object), kind="stable")]
        return _pending_sweep(table, minutes, groups) if len(table) else {None: np.zeros(len(minutes))}

    def queue_groups(self, end, qmap: dict) -> pd.Series:
        """The group (region) of each job's queue -- the queue of its first event before ``end``, as
        ``sched[ts < end].drop_duplicates('job_id')`` reads it -- through ``qmap``."""
        end_ns = pd.Timestamp(end).as_unit("ns").value
        first = self.first_row
        ok = first < len(self.ts)
        on_time = np.zeros(len(first), dtype=bool)
        on_time[ok] = self.ts[first[ok]] < end_ns
        row = np.where(on_time, first, -1)
        late = np.flatnonzero(ok & ~on_time)
        if len(late):  # first row after ``end``: its first row before it, if any
            rows = np.flatnonzero(np.isin(self.codes, late) & (self.ts < end_ns))
            r2 = np.full(len(first), len(self.ts), dtype=np.int64)
            np.minimum.at(r2, self.codes[rows], rows)
            row[late] = np.where(r2[late] < len(self.ts), r2[late], -1)
        has = row >= 0
        q = pd.Series(self.queue[row[has]], index=pd.Index(self.jobs[has], name="job_id"), dtype=object)
        return q.map(qmap)

    def queue_regions(self, end, node_region: dict) -> dict:
        """queue_regions(sched[ts < end], node_region)."""
        if not self.has_events:
            return {}
        before = (self.placed_ts < end).to_numpy()
        if not before.any():
            return {}
        return _queue_regions_of(self.placed_queue[before], self.placed_first[before], node_region)


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


def _blocked_fraction(idle, t_idx, row_region, minutes, sched_history, node_region, node_uni, *,
                      history: "_SchedHistory | None" = None, end=None) -> np.ndarray:
    M = len(minutes)
    if not len(t_idx):
        return np.zeros(0)
    # regions sorted by name (as strings: np.unique(row_region.astype(str))), factorized once per distinct value
    codes, uni = factorize(np.asarray(row_region, dtype=object), use_na_sentinel=False)
    regions, uni_code = np.unique(np.asarray(uni, dtype=object).astype(str), return_inverse=True)
    r_code = uni_code.ravel()[codes]
    R = len(regions)
    idle_rm = np.bincount(r_code[idle] * M + t_idx[idle], minlength=R * M).reshape(R, M).astype(float)
    node_map = dict(zip(np.asarray(node_uni, dtype=object), node_region))
    qmap = history.queue_regions(end, node_map) if history is not None else queue_regions(sched_history, node_map)
    groups = None
    if history is not None:
        if sched_history is not None and len(sched_history) and qmap:
            groups = history.queue_groups(end, qmap)
        pend = history.pending_gpus(end, minutes, groups)
    else:
        if sched_history is not None and len(sched_history) and qmap:
            q = sched_history.drop_duplicates("job_id").set_index("job_id")["queue"].astype(object)
            groups = q.map(qmap)
        pend = pending_gpus(sched_history, minutes, groups)
    blocked = np.zeros((R, M))
    for i, r in enumerate(regions):
        blocked[i] = np.minimum(idle_rm[i], pend.get(r, np.zeros(M)))
    shared = pend.get(None, np.zeros(M))
    left = idle_rm - blocked
    total_left = left.sum(axis=0)
    extra = np.where(total_left > 0, np.minimum(total_left, shared) / np.maximum(total_left, 1e-9), 0.0)
    blocked += left * extra[None, :]
    frac = np.where(idle_rm > 0, blocked / np.maximum(idle_rm, 1e-9), 0.0)
    return frac[r_code, np.clip(t_idx, 0, max(M - 1, 0))]


def _baseline_arrays(baseline, start, t_idx, g_job, lookup, job_uni, sku, row_gpus):
    """Baseline step / loader / sync time per row, looked up by (partition, signature)."""
    n = len(t_idx)
    if baseline is None or baseline.empty or not n or not len(job_uni):
        return np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    b = baseline
    per_partition = "partition_start" in b.columns
    sig_b = pd.MultiIndex.from_arrays([np.asarray(b["model_type"], dtype=object), np.asarray(b["sku"], dtype=object),
                                       b["gpus"].to_numpy(np.int64)])
    job_model = np.asarray(lookup["model_type"], dtype=object)
    jj = np.clip(g_job, 0, None)
    sig_uni = sig_b.unique()
    sb = sig_uni.get_indexer(sig_b)
    if b[["model_type", "sku", "gpus"]].isna().any().any():  # null signature parts: match tuples as pandas does
        sig_r = pd.MultiIndex.from_arrays([np.where(g_job >= 0, job_model[jj], None), np.asarray(sku, dtype=object),
                                           np.asarray(row_gpus, dtype=np.int64)])
        sr = sig_uni.get_indexer(sig_r)
    else:  # each row's signature by level codes (model per job, SKU and GPUs per row): no MultiIndex of rows
        levels = [pd.Index(pd.unique(np.asarray(sig_uni.get_level_values(i), dtype=object if i < 2 else np.int64)))
                  for i in range(3)]
        width = [len(x) for x in levels]
        uk = [levels[i].get_indexer(np.asarray(sig_uni.get_level_values(i), dtype=object if i < 2 else np.int64))
              for i in range(3)]
        key_uni = pd.Index((uk[0].astype(np.int64) * width[1] + uk[1]) * width[2] + uk[2])
        m_row = levels[0].get_indexer(job_model)[jj]
        s_row = levels[1].get_indexer(np.asarray(sku, dtype=object))
        g_row = levels[2].get_indexer(np.asarray(row_gpus, dtype=np.int64))
        valid = (g_job >= 0) & (m_row >= 0) & (s_row >= 0) & (g_row >= 0)
        key_row = (m_row.astype(np.int64) * width[1] + s_row) * width[2] + g_row
        sr = np.where(valid, key_uni.get_indexer(np.where(valid, key_row, -1)), -1)
    P = int(t_idx.max() // PARTITION_MINUTES) + 1 if per_partition else 1
    pb = ((b["partition_start"] - start) // PARTITION).to_numpy(np.int64) if per_partition else np.zeros(len(b), np.int64)
    ok = (pb >= 0) & (pb < P) & (sb >= 0)
    S = len(sig_uni)
    pr = (t_idx // PARTITION_MINUTES) if per_partition else np.zeros(n, np.int64)
    idx = np.where(sr >= 0, pr * S + sr, 0)
    found = (sr >= 0) & (g_job >= 0)
    out = []
    for col in ("step_time_s", "data_loader_time_s", "grad_sync_time_s"):
        table = np.full(P * S, np.nan)
        table[pb[ok] * S + sb[ok]] = b[col].to_numpy(dtype=float, na_value=np.nan)[ok]
        out.append(np.where(found, table[idx], np.nan))
    return tuple(out)


def _aggregate(key, W, start, Nn, ND, NA, node_uni, node_region, node_sku, drv_uni, attr_uni) -> pd.DataFrame:
    cols = ["partition_start"] + LEAF_DIMS + ["state", "gpu_minutes"]
    if not len(key):
        return pd.DataFrame(columns=cols)
    uk, inv = unique_ints(key, return_inverse=True)
    p_idx = uk // (Nn * ND * NA)
    rest = uk % (Nn * ND * NA)
    node_c = rest // (ND * NA)
    drv_c = (rest % (ND * NA)) // NA - 1
    attr_c = rest % NA - 1
    attrs = np.array([tuple(a) for a in attr_uni] + [("none",) * 5], dtype=object).reshape(-1, 5)
    attr_rows = attrs[np.where(attr_c >= 0, attr_c, len(attrs) - 1)]
    base = pd.DataFrame({
        "partition_start": start + pd.to_timedelta(p_idx * PARTITION_MINUTES, unit="min"),
        "region": node_region[node_c], "node_id": np.asarray(node_uni, dtype=object)[node_c], "sku": node_sku[node_c],
        "driver_version": np.where(drv_c >= 0, np.asarray(drv_uni, dtype=object)[np.clip(drv_c, 0, None)], "unknown"),
        "team": attr_rows[:, 0], "workload_class": attr_rows[:, 1], "model_type": attr_rows[:, 2],
        "framework_version": attr_rows[:, 3], "queue": attr_rows[:, 4],
    })
    parts = []
    for state, w in W.items():
        sums = np.bincount(inv, weights=w, minlength=len(uk))
        m = sums > 1e-12
        if m.any():
            parts.append(base[m].assign(state=state, gpu_minutes=sums[m]))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)


# A GPU fault explains a node's missing GPUs for this long after it (a GPU off the bus stays off until a
# reset, hours later): the inventory's own look-back.
FAULT_MEMORY = pd.Timedelta(hours=24)
# A node short of GPUs in this many partitions in a row before this one is a GPU gone, not an exporter
# gap: a dcgm-exporter restart or a lost scrape clears within Prometheus' 5-minute staleness window, so
# 15 minutes (also the brief's detection bound) is three times the longest gap a healthy collector leaves.
GAP_PERSIST_PARTITIONS = 3


def hardware_corroboration(recent: pd.DataFrame, last_fault: pd.Series, usual: pd.Series, start, end) -> pd.DataFrame:
    """(partition_start, node_id) of the partitions in [start, end) in which a node's missing GPUs are hardware:
    the node reported a GPU fault (``fatal_gpus`` > 0) at or before the partition within FAULT_MEMORY, or it
    reported fewer than its ``usual`` GPUs in each of the GAP_PERSIST_PARTITIONS partitions before.

    ``recent``: node_inventory rows (partition_start, node_id, gpus_seen, fatal_gpus) of
    [start - GAP_PERSIST_PARTITIONS x 5 min, end); ``last_fault``: node -> its latest partition with a GPU fault
    before ``start`` (within FAULT_MEMORY); ``usual``: node -> the GPUs the inventory expects of it.

    Missing rows alone are missing data: exporters drop rows, contracts reject files, collectors restart.
    The node's own fault history or a gap that outlives any collector hiccup is the second witness.
    """
    cols = ["partition_start", "node_id"]
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    grid = pd.date_range(start - GAP_PERSIST_PARTITIONS * PARTITION, end, freq=PARTITION, inclusive="left")
    rows = recent[recent["partition_start"].isin(grid)] if recent is not None and len(recent) else None
    nodes = pd.Index(sorted(set(usual.index.astype(object)) | set(last_fault.index.astype(object))
                            | (set(rows["node_id"].astype(object)) if rows is not None else set())))
    if not len(nodes):
        return pd.DataFrame(columns=cols)
    seen = np.zeros((len(grid), len(nodes)))
    fault_at = np.full((len(grid), len(nodes)), False)
    if rows is not None and len(rows):
        t, n = grid.get_indexer(rows["partition_start"]), nodes.get_indexer(rows["node_id"].astype(object))
        seen[t, n] = rows["gpus_seen"].to_numpy(dtype=float)
        fault_at[t, n] = rows["fatal_gpus"].to_numpy(dtype=float) > 0
    expect = usual.reindex(nodes).fillna(0).to_numpy(dtype=float)[None, :]
    # a partition with no inventory row at all is unknown (before the warehouse's first partition, or a whole
    # outage: missing data), not a partition in which every node was short
    known = np.zeros(len(grid), dtype=bool)
    if rows is not None and len(rows):
        known[np.unique(grid.get_indexer(rows["partition_start"]))] = True
    short = (seen < expect) & known[:, None]
    persisted = np.ones_like(short)
    for k in range(1, GAP_PERSIST_PARTITIONS + 1):
        persisted &= np.vstack([np.zeros((k, len(nodes)), bool), short[:-k]])
    # a fault earlier in the grid, or before it (last_fault), within FAULT_MEMORY of the partition
    earlier = pd.to_datetime(last_fault.reindex(nodes), utc=True)
    before = np.where(earlier.notna().to_numpy(), ((earlier - grid[0]) // PARTITION).fillna(-10**9).to_numpy(dtype=float), -np.inf)
    span = int(FAULT_MEMORY / PARTITION)
    idx = np.arange(len(grid))[:, None]
    last_in_grid = pd.DataFrame(np.where(fault_at, idx, np.nan)).ffill().to_numpy()
    last_any = np.fmax(np.nan_to_num(last_in_grid, nan=-np.inf), before[None, :])
    recent_fault = (idx - last_any) <= span
    first = GAP_PERSIST_PARTITIONS
    tt, nn = np.nonzero((recent_fault | persisted)[first:])
    return pd.DataFrame({"partition_start": grid[first + tt], "node_id": np.asarray(nodes, dtype=object)[nn]}, columns=cols)


def _missing_minutes(t_idx, g_node, minutes, node_uni, node_region, node_sku, node_last_drv, drv_uni,
                     capacity, inventory: pd.DataFrame, maintenance, corroborated: np.ndarray | None = None,
                     moved: np.ndarray | None = None) -> pd.DataFrame:
    """Expected GPU-minutes that did not report: no_data, maintenance or hw_unavailable.

    Missing GPUs are hw_unavailable only where ``corroborated`` (minutes x nodes) says something besides
    their absence points at the hardware; otherwise they are no_data (missing is not broken).
    ``moved`` (minutes x nodes): GPUs of a node's inventory that report under another name (a renamed node):
    they are not missing from it, and the inventory's count of its region x SKU does not hold them twice."""
    M, Nn = len(minutes), len(node_uni)
    cols = ["partition_start"] + LEAF_DIMS + ["state", "gpu_minutes"]
    if not M or inventory.empty:
        return pd.DataFrame(columns=cols)
    reported = (np.bincount(t_idx * Nn + g_node, minlength=M * Nn).reshape(M, Nn).astype(float)
                if len(t_idx) else np.zeros((M, Nn)))
    expected = np.zeros(Nn)
    expected[_codes(inventory["node_id"], node_uni)] = inventory["gpus"].to_numpy(dtype=float)
    expected = np.maximum(expected[None, :], reported)  # more GPUs than the inventory knew: they are paid too
    credit = None  # minutes x nodes: the expected GPUs found reporting under another name (not expected here)
    if moved is not None:
        credit = np.minimum(moved, expected - reported)
        expected = expected - credit
    missing = expected - reported
    # a region is silent in a minute when under half of its expected GPUs report
    region_codes, region_uni = pd.factorize(pd.Series(node_region, dtype=object).fillna("unknown"))
    exp_r = np.stack([expected[:, region_codes == r].sum(axis=1) for r in range(len(region_uni))], axis=1)
    rep_r = np.stack([reported[:, region_codes == r].sum(axis=1) for r in range(len(region_uni))], axis=1)
    region_silent = rep_r < NO_DATA_COVERAGE * exp_r  # M x regions
    silent = region_silent[:, region_codes]  # M x Nn
    hw_ok = corroborated if corroborated is not None else np.ones((M, Nn), dtype=bool)
    tt, nn = np.nonzero(missing > 0)
    out = pd.DataFrame(columns=cols)
    if len(tt):
        names = np.asarray(node_uni, dtype=object)
        in_maint = maintenance_mask(pd.Series(minutes[tt]), pd.Series(node_region[nn]), pd.Series(names[nn]), maintenance)
        out = pd.DataFrame({
            "partition_start": minutes[tt].floor(PARTITION_FREQ), "region": node_region[nn], "node_id": names[nn],
            "sku": node_sku[nn], "driver_version": np.asarray(drv_uni, dtype=object)[node_last_drv[nn]],
            "team": "none", "workload_class": "none", "model_type": "none", "framework_version": "none", "queue": "none",
            "state": missing_state(silent[tt, nn], in_maint, hw_ok[tt, nn]),
            "gpu_minutes": missing[tt, nn],
        })
    # paid capacity above the inventory: GPUs nobody has heard from (node 'unseen'). Unavailable hardware while
    # their region reports; in the minutes their region is silent they are missing data like the rest of it
    # (a collector outage must not be charged to hardware). A region with no inventory is never silent.
    if capacity is not None and len(capacity):
        seen = inventory.groupby(["region", "sku"])["gpus"].sum()
        cap = capacity.groupby(["region", "sku"])["capacity_gpus"].max()
        gap = cap - seen.reindex(cap.index).fillna(0)
        silent_by_region = pd.DataFrame(region_silent, index=minutes, columns=region_uni)
        partition = minutes.floor(PARTITION_FREQ)
        rows = []
        if credit is not None and credit.any():  # a renamed node's GPUs are in the inventory under both names
            slice_of = pd.MultiIndex.from_arrays([pd.Series(node_region, dtype=object), pd.Series(node_sku, dtype=object)])
            twice = pd.DataFrame(credit.T, index=slice_of).groupby(level=[0, 1]).sum().T  # minutes x (region, sku)
        else:
            twice = None
        for (region, sku), k in gap.items():
            # unseen GPUs in each minute (whole numbers: summed per partition exactly as k x minutes)
            k_m = np.clip(k + twice[(region, sku)].to_numpy(), 0, None) if twice is not None and (region, sku) in twice \
                else np.full(len(minutes), max(float(k), 0.0))
            if not (k_m > 0).any():
                continue
            silent_m = (silent_by_region[region].to_numpy() if region in silent_by_region.columns
                        else np.zeros(len(minutes), dtype=bool))
            per_part = pd.DataFrame({"no_data": np.where(silent_m, k_m, 0.0),
                                     "hw_unavailable": np.where(silent_m, 0.0, k_m)}).groupby(partition).sum()
            for p, n_silent, n_reporting in per_part.itertuples():
                for state, n in (("no_data", n_silent), ("hw_unavailable", n_reporting)):
                    if n:
                        rows.append({"partition_start": p, "region": region, "node_id": "unseen", "sku": sku,
                                     "driver_version": "unknown", "team": "none", "workload_class": "none",
                                     "model_type": "none", "framework_version": "none", "queue": "none",
                                     "state": state, "gpu_minutes": float(n)})
        if rows:
            out = pd.concat([x for x in (out, pd.DataFrame(rows)) if len(x)], ignore_index=True)
    return out


def _failures(sched: pd.DataFrame, runtime: pd.DataFrame, g: pd.DataFrame, start, end,
              history: pd.DataFrame | None = None) -> pd.DataFrame:
    """Jobs that failed in the window and the work they threw away.

    Lost work = steps since the last durable checkpoint (``last_step -
    last_checkpoint_step`` of the job's last runtime row) at its median step time
    over the :data:`FAILURE_LOOKBACK` before the failure; a job with no training
    metrics loses everything since it started (its 'started' event in ``history``).
    Only the job's own rows in that span are used, so the answer does not depend on
    the window (given the lookback).
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
    events = history if history is not None and len(history) else sched
    # (only the ended jobs' events are grouped: the look-back holds every job's)
    started = events[(events["event"] == "started").to_numpy() & events["job_id"].isin(ended.index).to_numpy()]
    starts = started.groupby("job_id")["ts"].max().reindex(ended.index)
    rt = runtime[runtime["job_id"].isin(ended.index)]
    rt = rt[rt["ts"] >= rt["job_id"].map(failed_at - FAILURE_LOOKBACK)]
    last = (rt.sort_values("ts").groupby("job_id")
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
    own_partition = failed_at.dt.floor(PARTITION_FREQ)
    in_win = ((failed_at - np.maximum(lost_from, own_partition)) / MINUTE).clip(lower=0) + 1
    out = pd.DataFrame({
        "failed_at": failed_at, "exit_state": ended["exit_state"], "reason": ended["reason"],
        "lost_from": pd.to_datetime(lost_from, utc=True), "gpus": gpus,
        "lost_gpu_minutes": total_min * gpus, "lost_in_window": in_win * gpus,  # in the failure's own partition
    })
    return out.rename_axis("job_id").reset_index()


def enrich_failures(failures: pd.DataFrame, gpu: pd.DataFrame, meta: pd.DataFrame, sched: pd.DataFrame,
                    inventory: pd.DataFrame | None = None) -> pd.DataFrame:
    """The ``job_failures`` rows: :func:`compute_states`' failures with their partition, and the job's region
    and SKU (its last GPU row in ``gpu``; else the first node of its 'ended' event in ``sched``, placed by
    ``inventory``), team and workload class (``meta``); ``'unknown'`` where nothing says.

    Only the failed jobs' GPU rows are sorted and grouped (the rest of the window's rows cannot place them).
    """
    if failures.empty:
        return failures.assign(partition_start=pd.Series(dtype="datetime64[ns, UTC]"), region=[], sku=[], team=[], workload_class=[])
    # the GPU rows of failed jobs, judged per distinct job (the codes' -1, no job, indexes the appended False)
    codes, jobs = factorize(gpu["job_id"])
    failed = np.append(pd.Index(np.asarray(jobs, dtype=object)).isin(failures["job_id"]), False)
    mine = gpu[failed[codes]]
    place = mine.sort_values("ts").groupby("job_id").agg(region=("region", "last"), sku=("sku", "last"))
    if inventory is not None and len(inventory):
        # a job that failed early in a partition may have no GPU rows in it: its 'ended' event names its nodes
        ended = sched[(sched["event"] == "ended") & sched["job_id"].isin(failures["job_id"]) & sched["node_ids"].notna()]
        first = first_node(ended.drop_duplicates("job_id", keep="last").set_index("job_id")["node_ids"])
        inv = inventory.drop_duplicates("node_id").set_index("node_id")
        by_event = pd.DataFrame({"region": first.map(inv["region"]), "sku": first.map(inv["sku"])})
        place = place.combine_first(by_event.dropna(how="all")) if len(place) else by_event
    m = meta.drop_duplicates("job_id").set_index("job_id") if len(meta) else pd.DataFrame(columns=["team", "workload_class"])
    f = failures.copy()
    f["partition_start"] = f["failed_at"].dt.floor(PARTITION_FREQ)
    for col, src in (("region", place), ("sku", place), ("team", m), ("workload_class", m)):
        f[col] = f["job_id"].map(src[col]).astype(object).fillna("unknown") if col in src else "unknown"
    f["reason"] = f["reason"].astype(object)
    return f


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

"""What the detectors read for one partition (:class:`PartitionContext`), what a range of partitions shares
(:class:`RangePrep`, :func:`prepare_range`), and the derived views of a partition's frames that several detector
families read: computed once per partition (``ctx.memo``) or once per range (``ctx.prepared``), never per detector.

Pure pandas. The detectors themselves are the modules of :mod:`gpu_health.diagnosis.detectors`.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpu_health.codes import factorize, refactorize
from gpu_health.constants import XID_GPU_FAULT
from gpu_health.diagnosis.convergence import loss_arrays
from gpu_health.metrics.device import device_idle, low_power, reference_power
from gpu_health.metrics.goodput import QUEUE_REGION_SHARE, maintenance_mask, placement_events, queue_regions, queue_table

# one missing minute is one lost scrape; two in a partition is a gap worth a look
MIN_MISSING_MINUTES = 2
# a change is judged for 6 hours (a rolling upgrade of a region completes within hours)
DEPLOY_LOOKBACK = pd.Timedelta(hours=6)


@dataclass
class RangePrep:
    """What the detectors of a range of partitions share, computed once per range (``prepare_range``)
    instead of once per partition: the job table as arrays sorted by submit time (a partition's jobs are
    one slice of it), and the first job_metadata row of each job (the team and class lookup)."""

    job_lookback: pd.Timedelta
    jobs: dict              # _job_arrays() of job_table(), sorted by submit time
    meta_first: pd.DataFrame  # job_metadata: the first row per job_id, indexed by job_id
    meta: pd.DataFrame | None = None  # the job_metadata frame itself (positions of meta_rows())
    lookups: dict = field(default_factory=dict, repr=False)  # column -> {job_id: value} of meta_first
    meta_index: dict | None = field(default=None, repr=False)  # job_id -> positions of its rows in meta
    windows: dict = field(default_factory=dict, repr=False)  # name -> (frame, ts as int64 ns, ts sorted)
    per_inventory: dict = field(default_factory=dict, repr=False)  # name -> (shared frame, derived value): _per_frame
    rollouts: dict = field(default_factory=dict, repr=False)  # change events -> (inventory, _rollout_groups() rows as tuples)
    # job_runtime_metrics of the convergence look-back of the whole range as convergence.LossArrays: a context
    # carrying it reads its loss window (CONVERGENCE_LOOKBACK up to its end) from it, not from loss_history
    loss: "object | None" = field(default=None, repr=False)
    # the placements queue_regions() learns from, as arrays sorted by time: (ts ns, queue code, region code, number
    # of queues, region names); a partition's jobs take their queue's region from the placements it could have
    # seen (regions_as_of; the jobs' queue codes are jobs["queue_code"])
    placed: tuple | None = field(default=None, repr=False)
    # the range's GPU rows (the frame the contexts' ``gpu`` slices are cut from, with their ``gpu_rows``):
    # column -> (pd.factorize codes of the whole frame, its uniques), so a partition refactorizes integers
    # (_gpu_codes) instead of hashing its node, region, job and GPU names anew
    gpu_codes: dict = field(default_factory=dict, repr=False)
    # the range's GPU rows' timestamps (int64 ns; None: no GPU rows given) and what is derived from the whole range
    # once, not per partition (_range_presence, _range_fault_ends)
    gpu_ts: np.ndarray | None = field(default=None, repr=False)
    derived: dict = field(default_factory=dict, repr=False)

    def jobs_between(self, lo: pd.Timestamp, hi: pd.Timestamp) -> dict:
        """The jobs submitted in [lo, hi), a job that left the queue at hi or later still waiting (the table
        as known at hi: jobs_as_of)."""
        sub = self.jobs["sub"]
        i, k = np.searchsorted(sub, pd.Timestamp(lo).value, "left"), np.searchsorted(sub, pd.Timestamp(hi).value, "left")
        out = {c: v[i:k] for c, v in self.jobs.items()}
        out["left"] = np.where(out["left"] >= pd.Timestamp(hi).value, _NEVER, out["left"])
        return out

    def regions_as_of(self, lo: pd.Timestamp, hi: pd.Timestamp, queue_codes: np.ndarray) -> np.ndarray | None:
        """The region of each job (its ``queue_code``, jobs_between's) as queue_regions() reads it from the
        placements in [lo, hi) (None where it names none); None when the range carries no placements (then
        job_table's regions stand)."""
        if self.placed is None:
            return None
        ts, q, r, n_queues, regions = self.placed
        n_regions = max(len(regions), 1)
        i, k = np.searchsorted(ts, pd.Timestamp(lo).value, "left"), np.searchsorted(ts, pd.Timestamp(hi).value, "left")
        counts = np.bincount(q[i:k] * n_regions + r[i:k], minlength=n_queues * n_regions).reshape(n_queues, n_regions)
        total = counts.sum(axis=1)
        # queue_regions' rule: the region holding QUEUE_REGION_SHARE or more of the queue's placements
        best = counts.argmax(axis=1)
        named = (total > 0) & (counts.max(axis=1) >= QUEUE_REGION_SHARE * total)
        region_of = np.append(np.where(named, best, -1), -1)  # (a code of -1: a queue never placed in the range)
        code = region_of[queue_codes]
        return np.where(code >= 0, np.append(regions, None)[code], None)

    def between(self, name: str, lo: pd.Timestamp | None, hi: pd.Timestamp) -> pd.DataFrame:
        """The rows of the range frame ``name`` (prepare_range's ``windows``) with lo <= ts < hi (no lower bound
        for lo=None), in their order: a slice of a time-sorted frame, else a mask."""
        frame, ts, ordered = self.windows[name]
        lo_ns = _NAT + 1 if lo is None else pd.Timestamp(lo).value
        hi_ns = pd.Timestamp(hi).value
        if ordered:
            return frame.iloc[np.searchsorted(ts, lo_ns, "left"):np.searchsorted(ts, hi_ns, "left")]
        return frame[(ts >= lo_ns) & (ts < hi_ns) & (ts != _NAT)]

    def meta_rows(self, job_ids) -> np.ndarray:
        """Positions (ascending) of the job_metadata rows of ``job_ids`` in the meta frame given to prepare_range."""
        if self.meta_index is None:
            self.meta_index = self.meta.groupby(self.meta["job_id"].astype(object), sort=False).indices if len(self.meta) else {}
        parts = [self.meta_index[j] for j in job_ids if j in self.meta_index]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def team_of(self, job_id, col: str) -> str:
        """job_metadata's ``col`` (team, workload_class) of a job, 'unknown' when absent."""
        lookup = self.lookups.get(col)
        if lookup is None:
            lookup = self.lookups[col] = dict(zip(self.meta_first.index, self.meta_first[col].astype(object)))
        v = lookup.get(job_id)
        return "unknown" if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else v


def prepare_range(jobs: pd.DataFrame, meta: pd.DataFrame, *, job_lookback: pd.Timedelta,
                  windows: dict | None = None, loss_history: pd.DataFrame | None = None,
                  sched: pd.DataFrame | None = None, node_region: dict | None = None,
                  gpu: pd.DataFrame | None = None) -> RangePrep:
    """The per-range structures of a run of partitions (PartitionContext.prepared).

    ``jobs``: job_table() of the range's scheduler events (with the lookback before it); ``job_lookback``:
    how far back a partition's job table reaches (the scheduler-event lookback the caller reads); ``meta``:
    the job_metadata lookup of the range, the same frame the contexts carry as ``meta``. A context carrying
    them needs no ``jobs`` of its own. ``windows``: name -> a frame with a ``ts`` column that the caller cuts
    into per-partition time windows (RangePrep.between: job_runtime_metrics, scheduler_events,
    change_events), instead of comparing every row for every partition. ``loss_history``: the
    job_runtime_metrics (loss, checkpoints) of the range and its CONVERGENCE_LOOKBACK before it, the frame
    the contexts' ``loss_history`` windows are cut from (the convergence detectors then slice arrays).
    ``sched`` and ``node_region``: the scheduler events ``jobs`` was built from and the node -> region map it
    used; with them each partition's jobs take their queue's region from the placements of its own look-back
    (what a run of that partition alone reads), not from placements later in the range. ``gpu``: the range's
    GPU rows, whose contexts carry their slice of it as ``gpu`` and its positions as ``gpu_rows``.
    """
    arrays = _job_arrays(jobs)
    order = np.argsort(arrays["sub"], kind="stable")
    arrays = {c: v[order] for c, v in arrays.items()}
    if meta is not None and len(meta):
        meta_first = meta.drop_duplicates("job_id").set_index("job_id")
    else:
        meta_first = pd.DataFrame(columns=["team", "workload_class"])
    cut = {}
    for name, frame in (windows or {}).items():
        ts = _ns(frame["ts"]) if len(frame) else np.zeros(0, dtype=np.int64)
        cut[name] = (frame, ts, bool(len(ts) == 0 or (ts[0] != _NAT and not np.any(ts[1:] < ts[:-1]))))
    loss = None
    if loss_history is not None and len(loss_history):
        loss = loss_arrays(loss_history)
    placed = None
    if sched is not None:
        placed, queues = _placement_arrays(sched, node_region)
        arrays["queue_code"] = pd.Index(queues).get_indexer(arrays["queue"])  # -1: never placed in the range
    gpu_codes = {}
    for col in _GPU_CODED if gpu is not None else ():
        if col in gpu.columns:
            codes, uniques = factorize(gpu[col])
            gpu_codes[col] = (codes.astype(np.int64), np.asarray(uniques, dtype=object))
    derived = {}
    if gpu is not None and "xid" in gpu.columns:  # (two detectors ask every partition's rows; isin hashes each time)
        derived["xid_fault"] = gpu["xid"].isin(XID_GPU_FAULT).to_numpy(dtype=bool)
    return RangePrep(job_lookback=pd.Timedelta(job_lookback), jobs=arrays, meta_first=meta_first,
                     meta=meta if meta is not None else pd.DataFrame(columns=["job_id"]), windows=cut, loss=loss,
                     placed=placed, gpu_codes=gpu_codes,
                     gpu_ts=_ns(gpu["ts"]) if gpu is not None and len(gpu) else None, derived=derived)


def _placement_arrays(sched: pd.DataFrame, node_region: dict | None) -> tuple[tuple, np.ndarray]:
    """What queue_regions() counts, as arrays sorted by time -- each placement (a started or ended event with
    nodes) as its ts (ns), queue code and the region code of its first node, with the number of queues and the
    region names (RangePrep.placed) -- and the queue names. Placements whose queue or region is unknown are left
    out, as queue_regions' group-by leaves them."""
    placed, first = placement_events(sched) if len(sched) else (sched, None)
    if not len(placed):
        none = np.zeros(0, dtype=np.int64)
        return (none, none, none, 0, np.array([], dtype=object)), np.array([], dtype=object)
    first = first.map(node_region or {})
    q_code, queues = pd.factorize(placed["queue"].astype(object))
    r_code, regions = pd.factorize(first.astype(object))
    keep = (q_code >= 0) & (r_code >= 0)
    ts = _ns(placed["ts"])[keep]
    order = np.argsort(ts, kind="stable")
    return ((ts[order], q_code[keep][order], r_code[keep][order], len(queues), np.asarray(regions, dtype=object)),
            np.asarray(queues, dtype=object))


@dataclass
class PartitionContext:
    """Everything the detectors read for one partition [start, end)."""

    start: pd.Timestamp
    end: pd.Timestamp
    gpu: pd.DataFrame
    node: pd.DataFrame
    network: pd.DataFrame
    runtime: pd.DataFrame           # the partition and the 5 minutes before it (stall runs)
    sched: pd.DataFrame             # scheduler events of the last hours up to end
    changes: pd.DataFrame           # change events up to end (last DEPLOY_LOOKBACK)
    maintenance: pd.DataFrame
    leaves: pd.DataFrame            # goodput_leaves of the partition
    baselines: pd.DataFrame         # step_time_baselines of the partition
    meta: pd.DataFrame              # job metadata lookup (job_id -> team, workload_class, model_type, framework_version)
    inventory: pd.DataFrame         # node_id, region, sku, gpus
    region_history: pd.DataFrame    # cluster_goodput rows (partition_start, region, share_idle_blocked) before start
    open_baselines: dict = field(default_factory=dict)  # alert key -> baseline captured when it opened
    jobs: pd.DataFrame | None = None  # job_table() of the scheduler events as known at `end` (computed once per range)
    rejects: pd.DataFrame | None = None  # source_rejects rows of the partition (source, origin, reason)
    source_gaps: pd.DataFrame | None = None  # source_gaps rows of the partition (source, missing_family, reason)
    open_keys: frozenset = frozenset()  # keys of the alerts open after the partition before
    carried: dict = field(default_factory=dict)  # alert key -> the carry of its finding of the partition before
    placements: pd.DataFrame | None = None  # placements() of `sched` (sliced from one computed per range)
    slo_events: pd.DataFrame | None = None  # slo_error_budgets rows of the burn-rate lookback up to the partition
    slo_versions: pd.DataFrame | None = None  # slo_version_events rows of the release look-back up to the partition
    kube_pods: pd.DataFrame | None = None   # kube_pods rows of the restart look-back up to the partition's end (None = absent)
    kube_nodes: pd.DataFrame | None = None  # kube_nodes rows of the partition (None = absent)
    loss_history: pd.DataFrame | None = None  # job_runtime_metrics (loss, checkpoints) of the convergence look-back
    facility: pd.DataFrame | None = None  # facility_telemetry rows of the partition (None / empty: no facility data)
    capacity: pd.DataFrame | None = None  # cost_capacity rows of the partition's day (None: not given)
    # GPUs reporting under another node name than the inventory's (gpu_health.steps.telemetry.moved_gpus rows of the
    # partition: ts, gpu_uuid, node_id = the old name, region, sku, new_node; None: none)
    moved: pd.DataFrame | None = None
    # source_rejects of Finance's cost file of the partition's day and of the day before (partition_start = the
    # day, origin, row_index, reason; None: none)
    cost_rejects: pd.DataFrame | None = None
    # per-range structures (prepare_range), computed once for all partitions of a range; None: each detector
    # derives what it needs from the frames above (the same results, slower)
    prepared: "RangePrep | None" = None
    # the positions of ``gpu`` in the range frame ``prepared.gpu_codes`` factorized (None: not cut from it)
    gpu_rows: slice | None = None
    # job ids -> the GPU rows of those jobs in gaming.COMPUTE_HISTORY before the partition's start (ts, job_id,
    # gpu_uuid, sku, gpu_util_pct, sm_active, tensor_active, power_w), read only when asked (a few suspect jobs);
    # None: not given (a job's history unknown)
    job_gpu_history: "Callable[[list], pd.DataFrame] | None" = None
    # derived views of this partition's frames shared by the detectors (filled lazily; never an input, never
    # carried over by dataclasses.replace: a context with other frames starts with an empty one)
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)


# Planned windows are judged at the partition's midpoint: a node inside a window then is excluded for the
# whole partition (the loss tree's convention for a partition's maintenance state).
_MAINT_AT = pd.Timedelta(minutes=2, seconds=30)


def _windows_now(ctx: PartitionContext) -> pd.DataFrame | None:
    """The maintenance windows covering the partition's midpoint (None when there are none): every other
    window excludes nothing in this partition, so only these are matched row by row."""
    memo = ctx.memo
    if "windows" not in memo:
        w = ctx.maintenance
        hit = None
        if w is not None and len(w):
            # (the windows' bounds as int64 once per frame: a partition compares two small arrays, no pandas)
            lo, hi = _per_frame(ctx, "maintenance_ns", w, lambda f: (_ns(f["start"]), _ns(f["end"])))
            t = (ctx.start + _MAINT_AT).value
            inside = (lo != _NAT) & (lo <= t) & (hi > t)  # a NaT bound covers nothing (as pandas compares it)
            hit = w[inside] if inside.any() else None
        memo["windows"] = hit
    return memo["windows"]


def _in_maintenance(ctx: PartitionContext, nodes: pd.Series, regions: pd.Series) -> np.ndarray:
    windows = _windows_now(ctx)
    if windows is None:
        return np.zeros(len(nodes), dtype=bool)
    ts = pd.Series(ctx.start + _MAINT_AT, index=nodes.index)
    return maintenance_mask(ts, regions, nodes, windows)


def _gpu_maint(ctx: PartitionContext) -> np.ndarray:
    """_in_maintenance of every GPU row of the partition (computed once, per distinct node and region)."""
    if "gpu_maint" not in ctx.memo:
        g = ctx.gpu
        if not len(g) or _windows_now(ctx) is None:
            ctx.memo["gpu_maint"] = np.zeros(len(g), dtype=bool)
        else:
            node_code, node_uni = _gpu_codes(ctx, "node_id")
            region_code, region_uni = _gpu_codes(ctx, "region")
            pair = (node_code + 1) * (len(region_uni) + 1) + (region_code + 1)
            uniq, first, back = np.unique(pair, return_index=True, return_inverse=True)
            inside = _in_maintenance(ctx, g["node_id"].iloc[first].reset_index(drop=True),
                                     g["region"].iloc[first].reset_index(drop=True))
            ctx.memo["gpu_maint"] = np.asarray(inside, dtype=bool)[back.reshape(-1)]
    return ctx.memo["gpu_maint"]


_SLIM = ["ts", "region", "node_id", "gpu_uuid", "sku", "job_id", "gpu_util_pct", "sm_active", "tensor_active", "power_w"]


def _gpu_slim(ctx: PartitionContext) -> pd.DataFrame:
    """The partition's GPU rows with only the columns the device rules read, SKU as plain objects (what
    reference_power / low_power group by)."""
    if "gpu_slim" not in ctx.memo:
        g = ctx.gpu[[c for c in _SLIM if c in ctx.gpu.columns]]
        ctx.memo["gpu_slim"] = g.assign(sku=g["sku"].astype(object))
    return ctx.memo["gpu_slim"]


def jobs_that_computed(ctx: PartitionContext, jobs: set) -> set:
    """The ``jobs`` whose own GPU rows show they computed: in the history before the partition
    (ctx.job_gpu_history) or in the partition. A job computed when its GPUs did real work (SM activity above idle,
    or power at or above half the SKU's working reference in the partition: gpu_health.metrics.device) for at
    least one minute of its whole allocation (as many GPU-minutes as it holds GPUs now), so a stray sample of one
    GPU is no history. A dummy load never computed; a hung job did, until it hung. Without a history (a caller
    that gives none) no job did. Each job's history is read once per partition (the gaming and stall detectors
    both ask)."""
    known = ctx.memo.setdefault("computed", {})
    ask = sorted(j for j in jobs if j not in known)
    if ask and ctx.job_gpu_history is not None:
        cols = ["job_id", "gpu_uuid", "sku", "sm_active", "tensor_active", "power_w"]
        slim = _gpu_slim(ctx)
        now = slim[slim["job_id"].isin(ask).to_numpy(dtype=bool)]
        seen = pd.concat([ctx.job_gpu_history(ask)[cols], now[cols]], ignore_index=True)
        seen = seen.assign(job_id=seen["job_id"].astype(object), sku=seen["sku"].astype(object))
        if "ref_power" not in ctx.memo:
            ctx.memo["ref_power"] = reference_power(slim, ["sku"])
        idle, dev_known = device_idle(seen["sm_active"].to_numpy(dtype=float, na_value=np.nan),
                                      seen["tensor_active"].to_numpy(dtype=float, na_value=np.nan))
        low, pow_known = low_power(seen, ctx.memo["ref_power"], ["sku"])
        worked = seen.loc[(dev_known & ~idle) | (pow_known & ~low), "job_id"].value_counts()
        held = now.groupby(now["job_id"].astype(object))["gpu_uuid"].nunique()
        did = set(worked.index[worked.to_numpy() >= held.reindex(worked.index).fillna(1).to_numpy()])
        known.update({j: j in did for j in ask})
    return {j for j in jobs if known.get(j, False)}


def _leaf_rows(ctx: PartitionContext, state: str) -> np.ndarray:
    """Positions of the partition's goodput leaves in ``state``, in row order."""
    if "leaf_states" not in ctx.memo:
        codes, uniques = pd.factorize(ctx.leaves["state"].astype(object)) if len(ctx.leaves) else (np.zeros(0, dtype=np.int64), [])
        ctx.memo["leaf_states"] = (codes, {u: i for i, u in enumerate(uniques)}, {})
    codes, pos, rows = ctx.memo["leaf_states"]
    if state not in rows:
        rows[state] = np.flatnonzero(codes == pos[state]) if state in pos else np.zeros(0, dtype=np.int64)
    return rows[state]


def _state(ctx: PartitionContext, state: str, by: list[str]) -> pd.Series:
    lv = ctx.leaves
    rows = _leaf_rows(ctx, state) if len(lv) else ()
    return lv.iloc[rows].groupby(by, observed=True)["gpu_minutes"].sum() if len(rows) else pd.Series(dtype=float)


def _ts_slice(frame: pd.DataFrame, lo: pd.Timestamp, hi: pd.Timestamp, memo: dict | None = None) -> pd.DataFrame:
    """The rows of ``frame`` with lo <= ts < hi, in their order: one slice when ts is sorted (scheduler events
    are read in time order), else a mask. ``memo``: where to keep the frame's timestamps between calls."""
    key = ("ts_ns", id(frame))
    hit = memo.get(key) if memo is not None else None
    if hit is None or hit[0] is not frame:
        hit = (frame, _ns(frame["ts"]))
        if memo is not None:
            memo[key] = hit
    ts = hit[1]
    if len(ts) and not np.any(ts[1:] < ts[:-1]) and ts[0] != _NAT:
        return frame.iloc[np.searchsorted(ts, lo.value, "left"):np.searchsorted(ts, hi.value, "left")]
    return frame[((frame["ts"] >= lo) & (frame["ts"] < hi)).to_numpy(dtype=bool)]


def _per_inventory(ctx: PartitionContext, name: str, derive):
    """``derive(ctx.inventory)``, computed once per inventory frame of a prepared range (a range has a few
    inventory segments; its partitions share their frames), else once per partition."""
    return _per_frame(ctx, name, ctx.inventory, derive)


def _per_frame(ctx: PartitionContext, name: str, frame: pd.DataFrame, derive):
    """``derive(frame)`` for a frame the partitions of a prepared range share (the inventory segment, the
    maintenance windows), computed once per frame object, else once per partition."""
    cache = ctx.prepared.per_inventory if ctx.prepared is not None else ctx.memo.setdefault("per_inventory", {})
    hit = cache.get(name)
    if hit is None or hit[0] is not frame:  # the frame itself is kept with its result: identity is never reused
        hit = cache[name] = (frame, derive(frame))
    return hit[1]


def _gpu_minute(ctx: PartitionContext) -> np.ndarray:
    """The minute of the partition (0-4) of each GPU row; -1 for a timestamp off the minute grid or outside."""
    if "gpu_minute" not in ctx.memo:
        off = _ns(ctx.gpu["ts"]) - ctx.start.value if len(ctx.gpu) else np.zeros(0, dtype=np.int64)
        one = pd.Timedelta(minutes=1).value
        n = int((ctx.end - ctx.start) / pd.Timedelta(minutes=1))
        ok = (off >= 0) & (off % one == 0) & (off < n * one)
        ctx.memo["gpu_minute"] = np.where(ok, off // one, -1)
    return ctx.memo["gpu_minute"]


# the columns of the GPU rows the detectors factorize (_gpu_codes), factorized once per range by prepare_range
_GPU_CODED = ("node_id", "region", "job_id", "gpu_uuid")


def _gpu_xid_fault(ctx: PartitionContext) -> np.ndarray:
    """Per GPU row of the partition: its Xid is a GPU fault (XID_GPU_FAULT); a slice of the range's, when cut from
    one (prepare_range)."""
    if "xid_fault" not in ctx.memo:
        whole = ctx.prepared.derived.get("xid_fault") if ctx.prepared is not None and ctx.gpu_rows is not None else None
        ctx.memo["xid_fault"] = (whole[ctx.gpu_rows] if whole is not None
                                 else ctx.gpu["xid"].isin(XID_GPU_FAULT).to_numpy(dtype=bool))
    return ctx.memo["xid_fault"]


def _gpu_codes(ctx: PartitionContext, col: str) -> tuple[np.ndarray, np.ndarray]:
    """pd.factorize of a column of the partition's GPU rows (codes, -1 for missing; uniques as objects)."""
    key = ("gpu_codes", col)
    if key not in ctx.memo:
        whole = ctx.prepared.gpu_codes.get(col) if ctx.prepared is not None and ctx.gpu_rows is not None else None
        if whole is not None:
            ctx.memo[key] = refactorize(whole[0][ctx.gpu_rows], whole[1])
        else:
            codes, uniques = factorize(ctx.gpu[col])
            ctx.memo[key] = (codes.astype(np.int64), np.asarray(uniques, dtype=object))
    return ctx.memo[key]


_NEVER = np.iinfo(np.int64).max
_NAT = np.iinfo(np.int64).min  # NaT as int64 nanoseconds


_MINUTE_NS = pd.Timedelta(minutes=1).value


def _ns(values) -> np.ndarray:
    """Timestamps (tz-aware or naive UTC) as int64 nanoseconds since the epoch (NaT: the int64 minimum)."""
    idx = pd.DatetimeIndex(values)
    return (idx if idx.tz is not None else idx.tz_localize("UTC")).as_unit("ns").asi8


def _job_arrays(sub: pd.DataFrame) -> dict:
    """job_table() rows as arrays (see _jobs_now)."""
    left = sub["left"]
    return {
        "sub": _ns(sub["sub"]),
        "left": np.where(left.isna().to_numpy(), _NEVER, _ns(left)),
        "gpus": sub["gpus"].to_numpy(dtype=float, na_value=np.nan),
        "queue": sub["queue"].astype(object).to_numpy(),
        "has_queue": sub["queue"].notna().to_numpy(dtype=bool),
        "region": sub["region"].astype(object).to_numpy(),
    }


def job_table(sched: pd.DataFrame, inventory: pd.DataFrame) -> pd.DataFrame:
    """One row per submitted job: submit time, GPUs, queue, the region its queue runs in, when it left the queue."""
    cols = ["sub", "gpus", "queue", "left", "region"]
    if sched is None or sched.empty:
        return pd.DataFrame(columns=cols)
    sub = queue_table(sched)
    qmap = queue_regions(sched, dict(zip(inventory["node_id"], inventory["region"])))
    sub["region"] = sub["queue"].astype(object).map(qmap)
    return sub[cols]


def jobs_as_of(jobs: pd.DataFrame, end: pd.Timestamp) -> pd.DataFrame:
    """The job table as it was known at ``end`` (later submissions and starts unseen)."""
    j = jobs[jobs["sub"] < end].copy()
    j.loc[j["left"] >= end, "left"] = pd.NaT
    return j


def _scope_nodes(scope: str, inventory: pd.DataFrame) -> set[str]:
    if scope in (None, "", "*"):
        return set(inventory["node_id"])
    if scope in set(inventory["region"]):
        return set(inventory.loc[inventory["region"] == scope, "node_id"])
    return {s.strip() for s in str(scope).split(",") if s.strip()}




# A requeue is the scheduler taking a run back: the run failed when the reason names the GPU stack (an Xid, a CUDA or
# NCCL error, a GSP timeout); a requeue for a drain, an admin's or a preemption is not the run failing.
_GPU_STACK_REASON = r"(?i)\bxid\b|cuda|nccl|\bgsp\b|launch failure"
# a failure reason that names a fault of the GPU software stack (driver, firmware, CUDA runtime): the Xid codes NVIDIA's
# Xid catalogue attributes to the driver or the application (13 graphics engine exception, 31 memory page fault, 43
# stopped processing, 119/120 GSP RPC timeout/error), a CUDA launch failure, an illegal address, NCCL's "unhandled
# cuda error". Not the hardware Xids (48 double-bit ECC, 79 off the bus, 94/95 contained/uncontained ECC, 74 NVLink):
# those are one GPU's fault; not "out of memory" or "NCCL timeout", which a job's own load or the network cause.
GPU_SOFTWARE_REASON = (r"(?i)\bxid\s*(?:13|31|43|119|120)\b|\bgsp\b|launch failure|unhandled cuda error"
                       r"|illegal (?:memory )?(?:address|access)")
_RUN_ENDS = ["ended", "requeued", "preempted"]
_FAILED_EXITS = ["failed", "node_fail"]
_RUN_COLUMNS = ["start", "end", "node_ids", "failed", "reason"]


def job_runs(ctx: PartitionContext, lo: pd.Timestamp) -> pd.DataFrame:
    """The job runs of ``ctx.sched`` that started or ended in [lo, ctx.end), one row each: ``start`` (NaT: a run
    whose start the look-back does not hold, or a stream that gives no starts), ``end`` (NaT: still running at
    ctx.end), ``node_ids`` (the placement of its ``started`` event -- many streams give it only there -- else of
    its end), ``failed`` so far (ended failed / node_fail, or requeued for a GPU-stack reason), the ending
    event's ``reason`` and the run's ``job_id``."""
    key = ("job_runs", id(ctx.sched))
    if key not in ctx.memo:  # (the runs of the whole look-back, once per partition)
        ctx.memo[key] = _job_runs(ctx.sched)
    runs = ctx.memo[key]
    return runs[(runs["start"] >= lo).to_numpy(dtype=bool, na_value=False)
                | (runs["end"] >= lo).to_numpy(dtype=bool, na_value=False)]


def _job_runs(s: pd.DataFrame | None) -> pd.DataFrame:
    """Every run of the scheduler events ``s``: each start with the event that ends it, and each end without one."""
    if s is None or not len(s):
        return pd.DataFrame({"start": pd.Series(dtype="datetime64[ns, UTC]"), "end": pd.Series(dtype="datetime64[ns, UTC]"),
                             "node_ids": pd.Series(dtype=object), "failed": pd.Series(dtype=bool),
                             "reason": pd.Series(dtype=object), "job_id": pd.Series(dtype=object)})
    seq = s[s["event"].isin(["started", *_RUN_ENDS]).to_numpy(dtype=bool, na_value=False)]
    # each event beside the one before it of the same job (a start sorts before an end of the same second)
    seq = seq.assign(_job=seq["job_id"].astype(object), _end=(seq["event"] != "started").to_numpy(dtype=bool))
    seq = seq.sort_values(["_job", "ts", "_end"], kind="stable").reset_index(drop=True)
    prev = seq.shift(1)
    is_end = seq["_end"].to_numpy(dtype=bool)
    opened = (prev["_job"] == seq["_job"]).to_numpy(dtype=bool) & ~prev["_end"].to_numpy(dtype=bool, na_value=True)
    opened &= is_end  # an end whose start is the event before it
    how, reason = seq["event"].astype(object), seq["reason"].astype(object)
    failed = (((how == "ended") & seq["exit_state"].isin(_FAILED_EXITS))
              | ((how == "requeued") & reason.str.contains(_GPU_STACK_REASON, na=False))).to_numpy(dtype=bool)
    # one row per run: at its start when the look-back holds it, else at its end
    closing = np.full(len(seq), -1)
    closing[np.flatnonzero(opened) - 1] = np.flatnonzero(opened)
    rows = np.flatnonzero(~is_end | ~opened)
    end_row = np.where(is_end[rows], rows, closing[rows])
    has_end = end_row >= 0
    at_end = np.where(has_end, end_row, 0)

    def pick(col: pd.Series) -> pd.Series:  # the run's ending event's value (null while it runs)
        return col.iloc[at_end].reset_index(drop=True).where(has_end)

    start = seq["ts"].iloc[rows].reset_index(drop=True).where(~is_end[rows])
    placed = seq["node_ids"].astype(object).iloc[rows].reset_index(drop=True)
    return pd.DataFrame({"start": start, "end": pick(seq["ts"]), "node_ids": placed.fillna(pick(seq["node_ids"].astype(object))),
                         "failed": failed[at_end] & has_end, "reason": pick(reason),
                         "job_id": seq["_job"].iloc[rows].reset_index(drop=True)})


def gpus_held_by_pods(ctx: PartitionContext, nodes, ts: np.ndarray) -> np.ndarray:
    """Per (node, minute) cell of idle GPUs: how many of them a Running pod bound to the node holds beyond the GPUs
    DCGM maps to a job there. A container in CrashLoopBackOff runs no process between restarts (no job on its GPUs)
    while the kubelet keeps its devices allocated and nothing else can be placed on them: its job's software fault
    (crash_loop), not capacity beside waiting jobs. Without Kubernetes tables (None) nothing is held."""
    kp = ctx.kube_pods
    out = np.zeros(len(ts))
    if kp is None or not len(kp) or not len(ts):
        return out
    bound = kp[(kp["phase"] == "Running") & kp["node_id"].notna() & (kp["gpu_request"] > 0)
               & (kp["ts"] >= ctx.start) & (kp["ts"] < ctx.end)]
    if bound.empty:
        return out
    held = bound.groupby([bound["node_id"].astype(object).to_numpy(), _ns(bound["ts"])])["gpu_request"].sum()
    g = ctx.gpu[ctx.gpu["job_id"].notna()]
    mapped = g.groupby([g["node_id"].astype(object).to_numpy(), _ns(g["ts"])]).size()
    unmapped = held.sub(mapped.reindex(held.index).fillna(0)).clip(lower=0)
    cells = pd.MultiIndex.from_arrays([np.asarray(nodes, dtype=object), ts])
    return unmapped.reindex(cells).fillna(0.0).to_numpy(dtype=float)


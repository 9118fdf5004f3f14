"""Detectors: per 5-minute partition, findings with a cause family and their evidence.

Pure pandas. Each detector reads direct evidence a real incident leaves in the
sources and the loss tree, so that it can fire in the partition where an
incident starts (a page within 15 minutes of a deploy needs that).

The rule every detector keeps: **a page rests on direct evidence from at least two
independent witnesses; the absence of an optional signal is missing data.** A field a
collector does not export, a job that reports no training metrics, rows a contract
rejected, a collector gone silent: each degrades a judgement (a ticket at most, or
nothing), never pages. docs/runbooks.md lists each detector's page condition.

==================  ===========  =====================================================================
detector            family       pages on (the two witnesses) / tickets on
==================  ===========  =====================================================================
hardware_fault      hardware     two independent channels on one node: a GPU-fault Xid, the DBE
                                 counter, the GPU's rows gone, the node drained / down outside a
                                 window, a job killed by the GPU or node (Xid 79 + rows gone; Xid 48
                                 + DBE) -- not while a driver / kernel / firmware change rolls over
                                 the node (a ticket naming it) unless the ECC counter reports a DBE;
                                 >10 % of a region's nodes at once: one systemic alert naming what
                                 they share. Ticket: one channel, or GPUs still gone after a fault.
thermal_throttle    hardware     thermal clock-event bits AND temperature >= 83 C on busy GPUs (a GPU
                                 whose collector exposes no temperature or bits is not judged)
deploy_regression   software     a change event's cohort worse than the rest in the same minutes:
                                 job failure rate (Fisher exact test + rate-ratio floor) or step time
                                 over baseline (Mann-Whitney cohort judge + effect floor)
training_stall      software     a job that trained before reports 0 steps (no checkpoint) for 3+
                                 minutes AND its GPUs compute nothing (SM/tensor idle, no kernel or
                                 power near idle); ticket when the device cannot confirm
data_io_slowdown    data_io      loader wait above its baseline (slowdown_data_io) AND storage
                                 saturated on those nodes; ticket without the storage witness
network_slowdown    network      gradient-sync time above its baseline AND IB loss or retransmits on
                                 the jobs' links; ticket without the link witness
scheduling_blocked  scheduling   idle GPUs while jobs that could use them (same queue's nodes) have
                                 waited over 3 minutes, above the region's seasonal share
busy_no_progress    gaming       dummy load on the device: busy GPUs with SM and tensor activity idle
                                 AND power near idle (jobs reporting no training metrics); ticket
                                 when the collector exports only one of the two
missing_data        missing_data a region's collectors silent, nodes' GPU rows missing with no fault,
                                 rows rejected by a contract, a day's cost file not arrived or
                                 quarantined (never a page: not a GPU incident)
inventory_excess,   missing_data GPUs seen beyond Finance's capacity, a region x SKU with telemetry but no
unpriced_telemetry,              price, a GPU UUID on two nodes in one minute (gpu_health.diagnosis.inventory;
gpu_identity                     tickets only: the data about the cluster is wrong, not a GPU)
==================  ===========  =====================================================================

Thresholds come from definitions (DCGM's Xid catalogue and clock-event bits, the
device-level definitions of gpu_health.metrics.device), physics (the 83 C slowdown
temperature) or the cluster's own history (step-time baselines, the same hour of the
week, the SKU's working power in the same minutes); each constant says why it holds on
any cluster. Planned maintenance never pages: nodes inside a window are excluded.
"""

import re
from collections import namedtuple
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpu_health.codes import factorize, refactorize
from gpu_health.constants import (KERNEL_ACTIVE_UTIL_PCT, MAD_TO_SIGMA, PARTITION, REPORTED_BUSY_UTIL_PCT, THERMAL_BITS,
                                  THERMAL_TEMP_C, XID_GPU_FAULT)
from gpu_health.contracts.validate import WHOLE_FILE
from gpu_health.diagnosis.cohort import REGRESSION, judge_cohorts
from gpu_health.metrics.device import device_idle, low_power, reference_power
from gpu_health.metrics.goodput import (
    BLOCKED_WAIT,
    QUEUE_REGION_SHARE,
    maintenance_mask,
    placement_events,
    placements,
    queue_nodes,
    queue_regions,
    queue_table,
)
from gpu_health.diagnosis import facility as F
from gpu_health.diagnosis.finding import Finding  # noqa: F401  (re-exported: detectors and tests import it here)

# a throttled GPU for a whole partition (or several for part of it): one minute's bit is a transient DCGM
# reports on any busy GPU
MIN_THERMAL_GPU_MINUTES = 5
# where a collector does not export the clock-event reasons (the field is null), a GPU at its slowdown temperature
# whose SM clock is this far below the median of the same SKU's other busy GPUs in the partition shows the
# slowdown itself: thermal slowdown steps the clock down by tens of percent, while load-dependent boost differs
# by a few percent between busy GPUs of one SKU
THERMAL_CLOCK_RATIO = 0.9
# one missing minute is one lost scrape; two in a partition is a gap worth a look
MIN_MISSING_MINUTES = 2
# a component's excess over the workload's own healthy baseline on 10 % of a node's allocated (multi-node, for
# network) GPU-minutes: the same effect-size floor as the step-time cohort judge (STEP_EFFECT_FLOOR)
NODE_SLOW_SHARE = 0.10
NODE_SLOW_MIN_GPU_MINUTES = 5  # one GPU's whole partition
# InfiniBand is lossless by design (credit-based flow control) and RoCE runs lossless with PFC: sustained loss
# of 0.1 % of packets, or 100 retransmits on a link in a minute, is a link fault, not traffic
LINK_RETRANSMITS = 100
LINK_LOSS_PCT = 0.1
LINK_FAULT_MINUTES = 3  # a link failing three minutes of a partition is a fault, not a burst
AGED_WAIT = BLOCKED_WAIT  # a job waiting this long while GPUs it could use idle is blocked (as the fragmentation KPI)
# ... beside a GPU idle this long: three minutes is many scheduling cycles (Slurm's backfill runs every 30 s,
# the Kubernetes scheduler places within seconds), so a GPU idle that long beside a job that fits is not dispatch
AGED_IDLE_MINUTES = int(BLOCKED_WAIT / pd.Timedelta(minutes=1))
# impact floors, shares of the region's paid GPU-minutes idle beside jobs that could use them: a page needs 2 %
# (12 GPUs of a 600-GPU region, tens of dollars an hour), a ticket 1.25 %. Whether it is unusual is not theirs
# to say: the seasonal gate compares with the region's own history at this hour (SCHED_SEASONAL_MARGIN)
SCHED_PAGE_SHARE = 0.02
SCHED_TICKET_SHARE = 0.0125
SCHED_PAGE_SHARE_AFTER_CHANGE = 0.015  # lower bar within DEPLOY_LOOKBACK of a scheduler_config change
SCHED_MIN_JOBS = 4                     # jobs held back: one long-waiting large job is normal, a pile-up is not
_LOOSEST_TICKET = min(SCHED_TICKET_SHARE, SCHED_PAGE_SHARE, SCHED_PAGE_SHARE_AFTER_CHANGE)  # no region below it reports
# known seasonality never pages: the region's idle_blocked share must stand one percentage point above its own
# usual share at this hour (same hour of the week, or of the previous days at cold start)
SCHED_SEASONAL_MARGIN = 0.01
WEEKLY = "same hour last week"  # the seasonal baseline once a week of history exists
# before a week of history (cold start) a weekday's pattern (a retrain wave, a cron surge held by quotas and fair
# share) cannot be told from a fault by the level of the pile-up: it pages only with its cause in the evidence --
# a scheduler change in flight that the pile-up followed, or a pile-up of multi-GPU requests while single-GPU
# requests are not held (fewer than SCHED_MIN_JOBS of them: no pile-up of their own). A single free GPU fits a
# single-GPU request, so capacity in the wrong shape (fragmentation, a packing or gang-placement fault) holds back
# only larger requests; demand, quotas and priorities hold back every size. Both are definitions, not levels, and
# hold on any cluster.
NO_HISTORY = "no history yet"  # the seasonal baseline before any partition of the region was recorded
# dummy load pages when a team holds a whole 8-GPU node's worth for the whole partition (8 x 5 GPU-minutes):
# the smallest unit a DGX scheduler hands to a distributed job, and at ~$2-4 per GPU-hour the point where the
# waste is worth waking someone; less is a ticket for the team
NO_PROGRESS_PAGE_GPU_MINUTES = 40
# a trainer completes steps every few seconds (the brief's workloads: well under a minute a step); three
# whole minutes in a row without one, outside a checkpoint, is not a slow step but no progress
STALL_MINUTES = 3
# a stall pages once it holds 20 GPU-minutes in the partition (a 4-GPU job for the whole partition);
# a one- or two-GPU job's hang is its owner's ticket
STALL_PAGE_GPU_MINUTES = 20
# a node's GPU-minutes missing without a fault to explain them are a missing_data ticket from one GPU's
# whole partition (5) up: single lost rows are the exporter's noise
MISSING_NODE_GPU_MINUTES = 5
# a change's cohort fails: at least 3 failures (fewer cannot reach p < 1e-3 against any realistic base rate),
# three times the rate of the rest in the same minutes, Fisher exact p < 1e-3 spent over the looks (Bonferroni)
FAILURE_RATE_RATIO = 3.0
FAILURE_P = 1e-3
MIN_COHORT_FAILURES = 3
# a change is judged for 6 hours (a rolling upgrade of a region completes within hours) on its last 30 minutes
DEPLOY_LOOKBACK = pd.Timedelta(hours=6)
DEPLOY_WINDOW = pd.Timedelta(minutes=30)
STEP_EFFECT_FLOOR = 0.10  # a step-time regression worth a page is 10 % slower than the old version's cohort

RUNBOOKS = {
    "hardware": "Cordon and drain the node(s); run DCGM diagnostics (dcgmi diag -r 3); reseat or RMA the GPU for "
                "Xid 48/79/94/95; check cooling and fans for thermal events. Runbook: docs/runbooks.md#hardware",
    "software": "Roll back the deploy named in the alert (driver / framework / kernel) for the affected cohort; "
                "collect NCCL_DEBUG=INFO logs and py-spy dumps of hung ranks. Runbook: docs/runbooks.md#software",
    "scheduling": "Revert the latest scheduler configuration change; check priorities, quotas, backfill and "
                  "fragmentation (free GPUs vs the smallest pending job). Runbook: docs/runbooks.md#scheduling",
    "data_io": "Check the shared filesystem / object store throughput and the dataset's hot partitions; raise data "
               "loader workers or stage data to local NVMe. Runbook: docs/runbooks.md#data_io",
    "network": "Check the IB / RoCE links with errors (ibdiagnet, port counters), reseat or replace cables, "
               "drain the nodes from multi-node jobs. Runbook: docs/runbooks.md#network",
    "gaming": "Contact the team: GPUs held at high utilization without training progress; reclaim the GPUs "
              "and review the quota. Runbook: docs/runbooks.md#gaming",
    "facility": F.FACILITY_RUNBOOK,
    "missing_data": "Check the collectors (dcgm-exporter, node-exporter, the landing-zone uploader) of the region; "
                    "GPU incidents cannot be judged until data flows. Runbook: docs/runbooks.md#missing_data",
}


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
        from gpu_health.diagnosis.convergence import loss_arrays
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
    placements: pd.DataFrame | None = None  # placements() of `sched` (sliced from one computed per range)
    slo_events: pd.DataFrame | None = None  # slo_error_budgets rows of the burn-rate lookback up to the partition
    slo_versions: pd.DataFrame | None = None  # slo_version_events rows of the release look-back up to the partition
    kube_pods: pd.DataFrame | None = None   # kube_pods rows of the restart look-back up to the partition's end (None = absent)
    kube_nodes: pd.DataFrame | None = None  # kube_nodes rows of the partition (None = absent)
    loss_history: pd.DataFrame | None = None  # job_runtime_metrics (loss, checkpoints) of the convergence look-back
    facility: pd.DataFrame | None = None  # facility_telemetry rows of the partition (None / empty: no facility data)
    capacity: pd.DataFrame | None = None  # cost_capacity rows of the partition's day (None: not given)
    # GPUs reporting under another node name than the inventory's (gpu_health.steps.compute.moved_gpus rows of the
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


# Evidence channels a hardware verdict can rest on. Each comes from a different collector or subsystem, so
# two of them agreeing is two independent witnesses: the driver's Xid log (dcgm-exporter's XID field), the
# ECC counters, the GPU exporter's rows, the node's own agent (health), the scheduler's job outcomes.
HW_XID, HW_DBE, HW_GONE, HW_NODE_STATE, HW_JOB_FAILED, HW_PERSISTED = (
    "fatal Xid", "double-bit ECC", "GPU rows gone", "node drained/down", "job failed on it", "unavailable earlier")
HW_DIRECT = {HW_XID, HW_DBE, HW_GONE, HW_NODE_STATE, HW_JOB_FAILED}
# witnesses of a fault, as opposed to witnesses of unavailability (rows gone, a node drained): an admin's drain
# and the exporter stopping with it are one cause, so a page needs at least one fault witness among its two
HW_FAULT = {HW_XID, HW_DBE, HW_JOB_FAILED}
# A node-level fault pages on at least this many independent channels (the issue's rule: a page names two
# independent pieces of evidence; e.g. Xid 79 and the GPU's rows gone, Xid 48 and the DBE counter).
HW_PAGE_SIGNALS = 2
# Many nodes at once is one systemic incident, not a fault per node (NVSentinel stops cordoning at 50 % of
# nodes; a pager should be stricter): above this share of a region's nodes within one partition the
# hardware finding becomes one alert naming what the nodes share.
SYSTEMIC_NODE_SHARE = 0.10
SYSTEMIC_MIN_NODES = 3
# Changes that reinstall or reboot the GPU stack: while one is rolling over a node its GPUs go missing,
# its node drains and its jobs fail, and none of that is a hardware fault.
ROLLOUT_KINDS = ("driver_upgrade", "kernel_upgrade", "firmware_update", "bios_update")
# The free-text reasons a scheduler gives for a job killed by its GPU or node (Slurm NODE_FAIL, the Xid
# text the driver logs); application Xids (13, 31, 43, 45) are the job's own and do not count.
_FAULT_REASON = r"(?i)ecc|fallen off the bus|node fail|nvlink|row remap"
_XID_IN_REASON = r"(?i)\bxid\s*:?\s*(\d+)"
_FAULT_RE, _XID_RE = re.compile(_FAULT_REASON), re.compile(_XID_IN_REASON)
_XID_FAULTS = frozenset(int(x) for x in XID_GPU_FAULT)


def _rollout_nodes(ctx: PartitionContext) -> dict[str, str]:
    """node -> the change in flight on it: a driver / kernel / firmware change whose scope covers the node
    within DEPLOY_LOOKBACK before the partition's end, or a node whose driver or kernel version changes
    inside the partition (a rollout the change calendar did not announce)."""
    out: dict[str, str] = {}
    ch = ctx.changes
    if ch is not None and len(ch):
        recent = ch[ch["kind"].isin(ROLLOUT_KINDS) & (ch["ts"] >= ctx.end - DEPLOY_LOOKBACK) & (ch["ts"] < ctx.end)]
        for ev in recent.sort_values("ts").itertuples(index=False):
            label = f"{ev.event_id} ({ev.kind} {ev.from_version} -> {ev.to_version} at {ev.ts:%H:%M})"
            for n in _scope_nodes(ev.scope, ctx.inventory):
                out[n] = label
    node = ctx.node
    # (a node's versions can only change when the partition's rows hold two versions of one column)
    if len(node) and (node["driver_version"].nunique() > 1 or node["kernel_version"].nunique() > 1):
        versions = node.groupby("node_id", observed=True)[["driver_version", "kernel_version"]].nunique()
        for n in versions.index[(versions > 1).any(axis=1)]:
            out.setdefault(str(n), "driver or kernel version changing on the node")
    return out


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


def _failed_on_fault(ctx: PartitionContext) -> dict[str, list[str]]:
    """node -> reasons of jobs placed on it that ended in the partition killed by their GPU or node."""
    prep = ctx.prepared
    if prep is not None and "sched" in prep.windows:  # the range's fault ends, judged once
        ts, nodes, why = _range_fault_ends(prep)
    else:  # the partition's rows first (a cheap comparison of timestamps), then the string tests on those few
        s = ctx.sched
        ts, nodes, why = _fault_ends(_ts_slice(s, ctx.start, ctx.end, ctx.memo) if s is not None and len(s) else s)
    out: dict[str, list[str]] = {}
    for i in np.flatnonzero((ts >= ctx.start.value) & (ts < ctx.end.value)):  # this partition's
        for n in nodes[i]:
            out.setdefault(n, []).append(why[i])
    return out


def _fault_ends(s: pd.DataFrame) -> tuple[np.ndarray, list, list]:
    """The scheduler events of ``s`` (in its order) that end a job killed by its GPU or node: their times (int64 ns),
    the nodes each names and the reason (the scheduler's text, else "node_fail")."""
    if s is None or s.empty:
        return np.zeros(0, dtype=np.int64), [], []
    # (plain Python and re on the ended jobs' values taken as arrays, not a filtered copy of every column)
    ended = np.flatnonzero(s["event"].eq("ended").to_numpy(dtype=bool, na_value=False))
    if not len(ended):
        return np.zeros(0, dtype=np.int64), [], []
    hit, nodes_of, why_of = [], [], []
    for k, nodes, reason, exit_state in zip(ended, *(s[c].to_numpy(dtype=object)[ended]
                                                      for c in ("node_ids", "reason", "exit_state"))):
        if pd.isna(nodes):
            continue
        why = "" if pd.isna(reason) else str(reason)
        dead = exit_state is not pd.NA and exit_state == "node_fail"
        code = _XID_RE.search(why)
        if dead or _FAULT_RE.search(why) or (code is not None and int(code.group(1)) in _XID_FAULTS):
            hit.append(k)
            nodes_of.append(str(nodes).split(","))
            why_of.append(why or "node_fail")
    return _ns(s["ts"].iloc[hit]) if hit else np.zeros(0, dtype=np.int64), nodes_of, why_of


def _range_fault_ends(prep: "RangePrep") -> tuple[np.ndarray, list, list]:
    """:func:`_fault_ends` of the range's scheduler events (``prep.windows["sched"]``), once per range: a partition
    takes those of its own five minutes (a few hundred ended jobs a day, nearly all of them clean; judged per
    partition, the ended rows were found and tested again for each of the day's 288)."""
    if "fault_ends" not in prep.derived:
        prep.derived["fault_ends"] = _fault_ends(prep.windows["sched"][0])
    return prep.derived["fault_ends"]


def _short_gpus(ctx: PartitionContext, expected: pd.Series) -> np.ndarray:
    """nodes x minutes of the partition: GPUs the inventory expects (``expected``, per node) minus the distinct
    GPUs that reported at that minute, at least 0."""
    minutes = pd.date_range(ctx.start, ctx.end, freq="1min", inclusive="left")
    gpu = ctx.gpu
    if not expected.index.is_unique:  # an inventory listing a node twice: the general (slower) path
        per_min = gpu.groupby(["node_id", "ts"], observed=True)["gpu_uuid"].nunique().unstack("ts", fill_value=0) if len(gpu) else pd.DataFrame()
        per_min = per_min.reindex(index=expected.index, columns=minutes, fill_value=0)
        return per_min.rsub(expected, axis=0).clip(lower=0).to_numpy(dtype=float)
    seen = np.zeros((len(expected), len(minutes)))
    prep = ctx.prepared
    if len(gpu) and prep is not None and isinstance(ctx.gpu_rows, slice) and prep.gpu_ts is not None \
            and {"node_id", "gpu_uuid"} <= set(prep.gpu_codes):
        # the range's (minute, node) cells and their distinct GPUs, counted once: this partition's five minutes
        t0, cells = _range_presence(prep)
        first = (ctx.start.value - t0) // _MINUTE_NS
        lo, hi = min(max(first, 0), len(cells)), min(max(first + len(minutes), 0), len(cells))
        row = _per_inventory(ctx, "presence_rows", lambda inv: pd.Index(expected.index).get_indexer(
            prep.gpu_codes["node_id"][1]))  # each range node's row of ``expected`` (-1: not in the inventory)
        on = row >= 0
        if hi > lo:
            seen[row[on], lo - first:hi - first] = cells[lo:hi, on].T
    elif len(gpu):
        node_code, node_uni = _gpu_codes(ctx, "node_id")
        node = np.append(pd.Index(expected.index).get_indexer(node_uni), -1)[node_code]
        minute = _gpu_minute(ctx)
        uuid, uniques = _gpu_codes(ctx, "gpu_uuid")
        ok = (node >= 0) & (minute >= 0) & (uuid >= 0)
        cell = node[ok].astype(np.int64) * len(minutes) + minute[ok]
        pairs = pd.unique(cell * max(len(uniques), 1) + uuid[ok])  # one per distinct GPU and cell (hashed)
        seen = np.bincount(pairs // max(len(uniques), 1), minlength=seen.size).reshape(seen.shape).astype(float)
    return np.clip(expected.to_numpy(dtype=float)[:, None] - seen, 0, None)


_MINUTE_NS = pd.Timedelta(minutes=1).value


def _range_presence(prep: "RangePrep") -> tuple[int, np.ndarray]:
    """The number of distinct GPUs that reported in each (minute, node) cell of the range, counted once per range:
    ``(t0, cells)``, a (minutes x nodes) array, minutes counted from ``t0`` (ns), nodes by their ``prep.gpu_codes``
    code; rows off the minute grid or without node or GPU count nowhere (as _gpu_minute and _short_gpus read a
    partition's rows). A partition's cells are five rows of it. (The distinct (cell, GPU) pairs by one sort of
    their packed keys: a day's 1.7 million are nearly all distinct, which numpy's sort handles ~5x faster than a
    hash table, 0.03 s against 0.16.)"""
    if "presence" not in prep.derived:
        ts = prep.gpu_ts
        node, uuid = prep.gpu_codes["node_id"][0], prep.gpu_codes["gpu_uuid"][0]
        ok = (ts != _NAT) & (node >= 0) & (uuid >= 0)
        t0 = int(ts[ok].min()) // _MINUTE_NS * _MINUTE_NS if ok.any() else 0
        ok &= (ts - t0) % _MINUTE_NS == 0
        minute = (ts[ok] - t0) // _MINUTE_NS
        n_nodes, n_gpus = int(node.max()) + 1, int(uuid.max()) + 1
        n_minutes = int(minute.max()) + 1 if len(minute) else 0
        pairs = np.sort((minute * n_nodes + node[ok]) * n_gpus + uuid[ok])
        pairs = pairs[np.r_[True, pairs[1:] != pairs[:-1]]] if len(pairs) else pairs  # one per distinct GPU and cell
        prep.derived["presence"] = (t0, np.bincount(pairs // n_gpus, minlength=n_minutes * n_nodes)
                                    .reshape(n_minutes, n_nodes))
    return prep.derived["presence"]


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


# hardware_evidence() of a partition without evidence, built once: most partitions have none, and a frame's
# construction costs a millisecond where its copy costs a tenth of that
_NO_EVIDENCE = pd.DataFrame(columns=["region", "node_id", "signals", "detail", "rollout", "lost"])


def hardware_evidence(ctx: PartitionContext) -> pd.DataFrame:
    """One row per node with hardware evidence in the partition (outside maintenance): which independent
    channels saw it (``signals``), the GPUs involved, the change in flight on it, GPU-minutes lost."""
    gpu, node, inv = ctx.gpu, ctx.node, ctx.inventory
    cols = ["region", "node_id", "signals", "detail", "rollout", "lost"]
    signals: dict[str, set] = {}
    detail: dict[str, list[str]] = {}

    def add(n, sig, text):
        signals.setdefault(n, set()).add(sig)
        detail.setdefault(n, []).append(text)

    out_of_window = ~_gpu_maint(ctx)
    if len(gpu):
        xid = _gpu_xid_fault(ctx) & out_of_window
        for n, grp in (gpu[xid].groupby("node_id", observed=True) if xid.any() else ()):
            add(str(n), HW_XID, ", ".join(f"Xid {int(x)}" for x in sorted(set(grp["xid"]))) + f" on {grp['gpu_uuid'].nunique()} GPU(s)")
        dbe = (gpu["ecc_dbe_delta"].to_numpy(dtype=float, na_value=0.0) > 0) & out_of_window
        for n, grp in (gpu[dbe].groupby("node_id", observed=True) if dbe.any() else ()):
            add(str(n), HW_DBE, f"{int(grp['ecc_dbe_delta'].sum())} double-bit ECC error(s)")
    # GPUs the inventory expects that did not report in at least MIN_MISSING_MINUTES minutes, on nodes whose
    # region reports (a silent region is missing data, judged by missing_data)
    if len(inv):
        expected = _per_inventory(ctx, "expected_gpus", lambda i: i.set_index("node_id")["gpus"].astype(float))
        short = _short_gpus(ctx, expected)
        short_minutes = (short > 0).sum(axis=1)
        maint = np.zeros(len(expected), dtype=bool) if _windows_now(ctx) is None else _in_maintenance(
            ctx, pd.Series(expected.index), inv.set_index("node_id")["region"].reindex(expected.index).reset_index(drop=True))
        for i in np.flatnonzero((short_minutes >= MIN_MISSING_MINUTES) & ~maint):
            add(str(expected.index[i]), HW_GONE, f"{int(short[i].max())} GPU(s) not reporting for {int(short_minutes[i])} min")
    if len(node):
        unhealthy = node["health"].isin(["drained", "down"]).to_numpy(dtype=bool)
        state = node[unhealthy & ~_in_maintenance(ctx, node["node_id"], node["region"])] if unhealthy.any() else node.iloc[0:0]
        for n, grp in state.groupby("node_id", observed=True):
            add(str(n), HW_NODE_STATE, f"node {grp['health'].iloc[-1]} outside maintenance")
    inv_nodes = _per_inventory(ctx, "node_set", lambda i: set(i["node_id"]))
    for n, reasons in _failed_on_fault(ctx).items():
        if n in signals or n in inv_nodes:
            add(n, HW_JOB_FAILED, f"{len(reasons)} job(s) failed: {reasons[0]}")
    hw = _state(ctx, "hw_unavailable", ["node_id"])
    for n, v in hw.items():  # the loss tree's verdict: unavailable, corroborated by a fault or a persisting gap
        if n != "unseen" and v >= MIN_MISSING_MINUTES and HW_XID not in signals.get(n, set()):
            add(str(n), HW_PERSISTED, f"{v:.0f} GPU-minutes unavailable since an earlier fault or for 15+ minutes")
    if not signals:
        return _NO_EVIDENCE.copy()
    # rows gone alone is an exporter gap (missing data), and a job killed on a node alone is the scheduler's word
    # for one job (Slurm's NODE_FAIL follows network blips too): each corroborates, neither opens a finding
    keep = [n for n, s in signals.items() if s - {HW_GONE, HW_JOB_FAILED}]
    if not keep:
        return _NO_EVIDENCE.copy()
    region_of = dict(zip(inv["node_id"], inv["region"]))
    if len(gpu):  # a node's region as its GPU rows say (the last row's, as a dict of every row would keep)
        node_code, node_uni = _gpu_codes(ctx, "node_id")
        last = len(node_code) - 1 - np.unique(node_code[::-1], return_index=True)[1]
        last = last[node_code[last] >= 0]
        region_of.update(zip(node_uni[node_code[last]], gpu["region"].astype(object).to_numpy()[last]))
    rollout = _rollout_nodes(ctx)
    return pd.DataFrame({
        "region": [region_of.get(n, "*") for n in keep], "node_id": keep, "signals": [signals[n] for n in keep],
        "detail": ["; ".join(detail[n]) for n in keep], "rollout": [rollout.get(n) for n in keep],
        "lost": [float(hw.get(n, 0.0)) for n in keep],
    }, columns=cols)


def _hardware_severity(signals: set, rollout: str | None) -> str:
    """Page on HW_PAGE_SIGNALS independent direct channels, one of them a fault witness (HW_FAULT: a node
    drained with its GPU rows gone is unavailable, not known broken); a node a driver/kernel/firmware change is rolling
    over is the rollout's (a ticket naming it) unless its ECC counters report double-bit errors, which no
    software change produces."""
    direct = signals & HW_DIRECT
    if len(direct) < HW_PAGE_SIGNALS or not direct & HW_FAULT:
        return "ticket"
    if rollout and HW_DBE not in direct:
        return "ticket"
    return "page"


def _shared(ev: pd.DataFrame, ctx: PartitionContext) -> str:
    """What the nodes of a systemic hardware finding have in common."""
    parts = []
    rollouts = ev["rollout"].dropna()
    if len(rollouts):
        top = rollouts.value_counts()
        parts.append(f"{top.iloc[0]} of them are in the change {top.index[0]}")
    node = ctx.node[ctx.node["node_id"].isin(ev["node_id"])] if len(ctx.node) else ctx.node
    if len(node):
        drv = node.groupby("node_id", observed=True)["driver_version"].last().value_counts()
        parts.append(f"driver {drv.index[0]} on {drv.iloc[0]}")
    skus = ctx.inventory[ctx.inventory["node_id"].isin(ev["node_id"])]["sku"].value_counts()
    if len(skus):
        parts.append(f"SKU {skus.index[0]} on {skus.iloc[0]}")
    return "; ".join(parts) or "the region"


def detect_hardware(ctx: PartitionContext) -> list[Finding]:
    """Node-level GPU faults, each verdict on independent evidence (``hardware_evidence``).

    Page: at least HW_PAGE_SIGNALS independent channels on one node -- a fatal Xid (XID_GPU_FAULT) and its
    GPU's rows gone (Xid 79), a fatal Xid and the double-bit ECC counter (Xid 48), a node drained or down
    outside maintenance and a job killed by it, ... -- and no driver/kernel/firmware change rolling over the
    node (then: a ticket naming the change; the deploy detector judges the change by its cohort).
    Ticket: one channel (a fatal Xid whose GPU stays and whose job survives, a node drained with no fault
    seen), or GPUs still unavailable after an earlier fault. GPU rows missing with nothing else is missing
    data (the missing_data detector), never hardware: exporters drop rows, files get rejected.
    Systemic: when more than SYSTEMIC_NODE_SHARE of a region's nodes (and at least SYSTEMIC_MIN_NODES) have
    hardware evidence in one partition, the region gets one alert that names what they share; it pages only
    on direct evidence on nodes no change is rolling over.
    """
    ev = hardware_evidence(ctx)
    out = []
    if ev.empty:
        return out
    for region, grp in ev.groupby("region"):
        sev = [_hardware_severity(s, r) for s, r in zip(grp["signals"], grp["rollout"])]
        grp = grp.assign(severity=sev)
        nodes = sorted(grp["node_id"])
        region_nodes = int((ctx.inventory["region"] == region).sum()) or len(nodes)
        lost = float(grp["lost"].sum())
        systemic = len(nodes) >= SYSTEMIC_MIN_NODES and len(nodes) > SYSTEMIC_NODE_SHARE * region_nodes
        paging = grp[grp["severity"] == "page"]
        rollouts = sorted(set(grp["rollout"].dropna()))
        if systemic:
            summary = (f"{len(nodes)} of {region_nodes} nodes in {region} show GPU faults at once: one systemic "
                       f"incident ({_shared(grp, ctx)})")
        elif len(paging):
            summary = f"GPU hardware fault in {region} on {', '.join(sorted(paging['node_id']))}"
        elif rollouts:
            summary = f"GPUs unavailable in {region} on {len(nodes)} node(s) during {rollouts[0]}"
        elif all(HW_PERSISTED in s for s in grp["signals"]):
            summary = f"GPUs still unavailable in {region} on {', '.join(nodes)} (after a fault, or for 15+ minutes)"
        else:
            summary = f"Possible GPU hardware fault in {region} on {', '.join(nodes)} (one witness so far)"
        evidence = "; ".join(
            f"{r.node_id}: {r.detail}" + (f" [change in flight: {r.rollout}]" if r.rollout else "")
            for r in grp.sort_values(["severity", "node_id"], ascending=[False, True]).head(12).itertuples())
        evidence += f"; {lost:.0f} GPU-minutes unavailable"
        out.append(Finding("hardware_fault", "hardware", "page" if len(paging) else "ticket", region,
                           f"hardware_fault|{region}", nodes=nodes, lost_gpu_minutes=lost,
                           change_event=None, summary=summary, evidence=evidence))
    return out


def detect_thermal(ctx: PartitionContext) -> list[Finding]:
    g = ctx.gpu
    out = []
    if not (g["temp_c"].to_numpy(dtype=float, na_value=np.nan) >= THERMAL_TEMP_C).any():
        return out  # no GPU at its slowdown temperature
    at_temp = (g["temp_c"] >= THERMAL_TEMP_C).to_numpy(dtype=bool, na_value=False)
    bits = (g["throttle_reasons"].fillna(0).astype("int64") & THERMAL_BITS) > 0
    by_clock = _clock_stepped_down(g, at_temp)
    hot = g[(bits.to_numpy(dtype=bool) & at_temp) | by_clock]
    hot = hot[~_in_maintenance(ctx, hot["node_id"], hot["region"])]
    no_bits = int(by_clock.sum())
    for region, grp in hot.groupby("region"):
        per_node = grp.groupby("node_id").size()
        per_node = per_node[per_node >= MIN_THERMAL_GPU_MINUTES]
        if per_node.empty:
            continue
        nodes = sorted(per_node.index)
        sub = grp[grp["node_id"].isin(nodes)]
        busy = sub["job_id"].notna().any()
        slow = _state(ctx, "slowdown_compute", ["region", "node_id"])
        lost = float(sum(v for (r, n), v in slow.items() if r == region and n in nodes))
        out.append(Finding("thermal_throttle", "hardware", "page" if busy else "ticket", region, f"thermal_throttle|{region}",
                           nodes=nodes, lost_gpu_minutes=lost,
                           summary=f"Thermal throttling in {region} on {', '.join(nodes)}",
                           evidence=f"{int(per_node.sum())} GPU-minutes thermally throttled at up to "
                                    f"{sub['temp_c'].max():.0f} C, SM clock median {sub['sm_clock_mhz'].median():.0f} MHz; "
                                    f"{lost:.0f} GPU-minutes of compute slowdown"
                                    + (f" ({no_bits} of the GPU-minutes from a collector without clock-event reasons: "
                                       f"slowdown temperature and an SM clock under {THERMAL_CLOCK_RATIO:.0%} of the "
                                       "SKU's other busy GPUs)" if no_bits else "")))
    return out


def _clock_stepped_down(g: pd.DataFrame, at_temp: np.ndarray) -> np.ndarray:
    """Rows without clock-event reasons (not exported) at the slowdown temperature whose SM clock is under
    THERMAL_CLOCK_RATIO of the median clock of the same SKU's busy GPUs below it in the partition."""
    missing = g["throttle_reasons"].isna().to_numpy(dtype=bool)
    cand = missing & at_temp & g["job_id"].notna().to_numpy(dtype=bool)
    if not cand.any():
        return np.zeros(len(g), dtype=bool)
    clock = g["sm_clock_mhz"].to_numpy(dtype=float, na_value=np.nan)
    sku = g["sku"].astype(object).to_numpy()
    peers = g["job_id"].notna().to_numpy(dtype=bool) & ~at_temp & np.isfinite(clock)
    ref = pd.Series(clock[peers]).groupby(sku[peers]).median()
    ref_row = pd.Series(sku).map(ref).to_numpy(dtype=float, na_value=np.nan)
    return cand & np.isfinite(ref_row) & (clock < THERMAL_CLOCK_RATIO * ref_row)


def _scope_nodes(scope: str, inventory: pd.DataFrame) -> set[str]:
    if scope in (None, "", "*"):
        return set(inventory["node_id"])
    if scope in set(inventory["region"]):
        return set(inventory.loc[inventory["region"] == scope, "node_id"])
    return {s.strip() for s in str(scope).split(",") if s.strip()}


def detect_deploys(ctx: PartitionContext) -> list[Finding]:
    ch = ctx.changes
    out = []
    if ch is None or ch.empty:
        return out
    window = _ts_slice(ch, ctx.end - DEPLOY_LOOKBACK, ctx.end)  # (a slice of the time-sorted events, not a mask)
    if ctx.prepared is None:
        recent = _rollout_groups(window, ctx.inventory)
    else:  # the same change events and inventory give the same groups: a range computes them once per change
        # (the rows' values as the key; one object array, not a namedtuple per row)
        key = (tuple(window.columns), tuple(map(tuple, window.to_numpy(dtype=object))))
        hit = ctx.prepared.rollouts.get(key)
        if hit is None or hit[0] is not ctx.inventory:
            groups = _rollout_groups(window, ctx.inventory)
            # (the groups' rows kept as the tuples the loop below reads: itertuples costs a millisecond a call)
            hit = ctx.prepared.rollouts[key] = (ctx.inventory, list(groups.itertuples(index=False)))
        recent = hit[1]
    for ev in (recent.itertuples(index=False) if ctx.prepared is None else recent):
        since = max(ev.ts, ctx.end - DEPLOY_WINDOW)
        # a change is judged again every partition for DEPLOY_LOOKBACK: spend the false-alarm rate over those
        # looks (Bonferroni), so a benign deploy does not page by chance hours later; a real regression shows
        # in the first looks, where the bar is highest
        alpha = FAILURE_P / max(1, int(np.ceil((ctx.end - ev.ts) / PARTITION)))
        if ev.kind in ("driver_upgrade", "kernel_upgrade", "firmware_update"):
            f = _node_cohort_failures(ctx, ev, since, alpha)
        elif ev.kind == "framework_release" and pd.notna(ev.to_version):
            f = _framework_cohort(ctx, ev, since, alpha)
        else:
            continue
        if f is not None:
            out.append(f)
    return out


NODE_CHANGE_KINDS = ("driver_upgrade", "kernel_upgrade", "firmware_update")
_VERSION_COLUMN = {"driver_upgrade": "driver_version", "kernel_upgrade": "kernel_version"}


def _rollout_groups(recent: pd.DataFrame, inventory: pd.DataFrame) -> pd.DataFrame:
    """Change events, with the node changes of one rollout merged: events of one kind moving to one version
    (a rolling upgrade announced node by node or batch by batch) are one change, first event's id and time,
    scope the union of their nodes. A rollout judged batch by batch would leave each batch too few jobs to
    test, and the regression would never page."""
    if recent.empty:
        return recent
    node_kind = recent["kind"].isin(NODE_CHANGE_KINDS) & recent["to_version"].notna()
    out = [recent[~node_kind]]
    for _, grp in recent[node_kind].sort_values("ts").groupby(["kind", "to_version"], sort=False):
        first = grp.iloc[[0]].copy()
        nodes = set().union(*(_scope_nodes(s, inventory) for s in grp["scope"]))
        first["scope"] = ",".join(sorted(nodes)) if len(grp) > 1 else first["scope"]
        out.append(first)
    return pd.concat([o for o in out if len(o)], ignore_index=True) if any(len(o) for o in out) else recent.iloc[0:0]


def _node_cohort(ctx: PartitionContext, ev) -> set[str]:
    """The nodes on the change's new version: its scope, and every node whose own telemetry reports the new
    version (the node is the witness of what it runs, whatever the change calendar's scope spelling)."""
    cohort = _scope_nodes(ev.scope, ctx.inventory)
    col = _VERSION_COLUMN.get(ev.kind)
    if col and len(ctx.node) and pd.notna(ev.to_version):
        cohort |= set(ctx.node.loc[ctx.node[col].astype(object) == ev.to_version, "node_id"].astype(object))
    return cohort


def _node_cohort_failures(ctx: PartitionContext, ev, since, alpha: float = FAILURE_P) -> Finding | None:
    # a later change of the same kind to another version on these nodes supersedes this one (e.g. the rollback)
    cohort = _node_cohort(ctx, ev)
    ch = ctx.changes
    later = ch[(ch["ts"] > ev.ts) & (ch["ts"] < ctx.end) & (ch["kind"] == ev.kind) & (ch["to_version"] != ev.to_version)]
    if any(_scope_nodes(s, ctx.inventory) & cohort for s in later["scope"]):
        return None
    ended = _ts_slice(ctx.sched, since, ctx.end, ctx.memo)
    ended = ended[(ended["event"] == "ended").to_numpy(dtype=bool, na_value=False)]
    if ended.empty:
        return None
    on = ended["node_ids"].fillna("").map(lambda s: bool(cohort & set(s.split(","))))
    failed = ended["exit_state"].isin(["failed", "node_fail"])
    a, b = int((on & failed).sum()), int((on & ~failed).sum())
    c, d = int((~on & failed).sum()), int((~on & ~failed).sum())
    if a < MIN_COHORT_FAILURES:
        return None
    rate_new = a / max(a + b, 1)
    rate_old = (c + 0.5) / max(c + d + 1, 1)
    from scipy.stats import fisher_exact  # here: scipy.stats costs every process importing this module ~0.6 s

    p = fisher_exact([[a, b], [c, d]], alternative="greater")[1]
    if p >= alpha or rate_new < FAILURE_RATE_RATIO * rate_old:
        return None
    nodes_hit = sorted(cohort & set(",".join(ended.loc[on & failed, "node_ids"].fillna("")).split(",")))
    reasons = ended.loc[on & failed, "reason"].fillna("").value_counts().head(3)
    region = _region_of(nodes_hit or sorted(cohort), ctx.inventory)
    lost = float(ctx.leaves[(ctx.leaves["state"] == "failure_loss") & ctx.leaves["node_id"].isin(cohort)]["gpu_minutes"].sum()) if len(ctx.leaves) else 0.0
    first_fail = ended.loc[on & failed, "ts"].min()
    onset = (first_fail - ev.ts) / pd.Timedelta(minutes=1)
    return Finding("deploy_regression", "software", "page", region, f"deploy_regression|{ev.event_id}",
                   nodes=sorted(cohort), cohort=f"{ev.kind} {ev.from_version} -> {ev.to_version}", change_event=ev.event_id,
                   lost_gpu_minutes=lost,
                   summary=f"Job failures after {ev.kind} {ev.from_version} -> {ev.to_version} on {len(cohort)} node(s) in {region}",
                   evidence=f"cohort failure rate {rate_new:.0%} ({a}/{a + b} jobs) vs {c / max(c + d, 1):.1%} elsewhere since "
                            f"{since:%H:%M}, Fisher p={p:.1g}; first failure {onset:.0f} min after the change; top reasons: "
                            + "; ".join(f"{k} ({v})" for k, v in reasons.items()))


def _framework_cohort(ctx: PartitionContext, ev, since, alpha: float = FAILURE_P) -> Finding | None:
    rt = ctx.runtime[(ctx.runtime["ts"] >= since) & (ctx.runtime["ts"] < ctx.end) & (ctx.runtime["steps"] > 0)]
    if rt.empty or ctx.meta is None or ctx.meta.empty or ctx.baselines is None or ctx.baselines.empty:
        return None
    rt = rt[["ts", "job_id", "step_time_s"]]  # what the cohorts are judged on (no column below shares a name)
    m = ctx.meta
    # the metadata rows of these jobs only, in their order (the inner merge gives the same rows)
    fast = ctx.prepared is not None and ctx.prepared.meta is m and rt["job_id"].notna().all()
    mine = m.iloc[ctx.prepared.meta_rows(rt["job_id"].unique())] if fast else m
    rows = rt.merge(mine[["job_id", "framework_version", "model_type"]], on="job_id", how="inner")
    # (the GPU rows of these jobs only: the inner merge drops every other job's anyway)
    on_job = ctx.gpu["job_id"].notna().to_numpy(dtype=bool)
    if ctx.prepared is not None:
        job_code, job_uni = _gpu_codes(ctx, "job_id")
        wanted = set(rows["job_id"].astype(object))
        on_job = on_job & np.append(np.array([j in wanted for j in job_uni], dtype=bool), False)[job_code]
    grp = ctx.gpu.loc[on_job, ["ts", "job_id", "sku", "region"]].groupby(["ts", "job_id"])
    place = grp[["sku", "region"]].first()  # per job and minute: its SKU, GPU count and region
    place.insert(1, "gpus", grp.size())
    place = place.reset_index()
    rows = rows.merge(place, on=["ts", "job_id"], how="inner")
    b = ctx.baselines
    if b is None or b.empty:
        return None
    b = b.astype({"model_type": object, "sku": object})[["model_type", "sku", "gpus", "step_time_s"]].rename(columns={"step_time_s": "base"})
    rows = rows.astype({"model_type": object, "sku": object}).merge(b, on=["model_type", "sku", "gpus"], how="inner")
    if rows.empty:
        return None
    rows["ratio"] = rows["step_time_s"] / rows["base"]
    new = rows[rows["framework_version"] == ev.to_version]
    old = rows[rows["framework_version"] != ev.to_version]
    if len(new) < 8 or len(old) < 8:
        return None
    v = judge_cohorts(new, old, metric="ratio", time_col="ts", higher_is_worse=True, effect_floor=STEP_EFFECT_FLOOR,
                      alpha=alpha, start=since)
    if v.verdict != REGRESSION:
        return None
    region = new["region"].mode().iloc[0] if new["region"].nunique() == 1 else "*"
    slow = ctx.leaves.iloc[_leaf_rows(ctx, "slowdown_compute")] if len(ctx.leaves) else ctx.leaves
    lost = float(slow[(slow["framework_version"] == ev.to_version).to_numpy(dtype=bool, na_value=False)]["gpu_minutes"].sum())
    if fast:  # the release's teams, from the range's metadata once per version
        key = ("teams", ev.to_version)
        if key not in ctx.prepared.lookups:
            ctx.prepared.lookups[key] = sorted(m.loc[m["framework_version"] == ev.to_version, "team"].dropna().unique())
        teams = ctx.prepared.lookups[key]
    else:
        teams = sorted(m.loc[m["framework_version"] == ev.to_version, "team"].dropna().unique())
    return Finding("deploy_regression", "software", "page", region, f"deploy_regression|{ev.event_id}",
                   team=",".join(teams) if teams else None, cohort=f"framework {ev.to_version}", change_event=ev.event_id,
                   lost_gpu_minutes=lost,
                   summary=f"Step time regression on {ev.to_version} ({new['job_id'].nunique()} jobs)",
                   evidence=v.describe())


def _region_of(nodes, inventory: pd.DataFrame) -> str:
    regions = set(inventory.loc[inventory["node_id"].isin(nodes), "region"])
    return regions.pop() if len(regions) == 1 else "*"


# the loss-tree states of minutes whose jobs report step progress (where a slowdown can be measured)
MEASURED_STATES = ["productive", "slowdown_data_io", "slowdown_network", "slowdown_checkpoint", "slowdown_compute"]
ALLOC_STATES = ["allocated_idle", "allocated_unproductive", "failure_loss", "slowdown_data_io", "slowdown_network",
                "slowdown_checkpoint", "slowdown_compute", "productive"]


def _slow_nodes(lv: pd.DataFrame, state: str, denominator: pd.Series, rows: np.ndarray | None = None) -> pd.DataFrame:
    """Nodes where ``state`` holds at least NODE_SLOW_SHARE of the denominator GPU-minutes (``rows``: the
    positions of the leaves in ``state``, when known)."""
    slow = lv[lv["state"] == state] if rows is None else lv.iloc[rows]
    slow = slow.groupby(["region", "node_id"])["gpu_minutes"].sum()
    frame = pd.DataFrame({"slow": slow, "den": denominator.reindex(slow.index).fillna(0.0)})
    frame = frame[(frame["slow"] >= NODE_SLOW_MIN_GPU_MINUTES) & (frame["slow"] >= NODE_SLOW_SHARE * frame["den"])]
    return frame.reset_index()


_NO_SLOW_NODES = pd.DataFrame({"region": pd.Series(dtype=object), "node_id": pd.Series(dtype=object),
                               "slow": pd.Series(dtype=float), "den": pd.Series(dtype=float)})


def _no_slow_nodes() -> pd.DataFrame:
    """_slow_nodes() finding none (one shared frame: its readers never modify it)."""
    return _NO_SLOW_NODES


def _may_reach(ctx: PartitionContext, rows: np.ndarray, floor: float) -> bool:
    """Whether some (region, node) of the leaves at ``rows`` can hold ``floor`` GPU-minutes: a cheap,
    conservative pre-check (plain per-node sums, a margin for their rounding) before the exact group-by."""
    if not len(rows):
        return False
    if "leaf_nodes" not in ctx.memo:
        lv = ctx.leaves
        region, node = pd.factorize(lv["region"])[0], pd.factorize(lv["node_id"])[0]
        codes = np.where((region >= 0) & (node >= 0), region.astype(np.int64) * (len(lv) + 1) + node, -1)
        ctx.memo["leaf_nodes"] = (codes, lv["gpu_minutes"].to_numpy(dtype=float, na_value=0.0))
    codes, minutes = ctx.memo["leaf_nodes"]
    c, w = codes[rows], minutes[rows]
    ok = c >= 0
    if not ok.any():
        return False
    sums = np.bincount(np.unique(c[ok], return_inverse=True)[1], weights=w[ok])
    return bool(np.nanmax(sums) >= floor - 1e-6)


# no (region, node) pair: built once (an index is immutable; building an empty MultiIndex costs ~0.5 ms, and most
# partitions have no saturated storage)
_NO_NODES = pd.MultiIndex.from_tuples([], names=["region", "node_id"])


def _saturated_storage(ctx: PartitionContext) -> pd.MultiIndex:
    """(region, node) pairs whose local storage was saturated (NVMe >= 95 % busy) in 3+ minutes of the partition."""
    node = ctx.node
    if node is None or node.empty:
        return _NO_NODES
    saturated = node["nvme_util_pct"].to_numpy(dtype=float, na_value=np.nan) >= 95
    if not saturated.any():
        return _NO_NODES
    hot = node[saturated].groupby(["region", "node_id"], observed=True)["ts"].nunique()
    return hot[hot >= LINK_FAULT_MINUTES].index


def detect_slowdowns(ctx: PartitionContext) -> list[Finding]:
    """Loader wait (data_io) and gradient sync (network) above their baselines, judged per node:
    storage or fabric trouble hits a set of nodes, which a region-wide share would dilute."""
    out = []
    lv = ctx.leaves
    if lv.empty:
        return _faulty_links(ctx, set())
    # the share is of the minutes where a slowdown can be measured (jobs reporting step progress): minutes of
    # uninstrumented jobs cannot show a slowdown and must not dilute one
    # (the denominators only matter where a slowdown can reach its floor, or storage is saturated)
    hot_nodes = _saturated_storage(ctx)
    io_rows, net_rows = _leaf_rows(ctx, "slowdown_data_io"), _leaf_rows(ctx, "slowdown_network")
    io_ok = _may_reach(ctx, io_rows, NODE_SLOW_MIN_GPU_MINUTES)
    net_ok = _may_reach(ctx, net_rows, NODE_SLOW_MIN_GPU_MINUTES)
    if len(hot_nodes) or io_ok or net_ok:
        measured = lv[lv["state"].isin(MEASURED_STATES)]
        per_node = measured.groupby(["region", "node_id"])["gpu_minutes"].sum()
        multi = measured[measured["workload_class"] == "distributed"].groupby(["region", "node_id"])["gpu_minutes"].sum()
    else:
        per_node = multi = pd.Series(dtype=float)
    io_nodes = _slow_nodes(lv, "slowdown_data_io", per_node, io_rows) if io_ok else _no_slow_nodes()
    # storage saturated on several nodes at once (a shared filesystem, a hot dataset) is judged over those nodes
    # together: few of their jobs may report loader time, each node's share alone would be too thin to see
    if len(hot_nodes):
        slow_io = lv[lv["state"] == "slowdown_data_io"].groupby(["region", "node_id"])["gpu_minutes"].sum()
        pooled = pd.DataFrame({"slow": slow_io.reindex(hot_nodes).fillna(0.0), "den": per_node.reindex(hot_nodes).fillna(0.0)})
        pooled = pooled[pooled["slow"] > 0].reset_index()
        for region, grp in pooled.groupby("region"):
            slow, den = grp["slow"].sum(), grp["den"].sum()
            if slow >= NODE_SLOW_MIN_GPU_MINUTES and slow >= NODE_SLOW_SHARE * den:
                io_nodes = pd.concat([io_nodes[io_nodes["region"] != region], grp], ignore_index=True)
    # an open data-loader alert stays open while its storage witness lasts (the loader share of a few
    # instrumented jobs comes and goes around its bar; the incident does not)
    for region in sorted({r for r, _ in hot_nodes} - set(io_nodes["region"])):
        if f"data_io_slowdown|{region}" in ctx.open_keys:
            nodes = sorted(n for r, n in hot_nodes if r == region)
            out.append(Finding("data_io_slowdown", "data_io", "ticket", region, f"data_io_slowdown|{region}", nodes=nodes,
                               summary=f"Storage still saturated in {region} on {len(nodes)} node(s)",
                               evidence=f"NVMe >= 95 % busy on {', '.join(nodes[:8])}; loader wait this partition under "
                                        "the bar (few jobs report it)"))
    for region, grp in io_nodes.groupby("region"):
        nodes = sorted(grp["node_id"])
        sat = ctx.node[(ctx.node["region"] == region) & ctx.node["node_id"].isin(nodes)]
        hot = sat[sat["nvme_util_pct"] >= 95]
        total = float(grp["slow"].sum())
        out.append(Finding("data_io_slowdown", "data_io", "page" if len(hot) else "ticket", region,
                           f"data_io_slowdown|{region}", nodes=nodes, lost_gpu_minutes=total,
                           value=float(total / max(grp["den"].sum(), 1e-9)),
                           summary=f"Data-loader slowdown in {region} on {len(nodes)} node(s)",
                           evidence=f"{total:.0f} GPU-minutes ({total / max(grp['den'].sum(), 1e-9):.0%} of those nodes' "
                                    f"measured training time) lost to loader wait above baseline; storage saturated on "
                                    f"{hot['node_id'].nunique()} node(s) (NVMe >= 95 %, read "
                                    f"{sat['disk_read_mbps'].median() if len(sat) else float('nan'):.0f} MB/s median)"))
    net_nodes = _slow_nodes(lv, "slowdown_network", multi, net_rows) if net_ok else _no_slow_nodes()
    for region, grp in net_nodes.groupby("region"):
        nodes = sorted(grp["node_id"])
        links = ctx.network[(ctx.network["region"] == region) & ctx.network["node_id"].isin(nodes)]
        bad = links[(links["retransmits"].fillna(0) >= LINK_RETRANSMITS) | (links["packet_loss_pct"].fillna(0) >= LINK_LOSS_PCT)]
        # switch-port and node-exporter IB counters have no retransmits: absence is not "0 retransmits"
        retransmits = ("no link telemetry" if links.empty
                       else f"{int(links['retransmits'].fillna(0).sum())} retransmits" if links["retransmits"].notna().any()
                       else "retransmits not exported")
        total = float(grp["slow"].sum())
        bad_nodes = sorted(set(bad["node_id"])) or nodes
        out.append(Finding("network_slowdown", "network", "page" if len(bad) else "ticket", region,
                           f"network_slowdown|{region}", nodes=bad_nodes, lost_gpu_minutes=total,
                           value=float(total / max(grp["den"].sum(), 1e-9)),
                           summary=f"Collective-communication slowdown in {region} on {len(bad_nodes)} node(s)",
                           evidence=f"{total:.0f} GPU-minutes ({total / max(grp['den'].sum(), 1e-9):.0%} of multi-node jobs' "
                                    f"time there) lost to gradient sync above baseline; {bad['link_id'].nunique() if len(bad) else 0} "
                                    f"link(s) with loss up to {links['packet_loss_pct'].max() if len(links) else 0:.2f} % and "
                                    f"{retransmits}"))
    out += _faulty_links(ctx, {n for f in out if f.family == "network" for n in f.nodes})
    return out


def _faulty_links(ctx: PartitionContext, judged: set) -> list[Finding]:
    """Links failing on the port counters while a job uses the node, where no job reports gradient-sync time
    (uninstrumented or unknown jobs: the slowdown cannot be measured, the fault can).

    Page: on one link, packet loss >= LINK_LOSS_PCT AND retransmits >= LINK_RETRANSMITS in the same minute (two
    counters: the link layer's losses and the transport's retries) for LINK_FAULT_MINUTES minutes, on a node
    whose GPUs hold a job. One counter only (e.g. retransmits not exported): a ticket."""
    net = ctx.network
    if net is None or net.empty:
        return []
    if not ((net["packet_loss_pct"].to_numpy(dtype=float, na_value=0.0) >= LINK_LOSS_PCT).any()
            or (net["retransmits"].to_numpy(dtype=float, na_value=0.0) >= LINK_RETRANSMITS).any()):
        return []  # no link over either bar
    net = net[~net["node_id"].isin(judged)]
    loss = net["packet_loss_pct"].fillna(0) >= LINK_LOSS_PCT
    retr = net["retransmits"].fillna(0) >= LINK_RETRANSMITS
    bad = net[loss | retr].assign(both=(loss & retr)[loss | retr])
    if bad.empty:
        return []
    busy_nodes = set(ctx.gpu.loc[ctx.gpu["job_id"].notna(), "node_id"].astype(object)) if len(ctx.gpu) else set()
    per_link = bad.groupby(["region", "node_id", "link_id"], observed=True).agg(
        minutes=("ts", "nunique"), both=("both", "sum"), loss=("packet_loss_pct", "max"), retr=("retransmits", "sum"))
    per_link = per_link[per_link["minutes"] >= LINK_FAULT_MINUTES].reset_index()
    per_link = per_link[per_link["node_id"].isin(busy_nodes)]
    out = []
    for region, grp in per_link.groupby("region"):
        paging = grp[grp["both"] >= LINK_FAULT_MINUTES]
        rows = paging if len(paging) else grp
        nodes = sorted(set(rows["node_id"]))
        out.append(Finding("network_slowdown", "network", "page" if len(paging) else "ticket", region,
                           f"network_slowdown|{region}", nodes=nodes,
                           summary=f"InfiniBand / RoCE link faults in {region} on {len(nodes)} node(s) running jobs",
                           evidence=f"{len(rows)} link(s) failing for {int(rows['minutes'].max())}+ minutes: packet loss up "
                                    f"to {rows['loss'].max():.2f} % and {int(rows['retr'].fillna(0).sum())} retransmits "
                                    + ("(both counters)" if len(paging) else "(one counter: the other is not exported or "
                                       "below its bar)") + "; the jobs there report no gradient-sync time, so the slowdown "
                                    "itself cannot be measured"))
    return out


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


def aged_blocked(ctx: PartitionContext) -> pd.DataFrame:
    """Per region: GPU-minutes idle while jobs that could use them have waited over AGED_WAIT.

    Short waits are normal (and make the loss tree's idle_blocked noisy at 5-minute grain); a healthy
    scheduler does not keep a job waiting for minutes while GPUs it could run on sit idle. A job can
    run on the nodes its queue places on (learned from the placements of the last hours, like a
    Slurm partition's node list) that have as many GPUs free as the queue's smallest waiting request
    (whole free nodes for a request larger than a node); idle GPUs of another pool do not block it.
    Free GPUs of the queue's nodes that no node has enough of, but that together could host the smallest
    waiting job, are fragmentation (``fragmented_gpu_minutes``, included in the blocked total): packing,
    not demand, keeps them idle. A queue with no placement yet is matched against its whole region. A GPU
    freed a moment ago is being placed again: it counts from its second idle minute in a row.
    """
    return pd.DataFrame(_aged_rows(ctx), columns=list(_AgedRow._fields))


_AgedRow = namedtuple("_AgedRow", ["region", "blocked_gpu_minutes", "paid_gpu_minutes", "aged_jobs", "wait_p95_min",
                                   "fragmented_gpu_minutes", "aged_single_gpu_jobs"])


def _count_cells(region: np.ndarray, node: np.ndarray, ts: np.ndarray) -> tuple:
    """The distinct (region, node, ts) triples (codes >= 0) in lexicographic order and the rows of each, as
    np.unique(np.stack([region, node, ts]), axis=1, return_counts=True) gives them: the triple packed into
    one int64 key (ts by its rank, so the order is the same), because np.unique along an axis sorts rows of
    a structured view, several times slower than one sort of integers."""
    if not len(ts):
        return region[:0], node[:0], ts[:0], np.zeros(0, dtype=np.int64)
    t_uni, t_code = np.unique(ts, return_inverse=True)
    n_nodes, n_ts = int(node.max()) + 1, len(t_uni)
    keys, counts = np.unique((region * n_nodes + node) * n_ts + t_code.reshape(-1), return_counts=True)
    pair = keys // n_ts
    return pair // n_nodes, pair % n_nodes, t_uni[keys % n_ts], counts


def _aged_rows(ctx: PartitionContext, waits: bool = True) -> list:
    """aged_blocked()'s rows (_AgedRow), one per region of the inventory (wait_p95_min None unless ``waits``)."""
    minutes = pd.date_range(ctx.start, ctx.end, freq="1min", inclusive="left")
    inv = ctx.inventory
    if ctx.sched is None or ctx.sched.empty or inv.empty:
        return []
    jobs = _jobs_now(ctx)
    reach = None
    paid = _per_inventory(ctx, "paid_gpus", lambda i: i.groupby("region")["gpus"].sum()) * len(minutes)
    mid = (minutes + pd.Timedelta(seconds=30)).values.astype(np.int64)
    one_min = pd.Timedelta(minutes=1).value

    g = ctx.gpu
    no_job = _gpu_codes(ctx, "job_id")[0] < 0
    idle = np.flatnonzero(no_job & ~_gpu_xid_fault(ctx) & ~_gpu_maint(ctx)
                          & ~_gpu_returning(ctx))
    node_code, node_uni = _gpu_codes(ctx, "node_id")
    region_code, region_uni = _gpu_codes(ctx, "region")
    ts = _ns(g["ts"])[idle]
    node_i, region_i = node_code[idle], region_code[idle]
    # a GPU freed a moment ago is being placed again (dispatch takes scheduling cycles; in a saturated pool
    # every job that ends leaves such a gap): a GPU counts as free once it has been idle for AGED_IDLE_MINUTES
    # minutes in a row -- as long as a job may wait before it counts as held back, the same bar on both sides
    # (the partition's first minutes have no minutes before them here and count as sampled)
    minute = (ts - ctx.start.value) // one_min
    gi = g["gpu_index"].to_numpy(dtype=np.int64)[idle]
    span = int(gi.max() - gi.min() + 1) if len(gi) else 1
    gpu_id = np.where(node_i >= 0, node_i * span + (gi - (gi.min() if len(gi) else 0)), -1)
    gpu_minute = gpu_id * (len(minutes) + 1) + minute
    settled = np.ones(len(minute), dtype=bool)
    for k in range(1, AGED_IDLE_MINUTES):
        settled &= (minute < k) | np.isin(gpu_minute - k, gpu_minute)
    keep = settled & (node_i >= 0) & (region_i >= 0)
    # idle GPUs per (region, node, minute), with the node's size
    f_region, f_node, f_ts, free = _count_cells(region_i[keep], node_i[keep], ts[keep])
    free = free.astype(float)
    f_minute = ((f_ts - ctx.start.value) // one_min).astype(int)
    node_size = _per_inventory(ctx, "node_size", lambda i: dict(zip(i["node_id"], pd.to_numeric(
        i["gpus"], errors="coerce").to_numpy(dtype=float, na_value=np.nan))))
    size_of = np.array([node_size.get(n) for n in node_uni], dtype=float)  # (None: NaN)
    size_of[np.isnan(size_of)] = 0.0  # a node outside the inventory (or of unknown size) hosts nothing
    f_size = size_of[f_node] if len(f_node) else np.zeros(0)
    region_pos = {r: i for i, r in enumerate(region_uni)}

    backlog = _window_backlog(ctx)
    rows = []
    for region in paid.index:
        in_r = f_region == region_pos.get(region, -2)
        r_minute, r_node, r_free, r_size = f_minute[in_r], f_node[in_r], free[in_r], f_size[in_r]
        idle_m = np.bincount(r_minute, weights=r_free, minlength=len(minutes)).astype(float)
        blocked_m = np.zeros(len(minutes))
        frag_m = np.zeros(len(minutes))
        aged_jobs = aged_single = 0
        # positions of the region's jobs that may wait, ascending (a queue's jobs are then compared among
        # these few, not over the whole look-back's job table)
        waiting = np.flatnonzero((jobs["region"] == region) & jobs["may_wait"])
        held_until = max(backlog.get(region, _NAT), backlog.get("*", _NAT))
        if held_until != _NAT:  # a recent window's backlog is planned: only jobs submitted after it count
            waiting = waiting[jobs["sub"][waiting] >= held_until]
        w_queue = jobs["queue"][waiting]
        for queue in sorted(set(w_queue)):
            q = waiting[w_queue == queue]
            aged = ((jobs["sub"][q][:, None] <= (mid - AGED_WAIT.value)[None, :])
                    & (jobs["left"][q][:, None] > mid[None, :]))  # jobs x minutes
            if not aged.any():
                continue
            gpus = jobs["gpus"][q][:, None]
            demand = (aged * gpus).sum(axis=0)
            smallest = np.where(aged, gpus, np.inf).min(axis=0)  # the smallest waiting request, per minute
            if reach is None:
                reach = _queue_reach(ctx.placements if ctx.placements is not None else placements(ctx.sched))
            nodes = reach.get(queue)
            on = np.array([n in nodes for n in node_uni], dtype=bool)[r_node] if nodes else np.ones(len(r_node), dtype=bool)
            fm = r_minute[on]
            r = smallest[fm]
            size, fr = r_size[on], r_free[on]
            # a node can host the smallest waiting job when it has that many GPUs free; scattered single GPUs do
            # not block a 4-GPU job (that is fragmentation, its own KPI). A request larger than a node needs whole
            # free nodes, enough of them at once: fewer whole free nodes than it needs are a gang being assembled
            # (a scheduler's reservation drains nodes until the job fits), not capacity it could use now
            whole = fr >= size
            gang_ready = np.bincount(fm, weights=fr * whole, minlength=len(minutes)) >= smallest
            fits = np.where(r <= size, fr >= r, whole & gang_ready[fm])
            usable = np.bincount(fm, weights=fr * fits, minlength=len(minutes))
            blocked_m += np.minimum(usable, demand)
            # fragmentation: no node can host the smallest waiting job, but the queue's free GPUs together could
            # (the fragmentation KPI's definition): idle capacity the scheduler's packing leaves unusable
            free_all = np.bincount(fm, weights=fr, minlength=len(minutes))
            scattered = (usable < smallest) & (free_all >= smallest) & np.isfinite(smallest)
            frag_m += np.where(scattered, np.minimum(free_all - usable, np.maximum(demand - usable, 0)), 0.0)
            held = aged.any(axis=1)
            aged_jobs += int(held.sum())
            aged_single += int((held & (jobs["gpus"][q] <= 1)).sum())
        blocked_m = np.minimum(blocked_m, idle_m)  # queues sharing nodes cannot both use one idle GPU
        frag = float(np.minimum(frag_m, idle_m - blocked_m).sum())
        blocked = float(blocked_m.sum()) + frag
        p95 = _wait_p95(ctx, region) if waits else None
        rows.append(_AgedRow(region, blocked, float(paid[region]), aged_jobs, p95, frag, aged_single))
    return rows


def _wait_p95(ctx: PartitionContext, region: str) -> float:
    """p95 queue wait (minutes) of the region's jobs that left the queue in the partition (NaN: none did)."""
    jobs = _jobs_now(ctx)
    started = ((jobs["region"] == region) & (jobs["left"] >= ctx.start.value) & (jobs["left"] < ctx.end.value)
               & (jobs["sub"] != _NAT))
    waits = pd.to_timedelta(jobs["left"][started] - jobs["sub"][started], unit="ns").total_seconds().to_numpy() / 60
    # (Series.quantile's own computation: numpy's linear percentile of q x 100)
    return float(np.percentile(waits, np.asarray([0.95]) * 100.0)[0]) if len(waits) else np.nan


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


def _queue_reach(placed: pd.DataFrame) -> dict:
    """queue_nodes() of ``placed``, from the categorical codes placements() gives (no string work per row)."""
    if placed is None or placed.empty or not (isinstance(placed["queue"].dtype, pd.CategoricalDtype)
                                              and isinstance(placed["node_id"].dtype, pd.CategoricalDtype)):
        return queue_nodes(placed)
    q, n = placed["queue"].cat.codes.to_numpy(), placed["node_id"].cat.codes.to_numpy()
    ok = (q >= 0) & (n >= 0)
    if not ok.all():
        return queue_nodes(placed)
    seen = np.zeros((len(placed["queue"].cat.categories), len(placed["node_id"].cat.categories)), dtype=bool)
    seen[q, n] = True
    queues, nodes = placed["queue"].cat.categories.astype(object), placed["node_id"].cat.categories.astype(object)
    return {queues[i]: frozenset(nodes[np.flatnonzero(seen[i])]) for i in np.flatnonzero(seen.any(axis=1))}


_NEVER = np.iinfo(np.int64).max
_NAT = np.iinfo(np.int64).min  # NaT as int64 nanoseconds


def _jobs_now(ctx: PartitionContext) -> dict:
    """The job table as known at the partition's end, as arrays: sub / left (int64 ns; a job still waiting
    has left = never), gpus, queue, region, and may_wait (a job that can have waited AGED_WAIT at some minute
    of the partition: submitted AGED_WAIT before its last minute's middle and not gone before its first)."""
    if "jobs_now" in ctx.memo:
        return ctx.memo["jobs_now"]
    if ctx.prepared is not None:
        j = ctx.prepared.jobs_between(ctx.end - ctx.prepared.job_lookback, ctx.end)
        # a queue's region as known then: from the placements a run of this partition alone reads (its look-back),
        # never from placements later in the range (a queue first placed at 06:00 had no region at 04:10)
        regions = (ctx.prepared.regions_as_of(ctx.start - ctx.prepared.job_lookback, ctx.end, j["queue_code"])
                   if "queue_code" in j else None)
        if regions is not None:
            j["region"] = regions
    else:
        sub = ctx.jobs if ctx.jobs is not None else job_table(ctx.sched, ctx.inventory)
        j = _job_arrays(sub)
    first_mid = (ctx.start + pd.Timedelta(seconds=30)).value
    last_mid = (ctx.end - pd.Timedelta(seconds=30)).value
    j["may_wait"] = (j["sub"] <= last_mid - AGED_WAIT.value) & (j["left"] > first_mid) & j["has_queue"]
    ctx.memo["jobs_now"] = j
    return j


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


def detect_scheduling(ctx: PartitionContext) -> list[Finding]:
    """GPUs idle beside jobs that could use them (:func:`aged_blocked`), region by region.

    Page: a pile-up (SCHED_MIN_JOBS jobs waited AGED_WAIT; one fewer after a scheduler change) beside idle GPUs of
    their queues' nodes worth SCHED_PAGE_SHARE of the region's paid GPU-minutes (the lower bar after a change) --
    the scheduler's events (the waits) and the GPU telemetry (the idle GPUs) are the two witnesses -- above the
    region's own share at this hour (SCHED_SEASONAL_MARGIN over its history), outside a maintenance window. Before
    a week of history the weekly pattern is not known, so a page also needs its cause in the evidence: a
    scheduler change in flight that the pile-up followed (it rose above the region's hour before the change and
    its scatter: :func:`_bar_after_change`), or only multi-GPU requests held (capacity in the wrong shape);
    otherwise it is a ticket saying so. Ticket: the same between the ticket and page bars, seasonal, planned, or
    with no cause before a week of history. Never: a queue built by a maintenance window (while it lasts and its
    backlog after).
    """
    out = []
    if ctx.sched is None or ctx.sched.empty or ctx.inventory.empty or not _jobs_now(ctx)["may_wait"].any():
        return out  # no job can have waited AGED_WAIT in the partition: nothing is held back
    ab = _aged_rows(ctx, waits=False)
    lv = ctx.leaves
    blocked_leaf = None
    ch = ctx.changes
    sched_cfg = None  # the scheduler changes of the look-back, once a region passes the first gate
    for r in ab:
        share = r.blocked_gpu_minutes / r.paid_gpu_minutes if r.paid_gpu_minutes else 0.0
        key = f"scheduling_blocked|{r.region}"
        # the loosest bars any scheduler change allows (SCHED_MIN_JOBS - 1 jobs, the ticket bar; half of both
        # to stay open): a region below them is judged no further
        if not (r.aged_jobs >= SCHED_MIN_JOBS - 1 and share >= _LOOSEST_TICKET) and not (
                key in ctx.open_baselines and r.aged_jobs >= 1 and share >= _LOOSEST_TICKET / 2):
            continue
        if sched_cfg is None:
            sched_cfg = ch[(ch["kind"] == "scheduler_config") & (ch["ts"] >= ctx.end - DEPLOY_LOOKBACK) & (ch["ts"] < ctx.end)] if len(ch) else ch
        cfg = sched_cfg[sched_cfg["scope"].isin([r.region, "*"])] if len(sched_cfg) else sched_cfg
        page_bar, jobs = (SCHED_PAGE_SHARE_AFTER_CHANGE, SCHED_MIN_JOBS - 1) if len(cfg) else (SCHED_PAGE_SHARE, SCHED_MIN_JOBS)
        ticket_bar = min(SCHED_TICKET_SHARE, page_bar)
        is_open = key in ctx.open_baselines
        piled_up = r.aged_jobs >= jobs
        # an open alert stays open above half the ticket bar (no flapping); the lifecycle keeps a page a page
        keeps_open = is_open and share >= ticket_bar / 2 and r.aged_jobs >= max(1, jobs // 2)
        if not (piled_up and share >= ticket_bar) and not keeps_open:
            continue
        if blocked_leaf is None:
            rows = _leaf_rows(ctx, "idle_blocked") if len(lv) else ()
            blocked_leaf = lv.iloc[rows].groupby("region")["gpu_minutes"].sum() if len(lv) else pd.Series(dtype=float)
        base, base_from = _history_baseline(ctx.region_history, r.region, ctx.start)
        idle_blocked = blocked_leaf.get(r.region, 0.0) / r.paid_gpu_minutes if r.paid_gpu_minutes else 0.0
        unseasonal = idle_blocked >= base + SCHED_SEASONAL_MARGIN
        # before a week of history the weekly pattern (retrain waves, cron) is not known yet: a pile-up pages only
        # with its cause in evidence (see the constants above SCHED_MIN_JOBS)
        shaped = r.aged_jobs - r.aged_single_gpu_jobs >= jobs and r.aged_single_gpu_jobs < SCHED_MIN_JOBS
        before = _bar_after_change(ctx.region_history, r.region, cfg.iloc[-1]["ts"]) if len(cfg) else None
        change_caused = len(cfg) and (before is None or idle_blocked >= before)
        uncaused = base_from != WEEKLY and not change_caused and not shaped
        planned = _maintenance_in_region(ctx, r.region)
        severity = "page" if piled_up and share >= page_bar and unseasonal and not planned and not uncaused else "ticket"
        base_text = base_from if base_from == NO_HISTORY else f"{base_from} {base:.1%}"
        cfg_text = f"; follows scheduler change {cfg.iloc[-1]['event_id']} at {cfg.iloc[-1]['ts']:%H:%M}" if len(cfg) else ""
        if len(cfg) and not change_caused:
            cfg_text += (f" (not its cause: the pile-up did not rise above {before:.1%}, the hour before it and its "
                         "scatter)" if before == before
                         else " (the hour before it was held by a paged incident: the pile-up predates it)")
        out.append(Finding("scheduling_blocked", "scheduling", severity, r.region, key,
                           lost_gpu_minutes=float(r.blocked_gpu_minutes), baseline=0.0, value=share,
                           change_event=cfg.iloc[-1]["event_id"] if len(cfg) else None,
                           summary=f"GPUs idle while jobs wait in {r.region}",
                           evidence=f"{r.blocked_gpu_minutes:.0f} GPU-minutes ({share:.1%} of paid"
                                    + (f"; {r.fragmented_gpu_minutes:.0f} of them scattered too thinly for the smallest "
                                       "waiting job" if r.fragmented_gpu_minutes >= 1 else "")
                                    + f") idle while {r.aged_jobs} "
                                    f"job(s) of the region's queues waited over {AGED_WAIT.seconds // 60} min; queue wait p95 "
                                    f"{_wait_p95(ctx, r.region):.1f} min; idle_blocked {idle_blocked:.1%} ({base_text}"
                                    f"{'' if unseasonal else ': seasonal, not paged'})"
                                    + (f"; {planned}: planned capacity, not paged" if planned else "")
                                    + (f"; only multi-GPU requests held ({r.aged_single_gpu_jobs} single-GPU): free "
                                       "capacity in the wrong shape" if shaped else "")
                                    + ("; under a week of history and no cause in evidence (no scheduler change it "
                                       "followed; "
                                       f"{r.aged_single_gpu_jobs} single-GPU requests held too: demand, quotas or "
                                       "priorities): not paged" if uncaused else "")
                                    + cfg_text))
    return out


def _recent_windows(ctx: PartitionContext) -> pd.DataFrame:
    """The maintenance windows that ended before this partition and no longer ago than they lasted: the
    windows whose backlog the pool is still working through (see :func:`_window_backlog`). Once per partition,
    from the windows' bounds as int64 once per frame (two detectors ask; each asking built two DatetimeIndexes)."""
    w = ctx.maintenance
    hit = ctx.memo.get("recent_windows")
    if hit is None or hit[0] is not w:  # (kept with the frame it came from: a context given other windows asks anew)
        if w is None or w.empty:
            recent = w.iloc[0:0] if w is not None else pd.DataFrame(columns=["start", "end", "region", "node_ids"])
        else:
            lo, hi = _per_frame(ctx, "maintenance_ns", w, lambda f: (_ns(f["start"]), _ns(f["end"])))
            t = ctx.start.value
            # (a window missing either bound is recent never: pandas' comparisons with NaT are false)
            inside = (lo != _NAT) & (hi != _NAT) & (hi <= t) & (t < hi + (hi - lo))
            # (most partitions follow no window: the frame's empty slice, made once, not a mask's new frame)
            recent = w[inside] if inside.any() else _per_frame(ctx, "maintenance_none", w, lambda f: f.iloc[0:0])
        hit = ctx.memo["recent_windows"] = (w, recent)
    return hit[1]


def _window_backlog(ctx: PartitionContext) -> dict:
    """region (or '*') -> the end (int64 ns) of the latest window of :func:`_recent_windows` there.

    A window drains capacity on purpose. The jobs submitted before it ended queued for what it took away, and
    its nodes come back to the pool one by one (validated, resumed, refilled); until the pool has worked through
    that, idle GPUs beside those jobs are the window's planned aftermath, not a scheduler holding work back.
    For as long again as the window lasted -- the queue built up over the window's length while its nodes were
    out, and they are what it drains onto, so it drains in about that long; the window's own length, on any
    cluster, not a constant -- jobs submitted before its end do not count as held back (:func:`_aged_rows`), nor
    do the idle GPUs of its nodes (:func:`_gpu_returning`). A scheduling fault right after a window still pages:
    the jobs submitted after it pile up beside the region's other idle GPUs like anywhere else."""
    out: dict = {}
    w = _recent_windows(ctx)
    if not len(w):  # (most partitions: no window ended lately)
        return out
    for region, e in zip(np.asarray(w["region"], dtype=object), pd.DatetimeIndex(w["end"])):
        out[region] = max(out.get(region, _NAT), pd.Timestamp(e).value)
    return out


def _gpu_returning(ctx: PartitionContext) -> np.ndarray:
    """Per GPU row: its node was drained by a window of :func:`_recent_windows` (capacity still coming back)."""
    g = ctx.gpu
    w = _recent_windows(ctx)
    if not len(g) or w.empty or "node_ids" not in w.columns:
        return np.zeros(len(g), dtype=bool)
    nodes = {n for ids in w["node_ids"].dropna() for n in str(ids).split(",") if n}
    code, names = _gpu_codes(ctx, "node_id")  # each distinct node looked up once (a missing one: code -1, not drained)
    return np.append(np.array([n in nodes for n in names], dtype=bool), False)[code]


def _maintenance_in_region(ctx: PartitionContext, region: str) -> str | None:
    """The planned window draining part of the region in this partition: planned capacity makes jobs wait, and
    maintenance never pages -- neither does the queue it causes while it lasts. After it, its backlog and its
    returning nodes are left out of the judgement (:func:`_window_backlog`), not the region: a scheduling fault
    right after a window (the suite's Friday incidents start three minutes after one) must still page."""
    w = ctx.maintenance
    if w is None or w.empty:
        return None
    hit = w[(w["start"] < ctx.end) & (w["end"] > ctx.start) & w["region"].astype(object).isin([region, "*"])]
    if hit.empty:
        return None
    first = hit.sort_values("start").iloc[0]
    return f"maintenance window {first['window_id']} ({first['start']:%H:%M}-{first['end']:%H:%M})"


# a change caused a pile-up that rose this many robust standard deviations (MAD x MAD_TO_SIGMA) of the region's
# partitions in the hour before it above their median (and by SCHED_SEASONAL_MARGIN at least): three sigmas, a
# bound on the region's own scatter in that hour, so a wave's ups and downs after a change are not its effect
CHANGE_RISE_SIGMAS = 3.0


def _bar_after_change(hist: pd.DataFrame, region: str, change_ts: pd.Timestamp) -> float | None:
    """The idle_blocked share a pile-up must reach to have followed a change: the median of the region's partitions
    in the hour before the change, plus CHANGE_RISE_SIGMAS of their robust scatter (SCHED_SEASONAL_MARGIN at
    least). A change is the cause of a pile-up that rose above it, not of one already there (a revert after an
    incident, a change in the middle of a retrain wave). None: the region has no history before the change at all
    (nothing says the pile-up predates it); NaN: it has, but none of that hour -- those partitions were held as a
    paged incident (:func:`_history_baseline`'s caller forgets them), so the region was piled up already."""
    if hist is None or hist.empty:
        return None
    h = hist[(hist["region"] == region) & hist["share_idle_blocked"].notna() & (hist["partition_start"] < change_ts)]
    if h.empty:
        return None
    hour = h[h["partition_start"] >= change_ts - pd.Timedelta(hours=1)]["share_idle_blocked"].to_numpy(dtype=float)
    if not len(hour):
        return float("nan")
    mid = float(np.median(hour))
    sigma = MAD_TO_SIGMA * float(np.median(np.abs(hour - mid)))
    return mid + max(SCHED_SEASONAL_MARGIN, CHANGE_RISE_SIGMAS * sigma)


def _history_baseline(hist: pd.DataFrame, region: str, start: pd.Timestamp) -> tuple[float, str]:
    """The region's usual idle_blocked share at this hour, and where it comes from.

    The same hour of the week (+-30 min, 7 days back) once a week of history exists; before that (cold
    start) the median of the same hour on the previous days, and with under two such days the median of the
    trailing two hours. Partitions a scheduling page held are left out by the caller (incidents do not teach
    the baseline).
    """
    if hist is None or hist.empty:
        return 0.0, NO_HISTORY
    h = hist[(hist["region"] == region) & hist["share_idle_blocked"].notna()]
    tod = (h["partition_start"] - h["partition_start"].dt.normalize())
    target = start - start.normalize()
    same_hour = h[((tod - target).abs() <= pd.Timedelta(minutes=30)) & (h["partition_start"] < start - pd.Timedelta(hours=12))]
    last_week = same_hour[same_hour["partition_start"] <= start - pd.Timedelta(days=6, hours=12)]["share_idle_blocked"]
    if len(last_week) >= 6:
        return float(last_week.median()), WEEKLY
    days = same_hour.groupby((same_hour["partition_start"] - target + pd.Timedelta(hours=12)).dt.normalize())["share_idle_blocked"].median()
    if len(days) >= 2:
        return float(days.median()), f"same hour, median of the last {len(days)} days"
    trailing = h[(h["partition_start"] >= start - pd.Timedelta(hours=2)) & (h["partition_start"] < start)]["share_idle_blocked"]
    return (float(trailing.median()), "trailing two hours") if len(trailing) else (0.0, NO_HISTORY)


def detect_no_progress(ctx: PartitionContext) -> list[Finding]:
    """Dummy load (the brief's gaming case), judged on the device, never on missing step metrics.

    A GPU-minute is dummy load when a job holds the GPU busy (gpu_util_pct >= REPORTED_BUSY_UTIL_PCT) while the
    device says it computes nothing: SM and tensor activity idle (gpu_health.metrics.device.device_idle)
    AND power under half the SKU's working reference (device.low_power). Those are two independent
    witnesses (the profiling counters and the power sensor) of the same fact; a job that reports no training
    metrics is ordinary (notebooks, GBDT, uninstrumented batch work, set-up) and is only context here.

    Page: a team's jobs that report no training metrics hold at least NO_PROGRESS_PAGE_GPU_MINUTES such
    GPU-minutes in the partition (batch, distributed or unknown class: a notebook is a person at a keyboard,
    a ticket at most). Ticket: the same GPU-minutes on notebooks; or busy GPUs with one witness only because
    the collector does not export the other (profiling fields are off by default in dcgm-exporter; some
    collectors have no power): the guardrail cannot judge, it says so. Jobs that report training metrics are
    the stall detector's.
    """
    out = []
    if ctx.gpu.empty:
        return out
    has_job = _gpu_codes(ctx, "job_id")[0] >= 0
    if not has_job.any():
        return out
    gpu = ctx.gpu
    reporting = set(ctx.runtime["job_id"].unique())  # (the distinct ids: iterating every row boxes each value)
    job_code, job_uni = _gpu_codes(ctx, "job_id")
    reports = np.array([j in reporting for j in job_uni] + [False], dtype=bool)
    busy = has_job & (gpu["gpu_util_pct"].to_numpy(dtype=float, na_value=np.nan) >= REPORTED_BUSY_UTIL_PCT) & ~reports[job_code]
    if not busy.any():
        return out
    # every finding needs NO_PROGRESS_PAGE_GPU_MINUTES busy GPU-minutes whose device is idle or not reported
    # (the power witness alone counts only where the profiling fields are missing)
    dev_idle, dev_seen = device_idle(gpu["sm_active"].to_numpy(dtype=float, na_value=np.nan)[busy],
                                     gpu["tensor_active"].to_numpy(dtype=float, na_value=np.nan)[busy])
    if int((dev_idle | ~dev_seen).sum()) < NO_PROGRESS_PAGE_GPU_MINUTES:
        return out
    slim = _gpu_slim(ctx)
    g = slim[has_job]
    ref = reference_power(g, ["sku"])
    g = slim[busy]
    idle, dev_known = device_idle(g["sm_active"].to_numpy(dtype=float, na_value=np.nan),
                                  g["tensor_active"].to_numpy(dtype=float, na_value=np.nan))
    low, pow_known = low_power(g, ref, ["sku"])
    if ctx.prepared is not None and ctx.prepared.meta is ctx.meta:
        code, uniq = factorize(g["job_id"])
        team = np.array([ctx.prepared.team_of(j, "team") for j in uniq] + ["unknown"], dtype=object)[code]
        cls = np.array([ctx.prepared.team_of(j, "workload_class") for j in uniq] + ["unknown"], dtype=object)[code]
    else:
        meta = ctx.meta[ctx.meta["job_id"].isin(g["job_id"].unique())] if len(ctx.meta) else ctx.meta
        meta = meta.drop_duplicates("job_id").set_index("job_id") if len(meta) else pd.DataFrame(columns=["team", "workload_class"])
        jobs = g["job_id"].astype(object)
        team = jobs.map(meta["team"]).astype(object).fillna("unknown").to_numpy()
        cls = jobs.map(meta["workload_class"]).astype(object).fillna("unknown").to_numpy()
    both = dev_known & idle & pow_known & low
    one = (dev_known & idle & ~pow_known) | (~dev_known & pow_known & low)
    # only a team with NO_PROGRESS_PAGE_GPU_MINUTES of one kind of evidence can raise a finding: count first
    teams, which = np.unique(team, return_inverse=True)
    counts = [np.bincount(which, weights=w.astype(float), minlength=len(teams))
              for w in (both & (cls != "interactive"), both, one)]
    candidates = set(teams[np.maximum.reduce(counts) >= NO_PROGRESS_PAGE_GPU_MINUTES])
    if not candidates:
        return out
    g = g.assign(team=team, cls=cls, both=both, one=one)
    g = g[np.isin(team, list(candidates))]
    for team, grp in g.groupby("team"):
        dummy = grp[grp["both"]]
        paging = dummy[dummy["cls"] != "interactive"]
        if len(paging) >= NO_PROGRESS_PAGE_GPU_MINUTES:
            severity, rows, why = "page", paging, "SM and tensor activity idle and power near idle at high utilization"
        elif len(dummy) >= NO_PROGRESS_PAGE_GPU_MINUTES:
            severity, rows, why = "ticket", dummy, "notebooks at high utilization with the device idle"
        elif grp["one"].sum() >= NO_PROGRESS_PAGE_GPU_MINUTES:
            rows = grp[grp["one"]]
            severity = "ticket"
            why = ("device activity idle; power not exported" if rows["power_w"].isna().all()
                   else "power near idle; profiling fields (SM / tensor activity) not exported: cannot judge")
        else:
            continue
        region = rows["region"].mode().iloc[0] if rows["region"].nunique() == 1 else "*"
        sm, ten = rows["sm_active"].astype(float), rows["tensor_active"].astype(float)
        out.append(Finding("busy_no_progress", "gaming", severity, region, f"busy_no_progress|{team}", team=team,
                           nodes=sorted(set(rows["node_id"])), lost_gpu_minutes=float(len(rows)),
                           summary=f"Team {team}: GPUs busy with no real work (dummy load)" if severity == "page"
                           else f"Team {team}: busy GPUs that may not be working",
                           evidence=f"{len(rows)} GPU-minutes on {rows['gpu_uuid'].nunique()} GPUs from "
                                    f"{rows['job_id'].nunique()} job(s) reporting no training metrics: {why}; util median "
                                    f"{rows['gpu_util_pct'].median():.0f} %, SM activity "
                                    + (f"median {sm.median():.2f}" if sm.notna().any() else "not exported")
                                    + ", tensor activity " + (f"median {ten.median():.2f}" if ten.notna().any() else "not exported")
                                    + (f", power median {rows['power_w'].median():.0f} W" if rows["power_w"].notna().any()
                                       else ", power not exported")))
    return out


def detect_stalls(ctx: PartitionContext) -> list[Finding]:
    """Training jobs that stopped progressing while they hold their GPUs.

    A stall: a job that trained before (its cumulative step counter is above 0) reports STALL_MINUTES or
    more minutes in a row with no step and no checkpoint, the last of them in the partition. A job still in
    set-up (no step yet) is not stalled. The second witness is the device: the job's GPUs do no compute in
    those minutes (SM/tensor idle, or no kernel at all, or power near idle) -- a hung collective spins one
    kernel at ~100 % utilization on a few SMs, a dead input pipeline leaves the GPU at 0 %. Zero steps on a
    GPU that computes at full power is an evaluation or validation pass: no finding.
    Page when the stalled jobs hold at least STALL_PAGE_GPU_MINUTES with the device confirming; a ticket when
    the collector exports neither profiling fields nor power (one witness).
    """
    rt = ctx.runtime
    out = []
    if rt.empty:
        return out
    # a stall is STALL_MINUTES zero-step minutes of one job at least: without a job that has as many, none
    maybe = ((rt["steps"].to_numpy(dtype=float, na_value=0.0) == 0)
             & (rt["checkpoint_time_s"].to_numpy(dtype=float, na_value=0.0) == 0))
    if maybe.sum() < STALL_MINUTES:
        return out
    codes = factorize(rt["job_id"].to_numpy(dtype=object)[maybe])[0]
    if not (codes >= 0).any() or np.bincount(codes[codes >= 0]).max() < STALL_MINUTES:
        return out
    zero = (rt["steps"] == 0) & (rt["checkpoint_time_s"].fillna(0) == 0)
    # per job: minutes reported after its last progressing minute (a trailing run of zero-step minutes)
    last_ts = rt.groupby("job_id")["ts"].max()
    trained = rt.groupby("job_id")["last_step"].max() > 0
    last_progress = rt[~zero].groupby("job_id")["ts"].max()
    trailing = rt[zero & (rt["ts"] > rt["job_id"].map(last_progress).fillna(pd.Timestamp.min.tz_localize("UTC")))]
    run = trailing.groupby("job_id").size()
    run = run[(run >= STALL_MINUTES) & (last_ts.reindex(run.index) >= ctx.start) & trained.reindex(run.index).fillna(False)]
    if run.empty:
        return out
    since = trailing[trailing["job_id"].isin(run.index)].groupby("job_id")["ts"].min()
    g = ctx.gpu[ctx.gpu["job_id"].isin(run.index)]
    g = g[g["ts"] >= g["job_id"].map(since)]
    if g.empty:
        return out
    ref = reference_power(_gpu_slim(ctx), ["sku"])
    idle, dev_known = device_idle(g["sm_active"].to_numpy(dtype=float, na_value=np.nan),
                                  g["tensor_active"].to_numpy(dtype=float, na_value=np.nan))
    low, pow_known = low_power(g.assign(sku=g["sku"].astype(object)), ref, ["sku"])
    no_kernel = g["gpu_util_pct"].to_numpy(dtype=float) < KERNEL_ACTIVE_UTIL_PCT
    confirms = (dev_known & idle) | (pow_known & low) | no_kernel
    judged = dev_known | pow_known | no_kernel
    g = g.assign(confirms=confirms, judged=judged)
    for region, grp in g.groupby("region"):
        confirmed = grp[grp["confirms"]]
        unknown = grp[~grp["judged"]]
        if len(confirmed):
            rows, basis = confirmed, "the GPUs compute nothing (SM/tensor idle, no kernel or power near idle)"
            severity = "page" if len(confirmed) >= STALL_PAGE_GPU_MINUTES else "ticket"
        elif len(unknown):
            rows, basis, severity = unknown, "profiling fields and power not exported: the device cannot confirm", "ticket"
        else:
            continue  # the GPUs compute at full power: evaluation or validation, not a stall
        js = sorted(set(rows["job_id"]))
        out.append(Finding("training_stall", "software", severity, region, f"training_stall|{region}",
                           nodes=sorted(set(rows["node_id"])), lost_gpu_minutes=float(len(rows)),
                           summary=f"{len(js)} training job(s) hung in {region}",
                           evidence=f"no steps for {int(run.reindex(js).max())}+ minutes after training while holding "
                                    f"{rows['gpu_uuid'].nunique()} GPUs at median {rows['gpu_util_pct'].median():.0f} % "
                                    f"util; {basis} (jobs {', '.join(js[:5])})"))
    return out


def detect_missing_data(ctx: PartitionContext) -> list[Finding]:
    """Missing data, never an incident of the cluster: a ticket at most.

    * a region's collectors silent (under half of its expected GPUs report in MIN_MISSING_MINUTES minutes);
    * GPU-minutes the loss tree put in ``no_data`` on nodes of a reporting region: GPUs or whole nodes
      missing with no fault to explain them (an exporter gap, a rejected file), at least
      MISSING_NODE_GPU_MINUTES on a node;
    * rows a contract rejected (``source_rejects``) for the partition, with the file and the count;
    * sources written empty because their producer was silent past its grace (``source_gaps``: an absent
      exporter or Slurm dump), naming the silent metric family;
    * Finance's cost file of the partition's day or the day before not arrived, quarantined or with rows rejected
      (``cost_rejects``): one ticket per day, naming the file and the reason, until the file lands and the day
      re-runs (its rejects are then gone).
    """
    inv = ctx.inventory
    out = []
    minutes = pd.date_range(ctx.start, ctx.end, freq="1min", inclusive="left")
    silent_regions = set()
    if len(inv):
        exp = _per_inventory(ctx, "paid_gpus", lambda i: i.groupby("region")["gpus"].sum())
        # GPU rows per region and minute of the partition
        region_code, region_uni = _gpu_codes(ctx, "region")
        minute = _gpu_minute(ctx)
        ok = (region_code >= 0) & (minute >= 0)
        rep = np.bincount(region_code[ok] * len(minutes) + minute[ok],
                          minlength=len(region_uni) * len(minutes)).reshape(len(region_uni), len(minutes))
        region_pos = {r: i for i, r in enumerate(region_uni)}
        for region, expected in exp.items():
            row = rep[region_pos[region]] if region in region_pos else np.zeros(len(minutes), dtype=np.int64)
            silent = int((row < 0.5 * expected).sum())
            if silent >= MIN_MISSING_MINUTES:
                silent_regions.add(region)
                out.append(Finding("missing_data", "missing_data", "ticket", region, f"missing_data|{region}",
                                   summary=f"Telemetry missing for {region}",
                                   evidence=f"{silent} of {len(minutes)} minutes with under half of the region's {int(expected)} "
                                            f"GPUs reporting: missing data, not a GPU incident"))
    gaps = _state(ctx, "no_data", ["region", "node_id"])
    if len(gaps):
        gaps = gaps[(gaps >= MISSING_NODE_GPU_MINUTES) & (gaps.index.get_level_values("node_id") != "unseen")]
        for region, grp in gaps.groupby(level="region"):
            if region in silent_regions:
                continue
            nodes = sorted(grp.index.get_level_values("node_id"))
            out.append(Finding("missing_data", "missing_data", "ticket", region, f"missing_data|{region}|nodes", nodes=nodes,
                               summary=f"Telemetry gaps on {len(nodes)} node(s) in {region}",
                               evidence=f"{grp.sum():.0f} GPU-minutes not reported on {', '.join(nodes[:8])}"
                                        f"{' ...' if len(nodes) > 8 else ''} with no fatal Xid, ECC error or unhealthy node "
                                        "state to explain them: missing data (exporter gap or rejected rows), not a GPU fault"))
    rej = ctx.rejects
    if rej is not None and len(rej):
        per_file = rej.groupby(["source", "origin"]).size().sort_values(ascending=False)
        text = "; ".join(f"{src}: {n} row(s) rejected from {origin}" for (src, origin), n in per_file.head(5).items())
        reasons = rej["reason"].astype(str).value_counts().head(3)
        out.append(Finding("missing_data", "missing_data", "ticket", "*", "missing_data|rejects",
                           summary=f"{len(rej)} source row(s) quarantined by their contract",
                           evidence=text + "; top reasons: " + "; ".join(f"{r} ({k})" for r, k in reasons.items())
                                    + ". The rows are in source_rejects; the GPU-minutes they cover are no_data"))
    gaps = ctx.source_gaps
    if gaps is not None and len(gaps):
        out.append(Finding("missing_data", "missing_data", "ticket", "*", "missing_data|sources",
                           summary=f"{gaps['source'].nunique()} source(s) silent: {', '.join(sorted(gaps['source'].unique()))}",
                           evidence="; ".join(f"{r.source}: no {r.missing_family} ({r.reason})" for r in gaps.itertuples())
                                    + ". Written empty so the rest is computed: judgements that need these sources "
                                      "cannot be made for the partition"))
    if ctx.cost_rejects is not None and len(ctx.cost_rejects):
        out += [_cost_day_finding(pd.Timestamp(day), rej) for day, rej in ctx.cost_rejects.groupby("partition_start")]
    return out


def _cost_day_finding(day: pd.Timestamp, rej: pd.DataFrame) -> Finding:
    """The ticket of a day whose cost file was not used whole (not arrived, or quarantined: its money is null) or
    lost rows (priced without them); keyed by the day, so one missing day is one alert however long it lasts."""
    whole = rej[rej["row_index"] == WHOLE_FILE]
    reasons = (whole if len(whole) else rej)["reason"].astype(str).drop_duplicates()
    evidence = "; ".join(reasons.head(3))
    if len(whole):
        summary = f"Finance's cost file for {day:%Y-%m-%d} not arrived or quarantined: the day's money is null"
        evidence += (". Until the file lands and the day re-runs, wasted_spend keeps the day's GPU-hours with the "
                     "money null and the loss tree pays against the last capacity Finance sent: ask Finance (or the "
                     "uploader of its file) for it")
    else:
        summary = f"{len(rej)} row(s) of Finance's cost file for {day:%Y-%m-%d} rejected"
        evidence += ". The day is priced without them until a corrected file lands and the day re-runs"
    return Finding("missing_data", "missing_data", "ticket", "*", f"missing_data|cost_capacity|{day:%Y-%m-%d}",
                   summary=summary, evidence=evidence)


# --- serving SLOs (issue #17) ----------------------------------------------------------------------------------
# The burn-rate windows, factors, minimum-traffic guard and absence rule are gpu_health.metrics.slo's (BURN_WINDOWS,
# MIN_BAD_EVENTS, ABSENT_LOOKBACK): the SRE workbook's multi-window, multi-burn-rate alerts with Sloth's windows.
SLO_FAMILY = "software"          # a model release, an error spike, a capacity shortfall: the serving stack's software
SLO_ABSENT_FAMILY = "missing_data"  # an SLI's series gone: its exporter or scrape, never a serving incident


def _window_text(td: pd.Timedelta) -> str:
    minutes = int(td / pd.Timedelta(minutes=1))
    return f"{minutes // 1440} d" if minutes % 1440 == 0 else f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"


def _release_findings(ctx: PartitionContext) -> list[Finding]:
    """A new model version burning the budget that the version it replaced did not (``release_regression``).

    Judged by :func:`gpu_health.metrics.slo.release_burns` on the slo_version_events rows. Its two witnesses: the
    new version's own fast burn, over its time so far and again in this partition past its warm-up, and the
    contrast with the version before it in the same region (which did not burn, nor does one still serving beside
    it). A model without per-version rows (or without an earlier version to compare) is judged by slo_burn alone."""
    if ctx.slo_versions is None or ctx.slo_versions.empty:
        return []
    from gpu_health.metrics.slo import MIN_BAD_EVENTS, RELEASE_FACTOR, release_burns
    from gpu_health.metrics.slo_catalog import BY_NAME

    out = []
    for _, r in release_burns(ctx.slo_versions, ctx.start).iterrows():
        slo = BY_NAME[r["slo"]]
        interp = (f" The threshold {slo.threshold_s:g} s is no bucket bound: the bad events are interpolated within "
                  f"the bucket, an estimate." if r["interpolated"] else "")
        before = f"{r['burn_before']:.1f}x" if pd.notna(r["burn_before"]) else "no bad events"
        out.append(Finding(
            detector="release_regression", family=SLO_FAMILY, severity=r["severity"], region=r["region"],
            key=f"slo_burn|{r['region']}|{r['model_name']}",  # one incident with the burn alert of the same model
            summary=f"{r['model_name']} {r['model_version']} in {r['region']} burns the error budget of {slo.name} "
                    f"({slo.title}) at {r['burn_since']:.1f}x since its release; {r['previous_version']} did not",
            evidence=f"Version {r['model_version']} serves since {r['since']:%Y-%m-%d %H:%M} UTC: burn rate "
                     f"{r['burn_since']:.1f}x since then and {r['burn_now']:.1f}x in this partition (alert above "
                     f"{RELEASE_FACTOR:g}x in both, each with at least {MIN_BAD_EVENTS} bad events): "
                     f"{r['bad_events']:.0f} bad of {r['total_events']:.0f} events against an objective of "
                     f"{slo.objective:.3%}. The version before it, {r['previous_version']}, burned {before} in the "
                     f"hour before the release, and no version serving beside it burns now: the release is the "
                     f"cause.{interp} Roll back to {r['previous_version']}",
            baseline=float(RELEASE_FACTOR), value=float(r["burn_since"])))
    return out


def detect_slo_burn(ctx: PartitionContext) -> list[Finding]:
    """Serving SLOs burning their error budget (page / ticket by window pair) or whose SLI is absent (ticket);
    a new model version burning it is named first (:func:`_release_findings`).

    Burns are judged by :func:`gpu_health.metrics.slo.evaluate_burns` on the slo_error_budgets rows; the two
    witnesses of a page are the long and the short window over the factor, each with at least
    ``MIN_BAD_EVENTS`` bad events. A threshold inside a histogram bucket is said to be interpolated."""
    release = _release_findings(ctx)
    if ctx.slo_events is None or ctx.slo_events.empty:
        return release
    from gpu_health.metrics.slo import MIN_BAD_EVENTS, evaluate_burns
    from gpu_health.metrics.slo_catalog import BY_NAME

    out = []
    for _, r in evaluate_burns(ctx.slo_events, ctx.start).iterrows():
        slo = BY_NAME[r["slo"]]
        # one alert per model and region: an error spike burns availability and error-rate at once, one incident
        key = f"slo_burn|{r['region']}|{r['model_name']}"
        if r["kind"] == "absent":
            out.append(Finding(
                detector="slo_burn", family=SLO_ABSENT_FAMILY, severity="ticket", region=r["region"], key=key,
                summary=f"{r['model_name']} in {r['region']}: the SLI of SLO {slo.name} ({slo.title}) is absent",
                evidence=f"The series behind {slo.name} reported within the last {_window_text(r['long_window'])} and "
                         f"report nothing in this partition: the SLO cannot be judged. Check the model's exporter and "
                         f"its scrape (and whether the model was retired on purpose)."))
            continue
        budget_left = r["error_budget_remaining"]
        left = f"; error budget remaining over {slo.window}: {budget_left:.0%}" if pd.notna(budget_left) else ""
        interp = (f" The threshold {slo.threshold_s:g} s is no bucket bound of the histogram: the bad events are "
                  f"interpolated linearly within the bucket (Prometheus' rule), an estimate, not a count."
                  if r["interpolated"] else "")
        out.append(Finding(
            detector="slo_burn", family=SLO_FAMILY, severity=r["severity"], region=r["region"], key=key,
            summary=f"{r['model_name']} in {r['region']} burns the error budget of {slo.name} ({slo.title}) at "
                    f"{r['long_burn']:.1f}x over {_window_text(r['long_window'])}",
            evidence=f"Burn rate {r['long_burn']:.1f}x over {_window_text(r['long_window'])} and {r['short_burn']:.1f}x "
                     f"over {_window_text(r['short_window'])} (alert above {r['factor']:g}x in both, each window with "
                     f"at least {MIN_BAD_EVENTS} bad events): {r['bad_events']:.0f} bad of {r['total_events']:.0f} "
                     f"events against an objective of {slo.objective:.3%}{left}.{interp} Look first at the "
                     f"model's versions in serving_slis (a new version serving since the burn started is the suspect: "
                     f"roll it back), then its replicas and queue depth",
            baseline=float(r["factor"]), value=float(r["long_burn"])))
    # the alert of a model merges its findings and reads the first: the release, pages, the fastest burn, absences last
    return release + sorted(out, key=lambda f: (f.severity != "page", f.value is None, -(f.value or 0.0)))


def detect_platform(ctx: PartitionContext) -> list[Finding]:
    """The Kubernetes platform layer's detectors (gpu_health.diagnosis.platform, which imports this module)."""
    from gpu_health.diagnosis.platform import detect_platform as platform_findings
    return platform_findings(ctx)


def detect_convergence(ctx: PartitionContext) -> list[Finding]:
    """Training convergence from the trainer's loss and checkpoints (gpu_health.diagnosis.convergence)."""
    from gpu_health.diagnosis.convergence import detect_convergence as convergence_findings
    return convergence_findings(ctx)


def detect_inventory(ctx: PartitionContext) -> list[Finding]:
    """Telemetry beyond or outside Finance's installed capacity (gpu_health.diagnosis.inventory): tickets."""
    from gpu_health.diagnosis.inventory import detect_inventory as inventory_findings
    return inventory_findings(ctx)


DETECTORS = [detect_hardware, detect_thermal, detect_deploys, detect_slowdowns, detect_scheduling, detect_no_progress,
             detect_stalls, detect_missing_data, detect_slo_burn, detect_platform,
             detect_convergence, detect_inventory]
DETECTORS = F.with_facility(DETECTORS, detect_thermal)  # issue #18: rack cooling / power, change policy


def detect(ctx: PartitionContext) -> list[Finding]:
    """All findings of one partition. A region whose collectors are silent raises only missing_data (a few
    nodes' gaps, rejected rows or a silent source mute nothing: the region's other evidence still stands)."""
    findings = [f for det in DETECTORS for f in det(ctx)]
    silent = {f.region for f in findings if f.key == f"missing_data|{f.region}"}
    return [f for f in findings if f.detector == "missing_data" or f.region not in silent or f.detector == "deploy_regression"]

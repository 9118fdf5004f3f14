"""Scheduling: GPUs idle while jobs that could use them wait (``scheduling_blocked``).

==================  ===========  =====================================================================
detector            family       pages on (the two witnesses) / tickets on
==================  ===========  =====================================================================
scheduling_blocked  scheduling   idle GPUs while jobs that could use them (same queue's nodes) have
                                 waited over 3 minutes, a pile-up of the region's demand, above the
                                 region's seasonal share; with no cause in evidence only on two weeks
                                 of the hour of the week / ticket otherwise, in a maintenance window
==================  ===========  =====================================================================
"""

from collections import namedtuple

import numpy as np
import pandas as pd

from gpu_health.constants import MAD_TO_SIGMA, PARTITION, CauseFamily
from gpu_health.diagnosis.context import (DEPLOY_LOOKBACK, _NAT, PartitionContext, _gpu_codes, _gpu_maint,
                                          _gpu_xid_fault, _job_arrays, gpus_held_by_pods, job_table, _leaf_rows, _ns,
                                          _per_frame, _per_inventory)
from gpu_health.diagnosis.finding import Detector, Finding
from gpu_health.metrics.goodput import BLOCKED_WAIT, placements, queue_nodes
from gpu_health.diagnosis.detectors.scheduling_shape import (CHANGE_ALPHA, CHANGE_REFERENCE,  # noqa: F401
                                                             _NOT_YET_PERSISTED, Demoted, _fisher_greater, _fragmented,
                                                             _shape_blocked, _shape_carry, _shape_persisted,
                                                             _shape_shift, _shape_text, _waits_above)


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
# A level judged on its own against the same hour of the week needs SEASON_WEEKS_TO_PAGE previous weeks of that
# hour: one week gives one sample per weekly slot, which cannot tell a pattern that recurs every week (Monday
# evening's pile-up) from that week's noise; two or three weeks that agree show it recurs and how much it varies
# from week to week. Its bar is then the highest share the region showed at that hour (+-30 min) in those weeks,
# plus the margin: with n earlier samples of the same weekly slot, a new one from the same pattern exceeds all of
# them with probability at most 1/(n + 1) (a rank bound, whatever the distribution of the shares), about 1/27 a
# partition with two weeks' 13 samples each before the margin and the impact floors -- the region's own
# false-alarm budget, which holds on any cluster because it assumes nothing about its level or scatter.
# SEASON_WEEKS weeks are read (the declared history of the loss tree, steps/registry.py), two of them suffice.
SEASON_WEEKS = 3
SEASON_WEEKS_TO_PAGE = 2
SEASON_SLOT = pd.Timedelta(minutes=30)  # the weekly slot: this hour of the week, +-30 min
# the loss tree's history (and the scheduling pages that held it) the step reads: SEASON_WEEKS weeks and the slot
SEASON_HISTORY = pd.Timedelta(days=7 * SEASON_WEEKS) + 2 * SEASON_SLOT
SEASON_SLOT_SAMPLES = 6                 # a week counts once half its slot's 13 partitions are recorded
WEEKLY = "same hour of the week"  # the seasonal baseline once SEASON_WEEKS_TO_PAGE weeks of history exist
LAST_WEEK = "same hour last week"  # one week only: a reference for what is seasonal, no licence to page alone
# with under SEASON_WEEKS_TO_PAGE weeks (cold start) a weekday's pattern (a retrain wave, a cron surge held by
# quotas and fair share) cannot be told from a fault by the level of the pile-up: it pages only with its cause in
# the evidence -- a scheduler change in flight that the pile-up followed, or a pile-up of multi-GPU requests while
# single-GPU requests are not held (fewer than SCHED_MIN_JOBS of them: no pile-up of their own), or a pile-up of
# requests that fit no node while their nodes' free GPUs summed would hold them (fragmentation, judged per request
# size: single-GPU requests a quota holds beside them do not hide it). A single free GPU fits a single-GPU request,
# so capacity in the wrong shape (fragmentation, a packing or gang-placement fault) holds back only larger
# requests; demand, quotas and priorities hold back every size. Both are definitions, not levels, and hold on any
# cluster.
# Enough jobs: the evidence of a page is a pile-up, not a few requests waiting -- at least SCHED_MIN_JOBS jobs
# held and at least SCHED_JOB_SHARE of the region's demand: the jobs its queues took in per partition over the last
# hour (those submitted in it or still waiting when it began, over the hour's partitions). The held jobs are a
# partition's stock, so they are compared with a partition's intake, not with the hour's (a cluster of many short
# jobs passes hundreds an hour through its queues). The same share as the GPU floor (SCHED_PAGE_SHARE): a page
# needs that much of the region's work held back, as it needs that much of its paid capacity idle; on a cluster
# that takes in hundreds of jobs a partition, a few waiting requests are churn. A definition relative to the
# cluster's own demand, not a count tuned to one.
SCHED_JOB_SHARE = SCHED_PAGE_SHARE
DEMAND_HOUR = pd.Timedelta(hours=1)
NO_HISTORY = "no history yet"  # the seasonal baseline before any partition of the region was recorded


def aged_blocked(ctx: PartitionContext) -> pd.DataFrame:
    """Per region: GPU-minutes idle while jobs that could use them have waited over AGED_WAIT.

    Short waits are normal (and make the loss tree's idle_blocked noisy at 5-minute grain); a healthy
    scheduler does not keep a job waiting for minutes while GPUs it could run on sit idle. A job can
    run on the nodes its queue places on (learned from the placements of the last hours, like a
    Slurm partition's node list) that have as many GPUs free as the queue's smallest waiting request
    (whole free nodes for a request larger than a node); idle GPUs of another pool do not block it.
    Fragmentation is judged per request size (:func:`_shape_blocked`): a waiting request that fits no node's
    free GPUs while its queue's nodes' free GPUs summed would hold it is shape-blocked (``shape_blocked_jobs``,
    their ``shape_sizes``, the ``largest_free_block`` one node held meanwhile), and the free GPUs on nodes
    holding fewer than it needs are ``fragmented_gpu_minutes`` (included in the blocked total): packing, not
    demand, keeps them idle -- even while a quota holds the queue's single-GPU requests beside them. A queue with no placement yet is matched against its whole region. A GPU
    freed a moment ago is being placed again: it counts from its second idle minute in a row.
    """
    return pd.DataFrame(_aged_rows(ctx), columns=list(_AgedRow._fields))


_NO_QUEUE = "\x00no queue"  # the queue key of jobs whose events name none (no queue name is this string)
_AgedRow = namedtuple("_AgedRow", ["region", "blocked_gpu_minutes", "paid_gpu_minutes", "aged_jobs", "wait_p95_min",
                                   "fragmented_gpu_minutes", "aged_single_gpu_jobs", "shape_blocked_jobs",
                                   "shape_sizes", "largest_free_block", "held_gpu_minutes"])


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
    free = np.maximum(free.astype(float) - gpus_held_by_pods(ctx, node_uni[f_node] if len(f_node) else [], f_ts), 0.0)
    f_minute = ((f_ts - ctx.start.value) // one_min).astype(int)
    node_size = _per_inventory(ctx, "node_size", lambda i: dict(zip(i["node_id"], pd.to_numeric(
        i["gpus"], errors="coerce").to_numpy(dtype=float, na_value=np.nan))))
    size_of = np.array([node_size.get(n) for n in node_uni], dtype=float)  # (None: NaN)
    size_of[np.isnan(size_of)] = 0.0  # a node outside the inventory (or of unknown size) hosts nothing
    f_size = size_of[f_node] if len(f_node) else np.zeros(0)
    region_pos = {r: i for i, r in enumerate(region_uni)}

    backlog = _window_backlog(ctx)
    # a job with no home region (no queue in its events, or a queue placed across regions) can run on any region's
    # nodes (of its queue's reach): it is judged in each region against that region's nodes, never dropped; a queue
    # never placed yet has no known nodes and holds nothing back
    homeless = pd.isna(jobs["region"])
    roaming = homeless & ~jobs["has_queue"]
    if (homeless & jobs["has_queue"]).any():
        reach = _queue_reach(ctx.placements if ctx.placements is not None else placements(ctx.sched))
        roaming |= homeless & np.array([q in reach for q in jobs["queue"]], dtype=bool)
    rows = []
    for region in paid.index:
        in_r = f_region == region_pos.get(region, -2)
        r_minute, r_node, r_free, r_size = f_minute[in_r], f_node[in_r], free[in_r], f_size[in_r]
        idle_m = np.bincount(r_minute, weights=r_free, minlength=len(minutes)).astype(float)
        blocked_m = np.zeros(len(minutes))
        frag_m = np.zeros(len(minutes))
        held_m = np.zeros(len(minutes))  # the demand the shape-blocked requests hold back (_fragmented's impact)
        aged_jobs = aged_single = shape_jobs = 0
        shape_sizes, shape_block = set(), 0.0
        # positions of the region's jobs that may wait, ascending (a queue's jobs are then compared among
        # these few, not over the whole look-back's job table)
        waiting = np.flatnonzero(((jobs["region"] == region) | roaming) & jobs["may_wait"])
        held_until = max(backlog.get(region, _NAT), backlog.get("*", _NAT))
        if held_until != _NAT:  # a recent window's backlog is planned: only jobs submitted after it count
            waiting = waiting[jobs["sub"][waiting] >= held_until]
        w_queue = np.where(jobs["has_queue"][waiting], jobs["queue"][waiting], _NO_QUEUE)
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
            # not block a 4-GPU job (that is fragmentation: _shape_blocked). A request larger than a node needs whole
            # free nodes, enough of them at once: fewer whole free nodes than it needs are a gang being assembled
            # (a scheduler's reservation drains nodes until the job fits), not capacity it could use now
            whole = fr >= size
            gang_ready = np.bincount(fm, weights=fr * whole, minlength=len(minutes)) >= smallest
            fits = np.where(r <= size, fr >= r, whole & gang_ready[fm])
            shape = _shape_blocked(aged, jobs["gpus"][q], fm, size, fr, len(minutes))
            # the union of the free GPUs the smallest request could use and those stranded for a shape-blocked one
            counted = fits | shape.stranded
            blocked_m += np.minimum(np.bincount(fm, weights=fr * counted, minlength=len(minutes)), demand)
            frag_m += shape.fragmented
            held_m += shape.held
            held = aged.any(axis=1)
            aged_jobs += int(held.sum())
            aged_single += int((held & (jobs["gpus"][q] <= 1)).sum())
            shape_jobs += shape.jobs
            shape_sizes |= shape.sizes
            shape_block = max(shape_block, shape.largest_block)
        blocked_m = np.minimum(blocked_m, idle_m)  # queues sharing nodes cannot both use one idle GPU
        frag = float(np.minimum(frag_m, blocked_m).sum())
        p95 = _wait_p95(ctx, region) if waits else None
        rows.append(_AgedRow(region, float(blocked_m.sum()), float(paid[region]), aged_jobs, p95, frag, aged_single,
                             shape_jobs, tuple(sorted(shape_sizes)), shape_block, float(held_m.sum())))
    return rows



def _wait_p95(ctx: PartitionContext, region: str) -> float:
    """p95 queue wait (minutes) of the region's jobs that left the queue in the partition (NaN: none did)."""
    jobs = _jobs_now(ctx)
    started = ((jobs["region"] == region) & (jobs["left"] >= ctx.start.value) & (jobs["left"] < ctx.end.value)
               & (jobs["sub"] != _NAT))
    waits = pd.to_timedelta(jobs["left"][started] - jobs["sub"][started], unit="ns").total_seconds().to_numpy() / 60
    # (Series.quantile's own computation: numpy's linear percentile of q x 100)
    return float(np.percentile(waits, np.asarray([0.95]) * 100.0)[0]) if len(waits) else np.nan


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
    # (a job whose events name no queue may wait too: _aged_rows matches it against its region's nodes)
    j["may_wait"] = (j["sub"] <= last_mid - AGED_WAIT.value) & (j["left"] > first_mid)
    ctx.memo["jobs_now"] = j
    return j


def detect_scheduling(ctx: PartitionContext) -> list[Finding]:
    """GPUs idle beside jobs that could use them (:func:`aged_blocked`), region by region.

    Page: a pile-up (SCHED_MIN_JOBS jobs waited AGED_WAIT, one fewer after a scheduler change, and SCHED_JOB_SHARE
    of the jobs its queues take in per partition) beside idle GPUs of their queues' nodes worth SCHED_PAGE_SHARE of the
    region's paid GPU-minutes (the lower bar after a change; the GPUs a maintenance window holds or returns are
    out of both) -- the scheduler's events (the waits) and the GPU telemetry (the idle GPUs) are the two witnesses
    -- outside a maintenance window. With its cause in evidence -- a scheduler change in flight that the pile-up
    followed (it rose above the region's hour before the change and its scatter: :func:`_bar_after_change`), or
    capacity in the wrong shape (only multi-GPU requests held, or requests of a size no node has free while the
    free GPUs summed would hold them: :func:`_fragmented`, in this partition and the one before:
    scheduling_shape._shape_persisted) -- it pages above the region's usual share at this
    hour (SCHED_SEASONAL_MARGIN over it); without one, only on SEASON_WEEKS_TO_PAGE weeks of this hour of the week
    and above the highest of them (:func:`_history_baseline`), otherwise it is a ticket saying so. Ticket: the
    same between the ticket and page bars, seasonal, planned, too few jobs, or with no cause before the seasons
    are known. Never: a queue built by a maintenance window (while it lasts and its backlog after).
    """
    out = []
    if ctx.sched is None or ctx.sched.empty or ctx.inventory.empty or not _jobs_now(ctx)["may_wait"].any():
        return out  # no job can have waited AGED_WAIT in the partition: nothing is held back
    ab = _aged_rows(ctx, waits=False)
    lv = ctx.leaves
    blocked_leaf = None
    sched_cfg = None  # the scheduler changes of the look-back, once a region passes the first gate
    for r in ab:
        paid = max(r.paid_gpu_minutes - _window_gpu_minutes(ctx, r.region), 0.0)
        # capacity in the wrong shape costs the demand it holds back (_fragmented's impact, beside the idle GPUs),
        # once a pile-up's worth of requests is shape-blocked (the loosest jobs bar)
        held = r.held_gpu_minutes if r.shape_blocked_jobs >= SCHED_MIN_JOBS - 1 else 0.0
        share = max(r.blocked_gpu_minutes, held) / paid if paid else 0.0
        idle_share = r.blocked_gpu_minutes / paid if paid else 0.0  # (what the evidence's idle GPU-minutes are)
        key = f"scheduling_blocked|{r.region}"
        # the loosest bars any scheduler change allows (SCHED_MIN_JOBS - 1 jobs, the ticket bar; half of both
        # to stay open): a region below them is judged no further
        if not (r.aged_jobs >= SCHED_MIN_JOBS - 1 and share >= _LOOSEST_TICKET) and not (
                key in ctx.open_baselines and r.aged_jobs >= 1 and share >= _LOOSEST_TICKET / 2):
            continue
        if sched_cfg is None:
            sched_cfg = _scheduler_changes(ctx)
        cfg = sched_cfg[_scope_in_region(ctx, sched_cfg["scope"], r.region)] if len(sched_cfg) else sched_cfg
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
        season = _history_baseline(ctx.region_history, r.region, ctx.start)
        idle_blocked = blocked_leaf.get(r.region, 0.0) / r.paid_gpu_minutes if r.paid_gpu_minutes else 0.0
        # with its cause in evidence (see the constants above SCHED_MIN_JOBS) a pile-up above the usual share pages
        shape_now = _fragmented(r, jobs, ticket_bar)
        fragmented = shape_now and _shape_persisted(ctx.carried.get(key))  # (the first shape-blocked partition: a ticket)
        if shape_now and not fragmented:
            share = idle_share  # nor does the demand it holds back page before the shape has lasted
        shaped = (r.aged_jobs - r.aged_single_gpu_jobs >= jobs and r.aged_single_gpu_jobs < SCHED_MIN_JOBS) or fragmented
        # multi-GPU requests waiting longer of late while the same queue's single-GPU requests do not (judged only
        # where a page could follow: a region between the bars is a ticket whatever its cause)
        size_shift = None
        if not shaped and piled_up and share >= page_bar and r.aged_jobs - r.aged_single_gpu_jobs >= jobs:
            size_shift = _shape_shift(_jobs_now(ctx), ctx.end, r.region)
            shaped = size_shift is not None
        before = _bar_after_change(ctx.region_history, r.region, cfg.iloc[-1]["ts"]) if len(cfg) else None
        demoted = None
        if len(cfg) and not (before is None or idle_blocked >= before):
            demoted = _demoted_queue(ctx, r.region, cfg.iloc[-1]["ts"])
        change_caused = bool(len(cfg)) and (before is None or idle_blocked >= before or demoted is not None)
        caused = change_caused or shaped
        # ... without one, only a level above the highest of SEASON_WEEKS_TO_PAGE weeks of this hour of the week
        uncaused = not caused and season.weeks < SEASON_WEEKS_TO_PAGE
        unseasonal = idle_blocked >= season.usual + SCHED_SEASONAL_MARGIN and (
            caused or uncaused or idle_blocked >= season.bar + SCHED_SEASONAL_MARGIN)
        demand = _demand_of_hour(ctx, r.region)
        enough = r.aged_jobs >= SCHED_JOB_SHARE * demand
        planned = _maintenance_in_region(ctx, r.region)
        severity = "page" if (piled_up and enough and share >= page_bar and unseasonal and not planned
                              and not uncaused) else "ticket"
        out.append(Finding("scheduling_blocked", "scheduling", severity, r.region, key,
                           lost_gpu_minutes=float(r.blocked_gpu_minutes), baseline=0.0, value=share,
                           change_event=cfg.iloc[-1]["event_id"] if len(cfg) else None,
                           summary=f"GPUs idle while jobs wait in {r.region}",
                           evidence=_evidence(ctx, r, idle_share, idle_blocked, season, unseasonal, planned, shaped,
                                              uncaused, enough, demand, cfg, change_caused, before,
                                              shape_now, demoted, size_shift)
                           + (_NOT_YET_PERSISTED if shape_now and not fragmented else ""),
                           carry=_shape_carry(r) if shape_now else None))
    return out



def _evidence(ctx, r, share, idle_blocked, season, unseasonal, planned, shaped, uncaused, enough, demand, cfg,
              change_caused, before, fragmented, demoted=None, size_shift=None) -> str:
    """detect_scheduling's description: the evidence a finding rests on, every figure a number (no NaN shown)."""
    if season.source == NO_HISTORY:
        base_text = NO_HISTORY
    else:
        base_text = f"{season.source} {season.usual:.1%}" + (f", highest {season.bar:.1%}" if season.bar == season.bar else "")
    wait = _wait_p95(ctx, r.region)
    cfg_text = f"; follows scheduler change {cfg.iloc[-1]['event_id']} at {cfg.iloc[-1]['ts']:%H:%M}" if len(cfg) else ""
    if demoted is not None:
        cfg_text += (f" (its cause: {demoted.above} of {demoted.jobs} jobs of {demoted.queue} since it waited longer "
                     f"than that queue's median of the hour before (counted alike), against {demoted.others_above} of "
                     f"{demoted.others} of the other queues, Fisher p={demoted.p:.1g})")
    if len(cfg) and not change_caused:
        cfg_text += (f" (not its cause: the pile-up did not rise above {before:.1%}, the hour before it and its "
                     "scatter)" if before == before
                     else " (the hour before it was held by a paged incident: the pile-up predates it)")
    return (f"{r.blocked_gpu_minutes:.0f} GPU-minutes ({share:.1%} of paid"
            + (f"; {r.fragmented_gpu_minutes:.0f} of them on nodes holding fewer than a waiting request needs"
               if r.fragmented_gpu_minutes >= 1 else "")
            + f") idle while {r.aged_jobs} "
            f"job(s) of the region's queues waited over {AGED_WAIT.seconds // 60} min"
            + (f" (of {demand:.0f} its queues take in per partition: too few for a pile-up, not paged)" if not enough else "")
            + (f"; queue wait p95 {wait:.1f} min" if wait == wait else "; no queue wait recorded (no job started)")
            + f"; idle_blocked {idle_blocked:.1%} ({base_text}{'' if unseasonal else ': seasonal, not paged'})"
            + (f"; {planned}: planned capacity, not paged" if planned else "")
            + (_shape_text(r) if fragmented else
               f"; capacity in the wrong shape: {size_shift.above} of {size_shift.jobs} jobs of {size_shift.queue} that "
               f"left it since {size_shift.onset:%H:%M} waited longer since then than that class's median of the hour "
               f"before (counted alike), against {size_shift.others_above} of {size_shift.others} of its "
               f"single-GPU jobs, Fisher p={size_shift.p:.1g}" if size_shift is not None else
               f"; only multi-GPU requests held ({r.aged_single_gpu_jobs} single-GPU): free "
               "capacity in the wrong shape" if shaped else "")
            + (f"; under {SEASON_WEEKS_TO_PAGE} weeks of this hour of the week and no cause in evidence (no scheduler "
               f"change it followed; {r.aged_single_gpu_jobs} single-GPU requests held too: demand, quotas or "
               "priorities): not paged" if uncaused else "")
            + cfg_text)


def _scheduler_changes(ctx: PartitionContext) -> pd.DataFrame:
    """The scheduler configuration changes of the DEPLOY_LOOKBACK before the partition's end, in time order."""
    ch = ctx.changes
    if not len(ch):
        return ch
    return ch[(ch["kind"] == "scheduler_config") & (ch["ts"] >= ctx.end - DEPLOY_LOOKBACK) & (ch["ts"] < ctx.end)]


def _scope_in_region(ctx: PartitionContext, scope: pd.Series, region: str) -> np.ndarray:
    """Per change scope (a region, '*', null, or comma-separated node ids as contracts.md allows; a scheduler's
    configuration may also name its queues): it reaches the region -- by name, everywhere, through one of its nodes
    (the inventory's region of each) or one of its queues (the region its jobs run in)."""
    node_region = _per_inventory(ctx, "node_region", lambda i: dict(zip(i["node_id"].astype(object),
                                                                         i["region"].astype(object))))
    j = _jobs_now(ctx)
    queues = set(j["queue"][j["region"] == region])
    out = []
    for sc in np.asarray(scope, dtype=object):
        if not isinstance(sc, str) or sc.strip() in ("", "*", region):
            out.append(True)
            continue
        out.append(any(node_region.get(n.strip()) == region or n.strip() in queues for n in sc.split(",")))
    return np.array(out, dtype=bool)


def _demand_of_hour(ctx: PartitionContext, region: str) -> float:
    """The jobs the region's queues took in per partition over the DEMAND_HOUR before the partition's end: those
    submitted in it or submitted before and still waiting when it began, over the hour's partitions
    (SCHED_JOB_SHARE's denominator)."""
    j = _jobs_now(ctx)
    lo = (ctx.end - DEMAND_HOUR).value
    mine = (j["region"] == region) & j["has_queue"] & (j["sub"] != _NAT) & (j["sub"] < ctx.end.value)
    return int((mine & ((j["sub"] >= lo) | (j["left"] > lo))).sum()) * (PARTITION / DEMAND_HOUR)


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
    for regions, e in zip(_window_regions(ctx, w), pd.DatetimeIndex(w["end"])):
        for region in regions or ("*",):
            out[region] = max(out.get(region, _NAT), pd.Timestamp(e).value)
    return out


def _window_regions(ctx: PartitionContext, w: pd.DataFrame) -> list:
    """Per window of ``w``: the regions it drains (None: every region). Its ``region`` when it names one; a window
    whose region is null or '*' but that names its nodes drains the regions those nodes are in (the inventory's);
    one naming neither drains every region (as maintenance_mask matches it). A node the inventory does not know
    leaves the window's region unknown: every region, so a planned window never pages for want of a name."""
    node_region = _per_inventory(ctx, "node_region", lambda i: dict(zip(i["node_id"].astype(object),
                                                                         i["region"].astype(object))))
    out = []
    for region, ids in zip(np.asarray(w["region"], dtype=object),
                           np.asarray(w["node_ids"] if "node_ids" in w.columns else [None] * len(w), dtype=object)):
        if isinstance(region, str) and region not in ("", "*"):
            out.append(frozenset([region]))
            continue
        nodes = [n.strip() for n in str(ids).split(",") if n.strip()] if isinstance(ids, str) else []
        named = {node_region.get(n) for n in nodes if n != "*"}
        out.append(None if not nodes or "*" in nodes or None in named else frozenset(named))
    return out


def _window_gpu_minutes(ctx: PartitionContext, region: str) -> float:
    """GPU-minutes of the region's nodes that a window holds in this partition, or that are coming back from one
    (:func:`_recent_windows`): capacity out of the pool on purpose, out of the paid denominator too (its idle GPUs
    and the jobs it held are out of the numerator). A window naming no nodes holds the region's every node."""
    w = ctx.maintenance
    if w is None or w.empty:
        return 0.0
    lo, hi = _per_frame(ctx, "maintenance_ns", w, lambda f: (_ns(f["start"]), _ns(f["end"])))
    now = (lo != _NAT) & (hi != _NAT) & (lo < ctx.end.value) & (hi > ctx.start.value)
    recent = _recent_windows(ctx)
    if not now.any() and not len(recent):  # (most partitions: no window holds or returns capacity)
        return 0.0
    inv = ctx.inventory
    total = 0.0
    back = set(recent.index)
    w = w[now | w.index.isin(back)]
    for (i, row), regions in zip(w.iterrows(), _window_regions(ctx, w)):
        if regions is not None and region not in regions:
            continue
        lo, hi = pd.Timestamp(row["start"]), pd.Timestamp(row["end"])
        if pd.isna(lo) or pd.isna(hi):
            continue
        ids = row["node_ids"] if "node_ids" in w.columns else None
        named = [n.strip() for n in str(ids).split(",") if n.strip()] if isinstance(ids, str) else []
        named = named if "*" not in named else []
        # returning nodes, for as long again as the window lasted: the named ones, as _gpu_returning leaves out
        # their idle GPUs (a window naming no node returns the region as a whole: it is judged again at once)
        until = hi + (hi - lo) if i in back and named else hi
        minutes = (min(until, ctx.end) - max(lo, ctx.start)) / pd.Timedelta(minutes=1)
        if minutes <= 0:
            continue
        mine = inv[inv["region"] == region]
        if named:
            mine = mine[mine["node_id"].isin(named)]
        total += minutes * float(pd.to_numeric(mine["gpus"], errors="coerce").fillna(0).sum())
    return total


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
    now = ((w["start"] < ctx.end) & (w["end"] > ctx.start)).to_numpy(dtype=bool)
    if not now.any():
        return None
    # (a window with a null or '*' region that names its nodes is of those nodes' regions: _window_regions)
    mine = np.array([r is None or region in r for r in _window_regions(ctx, w[now])], dtype=bool)
    hit = w[now][mine]
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


def _demoted_queue(ctx: PartitionContext, region: str, change_ts: pd.Timestamp) -> Demoted | None:
    """The region's queue a scheduler change demoted (see CHANGE_ALPHA), or None: the queue whose jobs since the
    change waited above its own hour-before median significantly more often than the other queues' jobs did.

    A wait counted from the change cannot exceed the time since it: a queue whose jobs of the hour before usually
    waited longer (median of their whole waits) could never be above its median yet, while one that waits less
    could be half the time -- the split would name the short-wait queue whatever happened. Such a queue is not
    judged until the time since the change exceeds its median, neither as the demoted queue nor among the others.
    (Its jobs still waiting count as soon as they are above it: a demotion holds a queue's jobs, and counting only
    those that left would hide it for as long as it lasts.) The hour before must be the configuration the change
    replaced as the cluster ran it: when another scheduler change of the region falls in it (the change is a
    revert, or a second step of a rollout), that hour shows the earlier change's doing, not the queues' usual
    waits -- a queue the reverted change favoured waits again as it used to, which is no demotion -- and no queue
    is judged against it. The split against the other queues is not enough on its own: a change that lets one
    queue through faster makes it lopsided too. The queue's own jobs must wait above their median more often than
    half -- what a median is for a queue that waits as it did (binomial, the same budget) -- so a queue is demoted
    by what its own jobs show. Both tests count a submission batch once (scheduling_shape.BATCH): jobs submitted
    together wait together."""
    from scipy.stats import binomtest  # here: scipy.stats costs every process importing this module ~0.6 s

    tc = pd.Timestamp(change_ts).value
    if ctx.end.value <= tc or _reconfigured_before(ctx, region, pd.Timestamp(change_ts)):
        return None
    j = _jobs_now(ctx)
    now = ctx.end.value
    ref = ((j["region"] == region) & j["has_queue"] & (j["sub"] != _NAT) & (j["left"] >= tc - CHANGE_REFERENCE.value)
           & (j["left"] < tc))
    wait, queue = (j["left"] - j["sub"])[ref], np.asarray(j["queue"], dtype=object)[ref]
    late = {q for q in set(queue) if np.median(wait[queue == q]) >= now - tc}  # not judged yet (see above)
    key = np.array([None if q in late else q for q in j["queue"]], dtype=object)
    counts = _waits_above(j, now, region, key, tc, tc - CHANGE_REFERENCE.value, after_only=True, per_batch=True)
    if len(counts) < 2:
        return None  # no other queue to tell the change from the region's hour
    best = None
    for q, (a, n, surge) in counts.items():
        ao = sum(c[0] for k, c in counts.items() if k != q)
        no = sum(c[1] for k, c in counts.items() if k != q)
        p = _fisher_greater(a, n, ao, no)
        bar = CHANGE_ALPHA / len(counts)
        if (not surge and p < bar and (best is None or p < best.p)
                and binomtest(a, n, 0.5, alternative="greater").pvalue < bar):
            best = Demoted(q, a, n, ao, no, p)
    return best


def _reconfigured_before(ctx: PartitionContext, region: str, change_ts: pd.Timestamp) -> bool:
    """Another scheduler configuration change reaching the region fell in the CHANGE_REFERENCE before ``change_ts``."""
    ch = ctx.changes
    if ch is None or not len(ch):
        return False
    prior = ch[(ch["kind"] == "scheduler_config") & (ch["ts"] >= change_ts - CHANGE_REFERENCE) & (ch["ts"] < change_ts)]
    return bool(len(prior)) and bool(_scope_in_region(ctx, prior["scope"], region).any())


Season = namedtuple("Season", ["usual", "bar", "source", "weeks"])


def _history_baseline(hist: pd.DataFrame, region: str, start: pd.Timestamp) -> Season:
    """The region's usual idle_blocked share at this hour, the bar a level must pass to page on its own (NaN:
    no such bar yet), where they come from and how many weeks of this hour of the week were recorded.

    The same hour of the week (+-SEASON_SLOT in each of the SEASON_WEEKS weeks before): with SEASON_WEEKS_TO_PAGE
    weeks, usual is the median of their samples and the bar their highest (see the constants); with one week,
    that week's median is what is seasonal, with no bar. Before a week (cold start) the median of the same hour
    on the previous days, and with under two such days the median of the trailing two hours. Partitions a
    scheduling page held are left out by the caller (incidents do not teach the baseline).
    """
    if hist is None or hist.empty:
        return Season(0.0, np.nan, NO_HISTORY, 0)
    h = hist[(hist["region"] == region) & hist["share_idle_blocked"].notna()]
    weeks = []
    for k in range(1, SEASON_WEEKS + 1):
        at = start - pd.Timedelta(days=7 * k)
        week = h[(h["partition_start"] - at).abs() <= SEASON_SLOT]["share_idle_blocked"]
        if len(week) >= SEASON_SLOT_SAMPLES:
            weeks.append(week.to_numpy(dtype=float))
    if len(weeks) >= SEASON_WEEKS_TO_PAGE:
        samples = np.concatenate(weeks)
        return Season(float(np.median(samples)), float(samples.max()), f"{WEEKLY}, {len(weeks)} weeks", len(weeks))
    if weeks:
        return Season(float(np.median(weeks[0])), np.nan, LAST_WEEK, 1)
    tod = (h["partition_start"] - h["partition_start"].dt.normalize())
    target = start - start.normalize()
    same_hour = h[((tod - target).abs() <= SEASON_SLOT) & (h["partition_start"] < start - pd.Timedelta(hours=12))]
    days = same_hour.groupby((same_hour["partition_start"] - target + pd.Timedelta(hours=12)).dt.normalize())["share_idle_blocked"].median()
    if len(days) >= 2:
        return Season(float(days.median()), np.nan, f"same hour, median of the last {len(days)} days", 0)
    trailing = h[(h["partition_start"] >= start - pd.Timedelta(hours=2)) & (h["partition_start"] < start)]["share_idle_blocked"]
    return Season(float(trailing.median()), np.nan, "trailing two hours", 0) if len(trailing) else \
        Season(0.0, np.nan, NO_HISTORY, 0)


RUNBOOKS = {
    CauseFamily.SCHEDULING.value:
        "Revert the latest scheduler configuration change; check priorities, quotas, backfill and "
        "fragmentation (free GPUs vs the smallest pending job). Runbook: docs/runbooks.md#scheduling",
}
DETECTORS = [
    Detector(detect_scheduling, emits=(("scheduling_blocked", CauseFamily.SCHEDULING.value),),
             needs=("sched", "jobs", "placements", "inventory", "changes", "leaves", "gpu", "maintenance",
                    "region_history", "open_baselines", "carried", "kube_pods")),
]

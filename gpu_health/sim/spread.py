"""Fragmentation as a scheduler makes it: single-GPU jobs spread onto the free GPUs of multi-GPU slots.

A scheduler change that spreads small jobs (least-allocated scoring, Slurm's least-loaded-node selection) places
each single-GPU job on the node with the most free GPUs: the nodes that just freed for a whole-node or multi-node
job. Once a few GPUs of each such node are busy, no node is whole any more; the GPUs left free sit in pieces
smaller than the multi-GPU requests that wait, while the free GPUs summed would hold them. The multi-GPU job
next in line for a slot waits until the small jobs on it have left -- and while the change lasts, the small jobs
that end are replaced by others, so a slot is whole again only after it. Small requests do not wait: they are
what fills the pieces.

In the lane model (cluster.py), a ``fragmentation`` incident does this on the multi-GPU lanes of its scope
(``batch`` slices of two GPUs or more, ``distributed`` groups of whole nodes): from the first moment a lane is
free during the incident, single-GPU jobs take the spill lanes of its GPUs -- ``magnitude`` per node, and at least
so many that the GPUs the hit lanes leave free on a node are fewer than its pool's smallest multi-GPU request
(at most all of the node's but one: a piece stays free) -- one job after another while the incident lasts; the
lane's next job, submitted as it would have been, starts once they have all ended. The spread jobs are short
(at most the pool's median single-GPU duration) and none starts after the incident: when the change is reverted
the pieces coalesce and the held jobs start within tens of minutes. Every draw is keyed by the incident, the
node or lane and the spill lane, so the plan of any window shows the same spill jobs and the same held job.
"""

import numpy as np
import pandas as pd

from gpu_health.sim import hashing as H
from gpu_health.sim.clock import to_s

# field salts (apart from jobs.py's)
F_SPILL_AT, F_SPILL_N, F_SPILL_DUR, F_SPILL_GAP, F_SPILL_CLEAR = range(300, 305)
MAX_CHAIN = 200  # single-GPU jobs one spill GPU runs in one incident, at most (a bound on the loop, not a model)


def _hit_lanes(scen, inc, sel: pd.DataFrame) -> np.ndarray:
    """Which of the pool's lanes (``sel``) the incident spreads small jobs onto: multi-GPU lanes of its scope."""
    hit = sel["gpus"].to_numpy() >= 2
    if inc.region:
        hit &= sel["region"].to_numpy() == inc.region
    if inc.node_ids:
        nodes = set(inc.node_ids)
        hit &= np.array([bool(nodes & set(ns)) for ns in sel["node_ids"]], dtype=bool)
    return hit


def _smallest_request(scen, inc, pool: str) -> int:
    """The smallest multi-GPU request of ``pool`` in the incident's scope: the spread jobs on a pool's nodes are that
    pool's queue's (its partition's) small jobs, so a piece that fits its smallest multi-GPU request is capacity
    that request could use, not fragmentation."""
    lanes = scen.cluster.lanes
    lanes = lanes[lanes["pool"] == pool]
    return int(lanes["gpus"].to_numpy()[_hit_lanes(scen, inc, lanes)].min())


def _spill_gpus(scen, n: int, inc, first_free: pd.Series, smallest: int) -> tuple[np.ndarray, np.ndarray]:
    """(host lane, spill lane) per GPU that single-GPU jobs take on the nodes of the lanes of ``first_free`` (when
    each frees in the incident): ``magnitude`` per node (its fraction drawn per node) and at least so many that the
    GPUs those lanes leave free on a node are fewer than ``smallest`` (the smallest multi-GPU request that may
    wait for them: :func:`_smallest_request`), at most all but one -- a spread scheduler places each small job on
    the node with the most free GPUs, so what stays free is ~one piece per node, never a block a waiting request
    fits. The piece is on the node's first lane to free (the scheduler tops the node up to it from then on): the
    lanes that free later fill first."""
    g = scen.cluster.gpus
    spill = scen.cluster.spill_lane
    host, out = [], []
    rows = g[g["lane"].isin(set(first_free.index.tolist()))]
    rows = rows.assign(freed=rows["lane"].map(first_free).to_numpy())
    for _node, grp in rows.groupby("node_id", sort=True):
        whole = int(np.floor(inc.magnitude))
        extra = H.uniform(scen.seed, F_SPILL_N, n, int(grp["gpu_row"].min())) < inc.magnitude - whole
        c = min(len(grp) - 1, max(whole + int(extra), len(grp) - (smallest - 1)))
        picked = grp.sort_values(["freed", "lane", "gpu_index"], ascending=False).iloc[:max(c, 0)]
        host.extend(picked["lane"].astype(int).tolist())
        out.extend(spill[picked["gpu_row"].to_numpy()].tolist())
    return np.asarray(host, dtype=np.int64), np.asarray(out, dtype=np.int64)


def spread_holds(scen, pool: str, sel: pd.DataFrame, L: np.ndarray, ep_start: np.ndarray, gap: np.ndarray,
                 dur: np.ndarray, small, dispatch_mean_s: float):
    """The gaps of ``pool``'s lanes (``sel``; ``L``, ``ep_start``, ``gap``, ``dur``: build_plan's lane x epoch x job
    arrays) with each hit lane's first free gap during a fragmentation incident stretched until the single-GPU jobs
    spread onto it have left, how much each gap was stretched (``held``: the next job's extra wait), and those jobs
    (build_plan's columns; ``small``: the PoolModel their durations follow). (gap, None, []) when none applies."""
    if pool not in ("batch", "distributed"):
        return gap, None, []
    held = np.zeros_like(gap)
    spills = []
    for n, inc in enumerate(scen.incidents):
        if inc.kind != "fragmentation":
            continue
        s, e = to_s(inc.start), to_s(inc.end)
        hit = _hit_lanes(scen, inc, sel)
        freed = ep_start + np.cumsum(gap + dur, axis=2) - dur - gap  # when the lane frees before each job
        over = hit[L] & (freed < e) & (freed + gap > s)
        if not over.any():
            continue
        lanes = sel["lane"].to_numpy()
        # the lane's first free moment in the incident (over its epochs): the small jobs arrive then
        first_free = pd.Series(np.maximum(freed[over], s)).groupby(lanes[L][over]).min()
        at = first_free.to_numpy() + H.exponential(scen.seed, F_SPILL_AT, n, first_free.index.to_numpy()) * dispatch_mean_s
        first_free = pd.Series(at.astype(np.int64), index=first_free.index)
        first_free = first_free[first_free < e]
        smallest = _smallest_request(scen, inc, pool)
        host, spill = _spill_gpus(scen, n, inc, first_free, smallest)
        if not len(spill):
            continue
        rows, clear = _chains(scen, n, host, spill, first_free.reindex(host).to_numpy(), e, small, dispatch_mean_s, pool)
        spills.append(rows)
        # the lane's next job starts once every spill job on it has ended (and the scheduler's next pass)
        lane_clear = pd.Series(clear).groupby(host).max()
        cleared = lane_clear + H.exponential(scen.seed, F_SPILL_CLEAR, n, lane_clear.index.to_numpy()) * dispatch_mean_s
        c = np.full(len(lanes), -1.0)
        c[np.searchsorted(lanes, cleared.index.to_numpy())] = cleared.to_numpy()
        # only the first free gap of each lane and epoch in the incident: the job after it starts after the incident
        first = over & (np.cumsum(over, axis=2) == 1) & (c[L] >= 0)
        new_gap = np.where(first, np.maximum(gap, c[L] - freed), gap)
        held += new_gap - gap
        gap = new_gap
    if not spills:
        return gap, None, []
    return gap, held, spills


def _chains(scen, n: int, host: np.ndarray, spill: np.ndarray, t0: np.ndarray, e: int, small,
            dispatch_mean_s: float, pool: str) -> tuple[pd.DataFrame, np.ndarray]:
    """The single-GPU jobs each spill lane runs from ``t0`` (one after another, a dispatch gap apart, while the
    incident lasts: a spread scheduler refills a piece as soon as it frees) and when each spill lane's last one
    ends. Rows in build_plan's columns, submitted as they start (small requests do not wait), to the queue of the
    host lanes' ``pool`` (their partition's small jobs)."""
    seed = scen.seed
    t = t0.astype(float) + H.exponential(seed, F_SPILL_GAP, n, spill, -1) * dispatch_mean_s
    last_end = np.full(len(spill), -1.0)
    parts = []
    for i in range(MAX_CHAIN):
        live = t < e
        if not live.any():
            break
        # short-to-median single-GPU jobs: the ones a spread scheduler places in a moment's piece (backfill's
        # candidates); their chains end with the incident, so the held slots clear within one median after it
        d = np.clip(H.lognormal(seed, small.dur_median_s, small.dur_sigma, F_SPILL_DUR, n, spill, i),
                    small.dur_min_s, small.dur_median_s)
        end = t + d
        gap_next = H.exponential(seed, F_SPILL_GAP, n, spill, i) * dispatch_mean_s
        parts.append(pd.DataFrame({
            "lane": spill[live], "epoch": np.int64(to_s(scen.incidents[n].start) // 86_400),
            "k": np.int64(1000 * (n + 1) + i), "start_s": t[live].astype(np.int64), "end_s": end[live].astype(np.int64),
            "gap_s": gap_next[live], "queued": False, "dispatch_s": gap_next[live], "held_s": 0.0, "pool": pool}))
        last_end = np.where(live, end, last_end)
        t = np.where(live, end + gap_next, t)
    return pd.concat(parts, ignore_index=True), last_end.astype(np.int64)

"""Queue state from the scheduler events: the queue table, pending GPUs, placements and queues' regions."""

import numpy as np
import pandas as pd

from gpu_health.codes import factorize
from gpu_health.constants import PARTITION
from gpu_health.metrics.goodput.states import QUEUE_REGION_SHARE, SCHED_LOOKBACK


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
    # ids are hashed once for both group-bys, the result is groupby's
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

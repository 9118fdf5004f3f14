"""Jobs' attributes and reporting as a partition's own run knows them."""

from typing import NamedTuple

import numpy as np
import pandas as pd

from gpu_health.codes import factorize, unique_ints
from gpu_health.constants import MINUTE, PARTITION, PARTITION_MINUTES
from gpu_health.metrics.goodput.grid import _codes
from gpu_health.metrics.goodput.states import JOB_ATTRIBUTE_LOOKBACK, REPORTING_MEMORY
from gpu_health.timestamps import as_utc


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

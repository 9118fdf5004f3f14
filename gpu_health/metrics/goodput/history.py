"""The scheduler history of a range, derived once for its chunks, and the blocked share of idle GPUs."""

import numpy as np
import pandas as pd

from gpu_health.codes import factorize
from gpu_health.metrics.goodput.jobs import QueueEvents, job_lookup, submitted_ns
from gpu_health.metrics.goodput.queues import (_pending_sweep, _queue_regions_of, pending_gpus, placement_events,
                                               queue_regions, queue_table)


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

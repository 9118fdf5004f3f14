"""Scheduling KPIs: queue wait, SLA attainment, blocked requests and fragmentation."""

import numpy as np
import pandas as pd

from gpu_health.constants import MINUTE, PARTITION_FREQ
from gpu_health.contracts.models import WORKLOAD_CLASSES
from gpu_health.metrics.kpis.context import PENDING_GRACE, QUANTILE, UNKNOWN, _Context, _node_minutes, _raw, _spells


def _queue_wait_p95(ctx: _Context) -> pd.DataFrame:
    ev = ctx.events
    started = ctx.window(ev)
    started = started.loc[started["event"] == "started", ["job_id", "ts"]].astype({"job_id": object})
    if started.empty:
        return pd.DataFrame()
    opens = ev.loc[ev["event"].isin(["submitted", "requeued"]), ["job_id", "ts"]].astype({"job_id": object})
    s = pd.merge_asof(started.sort_values("ts"), opens.rename(columns={"ts": "open"}).sort_values("open"),
                      left_on="ts", right_on="open", by="job_id", direction="backward")
    if ctx.pending is not None and len(ctx.pending):
        carried = ctx.pending.drop_duplicates("job_id", keep="last")
        s["open"] = s["open"].fillna(s["job_id"].map(carried.set_index("job_id")["submitted_at"]))
    if len(ctx.jobs):
        s["open"] = s["open"].fillna(s["job_id"].map(ctx.jobs["submitted_at"]))
    wait = ((s["ts"] - s["open"]).dt.total_seconds()).clip(lower=0)
    d = pd.DataFrame({"p": s["ts"].dt.floor(PARTITION_FREQ), "workload_class": ctx.job_attr(s["job_id"], "workload_class"),
                      "wait": wait})
    grouped = d.groupby(["p", "workload_class"], sort=False)
    out = grouped.agg(denominator=("wait", "count"), n=("wait", "size")).reset_index()
    # every group's quantile in one sort, not one Series.quantile call per group (group codes follow out's rows)
    out["value"] = _group_quantile(grouped.ngroup().to_numpy(), d["wait"].to_numpy(dtype=float), len(out), QUANTILE)
    out["covered"] = out["denominator"]
    out["numerator"] = np.nan
    out["kpi"] = "queue_wait_p95"
    return out


def _group_quantile(codes: np.ndarray, values: np.ndarray, groups: int, q: float) -> np.ndarray:
    """Per group code 0..groups-1: the ``q`` quantile of its non-NaN ``values`` (NaN when it has none), computed
    exactly as ``Series.quantile(q)`` computes it (numpy's linear method: virtual index (n - 1) * q between the
    sorted neighbours, numpy's lerp), so that one sort of all groups returns the same floats bit for bit."""
    out = np.full(groups, np.nan)
    keep = ~np.isnan(values) & (codes >= 0)  # (-1: a row no group holds)
    codes, values = codes[keep], values[keep]
    if not len(values):
        return out
    order = np.lexsort((values, codes))
    codes, values = codes[order], values[order]
    n = np.bincount(codes, minlength=groups)
    first = np.concatenate([[0], np.cumsum(n)[:-1]])
    has = n > 0
    qq = np.true_divide(np.asarray([q]) * 100.0, 100)[0]  # pandas passes q as a percentile, numpy divides it back
    virtual = (n[has] - 1) * qq
    prev = np.floor(virtual)
    nxt = prev + 1
    top = virtual >= n[has] - 1  # at or past the last value: the last value
    prev_i = np.where(top, n[has] - 1, prev).astype(np.int64) + first[has]
    next_i = np.where(top, n[has] - 1, nxt).astype(np.int64) + first[has]
    a, b = values[prev_i], values[next_i]
    gamma = virtual - np.where(top, -1.0, prev)  # (numpy's gamma; a == b there, so it does not matter)
    diff = b - a
    lerp = a + diff * gamma
    lerp = np.where(gamma >= 0.5, b - diff * (1 - gamma), lerp)
    out[has] = lerp
    return out


def _sla_attainment(ctx: _Context) -> pd.DataFrame:
    jobs = ctx.jobs
    if not len(jobs) or jobs["sla_deadline"].isna().all():
        return pd.DataFrame()
    deadline = jobs["sla_deadline"].dropna()
    ev = ctx.events.astype({"job_id": object})
    ev = ev[ev["job_id"].isin(deadline.index)]
    ended = ev[ev["event"] == "ended"]
    ended = ended.assign(deadline=ended["job_id"].map(deadline))
    # ended at or before the deadline: counted when it ends
    on_time = ctx.window(ended)
    on_time = on_time[on_time["ts"] <= on_time["deadline"]]
    outcomes = [pd.DataFrame({"ts": on_time["ts"], "job_id": on_time["job_id"],
                              "met": (on_time["exit_state"] == "completed").to_numpy()})]
    # a deadline inside the window with the job still alive (running or pending) and not ended by then: missed
    due = deadline[(deadline >= ctx.start) & (deadline < ctx.end)]
    if len(due):
        ended_by = ended[ended["ts"] <= ended["deadline"]]["job_id"].unique()
        due = due[~due.index.isin(ended_by)]
        alive = set(ended.loc[ended["ts"] > ended["deadline"], "job_id"])
        g = ctx.gpu.loc[ctx.gpu["allocated"], ["ts", "job_id"]]
        g = g[g["job_id"].isin(due.index)]
        last_seen = g.groupby("job_id")["ts"].max()
        alive |= set(last_seen.index[last_seen >= due.reindex(last_seen.index).dt.floor("1min")])
        spells = _spells(ctx.events, ctx.pending)
        spells = spells[spells["job_id"].isin(due.index)]
        at = spells["job_id"].map(due)
        alive |= set(spells.loc[(spells["open"] <= at) & (spells["close"] > at), "job_id"])
        missed = due[due.index.isin(list(alive))]
        outcomes.append(pd.DataFrame({"ts": missed.to_numpy(), "job_id": missed.index.to_numpy(), "met": False}))
    outcomes = [o for o in outcomes if len(o)]
    if not outcomes:
        return pd.DataFrame()
    o = pd.concat(outcomes, ignore_index=True)
    if o.empty:
        return pd.DataFrame()
    o["ts"] = pd.to_datetime(o["ts"], utc=True)
    d = pd.DataFrame({"p": o["ts"].dt.floor(PARTITION_FREQ), "workload_class": ctx.job_attr(o["job_id"], "workload_class"),
                      "met": o["met"].astype(bool)})
    return _raw(d, "sla_attainment", ["workload_class"], numerator=("met", "sum"), denominator=("met", "size"),
                n=("met", "size"))


def _blocked_requests(ctx: _Context) -> dict[str, np.ndarray]:
    """Per workload class, per minute of the window: the smallest request (GPUs) among the class's
    jobs pending for at least PENDING_GRACE (inf: none blocked)."""
    minutes = pd.date_range(ctx.start, ctx.end, freq="1min", inclusive="left")
    M = len(minutes)
    s = _spells(ctx.events, ctx.pending)
    s = s[(s["close"] - s["open"]) > PENDING_GRACE]
    cls = pd.Series(ctx.job_attr(s["job_id"], "workload_class"), index=s.index)
    if ctx.pending is not None and "workload_class" in ctx.pending and len(s):
        carried = ctx.pending.drop_duplicates("job_id", keep="last")
        known = s["job_id"].map(carried.set_index("job_id")["workload_class"].astype(object))
        cls = cls.where(cls != UNKNOWN, known.fillna(UNKNOWN))
    classes = sorted(set(WORKLOAD_CLASSES) | set(cls))
    out = {c: np.full(M, np.inf) for c in classes}
    if s.empty or not M:
        return out
    origin = minutes[0]
    lo = np.ceil(((s["open"] + PENDING_GRACE) - origin) / MINUTE).to_numpy().clip(0, M).astype(np.int64)
    close = s["close"].clip(upper=ctx.end + MINUTE)
    hi = np.ceil((close - origin) / MINUTE).to_numpy().clip(0, M).astype(np.int64)  # minute t pending if t < close
    gpus, cls = s["gpus"].to_numpy(), cls.to_numpy()
    for c in classes:
        best = out[c]
        for size in np.unique(gpus[cls == c]):  # few distinct sizes: coverage by difference arrays
            m = (cls == c) & (gpus == size) & (hi > lo)
            if not m.any():
                continue
            diff = np.zeros(M + 1)
            np.add.at(diff, lo[m], 1)
            np.add.at(diff, hi[m], -1)
            cover = np.cumsum(diff[:M]) > 0
            best = np.where(cover & (best > size), size, best)
        out[c] = best
    return out


def _fragmentation(ctx: _Context) -> pd.DataFrame:
    g = ctx.gpu
    if g.empty:
        return pd.DataFrame()
    dims = ["region", "sku"]
    if ctx.pending is None:  # jobs pending from before the window are invisible: never a false zero
        agg = g.groupby(["p", *dims], sort=False, observed=True).size().rename("n").reset_index()
        return pd.concat([agg.assign(workload_class=c) for c in WORKLOAD_CLASSES], ignore_index=True).assign(
            kpi="fragmentation", numerator=np.nan, denominator=np.nan, covered=0.0)
    free = (g["schedulable"] & ~g["allocated"]).to_numpy(dtype=float)
    nm = _node_minutes(g, free, ctx.ts_codes, ctx.node_codes, len(ctx.node_uni))
    minute = ((nm["ts"] - ctx.start) // MINUTE).to_numpy().astype(np.int64)
    size, fr = nm["size"].to_numpy(dtype=float), nm["free"].to_numpy()
    out = []
    for cls, req in _blocked_requests(ctx).items():
        r = req[minute]
        # a request up to a node's size needs that many free GPUs on one node; a bigger one, whole free nodes
        cannot = np.where(r <= size, fr < r, (fr > 0) & (fr < size))
        stranded = pd.Series(np.where(np.isfinite(r) & cannot, fr, 0.0), index=nm.index)
        agg = nm.assign(stranded=stranded).groupby(["p", *dims], sort=False).agg(
            numerator=("stranded", "sum"), denominator=("ts", "nunique"), n=("size", "sum")).reset_index()
        out.append(agg.assign(workload_class=cls))
    return pd.concat(out, ignore_index=True).assign(kpi="fragmentation")

"""The window's rows prepared once for every KPI (:class:`_Context`), and the helpers the KPI families share."""

import numpy as np
import pandas as pd
from pandas._libs import lib

from gpu_health.codes import factorize, first_rows, is_missing, unique_ints
from gpu_health.constants import PARTITION_FREQ, PARTITION_NS, POWER_BITS, SLOW_THROTTLE_BITS, THERMAL_BITS
from gpu_health.contracts.models import empty_frame
from gpu_health.metrics.goodput import BLOCKED_WAIT
from gpu_health.metrics.kpi_catalog import DIMENSIONS
from gpu_health.timestamps import as_utc

STAR = "*"
UNKNOWN = "unknown"
UTC_NS = pd.DatetimeTZDtype("ns", "UTC")
MIN_COVERAGE = 0.5  # share of a slice's observations that must report a needed field
PENDING_GRACE = BLOCKED_WAIT  # pending longer than a scheduling cycle or two: blocked (as the scheduling detector)
QUANTILE = 0.95
FAILED_EXITS = ["failed", "node_fail", "timeout"]
UNSCHEDULABLE = ["drained", "down"]
OUT_COLUMNS = ["partition_start", "kpi", *DIMENSIONS, "value", "numerator", "denominator", "unit", "status"]


def _utc(ts) -> pd.Timestamp:
    ts = pd.Timestamp(ts)
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def _utc_values(ts: pd.Series) -> pd.DatetimeIndex:
    """A tz-aware column as a UTC DatetimeIndex without a round trip through Timestamp objects."""
    return pd.DatetimeIndex(ts.to_numpy(dtype="datetime64[ns]")).tz_localize("UTC")


def _obj(s: pd.Series) -> pd.Series:
    """``s`` as Python objects, None where missing (one pass: to_numpy's na_value, not astype then where; a text
    column with nothing missing is recognised in one C pass and taken as it is)."""
    values = np.asarray(s)  # (a text column's own objects; to_numpy would look for missing values in Python first)
    if not (values.dtype == object and lib.is_string_array(values, skipna=False)):
        values = s.to_numpy(dtype=object, na_value=None)
    return pd.Series(values, index=s.index, name=s.name)


class _Context:
    """The window's rows, prepared once: GPU-minutes with schedulability, team and class; job placement
    per partition; node -> region / sku; the job attribute table; each partition's region x SKU inventory."""

    def __init__(self, frames, goodput_states, start, end, cost, lookup, baseline, pending, inventory=None):
        self.start, self.end = start, end
        self.partitions = pd.date_range(start, end, freq=PARTITION_FREQ, inclusive="left")
        f = {name: frames[name] if frames.get(name) is not None else empty_frame(name)
             for name in ("gpu_telemetry", "node_telemetry", "network_telemetry", "scheduler_events",
                          "job_runtime_metrics", "job_metadata")}
        self.events = f["scheduler_events"]
        self.goodput_states = goodput_states
        self.cost, self.baseline, self.pending = cost, baseline, _normalize_pending(pending)
        self.jobs = _job_table(f["job_metadata"], lookup)

        gpu = f["gpu_telemetry"]
        node = f["node_telemetry"]
        # node -> region / sku, from every row given (history included)
        nmap = pd.concat([gpu[["node_id", "region", "sku"]].drop_duplicates("node_id"),
                          node[["node_id", "region", "sku"]].drop_duplicates("node_id")], ignore_index=True)
        nmap = nmap.astype(object).drop_duplicates("node_id").set_index("node_id")
        self.node_region, self.node_sku = nmap["region"], nmap["sku"]

        g = self.window(gpu)
        # (distinct GPUs: inventory_excess; a frame without the column counts none)
        self.uuid_codes = (factorize(g["gpu_uuid"].to_numpy())[0] if "gpu_uuid" in g
                           else np.full(len(g), -1, dtype=np.int64))
        g = pd.DataFrame({
            "ts": _utc_values(g["ts"]), "node_id": _obj(g["node_id"]).to_numpy(),
            "region": _obj(g["region"]).to_numpy(), "sku": _obj(g["sku"]).to_numpy(),
            "job_id": _obj(g["job_id"]).to_numpy(),
            "util": g["gpu_util_pct"].to_numpy(dtype=float),
            "sm": g["sm_active"].to_numpy(dtype=float, na_value=np.nan),
            "tensor": g["tensor_active"].to_numpy(dtype=float, na_value=np.nan),
            "power": g["power_w"].to_numpy(dtype=float, na_value=np.nan),
            "throttle": g["throttle_reasons"].to_numpy(dtype=float, na_value=np.nan),
            "dbe": g["ecc_dbe_delta"].to_numpy(dtype=float, na_value=np.nan),
            "xid": g["xid"].to_numpy(dtype=np.int64),
        })
        # integer codes of the rows' minutes, nodes and jobs: the joins and group-bys below run on them
        ts_ns = g["ts"].to_numpy(dtype="datetime64[ns]").view("int64")
        g["p"] = _floor_ns(ts_ns, PARTITION_NS)  # (ts.dt.floor(PARTITION_FREQ), in integer arithmetic)
        g["allocated"] = ~is_missing(g["job_id"])
        nw = self.window(node)
        bad = nw.loc[nw["health"].isin(UNSCHEDULABLE), ["ts", "node_id"]].astype({"node_id": object})
        self.ts_codes, ts_uni = pd.factorize(ts_ns)
        self.node_codes, self.node_uni = factorize(g["node_id"].to_numpy(), use_na_sentinel=False)
        if len(bad):  # (minute, node) pairs whose node is drained or down
            b_ns = bad["ts"].to_numpy(dtype="datetime64[ns]").view("int64")
            bt = pd.Index(ts_uni).get_indexer(b_ns)
            bn = pd.Index(self.node_uni).get_indexer(bad["node_id"].to_numpy())
            width = len(self.node_uni) + 1
            bad_pairs = (bt.astype(np.int64) * width + bn)[(bt >= 0) & (bn >= 0)]
            g["schedulable"] = ~np.isin(self.ts_codes.astype(np.int64) * width + self.node_codes, bad_pairs)
        else:
            g["schedulable"] = True
        # job -> team / class of allocated rows
        alloc = g["allocated"].to_numpy()
        j_codes, j_uni = factorize(g["job_id"].to_numpy())
        # the rows' job codes (-1: no job) and each job's team, kept for the KPIs that join or group by them
        self.job_codes, self.job_uni = j_codes, np.asarray(j_uni, dtype=object)
        per_job = {col: (pd.Series(self.job_uni).map(self.jobs[col]).fillna(UNKNOWN).to_numpy(dtype=object)
                         if len(self.jobs) else np.full(len(self.job_uni), UNKNOWN, dtype=object))
                   for col in ("team", "workload_class")}
        for col, of_job in per_job.items():
            values = np.full(len(g), None, dtype=object)
            values[alloc] = of_job[j_codes[alloc]]
            g[col] = values
        self.job_team = per_job["team"]

        # job placement per partition (so a partition's rows never depend on its neighbours):
        # region, sku and the GPUs of the signature (most GPUs held in a minute)
        self.placement = _placement(g, alloc, ts_ns, j_codes, j_uni)
        self.gpu = g
        # integer codes of the rows' partition, region and SKU (-1: no region / SKU): the region x SKU KPIs are
        # sums over one grouping of them (_region_sku_sums), not one group-by of 1.7 M strings a day each
        self.p_codes, self.p_uni = pd.factorize(g["p"].to_numpy(dtype="datetime64[ns]").view("int64"))
        self.region_codes, self.region_uni = factorize(g["region"].to_numpy())
        self.sku_codes, self.sku_uni = factorize(g["sku"].to_numpy())
        self.region_sku = None  # built on first use
        self.node = nw
        self.network = self.window(f["network_telemetry"])
        self.runtime = self.window(f["job_runtime_metrics"])
        self.inventory = self._inventory(nw, inventory)
        self.job_minutes = None  # built on first use

    def window(self, df: pd.DataFrame, col: str = "ts") -> pd.DataFrame:
        inside = ((df[col] >= self.start) & (df[col] < self.end)).to_numpy()
        return df if inside.all() else df[inside]

    def _inventory(self, node, segments) -> pd.DataFrame:
        """The region x SKU pairs of each partition (p, region, sku): its GPU rows', its node rows', the
        cost_capacity rows of its day and its node inventory's (``segments``: (start, end, inventory) runs of
        partitions, the inventory as known when each closed); a missing region or SKU is None, as in the rows.
        Per partition, so that a partition's rows are the same whether it is computed alone (the sensor's run)
        or in a day's run."""
        ns = len(self.sku_uni) + 1  # (code 0: no SKU)
        width = (len(self.region_uni) + 1) * ns
        p_pair = np.unique(self.p_codes.astype(np.int64) * width
                           + (self.region_codes.astype(np.int64) + 1) * ns + (self.sku_codes + 1))
        regions = np.concatenate([[None], np.asarray(self.region_uni, dtype=object)])
        skus = np.concatenate([[None], np.asarray(self.sku_uni, dtype=object)])
        pair = p_pair % width
        p = pd.DatetimeIndex(self.p_uni[p_pair // width].view("datetime64[ns]")).tz_localize("UTC")
        parts = [pd.DataFrame({"p": p, "region": regions[pair // ns], "sku": skus[pair % ns]})]
        if len(node):
            n_ns = node["ts"].to_numpy(dtype="datetime64[ns]").view("int64")
            parts.append(pd.DataFrame({"p": _floor_ns(n_ns, PARTITION_NS), "region": _obj(node["region"]).to_numpy(),
                                       "sku": _obj(node["sku"]).to_numpy()}))
        if self.cost is not None and len(self.cost):
            day = pd.DataFrame({"p": self.partitions, "date": self.partitions.date})
            c = pd.DataFrame({"date": pd.to_datetime(self.cost["date"]).dt.date.to_numpy(),
                              "region": _obj(self.cost["region"]).to_numpy(), "sku": _obj(self.cost["sku"]).to_numpy()})
            parts.append(day.merge(c, on="date")[["p", "region", "sku"]])
        for s0, s1, nodes in segments or ():
            if len(nodes):
                pairs = nodes[["region", "sku"]].astype(object).drop_duplicates()
                covered = pd.DataFrame({"p": self.partitions[(self.partitions >= s0) & (self.partitions < s1)]})
                parts.append(covered.merge(pairs, how="cross"))
        inv = pd.concat(parts, ignore_index=True).astype({"region": object, "sku": object})
        return inv.drop_duplicates().sort_values(["p", "region", "sku"], na_position="first").reset_index(drop=True)

    def job_attr(self, job_ids: pd.Series, col: str) -> np.ndarray:
        if not len(self.jobs) or col not in self.jobs:
            return np.full(len(job_ids), UNKNOWN, dtype=object)
        return job_ids.map(self.jobs[col]).astype(object).fillna(UNKNOWN).to_numpy()


def _floor_ns(ns: np.ndarray, width: int) -> pd.DatetimeIndex:
    """UTC nanosecond timestamps (as int64) floored to ``width`` ns, as ``Series.dt.floor`` floors them."""
    nat = ns == np.iinfo(np.int64).min
    out = np.where(nat, ns, ns - ns % width)
    return pd.DatetimeIndex(out.view("datetime64[ns]")).tz_localize("UTC")


def _placement(g: pd.DataFrame, alloc: np.ndarray, ts_ns: np.ndarray, j_codes: np.ndarray, j_uni) -> pd.DataFrame:
    """Index (p, job_id) of the allocated rows: region and sku of the job's first row in the partition, and
    ``gpus`` = the most rows (GPUs) it had in one minute of the partition."""
    cols = ["region", "sku", "gpus"]
    rows = np.flatnonzero(alloc)
    if not len(rows):
        return pd.DataFrame(columns=cols, index=pd.MultiIndex.from_arrays(
            [pd.DatetimeIndex([], tz="UTC"), pd.Index([], dtype=object)], names=["p", "job_id"]))
    p_ns = g["p"].to_numpy(dtype="datetime64[ns]").view("int64")[rows]
    p_codes, p_uni = pd.factorize(p_ns)
    t_codes, t_uni = pd.factorize(ts_ns[rows])
    jc = j_codes[rows].astype(np.int64)
    pj = p_codes.astype(np.int64) * len(j_uni) + jc
    uk, first, inv = unique_ints(pj, return_index=True, return_inverse=True)
    inv = inv.ravel()
    minute = inv.astype(np.int64) * len(t_uni) + t_codes
    um, per_minute = unique_ints(minute, return_counts=True)
    gpus = np.zeros(len(uk), dtype=np.int64)
    np.maximum.at(gpus, um // len(t_uni), per_minute)
    idx = pd.MultiIndex.from_arrays(
        [pd.DatetimeIndex(p_uni[uk // len(j_uni)].astype("datetime64[ns]")).tz_localize("UTC"),
         pd.Index(np.asarray(j_uni, dtype=object)[uk % len(j_uni)], dtype=object)], names=["p", "job_id"])
    take = rows[first]
    return pd.DataFrame({"region": g["region"].to_numpy()[take], "sku": g["sku"].to_numpy()[take], "gpus": gpus},
                        index=idx)


def _job_table(meta: pd.DataFrame, lookup: pd.DataFrame | None) -> pd.DataFrame:
    """job_id -> team, workload_class, model_type, submitted_at, sla_deadline, requested_gpus."""
    cols = ["team", "workload_class", "model_type", "submitted_at", "sla_deadline", "requested_gpus"]
    parts = [m for m in (meta, lookup) if m is not None and len(m)]
    if not parts:
        return pd.DataFrame(columns=cols)
    both = pd.concat([p.reindex(columns=["job_id", *cols]) for p in parts], ignore_index=True)
    both["job_id"] = both["job_id"].astype(object)
    out = both.drop_duplicates("job_id", keep="first").set_index("job_id")
    for col in ("team", "workload_class", "model_type"):
        out[col] = out[col].astype(object)
    for col in ("submitted_at", "sla_deadline"):
        out[col] = as_utc(out[col])
    return out


def _normalize_pending(pending: pd.DataFrame | None) -> pd.DataFrame | None:
    """The backlog with object job ids and nanosecond UTC submission times (whatever it was read from)."""
    if pending is None:
        return None
    out = pending.assign(job_id=_obj(pending["job_id"]),
                         submitted_at=pd.to_datetime(pending["submitted_at"], utc=True).astype(UTC_NS),
                         gpus=pending["gpus"].astype(float))
    return out.reset_index(drop=True)


def _spells(events: pd.DataFrame, pending: pd.DataFrame | None) -> pd.DataFrame:
    """Pending spells: job_id, open (submitted / requeued), close (next started / ended), gpus."""
    ev = events[["job_id", "event", "ts", "gpus"]].astype({"job_id": object, "event": object, "ts": UTC_NS})
    opens = ev.loc[ev["event"].isin(["submitted", "requeued"]), ["job_id", "ts", "gpus"]]
    pending = _normalize_pending(pending)
    if pending is not None and len(pending):
        carried = pending[["job_id", "submitted_at", "gpus"]].rename(columns={"submitted_at": "ts"})
        opens = pd.concat([opens.astype({"gpus": float}), carried], ignore_index=True).drop_duplicates(["job_id", "ts"])
    closes = ev.loc[ev["event"].isin(["started", "ended"]), ["job_id", "ts"]].rename(columns={"ts": "close"})
    if opens.empty:
        return pd.DataFrame({"job_id": pd.Series(dtype=object), "open": pd.Series(dtype="datetime64[ns, UTC]"),
                             "close": pd.Series(dtype="datetime64[ns, UTC]"), "gpus": pd.Series(dtype=float)})
    opens = opens.sort_values("ts")
    closes = closes.sort_values("close")
    s = pd.merge_asof(opens, closes, left_on="ts", right_on="close", by="job_id", direction="forward")
    s = s.rename(columns={"ts": "open"})
    s["close"] = s["close"].fillna(pd.Timestamp.max.tz_localize("UTC").floor("1D"))
    s["gpus"] = s["gpus"].astype(float)
    return s[["job_id", "open", "close", "gpus"]]


def _raw(df: pd.DataFrame, kpi: str, dims: list[str], **aggs) -> pd.DataFrame:
    """Group ``df`` by partition x ``dims`` and sum the named boolean / float columns."""
    keys = ["p", *dims]
    out = df.groupby(keys, sort=False, observed=True).agg(**aggs).reset_index()
    out["kpi"] = kpi
    return out


def _region_sku_sums(ctx: _Context) -> pd.DataFrame:
    """One row per partition x region x SKU of the window's GPU rows: ``n`` (its rows) and the count of rows with
    each property the region x SKU KPIs of gpu_telemetry take a ratio of (allocated and schedulable, an Xid, a
    double-bit ECC error, a slowdown / power / thermal throttle bit, and whether each optional field is reported).

    Rows without a region or SKU are left out, as a group-by on them leaves them out. One grouping serves
    allocation_rate, hw_fault_rate and gpus_throttled: the same groups, counted once (counts are exact in
    floating point, so the sums equal the per-KPI group-bys')."""
    if ctx.region_sku is not None:
        return ctx.region_sku
    g = ctx.gpu
    rc, sc = ctx.region_codes, ctx.sku_codes
    keep = (rc >= 0) & (sc >= 0)
    nr, ns = len(ctx.region_uni), len(ctx.sku_uni)
    key = (ctx.p_codes[keep].astype(np.int64) * nr + rc[keep]) * ns + sc[keep]
    cells, inv = unique_ints(key, return_inverse=True)
    inv = inv.ravel()
    thr = g["throttle"].to_numpy()
    thr_known = ~np.isnan(thr)
    bits = np.nan_to_num(thr).astype(np.int64)
    dbe = g["dbe"].to_numpy()
    dbe_known = ~np.isnan(dbe)
    schedulable = g["schedulable"].to_numpy(dtype=bool)
    counts = {
        "alloc": g["allocated"].to_numpy(dtype=bool) & schedulable, "schedulable": schedulable,
        "xid": g["xid"].to_numpy() != 0,
        "dbe": dbe_known & (np.nan_to_num(dbe) > 0), "dbe_known": dbe_known,
        "thr": thr_known & ((bits & SLOW_THROTTLE_BITS) != 0), "thr_known": thr_known,
        "pw": thr_known & ((bits & POWER_BITS) > 0), "th": thr_known & ((bits & THERMAL_BITS) > 0),
    }
    pr, sku = np.divmod(cells, ns)
    p, region = np.divmod(pr, nr)
    out = pd.DataFrame({"p": pd.DatetimeIndex(np.asarray(ctx.p_uni)[p].view("datetime64[ns]")).tz_localize("UTC"),
                        "region": np.asarray(ctx.region_uni, dtype=object)[region],
                        "sku": np.asarray(ctx.sku_uni, dtype=object)[sku],
                        "n": np.bincount(inv, minlength=len(cells))})
    for name, flag in counts.items():
        out[name] = np.bincount(inv, weights=flag[keep], minlength=len(cells))
    ctx.region_sku = out
    return out


def _job_minutes(ctx: _Context) -> pd.DataFrame:
    """job_runtime_metrics rows of the window with the job's placement, class, signature and baseline."""
    if ctx.job_minutes is None:
        ctx.job_minutes = _build_job_minutes(ctx)
    return ctx.job_minutes


def _build_job_minutes(ctx: _Context) -> pd.DataFrame:
    rt = ctx.runtime
    jid = rt["job_id"].astype(object)
    key = pd.MultiIndex.from_arrays([rt["ts"].dt.floor(PARTITION_FREQ), jid])
    pl = ctx.placement.reindex(key)
    d = pd.DataFrame({
        "ts": _utc_values(rt["ts"]), "job_id": jid.to_numpy(),
        "steps": rt["steps"].to_numpy(dtype=float),
        "step": rt["step_time_s"].to_numpy(dtype=float, na_value=np.nan),
        "loader": rt["data_loader_time_s"].to_numpy(dtype=float, na_value=np.nan),
        "sync": rt["grad_sync_time_s"].to_numpy(dtype=float, na_value=np.nan),
        "ckpt": rt["checkpoint_time_s"].to_numpy(dtype=float),
        "region": pl["region"].fillna(UNKNOWN).to_numpy(),
        "sku": pl["sku"].fillna(UNKNOWN).to_numpy(),
        "gpus": pl["gpus"].to_numpy(dtype=float),
        "workload_class": ctx.job_attr(jid, "workload_class"),
        "model_type": ctx.job_attr(jid, "model_type"),
    })
    if d["gpus"].isna().any() and len(ctx.jobs):  # not seen on a GPU in the partition: what it asked for
        d["gpus"] = d["gpus"].fillna(jid.map(ctx.jobs["requested_gpus"]).astype(float))
    d["gpus"] = d["gpus"].fillna(1.0)
    d["p"] = d["ts"].dt.floor(PARTITION_FREQ)
    base_cols = {"step_time_s": "b_step", "data_loader_time_s": "b_loader", "grad_sync_time_s": "b_sync"}
    b = ctx.baseline
    if b is None or b.empty:
        for v in base_cols.values():
            d[v] = np.nan
        return d
    keys = ["model_type", "sku", "gpus"]
    b = b.rename(columns=base_cols)
    if "partition_start" in b.columns:
        b = b.rename(columns={"partition_start": "p"})
        b["p"] = as_utc(b["p"])
        keys = ["p", *keys]
    b = b[keys + list(base_cols.values())].astype({"model_type": object, "sku": object, "gpus": float})
    b = b.drop_duplicates(keys)
    for v in base_cols.values():
        b[v] = b[v].astype(float)
    return d.merge(b, on=keys, how="left")


def _node_minutes(g: pd.DataFrame, free: np.ndarray, ts_codes: np.ndarray, node_codes: np.ndarray, nodes: int) -> pd.DataFrame:
    """One row per (minute, node) of ``g`` (a group-by on ts and node_id, by integer codes): ts, p, region and
    sku (the first non-null of its rows), ``size`` (its GPU rows) and ``free`` (the sum of ``free``)."""
    lost = is_missing(g["node_id"])
    if lost.any():  # groupby drops rows without a node
        keep = ~lost
        g, free, ts_codes, node_codes = g[keep], free[keep], ts_codes[keep], node_codes[keep]
    key = ts_codes.astype(np.int64) * (nodes + 1) + node_codes
    _, first, inv = unique_ints(key, return_index=True, return_inverse=True)
    inv = inv.ravel()
    G = len(first)
    out = {"ts": g["ts"].iloc[first].reset_index(drop=True), "p": g["p"].iloc[first].reset_index(drop=True)}
    for col in ("region", "sku"):
        v = g[col].to_numpy()
        known = ~is_missing(g[col])
        # groupby's 'first': the group's first non-null value (None when it has none)
        pick = first if known.all() else first_rows(inv, known, G)
        out[col] = np.where(pick >= 0, v[np.clip(pick, 0, None)], None)
    out["size"] = np.bincount(inv, minlength=G)
    out["free"] = np.bincount(inv, weights=free, minlength=G)
    return pd.DataFrame(out)

"""The supporting KPIs of one window, one row per series x slice x 5-minute partition.

Pure pandas (no Dagster). :func:`compute_kpis` takes the source frames of a
window ``[start, end)`` -- one 5-minute partition or a whole day; everything is
grouped by the row's timestamp floored to 5 minutes -- and returns the
``kpi_values`` table (contract :class:`KpiValues`). What each series means,
who owns it and how it degrades is in :mod:`gpu_health.metrics.kpi_catalog`.

Rows outside ``[start, end)`` are history: they answer look-ups (a job's
submission time, whether it was running at its SLA deadline) but are never
counted. Job attributes come from the window's ``job_metadata`` and from
``job_metadata_lookup`` (long-running jobs landed their metadata days ago); a
job found in neither counts under ``'unknown'`` and is never dropped.

Slicing (per KPI, ``Kpi.dimensions``; the other dimension columns hold ``'*'``):

* region x sku -- allocation_rate, hw_fault_rate, comm_health,
  cost_per_productive_gpu_hour: hardware, fabric and price live there.
* region x sku x workload_class -- fragmentation: free GPUs where they are,
  against the smallest blocked job of each class (queues are per class).
* region x workload_class -- job_failure_rate: a deploy hits a region's nodes;
  interactive and training jobs fail differently.
* workload_class -- queue_wait_p95 and sla_attainment: a pending job has no
  region yet, and queues are per class.
* region x sku x workload_class -- step_time_inflation: the baseline is per
  SKU, the causes per region, the jobs per class.
* team -- gaming_guardrails: gaming is a team's choice.

Only the finest slice is emitted (no roll-ups): ratio series carry
``numerator`` and ``denominator`` so that any roll-up is a sum of both; the
quantile series (queue_wait_p95) carries ``numerator`` = NaN and the number of
waits as ``denominator``.

Status per row: ``no_data`` when the slice had nothing to measure in the
partition (no rows, or a zero denominator); ``degraded`` when it had, but under
:data:`MIN_COVERAGE` of them report the optional field or input the series
needs; ``ok`` otherwise. ``value`` is NaN unless the status is ``ok`` -- a
missing reading is never a zero. For region x sku KPIs every region x SKU of
the partition's inventory (its node inventory as known when it closed, its
day's cost_capacity rows, its GPU and node rows) gets a row, so a silent
region x SKU shows as ``no_data`` rather than as a missing row; every other
slice gets a row in the partitions it was seen in, and a series seen nowhere in
a partition one ``*`` row. A partition's rows depend on nothing after its end:
the sensor's 5-minute run and a day's run of the same partition write the same
rows.
"""

import numpy as np
import pandas as pd
from pandas._libs import lib

from gpu_health.constants import (MINUTE, PARTITION_FREQ, PARTITION_NS, POWER_BITS, REPORTED_BUSY_UTIL_PCT,
                                  SLOW_THROTTLE_BITS, THERMAL_BITS)
from gpu_health.codes import factorize, first_rows, is_missing, unique_ints
from gpu_health.contracts.derived import SERIES_UNITS, KpiValues
from gpu_health.contracts.models import WORKLOAD_CLASSES, empty_frame
from gpu_health.metrics.goodput import BLOCKED_WAIT, first_node
from gpu_health.metrics.device import IDLE_SM, IDLE_TENSOR, LOW_POWER_SHARE, device_idle, reference_power
from gpu_health.metrics.facility import kpi_rows as facility_kpi_rows
from gpu_health.metrics.kpi_catalog import CATALOG, DIMENSIONS, by_name
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

# reason class of a failed job: first matching pattern (case-insensitive) wins
REASON_CLASSES = [
    ("gpu_xid", r"\bxid\b|ecc|fallen off the bus|\bgpu\b"),
    ("nccl", r"nccl|collective"),
    ("oom", r"out of memory|\boom\b"),
]


# --- public helpers ---------------------------------------------------------------------


def pending_jobs(scheduler_events: pd.DataFrame, at, pending: pd.DataFrame | None = None) -> pd.DataFrame:
    """The backlog at ``at``: jobs submitted (or requeued) before it and not started or ended by then.

    Pass the previous backlog as ``pending`` to carry it from window to window;
    the result (job_id, submitted_at, gpus) is what :func:`compute_kpis` takes as
    ``pending`` for a window starting at ``at``.
    """
    at = _utc(at)
    spells = _spells(scheduler_events, pending)
    open_now = spells[(spells["open"] <= at) & (spells["close"] > at)]
    out = open_now.rename(columns={"open": "submitted_at"})[["job_id", "submitted_at", "gpus"]]
    return out.sort_values(["submitted_at", "job_id"]).drop_duplicates("job_id", keep="last").reset_index(drop=True)


def compute_kpis(
    frames: dict[str, pd.DataFrame],
    goodput_states: pd.DataFrame,
    *,
    start,
    end,
    cost: pd.DataFrame | None = None,
    job_metadata_lookup: pd.DataFrame | None = None,
    step_baseline: pd.DataFrame | None = None,
    pending: pd.DataFrame | None = None,
    inventory: list | None = None,
) -> pd.DataFrame:
    """The ``kpi_values`` rows of ``[start, end)``.

    ``frames``: source frames by table name (contract columns; a missing table
    counts as empty). ``goodput_states``: the loss tree's GPU-minutes per
    partition_start x region x sku x workload_class x team x state.
    ``cost``: cost_capacity rows of the window's days. ``job_metadata_lookup``:
    job_metadata rows of jobs submitted before the window. ``step_baseline``:
    model_type, sku, gpus, step_time_s, data_loader_time_s, grad_sync_time_s
    (optionally per partition_start). ``pending``: the backlog at ``start``
    (job_id, submitted_at, gpus, optionally workload_class; see
    :func:`pending_jobs`) -- or an empty frame when ``scheduler_events`` already
    reach back far enough (hours) to show every job still waiting. ``None``
    means "unknown", and fragmentation is then degraded.
    """
    start, end = _utc(start), _utc(end)
    ctx = _Context(frames, goodput_states, start, end, cost, job_metadata_lookup, step_baseline, pending, inventory)
    raw = [
        _allocation_rate(ctx),
        _job_failure_rate(ctx),
        _queue_wait_p95(ctx),
        _sla_attainment(ctx),
        _step_time_inflation(ctx),
        _hw_fault_rate(ctx),
        _comm_health(ctx),
        _fragmentation(ctx),
        _cost_per_productive_gpu_hour(ctx),
        _inventory_excess(ctx),
        _gaming_guardrails(ctx),
        _gpus_throttled(ctx),
        *facility_kpi_rows(frames.get("facility_telemetry"), start, end),
    ]
    return _finish([r for r in raw if len(r)], ctx)


# --- context: the window's rows, prepared once ----------------------------------------------


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


# --- one function per KPI: raw rows (partition x slice) with numerator, denominator, n, covered ---


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


def _allocation_rate(ctx: _Context) -> pd.DataFrame:
    agg = _region_sku_sums(ctx)
    return agg[["p", "region", "sku", "n"]].assign(kpi="allocation_rate", numerator=agg["alloc"],
                                                   denominator=agg["schedulable"])


def _gpus_throttled(ctx: _Context) -> pd.DataFrame:
    """gpus_throttled.{power,thermal} per region x SKU: GPU-minutes with a power / thermal clock-event bit
    (gpu_health.metrics.facility's bits) over those reporting clock events."""
    agg = _region_sku_sums(ctx)
    keys = agg[["p", "region", "sku", "n"]]
    return pd.concat([
        keys.assign(kpi="gpus_throttled.power", numerator=agg["pw"], denominator=agg["thr_known"],
                    covered=agg["thr_known"]),
        keys.assign(kpi="gpus_throttled.thermal", numerator=agg["th"], denominator=agg["thr_known"],
                    covered=agg["thr_known"]),
    ], ignore_index=True)


def _reason_class(exit_state: pd.Series, reason: pd.Series) -> np.ndarray:
    text = reason.astype(object).fillna("").str.lower()
    out = np.full(len(text), "app_error", dtype=object)
    decided = np.zeros(len(text), dtype=bool)
    for name, pattern in REASON_CLASSES:
        hit = text.str.contains(pattern, regex=True).to_numpy() & ~decided
        out[hit] = name
        decided |= hit
    es = exit_state.astype(object).to_numpy()
    out[es == "node_fail"] = "node_fail"
    out[es == "timeout"] = "timeout"
    return out


def _job_failure_rate(ctx: _Context) -> pd.DataFrame:
    ev = ctx.window(ctx.events)
    ended = ev[(ev["event"] == "ended") & (ev["gpus"] > 0)]
    if ended.empty:
        return pd.DataFrame()
    first = first_node(ended["node_ids"], missing="")
    d = pd.DataFrame({
        "p": ended["ts"].dt.floor(PARTITION_FREQ).reset_index(drop=True),
        "region": first.map(ctx.node_region).fillna(UNKNOWN).to_numpy(),
        "workload_class": ctx.job_attr(ended["job_id"].astype(object), "workload_class"),
    })
    failed = ended["exit_state"].isin(FAILED_EXITS).to_numpy()
    cls = _reason_class(ended["exit_state"], ended["reason"])
    kpi = by_name()["job_failure_rate"]
    d["all"] = failed
    for c in kpi.components:
        d[c.name] = failed & (cls == c.name)
    dims = ["region", "workload_class"]
    base = d.groupby(["p", *dims], sort=False).agg(
        n=("all", "size"), **{c: (c, "sum") for c in ["all", *(c.name for c in kpi.components)]}).reset_index()
    out = []
    for series, col in [(kpi.name, "all"), *((f"{kpi.name}.{c.name}", c.name) for c in kpi.components)]:
        out.append(base[["p", *dims, "n"]].assign(kpi=series, numerator=base[col].astype(float),
                                                  denominator=base["n"].astype(float)))
    return pd.concat(out, ignore_index=True)


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


def _step_time_inflation(ctx: _Context) -> pd.DataFrame:
    d = _job_minutes(ctx)
    if d.empty:
        return pd.DataFrame()
    prog = (d["steps"] > 0).to_numpy()
    has_b = d["b_step"].notna().to_numpy()
    w = (d["gpus"] * d["steps"]).to_numpy()
    base_s = np.nan_to_num(w * d["b_step"].to_numpy())
    step_x = d["step"].to_numpy() - d["b_step"].to_numpy()
    io_x = d["loader"].to_numpy() - d["b_loader"].to_numpy()
    net_x = d["sync"].to_numpy() - d["b_sync"].to_numpy()
    cmp_x = step_x - io_x - net_x
    ck = (d["gpus"] * d["ckpt"]).to_numpy()
    counted = has_b & (prog | (d["ckpt"].to_numpy() > 0))  # checkpoint-only minutes count their checkpoint

    def ok(x):
        return prog & has_b & ~np.isnan(x)

    cols = {
        "n": prog.astype(float),
        "tot_num": np.where(prog & has_b, np.nan_to_num(w * step_x), 0.0) + np.where(counted, ck, 0.0),
        "tot_den": np.where(prog & has_b, base_s, 0.0), "tot_cov": (prog & has_b).astype(float),
        "ck_num": np.where(counted, ck, 0.0),
    }
    for name, x in (("data_io", io_x), ("network", net_x), ("compute", cmp_x)):
        m = ok(x)
        cols[f"{name}_num"] = np.where(m, np.nan_to_num(w * x), 0.0)
        cols[f"{name}_den"] = np.where(m, base_s, 0.0)
        cols[f"{name}_cov"] = m.astype(float)
    dims = ["region", "sku", "workload_class"]
    frame = pd.concat([d[["p", *dims]], pd.DataFrame(cols, index=d.index)], axis=1)
    agg = frame.groupby(["p", *dims], sort=False).sum().reset_index()
    agg = agg[agg["n"] > 0]
    name = "step_time_inflation"
    out = [agg[["p", *dims, "n"]].assign(kpi=name, numerator=agg["tot_num"], denominator=agg["tot_den"],
                                         covered=agg["tot_cov"])]
    for comp in ("data_io", "network", "compute"):
        out.append(agg[["p", *dims, "n"]].assign(kpi=f"{name}.{comp}", numerator=agg[f"{comp}_num"],
                                                 denominator=agg[f"{comp}_den"], covered=agg[f"{comp}_cov"]))
    out.append(agg[["p", *dims, "n"]].assign(kpi=f"{name}.checkpoint", numerator=agg["ck_num"],
                                             denominator=agg["tot_den"], covered=agg["tot_cov"]))
    return pd.concat(out, ignore_index=True)


def _hw_fault_rate(ctx: _Context) -> pd.DataFrame:
    agg = _region_sku_sums(ctx)
    if agg.empty:
        return pd.DataFrame()
    keys = agg[["p", "region", "sku", "n"]]
    return pd.concat([
        keys.assign(kpi="hw_fault_rate.xid", numerator=agg["xid"], denominator=agg["n"], covered=agg["n"]),
        keys.assign(kpi="hw_fault_rate.dbe", numerator=agg["dbe"], denominator=agg["dbe_known"], covered=agg["dbe_known"]),
        keys.assign(kpi="hw_fault_rate.throttled", numerator=agg["thr"], denominator=agg["thr_known"],
                    covered=agg["thr_known"]),
    ], ignore_index=True)


def _comm_health(ctx: _Context) -> pd.DataFrame:
    out = []
    d = _job_minutes(ctx)
    if len(d):
        multi = (d["steps"] > 0).to_numpy() & (d["gpus"] > 1).to_numpy()
        known = multi & d["sync"].notna().to_numpy()
        w = (d["gpus"] * d["steps"]).to_numpy()
        f = pd.DataFrame({"p": d["p"], "region": d["region"], "sku": d["sku"], "n": multi.astype(float),
                          "covered": known.astype(float),
                          "numerator": np.where(known, np.nan_to_num(w * d["sync"].to_numpy()), 0.0),
                          "denominator": np.where(known, np.nan_to_num(w * d["step"].to_numpy()), 0.0)})
        agg = f.groupby(["p", "region", "sku"], sort=False).sum().reset_index()
        out.append(agg[agg["n"] > 0].assign(kpi="comm_health.grad_sync_share"))
    net = ctx.network
    if len(net):
        # retransmits: null where the collector does not expose them (switch-port and node-exporter IB
        # counters): averaged over the link-minutes that report them, degraded when under half do
        rtx = pd.to_numeric(net["retransmits"]).to_numpy(dtype=float, na_value=np.nan)
        # grouped by partition, region and the node's SKU as integer codes (each distinct node and region looked up
        # once, not a day's million link-minutes' strings): the groups, their order (first appearance) and their
        # sums are the strings' -- a link-minute without a region in no group, as a group-by on None leaves it out
        region, regions = factorize(net["region"])
        node, nodes = factorize(net["node_id"])
        node_sku = pd.Series(np.append(np.asarray(nodes, dtype=object), None)).map(ctx.node_sku).fillna(UNKNOWN)
        sku_of_node, skus = factorize(node_sku.to_numpy(dtype=object))  # (a node without a SKU: UNKNOWN)
        f = pd.DataFrame({"p": net["ts"].dt.floor(PARTITION_FREQ), "region": np.where(region >= 0, region, np.nan),
                          "sku": sku_of_node[node],  # (code -1, a missing node: the appended None's, UNKNOWN)
                          "rtx": np.nan_to_num(rtx), "rtx_known": (~np.isnan(rtx)).astype(float),
                          "loss": net["packet_loss_pct"].to_numpy(dtype=float),
                          "down": ~net["link_up"].to_numpy(dtype=bool)})
        agg = f.groupby(["p", "region", "sku"], sort=False).agg(
            n=("rtx", "size"), rtx=("rtx", "sum"), rtx_known=("rtx_known", "sum"), loss=("loss", "sum"),
            down=("down", "sum")).reset_index()
        agg["region"] = np.asarray(regions, dtype=object)[agg["region"].to_numpy(dtype=np.int64)]
        agg["sku"] = np.asarray(skus, dtype=object)[agg["sku"].to_numpy(dtype=np.int64)]
        keys = agg[["p", "region", "sku", "n"]]
        out.append(keys.assign(kpi="comm_health.retransmits", numerator=agg["rtx"], denominator=agg["rtx_known"],
                               covered=agg["rtx_known"]))
        for series, col in (("packet_loss", "loss"), ("link_down", "down")):
            out.append(keys.assign(kpi=f"comm_health.{series}", numerator=agg[col].astype(float), denominator=agg["n"]))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


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


def _cost_per_productive_gpu_hour(ctx: _Context) -> pd.DataFrame:
    gs = ctx.goodput_states
    if gs is None or gs.empty:
        return pd.DataFrame()
    gs = gs[(gs["partition_start"] >= ctx.start) & (gs["partition_start"] < ctx.end)]
    if gs.empty:
        return pd.DataFrame()
    minutes = gs["gpu_minutes"].to_numpy(dtype=float)
    d = pd.DataFrame({"p": as_utc(gs["partition_start"]), "region": _obj(gs["region"]),
                      "sku": _obj(gs["sku"]), "paid": minutes,
                      "prod": np.where(gs["state"].astype(object) == "productive", minutes, 0.0)})
    agg = d.groupby(["p", "region", "sku"], sort=False).sum().reset_index()
    agg["n"] = (agg["paid"] > 0).astype(float)
    rate = np.full(len(agg), np.nan)
    if ctx.cost is not None and len(ctx.cost):
        from gpu_health.metrics.finance import blended_rates

        r = blended_rates(ctx.cost)
        key = pd.MultiIndex.from_arrays([pd.to_datetime(r["date"]).dt.date, _obj(r["region"]), _obj(r["sku"])])
        lookup = pd.Series(r["blended_gpu_hour_usd"].to_numpy(dtype=float), index=key)
        want = pd.MultiIndex.from_arrays([agg["p"].dt.date, agg["region"], agg["sku"]])
        rate = lookup.reindex(want).to_numpy()
    known = ~np.isnan(rate)
    agg["numerator"] = np.where(known, agg["paid"] / 60.0 * np.nan_to_num(rate), np.nan)
    agg["denominator"] = agg["prod"] / 60.0
    agg["covered"] = np.where(known, agg["n"], 0.0)
    agg["kpi"] = "cost_per_productive_gpu_hour"
    return agg


def _inventory_excess(ctx: _Context) -> pd.DataFrame:
    """inventory_excess per region x SKU: distinct GPUs reporting in the partition beyond Finance's capacity_gpus
    of its day, over the distinct GPUs reporting (not covered where the day has no cost row for the slice)."""
    rc, sc, uc = ctx.region_codes, ctx.sku_codes, ctx.uuid_codes
    keep = (rc >= 0) & (sc >= 0) & (uc >= 0)
    if not keep.any():
        return pd.DataFrame()
    nr, ns, nu = len(ctx.region_uni), len(ctx.sku_uni), int(uc.max()) + 1
    cell = (ctx.p_codes[keep].astype(np.int64) * nr + rc[keep]) * ns + sc[keep]
    pairs = unique_ints(cell * nu + uc[keep])  # (slice, GPU) pairs
    cells, seen = unique_ints(pairs // nu, return_counts=True)
    pr, sku = np.divmod(cells, ns)
    p, region = np.divmod(pr, nr)
    out = pd.DataFrame({"p": pd.DatetimeIndex(np.asarray(ctx.p_uni)[p].view("datetime64[ns]")).tz_localize("UTC"),
                        "region": np.asarray(ctx.region_uni, dtype=object)[region],
                        "sku": np.asarray(ctx.sku_uni, dtype=object)[sku], "seen": seen.astype(float)})
    cap = np.full(len(out), np.nan)
    if ctx.cost is not None and len(ctx.cost):
        c = ctx.cost
        key = pd.MultiIndex.from_arrays([pd.to_datetime(c["date"].astype(str)).dt.date, _obj(c["region"]), _obj(c["sku"])])
        lookup = pd.Series(c["capacity_gpus"].to_numpy(dtype=float), index=key)
        lookup = lookup[~lookup.index.duplicated(keep="last")]
        cap = lookup.reindex(pd.MultiIndex.from_arrays([out["p"].dt.date, out["region"], out["sku"]])).to_numpy()
    known = ~np.isnan(cap)
    out["numerator"] = np.where(known, np.clip(out["seen"] - np.nan_to_num(cap), 0, None), np.nan)
    out["denominator"] = out["seen"]
    out["n"] = 1.0
    out["covered"] = known.astype(float)
    out["kpi"] = "inventory_excess"
    return out.drop(columns="seen")


def _gaming_guardrails(ctx: _Context) -> pd.DataFrame:
    g = ctx.gpu
    sel = (g["allocated"].to_numpy() & (g["util"].to_numpy() >= REPORTED_BUSY_UTIL_PCT))
    if not sel.any():
        return pd.DataFrame()
    rows = np.flatnonzero(sel)
    # progress: the job reported steps in the row's minute (a join on minute and job codes)
    rt = ctx.runtime
    prog_rt = (rt["steps"] > 0).to_numpy()
    g_ns = g["ts"].to_numpy(dtype="datetime64[ns]").view("int64")[rows]
    r_ns = rt["ts"].to_numpy(dtype="datetime64[ns]").view("int64")[prog_rt]
    t_codes, t_uni = pd.factorize(np.concatenate([g_ns, r_ns]))
    # the runtime rows' jobs as codes of the GPU rows' jobs (_Context.job_codes: each distinct runtime job looked up
    # once); a job no GPU row holds (-1) matches no busy row
    r_codes, r_uni = factorize(rt["job_id"].astype(object).to_numpy()[prog_rt])
    r_jobs = np.append(pd.Index(ctx.job_uni).get_indexer(np.asarray(r_uni, dtype=object)), -1)[r_codes]
    j_codes = np.concatenate([ctx.job_codes[rows], r_jobs])
    pair = t_codes.astype(np.int64) * (len(ctx.job_uni) + 1) + j_codes
    progress = pd.Index(pair[:len(rows)]).isin(pair[len(rows):][j_codes[len(rows):] >= 0])  # (hashed: np.isin sorts)
    training = g["workload_class"].to_numpy()[rows] != "interactive"

    power = g["power"].to_numpy()[rows]
    idle, dev_known = device_idle(g["sm"].to_numpy()[rows], g["tensor"].to_numpy()[rows])
    known = dev_known & ~np.isnan(power)  # a collector without power cannot tell low power
    # the reference of each busy row's partition x SKU (none without a SKU)
    key = _p_sku_key(ctx)
    ref = _reference_power(g, key)
    ref_row = ref.reindex(key[rows]).to_numpy(dtype=float) if len(ref) else np.full(len(rows), np.nan)
    ref_row = np.where(key[rows] >= 0, ref_row, np.nan)
    low_power = power < LOW_POWER_SHARE * ref_row
    # grouped by partition and the team's code (the busy rows' teams are their jobs': each job's looked up once);
    # the groups, their order (first appearance) and sums are the team names'
    team_of_job, teams = factorize(ctx.job_team)
    d = pd.DataFrame({
        "p": g["p"].iloc[rows].reset_index(drop=True), "team": team_of_job[ctx.job_codes[rows]],
        "bwp_n": training.astype(float), "bwp_num": (training & ~progress).astype(float),
        "div_n": 1.0, "div_cov": known.astype(float), "div_num": (known & idle & low_power).astype(float),
    })
    agg = d.groupby(["p", "team"], sort=False).sum().reset_index()
    agg["team"] = np.asarray(teams, dtype=object)[agg["team"].to_numpy()]
    keys = agg[["p", "team"]]
    bwp = keys.assign(kpi="gaming_guardrails.busy_without_progress", numerator=agg["bwp_num"],
                      denominator=agg["bwp_n"], n=agg["bwp_n"])
    div = keys.assign(kpi="gaming_guardrails.util_power_divergence", numerator=agg["div_num"],
                      denominator=agg["div_cov"], n=agg["div_n"], covered=agg["div_cov"])
    return pd.concat([bwp[bwp["n"] > 0], div], ignore_index=True)


def _p_sku_key(ctx: _Context) -> np.ndarray:
    """Per GPU row: an integer code of its partition x SKU (-1 without a SKU)."""
    return np.where(ctx.sku_codes >= 0, ctx.p_codes.astype(np.int64) * len(ctx.sku_uni) + ctx.sku_codes, -1)


def _reference_power(g: pd.DataFrame, key: np.ndarray) -> pd.Series:
    """Per partition x SKU code (:func:`_p_sku_key`): the reference power of gpu_health.metrics.device (p95 of
    working GPUs). Grouped on the integer code, not on the timestamps and SKU strings (5x faster); rows without
    a SKU have no group, as a group-by on a missing SKU leaves them out."""
    frame = pd.DataFrame({"k": np.where(key >= 0, key, np.nan), "gpu_util_pct": g["util"], "sm_active": g["sm"],
                          "tensor_active": g["tensor"], "power_w": g["power"],
                          "job_id": np.where(g["allocated"].to_numpy(), 1.0, np.nan)})  # (only its presence counts)
    ref = reference_power(frame, ["k"])
    ref.index = ref.index.astype(np.int64)
    return ref


# --- assembly: every slice in every partition, status and value ------------------------------


def _slices(r: pd.DataFrame, ctx: _Context) -> pd.DataFrame:
    """p x kpi x dimension values to report: in each partition those seen in it, plus its inventory's region x
    SKU for KPIs sliced by both (a silent region x SKU shows as no_data), and a ``*`` row for a series with
    neither. Each partition's slices come from its own rows, never its neighbours' (a partition run alone by
    the sensor and the same partition in a day's run report the same rows)."""
    seen = r[["p", "kpi", *DIMENSIONS]].drop_duplicates()
    inv = ctx.inventory
    out = [seen]
    for kpi in CATALOG:
        dims = list(kpi.dimensions)
        rest = [d for d in dims if d not in ("region", "sku")]
        for series in kpi.series():
            mine = seen[seen["kpi"] == series]
            extra = inv.iloc[0:0]
            if {"region", "sku"} <= set(dims) and len(inv):
                extra = mine[["p", *rest]].drop_duplicates().merge(inv, on="p") if rest else inv
            have = pd.DatetimeIndex(pd.concat([mine["p"], extra["p"]]).unique())
            star = pd.DataFrame({"p": ctx.partitions[~ctx.partitions.isin(have)]})
            for part in (extra, star):
                if len(part):
                    out.append(part.assign(kpi=series).reindex(columns=["p", "kpi", *DIMENSIONS], fill_value=STAR))
    return pd.concat([x for x in out if len(x)] or out[:1], ignore_index=True).drop_duplicates()


def _finish(raw: list[pd.DataFrame], ctx: _Context) -> pd.DataFrame:
    r = pd.concat(raw, ignore_index=True) if raw else pd.DataFrame(columns=["p", "kpi"])
    for col in DIMENSIONS:
        if col not in r:
            r[col] = STAR
        r[col] = r[col].astype(object).fillna(STAR)
    for col in ("numerator", "denominator", "n", "covered", "value"):
        if col not in r:
            r[col] = np.nan
    r["covered"] = r["covered"].fillna(r["n"])
    r = r[["p", "kpi", *DIMENSIONS, "numerator", "denominator", "n", "covered", "value"]]
    grid = _slices(r, ctx)
    f = grid.merge(r, on=["p", "kpi", *DIMENSIONS], how="left")
    n = f["n"].fillna(0.0).to_numpy(dtype=float)
    covered = f["covered"].fillna(0.0).to_numpy(dtype=float)
    num = f["numerator"].to_numpy(dtype=float)
    den = f["denominator"].to_numpy(dtype=float)
    quant = f["value"].to_numpy(dtype=float)
    no_data = n <= 0
    degraded = ~no_data & (covered < MIN_COVERAGE * n)
    no_data |= ~degraded & ~(np.nan_to_num(den) > 0)
    ok = ~no_data & ~degraded
    is_q = f["kpi"].to_numpy() == "queue_wait_p95"
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(is_q, quant, num / den)
    f["value"] = np.where(ok, value, np.nan)
    f["status"] = np.select([ok, degraded], ["ok", "degraded"], "no_data")
    # nothing observed: the counts are truly zero (a degraded row keeps what was measured)
    f["numerator"] = np.where(n <= 0, np.where(is_q, np.nan, 0.0), num)
    f["denominator"] = np.where(n <= 0, 0.0, den)
    f["unit"] = f["kpi"].map(SERIES_UNITS)
    f = f.rename(columns={"p": "partition_start"})[OUT_COLUMNS]
    f = f.sort_values(["partition_start", "kpi", *DIMENSIONS], kind="stable").reset_index(drop=True)
    return KpiValues.to_schema().coerce_dtype(f)

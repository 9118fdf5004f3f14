"""Computations of the derived assets for a window, given the warehouse.

No Dagster here: each function reads what it needs (the window's sources and
the history behind them) from a :class:`~gpu_health.storage.warehouse.Warehouse`
and calls the pure metric functions. The Dagster assets are thin wrappers, and
the evaluation harness and benchmarks call the same functions.

History each computation reads (consumers look back as far as they need):
job metadata submitted in the last 4 days (jobs live up to 3.5 days; older
ones count as ``unknown``, never dropped), scheduler events of the last 6
hours (pending demand and queues), the node inventory of the last 24 hours
(a silent region's as of its last report, up to 7 days back: inventory_segments),
and 7 days of workload step statistics (baselines).
"""

import numpy as np
import pandas as pd

from gpu_health.codes import factorize, first_rows
from gpu_health.constants import FATAL_XIDS, PARTITION, PARTITION_FREQ, PIECE, day_chunks
from gpu_health.contracts import conform
from gpu_health.metrics import baselines as B
from gpu_health.metrics import goodput as G
from gpu_health.storage.warehouse import Warehouse

META_LOOKBACK = G.JOB_ATTRIBUTE_LOOKBACK  # job metadata (and the loss tree's placement events) this far back
SCHED_LOOKBACK = G.SCHED_LOOKBACK
INVENTORY_LOOKBACK = pd.Timedelta(hours=24)
# A region none of whose nodes reported over INVENTORY_LOOKBACK keeps its inventory as of its last report for this
# long after it (inventory_segments): a week, the longest history the pipeline reads elsewhere (baselines). Past it
# the region is no longer expected (its missing_data ticket resolves); a region taken out of service is expected
# until then.
SILENT_REGION_MEMORY = pd.Timedelta(days=7)
# how far back the last capacity Finance sent still stands for a day it has not priced (yet): a day's cost file
# lands after the day, and installed capacity moves with purchase orders, over weeks (G.capacity_as_of)
CAPACITY_MEMORY = pd.Timedelta(days=7)
# the days before a partition's own whose cost file it tickets when missing or quarantined: live, the daily job
# settles a day after it ends (its cost file lands the next morning), so only the next day's partitions run after
# its reject is stored; a reject older than that is no longer news (it stays in source_rejects and on the check)
COST_REJECT_DAYS = pd.Timedelta(days=1)
FIVE = PARTITION  # (the name the steps use)
SOURCES = ["gpu_telemetry", "node_telemetry", "job_runtime_metrics", "scheduler_events"]


def read_sources(wh: Warehouse, start, end, tables=SOURCES) -> dict[str, pd.DataFrame]:
    return {t: wh.read_window(t, start, end) for t in tables}


def _conform(frames: dict) -> dict:
    return {k: conform(v, k) for k, v in frames.items()}


def node_inventory(frames: dict) -> pd.DataFrame:
    """Nodes seen in each partition with the GPUs they reported and their driver."""
    gpu, node = frames["gpu_telemetry"], frames["node_telemetry"]
    cols = ["partition_start", "region", "node_id", "sku", "gpus_seen", "driver_version", "fatal_gpus"]
    if gpu.empty and node.empty:
        return pd.DataFrame(columns=cols)
    # only the columns the group-by reads (gpu.assign would copy every column of a day's GPU telemetry)
    fault = gpu["xid"].isin(FATAL_XIDS).to_numpy() | (gpu["ecc_dbe_delta"].fillna(0) > 0).to_numpy()
    seen = _gpus_seen(gpu, fault)
    n = node.assign(partition_start=node["ts"].dt.floor(PARTITION_FREQ)).sort_values("ts")
    drv = n.groupby(["partition_start", "node_id"], observed=True).agg(
        region_n=("region", "last"), sku_n=("sku", "last"), driver_version=("driver_version", "last")).reset_index()
    out = seen.merge(drv, on=["partition_start", "node_id"], how="outer")
    out["region"] = out["region"].astype(object).fillna(out["region_n"].astype(object))
    out["sku"] = out["sku"].astype(object).fillna(out["sku_n"].astype(object))
    out["gpus_seen"] = out["gpus_seen"].fillna(0).astype("int64")
    out["fatal_gpus"] = out["fatal_gpus"].fillna(0).astype("int64")
    out["driver_version"] = out["driver_version"].astype(object).fillna("unknown")
    return out[cols]


def _gpus_seen(gpu: pd.DataFrame, fault: np.ndarray) -> pd.DataFrame:
    """Per partition and node of ``gpu`` (sorted by both, rows without either dropped): the first region and SKU
    reported (missing values skipped), the distinct GPUs, and the distinct GPUs with a ``fault`` row -- what

        gpu.assign(partition_start=ts floored, fault_uuid=gpu_uuid.where(fault)).groupby(["partition_start",
        "node_id"]).agg(region=first, sku=first, gpus_seen=gpu_uuid nunique, fatal_gpus=fault_uuid nunique)

    gives, from integer codes: that group-by's text "first" and "nunique" hashed a day's 1.7 million strings four
    times (~1.4 CPU s a day at 1,200 GPUs; this ~0.3). A (partition, node) pair is a cell of a dense grid: a
    day's 288 partitions x the nodes seen."""
    n = len(gpu)
    p_code, p_uni = factorize(gpu["ts"].dt.floor(PARTITION_FREQ), sort=True)
    n_code, n_uni = factorize(gpu["node_id"], sort=True)
    width = max(len(n_uni), 1)
    cell = np.where((p_code >= 0) & (n_code >= 0), p_code * width + n_code, -1)
    rows = np.flatnonzero(cell >= 0)
    present = np.bincount(cell[rows], minlength=len(p_uni) * width) > 0
    groups = np.flatnonzero(present)
    group_of = np.cumsum(present) - 1  # cell -> its group's number (the groups in cell order: partition, node)
    n_groups = len(groups)

    def first(col: str):
        values = gpu[col]
        at = first_rows(group_of[cell[rows]], factorize(values)[0][rows] >= 0, n_groups)  # each group's first value
        out = pd.array(np.full(n_groups, None, dtype=object), dtype=values.dtype)
        found = at >= 0
        out[found] = values.array[rows[at[found]]]
        return out

    uuid, uniques = factorize(gpu["gpu_uuid"])
    per_uuid = max(len(uniques), 1)

    def distinct_gpus(mask: np.ndarray) -> np.ndarray:
        keep = rows[(uuid[rows] >= 0) & mask[rows]]
        pairs = pd.unique(group_of[cell[keep]] * per_uuid + uuid[keep])  # hashed: no sort of a day's rows
        return np.bincount(pairs // per_uuid, minlength=n_groups).astype("int64")

    return pd.DataFrame({
        "partition_start": pd.Series(p_uni).take(groups // width).reset_index(drop=True),
        "node_id": pd.array(np.asarray(n_uni, dtype=object)[groups % width], dtype=gpu["node_id"].dtype),
        "region": first("region"), "sku": first("sku"),
        "gpus_seen": distinct_gpus(np.ones(n, dtype=bool)), "fatal_gpus": distinct_gpus(np.asarray(fault, dtype=bool))})


INVENTORY_COLUMNS = ["node_id", "region", "sku", "gpus"]


def _nodes_seen(rows: pd.DataFrame) -> pd.DataFrame:
    """node_inventory rows -> one row per node: its last region and SKU, the most GPUs it reported."""
    if rows.empty:
        return pd.DataFrame(columns=INVENTORY_COLUMNS)
    rows = rows.sort_values("partition_start", kind="stable")
    return (rows.groupby("node_id").agg(region=("region", "last"), sku=("sku", "last"), gpus=("gpus_seen", "max"))
            .reset_index()[INVENTORY_COLUMNS])


def _finish_inventory(inv: pd.DataFrame) -> pd.DataFrame:
    """One row per node (a node in two parts: its first region and SKU, its most GPUs), sorted by node."""
    if inv.empty:
        return pd.DataFrame(columns=INVENTORY_COLUMNS).astype({"gpus": "int64"})
    inv = (inv.astype({"gpus": float}).groupby("node_id", sort=True)
           .agg(region=("region", "first"), sku=("sku", "first"), gpus=("gpus", "max")).reset_index()[INVENTORY_COLUMNS])
    # a node that only ever reported node telemetry: assume the SKU's usual GPU count
    typical = inv[inv["gpus"] > 0].groupby("sku")["gpus"].agg(lambda s: int(s.mode().iloc[0]))
    inv["gpus"] = np.where(inv["gpus"] > 0, inv["gpus"], inv["sku"].map(typical).fillna(0)).astype("int64")
    return inv.astype({"node_id": object, "region": object, "sku": object})


def inventory_segments(wh: Warehouse, start, end) -> list[tuple[pd.Timestamp, pd.Timestamp, pd.DataFrame]]:
    """The inventory each 5-minute partition of ``[start, end)`` is judged against, as runs of consecutive
    partitions that share it: ``[(run_start, run_end, inventory), ...]`` covering the window; an inventory
    has node_id, region, sku and gpus (the most GPUs the node reported).

    The inventory as of partition ``p`` is what was known when ``p`` closed, so a range run and the
    sensor's partition-by-partition runs judge every partition alike (a range never expects, in an early
    partition, a node first seen in a later one):

    * every node seen in ``[p - INVENTORY_LOOKBACK, p]`` (the trailing day, the partition's own included):
      a node gone quiet while its region reports (decommissioned, re-imaged elsewhere) is forgotten after a day;
    * plus, for a region none of whose GPUs reported in that day but which reported GPUs within
      :data:`SILENT_REGION_MEMORY`, the region's inventory as of its last GPU report: a whole region's GPU
      collectors going silent is a collector outage, and its GPUs stay expected (missing data, paid
      GPU-minutes) until they come back, however long past a day. Remembering the silent *region* rather
      than every node for longer keeps a decommissioned node from counting as missing for days. Silence is
      judged on GPUs, like the missing_data detector and the loss tree's no_data: hosts still sending node
      telemetry (Philly's did at the edges of its gap) put their nodes in the inventory but with no GPU
      count of their own, so they cannot stand for the region's GPUs.
    """
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    parts = pd.date_range(start, end, freq=FIVE, inclusive="left")
    if not len(parts):
        return []
    window = pd.date_range(start - INVENTORY_LOOKBACK, end, freq=FIVE, inclusive="left")
    rows = wh.read_window("node_inventory", window[0], end)
    # regions' last GPU report before the rows read here (aggregated in the database)
    earlier = wh.last_partition_by("node_inventory", "region", start - SILENT_REGION_MEMORY, window[0], positive="gpus_seen")
    T, first = len(window), len(window) - len(parts)
    span = int(INVENTORY_LOOKBACK / FIVE) + 1  # partitions in [p - INVENTORY_LOOKBACK, p]

    # nodes seen in each partition's trailing day: their most GPUs, last region and last SKU
    nodes = pd.Index(sorted(set(rows["node_id"].astype(object))))
    regions = pd.Index(sorted(set(rows["region"].astype(object)) | set(earlier.index)))
    skus = pd.Index(sorted(set(rows["sku"].astype(object))))
    rows = rows[window.get_indexer(rows["partition_start"]) >= 0]  # (partitions are 5-minute aligned)
    t = window.get_indexer(rows["partition_start"])
    n = nodes.get_indexer(rows["node_id"].astype(object))
    r_row = regions.get_indexer(rows["region"].astype(object))
    gpus = np.full((T, len(nodes)), np.nan)
    gpus[t, n] = rows["gpus_seen"].to_numpy(dtype=float)
    region_at = np.full((T, len(nodes)), np.nan)
    region_at[t, n] = r_row
    sku_at = np.full((T, len(nodes)), np.nan)
    sku_at[t, n] = skus.get_indexer(rows["sku"].astype(object))
    most = pd.DataFrame(gpus).rolling(span, min_periods=1).max().to_numpy()[first:]
    seen = ~np.isnan(most)
    region_at = np.where(seen, pd.DataFrame(region_at).ffill().to_numpy()[first:], -1)
    sku_at = np.where(seen, pd.DataFrame(sku_at).ffill().to_numpy()[first:], -1)
    most = np.where(seen, most, -1)

    # regions whose GPUs were silent over the trailing day, remembered as of their last GPU report (within the memory)
    reported = np.zeros((T, len(regions)), dtype=bool)
    with_gpus = rows["gpus_seen"].to_numpy() > 0
    reported[t[with_gpus], r_row[with_gpus]] = True
    heard = pd.DataFrame(reported).rolling(span, min_periods=1).max().to_numpy()[first:] > 0
    last = pd.DataFrame(np.where(reported, np.arange(T)[:, None], np.nan)).ffill().to_numpy()[first:]
    earlier_idx = np.array([(earlier.get(reg, pd.NaT) - window[0]) / FIVE if reg in earlier.index else np.nan
                            for reg in regions])
    last = np.where(np.isnan(last), earlier_idx[None, :], last)  # in partitions of the window (may be negative)
    memory = int(SILENT_REGION_MEMORY / FIVE)
    p_idx = np.arange(first, T)[:, None]
    remembered = ~heard & ~np.isnan(last) & (last >= p_idx - memory)
    last = np.where(remembered, last, np.nan)

    changed = np.ones(len(parts), dtype=bool)
    if len(parts) > 1:
        changed[1:] = ((most[1:] != most[:-1]).any(axis=1) | (region_at[1:] != region_at[:-1]).any(axis=1)
                       | (sku_at[1:] != sku_at[:-1]).any(axis=1)
                       | (np.nan_to_num(last[1:], nan=-1e18) != np.nan_to_num(last[:-1], nan=-1e18)).any(axis=1))
    as_of: dict = {}  # (region, last GPU report) -> the region's inventory then

    def region_as_of(region: str, report: pd.Timestamp) -> pd.DataFrame:
        if (region, report) not in as_of:
            rows_then = wh.read_window("node_inventory", report - INVENTORY_LOOKBACK, report + FIVE, where={"region": region})
            as_of[(region, report)] = _nodes_seen(rows_then)
        return as_of[(region, report)]

    out = []
    starts = np.flatnonzero(changed)
    for k, i in enumerate(starts):
        j = starts[k + 1] if k + 1 < len(starts) else len(parts)
        m = seen[i]
        inv = pd.DataFrame({"node_id": nodes[m], "region": regions[region_at[i, m].astype(int)],
                            "sku": skus[sku_at[i, m].astype(int)], "gpus": most[i, m]})
        silent = [region_as_of(regions[c], window[0] + int(last[i, c]) * FIVE) for c in np.flatnonzero(~np.isnan(last[i]))]
        inv = pd.concat([x for x in (inv, *silent) if len(x)], ignore_index=True) if len(inv) or silent else inv
        out.append((parts[i], parts[j - 1] + FIVE, _finish_inventory(inv)))
    return out


def inventory_as_of(wh: Warehouse, partition) -> pd.DataFrame:
    """The inventory the 5-minute partition starting at ``partition`` is judged against (:func:`inventory_segments`)."""
    p = pd.Timestamp(partition)
    return inventory_segments(wh, p, p + FIVE)[0][2]


MOVED_COLUMNS = ["ts", "gpu_uuid", "node_id", "region", "sku", "new_node"]


def moved_gpus(wh: Warehouse, start, end, segments, gpu: pd.DataFrame) -> pd.DataFrame:
    """GPUs that report under another node name than the one the inventory knows them by (a node re-imaged or
    renamed): one row per minute of ``[start, end)`` and GPU UUID (``MOVED_COLUMNS``: the minute, the UUID, the
    old name with its region and SKU as the partition's inventory has them, the name it reports under now).

    The inventory remembers a node by name for INVENTORY_LOOKBACK; its GPUs carry their UUIDs wherever they go. A
    node of the partition's inventory that reports no GPU in the partition has moved when the UUIDs it reported at
    its last report (within INVENTORY_LOOKBACK) report in the partition under another name. Those UUIDs are read
    only where it can be: a node silent in the partition while a node reports that did not report at the silent
    node's last report (a name new since). ``segments``: :func:`inventory_segments` of the window; ``gpu``: the
    window's gpu_telemetry (ts, node_id, gpu_uuid)."""
    empty = pd.DataFrame(columns=MOVED_COLUMNS)
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    if gpu is None or gpu.empty:
        return empty
    seen = wh.read_window("node_inventory", start - INVENTORY_LOOKBACK, end,
                          columns=["partition_start", "node_id", "gpus_seen"])
    seen = seen[seen["gpus_seen"] > 0]
    reporting = {p: set(n) for p, n in seen["node_id"].astype(object).groupby(seen["partition_start"])}
    reports = {n: np.sort(pd.DatetimeIndex(ps).asi8) for n, ps in seen["partition_start"].groupby(seen["node_id"].astype(object))}
    wanted = []  # (partition, silent node, its last report before it)
    for s0, s1, inventory in segments:
        known = dict(zip(inventory["node_id"], zip(inventory["region"], inventory["sku"])))
        for p in pd.date_range(s0, s1, freq=FIVE, inclusive="left"):
            now = reporting.get(p, set())
            if not now:
                continue  # no GPU reports: nothing can report under a new name
            for node in set(known) - now:
                times = reports.get(node)
                i = np.searchsorted(times, p.value) if times is not None else 0
                if not i or times[i - 1] < (p - INVENTORY_LOOKBACK).value:
                    continue  # not heard from in the look-back (a silent region's node as of its last report)
                last = pd.Timestamp(times[i - 1], tz="UTC")
                if now - reporting.get(last, set()):
                    wanted.append((p, node, last, *known[node]))
    if not wanted:
        return empty
    wanted = pd.DataFrame(wanted, columns=["partition_start", "node_id", "last", "region", "sku"])
    # the UUIDs each silent node reported at its last report (one filtered read per distinct last report)
    last_uuids = []
    for last, nodes in wanted.groupby("last")["node_id"]:
        rows = wh.read_window("gpu_telemetry", last, last + FIVE, columns=["node_id", "gpu_uuid"],
                              where={"node_id": sorted(set(nodes))})
        last_uuids.append(rows.astype({"node_id": object, "gpu_uuid": object}).drop_duplicates().assign(last=last))
    known = wanted.merge(pd.concat(last_uuids, ignore_index=True), on=["node_id", "last"])
    now = gpu[gpu["gpu_uuid"].isin(set(known["gpu_uuid"]))]
    now = pd.DataFrame({"ts": now["ts"].dt.floor("1min"), "partition_start": now["ts"].dt.floor(PARTITION_FREQ),
                        "gpu_uuid": now["gpu_uuid"].astype(object), "new_node": now["node_id"].astype(object)})
    moved = now.merge(known[["partition_start", "gpu_uuid", "node_id", "region", "sku"]], on=["partition_start", "gpu_uuid"])
    moved = moved[moved["new_node"] != moved["node_id"]]
    return moved.drop_duplicates(["ts", "gpu_uuid", "node_id"])[MOVED_COLUMNS].reset_index(drop=True)


def inventory_union(segments) -> pd.DataFrame:
    """Every node of the segments' inventories (node -> region, e.g. to place jobs; not what is expected)."""
    invs = [inv for _, _, inv in segments if len(inv)]
    return _finish_inventory(pd.concat(invs, ignore_index=True)) if invs else _finish_inventory(pd.DataFrame(columns=INVENTORY_COLUMNS))


# the columns gpu_health.metrics.baselines.workload_step_stats reads (a day of GPU rows is 1.7 M: copying the
# other columns out of the run cache cost more than the statistics)
STEP_STATS_COLUMNS = {
    "gpu_telemetry": ["ts", "region", "node_id", "sku", "job_id", "throttle_reasons", "xid"],
    "node_telemetry": ["ts", "node_id", "health"],
    "job_runtime_metrics": ["ts", "job_id", "steps", "step_time_s", "data_loader_time_s", "grad_sync_time_s"],
}


def step_stats(wh: Warehouse, start, end, frames: dict | None = None) -> pd.DataFrame:
    frames = frames or {t: wh.read_window(t, start, end, columns=c) for t, c in STEP_STATS_COLUMNS.items()}
    meta = wh.read_window("job_metadata", pd.Timestamp(start) - META_LOOKBACK, end, columns=["job_id", "model_type"])
    maint = wh.read_window("maintenance_windows")
    return B.workload_step_stats(frames, meta=meta, maintenance=maint)


def step_baselines(wh: Warehouse, start, end, current: pd.DataFrame | None = None) -> pd.DataFrame:
    """The baseline of every partition in [start, end): 7-day history as of the partition's hour,
    or the partition's own stats at cold start (same result for a range run and partition runs)."""
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    current = current if current is not None else wh.read_window("workload_step_stats", start, end)
    hist_all = wh.read_window("workload_step_stats", start.floor("1h") - B.LOOKBACK, end)
    return B.step_baselines_range(hist_all, current, start, end)


def goodput(wh: Warehouse, start, end, frames: dict | None = None, baselines: pd.DataFrame | None = None,
            segments: list | None = None, moved: pd.DataFrame | None = None):
    """Leaves of the loss tree and the job failures of [start, end), partition by partition
    (each partition against its own baseline; ``segments``: :func:`inventory_segments` of the window, ``moved``:
    :func:`moved_gpus` of it, when the caller has them)."""
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    frames = frames or read_sources(wh, start, end, ["gpu_telemetry", "node_telemetry", "job_runtime_metrics"])
    frames = dict(frames)
    frames["scheduler_events"] = wh.read_window("scheduler_events", start - SCHED_LOOKBACK, end)
    meta = wh.read_window("job_metadata", start - META_LOOKBACK, end)
    maint = wh.read_window("maintenance_windows")
    capacity = capacity_as_of(wh, start, end)
    if segments is None:  # each partition against the inventory as of that partition
        segments = inventory_segments(wh, start, end)
    if moved is None:  # a renamed node's GPUs: expected under the name they report with, not the old one too
        moved = moved_gpus(wh, start, end, segments, frames["gpu_telemetry"])
    # which nodes' missing GPUs are hardware (a fault in the last day, or a gap of 15+ minutes)
    persist = G.GAP_PERSIST_PARTITIONS * FIVE
    corroborated = G.hardware_corroboration(
        wh.read_window("node_inventory", start - persist, end, columns=["partition_start", "node_id", "gpus_seen", "fatal_gpus"]),
        wh.last_partition_by("node_inventory", "node_id", start - G.FAULT_MEMORY, start - persist, positive="fatal_gpus"),
        inventory_union(segments).set_index("node_id")["gpus"], start, end)
    baselines = baselines if baselines is not None else wh.read_window("step_time_baselines", start, end)
    sched_all = frames["scheduler_events"]
    # runtime rows before the window: the work a job failing early in the window threw away
    rt_all = frames["job_runtime_metrics"]
    rt_before = wh.read_window("job_runtime_metrics", start - G.FAILURE_LOOKBACK, start)
    rt_all = pd.concat([rt_before, rt_all], ignore_index=True) if len(rt_before) else rt_all
    # the events naming a job's queue, as far back as its metadata (a job running for days keeps its queue)
    # (read whole and filtered here, not with ``where``: a run's cache serves the look-back's windows it holds,
    # where a filtered read opens the look-back's ~90 hour files again each piece; the same rows, in the same order)
    placing = ["submitted", "started"]
    older = wh.read_window("scheduler_events", start - META_LOOKBACK, start - SCHED_LOOKBACK,
                           columns=["ts", "job_id", "event", "queue"])
    older = older[older["event"].isin(placing).to_numpy()]
    recent = sched_all.loc[sched_all["event"].isin(placing).to_numpy(), ["ts", "job_id", "event", "queue"]]
    queue_events = pd.concat([older, recent], ignore_index=True) if len(older) else recent
    in_window = dict(frames)
    in_window["scheduler_events"] = sched_all[sched_all["ts"] >= start]
    chunks = [(c0, c1, inventory) for s0, s1, inventory in segments for c0, c1 in day_chunks(s0, s1, CHUNK)]
    # bounded memory: a range is computed in chunks of at most CHUNK (results do not depend on the chunking)
    leaves, failures = G.compute_states_range(
        in_window, chunks, capacity=capacity, maintenance=maint, meta=meta, sched_history=sched_all,
        baseline=baselines, runtime_history=rt_all, hw_corroborated=corroborated, queue_events=queue_events,
        moved=moved)
    failures = G.enrich_failures(failures, frames["gpu_telemetry"], meta, sched_all, inventory_union(segments))
    return leaves, failures


# The loss tree's chunks: a day cut every CHUNK after midnight, as the bulk path cuts its pieces (constants.PIECE)
CHUNK = PIECE


def rollups(leaves: pd.DataFrame) -> dict[str, pd.DataFrame]:
    states = G.rollup(leaves, ["region", "sku", "workload_class", "team"])
    nodes = G.rollup(leaves, ["region", "node_id", "sku", "driver_version"])
    by_region = G.goodput_ratio(leaves, ["region"])
    overall = G.goodput_ratio(leaves).assign(region="*")
    cluster = pd.concat([by_region, overall], ignore_index=True)
    return {"goodput_states": states, "goodput_node_states": nodes, "cluster_goodput": cluster}


def capacity_as_of(wh: Warehouse, start, end) -> pd.DataFrame:
    """cost_capacity rows as of each day of [start, end) (:func:`gpu_health.metrics.goodput.capacity_as_of`)."""
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    cost = wh.read_window("cost_capacity", start.normalize() - CAPACITY_MEMORY, end)
    days = pd.date_range(start.normalize(), (end - pd.Timedelta(1)).normalize(), freq="D")
    return G.capacity_as_of(cost, days, CAPACITY_MEMORY)


def finance_day(wh: Warehouse, day_start, day_end) -> dict[str, pd.DataFrame]:
    """Settled goodput and wasted spend for one day (failures up to a day later settle back into it)."""
    from gpu_health.metrics import finance as F

    states = wh.read_window("goodput_states", day_start, day_end)
    failures = wh.read_window("job_failures", day_start, pd.Timestamp(day_end) + pd.Timedelta(days=1))
    provisional = wh.read_window("cluster_goodput", day_start, day_end)
    cost = wh.read_window("cost_capacity", day_start, day_end)
    settled, moved = F.settle(states, failures, day_start, day_end)
    partitions = int(states["partition_start"].nunique()) if len(states) else 0
    daily = F.daily_goodput(settled, provisional, day_start, partitions)
    # a day Finance did not price (its file missing or quarantined) keeps its GPU-hours with the money null, never $0
    spend = F.wasted_spend(settled, F.blended_rates(cost), day_start)
    return {"cluster_goodput_daily": daily, "wasted_spend": spend, "moved_gpu_minutes": moved}


def blended_rate_by_region(cost: pd.DataFrame) -> dict:
    """USD per paid GPU-hour per region (capacity-weighted over SKUs) and '*' for the cluster."""
    from gpu_health.metrics.finance import blended_rates

    if cost is None or cost.empty:
        return {}
    r = blended_rates(cost)
    r = r.assign(w=r["capacity_gpus"].astype(float))
    out = {reg: float((g["blended_gpu_hour_usd"] * g["w"]).sum() / max(g["w"].sum(), 1)) for reg, g in r.groupby("region")}
    out["*"] = float((r["blended_gpu_hour_usd"] * r["w"]).sum() / max(r["w"].sum(), 1))
    return out


FIRING_PAGE = {"severity": "page", "status": "firing"}  # alert rows of a partition in which a page was firing


def _firing_pages(alerts: pd.DataFrame) -> pd.DataFrame:
    """The FIRING_PAGE rows of ``alerts``: incident minutes never teach a baseline."""
    if not len(alerts):
        return alerts
    return alerts[np.logical_and.reduce([alerts[k] == v for k, v in FIRING_PAGE.items()])]


def _forget_paged(hist: pd.DataFrame, alerts: pd.DataFrame) -> pd.DataFrame:
    """``hist`` with the idle_blocked share blanked where a scheduling page was firing in the region."""
    if not len(alerts) or not len(hist):
        return hist
    paged = _firing_pages(alerts[alerts["cause_family"] == "scheduling"])
    if not len(paged):
        return hist
    keys = pd.MultiIndex.from_frame(paged[["partition_start", "region"]])
    hit = pd.MultiIndex.from_frame(hist[["partition_start", "region"]]).isin(keys)
    if not hit.any():
        return hist
    hist = hist.copy()
    hist.loc[hit, "share_idle_blocked"] = np.nan
    return hist


def _by_partition(frame: pd.DataFrame, col: str, start: pd.Timestamp, end: pd.Timestamp) -> dict:
    """partition start -> the rows of ``frame`` whose ``col`` falls in that partition of [start, end) (partitions
    without rows absent), each in the frame's order with its index: what a group-by on the floored column gives.
    A frame sorted by ``col`` (the stores return telemetry in time order) is cut into slices at the partition
    bounds, where a group-by would hash and copy every row; any other frame is grouped."""
    if not len(frame):
        return {}
    ts = pd.DatetimeIndex(frame[col])
    ns = ts.as_unit("ns").asi8
    if ts.tz is None or ns[0] == np.iinfo(np.int64).min or np.any(ns[1:] < ns[:-1]) or start != start.floor(PARTITION_FREQ):
        return {p: part for p, part in frame.groupby(frame[col].dt.floor(PARTITION_FREQ))}
    parts = pd.date_range(start, end, freq=PARTITION_FREQ, inclusive="left")
    lo = np.searchsorted(ns, parts.as_unit("ns").asi8, "left")
    hi = np.searchsorted(ns, (parts + PARTITION).as_unit("ns").asi8, "left")
    return {p: frame.iloc[a:b] for p, a, b in zip(parts, lo, hi) if b > a}


def _rows_in(part: pd.DataFrame, frame: pd.DataFrame) -> slice | None:
    """The positions of ``part`` in ``frame`` as a slice, where its index says them (``frame`` numbered 0..n-1
    as reads give it, ``part`` a run of it), else None."""
    whole, idx = frame.index, part.index
    if (isinstance(whole, pd.RangeIndex) and whole.start == 0 and whole.step == 1
            and isinstance(idx, pd.RangeIndex) and idx.step == 1):
        return slice(idx.start, idx.stop)
    return None


def alerts(wh: Warehouse, start, end, *, unstored: tuple[pd.Timestamp, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Alert snapshots of every partition in [start, end), carrying the open alerts forward.

    ``unstored`` = (since, snapshots): the alert snapshots of [since, start) computed by this step but not
    stored yet (alerts_after_rerun). They stand in for the stored rows of those partitions: the open alerts
    carried into ``start`` and the partitions a scheduling page held come from them.
    """
    from gpu_health.diagnosis import alerts as A
    from gpu_health.diagnosis.detect import DEPLOY_LOOKBACK, PartitionContext, detect, job_table, prepare_range

    start, end = pd.Timestamp(start), pd.Timestamp(end)
    five = PARTITION
    frames = read_sources(wh, start, end, ["gpu_telemetry", "node_telemetry", "network_telemetry"])
    facility = wh.read_window("facility_telemetry", start, end)  # optional source: empty without facility data
    fac_p = _by_partition(facility, "ts", start, end)
    runtime = wh.read_window("job_runtime_metrics", start - five, end)
    sched = wh.read_window("scheduler_events", start - SCHED_LOOKBACK, end)
    changes = wh.read_window("change_events", start - DEPLOY_LOOKBACK, end)
    maint = wh.read_window("maintenance_windows")
    leaves = wh.read_window("goodput_leaves", start, end)
    baselines = wh.read_window("step_time_baselines", start, end)
    meta = wh.read_window("job_metadata", start - META_LOOKBACK, end,
                          columns=["job_id", "team", "workload_class", "model_type", "framework_version"])
    segments = inventory_segments(wh, start, end)
    inventory_at = {p: inv for s0, s1, inv in segments for p in pd.date_range(s0, s1, freq=five, inclusive="left")}
    moved_p = _by_partition(moved_gpus(wh, start, end, segments, frames["gpu_telemetry"]), "ts", start, end)
    hist = wh.read_window("cluster_goodput", start - pd.Timedelta(days=7, hours=1), end,
                          columns=["partition_start", "region", "share_idle_blocked"])
    # incident minutes do not teach the seasonal baseline: forget the partitions a scheduling page held
    held = wh.read_window("alerts", start - pd.Timedelta(days=7, hours=1), start,
                          columns=["partition_start", "region", "cause_family", "severity", "status"],
                          where={"cause_family": "scheduling", **FIRING_PAGE})
    prev = wh.read_window("alerts", start - five, start)
    if unstored is not None:
        since, fresh = unstored
        held = pd.concat([held[held["partition_start"] < since], _firing_pages(fresh)[held.columns]]) if len(fresh) else \
            held[held["partition_start"] < since]
        if since <= start - five:
            prev = fresh[fresh["partition_start"] == start - five] if len(fresh) else A.empty()
    hist = _forget_paged(hist, held)
    cost = capacity_as_of(wh, start, end)
    rates = blended_rate_by_region(cost)
    cost_days = dict(tuple(cost.groupby(pd.to_datetime(cost["date"].astype(str)).dt.date))) if len(cost) else {}
    rejects = wh.read_window("source_rejects", start, end, columns=["source", "partition_start", "origin", "reason"])
    # a cost_capacity reject is filed under its day's midnight: a ticket of its day (cost_p), not of one partition
    rejects = rejects[rejects["source"] != "cost_capacity"] if len(rejects) else rejects
    rejects_p = dict(tuple(rejects.groupby("partition_start"))) if len(rejects) else {}
    # Finance's cost file of each partition's day and of the day before: live, a day is settled (its cost file
    # read) after its partitions ran, so its reject is stored while the next day's partitions run
    cost_rejects = wh.read_window("source_rejects", start.normalize() - COST_REJECT_DAYS, end,
                                  columns=["partition_start", "origin", "row_index", "reason"],
                                  where={"source": "cost_capacity"})
    cost_p = dict(tuple(cost_rejects.groupby(cost_rejects["partition_start"].dt.normalize()))) if len(cost_rejects) else {}
    gaps = wh.read_window("source_gaps", start, end, columns=["source", "partition_start", "missing_family", "reason"])
    gaps_p = dict(tuple(gaps.groupby("partition_start"))) if len(gaps) else {}
    from gpu_health.metrics.slo import LOOKBACK as SLO_LOOKBACK
    slo_rows = wh.read_window("slo_error_budgets", start - SLO_LOOKBACK, end,
                              columns=["partition_start", "slo", "region", "model_name", "total_events", "bad_events",
                                       "interpolated", "error_budget_remaining"])
    slo_rows = slo_rows.sort_values("partition_start", kind="stable").reset_index(drop=True)
    from gpu_health.metrics.slo import RELEASE_LOOKBACK
    release_rows = wh.read_window("slo_version_events", start - RELEASE_LOOKBACK, end)
    release_rows = release_rows.sort_values("partition_start", kind="stable").reset_index(drop=True)
    from gpu_health.diagnosis.platform import RESTART_WINDOW
    kube_pods = wh.read_window("kube_pods", start - RESTART_WINDOW, end)  # optional sources: empty when not exported
    kube_pods = kube_pods.sort_values("ts", kind="stable").reset_index(drop=True)
    kube_nodes = wh.read_window("kube_nodes", start, end)
    kube_nodes_p = _by_partition(kube_nodes, "ts", start, end)
    from gpu_health.diagnosis.convergence import CONVERGENCE_LOOKBACK
    loss_hist = wh.read_window("job_runtime_metrics", start - CONVERGENCE_LOOKBACK, end,
                               columns=["ts", "job_id", "steps", "loss", "checkpoint_time_s", "last_checkpoint_step",
                                        "grad_norm"])
    loss_hist = loss_hist.sort_values("ts", kind="stable").reset_index(drop=True)
    union = inventory_union(segments)
    jobs = job_table(sched, union)  # node -> region only: where each queue's jobs run
    placed = G.placements(sched)
    prep = prepare_range(jobs, meta, job_lookback=SCHED_LOOKBACK,
                         windows={"runtime": runtime, "sched": sched, "changes": changes}, loss_history=loss_hist,
                         sched=sched, node_region=dict(zip(union["node_id"], union["region"])),
                         gpu=frames["gpu_telemetry"])

    def by_partition(frame, col="ts"):
        return _by_partition(frame, col, start, end)

    g_p, n_p, net_p = (by_partition(frames[t]) for t in ("gpu_telemetry", "node_telemetry", "network_telemetry"))
    leaves_p, base_p = by_partition(leaves, "partition_start"), by_partition(baselines, "partition_start")
    empty = {t: frames[t].iloc[0:0] for t in frames}
    # (the time columns the loop cuts windows from, taken out of their frames once)
    placed_ts, pods_ts, slo_ps, loss_ts = placed["ts"], kube_pods["ts"], slo_rows["partition_start"], loss_hist["ts"]
    release_ps = release_rows["partition_start"]
    out = []
    for p in pd.date_range(start, end, freq=PARTITION_FREQ, inclusive="left"):
        gpu = g_p.get(p, empty["gpu_telemetry"])
        ctx = PartitionContext(
            start=p, end=p + five, gpu=gpu, gpu_rows=_rows_in(gpu, frames["gpu_telemetry"]),
            node=n_p.get(p, empty["node_telemetry"]),
            network=net_p.get(p, empty["network_telemetry"]),
            runtime=prep.between("runtime", p - five, p + five),
            sched=prep.between("sched", p + five - SCHED_LOOKBACK, p + five),
            changes=prep.between("changes", None, p + five), maintenance=maint, leaves=leaves_p.get(p, leaves.iloc[0:0]),
            baselines=base_p.get(p, baselines.iloc[0:0]), meta=meta, inventory=inventory_at[p],
            region_history=hist[hist["partition_start"] < p], open_baselines=A.open_baselines(prev),
            prepared=prep,
            placements=placed.iloc[placed_ts.searchsorted(p + five - SCHED_LOOKBACK):placed_ts.searchsorted(p + five)],
            rejects=rejects_p.get(p), source_gaps=gaps_p.get(p),
            slo_events=slo_rows.iloc[slo_ps.searchsorted(p + five - SLO_LOOKBACK):slo_ps.searchsorted(p + five)]
            if len(slo_rows) else None,
            slo_versions=release_rows.iloc[release_ps.searchsorted(p + five - RELEASE_LOOKBACK):release_ps.searchsorted(p + five)]
            if len(release_rows) else None,
            open_keys=frozenset(prev.loc[prev["status"] != "resolved", "key"]) if len(prev) else frozenset(),
            facility=fac_p.get(p), capacity=cost_days.get(p.date()), moved=moved_p.get(p),
            cost_rejects=_days_rejects(cost_p, p.normalize() - COST_REJECT_DAYS, p.normalize()),
            kube_pods=kube_pods.iloc[pods_ts.searchsorted(p - RESTART_WINDOW):pods_ts.searchsorted(p + five)]
            if len(kube_pods) else None,
            kube_nodes=kube_nodes_p.get(p),
            loss_history=loss_hist.iloc[loss_ts.searchsorted(p + five - CONVERGENCE_LOOKBACK):loss_ts.searchsorted(p + five)]
            if len(loss_hist) else None,
        )
        snap = A.step(prev, detect(ctx), p, rates=rates, changes=ctx.changes)
        if len(snap):
            out.append(snap)
            hist = _forget_paged(hist, snap)
        prev = snap
    return pd.concat(out, ignore_index=True) if out else A.empty()


def _days_rejects(by_day: dict, first: pd.Timestamp, last: pd.Timestamp) -> pd.DataFrame | None:
    """The cost_capacity rejects of the days ``first`` .. ``last`` (None: none)."""
    days = [by_day[d] for d in pd.date_range(first, last, freq="D") if d in by_day]
    return pd.concat(days, ignore_index=True) if len(days) > 1 else days[0] if days else None


# A re-run partition re-derives the alerts of the partitions after it that were already computed (their snapshots
# carry the re-run partition's open alerts forward), until a partition's snapshot comes out as stored (from there on
# every later one would too), at most this far: the longest window one run of the alerts step covers anyway
# (`gpu-health run` and a backfill run a range as day-long runs), so a re-run costs at most one ordinary range run.
# An alert whose state still differs past it (an incident open for over a day) keeps its stored later rows; the
# step's metadata says so (alerts_rederive_converged = false). The same bound holds for every derived table after a
# correction (steps/rederive.py: the later partitions re-derived, those past it reported stale).
ALERT_LOOKAHEAD = pd.Timedelta(hours=24)
# Partitions re-derived per pass: the first pass is one partition (a re-run whose data did not change converges at
# once), later passes an hour (reads amortized over 12 partitions).
_LOOKAHEAD_PASSES = (PARTITION, pd.Timedelta(hours=1))
WITHDRAWN = "Withdrawn: the data behind this alert was replaced and its partitions re-derived without it."


def _comparable(v):
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return None
    if isinstance(v, float | np.floating):
        return float(f"{v:.9g}")  # a float through the database and back: the same to 9 digits
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, pd.Timestamp):
        return pd.Timestamp(v).tz_convert("UTC")
    return str(v)


def _snapshot_key(frame: pd.DataFrame) -> list[tuple]:
    """A partition's alert snapshot as sorted comparable tuples (the same rows stored or just computed)."""
    from gpu_health.diagnosis.alerts import COLUMNS

    rows = [tuple(_comparable(v) for v in r) for r in frame[COLUMNS].astype(object).itertuples(index=False)]
    return sorted(rows, key=repr)


def _sched_pages(frame: pd.DataFrame) -> set:
    pages = _firing_pages(frame[frame["cause_family"] == "scheduling"]) if len(frame) else frame
    return set(zip(pages["partition_start"], pages["region"])) if len(pages) else set()


def computed_until(wh: Warehouse, end, horizon: pd.Timedelta) -> pd.Timestamp:
    """The end of the later partitions already computed: the unbroken run of partitions with a stored loss tree
    from ``end`` on, up to ``horizon`` past it (a partition that never ran stops it; its own run re-derives what
    follows it)."""
    end = pd.Timestamp(end)
    done = set(wh.read_window("cluster_goodput", end, end + horizon, columns=["partition_start"],
                              where={"region": "*"})["partition_start"])
    limit = end
    while limit in done:
        limit += FIVE
    return limit


def alerts_after_rerun(wh: Warehouse, start, end, frame: pd.DataFrame, *,
                       horizon: pd.Timedelta | None = None) -> tuple[pd.DataFrame, pd.Timestamp, dict]:
    """The alert snapshots of [start, stop): ``frame`` (this step's [start, end)) and the later partitions re-derived
    from it, plus a tombstone for each alert the re-derivation no longer opens.

    Rule: the partitions after ``end`` whose loss tree is already stored (cluster_goodput rows, an unbroken run of
    them up to ``horizon``, default ALERT_LOOKAHEAD) were judged with the open alerts of the partition before
    them, so when [start, end) re-runs (its landing files replaced) they are re-derived in order from the new
    snapshots, until one comes out exactly as stored while the same partitions are held by scheduling pages: an alert's state is the previous
    snapshot, and the seasonal baseline of the scheduling detector forgets the partitions a scheduling page held,
    so with both equal every later partition would come out as stored too. ``stop`` is that partition. An alert
    stored in [start, stop) that the re-derivation no longer produces (its evidence vanished) gets one ``resolved``
    row at the partition it opened in, saying it was withdrawn (WITHDRAWN), so ``alerts_current`` and Alertmanager
    see it resolve instead of a page left firing. Returns the rows to store for [start, stop), ``stop`` and
    metadata (partitions re-derived, whether it converged inside the horizon, the withdrawn alert ids).
    """
    from gpu_health.diagnosis import alerts as A

    start, end = pd.Timestamp(start), pd.Timestamp(end)
    horizon = ALERT_LOOKAHEAD if horizon is None else horizon
    limit = computed_until(wh, end, horizon)
    parts, t, hit, passes = [frame], end, None, 0
    while t < limit and hit is None:
        t1 = min(t + _LOOKAHEAD_PASSES[min(passes, 1)], limit)
        passes += 1
        fresh = pd.concat([p for p in parts if len(p)] or [A.empty()], ignore_index=True)
        new = alerts(wh, t, t1, unstored=(start, fresh))
        old = wh.read_window("alerts", t, t1)
        new_p = dict(tuple(new.groupby("partition_start"))) if len(new) else {}
        old_p = dict(tuple(old.groupby("partition_start"))) if len(old) else {}
        same_held = _sched_pages(wh.read_window("alerts", start, t)) == _sched_pages(fresh)
        for p in pd.date_range(t, t1, freq=FIVE, inclusive="left"):
            a, b = new_p.get(p, A.empty()), old_p.get(p, A.empty())
            if same_held and _snapshot_key(a) == _snapshot_key(b):
                hit = p
                break
            same_held = same_held and _sched_pages(a) == _sched_pages(b)
        parts.append(new[new["partition_start"] < hit] if hit is not None and len(new) else new)
        t = t1
    stop = hit if hit is not None else t
    # not converged: the horizon cut the re-derivation short of a partition that came out as stored
    converged = hit is not None or wh.read_window("cluster_goodput", stop, stop + FIVE, columns=["partition_start"],
                                                  where={"region": "*"}).empty
    rows = pd.concat([p for p in parts if len(p)] or [A.empty()], ignore_index=True)
    stored = wh.read_window("alerts", start, stop)
    gone = sorted(set(stored["alert_id"]) - set(rows["alert_id"])) if len(stored) else []
    if gone:
        first = stored[stored["alert_id"].isin(gone)].sort_values("partition_start").drop_duplicates("alert_id")
        at = first["partition_start"] + FIVE
        text = first["description"].astype(str)
        first = first.assign(status="resolved", resolved_at=at, updated_at=at, usd_per_hour=0.0, lost_gpu_minutes=0.0,
                             description=text.where(text.str.startswith(WITHDRAWN), WITHDRAWN + " " + text))
        rows = pd.concat([rows, first[A.COLUMNS]], ignore_index=True) if len(rows) else first[A.COLUMNS]
    meta = {"alerts_rederived_partitions": int((stop - end) / FIVE), "alerts_rederive_converged": bool(converged),
            "alerts_withdrawn": gone}
    return rows, stop, meta


# the columns gpu_health.metrics.kpis reads of the big sources and of job metadata (a day of GPU rows is 1.7 M: the
# columns no KPI reads cost a copy out of the run cache, and the 4 days of job metadata a fetch from the database)
KPI_COLUMNS = {
    "gpu_telemetry": ["ts", "region", "node_id", "sku", "job_id", "gpu_util_pct", "sm_active", "tensor_active",
                      "power_w", "throttle_reasons", "ecc_dbe_delta", "xid", "gpu_uuid"],
    "node_telemetry": ["ts", "region", "node_id", "sku", "health"],
    "network_telemetry": ["ts", "region", "node_id", "packet_loss_pct", "retransmits", "link_up"],
    "job_runtime_metrics": ["ts", "job_id", "steps", "step_time_s", "data_loader_time_s", "grad_sync_time_s",
                            "checkpoint_time_s"],
    "job_metadata": ["job_id", "submitted_at", "team", "model_type", "workload_class", "requested_gpus", "sla_deadline"],
}


def kpi_values(wh: Warehouse, start, end) -> pd.DataFrame:
    """The KPI catalog's values for every partition of [start, end) (gpu_health.metrics.kpis)."""
    from gpu_health.metrics.kpis import compute_kpis

    start, end = pd.Timestamp(start), pd.Timestamp(end)
    frames = {t: wh.read_window(t, start, end, columns=KPI_COLUMNS.get(t))
              for t in ("gpu_telemetry", "node_telemetry", "network_telemetry", "job_runtime_metrics", "job_metadata",
                        "change_events", "facility_telemetry")}
    # six hours of scheduler events show every job still waiting at the window's start
    frames["scheduler_events"] = wh.read_window("scheduler_events", start - SCHED_LOOKBACK, end)
    return compute_kpis(
        frames, wh.read_window("goodput_states", start, end), start=start, end=end,
        cost=capacity_as_of(wh, start, end),
        job_metadata_lookup=wh.read_window("job_metadata", start - META_LOOKBACK, start,
                                           columns=KPI_COLUMNS["job_metadata"]),
        step_baseline=wh.read_window("step_time_baselines", start, end),
        pending=pd.DataFrame(columns=["job_id", "submitted_at", "gpus"]),
        inventory=inventory_segments(wh, start, end),
    )


def _paged_partitions(wh: Warehouse, start, end) -> set:
    """Partitions in which a page was firing (FIRING_PAGE), filtered in the database."""
    a = wh.read_window("alerts", start, end, columns=["partition_start"], where=FIRING_PAGE)
    return set(a["partition_start"])


def _slices(start, end, days: int, pad: pd.Timedelta) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """The same time of day on each of the previous ``days`` days (padded), plus the trailing two hours."""
    out = [(start - pd.Timedelta(days=d) - pad, end - pd.Timedelta(days=d) + pad) for d in range(days, 0, -1)]
    return out + [(start - pd.Timedelta(hours=2), start)]


def _read_slices(wh: Warehouse, table: str, slices, **kw) -> pd.DataFrame:
    parts = [wh.read_window(table, a, b, **kw) for a, b in slices]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True).drop_duplicates() if parts else wh.read_window(table, slices[-1][1], slices[-1][1], **kw)


def _spans(slices) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """Time slices merged where they overlap or touch, in time order: the same instants, each read once."""
    out: list[list[pd.Timestamp]] = []
    for a, b in sorted(slices):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _read_spans(wh: Warehouse, table: str, slices, columns: list[str]) -> pd.DataFrame:
    """The rows of ``table`` in any of ``slices`` (each row once), restricted to ``columns``.

    The slices are merged first (:func:`_spans`): a day-long window's 15 slices overlap into one span, so it is one
    query with no duplicate rows to drop, instead of 15 queries and a de-duplication of ~15 days of rows."""
    parts = [wh.read_window(table, a, b, columns=columns) for a, b in _spans(slices)]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0] if parts else \
        wh.read_window(table, slices[-1][1], slices[-1][1], columns=columns)


# the columns expected_values reads: the slice, the value and whether it is a sample
KPI_HISTORY_COLUMNS = ["partition_start", "kpi", "region", "sku", "workload_class", "team", "value", "status"]
STATE_HISTORY_COLUMNS = ["partition_start", "region", "sku", "workload_class", "state", "gpu_minutes"]


def _read_disjoint(wh: Warehouse, table: str, slices) -> pd.DataFrame:
    """:func:`_read_slices` of a table whose rows are unique (a primary key): each slice reads only what the
    slices before it did not cover, so no row is read twice and none needs dropping -- the same rows in the
    same order (a day's trailing two hours are inside the day before it: a read and a duplicate scan of ~300,000
    rows saved)."""
    parts, covered = [], []
    for a, b in slices:
        for lo, hi in _uncovered(a, b, covered):
            part = wh.read_window(table, lo, hi)
            if len(part):
                parts.append(part)
        covered.append((a, b))
    return pd.concat(parts, ignore_index=True) if parts else wh.read_window(table, slices[-1][1], slices[-1][1])


def _uncovered(a, b, covered) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """The parts of [a, b) outside every interval of ``covered``, in time order."""
    pieces = [(a, b)]
    for c0, c1 in covered:
        pieces = [q for lo, hi in pieces for q in ((lo, min(hi, c0)), (max(lo, c1), hi)) if q[0] < q[1]]
    return sorted(pieces)


def kpi_baselines(wh: Warehouse, start, end) -> pd.DataFrame:
    """Expected value of every KPI series and loss-state share per partition (gpu_health.metrics.kpi_baselines):
    only the slices its rules use are read (the same +-30 min on each of the previous 14 days, the trailing 2 h),
    and of them only the columns the rules use."""
    from gpu_health.metrics.kpi_baselines import expected_values

    start, end = pd.Timestamp(start), pd.Timestamp(end)
    # the trailing 2 hours of every partition: the window's own rows too (written before this step, as the
    # partition's own run reads those before it), and so its pages
    slices = _slices(start, end, 14, pd.Timedelta(minutes=35))[:-1] + [(start - pd.Timedelta(hours=2), end)]
    kpis = _read_spans(wh, "kpi_values", slices, KPI_HISTORY_COLUMNS)
    states = _read_spans(wh, "goodput_states", slices, STATE_HISTORY_COLUMNS)
    exclude = _paged_partitions(wh, start - pd.Timedelta(days=15), end)
    parts = pd.date_range(start, end, freq=PARTITION_FREQ, inclusive="left")
    return expected_values(kpis, states, parts, exclude=exclude, maintenance=wh.read_window("maintenance_windows"))


def actual_and_expected_leaves(wh: Warehouse, start, end) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The goodput leaves of every partition of [start, end) and their expected leaves (same slot of the
    previous 3 days, paged partitions excluded, else the trailing 2 hours; gpu_health.diagnosis.decompose)."""
    from gpu_health.diagnosis.decompose import expected_leaves_from_history

    start, end = pd.Timestamp(start), pd.Timestamp(end)
    actual = wh.read_window("goodput_leaves", start, end)
    history = _read_disjoint(wh, "goodput_leaves", _slices(start, end, 3, pd.Timedelta(0)))
    history = history[history["partition_start"] < start]
    # the window's pages too: at cold start a partition's trailing two hours include the window before it
    exclude = _paged_partitions(wh, start - pd.Timedelta(days=4), end)
    parts = pd.date_range(start, end, freq=PARTITION_FREQ, inclusive="left")
    # expected leaves of every partition at once, each from what its own run reads (decompose's docstring)
    expected = expected_leaves_from_history(history, parts, actual_leaves=actual, exclude=exclude, lookback_days=3)
    return actual, expected.drop(columns=["method"], errors="ignore")


def decomposition(wh: Warehouse, start, end) -> pd.DataFrame:
    """Ranked causes of each partition's goodput change against its expected leaves (actual_and_expected_leaves)."""
    from gpu_health.diagnosis.decompose import decompose_range

    actual, expected = actual_and_expected_leaves(wh, start, end)
    return decompose_range(actual, expected)


def serving_slis(wh: Warehouse, start, end) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The serving SLIs of every partition of [start, end) (gpu_health.metrics.serving), and the minutes whose
    latency ``+Inf`` bucket disagrees with ``inference_requests.requests`` (the two tables are one histogram)."""
    from gpu_health.contracts.models import inf_bucket_matches_requests
    from gpu_health.metrics.serving import serving_slis as compute

    req = wh.read_window("inference_requests", start, end)
    buckets = wh.read_window("inference_latency_buckets", start, end)
    return compute(req, buckets), inf_bucket_matches_requests(buckets, req)


def slo_error_budgets(wh: Warehouse, start, end) -> pd.DataFrame:
    """Each SLO's events and error budget remaining for every partition of [start, end) (gpu_health.metrics.slo),
    the rolling window continued from the table's own rows of the SLO window before ``start``."""
    from gpu_health.metrics import slo as S
    from gpu_health.metrics.slo_catalog import WINDOW_DAYS

    start, end = pd.Timestamp(start), pd.Timestamp(end)
    history = wh.read_window("slo_error_budgets", start - pd.Timedelta(days=WINDOW_DAYS), start)
    req = wh.read_window("inference_requests", start, end)
    buckets = wh.read_window("inference_latency_buckets", start, end)
    events = S.slo_events(req, buckets, S.generative_models(history))
    return S.error_budgets(events, history)


def slo_version_events(wh: Warehouse, start, end) -> pd.DataFrame:
    """Each SLO's events and bad events per model version for every partition of [start, end)
    (gpu_health.metrics.slo.slo_events by version). A model is generative when it exports a TTFT histogram in
    the window: a version's absent TTFT series is judged by slo_burn on the model, not here."""
    from gpu_health.metrics import slo as S

    req = wh.read_window("inference_requests", start, end)
    buckets = wh.read_window("inference_latency_buckets", start, end)
    return S.slo_events(req, buckets, by_version=True)


def paid_invariant(states: pd.DataFrame, wh: Warehouse, start, end, segments: list | None = None,
                   moved: pd.DataFrame | None = None) -> dict:
    """States must sum to paid GPU-minutes: Finance's capacity (the GPUs in the partition's inventory where Finance
    has no cost row for the region x SKU, less a renamed node's GPUs its old name still holds: ``moved``,
    :func:`moved_gpus` of the window) x minutes.
    Returns ``passed``, ``slices``, ``violations``, ``max_abs_error_gpu_minutes`` and ``examples`` (a frame).
    ``segments``: :func:`inventory_segments` of the window, when the caller has them."""
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    cap = capacity_as_of(wh, start, end)
    cap = cap.groupby(["region", "sku"])["capacity_gpus"].max() if cap is not None and len(cap) else None
    expected = {}  # partition -> (region, sku) -> paid GPUs
    for s0, s1, inventory in segments if segments is not None else inventory_segments(wh, start, end):
        inv = inventory.groupby(["region", "sku"])["gpus"].sum()
        paid = pd.concat([cap, inv[~inv.index.isin(cap.index)]]) if cap is not None else inv
        expected.update({p: paid for p in pd.date_range(s0, s1, freq=FIVE, inclusive="left")})
    got = states.groupby(["partition_start", "region", "sku"])["gpu_minutes"].sum().reset_index()
    minutes = (((got["partition_start"] + FIVE).clip(upper=end) - got["partition_start"])
               / pd.Timedelta(minutes=1)).to_numpy(dtype=float)  # (an empty frame stays numeric)
    got["expected"] = [expected[p].get((r, s), 0) if p in expected else 0
                       for p, r, s in zip(got["partition_start"], got["region"], got["sku"])] * minutes
    if moved is not None and len(moved):  # (counted once, under the name they report with)
        twice = moved.groupby([moved["ts"].dt.floor(PARTITION_FREQ), moved["region"].astype(object),
                               moved["sku"].astype(object)]).size()
        unpriced = [cap is None or (r, s) not in cap.index for r, s in zip(got["region"], got["sku"])]
        at = pd.MultiIndex.from_arrays([got["partition_start"], got["region"].astype(object), got["sku"].astype(object)])
        got["expected"] -= np.where(unpriced, twice.reindex(at).fillna(0).to_numpy(dtype=float), 0.0)
    got["error"] = (got["gpu_minutes"] - got["expected"]).abs()
    bad = got[got["error"] > 1e-6 * got["expected"].clip(lower=1)]
    return {"passed": bad.empty, "slices": len(got), "violations": len(bad),
            "max_abs_error_gpu_minutes": float(got["error"].max() if len(got) else 0), "examples": bad.head(10)}


def rack_facility(wh: Warehouse, start, end) -> pd.DataFrame:
    """Per rack and partition: energy, peak draw against the continuous-load limit, inlet, PSUs and throttled GPUs
    (gpu_health.metrics.facility); empty on a cluster without facility data."""
    from gpu_health.metrics.facility import rack_facility as compute

    facility = wh.read_window("facility_telemetry", start, end)
    gpu = wh.read_window("gpu_telemetry", start, end, columns=["ts", "node_id", "gpu_uuid", "throttle_reasons"]) \
        if len(facility) else None
    return compute(facility, gpu, pd.Timestamp(start), pd.Timestamp(end))

"""Bodies of the telemetry steps: the node inventory, the workload step statistics and their baselines, the loss tree.

No Dagster and no warehouse here: each body reads what its step declares (``registry.py``) through the
:class:`~gpu_health.steps.resolve.Inputs` it is given and calls the pure functions of ``metrics``; the step
(``registry.py``) stores what it returns.

The inventory as of a partition is the trailing day of node_inventory (INVENTORY_LOOKBACK), and for a silent region
its inventory as of its last report up to SILENT_REGION_MEMORY back (:func:`inventory_segments`); job metadata is
read META_LOOKBACK back (jobs live up to 3.5 days; older ones count as ``unknown``, never dropped), scheduler events
SCHED_LOOKBACK (pending demand and queues).
"""

import numpy as np
import pandas as pd

from gpu_health.codes import factorize, first_rows
from gpu_health.constants import FATAL_XIDS, PARTITION, PARTITION_FREQ, PIECE, day_chunks
from gpu_health.metrics import baselines as B
from gpu_health.metrics import goodput as G
from gpu_health.steps.finance import capacity_as_of
from gpu_health.steps.resolve import Inputs

META_LOOKBACK = G.JOB_ATTRIBUTE_LOOKBACK  # job metadata (and the loss tree's placement events) this far back
SCHED_LOOKBACK = G.SCHED_LOOKBACK
INVENTORY_LOOKBACK = pd.Timedelta(hours=24)
# A region none of whose nodes reported over INVENTORY_LOOKBACK keeps its inventory as of its last report for this
# long after it (inventory_segments): a week, the longest history the pipeline reads elsewhere (baselines). Past it
# the region is no longer expected (its missing_data ticket resolves); a region taken out of service is expected
# until then.
SILENT_REGION_MEMORY = pd.Timedelta(days=7)
FIVE = PARTITION  # (the name the steps use)
LOSS_TREE_SOURCES = ("gpu_telemetry", "node_telemetry", "job_runtime_metrics")


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

    gives, from integer codes: that group-by's text "first" and "nunique" hash a day's 1.7 million strings four
    times. A (partition, node) pair is a cell of a dense grid: a
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


def inventory_segments(inputs: Inputs) -> list[tuple[pd.Timestamp, pd.Timestamp, pd.DataFrame]]:
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
    start, end = inputs.start, inputs.end
    parts = inputs.period.partitions()
    if not len(parts):
        return []
    window = pd.date_range(start - INVENTORY_LOOKBACK, end, freq=FIVE, inclusive="left")
    rows = inputs.span("node_inventory", window[0], end)
    # regions' last GPU report before the rows read here (aggregated in the database)
    earlier = inputs.last_partition_by("node_inventory", "region", start - SILENT_REGION_MEMORY, window[0],
                                       positive="gpus_seen")
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
            rows_then = inputs.span("node_inventory", report - INVENTORY_LOOKBACK, report + FIVE, where={"region": region})
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


def inventory_as_of(inputs: Inputs) -> pd.DataFrame:
    """The inventory the window's first 5-minute partition is judged against (:func:`inventory_segments`)."""
    return inventory_segments(inputs.at(inputs.start, inputs.start + FIVE))[0][2]


MOVED_COLUMNS = ["ts", "gpu_uuid", "node_id", "region", "sku", "new_node"]


def moved_gpus(inputs: Inputs, segments, gpu: pd.DataFrame) -> pd.DataFrame:
    """GPUs that report under another node name than the one the inventory knows them by (a node re-imaged or
    renamed): one row per minute of ``[start, end)`` and GPU UUID (``MOVED_COLUMNS``: the minute, the UUID, the
    old name with its region and SKU as the partition's inventory has them, the name it reports under now).

    The inventory remembers a node by name for INVENTORY_LOOKBACK; its GPUs carry their UUIDs wherever they go. A
    node of the partition's inventory that reports no GPU in the partition has moved when the UUIDs it reported at
    its last report (within INVENTORY_LOOKBACK) report in the partition under another name. Those UUIDs are read
    only where it can be: a node silent in the partition while a node reports that did not report at the silent
    node's last report, or first reported in it (a name new since: a host re-imaged in the middle of a partition
    reports under both names in that one). A moved GPU is held by its new name for the whole partition, every
    minute of it, including minutes its new name's exporter dropped: those are the new name's gap, never the old
    name's. ``segments``: :func:`inventory_segments` of the window; ``gpu``: the window's gpu_telemetry (ts,
    node_id, gpu_uuid)."""
    empty = pd.DataFrame(columns=MOVED_COLUMNS)
    start, end = inputs.start, inputs.end
    if gpu is None or gpu.empty:
        return empty
    seen = inputs.span("node_inventory", start - INVENTORY_LOOKBACK, end,
                       columns=["partition_start", "node_id", "gpus_seen"])
    seen = seen[seen["gpus_seen"] > 0]
    reporting = {p: set(n) for p, n in seen["node_id"].astype(object).groupby(seen["partition_start"])}
    reports = {n: np.sort(pd.DatetimeIndex(ps).asi8) for n, ps in seen["partition_start"].groupby(seen["node_id"].astype(object))}
    # each partition's newest name: the latest first report (within the read) of the nodes reporting in it
    newest = {p: max(reports[n][0] for n in now) for p, now in reporting.items()}
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
                if newest[p] >= last.value or now - reporting.get(last, set()):
                    wanted.append((p, node, last, *known[node]))
    if not wanted:
        return empty
    wanted = pd.DataFrame(wanted, columns=["partition_start", "node_id", "last", "region", "sku"])
    # the UUIDs each silent node reported at its last report (one filtered read per distinct last report)
    last_uuids = []
    for last, nodes in wanted.groupby("last")["node_id"]:
        rows = inputs.span("gpu_telemetry", last, last + FIVE, columns=["node_id", "gpu_uuid"],
                           where={"node_id": sorted(set(nodes))})
        last_uuids.append(rows.astype({"node_id": object, "gpu_uuid": object}).drop_duplicates().assign(last=last))
    known = wanted.merge(pd.concat(last_uuids, ignore_index=True), on=["node_id", "last"])
    now = gpu[gpu["gpu_uuid"].isin(set(known["gpu_uuid"]))]
    now = pd.DataFrame({"ts": now["ts"].dt.floor("1min"), "partition_start": now["ts"].dt.floor(PARTITION_FREQ),
                        "gpu_uuid": now["gpu_uuid"].astype(object), "new_node": now["node_id"].astype(object)})
    moved = now.merge(known[["partition_start", "gpu_uuid", "node_id", "region", "sku"]], on=["partition_start", "gpu_uuid"])
    moved = moved[moved["new_node"] != moved["node_id"]].drop_duplicates(["partition_start", "gpu_uuid", "node_id"])
    minutes = pd.timedelta_range(0, FIVE, freq="1min", closed="left")
    at = pd.DatetimeIndex(moved["partition_start"]).repeat(len(minutes)) + np.tile(minutes, len(moved))
    moved = moved.iloc[np.arange(len(moved)).repeat(len(minutes))].assign(ts=at)
    moved = moved[(moved["ts"] >= start) & (moved["ts"] < end)]  # (a window's edge inside a partition)
    return moved[MOVED_COLUMNS].sort_values(["ts", "gpu_uuid"], kind="stable").reset_index(drop=True)


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


def step_stats(inputs: Inputs, frames: dict | None = None) -> pd.DataFrame:
    frames = frames or {t: inputs.in_window(t, columns=c) for t, c in STEP_STATS_COLUMNS.items()}
    meta = inputs.window("job_metadata", columns=["job_id", "model_type"])
    maint = inputs.window("maintenance_windows")
    return B.workload_step_stats(frames, meta=meta, maintenance=maint)


def step_baselines(inputs: Inputs, current: pd.DataFrame | None = None) -> pd.DataFrame:
    """The baseline of every partition in [start, end): 7-day history as of the partition's hour,
    or the partition's own stats at cold start (same result for a range run and partition runs)."""
    start, end = inputs.start, inputs.end
    current = current if current is not None else inputs.in_window("workload_step_stats")
    hist_all = inputs.span("workload_step_stats", start.floor("1h") - B.LOOKBACK, end)
    return B.step_baselines_range(hist_all, current, start, end)


def goodput(inputs: Inputs, frames: dict | None = None, baselines: pd.DataFrame | None = None,
            segments: list | None = None, moved: pd.DataFrame | None = None):
    """Leaves of the loss tree and the job failures of [start, end), partition by partition
    (each partition against its own baseline; ``segments``: :func:`inventory_segments` of the window, ``moved``:
    :func:`moved_gpus` of it, when the caller has them)."""
    start, end = inputs.start, inputs.end
    frames = frames or {t: inputs.in_window(t) for t in LOSS_TREE_SOURCES}
    frames = dict(frames)
    frames["scheduler_events"] = inputs.span("scheduler_events", start - SCHED_LOOKBACK, end)
    meta = inputs.window("job_metadata")
    maint = inputs.window("maintenance_windows")
    capacity = capacity_as_of(inputs)
    if segments is None:  # each partition against the inventory as of that partition
        segments = inventory_segments(inputs)
    if moved is None:  # a renamed node's GPUs: expected under the name they report with, not the old one too
        moved = moved_gpus(inputs, segments, frames["gpu_telemetry"])
    # which nodes' missing GPUs are hardware (a fault in the last day, or a gap of 15+ minutes)
    persist = G.GAP_PERSIST_PARTITIONS * FIVE
    corroborated = G.hardware_corroboration(
        inputs.span("node_inventory", start - persist, end, columns=["partition_start", "node_id", "gpus_seen", "fatal_gpus"]),
        inputs.last_partition_by("node_inventory", "node_id", start - G.FAULT_MEMORY, start - persist, positive="fatal_gpus"),
        inventory_union(segments).set_index("node_id")["gpus"], start, end)
    baselines = baselines if baselines is not None else inputs.in_window("step_time_baselines")
    sched_all = frames["scheduler_events"]
    # runtime rows before the window: the work a job failing early in the window threw away
    rt_all = frames["job_runtime_metrics"]
    rt_before = inputs.span("job_runtime_metrics", start - G.FAILURE_LOOKBACK, start)
    rt_all = pd.concat([rt_before, rt_all], ignore_index=True) if len(rt_before) else rt_all
    # the events naming a job's queue, as far back as its metadata (a job running for days keeps its queue)
    # (read whole and filtered here, not with ``where``: a run's cache serves the look-back's windows it holds,
    # where a filtered read opens the look-back's ~90 hour files again each piece; the same rows, in the same order)
    placing = ["submitted", "started"]
    older = inputs.span("scheduler_events", inputs.since("scheduler_events"), start - SCHED_LOOKBACK,
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



def paid_invariant(states: pd.DataFrame, inputs: Inputs, segments: list | None = None,
                   moved: pd.DataFrame | None = None) -> dict:
    """States must sum to paid GPU-minutes: Finance's capacity (the GPUs in the partition's inventory where Finance
    has no cost row for the region x SKU, less a renamed node's GPUs its old name still holds: ``moved``,
    :func:`moved_gpus` of the window) x minutes.
    Returns ``passed``, ``slices``, ``violations``, ``max_abs_error_gpu_minutes`` and ``examples`` (a frame).
    ``segments``: :func:`inventory_segments` of the window, when the caller has them."""
    end = inputs.end
    cap = capacity_as_of(inputs)
    cap = cap.groupby(["region", "sku"])["capacity_gpus"].max() if cap is not None and len(cap) else None
    expected = {}  # partition -> (region, sku) -> paid GPUs
    for s0, s1, inventory in segments if segments is not None else inventory_segments(inputs):
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


"""Expected GPU-minutes that did not report: when their absence is hardware, and their states."""

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION, PARTITION_FREQ
from gpu_health.metrics.goodput.classify import missing_state
from gpu_health.metrics.goodput.grid import _codes
from gpu_health.metrics.goodput.maintenance import maintenance_mask
from gpu_health.metrics.goodput.states import FAULT_MEMORY, GAP_PERSIST_PARTITIONS, LEAF_DIMS, NO_DATA_COVERAGE


def hardware_corroboration(recent: pd.DataFrame, last_fault: pd.Series, usual: pd.Series, start, end) -> pd.DataFrame:
    """(partition_start, node_id) of the partitions in [start, end) in which a node's missing GPUs are hardware:
    the node reported a GPU fault (``fatal_gpus`` > 0) at or before the partition within FAULT_MEMORY, or it
    reported fewer than its ``usual`` GPUs in each of the GAP_PERSIST_PARTITIONS partitions before.

    ``recent``: node_inventory rows (partition_start, node_id, gpus_seen, fatal_gpus) of
    [start - GAP_PERSIST_PARTITIONS x 5 min, end); ``last_fault``: node -> its latest partition with a GPU fault
    before ``start`` (within FAULT_MEMORY); ``usual``: node -> the GPUs the inventory expects of it.

    Missing rows alone are missing data: exporters drop rows, contracts reject files, collectors restart.
    The node's own fault history or a gap that outlives any collector hiccup is the second witness.
    """
    cols = ["partition_start", "node_id"]
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    grid = pd.date_range(start - GAP_PERSIST_PARTITIONS * PARTITION, end, freq=PARTITION, inclusive="left")
    rows = recent[recent["partition_start"].isin(grid)] if recent is not None and len(recent) else None
    nodes = pd.Index(sorted(set(usual.index.astype(object)) | set(last_fault.index.astype(object))
                            | (set(rows["node_id"].astype(object)) if rows is not None else set())))
    if not len(nodes):
        return pd.DataFrame(columns=cols)
    seen = np.zeros((len(grid), len(nodes)))
    fault_at = np.full((len(grid), len(nodes)), False)
    if rows is not None and len(rows):
        t, n = grid.get_indexer(rows["partition_start"]), nodes.get_indexer(rows["node_id"].astype(object))
        seen[t, n] = rows["gpus_seen"].to_numpy(dtype=float)
        fault_at[t, n] = rows["fatal_gpus"].to_numpy(dtype=float) > 0
    expect = usual.reindex(nodes).fillna(0).to_numpy(dtype=float)[None, :]
    # a partition with no inventory row at all is unknown (before the warehouse's first partition, or a whole
    # outage: missing data), not a partition in which every node was short
    known = np.zeros(len(grid), dtype=bool)
    if rows is not None and len(rows):
        known[np.unique(grid.get_indexer(rows["partition_start"]))] = True
    short = (seen < expect) & known[:, None]
    persisted = np.ones_like(short)
    for k in range(1, GAP_PERSIST_PARTITIONS + 1):
        persisted &= np.vstack([np.zeros((k, len(nodes)), bool), short[:-k]])
    # a fault earlier in the grid, or before it (last_fault), within FAULT_MEMORY of the partition
    earlier = pd.to_datetime(last_fault.reindex(nodes), utc=True)
    before = np.where(earlier.notna().to_numpy(), ((earlier - grid[0]) // PARTITION).fillna(-10**9).to_numpy(dtype=float), -np.inf)
    span = int(FAULT_MEMORY / PARTITION)
    idx = np.arange(len(grid))[:, None]
    last_in_grid = pd.DataFrame(np.where(fault_at, idx, np.nan)).ffill().to_numpy()
    last_any = np.fmax(np.nan_to_num(last_in_grid, nan=-np.inf), before[None, :])
    recent_fault = (idx - last_any) <= span
    first = GAP_PERSIST_PARTITIONS
    tt, nn = np.nonzero((recent_fault | persisted)[first:])
    return pd.DataFrame({"partition_start": grid[first + tt], "node_id": np.asarray(nodes, dtype=object)[nn]}, columns=cols)


def _missing_minutes(t_idx, g_node, minutes, node_uni, node_region, node_sku, node_last_drv, drv_uni,
                     capacity, inventory: pd.DataFrame, maintenance, corroborated: np.ndarray | None = None,
                     moved: np.ndarray | None = None) -> pd.DataFrame:
    """Expected GPU-minutes that did not report: no_data, maintenance or hw_unavailable.

    Missing GPUs are hw_unavailable only where ``corroborated`` (minutes x nodes) says something besides
    their absence points at the hardware; otherwise they are no_data (missing is not broken).
    ``moved`` (minutes x nodes): GPUs of a node's inventory that report under another name (a renamed node):
    they are not missing from it, and the inventory's count of its region x SKU does not hold them twice."""
    M, Nn = len(minutes), len(node_uni)
    cols = ["partition_start"] + LEAF_DIMS + ["state", "gpu_minutes"]
    if not M or inventory.empty:
        return pd.DataFrame(columns=cols)
    reported = (np.bincount(t_idx * Nn + g_node, minlength=M * Nn).reshape(M, Nn).astype(float)
                if len(t_idx) else np.zeros((M, Nn)))
    expected = np.zeros(Nn)
    expected[_codes(inventory["node_id"], node_uni)] = inventory["gpus"].to_numpy(dtype=float)
    expected = np.maximum(expected[None, :], reported)  # more GPUs than the inventory knew: they are paid too
    credit = None  # minutes x nodes: the expected GPUs found reporting under another name (not expected here)
    if moved is not None:
        credit = np.minimum(moved, expected - reported)
        expected = expected - credit
    missing = expected - reported
    # a region is silent in a minute when under half of its expected GPUs report
    region_codes, region_uni = pd.factorize(pd.Series(node_region, dtype=object).fillna("unknown"))
    exp_r = np.stack([expected[:, region_codes == r].sum(axis=1) for r in range(len(region_uni))], axis=1)
    rep_r = np.stack([reported[:, region_codes == r].sum(axis=1) for r in range(len(region_uni))], axis=1)
    region_silent = rep_r < NO_DATA_COVERAGE * exp_r  # M x regions
    silent = region_silent[:, region_codes]  # M x Nn
    hw_ok = corroborated if corroborated is not None else np.ones((M, Nn), dtype=bool)
    tt, nn = np.nonzero(missing > 0)
    out = pd.DataFrame(columns=cols)
    if len(tt):
        names = np.asarray(node_uni, dtype=object)
        in_maint = maintenance_mask(pd.Series(minutes[tt]), pd.Series(node_region[nn]), pd.Series(names[nn]), maintenance)
        out = pd.DataFrame({
            "partition_start": minutes[tt].floor(PARTITION_FREQ), "region": node_region[nn], "node_id": names[nn],
            "sku": node_sku[nn], "driver_version": np.asarray(drv_uni, dtype=object)[node_last_drv[nn]],
            "team": "none", "workload_class": "none", "model_type": "none", "framework_version": "none", "queue": "none",
            "state": missing_state(silent[tt, nn], in_maint, hw_ok[tt, nn]),
            "gpu_minutes": missing[tt, nn],
        })
    unseen = _unseen_capacity(capacity, inventory, region_silent, region_uni, minutes, node_region, node_sku, credit)
    if unseen:
        out = pd.concat([x for x in (out, pd.DataFrame(unseen)) if len(x)], ignore_index=True)
    return out


def _unseen_capacity(capacity, inventory: pd.DataFrame, region_silent: np.ndarray, region_uni, minutes,
                     node_region, node_sku, credit) -> list[dict]:
    """Leaf rows (node ``unseen``) of the paid capacity above the inventory: GPUs nobody has heard from.

    Unavailable hardware while their region reports; in the minutes their region is silent (``region_silent``:
    minutes x ``region_uni``) they are missing data like the rest of it (a collector outage must not be charged
    to hardware). A region with no inventory is never silent. ``credit`` (minutes x nodes): a renamed node's GPUs,
    in the inventory under both names."""
    rows = []
    if capacity is None or not len(capacity):
        return rows
    seen = inventory.groupby(["region", "sku"])["gpus"].sum()
    cap = capacity.groupby(["region", "sku"])["capacity_gpus"].max()
    gap = cap - seen.reindex(cap.index).fillna(0)
    silent_by_region = pd.DataFrame(region_silent, index=minutes, columns=region_uni)
    partition = minutes.floor(PARTITION_FREQ)
    if credit is not None and credit.any():  # a renamed node's GPUs are in the inventory under both names
        slice_of = pd.MultiIndex.from_arrays([pd.Series(node_region, dtype=object), pd.Series(node_sku, dtype=object)])
        twice = pd.DataFrame(credit.T, index=slice_of).groupby(level=[0, 1]).sum().T  # minutes x (region, sku)
    else:
        twice = None
    for (region, sku), k in gap.items():
        # unseen GPUs in each minute (whole numbers: summed per partition exactly as k x minutes)
        k_m = np.clip(k + twice[(region, sku)].to_numpy(), 0, None) if twice is not None and (region, sku) in twice \
            else np.full(len(minutes), max(float(k), 0.0))
        if not (k_m > 0).any():
            continue
        silent_m = (silent_by_region[region].to_numpy() if region in silent_by_region.columns
                    else np.zeros(len(minutes), dtype=bool))
        per_part = pd.DataFrame({"no_data": np.where(silent_m, k_m, 0.0),
                                 "hw_unavailable": np.where(silent_m, 0.0, k_m)}).groupby(partition).sum()
        for p, n_silent, n_reporting in per_part.itertuples():
            for state, n in (("no_data", n_silent), ("hw_unavailable", n_reporting)):
                if n:
                    rows.append({"partition_start": p, "region": region, "node_id": "unseen", "sku": sku,
                                 "driver_version": "unknown", "team": "none", "workload_class": "none",
                                 "model_type": "none", "framework_version": "none", "queue": "none",
                                 "state": state, "gpu_minutes": float(n)})
    return rows

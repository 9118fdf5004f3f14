"""The leaves from the per-row state weights, and their roll-ups."""

import numpy as np
import pandas as pd

from gpu_health.codes import unique_ints
from gpu_health.constants import PARTITION_MINUTES
from gpu_health.metrics.goodput.states import LEAF_DIMS, STATES


def _aggregate(key, W, start, Nn, ND, NA, node_uni, node_region, node_sku, drv_uni, attr_uni) -> pd.DataFrame:
    cols = ["partition_start"] + LEAF_DIMS + ["state", "gpu_minutes"]
    if not len(key):
        return pd.DataFrame(columns=cols)
    uk, inv = unique_ints(key, return_inverse=True)
    p_idx = uk // (Nn * ND * NA)
    rest = uk % (Nn * ND * NA)
    node_c = rest // (ND * NA)
    drv_c = (rest % (ND * NA)) // NA - 1
    attr_c = rest % NA - 1
    attrs = np.array([tuple(a) for a in attr_uni] + [("none",) * 5], dtype=object).reshape(-1, 5)
    attr_rows = attrs[np.where(attr_c >= 0, attr_c, len(attrs) - 1)]
    base = pd.DataFrame({
        "partition_start": start + pd.to_timedelta(p_idx * PARTITION_MINUTES, unit="min"),
        "region": node_region[node_c], "node_id": np.asarray(node_uni, dtype=object)[node_c], "sku": node_sku[node_c],
        "driver_version": np.where(drv_c >= 0, np.asarray(drv_uni, dtype=object)[np.clip(drv_c, 0, None)], "unknown"),
        "team": attr_rows[:, 0], "workload_class": attr_rows[:, 1], "model_type": attr_rows[:, 2],
        "framework_version": attr_rows[:, 3], "queue": attr_rows[:, 4],
    })
    parts = []
    for state, w in W.items():
        sums = np.bincount(inv, weights=w, minlength=len(uk))
        m = sums > 1e-12
        if m.any():
            parts.append(base[m].assign(state=state, gpu_minutes=sums[m]))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)


def rollup(leaves: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Sum leaves to ``by`` x state (e.g. region, sku, workload_class, team)."""
    return leaves.groupby(["partition_start"] + by + ["state"], observed=True)["gpu_minutes"].sum().reset_index()


def goodput_ratio(leaves: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """Productive / paid per partition (and ``by``), with each state's share of paid."""
    by = by or []
    wide = leaves.pivot_table(index=["partition_start"] + by, columns="state", values="gpu_minutes", aggfunc="sum", fill_value=0.0)
    for s in STATES:
        if s not in wide.columns:
            wide[s] = 0.0
    wide = wide[STATES]
    paid = wide.sum(axis=1)
    out = pd.DataFrame({"paid_gpu_minutes": paid, "productive_gpu_minutes": wide["productive"],
                        "goodput": np.where(paid > 0, wide["productive"] / paid.where(paid > 0, 1), np.nan)})
    shares = wide.div(paid.where(paid > 0, 1), axis=0).add_prefix("share_")
    return pd.concat([out, shares], axis=1).reset_index()

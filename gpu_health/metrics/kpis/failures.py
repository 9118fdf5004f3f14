"""Failure KPIs: job_failure_rate by reason class."""

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION_FREQ
from gpu_health.metrics.goodput import first_node
from gpu_health.metrics.kpi_catalog import by_name
from gpu_health.metrics.kpis.context import FAILED_EXITS, UNKNOWN, _Context

# reason class of a failed job: first matching pattern (case-insensitive) wins
REASON_CLASSES = [
    ("gpu_xid", r"\bxid\b|ecc|fallen off the bus|\bgpu\b"),
    ("nccl", r"nccl|collective"),
    ("oom", r"out of memory|\boom\b"),
]


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

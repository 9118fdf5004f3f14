"""The numbers a materialization carries so that Dagster plots them: the cluster's health at a glance.

Dagster draws a plot for every numeric metadata key an asset's materializations share, one point per
materialization; a key named the same on every run is a series. Each function takes the frame the asset stored for
its window and returns ``{key: float}``, cheap (sums over the window's rows, no pictures), and leaves out a figure
that has nothing to measure (a ratio over zero is no point, never a zero that would read as an outage).
"""

from __future__ import annotations

import math

import pandas as pd

from gpu_health.constants import LOSS_TREE_STATES

ALL = "*"
MINUTES_PER_HOUR = 60.0


def _ratio(num: float, den: float) -> float | None:
    return float(num) / float(den) if den > 0 else None


def _finite(values: dict) -> dict:
    return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}


def goodput_headline(frame: pd.DataFrame) -> dict:
    """``cluster_goodput`` over the window: goodput as productive / paid GPU-minutes summed over its partitions
    (region '*'), paid and productive GPU-hours, each state's share of paid (paid-weighted: a partition with more
    GPUs weighs more) and goodput per region (``goodput_<region>``)."""
    if not len(frame):
        return {}
    out: dict = {}
    cluster = frame[frame["region"] == ALL]
    paid, productive = cluster["paid_gpu_minutes"].sum(), cluster["productive_gpu_minutes"].sum()
    out["goodput"] = _ratio(productive, paid)
    out["paid_gpu_hours"] = paid / MINUTES_PER_HOUR
    out["productive_gpu_hours"] = productive / MINUTES_PER_HOUR
    for state in LOSS_TREE_STATES:
        column = f"share_{state}"
        if column in cluster:
            out[column] = _ratio((cluster[column] * cluster["paid_gpu_minutes"]).sum(), paid)
    for region, rows in frame[frame["region"] != ALL].groupby("region", observed=True):
        out[f"goodput_{region}"] = _ratio(rows["productive_gpu_minutes"].sum(), rows["paid_gpu_minutes"].sum())
    return _finite(out)


def kpi_headline(frame: pd.DataFrame) -> dict:
    """Each KPI's cluster-wide value over the window as ``kpi_<name>`` (a KPI's own name, not a
    ``<kpi>.<component>`` series). From its rows with every dimension '*' and status ok: a ratio series (with a
    numerator) as sum(numerator) / sum(denominator), so the window's figure weighs each partition by what it
    measured; another (a quantile) as its last partition's value. A ratio KPI stored only in slices: the
    cluster-wide value Prometheus is served (:func:`gpu_health.kpi_export.cluster_rollup`: the slices' numerators
    over their denominators, none if a slice was degraded)."""
    from gpu_health.kpi_export import DIMENSIONS, cluster_rollup

    if not len(frame):
        return {}
    kpi = frame["kpi"].astype(str)
    own = ~kpi.str.contains(".", regex=False)
    star = own & (frame[DIMENSIONS].astype(str) == ALL).all(axis=1) & (frame["status"].astype(str) == "ok")
    out = {}
    for name, series in frame[star].groupby(kpi[star]):
        if series["numerator"].notna().all():
            out[f"kpi_{name}"] = _ratio(series["numerator"].sum(), series["denominator"].sum())
        else:
            out[f"kpi_{name}"] = series.sort_values("partition_start")["value"].iloc[-1]
    for row in cluster_rollup(frame[own]).itertuples():
        out.setdefault(f"kpi_{row.kpi}", row.value)
    return _finite(out)


def spend_headline(frame: pd.DataFrame) -> dict:
    """``wasted_spend`` of the window: USD by cause family (``usd_<family>``, productive included as
    ``usd_productive``), in total (``usd_total``), and the GPU-hours without a price (``unpriced_gpu_hours``:
    spend unknown, not counted in the USD)."""
    if not len(frame):
        return {"usd_total": 0.0, "unpriced_gpu_hours": 0.0}
    priced = frame.dropna(subset=["usd"])
    by_family = priced.groupby(priced["cause_family"].astype(str))["usd"].sum()
    out = {f"usd_{family}": usd for family, usd in by_family.items()}
    out["usd_total"] = priced["usd"].sum()
    out["unpriced_gpu_hours"] = frame.loc[frame["usd"].isna(), "gpu_hours"].sum()
    return _finite(out)

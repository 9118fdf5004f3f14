"""Hardware KPIs: GPU faults and GPUs throttled for power or heat."""

import pandas as pd

from gpu_health.metrics.kpis.context import _Context, _region_sku_sums


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

"""Finance's daily tables: settled goodput and wasted spend, joined with cost and capacity."""

import pandas as pd

from gpu_health.defs.common import derived_asset
from gpu_health.metrics import models as M
from gpu_health.metrics import pipeline as P

ONE_DAY = pd.Timedelta(days=1)


def _days(start, end):
    return pd.date_range(start, end, freq="D", inclusive="left")


def build_finance_assets(daily) -> list:
    def _daily(context, wh, start, end):
        out = [P.finance_day(wh, d, d + ONE_DAY) for d in _days(start, end)]
        frame = pd.concat([o["cluster_goodput_daily"] for o in out], ignore_index=True)
        return frame, [], {"settled_gpu_minutes_moved": float(sum(o["moved_gpu_minutes"] for o in out))}

    def _spend(context, wh, start, end):
        return pd.concat([P.finance_day(wh, d, d + ONE_DAY)["wasted_spend"] for d in _days(start, end)], ignore_index=True)

    return [
        derived_asset("cluster_goodput_daily", group="finance", owner="finance", model=M.ClusterGoodputDaily,
                      partitions_def=daily, deps=["goodput_states", "job_failures", "cluster_goodput", "cost_capacity"],
                      grain="one row per day per region (and * for the cluster)",
                      description="North star, settled: work thrown away by failures moved back to the minutes where it was "
                                  "spent. Finance reads this one; the 5-minute cluster_goodput is the leading, provisional view.",
                      compute=_daily),
        derived_asset("wasted_spend", group="finance", owner="finance", model=M.WastedSpend, partitions_def=daily,
                      deps=["goodput_states", "job_failures", "cost_capacity"],
                      grain="one row per day x region x SKU x state x team",
                      description="USD per loss state, cause family and team: settled GPU-hours x that day's blended USD per "
                                  "GPU-hour (reserved + burst spend / paid GPU-hours). Productive rows reconcile to total spend.",
                      compute=_spend),
    ]

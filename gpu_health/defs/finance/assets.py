"""Finance's daily tables: settled goodput and wasted spend, joined with cost and capacity."""

from gpu_health.defs.common import derived_asset


def build_finance_assets(daily) -> list:
    return [
        derived_asset("cluster_goodput_daily", partitions_def=daily,
                      description="North star, settled: work thrown away by failures moved back to the minutes where it was "
                                  "spent. Finance reads this one; the 5-minute cluster_goodput is the leading, provisional view."),
        derived_asset("wasted_spend", partitions_def=daily,
                      description="USD per loss state, cause family and team: settled GPU-hours x that day's blended USD per "
                                  "GPU-hour (reserved + burst spend / paid GPU-hours). Productive rows reconcile to total spend."),
        derived_asset("capacity_demand_daily", partitions_def=daily,
                      description="GPU-hour demand: allocated loss-tree states plus the demand that waited (queue backlog, "
                                  "or idle_blocked where larger). What users asked for, so growth shows even at capacity."),
        derived_asset("capacity_forecast", partitions_def=daily,
                      description="Demand forecast 1-12 weeks ahead, p10 / p50 / p90, by the method with the lower "
                                  "rolling-origin MASE on the series' history (seasonal-naive or day-of-week + trend)."),
        derived_asset("capacity_headroom", partitions_def=daily,
                      description="Installed GPUs minus the p90 forecast, the day demand runs out of them, and the "
                                  "reserved mix that would have cost least over the last 30 days and over the next 30."),
    ]

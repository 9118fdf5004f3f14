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
    ]

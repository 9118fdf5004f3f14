"""Finance's daily tables: settled goodput and wasted spend, joined with cost and capacity."""

from gpu_health.defs.common import derived_asset


def build_finance_assets(daily) -> list:
    return [
        derived_asset("cluster_goodput_daily", partitions_def=daily),
        derived_asset("wasted_spend", partitions_def=daily),
        derived_asset("capacity_demand_daily", partitions_def=daily),
        derived_asset("capacity_forecast", partitions_def=daily),
        derived_asset("capacity_headroom", partitions_def=daily),
    ]

"""Inventory and step-time baselines: what each partition is judged against."""

from gpu_health.defs.common import derived_asset


def build_baseline_assets(five_minute) -> list:
    return [
        derived_asset("kpi_baselines", partitions_def=five_minute),
        derived_asset("node_inventory", partitions_def=five_minute),
        derived_asset("workload_step_stats", partitions_def=five_minute),
        derived_asset("step_time_baselines", partitions_def=five_minute),
    ]


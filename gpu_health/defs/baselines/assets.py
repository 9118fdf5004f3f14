"""Inventory and step-time baselines: what each partition is judged against."""

from gpu_health.defs.common import derived_asset


def build_baseline_assets(five_minute) -> list:
    return [
        derived_asset("kpi_baselines", partitions_def=five_minute,
                      description="Expected value (median, MAD, quantiles) of every KPI and loss-state share: the same hour "
                                  "of the week (2+ weeks of history), else the same hour of day on days of the same type, "
                                  "else the trailing two hours (cold start); incident (paged) and maintenance minutes never "
                                  "teach it."),
        derived_asset("node_inventory", partitions_def=five_minute,
                      description="Nodes and GPUs that reported: the trailing day of it (as of each partition) is the inventory "
                                  "behind paid GPU-minutes and tells a node gone silent from a collector gone silent; a region "
                                  "none of whose nodes reported in a day keeps its inventory as of its last report for up to "
                                  "7 days (steps.telemetry.inventory_segments)."),
        derived_asset("workload_step_stats", partitions_def=five_minute,
                      description="Median step time, loader wait and gradient sync of healthy, progressing job-minutes "
                                  "(no slowdown throttling, no Xid, node ok, outside maintenance)."),
        derived_asset("step_time_baselines", partitions_def=five_minute,
                      description="The baseline step time each partition is judged against: weighted median of 7 days of "
                                  "workload_step_stats as of the partition's hour; the partition's own cohort at cold start."),
    ]


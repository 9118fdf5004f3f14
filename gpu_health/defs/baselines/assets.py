"""Inventory and step-time baselines: what each partition is judged against."""

from gpu_health.defs.common import derived_asset
from gpu_health.metrics import models as M
from gpu_health.metrics import pipeline as P


def build_baseline_assets(five_minute) -> list:
    def _inventory(context, wh, start, end):
        frames = P.read_sources(wh, start, end, ["gpu_telemetry", "node_telemetry"])
        return P.node_inventory(frames)

    def _stats(context, wh, start, end):
        return P.step_stats(wh, start, end)

    def _baselines(context, wh, start, end):
        return P.step_baselines(wh, start, end)

    def _kpi_baselines(context, wh, start, end):
        return P.kpi_baselines(wh, start, end)

    from gpu_health.metrics.kpi_baselines import KpiBaselines

    return [
        derived_asset("kpi_baselines", group="baselines", owner="ml_platform", model=KpiBaselines,
                      partitions_def=five_minute, deps=["kpi_values", "goodput_states", "alerts", "maintenance_windows"],
                      grain="one row per KPI series or loss-state share x slice per 5-minute partition",
                      description="Expected value (median, MAD, quantiles) of every KPI and loss-state share: the same hour "
                                  "of the week (2+ weeks of history), else the same hour of day on days of the same type, "
                                  "else the trailing two hours (cold start); incident (paged) and maintenance minutes never "
                                  "teach it.",
                      compute=_kpi_baselines),
        derived_asset("node_inventory", group="baselines", owner="infra", model=M.NodeInventory, partitions_def=five_minute,
                      deps=["gpu_telemetry", "node_telemetry"], grain="one row per node seen per 5-minute partition",
                      description="Nodes and GPUs that reported: the trailing day of it (as of each partition) is the inventory "
                                  "behind paid GPU-minutes and tells a node gone silent from a collector gone silent; a region "
                                  "none of whose nodes reported in a day keeps its inventory as of its last report for up to "
                                  "7 days (pipeline.inventory_segments).",
                      compute=_inventory),
        derived_asset("workload_step_stats", group="baselines", owner="ml_platform", model=M.WorkloadStepStats,
                      partitions_def=five_minute, deps=["gpu_telemetry", "node_telemetry", "job_runtime_metrics", "job_metadata"],
                      grain="one row per workload signature (model_type, sku, gpus) per 5-minute partition",
                      description="Median step time, loader wait and gradient sync of healthy, progressing job-minutes "
                                  "(no slowdown throttling, no Xid, node ok, outside maintenance).",
                      compute=_stats),
        derived_asset("step_time_baselines", group="baselines", owner="ml_platform", model=M.StepTimeBaselines,
                      partitions_def=five_minute, deps=["workload_step_stats"],
                      grain="one row per workload signature per 5-minute partition",
                      description="The baseline step time each partition is judged against: weighted median of 7 days of "
                                  "workload_step_stats as of the partition's hour; the partition's own cohort at cold start.",
                      compute=_baselines),
    ]


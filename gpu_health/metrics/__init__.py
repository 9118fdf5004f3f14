"""Metric logic (pure pandas): the loss tree, baselines, KPIs, finance.

Importing this package registers the derived tables in the warehouse schema.
"""

from gpu_health.metrics import models as _models
from gpu_health.storage.schema import register_derived

DERIVED = {
    "node_inventory": (_models.NodeInventory, "partition_start"),
    "workload_step_stats": (_models.WorkloadStepStats, "partition_start"),
    "step_time_baselines": (_models.StepTimeBaselines, "partition_start"),
    "goodput_leaves": (_models.GoodputLeaves, "partition_start"),
    "goodput_states": (_models.GoodputStates, "partition_start"),
    "goodput_node_states": (_models.GoodputNodeStates, "partition_start"),
    "job_failures": (_models.JobFailures, "partition_start"),
    "cluster_goodput": (_models.ClusterGoodput, "partition_start"),
    "cluster_goodput_daily": (_models.ClusterGoodputDaily, "date"),
    "wasted_spend": (_models.WastedSpend, "date"),
    "alerts": (_models.Alerts, "partition_start"),
    "serving_slis": (_models.ServingSlis, "partition_start"),
    "slo_error_budgets": (_models.SloErrorBudgets, "partition_start"),
    "capacity_demand_daily": (_models.CapacityDemandDaily, "date"),
    "capacity_forecast": (_models.CapacityForecast, "date"),
    "capacity_headroom": (_models.CapacityHeadroom, "date"),
}

from gpu_health.metrics.kpis import KpiValues as _KpiValues  # noqa: E402  (kpis imports the contracts only)

DERIVED["kpi_values"] = (_KpiValues, "partition_start")

from gpu_health.diagnosis.decompose import GoodputDecomposition as _Decomposition  # noqa: E402
from gpu_health.metrics.kpi_baselines import KpiBaselines as _KpiBaselines  # noqa: E402

DERIVED["kpi_baselines"] = (_KpiBaselines, "partition_start")
DERIVED["goodput_decomposition"] = (_Decomposition, "partition_start")

for _name, (_model, _col) in DERIVED.items():
    register_derived(_name, _model, _col)

"""The ``cluster_status`` step's body: the window's rows of what the status page quotes, read through the step's
declaration (gpu_health.steps.registry), and the page of each partition (gpu_health.diagnosis.status)."""

from __future__ import annotations

import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.steps.resolve import Inputs

# the cluster-wide slice: the status page quotes no per-region KPI or baseline, and reads only those rows
CLUSTER_SLICE = {"region": "*", "sku": "*", "workload_class": "*", "team": "*"}
ALERT_COLUMNS = ["partition_start", "status", "severity", "summary", "description", "region", "opened_at",
                 "usd_per_hour", "runbook"]


def cluster_status(inputs: Inputs) -> pd.DataFrame:
    """One row per partition of the window (contract ``ClusterStatus``)."""
    from gpu_health.diagnosis.status import status_rows

    parts = pd.date_range(inputs.start, inputs.end, freq=PARTITION, inclusive="left")
    return status_rows(
        parts,
        goodput=inputs.in_window("cluster_goodput", columns=["partition_start", "region", "goodput"]),
        baselines=inputs.in_window("kpi_baselines", where=CLUSTER_SLICE),
        kpis=inputs.in_window("kpi_values", where=CLUSTER_SLICE),
        alerts=inputs.in_window("alerts", columns=ALERT_COLUMNS),
        gaps=inputs.in_window("source_gaps"), rejects=inputs.in_window("source_rejects"))

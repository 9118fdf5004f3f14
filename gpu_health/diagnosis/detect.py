"""The findings of one partition: every registered detector (gpu_health.diagnosis.detectors) over its
:class:`~gpu_health.diagnosis.context.PartitionContext`, a silent region's findings muted.

The context, the range preparation and the job table are gpu_health.diagnosis.context's; they are re-exported here
for the steps, which build a context and call :func:`detect`.
"""

from gpu_health.diagnosis.context import DEPLOY_LOOKBACK, PartitionContext, job_table, prepare_range
from gpu_health.diagnosis.detectors import DETECTORS
from gpu_health.diagnosis.finding import Finding

__all__ = ["DEPLOY_LOOKBACK", "PartitionContext", "job_table", "prepare_range", "detect"]


def detect(ctx: PartitionContext) -> list[Finding]:
    """All findings of one partition. A region whose collectors are silent raises only missing_data (a few
    nodes' gaps, rejected rows or a silent source mute nothing: the region's other evidence still stands)."""
    findings = [f for det in DETECTORS for f in det.run(ctx)]
    silent = {f.region for f in findings if f.key == f"missing_data|{f.region}"}
    return [f for f in findings if f.detector == "missing_data" or f.region not in silent or f.detector == "deploy_regression"]

"""Root-cause decomposition of the north star's change, partition by partition."""

import pandas as pd

from gpu_health.defs.common import derived_asset
from gpu_health.diagnosis.decompose import GoodputDecomposition
from gpu_health.metrics import pipeline as P


def build_diagnosis_assets(five_minute) -> list:
    def _decomposition(context, wh, start, end):
        frame = P.decomposition(wh, start, end)
        return frame if len(frame) else pd.DataFrame(columns=list(GoodputDecomposition.to_schema().columns))

    return [
        derived_asset(
            "goodput_decomposition", group="diagnosis", owner="infra", model=GoodputDecomposition,
            partitions_def=five_minute, deps=["goodput_leaves", "alerts"],
            grain="one row per ranked cause per 5-minute partition",
            description="Why goodput moved against its baseline (the same slot of the previous days, or the trailing "
                        "two hours at cold start): the loss-state deltas explain the change exactly; inside the states "
                        "that grew, a drill-down (Adtributor explanatory power and surprise, with combinations) names the "
                        "narrowest set of dimension values (region, node, sku, driver, framework, queue, team, model type) "
                        "carrying it, with its cause family and share of the drop.",
            compute=_decomposition),
    ]

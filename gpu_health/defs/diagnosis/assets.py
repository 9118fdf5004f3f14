"""Root-cause decomposition of the north star's change, partition by partition."""

from gpu_health.defs.common import derived_asset


def build_diagnosis_assets(five_minute) -> list:
    return [
        derived_asset(
            "goodput_decomposition", partitions_def=five_minute,
            description="Why goodput moved against its baseline (the same slot of the previous days, or the trailing "
                        "two hours at cold start): the loss-state deltas explain the change exactly; inside the states "
                        "that grew, a drill-down (Adtributor explanatory power and surprise, with combinations) names the "
                        "narrowest set of dimension values (region, node, sku, driver, framework, queue, team, model type) "
                        "carrying it, with its cause family and share of the drop."),
    ]

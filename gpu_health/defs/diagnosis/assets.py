"""Root-cause decomposition of the north star's change, partition by partition."""

from gpu_health.defs.common import derived_asset


def build_diagnosis_assets(five_minute) -> list:
    return [
        derived_asset("goodput_decomposition", partitions_def=five_minute),
    ]

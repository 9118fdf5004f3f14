"""A node drained by its maintenance window is planned minute by minute, also in the partition its window ends in.

Windows are matched at a partition's midpoint elsewhere (the loss tree's convention); a window ending in the first
half of a partition would then leave the node's last drained minutes inside it looking like an unplanned drain.
"""

from dataclasses import replace

import pandas as pd

from gpu_health.diagnosis.detectors.hardware import HW_NODE_STATE, detect_hardware, hardware_evidence
from gpu_health_tests.test_detect_evidence import MIN, T0, context, gpu_rows, node_rows


def window(end: pd.Timestamp) -> pd.DataFrame:
    return pd.DataFrame({"window_id": ["mw-1"], "start": [T0 - pd.Timedelta(hours=1)], "end": [end], "region": ["r1"],
                         "node_ids": ["n1"], "reason": ["kernel and BIOS update"]})


def drained_until(minute: int) -> pd.DataFrame:
    """n1 drained in the partition's minutes before ``minute``, back in service from it; n2 healthy."""
    node = node_rows()
    node.loc[(node["node_id"] == "n1") & (node["ts"] < T0 + minute * MIN), "health"] = "drained"
    return node


def test_a_node_drained_inside_its_window_that_ends_mid_partition_is_no_hardware_evidence():
    ctx = replace(context(gpu_rows(), node=drained_until(2)), maintenance=window(T0 + 2 * MIN))
    assert hardware_evidence(ctx).empty and detect_hardware(ctx) == []


def test_a_node_still_drained_after_its_window_ended_is_a_witness():
    ctx = replace(context(gpu_rows(), node=drained_until(4)), maintenance=window(T0 + 2 * MIN))
    ev = hardware_evidence(ctx)
    assert list(ev["node_id"]) == ["n1"] and HW_NODE_STATE in ev["signals"].iloc[0]

"""Detectors on partitions from collectors that do not expose every field.

Power, temperature (a utilisation-only GPU log such as Philly's), link
retransmits and latency (switch-port counters, node-exporter IB counters) are
null in the contract when the collector lacks them. A detector reading them
must neither crash nor fire on the absence, and must still fire on the
evidence that is there.
"""

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.models import columns, conform, empty_frame
from gpu_health.diagnosis.context import PartitionContext
from gpu_health.diagnosis.detect import detect
from gpu_health.diagnosis.detectors.gaming import detect_no_progress
from gpu_health.diagnosis.detectors.hardware import detect_thermal
from gpu_health.diagnosis.detectors.slowdowns import detect_slowdowns
from gpu_health.contracts.derived import GoodputLeaves

T0 = pd.Timestamp("2026-11-03T10:00:00Z")
MIN = pd.Timedelta(minutes=1)
SKU = "NVIDIA H100 80GB HBM3"
NODES = ["n1", "n2"]


def gpu_rows(temp_c, throttle_reasons=0x40, util=95.0) -> pd.DataFrame:
    rows = [{"ts": T0 + m * MIN, "region": "r1", "node_id": node, "gpu_index": i, "gpu_uuid": f"GPU-{node}-{i}",
             "sku": SKU, "job_id": "j1", "gpu_util_pct": util, "sm_active": np.nan, "tensor_active": np.nan,
             "fb_used_mib": 1000.0, "power_w": np.nan, "temp_c": temp_c, "sm_clock_mhz": 1200.0,
             "throttle_reasons": throttle_reasons, "ecc_sbe_delta": pd.NA, "ecc_dbe_delta": pd.NA, "xid": 0}
            for m in range(5) for node in NODES for i in range(8)]
    return conform(pd.DataFrame(rows, columns=columns("gpu_telemetry")), "gpu_telemetry")


def link_rows(packet_loss_pct: float, retransmits=None, latency_us=None) -> pd.DataFrame:
    rows = [{"ts": T0 + m * MIN, "region": "r1", "node_id": node, "link_id": "mlx5_0", "rx_gbps": 150.0,
             "tx_gbps": 150.0, "packet_loss_pct": packet_loss_pct if node == "n1" else 0.0,
             "retransmits": retransmits, "latency_us": latency_us, "link_up": True}
            for m in range(5) for node in NODES]
    return conform(pd.DataFrame(rows, columns=columns("network_telemetry")), "network_telemetry")


def leaves(slow_network: float = 0.0) -> pd.DataFrame:
    """Both nodes' 80 GPU-minutes held by a distributed job; ``slow_network`` of them lost to grad sync."""
    rows = []
    for node in NODES:
        for state, minutes in (("productive", 40.0 - slow_network), ("slowdown_network", slow_network)):
            if minutes > 0:
                rows.append({"partition_start": T0, "region": "r1", "node_id": node, "sku": SKU, "driver_version": "550",
                             "team": "t1", "workload_class": "distributed", "model_type": "llm",
                             "framework_version": "torch-2.13.0", "queue": "batch", "state": state,
                             "gpu_minutes": minutes})
    return GoodputLeaves.validate(pd.DataFrame(rows), lazy=True)


def context(gpu=None, network=None, leaves_frame=None, meta=None) -> PartitionContext:
    return PartitionContext(
        start=T0, end=T0 + 5 * MIN,
        gpu=gpu if gpu is not None else empty_frame("gpu_telemetry"),
        node=empty_frame("node_telemetry"),
        network=network if network is not None else empty_frame("network_telemetry"),
        runtime=empty_frame("job_runtime_metrics"), sched=empty_frame("scheduler_events"),
        changes=empty_frame("change_events"), maintenance=empty_frame("maintenance_windows"),
        leaves=leaves_frame if leaves_frame is not None else leaves(),
        baselines=pd.DataFrame(), meta=meta if meta is not None else empty_frame("job_metadata"),
        inventory=pd.DataFrame({"node_id": NODES, "region": "r1", "sku": SKU, "gpus": 8}),
        region_history=pd.DataFrame(columns=["partition_start", "region", "share_idle_blocked"]),
    )


# --- thermal: null temperature is no evidence ------------------------------------------------------

def test_thermal_detector_fires_on_hot_throttled_gpus():
    (f,) = detect_thermal(context(gpu=gpu_rows(temp_c=88.0)))
    # (a ticket: the leaves show no compute slowdown on the nodes -- the page rule is test_detect_facility's)
    assert (f.family, f.severity, f.nodes) == ("hardware", "ticket", NODES)
    assert "88 C" in f.evidence


@pytest.mark.parametrize("throttle_reasons", [0x40, 0])
def test_thermal_detector_neither_fires_nor_crashes_without_temperature(throttle_reasons):
    ctx = context(gpu=gpu_rows(temp_c=np.nan, throttle_reasons=throttle_reasons))
    assert detect_thermal(ctx) == []
    assert [f for f in detect(ctx) if f.family == "hardware"] == []


def test_thermal_detector_judges_the_gpus_that_report_temperature():
    gpu = gpu_rows(temp_c=88.0)
    gpu.loc[gpu["node_id"] == "n2", "temp_c"] = np.nan  # n2's collector exposes no temperature
    (f,) = detect_thermal(context(gpu=gpu))
    assert f.nodes == ["n1"] and "88 C" in f.evidence


def test_without_clock_event_reasons_a_hot_gpu_whose_clock_stepped_down_is_throttled():
    """A collector that does not export the clock-event reasons (null): temperature at the slowdown point and
    the SM clock well under the same SKU's other busy GPUs are the two witnesses; a hot GPU at its peers' clock,
    or a clock drop below the slowdown temperature, is not thermal throttling."""
    gpu = gpu_rows(temp_c=70.0, throttle_reasons=None)
    n1 = gpu["node_id"] == "n1"
    gpu.loc[n1, "temp_c"] = 89.0
    assert detect_thermal(context(gpu=gpu)) == []  # hot, but at its peers' clock
    gpu.loc[n1, "sm_clock_mhz"] = 950.0  # stepped down by a fifth
    (f,) = detect_thermal(context(gpu=gpu))
    assert f.nodes == ["n1"] and "without clock-event reasons" in f.evidence
    cool = gpu.copy()
    cool.loc[n1, "temp_c"] = 75.0  # slow but not hot: not thermal
    assert detect_thermal(context(gpu=cool)) == []
    reported = gpu.copy()
    reported["throttle_reasons"] = 0  # reasons exported and clear: the bits decide, not the clock
    reported = reported.astype({"throttle_reasons": gpu["throttle_reasons"].dtype})
    assert detect_thermal(context(gpu=reported)) == []


# --- network: packet loss judges the links when retransmits and latency are not exposed ------------

def test_network_detector_pages_on_packet_loss_without_retransmits_or_latency():
    ctx = context(network=link_rows(packet_loss_pct=0.5), leaves_frame=leaves(slow_network=20.0))
    (f,) = [f for f in detect_slowdowns(ctx) if f.family == "network"]
    assert (f.severity, f.nodes) == ("page", ["n1"])
    assert "0.50 %" in f.evidence
    assert "retransmits not exported" in f.evidence  # absence is not "0 retransmits"


def test_network_detector_counts_retransmits_where_they_are_exposed():
    ctx = context(network=link_rows(packet_loss_pct=0.0, retransmits=150), leaves_frame=leaves(slow_network=20.0))
    (f,) = [f for f in detect_slowdowns(ctx) if f.family == "network"]
    assert f.severity == "page" and "1500 retransmits" in f.evidence


def test_network_slowdown_without_link_evidence_is_a_ticket():
    ctx = context(network=link_rows(packet_loss_pct=0.0), leaves_frame=leaves(slow_network=20.0))
    (f,) = [f for f in detect_slowdowns(ctx) if f.family == "network"]
    assert f.severity == "ticket" and f.nodes == NODES


def test_clean_links_without_retransmits_raise_nothing():
    assert detect_slowdowns(context(network=link_rows(packet_loss_pct=0.0), leaves_frame=leaves())) == []


# --- gaming: without profiling fields and power the guardrail cannot judge, and says nothing ------

def test_busy_uninstrumented_gpus_without_profiling_or_power_raise_nothing():
    """No step metrics, no SM/tensor activity, no power: nothing says the GPUs are not working (the KPI
    reports itself degraded); the absence of optional signals never pages."""
    meta = pd.DataFrame({"job_id": ["j1"], "team": ["t1"], "workload_class": ["batch"], "model_type": ["llm"],
                         "framework_version": ["torch-2.13.0"]})
    assert detect_no_progress(context(gpu=gpu_rows(temp_c=np.nan, throttle_reasons=0), meta=meta)) == []

"""The one mapping between exporter metrics and contract columns.

dcgm-exporter and node-exporter names (metrics and label variants) are
written here once and used by both directions:
:mod:`gpu_health.sources.prometheus` reads them into contract frames and
:mod:`gpu_health.evaluation.promexport` writes contract frames back as those metrics.

Every derived column says here how it is computed from the raw series, so
the reader and the writer cannot drift apart:

- gauges: the last sample in the minute ``[ts, ts+60s)``;
- counters: last sample of the minute minus last sample of the previous
  minute; a drop means the counter restarted (driver reload, reboot) and the
  increase is the new value; with no sample in the previous minute the
  increase is unknown (null), never 0;
- DCGM "blank" sentinels are nulls: int fields ``>= 0x7ffffffffffffff0`` (and
  the int32 blank range ``0x7ffffff0..0x7fffffff``), float fields ``>= 2**47``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpu_health.contracts.models import DCGM_FP64_SENTINEL, DCGM_INT64_SENTINEL

DCGM_INT32_BLANK = 0x7FFFFFF0
DCGM_INT32_MAX = 0x7FFFFFFF

MetricKind = Literal["gauge", "counter"]
DcgmType = Literal["int", "float"]


@dataclass(frozen=True)
class DcgmField:
    """One DCGM field as dcgm-exporter exposes it, and the contract column it feeds."""

    column: str
    metrics: tuple[str, ...]  # accepted names, newest first; the writer uses the first
    kind: MetricKind
    dcgm_type: DcgmType
    required: bool  # non-nullable in the contract: the Prometheus source drops a row without it


# --- gpu_telemetry -----------------------------------------------------------
GPU_FIELDS: tuple[DcgmField, ...] = (
    DcgmField("gpu_util_pct", ("DCGM_FI_DEV_GPU_UTIL",), "gauge", "int", True),
    DcgmField("sm_active", ("DCGM_FI_PROF_SM_ACTIVE",), "gauge", "float", False),
    DcgmField("tensor_active", ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",), "gauge", "float", False),
    DcgmField("fb_used_mib", ("DCGM_FI_DEV_FB_USED",), "gauge", "int", True),
    # exported by default, but not by every collector (a utilisation-only nvidia-smi log): nullable
    DcgmField("power_w", ("DCGM_FI_DEV_POWER_USAGE",), "gauge", "float", False),
    DcgmField("temp_c", ("DCGM_FI_DEV_GPU_TEMP",), "gauge", "int", False),
    DcgmField("sm_clock_mhz", ("DCGM_FI_DEV_SM_CLOCK",), "gauge", "int", True),
    # DCGM 3.2 renamed "clock throttle reasons" to "clocks event reasons"; same bits.
    DcgmField(
        "throttle_reasons",
        ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
        "gauge",
        "int",
        False,
    ),
    DcgmField("ecc_sbe_delta", ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",), "counter", "int", False),
    DcgmField("ecc_dbe_delta", ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",), "counter", "int", False),
)
GPU_GAUGES = tuple(f for f in GPU_FIELDS if f.kind == "gauge")
GPU_COUNTERS = tuple(f for f in GPU_FIELDS if f.kind == "counter")
GPU_FIELD_BY_COLUMN = {f.column: f for f in GPU_FIELDS}

# Xid. ``DCGM_FI_DEV_XID_ERRORS`` is a gauge holding the last Xid forever: a
# code counts in the minute the gauge changes to it (or in the first minute
# of a series, when it is non-zero: the gauge restarts at 0 with the exporter).
# The exporter's own ``DCGM_EXP_XID_ERRORS_TOTAL`` (counter, label ``xid``)
# also sees a repeat of the same code; ``DCGM_EXP_XID_ERRORS_COUNT`` (gauge:
# occurrences in a sliding window, label ``xid``) counts when it rises.
# Precedence when several are exported: TOTAL, then COUNT, then the gauge.
# Several codes in one minute: the highest code is kept.
XID_GAUGE = "DCGM_FI_DEV_XID_ERRORS"
XID_TOTAL = "DCGM_EXP_XID_ERRORS_TOTAL"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
XID_CODE_LABEL = "xid"

# Xid classes: what an Xid means is a device fact the loss tree and the detectors share (constants.py).

# Label variants, preferred first. The writer uses the first of each.
GPU_LABELS: dict[str, tuple[str, ...]] = {
    "node_id": ("Hostname", "hostname"),
    "gpu_uuid": ("UUID", "uuid"),
    "gpu_index": ("gpu",),
    "sku": ("modelName", "model_name"),
    # dcgm-exporter's Kubernetes pod mapping (older: pod_name) or HPC job mapping.
    "job_id": ("pod", "pod_name", "hpc_job"),
    "driver_version": ("DCGM_FI_DRIVER_VERSION",),
}
DEFAULT_REGION_LABEL = "region"
UNKNOWN = "unknown"  # sku / driver of a node whose GPUs did not report in the window

# --- node_telemetry (node-exporter) -------------------------------------------
NODE_CPU_SECONDS = "node_cpu_seconds_total"  # counter, labels cpu, mode
NODE_CPU_IDLE_MODE = "idle"
NODE_MEM_AVAILABLE = "node_memory_MemAvailable_bytes"
NODE_MEM_TOTAL = "node_memory_MemTotal_bytes"
NODE_DISK_READ_BYTES = "node_disk_read_bytes_total"  # counter, label device
NODE_DISK_WRITTEN_BYTES = "node_disk_written_bytes_total"
NODE_DISK_IO_TIME = "node_disk_io_time_seconds_total"  # seconds busy, per device
NODE_UNAME_INFO = "node_uname_info"  # value 1; labels nodename, release, ...
UNAME_NODENAME_LABEL = "nodename"
UNAME_RELEASE_LABEL = "release"  # -> kernel_version
DEFAULT_DISK_DEVICES = r"nvme\d+n\d+"  # whole NVMe namespaces, not partitions
# node-exporter series carry no host name: it comes from one of these labels if
# a relabel rule set it, else from node_uname_info{nodename} of the same
# ``instance``, else from ``instance`` without its port.
NODE_EXPORTER_NODE_LABELS = ("Hostname", "hostname", "node", "nodename")
INSTANCE_LABEL = "instance"

# Unit conversions (per-minute counter increases -> contract units).
MINUTE_S = 60.0
BYTES_PER_MB = 1e6  # disk_*_mbps is decimal MB/s
BITS_PER_GBIT = 1e9

# --- network_telemetry (node-exporter infiniband collector) ---------------------
IB_DEVICE_LABEL = "device"
IB_PORT_LABEL = "port"
IB_RX_BYTES = "node_infiniband_port_data_received_bytes_total"
IB_TX_BYTES = "node_infiniband_port_data_transmitted_bytes_total"
IB_RX_PACKETS = "node_infiniband_port_packets_received_total"
IB_TX_PACKETS = "node_infiniband_port_packets_transmitted_total"
# packet_loss_pct = 100 * sum(increase(LOSS)) / sum(increase(PACKETS)).
IB_LOSS_COUNTERS = (
    "node_infiniband_port_errors_received_total",
    "node_infiniband_port_discards_received_total",
    "node_infiniband_port_discards_transmitted_total",
)
IB_PACKET_COUNTERS = (IB_RX_PACKETS, IB_TX_PACKETS)
# retransmits = sum of increases of the RC transport's retransmit triggers
# (mlx5 hw_counters, exported by node-exporter since 1.9): ACK timeouts and
# NAK sequence errors, plus RoCE adaptive retransmissions.
IB_RETRANSMIT_COUNTERS = (
    "node_infiniband_local_ack_timeout_errors_total",
    "node_infiniband_packet_sequence_errors_total",
    "node_infiniband_roce_adp_retransmits_total",
)
IB_STATE = "node_infiniband_state_id"  # 4 = ACTIVE
IB_PHYS_STATE = "node_infiniband_physical_state_id"  # 5 = LinkUp
IB_STATE_ACTIVE = 4
IB_STATE_DOWN = 1
IB_PHYS_LINK_UP = 5
IB_PHYS_POLLING = 2
# No standard exporter measures link latency: a fabric probe (ib_write_lat /
# perftest wrapper) is expected to export this gauge, per device and port.
LINK_LATENCY = "gpu_health_link_latency_microseconds"
DEFAULT_IB_PORT = "1"

# --- job progress ------------------------------------------------------------------
# Unix time (s) of the last minute in which the job completed a step.
TRAINING_LAST_STEP = "training_last_step_timestamp_seconds"
JOB_ID_LABEL = "job_id"


def is_dcgm_blank(values, dcgm_type: DcgmType):
    """Boolean mask of DCGM "blank" / "not supported" values (numpy or pandas)."""
    if dcgm_type == "float":
        return values >= DCGM_FP64_SENTINEL
    return (values >= float(DCGM_INT64_SENTINEL)) | ((values >= DCGM_INT32_BLANK) & (values <= DCGM_INT32_MAX))


def dcgm_blank_value(dcgm_type: DcgmType) -> str:
    """The text dcgm-exporter prints for a blank field of this type."""
    return str(DCGM_INT64_SENTINEL) if dcgm_type == "int" else repr(DCGM_FP64_SENTINEL)


def link_id(device: str, port: str) -> str:
    """Contract ``link_id`` of an InfiniBand port: ``mlx5_0`` for port 1, else ``mlx5_0:2``."""
    return device if port in ("", DEFAULT_IB_PORT) else f"{device}:{port}"


def split_link_id(link: str) -> tuple[str, str]:
    """Inverse of :func:`link_id`."""
    device, sep, port = link.rpartition(":")
    return (device, port) if sep and port.isdigit() else (link, DEFAULT_IB_PORT)

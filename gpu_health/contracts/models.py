"""Pandera contracts of the source tables (../shared/design/contracts.md).

One ``DataFrameModel`` per table, named after the table in PascalCase. Column
names, types and units are the project's public interface: sources, the
simulator and the landing zone all produce exactly these columns.

Row-level rules (ranges, enums, nullability, grain uniqueness, cross-column
predicates) live here. What depends on the partition being read (timestamps
inside the window) or on the file as a whole (missing columns, naive
timestamps) is judged by :mod:`gpu_health.contracts.validate`.

Each table's catalogue entry (``SOURCE_TABLES``: partition column, cadence,
landing layout, optional family, storage, owner, grain, description) follows
the models; every list of sources (``CONTRACTS``, ``FIVE_MINUTE_SOURCES``,
``OPTIONAL_SOURCES``, ...) is computed from those entries.
"""

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.engines import pandas_engine
from pandera.typing import Series

from gpu_health.contracts.table import (
    CALENDAR,
    COLUMNAR,
    DAILY,
    EVENT,
    EVERY_MINUTE,
    FACILITY,
    FIVE_MINUTE,
    PLATFORM,
    SERVING,
    SQL,
    Table,
    source,
)

UTC = pd.DatetimeTZDtype("ns", "UTC")
_TS = {"dtype_kwargs": {"unit": "ns", "tz": "UTC"}}

# DCGM reports "not supported" / "blank" with sentinel values
# (DCGM_INT64_BLANK = 0x7ffffffffffffff0 and above; DCGM_FP64_BLANK = 2**47).
DCGM_INT64_SENTINEL = 0x7FFFFFFFFFFFFFF0
DCGM_FP64_SENTINEL = 140737488355328.0

EVENTS = ["submitted", "started", "ended", "preempted", "requeued"]
SCHEDULERS = ["kubernetes", "slurm", "yarn"]
EXIT_STATES = ["completed", "failed", "cancelled", "timeout", "node_fail"]
HEALTH = ["ok", "degraded", "down", "drained"]
WORKLOAD_CLASSES = ["interactive", "batch", "distributed"]
CHANGE_KINDS = [
    "driver_upgrade",
    "framework_release",
    "scheduler_config",
    "firmware_update",
    "kernel_upgrade",
    # change and access monitoring: configuration, firmware and access changes beyond deploys
    "node_label",
    "node_taint",
    "bios_update",
    "access_grant",
    "access_revoke",
]
THROTTLE_MASK_MAX = 0x1FF  # the nine DCGM clock-event bits

# Every text value has a length bound; over it the row is a reject (validate.py), so one broken or hostile
# exporter cannot store megabytes per cell. Three bounds, by what the column holds:
# - identifiers and labels (ids, names, versions, image references, enums): 4 KiB. The longest real ones are
#   DNS names (253 chars, RFC 1035), Linux host names (HOST_NAME_MAX = 64), Kubernetes names (253) and label
#   values (63), OCI image references (registry 253 + repository 255 + tag 128 + digest 71 ~ 710), Slurm
#   partition / account names (a few dozen): 4,096 is over 5x the longest of them.
MAX_ID_CHARS = 4096
# - free text written by people or schedulers (a change's description, a maintenance or scheduler reason):
#   64 KiB. Kubernetes truncates an event message at 1 KiB and Slurm's reason field is a short phrase; a commit
#   message pasted as a deploy description runs to a few KiB. 64 KiB keeps 10x headroom over that.
MAX_FREE_TEXT_CHARS = 65536
# - comma-separated node lists (placements, change and maintenance scopes): 1 MiB. A list cannot name more
#   nodes than the cluster has: a 100,000-GPU cluster (the largest the simulator models) has 12,500 nodes of
#   8 GPUs, each at most HOST_NAME_MAX = 64 characters plus a comma: 812,500 characters < 1,048,576.
MAX_NODE_LIST_CHARS = 1 << 20
# a Kubernetes event ``message`` and a node's ``taints`` list are free text of the same kind (the API server caps an
# event message at 1 KiB; a node carries at most a few dozen taints of <= 253 + 63 characters each)
FREE_TEXT_COLUMNS = frozenset({"description", "reason", "message", "taints"})
# The infinities a table may hold, each a value by definition, never a broken reading: a Prometheus histogram's last
# bucket is ``le="+Inf"`` (the exposition format requires it), a bucket bound; and a trainer's gradient norm that
# overflowed (``torch.nn.utils.clip_grad_norm_`` returns inf or NaN when a gradient does) is ``grad_norm = +inf``:
# the norm was computed and is not finite, which is exactly what the convergence detector looks for (a NaN cannot
# be carried: pandas reads a NaN in a float column as null, "not reported", so a producer writes a NaN norm as
# +inf). Only ``+inf``: ``-inf`` is no bucket bound and no norm.
POS_INF_ALLOWED_COLUMNS = frozenset({"le", "grad_norm"})
NODE_LIST_COLUMNS = frozenset({"node_ids", "scope"})


def text_bound(column: str) -> int:
    """The most characters a text value of ``column`` may hold (see the bounds above)."""
    if column in NODE_LIST_COLUMNS:
        return MAX_NODE_LIST_CHARS
    if column in FREE_TEXT_COLUMNS:
        return MAX_FREE_TEXT_CHARS
    return MAX_ID_CHARS


class ContractModel(pa.DataFrameModel):
    """Shared settings: no unexpected columns, values coerced to the contract."""

    class Config:
        strict = True
        coerce = True


class SourceModel(ContractModel):
    """A source table: every float is finite and every text value within :func:`text_bound`.

    ``+inf`` in a duration, a power or a price is no reading a collector can take: it would pass ``ge=0`` and
    break every sum downstream (the loss tree's paid-minutes invariant, KPI means), so it is a reject like a
    negative counter. validate.py rejects such rows (and over-long text) with a named reason before pandera
    runs; the check below keeps the rule when a model is used alone.
    """

    @pa.dataframe_check(name="finite_numbers")
    def finite_numbers(cls, df: pd.DataFrame) -> Series[bool]:
        floats = df.select_dtypes(include="floating")
        if floats.empty:
            return pd.Series(True, index=df.index)
        bad = np.zeros(len(df), dtype=bool)
        for j, name in enumerate(floats.columns):  # column by column: no copy of the frame as one float matrix
            values = floats.iloc[:, j].to_numpy(dtype="float64", na_value=np.nan)
            bad |= np.isneginf(values) if name in POS_INF_ALLOWED_COLUMNS else np.isinf(values)
        return pd.Series(~bad, index=df.index)


class _MinuteGrain(SourceModel):
    ts: Series[pd.DatetimeTZDtype] = pa.Field(description="Minute start, UTC.", **_TS)

    @pa.dataframe_check(name="ts_minute_aligned")
    def ts_minute_aligned(cls, df: pd.DataFrame) -> Series[bool]:
        ts = df["ts"]
        if isinstance(ts.dtype, pd.DatetimeTZDtype) and str(ts.dtype.tz) == "UTC" and ts.dtype.unit == "ns":
            # UTC nanoseconds since the epoch: a whole minute is a multiple of 60e9 (the epoch is one);
            # one integer pass instead of three calendar-field extractions. A missing ts is not aligned.
            ns = ts.array.asi8
            return pd.Series((ns % 60_000_000_000 == 0) & ~ts.isna().to_numpy(), index=df.index)
        return (ts.dt.second == 0) & (ts.dt.microsecond == 0) & (ts.dt.nanosecond == 0)


class _NodeKeyed(_MinuteGrain):
    region: Series[pd.StringDtype] = pa.Field(description="Region, e.g. us-east.", str_length={"min_value": 1})
    node_id: Series[pd.StringDtype] = pa.Field(description="Host name [Hostname label].", str_length={"min_value": 1})


class GpuTelemetry(_NodeKeyed):
    """One row per reporting GPU per minute (dcgm-exporter fields in brackets)."""

    gpu_index: Series[int] = pa.Field(ge=0, le=15, description="GPU index on the node [gpu label].")
    gpu_uuid: Series[pd.StringDtype] = pa.Field(description="GPU UUID [UUID label].", str_length={"min_value": 1})
    sku: Series[pd.StringDtype] = pa.Field(description="GPU model [modelName label].")
    job_id: Series[pd.StringDtype] = pa.Field(nullable=True, description="Job holding the GPU this minute; null = unallocated.")
    gpu_util_pct: Series[float] = pa.Field(ge=0, le=100, description="[DCGM_FI_DEV_GPU_UTIL] percent.")
    sm_active: Series[float] = pa.Field(ge=0, le=1, nullable=True, description="[DCGM_FI_PROF_SM_ACTIVE] ratio; profiling field, often off.")
    tensor_active: Series[float] = pa.Field(ge=0, le=1, nullable=True, description="[DCGM_FI_PROF_PIPE_TENSOR_ACTIVE] ratio.")
    fb_used_mib: Series[float] = pa.Field(ge=0, description="[DCGM_FI_DEV_FB_USED] MiB.")
    power_w: Series[float] = pa.Field(ge=0, nullable=True, description="[DCGM_FI_DEV_POWER_USAGE] watts; null = the collector does not expose it (e.g. a utilisation-only nvidia-smi log).")
    temp_c: Series[float] = pa.Field(ge=-40, le=150, nullable=True, description="[DCGM_FI_DEV_GPU_TEMP] degrees C; null = the collector does not expose it.")
    sm_clock_mhz: Series[float] = pa.Field(ge=0, description="[DCGM_FI_DEV_SM_CLOCK] MHz.")
    throttle_reasons: Series[pd.Int64Dtype] = pa.Field(ge=0, le=THROTTLE_MASK_MAX, nullable=True, description="[DCGM_FI_DEV_CLOCK_THROTTLE_REASONS] bitmask.")
    ecc_sbe_delta: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True, description="Single-bit ECC errors in the minute (differenced counter).")
    ecc_dbe_delta: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True, description="Double-bit ECC errors in the minute (differenced counter).")
    xid: Series[int] = pa.Field(ge=0, description="Xid raised in the minute, 0 = none.")

    class Config:
        unique = ["ts", "gpu_uuid"]


class NodeTelemetry(_NodeKeyed):
    """One row per node per minute."""

    sku: Series[pd.StringDtype] = pa.Field(description="GPU model installed in the node.")
    cpu_util_pct: Series[float] = pa.Field(ge=0, le=100, description="Host CPU utilisation percent.")
    mem_used_pct: Series[float] = pa.Field(ge=0, le=100, description="Host memory used percent.")
    disk_read_mbps: Series[float] = pa.Field(ge=0, description="Local NVMe / shared-FS client read MB/s.")
    disk_write_mbps: Series[float] = pa.Field(ge=0, description="Local NVMe / shared-FS client write MB/s.")
    nvme_util_pct: Series[float] = pa.Field(ge=0, le=100, description="NVMe busy percent.")
    driver_version: Series[pd.StringDtype] = pa.Field(description="NVIDIA driver [DCGM_FI_DRIVER_VERSION label].")
    kernel_version: Series[pd.StringDtype] = pa.Field(description="Linux kernel release.")
    health: Series[pd.StringDtype] = pa.Field(isin=HEALTH, description="ok | degraded | down | drained.")

    class Config:
        unique = ["ts", "node_id"]


class NetworkTelemetry(_NodeKeyed):
    """One row per InfiniBand / RoCE link per minute."""

    link_id: Series[pd.StringDtype] = pa.Field(description="Port, e.g. mlx5_0.")
    rx_gbps: Series[float] = pa.Field(ge=0, description="Receive Gbit/s.")
    tx_gbps: Series[float] = pa.Field(ge=0, description="Transmit Gbit/s.")
    packet_loss_pct: Series[float] = pa.Field(ge=0, le=100, description="Packets lost, percent.")
    retransmits: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True, description="Retransmits in the minute; null = the collector does not expose it (switch-port counters and node-exporter IB counters have none).")
    latency_us: Series[float] = pa.Field(ge=0, nullable=True, description="Link latency, microseconds; null = the collector does not expose it (needs a fabric probe).")
    link_up: Series[bool] = pa.Field(description="Port state is up.")

    class Config:
        unique = ["ts", "node_id", "link_id"]


class SchedulerEvents(SourceModel):
    """One row per scheduler event (not minute-aligned)."""

    event_id: Series[pd.StringDtype] = pa.Field(unique=True, description="Unique event id.")
    ts: Series[pd.DatetimeTZDtype] = pa.Field(description="Event time, UTC.", **_TS)
    job_id: Series[pd.StringDtype] = pa.Field(description="Job id; a requeued job keeps it.")
    event: Series[pd.StringDtype] = pa.Field(isin=EVENTS, description="submitted | started | ended | preempted | requeued.")
    scheduler: Series[pd.StringDtype] = pa.Field(isin=SCHEDULERS, description="kubernetes | slurm | yarn.")
    queue: Series[pd.StringDtype] = pa.Field(description="Queue / partition / virtual cluster.")
    priority: Series[int] = pa.Field(description="Scheduler priority.")
    gpus: Series[int] = pa.Field(ge=0, description="Requested on submitted, allocated later (0 if never started).")
    node_ids: Series[pd.StringDtype] = pa.Field(nullable=True, description="Comma-separated placement.")
    exit_state: Series[pd.StringDtype] = pa.Field(isin=EXIT_STATES, nullable=True, description="On ended: completed | failed | cancelled | timeout | node_fail.")
    reason: Series[pd.StringDtype] = pa.Field(nullable=True, description="Free text from the scheduler.")


    @pa.dataframe_check(name="exit_state_only_on_ended")
    def exit_state_only_on_ended(cls, df: pd.DataFrame) -> Series[bool]:
        ended = df["event"] == "ended"
        return ended == df["exit_state"].notna()


class JobRuntimeMetrics(_MinuteGrain):
    """One row per running job per minute that reports training metrics."""

    job_id: Series[pd.StringDtype] = pa.Field(description="Job id.")
    steps: Series[int] = pa.Field(ge=0, description="Steps completed in the minute.")
    samples: Series[int] = pa.Field(ge=0, description="Samples processed in the minute.")
    last_step: Series[int] = pa.Field(ge=0, description="Cumulative step counter at the minute's end.")
    step_time_s: Series[float] = pa.Field(gt=0, nullable=True, description="Mean wall seconds per step (null when steps = 0).")
    data_loader_time_s: Series[float] = pa.Field(ge=0, nullable=True, description="Mean seconds per step waiting on input.")
    grad_sync_time_s: Series[float] = pa.Field(ge=0, nullable=True, description="Mean seconds per step in collectives.")
    checkpoint_time_s: Series[float] = pa.Field(ge=0, description="Seconds spent checkpointing in the minute.")
    loss: Series[float] = pa.Field(nullable=True, description="Training loss, last value.")
    last_checkpoint_step: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True, description="Step of the newest durable checkpoint.")
    # added after files were written: optional in a file (OPTIONAL_COLUMNS), null = not reported, never a 0 reading
    grad_norm: Series[float] = pa.Field(
        ge=0, nullable=True,
        description="L2 norm of the gradient at the minute's last step, before clipping; null = not reported; "
                    "+inf = the norm overflowed (inf or NaN in the trainer).")

    class Config:
        unique = ["ts", "job_id"]

    @pa.dataframe_check(name="step_time_null_iff_no_steps")
    def step_time_null_iff_no_steps(cls, df: pd.DataFrame) -> Series[bool]:
        return (df["steps"] > 0) == df["step_time_s"].notna()


class JobMetadata(SourceModel):
    """One row per job, landed in the partition of its submission."""

    job_id: Series[pd.StringDtype] = pa.Field(unique=True, description="Job id.")
    submitted_at: Series[pd.DatetimeTZDtype] = pa.Field(description="Submission time, UTC.", **_TS)
    team: Series[pd.StringDtype] = pa.Field(description="Owning team.")
    model_type: Series[pd.StringDtype] = pa.Field(description="e.g. fraud-gbdt, fraud-transformer, embedding.")
    workload_class: Series[pd.StringDtype] = pa.Field(isin=WORKLOAD_CLASSES, description="interactive | batch | distributed.")
    dataset: Series[pd.StringDtype] = pa.Field(description="Training dataset.")
    requested_gpus: Series[int] = pa.Field(ge=0, description="GPUs requested.")
    requested_mem_gb: Series[float] = pa.Field(ge=0, description="Host memory requested, GB.")
    container_image: Series[pd.StringDtype] = pa.Field(description="Container image reference.")
    framework_version: Series[pd.StringDtype] = pa.Field(description="e.g. torch-2.13.0.")
    sla_deadline: Series[pd.DatetimeTZDtype] = pa.Field(nullable=True, description="Completion SLA, UTC.", **_TS)



class CostCapacity(SourceModel):
    """One row per region x SKU per day (from Finance)."""

    date: Series[pandas_engine.Date] = pa.Field(description="Day (UTC).")
    region: Series[pd.StringDtype] = pa.Field(description="Region.")
    sku: Series[pd.StringDtype] = pa.Field(description="GPU model.")
    capacity_gpus: Series[int] = pa.Field(ge=0, description="Installed GPUs.")
    reserved_gpus: Series[int] = pa.Field(ge=0, description="GPUs covered by reservations.")
    reserved_gpu_hour_usd: Series[float] = pa.Field(ge=0, description="USD per reserved GPU-hour.")
    on_demand_gpu_hour_usd: Series[float] = pa.Field(ge=0, description="USD per on-demand GPU-hour.")
    on_demand_gpu_hours: Series[float] = pa.Field(ge=0, description="Burst GPU-hours bought that day.")

    class Config:
        unique = ["date", "region", "sku"]


class ChangeEvents(SourceModel):
    """One row per deploy or configuration change."""

    event_id: Series[pd.StringDtype] = pa.Field(unique=True, description="Unique change id.")
    ts: Series[pd.DatetimeTZDtype] = pa.Field(description="When the change took effect, UTC.", **_TS)
    kind: Series[pd.StringDtype] = pa.Field(isin=CHANGE_KINDS, description="Kind of change.")
    scope: Series[pd.StringDtype] = pa.Field(description="Region, comma-separated node ids, or *.")
    from_version: Series[pd.StringDtype] = pa.Field(nullable=True, description="Version before (null for config changes).")
    to_version: Series[pd.StringDtype] = pa.Field(nullable=True, description="Version after.")
    description: Series[pd.StringDtype] = pa.Field(description="Free text.")
    actor: Series[pd.StringDtype] = pa.Field(nullable=True, description="Who made the change (user or service account); null = not recorded. Optional: an older file without the column reads as null.")
    ticket: Series[pd.StringDtype] = pa.Field(nullable=True, description="The change-request reference (e.g. CHG-1234); null = none given. Optional like actor.")



class MaintenanceWindows(SourceModel):
    """The planned-maintenance calendar, one row per window."""

    window_id: Series[pd.StringDtype] = pa.Field(unique=True, description="Window id.")
    start: Series[pd.DatetimeTZDtype] = pa.Field(description="Window start, UTC.", **_TS)
    end: Series[pd.DatetimeTZDtype] = pa.Field(description="Window end, UTC.", **_TS)
    region: Series[pd.StringDtype] = pa.Field(description="Region or * for all.")
    node_ids: Series[pd.StringDtype] = pa.Field(description="Comma-separated node ids or *.")
    reason: Series[pd.StringDtype] = pa.Field(description="Why.")


    @pa.dataframe_check(name="end_after_start")
    def end_after_start(cls, df: pd.DataFrame) -> Series[bool]:
        return df["end"] > df["start"]


# --- the serving layer (contracts.md "The other layers") ---------------------------------------------
HISTOGRAMS = ["latency", "ttft"]


class _ServingKeyed(_MinuteGrain):
    region: Series[pd.StringDtype] = pa.Field(description="Region, e.g. us-east.", str_length={"min_value": 1})
    model_name: Series[pd.StringDtype] = pa.Field(description="Served model [model_name label].", str_length={"min_value": 1})
    model_version: Series[pd.StringDtype] = pa.Field(description="Model version [model_version label].", str_length={"min_value": 1})


class InferenceRequests(_ServingKeyed):
    """One row per region x model x version x minute: a deployment's request counters (per-minute increases)."""

    requests: Series[int] = pa.Field(ge=0, description="Requests completed in the minute [increase of <latency>_count].")
    errors: Series[int] = pa.Field(ge=0, description="Of them, failed [status=\"error\" or HTTP 5xx].")
    latency_sum_s: Series[float] = pa.Field(ge=0, description="Seconds of latency summed over the minute's requests [increase of <latency>_sum].")
    queue_depth: Series[float] = pa.Field(ge=0, nullable=True, description="Mean pending requests (a gauge); null = not exported.")
    replicas: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True, description="Serving replicas ready; null = not exported.")
    gpus: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True, description="GPUs allocated to the replicas; null = not exported.")

    class Config:
        unique = ["ts", "region", "model_name", "model_version"]

    @pa.dataframe_check(name="errors_within_requests")
    def errors_within_requests(cls, df: pd.DataFrame) -> Series[bool]:
        return df["errors"] <= df["requests"]


HISTOGRAM_GROUP = ["ts", "region", "model_name", "model_version", "histogram"]


class InferenceLatencyBuckets(_ServingKeyed):
    """One row per region x model x version x histogram x ``le`` x minute: the classic Prometheus histogram as it
    is stored, cumulative bucket counts (per-minute increases of ``_bucket``)."""

    histogram: Series[pd.StringDtype] = pa.Field(isin=HISTOGRAMS, description="latency (end-to-end) | ttft (time to first token).")
    le: Series[float] = pa.Field(gt=0, description="The bucket's upper bound, seconds [le label]; +inf is the last bucket (the one infinity allowed in any table).")
    count: Series[int] = pa.Field(ge=0, description="Requests in the minute with a value <= le [increase of _bucket].")

    class Config:
        unique = ["ts", "region", "model_name", "model_version", "histogram", "le"]

    @pa.dataframe_check(name="count_non_decreasing_in_le")
    def count_non_decreasing_in_le(cls, df: pd.DataFrame) -> Series[bool]:
        """A bucket counts every request of the buckets below it (cumulative histogram): a row whose count is
        below that of a smaller ``le`` of its histogram-minute breaks the histogram."""
        return pd.Series(bucket_monotone(df), index=df.index)

    @pa.dataframe_check(name="inf_bucket_present")
    def inf_bucket_present(cls, df: pd.DataFrame) -> Series[bool]:
        """Every histogram-minute has its ``le=+Inf`` bucket: it is the total every quantile is a share of
        (Prometheus' histogram_quantile returns NaN without it)."""
        if df.empty:
            return pd.Series(True, index=df.index)
        has_inf = np.isposinf(df["le"].astype("float64")).groupby([df[c] for c in HISTOGRAM_GROUP], sort=False).transform("any")
        return has_inf.astype(bool)


class FacilityTelemetry(_MinuteGrain):
    """One row per rack per minute: the rack's PDU draw against its provisioned budget, its power
    supplies, its inlet / outlet temperatures and the hall's draw (for PUE). Optional source: a cluster that
    exports no facility data lands zero rows and runs as before (OPTIONAL_SOURCES)."""

    region: Series[pd.StringDtype] = pa.Field(description="Region (the hall), e.g. us-east.", str_length={"min_value": 1})
    rack_id: Series[pd.StringDtype] = pa.Field(description="Rack id [PDU / BMC chassis label].", str_length={"min_value": 1})
    node_ids: Series[pd.StringDtype] = pa.Field(description="Comma-separated nodes in the rack.")
    power_kw: Series[float] = pa.Field(ge=0, description="Rack draw, kW (the PDUs' sum).")
    power_budget_kw: Series[float] = pa.Field(gt=0, description="The rack's provisioned power (its breaker rating), kW.")
    # -40..150 C: the range of the sensors the contract accepts anywhere (gpu_telemetry.temp_c); air or coolant
    inlet_temp_c: Series[float] = pa.Field(ge=-40, le=150, nullable=True, description="Rack inlet air / coolant, C; null = not exported.")
    outlet_temp_c: Series[float] = pa.Field(ge=-40, le=150, nullable=True, description="Rack outlet air / coolant, C; null = not exported.")
    psus_failed: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True, description="Power supplies in a failed state; null = not exported.")
    facility_power_kw: Series[float] = pa.Field(ge=0, nullable=True, description="The whole hall's draw, kW, repeated on each rack row of the region-minute; PUE = facility_power_kw / the region's sum of power_kw.")

    class Config:
        unique = ["ts", "region", "rack_id"]


def bucket_monotone(df: pd.DataFrame) -> np.ndarray:
    """Per row: True when its ``count`` is at least the count of every smaller ``le`` of the same histogram-minute."""
    if df.empty:
        return np.ones(0, dtype=bool)
    order = df.assign(_le=df["le"].astype("float64"), _n=np.arange(len(df))).sort_values(HISTOGRAM_GROUP + ["_le"])
    group = order.groupby(HISTOGRAM_GROUP, sort=False).ngroup()
    prev_max = order["count"].astype("int64").groupby(group).cummax().groupby(group).shift(1)
    ok_sorted = ~(order["count"].astype("int64") < prev_max.fillna(-1))
    out = np.ones(len(df), dtype=bool)
    out[order["_n"].to_numpy()] = ok_sorted.to_numpy()
    return out


def inf_bucket_matches_requests(buckets: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """The latency histogram's ``+Inf`` bucket against ``inference_requests.requests`` of the same minute.

    Both are increases of the same histogram (``_bucket{le="+Inf"}`` and ``_count`` are equal by the exposition
    format), so a difference means the two tables came from different scrapes or an adapter lost a series. Returns
    the disagreeing (ts, region, model_name, model_version) with both numbers; empty when they agree. This spans
    two tables, so it is judged where both are read (``serving_slis``), not by either row contract."""
    key = ["ts", "region", "model_name", "model_version"]
    inf = buckets[(buckets["histogram"] == "latency") & np.isposinf(buckets["le"].astype("float64"))]
    merged = inf[key + ["count"]].merge(requests[key + ["requests"]], on=key, how="inner")
    return merged[merged["count"].astype("int64") != merged["requests"].astype("int64")].reset_index(drop=True)


# --- the platform layer (contracts.md "The other layers"): what kube-state-metrics says -----------------
POD_PHASES = ["Pending", "Running", "Succeeded", "Failed", "Unknown"]


class KubePods(_MinuteGrain):
    """One row per pod per minute while it exists: kube-state-metrics' pod series and the latest event."""

    region: Series[pd.StringDtype] = pa.Field(description="Region, e.g. us-east.", str_length={"min_value": 1})
    namespace: Series[pd.StringDtype] = pa.Field(description="Kubernetes namespace [namespace label].", str_length={"min_value": 1})
    pod: Series[pd.StringDtype] = pa.Field(description="Pod name [pod label].", str_length={"min_value": 1})
    node_id: Series[pd.StringDtype] = pa.Field(nullable=True, description="Node the pod is bound to [node label]; null while unscheduled.")
    phase: Series[pd.StringDtype] = pa.Field(isin=POD_PHASES, description="Pending | Running | Succeeded | Failed | Unknown [kube_pod_status_phase].")
    reason: Series[pd.StringDtype] = pa.Field(nullable=True, description="Waiting / terminated reason or the PodScheduled condition's reason (Unschedulable, CrashLoopBackOff, SchedulingGated, ...).")
    message: Series[pd.StringDtype] = pa.Field(nullable=True, description="Latest event message, e.g. 0/80 nodes are available: 80 node(s) had untolerated taint {nvidia.com/gpu: }.")
    gpu_request: Series[int] = pa.Field(ge=0, description="GPUs requested, summed over containers [kube_pod_container_resource_requests{resource=\"nvidia_com_gpu\"}].")
    restarts: Series[int] = pa.Field(ge=0, description="Cumulative container restarts [kube_pod_container_status_restarts_total].")
    job_id: Series[pd.StringDtype] = pa.Field(nullable=True, description="Training or serving job the pod belongs to (joins the other tables); null = none known.")
    container_image: Series[pd.StringDtype] = pa.Field(description="Container image reference.")

    class Config:
        unique = ["ts", "namespace", "pod"]

    @pa.dataframe_check(name="running_pod_is_placed")
    def running_pod_is_placed(cls, df: pd.DataFrame) -> Series[bool]:
        """A Running pod is bound to a node (the kubelet of a node runs it): a null node there is a broken join."""
        return (df["phase"] != "Running") | df["node_id"].notna()


class KubeNodes(_NodeKeyed):
    """One row per node per minute: the node's GPU capacity as Kubernetes advertises it, its taints and state."""

    gpu_capacity: Series[int] = pa.Field(ge=0, description="GPUs the node has [kube_node_status_capacity{resource=\"nvidia_com_gpu\"}].")
    gpu_allocatable: Series[int] = pa.Field(ge=0, description="GPUs pods may request [kube_node_status_allocatable{resource=\"nvidia_com_gpu\"}]; 0 on a GPU node = device plugin missing.")
    taints: Series[pd.StringDtype] = pa.Field(nullable=True, description="Comma-separated key=value:effect [kube_node_spec_taint]; null = none.")
    ready: Series[bool] = pa.Field(description="The Ready condition is true [kube_node_status_condition].")
    unschedulable: Series[bool] = pa.Field(description="Cordoned [kube_node_spec_unschedulable].")

    class Config:
        unique = ["ts", "node_id"]

    @pa.dataframe_check(name="allocatable_within_capacity")
    def allocatable_within_capacity(cls, df: pd.DataFrame) -> Series[bool]:
        """Allocatable is capacity less what the kubelet reserves or finds unhealthy: never more."""
        return df["gpu_allocatable"] <= df["gpu_capacity"]


# --- the source tables' catalogue entries ---------------------------------------------------------------------------
# Each source's entry, beside its contract: every fact about the table (see gpu_health.catalog, which collects these
# with the derived tables'). Every list of sources below, and those of the landing zone and the adapters, is computed
# from them.
SOURCE_TABLES: tuple[Table, ...] = (
    source("gpu_telemetry", GpuTelemetry, "ts", EVERY_MINUTE, COLUMNAR, "infra",
           "one row per reporting GPU per minute",
           "DCGM exporter fields per GPU: utilization, SM/tensor activity, framebuffer, power, temperature, "
           "SM clock, clock-event reasons, ECC and Xid."),
    source("node_telemetry", NodeTelemetry, "ts", EVERY_MINUTE, COLUMNAR, "infra", "one row per node per minute",
           "Per node: CPU, memory, disk and NVMe load, driver and kernel versions, health state."),
    source("network_telemetry", NetworkTelemetry, "ts", EVERY_MINUTE, COLUMNAR, "infra",
           "one row per InfiniBand/RoCE link per minute",
           "Per fabric link: throughput, packet loss, retransmits, latency, link up."),
    source("scheduler_events", SchedulerEvents, "ts", EVENT, COLUMNAR, "ml_platform", "one row per scheduler event",
           "Submissions, starts, ends, preemptions and requeues from the scheduler."),
    source("job_runtime_metrics", JobRuntimeMetrics, "ts", EVERY_MINUTE, COLUMNAR, "ml_platform",
           "one row per running job per minute that reports training metrics",
           "Training-loop progress reported by jobs: steps, step time, loader wait, gradient sync, checkpoints, "
           "loss and (where logged) gradient norm.",
           optional_columns=("grad_norm",)),  # the trainer's gradient norm, logged only when asked
    source("job_metadata", JobMetadata, "submitted_at", EVENT, COLUMNAR, "ml_platform",
           "one row per job, in the partition of its submission",
           "What each job is: team, model type, workload class, dataset, requested GPUs, image, framework, SLA."),
    source("change_events", ChangeEvents, "ts", EVENT, SQL, "ml_platform", "one row per deploy or configuration change",
           "Deploys and configuration changes (driver, firmware, framework, scheduler config) with their scope.",
           optional_columns=("actor", "ticket")),
    source("cost_capacity", CostCapacity, "date", DAILY, SQL, "finance", "one row per region x SKU per day",
           "Finance's daily GPU capacity, reserved GPUs and USD per GPU-hour (reserved and on demand).",
           landing=DAILY),
    source("maintenance_windows", MaintenanceWindows, None, CALENDAR, SQL, "infra",
           "one row per planned-maintenance window (the whole calendar)",
           "Planned maintenance: nodes drained on purpose, never paged on.", landing=CALENDAR),
    source("inference_requests", InferenceRequests, "ts", EVERY_MINUTE, COLUMNAR, "ml_platform",
           "one row per region x model x version x minute (optional: serving)",
           "Per deployment: requests, errors, latency sum, queue depth, replicas, GPUs.", optional=SERVING),
    source("inference_latency_buckets", InferenceLatencyBuckets, "ts", EVERY_MINUTE, COLUMNAR, "ml_platform",
           "one row per region x model x version x histogram x le x minute (optional: serving)",
           "Serving latency and time-to-first-token histograms per deployment.", optional=SERVING),
    source("facility_telemetry", FacilityTelemetry, "ts", EVERY_MINUTE, COLUMNAR, "infra",
           "one row per rack per minute (optional: facility power and cooling)",
           "Per rack: power draw and budget, inlet and outlet temperature, failed PSUs, the hall's power for PUE.",
           optional=FACILITY),
    source("kube_pods", KubePods, "ts", EVERY_MINUTE, COLUMNAR, "ml_platform",
           "one row per pod per minute while it exists (optional: Kubernetes)",
           "kube-state-metrics and events per pod: phase, reason, node, GPU request, restarts, job.",
           optional=PLATFORM),
    source("kube_nodes", KubeNodes, "ts", EVERY_MINUTE, COLUMNAR, "infra",
           "one row per node per minute (optional: Kubernetes)",
           "Per Kubernetes node: GPU capacity and allocatable, taints, ready, unschedulable.", optional=PLATFORM),
)

# Source table name -> contract, and which column places a row in a partition.
CONTRACTS: dict[str, type[ContractModel]] = {t.name: t.model for t in SOURCE_TABLES}
PARTITION_COLUMN: dict[str, str | None] = {t.name: t.partition_column for t in SOURCE_TABLES}

# Minute-grain tables: ``ts`` is the minute's start. Collectors stamp the scrape instant (dcgm-exporter's sample
# time, 250 ms or 40 s into the minute), so validate.py floors ``ts`` to its minute before the key and partition
# checks; the event tables (scheduler_events, change_events) keep their exact times.
MINUTE_GRAIN_SOURCES = frozenset(t.name for t in SOURCE_TABLES if t.cadence == EVERY_MINUTE)

# The 5-minute sources every producer must write and the sensor waits for.
FIVE_MINUTE_SOURCES = [t.name for t in SOURCE_TABLES if t.landing == FIVE_MINUTE and t.optional is None]


def _optional(family: str | None = None) -> list[str]:
    return [t.name for t in SOURCE_TABLES if t.optional is not None and family in (None, t.optional)]


# Optional 5-minute sources (contracts.table.OPTIONAL_FAMILIES): an absent partition of these is zero rows ("nothing
# was served", "no facility data"), never data a partition waits for, and they are not among FIVE_MINUTE_SOURCES.
OPTIONAL_SOURCES = _optional()
SERVING_SOURCES = _optional(SERVING)
FACILITY_SOURCES = _optional(FACILITY)
PLATFORM_SOURCES = _optional(PLATFORM)
# Columns added to a contract after files were written: an older file without them reads as null (validate.py
# adds a missing optional column as nulls before judging the file).
OPTIONAL_COLUMNS: dict[str, tuple[str, ...]] = {t.name: t.optional_columns for t in SOURCE_TABLES if t.optional_columns}

# Optional DCGM fields: a missing value is null, never a zero reading.
OPTIONAL_DCGM_COLUMNS = ["sm_active", "tensor_active", "throttle_reasons", "ecc_sbe_delta", "ecc_dbe_delta"]


def columns(table: str) -> list[str]:
    """The contract's column names, in order."""
    return list(CONTRACTS[table].to_schema().columns)


def conform(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """Cast a frame that already holds valid values to the contract's dtypes (no checks)."""
    return CONTRACTS[table].to_schema().coerce_dtype(frame)


_EMPTY_FRAMES: dict[str, pd.DataFrame] = {}


def empty_frame(table: str) -> pd.DataFrame:
    """A zero-row frame with the contract's columns and dtypes (a fresh copy each call: callers may change it).

    Built once per table: pandera's coercion costs milliseconds, and a landing window of an absent optional source
    asks for one per partition (288 a day)."""
    if table not in _EMPTY_FRAMES:
        schema = CONTRACTS[table].to_schema()
        _EMPTY_FRAMES[table] = schema.coerce_dtype(pd.DataFrame({c: pd.Series(dtype="object") for c in schema.columns}))
    return _EMPTY_FRAMES[table].copy()


def empty_frame_dtypes(table: str) -> pd.Series:
    """The contract's column dtypes, as :func:`empty_frame` has them (no frame built)."""
    if table not in _EMPTY_FRAMES:
        empty_frame(table)
    return _EMPTY_FRAMES[table].dtypes

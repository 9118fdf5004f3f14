"""Bodies of the KPI steps: the KPI values and their expected values, the serving SLIs and SLO error budgets, the
racks' facility figures.

No Dagster and no warehouse here: each body reads what its step declares (``registry.py``) through the
:class:`~gpu_health.steps.resolve.Inputs` it is given and calls the pure functions of ``metrics``.
"""

import pandas as pd

from gpu_health.constants import PARTITION_FREQ
from gpu_health.steps.diagnosis import _paged_partitions, _slices
from gpu_health.steps.finance import capacity_as_of
from gpu_health.steps.resolve import Inputs
from gpu_health.steps.telemetry import SCHED_LOOKBACK, inventory_segments

# the expected value of a KPI at a partition: the same slot on each of the previous KPI_SLOT_DAYS days, padded by
# KPI_SLOT_PAD on either side (gpu_health.metrics.kpi_baselines' +-30 min, and the partition's width)
KPI_SLOT_DAYS = 14
KPI_SLOT_PAD = pd.Timedelta(minutes=35)

# the columns gpu_health.metrics.kpis reads of the big sources and of job metadata (a day of GPU rows is 1.7 M: the
# columns no KPI reads cost a copy out of the run cache, and the 4 days of job metadata a fetch from the database)
KPI_COLUMNS = {
    "gpu_telemetry": ["ts", "region", "node_id", "sku", "job_id", "gpu_util_pct", "sm_active", "tensor_active",
                      "power_w", "throttle_reasons", "ecc_dbe_delta", "xid", "gpu_uuid"],
    "node_telemetry": ["ts", "region", "node_id", "sku", "health"],
    "network_telemetry": ["ts", "region", "node_id", "packet_loss_pct", "retransmits", "link_up"],
    "job_runtime_metrics": ["ts", "job_id", "steps", "step_time_s", "data_loader_time_s", "grad_sync_time_s",
                            "checkpoint_time_s"],
    "job_metadata": ["job_id", "submitted_at", "team", "model_type", "workload_class", "requested_gpus", "sla_deadline"],
}


def kpi_values(inputs: Inputs) -> pd.DataFrame:
    """The KPI catalog's values for every partition of [start, end) (gpu_health.metrics.kpis)."""
    from gpu_health.metrics.kpis import compute_kpis

    start, end = inputs.start, inputs.end
    frames = {t: inputs.in_window(t, columns=KPI_COLUMNS.get(t))
              for t in ("gpu_telemetry", "node_telemetry", "network_telemetry", "job_runtime_metrics", "job_metadata",
                        "change_events", "facility_telemetry")}
    # six hours of scheduler events show every job still waiting at the window's start
    frames["scheduler_events"] = inputs.span("scheduler_events", start - SCHED_LOOKBACK, end)
    return compute_kpis(
        frames, inputs.in_window("goodput_states"), start=start, end=end,
        cost=capacity_as_of(inputs),
        job_metadata_lookup=inputs.span("job_metadata", inputs.since("job_metadata"), start,
                                        columns=KPI_COLUMNS["job_metadata"]),
        step_baseline=inputs.in_window("step_time_baselines"),
        pending=pd.DataFrame(columns=["job_id", "submitted_at", "gpus"]),
        inventory=inventory_segments(inputs),
    )



def _spans(slices) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """Time slices merged where they overlap or touch, in time order: the same instants, each read once."""
    out: list[list[pd.Timestamp]] = []
    for a, b in sorted(slices):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _read_spans(inputs: Inputs, table: str, slices, columns: list[str]) -> pd.DataFrame:
    """The rows of ``table`` in any of ``slices`` (each row once), restricted to ``columns``.

    The slices are merged first (:func:`_spans`): a day-long window's 15 slices overlap into one span, so it is one
    query with no duplicate rows to drop, instead of 15 queries and a de-duplication of ~15 days of rows."""
    parts = [inputs.span(table, a, b, columns=columns) for a, b in _spans(slices)]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0] if parts else \
        inputs.span(table, slices[-1][1], slices[-1][1], columns=columns)


# the columns expected_values reads: the slice, the value and whether it is a sample
KPI_HISTORY_COLUMNS = ["partition_start", "kpi", "region", "sku", "workload_class", "team", "value", "status"]
STATE_HISTORY_COLUMNS = ["partition_start", "region", "sku", "workload_class", "state", "gpu_minutes"]



def kpi_baselines(inputs: Inputs) -> pd.DataFrame:
    """Expected value of every KPI series and loss-state share per partition (gpu_health.metrics.kpi_baselines):
    only the slices its rules use are read (the same slot on each of the previous KPI_SLOT_DAYS days, the trailing 2 h),
    and of them only the columns the rules use."""
    from gpu_health.metrics.kpi_baselines import expected_values

    start, end = inputs.start, inputs.end
    # the trailing 2 hours of every partition: the window's own rows too (written before this step, as the
    # partition's own run reads those before it), and so its pages
    slices = _slices(start, end, KPI_SLOT_DAYS, KPI_SLOT_PAD)[:-1] + [(start - pd.Timedelta(hours=2), end)]
    kpis = _read_spans(inputs, "kpi_values", slices, KPI_HISTORY_COLUMNS)
    states = _read_spans(inputs, "goodput_states", slices, STATE_HISTORY_COLUMNS)
    exclude = _paged_partitions(inputs)  # (the declared history of the alerts)
    parts = pd.date_range(start, end, freq=PARTITION_FREQ, inclusive="left")
    return expected_values(kpis, states, parts, exclude=exclude, maintenance=inputs.window("maintenance_windows"))


def serving_slis(inputs: Inputs) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The serving SLIs of every partition of [start, end) (gpu_health.metrics.serving), and the minutes whose
    latency ``+Inf`` bucket disagrees with ``inference_requests.requests`` (the two tables are one histogram)."""
    from gpu_health.contracts.models import inf_bucket_matches_requests
    from gpu_health.metrics.serving import serving_slis as compute

    req = inputs.in_window("inference_requests")
    buckets = inputs.in_window("inference_latency_buckets")
    return compute(req, buckets), inf_bucket_matches_requests(buckets, req)


def slo_error_budgets(inputs: Inputs) -> pd.DataFrame:
    """Each SLO's events and error budget remaining for every partition of [start, end) (gpu_health.metrics.slo),
    the rolling window continued from the table's own rows of the SLO window before ``start``."""
    from gpu_health.metrics import slo as S

    # the table's own rows over the declared SLO window before the window
    history = inputs.span("slo_error_budgets", inputs.since("slo_error_budgets"), inputs.start)
    req = inputs.in_window("inference_requests")
    buckets = inputs.in_window("inference_latency_buckets")
    events = S.slo_events(req, buckets, S.generative_models(history))
    return S.error_budgets(events, history)


def slo_version_events(inputs: Inputs) -> pd.DataFrame:
    """Each SLO's events and bad events per model version for every partition of [start, end)
    (gpu_health.metrics.slo.slo_events by version). A model is generative when it exports a TTFT histogram in
    the window: a version's absent TTFT series is judged by slo_burn on the model, not here."""
    from gpu_health.metrics import slo as S

    req = inputs.in_window("inference_requests")
    buckets = inputs.in_window("inference_latency_buckets")
    return S.slo_events(req, buckets, by_version=True)



def rack_facility(inputs: Inputs) -> pd.DataFrame:
    """Per rack and partition: energy, peak draw against the continuous-load limit, inlet, PSUs and throttled GPUs
    (gpu_health.metrics.facility); empty on a cluster without facility data."""
    from gpu_health.metrics.facility import rack_facility as compute

    facility = inputs.in_window("facility_telemetry")
    gpu = inputs.in_window("gpu_telemetry", columns=["ts", "node_id", "gpu_uuid", "throttle_reasons"]) \
        if len(facility) else None
    return compute(facility, gpu, inputs.start, inputs.end)

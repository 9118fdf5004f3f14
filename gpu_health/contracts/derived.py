"""Pandera contracts of the derived tables (the loss tree, KPI, baseline, facility, alert, SLO, forecast and finance
assets), beside the source tables' in :mod:`gpu_health.contracts.models`.

The catalog (gpu_health/catalog.py) and the storage layer build their schema from these without importing the code
that computes the tables; what a contract checks against (the loss-tree states, the KPI series and their units)
comes from floor 1 (gpu_health/constants.py) or from this package (:mod:`gpu_health.contracts.kpi_catalog`).
"""

import json

import pandas as pd
import pandera.pandas as pa
from pandera.engines import pandas_engine
from pandera.typing import Series

from gpu_health.constants import LOSS_TREE_STATES as STATES
from gpu_health.constants import LOSS_FAMILIES, PARTITION_FREQ, SEVERITIES, SPEND_FAMILIES
from gpu_health.contracts.kpi_catalog import DIMENSIONS, series_units
from gpu_health.contracts.models import ContractModel

_TS = {"dtype_kwargs": {"unit": "ns", "tz": "UTC"}}
Str = pd.StringDtype


class _Partitioned(ContractModel):
    partition_start: Series[pd.DatetimeTZDtype] = pa.Field(description="Start of the 5-minute partition, UTC.", **_TS)


class NodeInventory(_Partitioned):
    """One row per node seen reporting in the partition (the trailing day is the inventory)."""

    region: Series[Str] = pa.Field(description="Region.")
    node_id: Series[Str] = pa.Field(description="Node.")
    sku: Series[Str] = pa.Field(description="GPU model.")
    gpus_seen: Series[int] = pa.Field(ge=0, le=16, description="Distinct GPUs that reported in the partition.")
    driver_version: Series[Str] = pa.Field(description="Driver reported last in the partition.")
    fatal_gpus: Series[int] = pa.Field(ge=0, le=16, description="GPUs with a GPU-fault Xid (XID_GPU_FAULT) or a "
                                       "double-bit ECC error in the partition: the history that lets a GPU's later "
                                       "absence be read as hardware.")

    class Config:
        unique = ["partition_start", "node_id"]


class WorkloadStepStats(_Partitioned):
    """One row per workload signature per partition: healthy minutes and median step-time components."""

    model_type: Series[Str] = pa.Field(description="Model type of the signature.")
    sku: Series[Str] = pa.Field(description="GPU model of the signature.")
    gpus: Series[int] = pa.Field(ge=1, description="GPUs of the job (signature).")
    healthy_minutes: Series[int] = pa.Field(ge=0, description="Job-minutes that counted (healthy, progressing).")
    step_time_s: Series[float] = pa.Field(gt=0, description="Median seconds per step.")
    data_loader_time_s: Series[float] = pa.Field(ge=0, nullable=True, description="Median loader wait per step, s.")
    grad_sync_time_s: Series[float] = pa.Field(ge=0, nullable=True, description="Median gradient sync per step, s.")

    class Config:
        unique = ["partition_start", "model_type", "sku", "gpus"]


class StepTimeBaselines(_Partitioned):
    """One row per signature per partition: the baseline the partition was judged against."""

    model_type: Series[Str] = pa.Field(description="Model type of the signature.")
    sku: Series[Str] = pa.Field(description="GPU model.")
    gpus: Series[int] = pa.Field(ge=1, description="GPUs of the job.")
    step_time_s: Series[float] = pa.Field(gt=0, description="Baseline seconds per step.")
    data_loader_time_s: Series[float] = pa.Field(ge=0, nullable=True, description="Baseline loader wait per step, s.")
    grad_sync_time_s: Series[float] = pa.Field(ge=0, nullable=True, description="Baseline gradient sync per step, s.")
    history_minutes: Series[float] = pa.Field(ge=0, description="Healthy job-minutes behind the baseline.")
    baseline_source: Series[Str] = pa.Field(isin=["history", "cohort"], description="7-day history, or the current window (cold start).")

    class Config:
        unique = ["partition_start", "model_type", "sku", "gpus"]


class GoodputLeaves(_Partitioned):
    """GPU-minutes per loss state at the finest grain the drill-down needs (one row per dimension values x state)."""

    region: Series[Str] = pa.Field(description="Region.")
    node_id: Series[Str] = pa.Field(description="Node ('unseen' for paid GPUs never heard from).")
    sku: Series[Str] = pa.Field(description="GPU model.")
    driver_version: Series[Str] = pa.Field(description="NVIDIA driver of the node.")
    team: Series[Str] = pa.Field(description="Team of the job ('none' unallocated, 'unknown' without metadata).")
    workload_class: Series[Str] = pa.Field(description="interactive | batch | distributed | none | unknown.")
    model_type: Series[Str] = pa.Field(description="Model type of the job.")
    framework_version: Series[Str] = pa.Field(description="Framework of the job.")
    queue: Series[Str] = pa.Field(description="Scheduler queue of the job.")
    state: Series[Str] = pa.Field(isin=STATES, description="Loss-tree state.")
    gpu_minutes: Series[float] = pa.Field(ge=0, description="GPU-minutes in the state.")

    class Config:
        unique = ["partition_start", "region", "node_id", "sku", "driver_version", "team", "workload_class",
                  "model_type", "framework_version", "queue", "state"]


class GoodputStates(_Partitioned):
    """GPU-minutes per loss state by region x SKU x workload class x team; states sum to paid GPU-minutes."""

    region: Series[Str] = pa.Field(description="Region.")
    sku: Series[Str] = pa.Field(description="GPU model.")
    workload_class: Series[Str] = pa.Field(description="interactive | batch | distributed | none | unknown.")
    team: Series[Str] = pa.Field(description="Team ('none' for unallocated GPUs).")
    state: Series[Str] = pa.Field(isin=STATES, description="Loss-tree state.")
    gpu_minutes: Series[float] = pa.Field(ge=0, description="GPU-minutes in the state.")

    class Config:
        unique = ["partition_start", "region", "sku", "workload_class", "team", "state"]


class GoodputNodeStates(_Partitioned):
    """GPU-minutes per loss state per node (hardware drill-down)."""

    region: Series[Str] = pa.Field(description="Region.")
    node_id: Series[Str] = pa.Field(description="Node.")
    sku: Series[Str] = pa.Field(description="GPU model.")
    driver_version: Series[Str] = pa.Field(description="NVIDIA driver.")
    state: Series[Str] = pa.Field(isin=STATES, description="Loss-tree state.")
    gpu_minutes: Series[float] = pa.Field(ge=0, description="GPU-minutes in the state.")

    class Config:
        unique = ["partition_start", "region", "node_id", "sku", "driver_version", "state"]


class JobFailures(_Partitioned):
    """One row per job that failed (failed / node_fail / timeout) in the partition, with the work it threw away."""

    job_id: Series[Str] = pa.Field(description="Job.")
    failed_at: Series[pd.DatetimeTZDtype] = pa.Field(description="Minute of the failure, UTC.", **_TS)
    exit_state: Series[Str] = pa.Field(description="failed | node_fail | timeout.")
    reason: Series[Str] = pa.Field(nullable=True, description="Scheduler's reason.")
    lost_from: Series[pd.DatetimeTZDtype] = pa.Field(description="First minute after the last durable checkpoint.", **_TS)
    gpus: Series[float] = pa.Field(ge=0, description="GPUs the job held.")
    lost_gpu_minutes: Series[float] = pa.Field(ge=0, description="GPU-minutes thrown away since the last checkpoint.")
    lost_in_window: Series[float] = pa.Field(ge=0, description="Part of it inside the failure's own partition (already failure_loss there).")
    region: Series[Str] = pa.Field(description="Region.")
    sku: Series[Str] = pa.Field(description="GPU model.")
    team: Series[Str] = pa.Field(description="Team.")
    workload_class: Series[Str] = pa.Field(description="Workload class.")

    class Config:
        unique = ["partition_start", "job_id"]


class _ClusterGoodputBase(_Partitioned):

    region: Series[Str] = pa.Field(description="Region or * for the cluster.")
    paid_gpu_minutes: Series[float] = pa.Field(ge=0, description="Paid GPU-minutes (capacity x minutes).")
    productive_gpu_minutes: Series[float] = pa.Field(ge=0, description="Productive GPU-minutes.")
    goodput: Series[float] = pa.Field(ge=0, le=1, nullable=True, description="Productive / paid.")

    class Config:
        unique = ["partition_start", "region"]


_SHARES = {f"share_{s}": pa.Field(ge=0, le=1, nullable=True, description=f"Share of paid GPU-minutes in {s}.") for s in STATES}
ClusterGoodput = type("ClusterGoodput", (_ClusterGoodputBase,), {
    "__doc__": "North star, provisional: productive / paid GPU-minutes per partition, per region and overall ('*'), "
               "with each loss state's share.",
    "__module__": __name__,
    "__annotations__": {k: Series[float] for k in _SHARES},
    **_SHARES,
})


class ClusterGoodputDaily(ContractModel):
    """North star, settled: per day and region (and '*'), work thrown away by failures moved back to when it was spent."""

    date: Series[pandas_engine.Date] = pa.Field(description="Day (UTC).")
    region: Series[Str] = pa.Field(description="Region or *.")
    paid_gpu_hours: Series[float] = pa.Field(ge=0, description="Paid GPU-hours.")
    productive_gpu_hours: Series[float] = pa.Field(ge=0, description="Productive GPU-hours after settlement.")
    provisional_goodput: Series[float] = pa.Field(ge=0, le=1, nullable=True, description="Mean of the 5-minute series.")
    settled_goodput: Series[float] = pa.Field(ge=0, le=1, nullable=True, description="After failures are settled.")
    failure_loss_gpu_hours: Series[float] = pa.Field(ge=0, description="Settled failure loss.")
    partitions: Series[int] = pa.Field(ge=0, description="5-minute partitions present (288 = complete day).")

    class Config:
        unique = ["date", "region"]


class WastedSpend(ContractModel):
    """USD by day, region, state, cause family and team: each non-productive state's GPU-hours x that day's blended cost."""

    date: Series[pandas_engine.Date] = pa.Field(description="Day (UTC).")
    region: Series[Str] = pa.Field(description="Region.")
    sku: Series[Str] = pa.Field(description="GPU model.")
    state: Series[Str] = pa.Field(isin=STATES, description="Loss-tree state (productive included for reconciliation).")
    cause_family: Series[Str] = pa.Field(isin=list(SPEND_FAMILIES), description="Cause family of the state (a CauseFamily value; 'productive' for productive time).")
    team: Series[Str] = pa.Field(description="Team ('none' for unallocated capacity).")
    gpu_hours: Series[float] = pa.Field(ge=0, description="GPU-hours in the state (settled).")
    blended_gpu_hour_usd: Series[float] = pa.Field(ge=0, nullable=True, description="That day's blended USD per GPU-hour for region x SKU; null = Finance has no cost row for it (unpriced, not $0).")
    usd: Series[float] = pa.Field(ge=0, nullable=True, description="gpu_hours x blended_gpu_hour_usd (null when unpriced).")

    class Config:
        unique = ["date", "region", "sku", "state", "team"]


class ClusterStatus(_Partitioned):
    """The cluster at a glance per partition: the north star against its baseline, what is open, the KPIs furthest
    from their baselines and the data gaps, as numbers and as the Markdown page an on-call engineer reads first."""

    goodput: Series[float] = pa.Field(ge=0, le=1, nullable=True, description="Cluster goodput (region '*'); null: "
                                      "nothing paid in the partition.")
    goodput_expected: Series[float] = pa.Field(ge=0, le=1, nullable=True, description="Its baseline (kpi_baselines "
                                               "share_productive, cluster-wide); null: no baseline yet.")
    open_pages: Series[int] = pa.Field(ge=0, description="Page-severity alerts open (firing or clearing).")
    open_tickets: Series[int] = pa.Field(ge=0, description="Ticket-severity alerts open (firing or clearing).")
    worst_kpi: Series[Str] = pa.Field(nullable=True, description="The cluster-wide KPI furthest from its baseline "
                                      "(robust z); null: no KPI has a baseline.")
    worst_kpi_z: Series[float] = pa.Field(nullable=True, description="Its distance from the baseline in robust "
                                          "standard deviations (signed: above or below).")
    gap_sources: Series[int] = pa.Field(ge=0, description="Sources written empty for the partition (source_gaps).")
    rejected_rows: Series[int] = pa.Field(ge=0, description="Source rows and files quarantined for the partition "
                                          "(source_rejects).")
    markdown: Series[Str] = pa.Field(description="The status page (Markdown).")

    class Config:
        unique = ["partition_start"]


class Alerts(_Partitioned):
    """Alert snapshots: one row per alert per 5-minute partition in which it was open (latest row = current state)."""

    alert_id: Series[Str] = pa.Field(description="Stable id: one incident = one alert.")
    key: Series[Str] = pa.Field(description="Detector and scope the alert is matched on across partitions.")
    detector: Series[Str] = pa.Field(description="Detector that raised it.")
    status: Series[Str] = pa.Field(isin=["firing", "clearing", "resolved"], description="firing | clearing | resolved.")
    severity: Series[Str] = pa.Field(isin=list(SEVERITIES), description="page | ticket | dashboard.")
    cause_family: Series[Str] = pa.Field(description="hardware | software | scheduling | data_io | network | gaming | planned | missing_data.")
    region: Series[Str] = pa.Field(description="Region (* when several).")
    scope: Series[Str] = pa.Field(description="JSON: region, nodes, team, cohort.")
    summary: Series[Str] = pa.Field(description="What is broken, where.")
    description: Series[Str] = pa.Field(description="Evidence, the deploy it follows, first action.")
    usd_per_hour: Series[float] = pa.Field(ge=0, description="USD per hour burning at the current rate of loss.")
    runbook: Series[Str] = pa.Field(description="Runbook of the cause family.")
    opened_at: Series[pd.DatetimeTZDtype] = pa.Field(description="End of the partition that opened it.", **_TS)
    first_partition_start: Series[pd.DatetimeTZDtype] = pa.Field(description="Start of that partition.", **_TS)
    paged_at: Series[pd.DatetimeTZDtype] = pa.Field(nullable=True, description="End of the partition in which it became a page.", **_TS)
    updated_at: Series[pd.DatetimeTZDtype] = pa.Field(description="Last update.", **_TS)
    resolved_at: Series[pd.DatetimeTZDtype] = pa.Field(nullable=True, description="End of the partition that resolved it.", **_TS)
    follows_change: Series[Str] = pa.Field(nullable=True, description="The change event it follows, if any.")
    clear_count: Series[int] = pa.Field(ge=0, description="Consecutive partitions without a finding.")
    baseline_at_open: Series[float] = pa.Field(nullable=True, description="Baseline the detector judged against when it opened.")
    lost_gpu_minutes: Series[float] = pa.Field(ge=0, description="GPU-minutes lost in scope this partition.")
    margin_at_page: Series[float] = pa.Field(nullable=True, description="How far the evidence cleared the paging bar in the partition it paged, as a factor (observed / bar; log p / log alpha); null: a ticket, or not stated.")

    class Config:
        unique = ["partition_start", "alert_id"]


class ServingSlis(_Partitioned):
    """One row per region x model x version x 5-minute partition: the serving SLIs, each quantile what
    ``histogram_quantile(q, sum by (le) (increase(x_bucket[5m])))`` answers over the partition (metrics/serving.py)."""

    region: Series[Str] = pa.Field(description="Region.")
    model_name: Series[Str] = pa.Field(description="Served model.")
    model_version: Series[Str] = pa.Field(description="Model version.")
    requests: Series[int] = pa.Field(ge=0, description="Requests completed in the partition.")
    errors: Series[int] = pa.Field(ge=0, description="Of them, failed.")
    error_rate: Series[float] = pa.Field(ge=0, le=1, nullable=True, description="errors / requests; null without requests.")
    p50_s: Series[float] = pa.Field(ge=0, nullable=True, description="Median end-to-end latency, seconds (Prometheus histogram_quantile; null without observations).")
    p95_s: Series[float] = pa.Field(ge=0, nullable=True, description="95th percentile latency, seconds.")
    p99_s: Series[float] = pa.Field(ge=0, nullable=True, description="99th percentile latency, seconds.")
    ttft_p99_s: Series[float] = pa.Field(ge=0, nullable=True, description="99th percentile time to first token, seconds; null for a model without a TTFT histogram.")

    class Config:
        unique = ["partition_start", "region", "model_name", "model_version"]


class SloErrorBudgets(_Partitioned):
    """One row per SLO x region x model x 5-minute partition: the SLO's events, bad events and error budget remaining
    over its rolling window (the SLO catalogue: gpu_health/metrics/slo_catalog.py; docs/slos.md)."""

    slo: Series[Str] = pa.Field(description="SLO name in the catalogue.")
    region: Series[Str] = pa.Field(description="Region.")
    model_name: Series[Str] = pa.Field(description="Served model (all its versions).")
    objective: Series[float] = pa.Field(gt=0, lt=1, description="Share of good events the SLO promises.")
    total_events: Series[float] = pa.Field(ge=0, nullable=True, description="Events in the partition (requests, or observations of the SLO's histogram); null = the SLI's series is absent.")
    bad_events: Series[float] = pa.Field(ge=0, nullable=True, description="Of them, bad (failed, or over the latency threshold); null = absent.")
    interpolated: Series[bool] = pa.Field(description="The threshold is no bucket bound: bad_events is interpolated linearly within the bucket, an estimate, not a count.")
    window_total_events: Series[float] = pa.Field(ge=0, description="Events over the SLO's rolling window up to this partition.")
    window_bad_events: Series[float] = pa.Field(ge=0, description="Bad events over the rolling window.")
    error_budget_remaining: Series[float] = pa.Field(le=1, nullable=True, description="1 - window bad / (budget x window events): 1 untouched, 0 spent, negative overspent; null without events.")

    class Config:
        unique = ["partition_start", "slo", "region", "model_name"]


class SloVersionEvents(_Partitioned):
    """One row per SLO x region x model x version x 5-minute partition: the SLO's events and bad events of each model
    version (slo_error_budgets' counts split by version): which version spends the budget, what the release_regression
    detector judges a new version by (gpu_health/metrics/slo.py)."""

    slo: Series[Str] = pa.Field(description="SLO name in the catalogue.")
    region: Series[Str] = pa.Field(description="Region.")
    model_name: Series[Str] = pa.Field(description="Served model.")
    model_version: Series[Str] = pa.Field(description="Model version.")
    objective: Series[float] = pa.Field(gt=0, lt=1, description="Share of good events the SLO promises.")
    total_events: Series[float] = pa.Field(ge=0, nullable=True, description="Events of the version in the partition; null = the SLI's series is absent.")
    bad_events: Series[float] = pa.Field(ge=0, nullable=True, description="Of them, bad (failed, or over the latency threshold); null = absent.")
    interpolated: Series[bool] = pa.Field(description="The threshold is no bucket bound: bad_events is interpolated linearly within the bucket.")

    class Config:
        unique = ["partition_start", "slo", "region", "model_name", "model_version"]


class CapacityDemandDaily(ContractModel):
    """GPU-hour demand per day x region x SKU x workload class: allocated plus waiting (metrics/forecast.py)."""

    date: Series[pandas_engine.Date] = pa.Field(description="Day (UTC).")
    region: Series[Str] = pa.Field(description="Region.")
    sku: Series[Str] = pa.Field(description="GPU model.")
    workload_class: Series[Str] = pa.Field(description="interactive | batch | distributed | unknown (none: idle_blocked with no queue seen).")
    allocated_gpu_hours: Series[float] = pa.Field(ge=0, description="GPU-hours in every allocated loss-tree state.")
    idle_blocked_gpu_hours: Series[float] = pa.Field(ge=0, description="idle_blocked GPU-hours, spread over the waiting classes.")
    backlog_gpu_hours: Series[float] = pa.Field(ge=0, description="GPU-hours requested by queued jobs (submitted, not started).")
    demand_gpu_hours: Series[float] = pa.Field(ge=0, description="allocated + max(backlog, idle_blocked).")

    class Config:
        unique = ["date", "region", "sku", "workload_class"]


class CapacityForecast(ContractModel):
    """Demand forecast made on a day from the history up to it: per region x SKU x workload class ('*' = all
    classes, forecast as one series) x horizon day, p10 / p50 / p90 GPU-hours."""

    date: Series[pandas_engine.Date] = pa.Field(description="Day the forecast was made (history up to its end).")
    region: Series[Str] = pa.Field(description="Region.")
    sku: Series[Str] = pa.Field(description="GPU model.")
    workload_class: Series[Str] = pa.Field(description="Workload class, or * for the region x SKU total.")
    horizon_days: Series[int] = pa.Field(ge=1, le=84, description="Days ahead (1 = the next day).")
    target_date: Series[pandas_engine.Date] = pa.Field(description="Day forecast.")
    method: Series[Str] = pa.Field(isin=["seasonal_naive", "dow_level", "dow_trend", "snaive_trend_mean"],
                                   description="Method chosen by backtest.")
    history_days: Series[int] = pa.Field(ge=1, description="Days of history the forecast rests on.")
    p10_gpu_hours: Series[float] = pa.Field(ge=0, nullable=True, description="10th percentile of demand; null = no past errors to take it from (under two weeks of history).")
    p50_gpu_hours: Series[float] = pa.Field(ge=0, description="Median (point forecast).")
    p90_gpu_hours: Series[float] = pa.Field(ge=0, nullable=True, description="90th percentile of demand; null as p10.")
    selection: Series[Str] = pa.Field(isin=["backtest", "seasonal_naive_fallback", "too_short", "given"], nullable=True,
                                      description="Why the method: it beat seasonal-naive on the series' backtest; nothing did (seasonal-naive stands); the history is too short to choose (seasonal-naive). Null only on rows a warehouse held before the column existed.")
    mase_ratio: Series[float] = pa.Field(ge=0, nullable=True, description="The method's backtest MASE / seasonal-naive's on the series' history (1 on a fallback; null when too short).")
    p025_gpu_hours: Series[float] = pa.Field(ge=0, nullable=True, description="2.5th percentile of demand (the 95 % interval's lower bound); null as p10.")
    p975_gpu_hours: Series[float] = pa.Field(ge=0, nullable=True, description="97.5th percentile of demand; null as p10.")

    class Config:
        unique = ["date", "region", "sku", "workload_class", "horizon_days"]


class CapacityHeadroom(ContractModel):
    """Per day x region x SKU: installed GPUs against the forecast's p90, when demand runs out of them, and the
    reserved mix that would have cost least over the last 30 days and that the next 30 days' forecast implies."""

    date: Series[pandas_engine.Date] = pa.Field(description="Day the forecast was made.")
    region: Series[Str] = pa.Field(description="Region.")
    sku: Series[Str] = pa.Field(description="GPU model.")
    capacity_gpus: Series[int] = pa.Field(ge=0, description="Installed GPUs (cost_capacity).")
    quantile: Series[Str] = pa.Field(isin=["p90", "p50"], description="Forecast quantile the headroom is stated at: p90 "
                                     "(short of GPUs on at most 1 day in 10), p50 while the forecast has no interval yet.")
    peak_demand_gpus_28d: Series[float] = pa.Field(ge=0, nullable=True, description="Peak daily demand at the stated quantile over the next 28 days, GPUs (GPU-hours / 24).")
    headroom_gpus_28d: Series[float] = pa.Field(nullable=True, description="capacity_gpus - peak_demand_gpus_28d (negative: short).")
    run_out_date: Series[pandas_engine.Date] = pa.Field(nullable=True, description="First day within 84 days whose demand at the stated quantile exceeds capacity; null = none.")
    run_out_date_p50: Series[pandas_engine.Date] = pa.Field(nullable=True, description="The same at the median.")
    run_out_date_p10: Series[pandas_engine.Date] = pa.Field(nullable=True, description="The same at the 10th percentile: the latest run-out the 80 % interval allows (null: not within 12 weeks, or no interval yet).")
    reserved_gpus: Series[int] = pa.Field(ge=0, description="Reserved GPUs today (cost_capacity).")
    reserved_gpu_hour_usd: Series[float] = pa.Field(ge=0, description="Reserved USD per GPU-hour today.")
    on_demand_gpu_hour_usd: Series[float] = pa.Field(ge=0, description="On-demand USD per GPU-hour today.")
    demand_days_30d: Series[int] = pa.Field(ge=0, description="Days of demand history in the last 30.")
    cost_30d_usd: Series[float] = pa.Field(ge=0, description="Last 30 days' demand served by today's reservation + on demand.")
    best_reserved_gpus_30d: Series[int] = pa.Field(ge=0, description="Reservation that would have served the last 30 days cheapest.")
    best_cost_30d_usd: Series[float] = pa.Field(ge=0, description="Its cost.")
    forecast_best_reserved_gpus: Series[int] = pa.Field(ge=0, nullable=True, description="Cheapest reservation for the next 30 days' p50 forecast.")
    forecast_cost_usd: Series[float] = pa.Field(ge=0, nullable=True, description="Next 30 days' p50 demand at today's reservation.")
    forecast_best_cost_usd: Series[float] = pa.Field(ge=0, nullable=True, description="At the cheapest reservation.")

    class Config:
        unique = ["date", "region", "sku"]

# --- KPIs and their baselines -----------------------------------------------------------------------------------------
# a kpi_values row's status: a value, a value from fewer fields than it needs, or none
STATUSES = ["ok", "degraded", "no_data"]
# every series the KPI catalog defines -> its unit (a kpi_values row's kpi and unit are checked against it)
SERIES_UNITS = series_units()
# the dimensions a kpi_baselines series is sliced by, and the rules a baseline comes from
SLICE = ["region", "sku", "workload_class", "team"]
METHODS = ["hour_of_week", "hour_of_day", "trailing", "none"]


class KpiValues(ContractModel):
    """One row per KPI series x dimension slice x 5-minute partition (see gpu_health.metrics.kpi_catalog)."""

    partition_start: Series[pd.DatetimeTZDtype] = pa.Field(
        description="Start of the 5-minute partition, UTC.", dtype_kwargs={"unit": "ns", "tz": "UTC"})
    kpi: Series[pd.StringDtype] = pa.Field(
        isin=list(SERIES_UNITS), description="Series: a catalog KPI name, or <kpi>.<component>.")
    region: Series[pd.StringDtype] = pa.Field(description="Region; '*' when the KPI is not sliced by region.")
    sku: Series[pd.StringDtype] = pa.Field(description="GPU model; '*' when not sliced by SKU.")
    workload_class: Series[pd.StringDtype] = pa.Field(
        description="interactive | batch | distributed | unknown; '*' when not sliced by class.")
    team: Series[pd.StringDtype] = pa.Field(description="Team ('unknown' without metadata); '*' when not sliced by team.")
    value: Series[float] = pa.Field(nullable=True, description="The KPI value in `unit`; NaN unless status is ok.")
    numerator: Series[float] = pa.Field(
        nullable=True, description="Additive numerator of a ratio series (NaN for quantile series).")
    denominator: Series[float] = pa.Field(
        ge=0, nullable=True, description="Additive denominator of a ratio series (number of observations for a quantile).")
    unit: Series[pd.StringDtype] = pa.Field(description="Unit of value (ratio, s, gpus, usd per productive gpu-hour, ...).")
    status: Series[pd.StringDtype] = pa.Field(isin=STATUSES, description="ok | degraded (a needed field is missing) | no_data.")

    class Config:
        unique = ["partition_start", "kpi", *DIMENSIONS]

    @pa.dataframe_check(name="value_iff_ok")
    def value_iff_ok(cls, df: pd.DataFrame) -> Series[bool]:
        return (df["status"] == "ok") == df["value"].notna()

    @pa.dataframe_check(name="partition_start_aligned_5min")
    def partition_start_aligned_5min(cls, df: pd.DataFrame) -> Series[bool]:
        return df["partition_start"] == df["partition_start"].dt.floor(PARTITION_FREQ)

    @pa.dataframe_check(name="unit_matches_series")
    def unit_matches_series(cls, df: pd.DataFrame) -> Series[bool]:
        return df["unit"].astype(object) == df["kpi"].astype(object).map(SERIES_UNITS)


class KpiBaselines(ContractModel):
    """One row per 5-minute partition x series (KPI series or loss-state share) x slice: what it is judged against."""

    partition_start: Series[pd.DatetimeTZDtype] = pa.Field(
        description="Start of the 5-minute partition judged, UTC.", dtype_kwargs={"unit": "ns", "tz": "UTC"})
    series: Series[pd.StringDtype] = pa.Field(
        description="A kpi_values series (<kpi> or <kpi>.<component>) or share_<state> of the loss tree.")
    region: Series[pd.StringDtype] = pa.Field(description="Region; '*' when the series is not sliced by region.")
    sku: Series[pd.StringDtype] = pa.Field(description="GPU model; '*' when not sliced by SKU.")
    workload_class: Series[pd.StringDtype] = pa.Field(description="Workload class; '*' when not sliced by class.")
    team: Series[pd.StringDtype] = pa.Field(description="Team; '*' when not sliced by team (always for shares).")
    expected: Series[float] = pa.Field(
        nullable=True, description="Median of the samples, in the series' unit; NaN for method none.")
    mad: Series[float] = pa.Field(
        ge=0, nullable=True, description="Median absolute deviation of the samples (unscaled), in the series' unit.")
    q10: Series[float] = pa.Field(
        nullable=True, description="10% quantile of the samples (linear interpolation), in the series' unit.")
    q90: Series[float] = pa.Field(
        nullable=True, description="90% quantile of the samples (linear interpolation), in the series' unit.")
    n_samples: Series[int] = pa.Field(ge=0, description="Past partitions the statistics are computed from.")
    method: Series[pd.StringDtype] = pa.Field(
        isin=METHODS, description="hour_of_week | hour_of_day | trailing (cold start) | none (no baseline).")

    class Config:
        unique = ["partition_start", "series", *SLICE]

    @pa.dataframe_check(name="statistics_iff_baseline")
    def statistics_iff_baseline(cls, df: pd.DataFrame) -> Series[bool]:
        has = df["method"] != "none"
        return (has == df["expected"].notna()) & (has == (df["n_samples"] > 0))

    @pa.dataframe_check(name="quantiles_ordered")
    def quantiles_ordered(cls, df: pd.DataFrame) -> Series[bool]:
        tol = 1e-9 * (1 + df["expected"].abs())
        return df["expected"].isna() | ((df["q10"] <= df["expected"] + tol) & (df["expected"] <= df["q90"] + tol))

    @pa.dataframe_check(name="partition_start_aligned_5min")
    def partition_start_aligned_5min(cls, df: pd.DataFrame) -> Series[bool]:
        return df["partition_start"] == df["partition_start"].dt.floor(PARTITION_FREQ)


# --- facility -------------------------------------------------------------------------------------------------------

class RackFacility(ContractModel):
    """One row per rack per 5-minute partition: energy, peak draw against the continuous-load limit, inlet, PSUs
    and the rack's GPUs throttled for power or heat (metrics/facility.py)."""

    partition_start: Series[pd.DatetimeTZDtype] = pa.Field(description="Start of the 5-minute partition, UTC.", **_TS)
    region: Series[pd.StringDtype] = pa.Field(description="Region (hall).")
    rack_id: Series[pd.StringDtype] = pa.Field(description="Rack.")
    minutes: Series[int] = pa.Field(ge=0, le=5, description="Minutes the rack reported in the partition.")
    energy_kwh: Series[float] = pa.Field(ge=0, description="Rack energy over its reported minutes, kWh (sum of power_kw / 60).")
    peak_power_kw: Series[float] = pa.Field(ge=0, description="Highest minute draw, kW.")
    power_budget_kw: Series[float] = pa.Field(gt=0, description="The rack's rating in the partition (its lowest, when it changed), kW.")
    headroom_kw: Series[float] = pa.Field(description="0.8 x power_budget_kw - peak_power_kw (NEC continuous-load limit); negative = over it.")
    headroom_share: Series[float] = pa.Field(description="headroom_kw / (0.8 x power_budget_kw).")
    inlet_max_c: Series[float] = pa.Field(nullable=True, description="Hottest minute's inlet, C; null = not exported.")
    psus_failed: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True, description="Most PSUs failed in any minute; null = not exported.")
    gpus: Series[int] = pa.Field(ge=0, description="GPUs of the rack's nodes that reported in the partition.")
    gpus_throttled_power: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True, description="Of them, GPUs with a power clock-event bit (0x4 | 0x80) in any minute; null = no GPU of the rack reports the bitmask.")
    gpus_throttled_thermal: Series[pd.Int64Dtype] = pa.Field(ge=0, nullable=True, description="GPUs with a thermal clock-event bit (0x20 | 0x40) in any minute; null as above.")

    class Config:
        unique = ["partition_start", "region", "rack_id"]


class GoodputDecomposition(ContractModel):
    """One row per ranked cause of a window's goodput change against its baseline."""

    partition_start: Series[pd.DatetimeTZDtype] = pa.Field(
        description="Start of the window decomposed, UTC.", dtype_kwargs={"unit": "ns", "tz": "UTC"})
    window_end: Series[pd.DatetimeTZDtype] = pa.Field(
        description="End of the window (exclusive), UTC.", dtype_kwargs={"unit": "ns", "tz": "UTC"})
    rank: Series[int] = pa.Field(
        ge=1, description="1 = the named cause that moved the most GPU-minutes; spread rests ({}) after them.")
    state: Series[pd.StringDtype] = pa.Field(isin=[s for s in STATES if s != "productive"], description="Loss-tree state that grew.")
    cause_family: Series[pd.StringDtype] = pa.Field(isin=list(LOSS_FAMILIES), description="Cause family (see decompose's table).")
    share_of_drop: Series[float] = pa.Field(
        nullable=True, description="The cause's change in GPU-minutes / the drop in productive GPU-minutes, signed "
                                   "(NaN when goodput did not move).")
    elements: Series[pd.StringDtype] = pa.Field(
        description="JSON object of the dimension values that carry it ({} = the rest of the state, spread).")
    explanatory_power: Series[float] = pa.Field(description="Share of the state's change it carries, signed.")
    surprise: Series[float] = pa.Field(ge=0, description="Jensen-Shannon surprise of the set (0 for the spread rest).")
    actual_gpu_minutes: Series[float] = pa.Field(ge=0, description="GPU-minutes of the state in the set, window.")
    expected_gpu_minutes: Series[float] = pa.Field(ge=0, description="Expected GPU-minutes (baseline scaled to paid).")
    evidence: Series[pd.StringDtype] = pa.Field(description="The numbers behind it, in words.")

    class Config:
        unique = ["partition_start", "window_end", "rank"]

    @pa.dataframe_check(name="window_not_empty")
    def window_not_empty(cls, df: pd.DataFrame) -> Series[bool]:
        return df["window_end"] > df["partition_start"]

    @pa.dataframe_check(name="elements_json_object")
    def elements_json_object(cls, df: pd.DataFrame) -> Series[bool]:
        return df["elements"].map(lambda text: isinstance(json.loads(text), dict))

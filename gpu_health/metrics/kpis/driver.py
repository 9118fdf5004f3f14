"""The driver: :func:`compute_kpis` runs every KPI family over one context and finishes their rows
(:func:`_finish`); :func:`pending_jobs` carries the backlog from window to window."""

import numpy as np
import pandas as pd

from gpu_health.contracts.derived import SERIES_UNITS, KpiValues
from gpu_health.metrics.facility import kpi_rows as facility_kpi_rows
from gpu_health.metrics.kpi_catalog import CATALOG, DIMENSIONS
from gpu_health.metrics.kpis.context import MIN_COVERAGE, OUT_COLUMNS, STAR, _Context, _spells, _utc
from gpu_health.metrics.kpis.failures import _job_failure_rate
from gpu_health.metrics.kpis.hardware import _gpus_throttled, _hw_fault_rate
from gpu_health.metrics.kpis.inventory import _cost_per_productive_gpu_hour, _inventory_excess
from gpu_health.metrics.kpis.network import _comm_health
from gpu_health.metrics.kpis.scheduling import _fragmentation, _queue_wait_p95, _sla_attainment
from gpu_health.metrics.kpis.training import _step_time_inflation
from gpu_health.metrics.kpis.utilization import _allocation_rate, _gaming_guardrails


def pending_jobs(scheduler_events: pd.DataFrame, at, pending: pd.DataFrame | None = None) -> pd.DataFrame:
    """The backlog at ``at``: jobs submitted (or requeued) before it and not started or ended by then.

    Pass the previous backlog as ``pending`` to carry it from window to window;
    the result (job_id, submitted_at, gpus) is what :func:`compute_kpis` takes as
    ``pending`` for a window starting at ``at``.
    """
    at = _utc(at)
    spells = _spells(scheduler_events, pending)
    open_now = spells[(spells["open"] <= at) & (spells["close"] > at)]
    out = open_now.rename(columns={"open": "submitted_at"})[["job_id", "submitted_at", "gpus"]]
    return out.sort_values(["submitted_at", "job_id"]).drop_duplicates("job_id", keep="last").reset_index(drop=True)


def compute_kpis(
    frames: dict[str, pd.DataFrame],
    goodput_states: pd.DataFrame,
    *,
    start,
    end,
    cost: pd.DataFrame | None = None,
    job_metadata_lookup: pd.DataFrame | None = None,
    step_baseline: pd.DataFrame | None = None,
    pending: pd.DataFrame | None = None,
    inventory: list | None = None,
) -> pd.DataFrame:
    """The ``kpi_values`` rows of ``[start, end)``.

    ``frames``: source frames by table name (contract columns; a missing table
    counts as empty). ``goodput_states``: the loss tree's GPU-minutes per
    partition_start x region x sku x workload_class x team x state.
    ``cost``: cost_capacity rows of the window's days. ``job_metadata_lookup``:
    job_metadata rows of jobs submitted before the window. ``step_baseline``:
    model_type, sku, gpus, step_time_s, data_loader_time_s, grad_sync_time_s
    (optionally per partition_start). ``pending``: the backlog at ``start``
    (job_id, submitted_at, gpus, optionally workload_class; see
    :func:`pending_jobs`) -- or an empty frame when ``scheduler_events`` already
    reach back far enough (hours) to show every job still waiting. ``None``
    means "unknown", and fragmentation is then degraded.
    """
    start, end = _utc(start), _utc(end)
    ctx = _Context(frames, goodput_states, start, end, cost, job_metadata_lookup, step_baseline, pending, inventory)
    raw = [
        _allocation_rate(ctx),
        _job_failure_rate(ctx),
        _queue_wait_p95(ctx),
        _sla_attainment(ctx),
        _step_time_inflation(ctx),
        _hw_fault_rate(ctx),
        _comm_health(ctx),
        _fragmentation(ctx),
        _cost_per_productive_gpu_hour(ctx),
        _inventory_excess(ctx),
        _gaming_guardrails(ctx),
        _gpus_throttled(ctx),
        *facility_kpi_rows(frames.get("facility_telemetry"), start, end),
    ]
    return _finish([r for r in raw if len(r)], ctx)


def _slices(r: pd.DataFrame, ctx: _Context) -> pd.DataFrame:
    """p x kpi x dimension values to report: in each partition those seen in it, plus its inventory's region x
    SKU for KPIs sliced by both (a silent region x SKU shows as no_data), and a ``*`` row for a series with
    neither. Each partition's slices come from its own rows, never its neighbours' (a partition run alone by
    the sensor and the same partition in a day's run report the same rows)."""
    seen = r[["p", "kpi", *DIMENSIONS]].drop_duplicates()
    inv = ctx.inventory
    out = [seen]
    for kpi in CATALOG:
        dims = list(kpi.dimensions)
        rest = [d for d in dims if d not in ("region", "sku")]
        for series in kpi.series():
            mine = seen[seen["kpi"] == series]
            extra = inv.iloc[0:0]
            if {"region", "sku"} <= set(dims) and len(inv):
                extra = mine[["p", *rest]].drop_duplicates().merge(inv, on="p") if rest else inv
            have = pd.DatetimeIndex(pd.concat([mine["p"], extra["p"]]).unique())
            star = pd.DataFrame({"p": ctx.partitions[~ctx.partitions.isin(have)]})
            for part in (extra, star):
                if len(part):
                    out.append(part.assign(kpi=series).reindex(columns=["p", "kpi", *DIMENSIONS], fill_value=STAR))
    return pd.concat([x for x in out if len(x)] or out[:1], ignore_index=True).drop_duplicates()


def _finish(raw: list[pd.DataFrame], ctx: _Context) -> pd.DataFrame:
    r = pd.concat(raw, ignore_index=True) if raw else pd.DataFrame(columns=["p", "kpi"])
    for col in DIMENSIONS:
        if col not in r:
            r[col] = STAR
        r[col] = r[col].astype(object).fillna(STAR)
    for col in ("numerator", "denominator", "n", "covered", "value"):
        if col not in r:
            r[col] = np.nan
    r["covered"] = r["covered"].fillna(r["n"])
    r = r[["p", "kpi", *DIMENSIONS, "numerator", "denominator", "n", "covered", "value"]]
    grid = _slices(r, ctx)
    f = grid.merge(r, on=["p", "kpi", *DIMENSIONS], how="left")
    n = f["n"].fillna(0.0).to_numpy(dtype=float)
    covered = f["covered"].fillna(0.0).to_numpy(dtype=float)
    num = f["numerator"].to_numpy(dtype=float)
    den = f["denominator"].to_numpy(dtype=float)
    quant = f["value"].to_numpy(dtype=float)
    no_data = n <= 0
    degraded = ~no_data & (covered < MIN_COVERAGE * n)
    no_data |= ~degraded & ~(np.nan_to_num(den) > 0)
    ok = ~no_data & ~degraded
    is_q = f["kpi"].to_numpy() == "queue_wait_p95"
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(is_q, quant, num / den)
    f["value"] = np.where(ok, value, np.nan)
    f["status"] = np.select([ok, degraded], ["ok", "degraded"], "no_data")
    # nothing observed: the counts are truly zero (a degraded row keeps what was measured)
    f["numerator"] = np.where(n <= 0, np.where(is_q, np.nan, 0.0), num)
    f["denominator"] = np.where(n <= 0, 0.0, den)
    f["unit"] = f["kpi"].map(SERIES_UNITS)
    f = f.rename(columns={"p": "partition_start"})[OUT_COLUMNS]
    f = f.sort_values(["partition_start", "kpi", *DIMENSIONS], kind="stable").reset_index(drop=True)
    return KpiValues.to_schema().coerce_dtype(f)

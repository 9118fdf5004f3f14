"""Bodies of the capacity steps (capacity_demand_daily, capacity_forecast, capacity_headroom) over one UTC day.

No warehouse here: each body reads what its step declares (gpu_health/steps/registry.py) through the
:class:`~gpu_health.steps.resolve.Inputs` it is given, a day at a time (``inputs.at``), and reads every table it
declares, even when an earlier one came back empty; the logic is in :mod:`gpu_health.metrics.forecast`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpu_health.metrics import forecast as F
from gpu_health.steps.resolve import Inputs

DAY = pd.Timedelta(days=1)
# a job that waited longer than this before the day started is not seen (its submitted event is not read): queues
# are placed within minutes to hours (the simulator's caps are 30 min - 6 h); a day is the bar of a queue gone stuck
BACKLOG_LOOKBACK = DAY

# the history a forecast rests on: 26 weeks hold FIT_DAYS for the fit plus the 12-week horizon's past errors
FORECAST_HISTORY = pd.Timedelta(days=182)
# Finance's review window for the reserved mix: one monthly bill
RESERVED_WINDOW = pd.Timedelta(days=30)
ALL_CLASSES = "*"


# the scheduler events' columns the demand reads (job_places, backlog_gpu_hours): two days of events without their
# event ids, reasons and the rest (an id per row is a string made per row on reading)
SCHED_COLUMNS = ["ts", "job_id", "event", "queue", "gpus", "node_ids"]


def demand_day(inputs: Inputs) -> pd.DataFrame:
    """capacity_demand_daily rows of the window's one day (its job metadata as far back as the step declares: the
    loss tree's META_LOOKBACK)."""
    day_start, day_end = inputs.start, inputs.end
    states = inputs.in_window("goodput_states")
    sched = inputs.window("scheduler_events", columns=SCHED_COLUMNS)
    meta = inputs.window("job_metadata", columns=["job_id", "workload_class"])
    inv = inputs.in_window("node_inventory", columns=["node_id", "region", "sku"])
    inv = inv.drop_duplicates("node_id")
    classes = meta.drop_duplicates("job_id").set_index("job_id")["workload_class"] if len(meta) else None
    place = F.job_places(sched, dict(zip(inv["node_id"], inv["sku"])), dict(zip(inv["node_id"], inv["region"])), classes)
    backlog = F.backlog_gpu_hours(sched, day_start, day_end, place)
    return F.daily_demand(F.allocated_daily(states), backlog, day_start)


def demand(inputs: Inputs) -> pd.DataFrame:
    frames = [demand_day(inputs.at(d, d + DAY)) for d in inputs.period.days()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def day_partitions(inputs: Inputs) -> pd.DataFrame:
    """The 5-minute partitions of the loss tree the demand of each day of the window stands on (its check)."""
    counts = [inputs.at(d, d + DAY).in_window("goodput_states", columns=["partition_start"])["partition_start"].nunique()
              for d in inputs.period.days()]
    return pd.DataFrame({"date": [d.date() for d in inputs.period.days()], "partitions": counts})


def _series(hist: pd.DataFrame) -> dict[tuple, pd.Series]:
    """(region, sku, class) -> daily demand series, plus (region, sku, '*') for the region x SKU total."""
    if hist.empty:
        return {}
    h = hist.assign(date=pd.to_datetime(hist["date"]))
    out = {}
    for keys, grp in h.groupby(["region", "sku", "workload_class"]):
        out[keys] = grp.groupby("date")["demand_gpu_hours"].sum()
    for (r, s), grp in h.groupby(["region", "sku"]):
        out[(r, s, ALL_CLASSES)] = grp.groupby("date")["demand_gpu_hours"].sum()
    return out


def forecast_day(inputs: Inputs) -> pd.DataFrame:
    """capacity_forecast rows made at the end of the window's day from the history up to it."""
    hist = inputs.window("capacity_demand_daily")
    day = inputs.start.tz_localize(None).normalize()
    rows = []
    for (region, sku, wc), y in _series(hist).items():
        y = y[y.index <= day]
        if y.empty or y.index.max() < day - pd.Timedelta(days=F.SEASON):
            continue  # nothing for a week: a series that stopped is not forecast from stale history
        # days without a row inside the span are zero demand (the day ran and nobody asked)
        y = y.reindex(pd.date_range(y.index.min(), day, freq="D"), fill_value=0.0)
        f = F.forecast(y, horizon=F.HORIZON_DAYS)
        rows.append(pd.DataFrame({
            "date": day.date(), "region": region, "sku": sku, "workload_class": wc,
            "horizon_days": f["horizon_days"].to_numpy(), "target_date": f["date"].dt.date.to_numpy(),
            "method": f["method"].to_numpy(), "history_days": len(y),
            "p10_gpu_hours": f["p10"].to_numpy(), "p50_gpu_hours": f["p50"].to_numpy(),
            "p90_gpu_hours": f["p90"].to_numpy(), "selection": f["selection"].to_numpy(),
            "mase_ratio": f["mase_ratio"].to_numpy(dtype=float), "p025_gpu_hours": f["p025"].to_numpy(),
            "p975_gpu_hours": f["p975"].to_numpy()}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def forecasts(inputs: Inputs) -> pd.DataFrame:
    days = inputs.period.days()
    return pd.concat([forecast_day(inputs.at(d, d + DAY)) for d in days], ignore_index=True) if len(days) \
        else pd.DataFrame()


def headroom_day(inputs: Inputs) -> pd.DataFrame:
    """capacity_headroom rows of the window's one day: per region x SKU of cost_capacity (the demand of the
    RESERVED_WINDOW up to the day, as the step declares it)."""
    fc = inputs.in_window("capacity_forecast")
    cost = inputs.in_window("cost_capacity")
    hist = inputs.window("capacity_demand_daily")
    day = inputs.start.tz_localize(None).normalize()
    rows = []
    for c in cost.itertuples(index=False):
        f = fc[(fc["region"] == c.region) & (fc["sku"] == c.sku) & (fc["workload_class"] == ALL_CLASSES)] \
            if len(fc) else fc
        f = f.sort_values("horizon_days")
        p50 = pd.Series(f["p50_gpu_hours"].to_numpy(dtype=float), index=f["target_date"].to_numpy())
        p90 = pd.Series(f["p90_gpu_hours"].to_numpy(dtype=float), index=p50.index)
        # the latest run-out the 80 % interval allows: demand at its 10th percentile (null: not within 12 weeks, or
        # no interval yet); [run_out_date at p90, this] is the run-out's interval
        p10 = pd.Series(f["p10_gpu_hours"].to_numpy(dtype=float), index=p50.index)
        # the headroom is stated at p90 (short of GPUs on at most one day in ten): a plan that runs out at the
        # median runs out every other week; while the forecast has no interval yet, at p50, and says so
        quantile = "p90" if len(p90) and p90.notna().all() else "p50"
        stated = p90 if quantile == "p90" else p50
        near = stated[f["horizon_days"].to_numpy() <= 28]
        peak = float(near.max()) / 24.0 if len(near) else np.nan
        h = hist[(hist["region"] == c.region) & (hist["sku"] == c.sku)] if len(hist) else hist
        past = h.groupby("date")["demand_gpu_hours"].sum().to_numpy() if len(h) else np.empty(0)
        best_r, best_cost = F.cheapest_reserved(past, c.reserved_gpu_hour_usd, c.on_demand_gpu_hour_usd)
        ahead = f[f["horizon_days"] <= 30]["p50_gpu_hours"].to_numpy()
        fr, fcost = F.cheapest_reserved(ahead, c.reserved_gpu_hour_usd, c.on_demand_gpu_hour_usd) if len(ahead) \
            else (None, None)
        rows.append({
            "date": day.date(), "region": c.region, "sku": c.sku, "capacity_gpus": int(c.capacity_gpus),
            "quantile": quantile, "peak_demand_gpus_28d": peak,
            "headroom_gpus_28d": c.capacity_gpus - peak if np.isfinite(peak) else np.nan,
            "run_out_date": F.run_out(c.capacity_gpus, stated), "run_out_date_p50": F.run_out(c.capacity_gpus, p50),
            "run_out_date_p10": F.run_out(c.capacity_gpus, p10) if quantile == "p90" else None,
            "reserved_gpus": int(c.reserved_gpus), "reserved_gpu_hour_usd": float(c.reserved_gpu_hour_usd),
            "on_demand_gpu_hour_usd": float(c.on_demand_gpu_hour_usd), "demand_days_30d": int(len(past)),
            "cost_30d_usd": F.reserved_cost(past, c.reserved_gpus, c.reserved_gpu_hour_usd, c.on_demand_gpu_hour_usd),
            "best_reserved_gpus_30d": best_r, "best_cost_30d_usd": best_cost,
            "forecast_best_reserved_gpus": fr,
            "forecast_cost_usd": F.reserved_cost(ahead, c.reserved_gpus, c.reserved_gpu_hour_usd,
                                                 c.on_demand_gpu_hour_usd) if len(ahead) else None,
            "forecast_best_cost_usd": fcost})
    out = pd.DataFrame(rows)
    if len(out):
        out["forecast_best_reserved_gpus"] = out["forecast_best_reserved_gpus"].astype("Int64")
    return out


def headrooms(inputs: Inputs) -> pd.DataFrame:
    days = inputs.period.days()
    return pd.concat([headroom_day(inputs.at(d, d + DAY)) for d in days], ignore_index=True) if len(days) \
        else pd.DataFrame()

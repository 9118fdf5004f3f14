"""Daily settlement of the loss tree and what it cost (pure pandas).

The 5-minute goodput is provisional: a failure is known only when it happens,
so work it throws away was counted productive in the partitions where it was
spent (only the failure's own partition counted it as ``failure_loss``). The
daily settled view moves the rest of each failure's lost GPU-minutes (since its
last durable checkpoint) from ``productive`` back to ``failure_loss`` on the day
the work was spent, within the same region x SKU x workload class x team. GPU-
minutes are conserved: only the state changes. A day is final once the next
day's failures are in (the daily job re-materializes yesterday).

Money: each day's blended USD per GPU-hour for a region x SKU is what Finance
paid that day -- reserved GPUs x 24 h x reserved rate + burst GPU-hours bought x
on-demand rate -- divided by the paid GPU-hours (installed capacity x 24 h).
Every state's GPU-hours x that rate is its cost; the non-productive states are
wasted spend.
"""

import numpy as np
import pandas as pd

from gpu_health.constants import MINUTE, PARTITION, PARTITION_FREQ
from gpu_health.metrics.goodput import STATE_FAMILY, STATES

DIMS = ["region", "sku", "workload_class", "team"]


def settle(states: pd.DataFrame, failures: pd.DataFrame, day_start, day_end) -> tuple[pd.DataFrame, float]:
    """Settled GPU-minutes of one day by DIMS x state, and the GPU-minutes moved.

    ``states``: goodput_states rows of the day; ``failures``: job_failures of the
    day and of later days (a failure tomorrow can reach back into today).
    """
    day_start, day_end = pd.Timestamp(day_start), pd.Timestamp(day_end)
    agg = states.groupby(DIMS + ["state"], observed=True)["gpu_minutes"].sum()
    wide = agg.unstack("state", fill_value=0.0)
    for s in STATES:
        if s not in wide.columns:
            wide[s] = 0.0
    moved_total = 0.0
    if failures is not None and len(failures):
        f = failures.copy()
        own_start = f["failed_at"].dt.floor(PARTITION_FREQ)
        # lost interval already counted: the failure's own partition; settle the rest inside this day
        lo = np.maximum(f["lost_from"], day_start)
        hi = np.minimum(own_start, day_end)
        minutes = ((hi - lo) / MINUTE).clip(lower=0)
        f["move"] = minutes * f["gpus"].astype(float)
        f = f[f["move"] > 0]
        if len(f):
            want = f.groupby(DIMS)["move"].sum()
            for key, amount in want.items():
                if key not in wide.index:
                    continue
                take = min(amount, wide.at[key, "productive"])
                wide.at[key, "productive"] -= take
                wide.at[key, "failure_loss"] += take
                moved_total += take
    out = wide[STATES].stack().rename("gpu_minutes").reset_index()
    return out[out["gpu_minutes"] > 0].reset_index(drop=True), moved_total


def blended_rates(cost: pd.DataFrame) -> pd.DataFrame:
    """USD per paid GPU-hour per day x region x SKU."""
    c = cost.copy()
    paid_h = c["capacity_gpus"].astype(float) * 24.0
    spend = c["reserved_gpus"] * 24.0 * c["reserved_gpu_hour_usd"] + c["on_demand_gpu_hours"] * c["on_demand_gpu_hour_usd"]
    c["blended_gpu_hour_usd"] = np.where(paid_h > 0, spend / paid_h.where(paid_h > 0, 1), 0.0)
    c["spend_usd"] = spend
    return c[["date", "region", "sku", "capacity_gpus", "blended_gpu_hour_usd", "spend_usd"]]


def daily_goodput(settled: pd.DataFrame, provisional: pd.DataFrame, day, partitions: int) -> pd.DataFrame:
    """cluster_goodput_daily rows: per region and '*'."""
    rows = []
    for region, grp in [*settled.groupby("region"), ("*", settled)]:
        paid = grp["gpu_minutes"].sum()
        prod = grp.loc[grp["state"] == "productive", "gpu_minutes"].sum()
        fail = grp.loc[grp["state"] == "failure_loss", "gpu_minutes"].sum()
        prov = provisional[provisional["region"] == region]["goodput"].mean() if len(provisional) else np.nan
        rows.append({"date": pd.Timestamp(day).date(), "region": region, "paid_gpu_hours": paid / 60.0,
                     "productive_gpu_hours": prod / 60.0, "provisional_goodput": prov,
                     "settled_goodput": prod / paid if paid > 0 else np.nan, "failure_loss_gpu_hours": fail / 60.0,
                     "partitions": partitions})
    return pd.DataFrame(rows)


def wasted_spend(settled: pd.DataFrame, rates: pd.DataFrame, day) -> pd.DataFrame:
    """USD per state x team x region x SKU for the day (productive kept for reconciliation); rate and USD null
    where ``rates`` has no row for the region x SKU."""
    g = settled.groupby(["region", "sku", "state", "team"], observed=True)["gpu_minutes"].sum().reset_index()
    r = rates.assign(region=rates["region"].astype(object), sku=rates["sku"].astype(object))
    g = g.astype({"region": object, "sku": object}).merge(r[["region", "sku", "blended_gpu_hour_usd"]], on=["region", "sku"], how="left")
    # a region x SKU Finance has no cost row for stays unpriced (null), never $0: its spend is unknown, and
    # gpu_health.diagnosis.inventory tickets it as telemetry without a price
    g["blended_gpu_hour_usd"] = g["blended_gpu_hour_usd"].astype(float)
    g["gpu_hours"] = g["gpu_minutes"] / 60.0
    g["usd"] = g["gpu_hours"] * g["blended_gpu_hour_usd"]
    g["cause_family"] = g["state"].map(STATE_FAMILY)
    g["date"] = pd.Timestamp(day).date()
    return g[["date", "region", "sku", "state", "cause_family", "team", "gpu_hours", "blended_gpu_hour_usd", "usd"]]

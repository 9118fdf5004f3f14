"""Bodies of the finance steps (cluster_goodput_daily, wasted_spend) and Finance's capacity as of a window's days.

No Dagster and no warehouse here: each body reads what its step declares (``registry.py``) through the
:class:`~gpu_health.steps.resolve.Inputs` it is given.
"""

import pandas as pd

from gpu_health.metrics import goodput as G
from gpu_health.steps.resolve import Inputs

# how far back the last capacity Finance sent still stands for a day it has not priced (yet): a day's cost file
# lands after the day, and installed capacity moves with purchase orders, over weeks (G.capacity_as_of)
CAPACITY_MEMORY = pd.Timedelta(days=7)


def capacity_as_of(inputs: Inputs) -> pd.DataFrame:
    """cost_capacity rows as of each day of the window (:func:`gpu_health.metrics.goodput.capacity_as_of`)."""
    start, end = inputs.start, inputs.end
    cost = inputs.span("cost_capacity", start.normalize() - CAPACITY_MEMORY, end)
    days = pd.date_range(start.normalize(), (end - pd.Timedelta(1)).normalize(), freq="D")
    return G.capacity_as_of(cost, days, CAPACITY_MEMORY)


def finance_day(inputs: Inputs) -> dict[str, pd.DataFrame]:
    """Settled goodput and wasted spend for the window's one day (its failures up to the declared ``after`` later
    settle back into it), the minutes moved, and for the checks the day's partitions present (``day_partitions``)
    and Finance's bill per region x SKU (``billed``)."""
    from gpu_health.metrics import finance as F

    day_start, day_end = inputs.start, inputs.end
    states = inputs.in_window("goodput_states")
    failures = inputs.window("job_failures")
    provisional = inputs.in_window("cluster_goodput")
    cost = inputs.in_window("cost_capacity")
    settled, moved = F.settle(states, failures, day_start, day_end)
    partitions = int(states["partition_start"].nunique()) if len(states) else 0
    daily = F.daily_goodput(settled, provisional, day_start, partitions)
    # a day Finance did not price (its file missing or quarantined) keeps its GPU-hours with the money null, never $0
    rates = F.blended_rates(cost)
    spend = F.wasted_spend(settled, rates, day_start)
    # what the checks judge (gpu_health.steps.checks): the partitions present, and Finance's bill of the day
    date = pd.Timestamp(day_start).date()
    billed = rates[["region", "sku", "spend_usd"]].assign(date=date, partitions=partitions)
    return {"cluster_goodput_daily": daily, "wasted_spend": spend, "moved_gpu_minutes": moved,
            "day_partitions": pd.DataFrame({"date": [date], "partitions": [partitions]}), "billed": billed}


def blended_rate_by_region(cost: pd.DataFrame) -> dict:
    """USD per paid GPU-hour per region (capacity-weighted over SKUs) and '*' for the cluster."""
    from gpu_health.metrics.finance import blended_rates

    if cost is None or cost.empty:
        return {}
    r = blended_rates(cost)
    r = r.assign(w=r["capacity_gpus"].astype(float))
    out = {reg: float((g["blended_gpu_hour_usd"] * g["w"]).sum() / max(g["w"].sum(), 1)) for reg, g in r.groupby("region")}
    out["*"] = float((r["blended_gpu_hour_usd"] * r["w"]).sum() / max(r["w"].sum(), 1))
    return out

"""A simulated quarter's daily GPU-hour demand straight from the job plan (no telemetry, no pipeline).

Running the pipeline over a quarter costs hours on a small machine; the demand the forecast needs is a property
of the job plan alone (who holds which GPUs when, who waited from when), and :func:`gpu_health.sim.jobs.build_plan`
generates a week of it in seconds. Allocated = GPUs x [start, end), backlog = GPUs x [submit, start): the
definitions the pipeline's ``capacity_demand_daily`` applies to the loss tree and the scheduler's events.
"""

from __future__ import annotations

import pandas as pd

from gpu_health.metrics.forecast import interval_daily
from gpu_health.sim import jobs as J
from gpu_health.sim.scenario import Scenario

CHUNK = pd.Timedelta(days=7)


def plan_daily(scen: Scenario, start=None, end=None) -> pd.DataFrame:
    """Daily demand per region x sku x workload class over ``[start, end)`` (default: the scenario's span)."""
    start = pd.Timestamp(start or scen.start).floor("D")
    end = pd.Timestamp(end or scen.end).ceil("D")
    skus = scen.cluster.nodes.drop_duplicates("node_id").set_index("node_id")["sku"]
    lanes = scen.cluster.lanes.set_index("lane")
    lane_sku = lanes["node_ids"].map(lambda ids: skus[ids[0]])
    parts = []
    t = start
    while t < end:
        hi = min(t + CHUNK, end)
        plan = J.build_plan(scen, J.to_s(t), J.to_s(hi))
        # a job belongs to the chunk it was submitted in (the plan of a window reaches back to jobs still running)
        plan = plan[(plan["submit_s"] >= J.to_s(t)) & (plan["submit_s"] < J.to_s(hi))]
        parts.append(pd.DataFrame({
            "submit": J.from_s(plan["submit_s"].to_numpy()), "start": J.from_s(plan["start_s"].to_numpy()),
            "end": J.from_s(plan["end_s"].to_numpy()), "gpus": plan["gpus"].to_numpy(),
            "region": plan["region"].to_numpy(), "sku": lane_sku.reindex(plan["lane"]).to_numpy(),
            "workload_class": plan["pool"].to_numpy()}))
        t = hi
    jobs = pd.concat(parts, ignore_index=True)
    out = []
    for (region, sku, wc), grp in jobs.groupby(["region", "sku", "workload_class"]):
        d = interval_daily(grp, start, end)
        out.append(d.assign(region=region, sku=sku, workload_class=wc).rename_axis("date").reset_index())
    return pd.concat(out, ignore_index=True)

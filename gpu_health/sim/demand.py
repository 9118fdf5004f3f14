"""A simulated quarter's daily GPU-hour demand straight from the job plan (no telemetry, no pipeline).

Running the pipeline over a quarter costs hours on a small machine; the demand the forecast needs is a property
of the job plan alone (who holds which GPUs when, who waited from when), and :func:`gpu_health.sim.jobs.build_plan`
generates a week of it in seconds. Allocated = GPUs x [start, end), backlog = GPUs x [submit, start): the
definitions the pipeline's ``capacity_demand_daily`` applies to the loss tree and the scheduler's events.

This is ground truth, so it is counted here, on the simulator's own integer-second clock, and not with the
forecast module's ``interval_daily``: the simulator never runs the code it is meant to test, and a slip in that
code would otherwise be in both the truth and what is checked against it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpu_health.sim import jobs as J
from gpu_health.sim.scenario import Scenario

CHUNK = pd.Timedelta(days=7)


def _daily_gpu_hours(lo_s: np.ndarray, hi_s: np.ndarray, gpus: np.ndarray, edges_s: np.ndarray) -> np.ndarray:
    """GPU-hours of the intervals ``[lo_s, hi_s) x gpus`` inside each day ``[edges_s[i], edges_s[i + 1])``.

    Integer seconds throughout (GPU-seconds before each day edge, differenced), so the sum is exact whatever the
    number of jobs; only the final division into hours rounds."""
    lo = np.clip(lo_s, edges_s[0], edges_s[-1])
    hi = np.clip(hi_s, edges_s[0], edges_s[-1])
    keep = hi > lo
    lo, hi, g = lo[keep], hi[keep], gpus[keep]
    before = np.array([np.sum(g * np.clip(e - lo, 0, hi - lo)) for e in edges_s], dtype=np.int64)
    return np.diff(before) / 3600.0


def _plan_jobs(scen: Scenario, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """Every job submitted in ``[start, end)``: submit_s, start_s, end_s, gpus, region, sku, workload_class."""
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
            "submit_s": plan["submit_s"].to_numpy(np.int64), "start_s": plan["start_s"].to_numpy(np.int64),
            "end_s": plan["end_s"].to_numpy(np.int64), "gpus": plan["gpus"].to_numpy(np.int64),
            "region": plan["region"].to_numpy(), "sku": lane_sku.reindex(plan["lane"]).to_numpy(),
            "workload_class": plan["pool"].to_numpy()}))
        t = hi
    return pd.concat(parts, ignore_index=True)


def plan_daily(scen: Scenario, start=None, end=None) -> pd.DataFrame:
    """Daily demand per region x sku x workload class over ``[start, end)`` (default: the scenario's span)."""
    start, end = (t if t.tzinfo is not None else t.tz_localize("UTC")
                  for t in (pd.Timestamp(start or scen.start), pd.Timestamp(end or scen.end)))
    start, end = start.floor("D"), end.ceil("D")
    jobs = _plan_jobs(scen, start, end)
    days = pd.date_range(start, end, freq="D")
    edges_s = np.array([J.to_s(d) for d in days], dtype=np.int64)
    out = []
    for (region, sku, wc), grp in jobs.groupby(["region", "sku", "workload_class"]):
        sub, beg, fin, g = (grp[c].to_numpy() for c in ("submit_s", "start_s", "end_s", "gpus"))
        d = pd.DataFrame({"allocated_gpu_hours": _daily_gpu_hours(beg, fin, g, edges_s),
                          "backlog_gpu_hours": _daily_gpu_hours(sub, beg, g, edges_s)}, index=days[:-1])
        d["demand_gpu_hours"] = d["allocated_gpu_hours"] + d["backlog_gpu_hours"]
        out.append(d.assign(region=region, sku=sku, workload_class=wc).rename_axis("date").reset_index())
    return pd.concat(out, ignore_index=True)

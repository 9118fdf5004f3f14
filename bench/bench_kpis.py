"""Time compute_kpis on simulated windows of the default 1,200-GPU cluster, or the four KPI / baseline steps over
one day of an existing warehouse.

Prints one JSON line per window: {"name", "gpus", "minutes", "rows", "seconds"}
(seconds of compute_kpis alone; generating the telemetry is not timed).
Run: .venv/bin/python bench/bench_kpis.py [minutes ...]   (default: 5 and 1440)

Steps mode (kpi_values, kpi_baselines, workload_step_stats, step_time_baselines <= 4 s a day together):

    .venv/bin/python bench/bench_kpis.py --steps --warehouse sqlite:////COPY/w.db --telemetry /COPY/w.telemetry \
        --landing /COPY/landing --day 2026-11-04

runs every 5-minute step of the day in registry order with one run cache (as ``gpu-health run --direct`` does, so
each step's reads hit the cache as in the bulk path) and prints one JSON line per step of the four:
{"name": "step", "step", "day", "rows", "seconds", "cpu_seconds"} (the step's reads, computation and write). It
re-writes the day's tables (steps are idempotent): run it on a copy of a warehouse, never on one in use.
"""

import argparse
import json
import sys
import time
import warnings

import pandas as pd

from gpu_health.metrics.baselines import step_baseline, workload_step_stats
from gpu_health.metrics.kpis import compute_kpis, pending_jobs
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window, cost_capacity

START = pd.Timestamp("2026-11-03T10:00:00Z")
HISTORY = pd.Timedelta(hours=1)


def goodput_states_stub(gpu: pd.DataFrame) -> pd.DataFrame:
    """A goodput_states frame of the right size: allocated minutes 'productive', the rest idle."""
    g = gpu.assign(partition_start=gpu["ts"].dt.floor("5min"),
                   state=gpu["job_id"].notna().map({True: "productive", False: "idle_no_demand"}))
    out = g.groupby(["partition_start", "region", "sku", "state"], observed=True).size().rename("gpu_minutes")
    return out.reset_index().assign(workload_class="batch", team="t", gpu_minutes=lambda d: d["gpu_minutes"].astype(float))


def bench(minutes: int) -> dict:
    end = START + pd.Timedelta(minutes=minutes)
    scen = load_scenario({"seed": 7, "start": (START - HISTORY).isoformat(), "end": end.isoformat()})
    hist = Window(scen, START - HISTORY, START).tables()
    baseline = step_baseline(workload_step_stats(hist, meta=hist["job_metadata"], maintenance=None), None)
    frames = Window(scen, START, end).tables()
    states = goodput_states_stub(frames["gpu_telemetry"])
    kwargs = dict(start=START, end=end, cost=cost_capacity(scen, START), job_metadata_lookup=hist["job_metadata"],
                  step_baseline=baseline, pending=pending_jobs(hist["scheduler_events"], START))
    t0 = time.perf_counter()
    out = compute_kpis(frames, states, **kwargs)
    seconds = time.perf_counter() - t0
    return {"name": "compute_kpis", "gpus": scen.cluster.spec.total_gpus, "minutes": minutes, "rows": len(out),
            "seconds": round(seconds, 3)}


KPI_STEPS = ("workload_step_stats", "step_time_baselines", "kpi_values", "kpi_baselines")


def bench_steps(warehouse: str, telemetry: str, landing: str, day: str) -> list[dict]:
    """Seconds (wall and CPU) of each of KPI_STEPS over ``day``, after every earlier 5-minute step of the day ran
    with the same run cache (sources read from ``landing``)."""
    from gpu_health.defs.resources import TelemetrySourceResource
    from gpu_health.steps.graph import FIVE_MINUTE
    from gpu_health.steps.registry import steps_of
    from gpu_health.storage.warehouse import FrameCache, Warehouse

    start = pd.Timestamp(day, tz="UTC") if pd.Timestamp(day).tzinfo is None else pd.Timestamp(day)
    end = start + pd.Timedelta(days=1)
    wh = Warehouse(warehouse, telemetry, cache=FrameCache())
    source = TelemetrySourceResource(kind="landing", landing_dir=landing).get()
    steps = steps_of(FIVE_MINUTE)
    last = max(i for i, s in enumerate(steps) if s.name in KPI_STEPS)
    out = []
    for s in steps[: last + 1]:
        kw = {"source": source} if (not s.reads and s.side_writes) else {}  # a source step reads the landing zone
        t, c = time.perf_counter(), time.process_time()
        result = s.run(wh, start, end, **kw)
        if s.name in KPI_STEPS:
            out.append({"name": "step", "step": s.name, "day": str(start.date()),
                        "rows": int(sum(len(f) for f in result.tables.values())),
                        "seconds": round(time.perf_counter() - t, 3), "cpu_seconds": round(time.process_time() - c, 3)})
            print(json.dumps(out[-1]), flush=True)
    return out


def main() -> None:
    warnings.simplefilter("ignore", FutureWarning)
    if "--steps" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--steps", action="store_true")
        ap.add_argument("--warehouse", required=True, help="SQLAlchemy URL of a COPY of a warehouse")
        ap.add_argument("--telemetry", required=True, help="its telemetry store directory")
        ap.add_argument("--landing", required=True, help="the landing zone its sources were ingested from")
        ap.add_argument("--day", required=True, help="a day the warehouse holds, e.g. 2026-11-04")
        a = ap.parse_args()
        rows = bench_steps(a.warehouse, a.telemetry, a.landing, a.day)
        print(json.dumps({"name": "kpi_steps_total", "day": a.day,
                          "cpu_seconds": round(sum(r["cpu_seconds"] for r in rows), 3),
                          "seconds": round(sum(r["seconds"] for r in rows), 3)}), flush=True)
        return
    for minutes in [int(a) for a in sys.argv[1:]] or [5, 1440]:
        print(json.dumps(bench(minutes)), flush=True)


if __name__ == "__main__":
    main()

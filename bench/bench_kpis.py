"""Time compute_kpis on simulated windows of the default 1,200-GPU cluster.

Prints one JSON line per window: {"name", "gpus", "minutes", "rows", "seconds"}
(seconds of compute_kpis alone; generating the telemetry is not timed).
Run: .venv/bin/python bench/bench_kpis.py [minutes ...]   (default: 5 and 1440)
"""

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


def main() -> None:
    warnings.simplefilter("ignore", FutureWarning)
    for minutes in [int(a) for a in sys.argv[1:]] or [5, 1440]:
        print(json.dumps(bench(minutes)), flush=True)


if __name__ == "__main__":
    main()

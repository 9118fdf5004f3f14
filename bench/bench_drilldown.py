"""Time drill_down on ~50k leaves x 8 dimensions with one injected intersection cause, or (``--range``)
decompose_range over a run of 5-minute partitions of a 1,200-GPU cluster's goodput leaves.

Prints one JSON line:
  drill_down:      {"name", "rows", "dimensions", "seconds", "causes"}
  decompose_range: {"name", "partitions", "rows", "seconds", "per_partition_ms", "decomposed", "named_causes"}
Run: .venv/bin/python bench/bench_drilldown.py [rows]
     .venv/bin/python bench/bench_drilldown.py --range [partitions]     (default 48: four hours)
"""

import json
import sys
import time

import numpy as np
import pandas as pd

from gpu_health.diagnosis.decompose import decompose_range
from gpu_health.diagnosis.drilldown import drill_down
from gpu_health.metrics.goodput import LEAF_DIMS

DIMENSIONS = {
    "region": 2,
    "node": 80,
    "sku": 3,
    "driver_version": 4,
    "framework_version": 5,
    "queue": 6,
    "team": 12,
    "model_type": 20,
}


def leaves(rows: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {dim: rng.integers(0, card, rows) for dim, card in DIMENSIONS.items()}
    )
    frame["region"] = np.where(frame["node"] < 40, "us-east", "us-west")
    frame["node"] = "n" + frame["node"].astype(str)
    frame = frame.drop_duplicates(list(DIMENSIONS)).reset_index(drop=True)
    frame["expected"] = rng.gamma(2.0, 30.0, len(frame))
    frame["actual"] = frame["expected"] * rng.normal(1.0, 0.1, len(frame)).clip(0)
    cause = (frame["region"] == "us-east") & (frame["driver_version"] == 2)
    frame.loc[cause, "actual"] *= 1.8
    return frame


def goodput_leaves(partitions: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(actual, expected) goodput leaves of ``partitions`` 5-minute partitions: 150 nodes of 8 GPUs (40
    GPU-minutes each) in two regions, each node's GPUs split over two jobs (team x queue x model x framework)
    mostly productive with 2-6 % slowdown_compute, the rest idle. On the actual side each slowdown moves by
    +-15 % of itself plus a cluster-wide drift of +-30 % (so most partitions have a state that grew, drilled down
    to find only spread noise), and every sixth partition the nodes on driver 560.1 lose half their productive
    minutes to slowdown_compute (a cause to name)."""
    rng = np.random.default_rng(seed)
    t0 = pd.Timestamp("2026-11-04T00:00:00Z")
    nodes = 150
    node = np.repeat(np.arange(nodes), 2)  # two job leaves per node
    job = rng.integers(0, 400, len(node))
    jobs = pd.DataFrame({
        "region": np.where(node < nodes // 2, "us-east", "eu-west"), "node_id": [f"n{i:03d}" for i in node],
        "sku": np.where(node % 5 == 0, "H100", "A100"), "driver_version": np.where(node % 7 == 0, "560.1", "550.2"),
        "team": [f"team{j % 12}" for j in job], "workload_class": "batch", "model_type": [f"m{j % 20}" for j in job],
        "framework_version": [f"torch-2.{j % 5}" for j in job], "queue": [f"q{j % 6}" for j in job],
    })
    idle = jobs.iloc[::2].assign(team="none", workload_class="none", model_type="none", framework_version="none",
                                 queue="none", state="idle_no_demand")
    bad_driver = (jobs["driver_version"] == "560.1").to_numpy()
    actual, expected = [], []
    for k in range(partitions):
        minutes = rng.uniform(12, 20, len(jobs))
        share = rng.uniform(0.02, 0.06, len(jobs))
        prod, slow = minutes * (1 - share), minutes * share
        noise = slow * rng.normal(0, 0.15, len(jobs))
        noise += slow * rng.uniform(-0.3, 0.3) - noise.mean()
        cause = np.where(bad_driver, 0.5 * prod, 0.0) if k % 6 == 0 else 0.0
        idle_minutes = 40 - minutes[::2] - minutes[1::2]
        p = t0 + k * pd.Timedelta(minutes=5)
        for out, (p_m, s_m) in ((actual, (prod - noise - cause, slow + noise + cause)), (expected, (prod, slow))):
            out.append(pd.concat([jobs.assign(state="productive", gpu_minutes=p_m),
                                  jobs.assign(state="slowdown_compute", gpu_minutes=s_m),
                                  idle.assign(gpu_minutes=idle_minutes)], ignore_index=True).assign(partition_start=p))
    cols = ["partition_start", *LEAF_DIMS, "state", "gpu_minutes"]
    return pd.concat(actual, ignore_index=True)[cols], pd.concat(expected, ignore_index=True)[cols]


def bench_range(partitions: int) -> None:
    actual, expected = goodput_leaves(partitions)
    start = time.perf_counter()
    out = decompose_range(actual, expected)
    seconds = time.perf_counter() - start
    named = out[out["elements"] != "{}"] if len(out) else out
    print(json.dumps({
        "name": "decompose_range",
        "partitions": partitions,
        "rows": len(actual) + len(expected),
        "seconds": round(seconds, 3),
        "per_partition_ms": round(1000 * seconds / partitions, 2),
        "decomposed": int(out["partition_start"].nunique()) if len(out) else 0,
        "named_causes": sorted(set(named["elements"])) if len(named) else [],
    }))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--range":
        bench_range(int(sys.argv[2]) if len(sys.argv) > 2 else 48)
        return
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    frame = leaves(rows)
    start = time.perf_counter()
    causes = drill_down(frame, list(DIMENSIONS))
    seconds = time.perf_counter() - start
    print(json.dumps({
        "name": "drill_down",
        "rows": len(frame),
        "dimensions": len(DIMENSIONS),
        "seconds": round(seconds, 3),
        "causes": [c.label() for c in causes],
    }))


if __name__ == "__main__":
    main()

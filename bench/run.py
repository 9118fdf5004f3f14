"""Benchmarks: one JSON line per measurement (name, gpus, seconds, peak_mib, ...).

    python bench/run.py                  # the standard set (partition at 1,200 and 100,000 GPUs, KPI assets)
    python bench/run.py --week           # also the 7-day backfill at 1,200 GPUs (about 15 minutes)
    python bench/run.py --only week_backfill_sources --workers 2   # the backfill as 2 parallel day-range runs
    python bench/run.py --only source_partition --gpus 100000

Each measurement runs in a fresh Python process so its peak memory (max RSS)
is its own; seconds exclude imports and building the Definitions. Targets
(issues #2, #3): one partition's source assets <= 3 s at 1,200 GPUs, <= 60 s
and <= 4 GB at 100,000; a 7-day backfill <= 15 min; the KPI assets of one
partition <= 2 s at 1,200 GPUs.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

PARTITION = "2026-11-03-14:00"
DAY_START = "2026-11-03T00:00:00Z"
TELEMETRY = ["gpu_telemetry", "node_telemetry", "network_telemetry", "scheduler_events", "job_runtime_metrics",
             "job_metadata", "change_events"]
KPI_ASSETS = ["node_inventory", "workload_step_stats", "step_time_baselines", "goodput_leaves", "goodput_states",
              "goodput_node_states", "job_failures", "cluster_goodput", "kpi_values", "alerts"]


def _defs(tmp: str, gpus: int):
    import dagster as dg

    from gpu_health.definitions import build_definitions
    from gpu_health.defs.resources import TelemetrySourceResource, WarehouseIOManager, WarehouseResource
    from gpu_health.settings import Settings

    warnings.filterwarnings("ignore")
    scenario = Path(tmp) / "bench.yaml"
    scenario.write_text(f"seed: 7\nstart: 2026-11-02T00:00:00Z\nend: 2026-11-09T00:00:00Z\ncluster: {{gpus: {gpus}}}\n")
    url = f"sqlite:///{tmp}/warehouse.db"
    res = {"warehouse": WarehouseResource(url=url), "warehouse_io_manager": WarehouseIOManager(url=url),
           "source": TelemetrySourceResource(kind="simulator", scenario=str(scenario))}
    defs = build_definitions(Settings(partition_start="2026-11-02-00:00"), res)
    return defs, dg.DagsterInstance.ephemeral(), dg


def _keys(defs, names):
    import dagster as dg

    known = {k.to_user_string() for k in defs.resolve_all_asset_keys()}
    return [dg.AssetKey(n) for n in names if n in known]


def _execute(defs, instance, names, **kw):
    job = defs.resolve_job_def("five_minute_job")
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    result = job.execute_in_process(instance=instance, asset_selection=_keys(defs, names), run_config=quiet,
                                    raise_on_error=True, **kw)
    return result


def _backfill_days(defs, instance, days) -> None:
    for day in days:
        d0 = f"2026-11-{2 + day:02d}-00:00"
        d1 = f"2026-11-{2 + day:02d}-23:55"
        _execute(defs, instance, TELEMETRY, tags={"dagster/asset_partition_range_start": d0,
                                                  "dagster/asset_partition_range_end": d1})


def _backfill_worker(job: tuple) -> None:
    """One day-range run in a worker process (its own Definitions and instance, the shared warehouse)."""
    tmp, gpus, day = job
    defs, instance, _ = _defs(tmp, gpus)
    _backfill_days(defs, instance, [day])


def one(name: str, gpus: int, workers: int = 1, days: int = 7) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        defs, instance, dg = _defs(tmp, gpus)
        out = {"name": name, "gpus": gpus}
        if name == "source_partition":
            t = time.perf_counter()
            _execute(defs, instance, TELEMETRY, partition_key=PARTITION)
            out["seconds"] = round(time.perf_counter() - t, 3)
        elif name == "kpi_partition":
            # the hour before gives the loss tree its inventory and baselines (not timed)
            daily = defs.resolve_job_def("daily_job")
            daily.execute_in_process(instance=instance, partition_key="2026-11-03", asset_selection=_keys(defs, ["cost_capacity"]),
                                     run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}})
            if gpus <= 10_000:  # an hour of history at fleet scale would dominate the benchmark: cold start there
                _execute(defs, instance, TELEMETRY + KPI_ASSETS, tags={"dagster/asset_partition_range_start": "2026-11-03-13:00",
                                                                        "dagster/asset_partition_range_end": "2026-11-03-13:55"})
            out["history"] = "1 h" if gpus <= 10_000 else "none (cold start)"
            _execute(defs, instance, TELEMETRY, partition_key=PARTITION)
            t = time.perf_counter()
            _execute(defs, instance, KPI_ASSETS, partition_key=PARTITION)
            out["seconds"] = round(time.perf_counter() - t, 3)
        elif name == "week_backfill_sources":
            t = time.perf_counter()
            if workers == 1:
                _backfill_days(defs, instance, range(days))
            else:
                # the scale-out path in miniature: a run queue of day-range runs, `workers` at a time, each in
                # its own process (what Dagster's run launcher does), all writing one warehouse
                from concurrent.futures import ProcessPoolExecutor

                with ProcessPoolExecutor(max_workers=workers) as pool:
                    list(pool.map(_backfill_worker, [(tmp, gpus, day) for day in range(days)]))
            out["seconds"] = round(time.perf_counter() - t, 3)
            out["partitions"] = 288 * days
            out["workers"] = workers
        elif name == "week_full_pipeline":
            from gpu_health.cli import run

            t = time.perf_counter()
            summary = run("2026-11-02T00:00:00Z", "2026-11-09T00:00:00Z", scenario=str(Path(tmp) / "bench.yaml"),
                          warehouse=f"sqlite:///{tmp}/full.db", quiet=True)
            out["seconds"] = round(time.perf_counter() - t, 3)
            out["partitions"] = summary["partitions"]
        else:
            raise SystemExit(f"unknown measurement {name}")
        out["peak_mib"] = round(max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                                    resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024, 1)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only")
    ap.add_argument("--gpus", type=int, default=1200)
    ap.add_argument("--week", action="store_true", help="also the 7-day backfills (slow)")
    ap.add_argument("--workers", type=int, default=1,
                    help="processes for week_backfill_sources (day-range runs in parallel, one warehouse)")
    ap.add_argument("--days", type=int, default=7, help="days of week_backfill_sources (default 7)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one(args.only, args.gpus, args.workers, args.days)), flush=True)
        return
    plan = [(args.only, args.gpus, args.workers)] if args.only else [
        ("source_partition", 1200, 1), ("source_partition", 100_000, 1), ("kpi_partition", 1200, 1),
        ("kpi_partition", 100_000, 1)]
    if args.week and not args.only:
        plan += [("week_backfill_sources", 1200, 1)]
        if args.workers > 1:  # the same backfill as parallel runs, for the speed-up
            plan += [("week_backfill_sources", 1200, args.workers)]
        plan += [("week_full_pipeline", 1200, 1)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    for name, gpus, workers in plan:
        proc = subprocess.run([sys.executable, __file__, "--child", "--only", name, "--gpus", str(gpus),
                               "--workers", str(workers), "--days", str(args.days)], capture_output=True, text=True, env=env)
        line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        if proc.returncode != 0 or not line.startswith("{"):
            print(json.dumps({"name": name, "gpus": gpus, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}), flush=True)
        else:
            print(line, flush=True)


if __name__ == "__main__":
    main()

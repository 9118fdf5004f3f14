"""Benchmarks of the pipeline core: one JSON line per measurement (name, gpus, seconds, peak_mib,
cpu_seconds, ...).

    python bench/run.py                          # week_bulk, store_size, live_partition at 1,200 GPUs
    python bench/run.py --dagster                # also week_dagster (the same week through Dagster runs)
    python bench/run.py --only live_partition --gpus 100000
    python bench/run.py --only suite --workers 2 # gpu-health evaluate on the full suite (both profiles)

Measurements (each in a fresh Python process, so its peak memory is its own -- ``peak_mib``, the max RSS of the
process or of the largest process it waited for, and ``peak_total_mib``, the most that it and all its processes
held at once (:class:`TotalMemory`): a run pipelined over 3 processes holds ~2.8x its largest one's -- and so
is its CPU: ``cpu_seconds``, user and system, of it and the processes it waited for; the landing zone is written
first by ``gpu-health simulate``, untimed, reported as ``simulate_seconds``):

* ``week_bulk``: a simulated week (2,016 partitions) from the landing zone to alerts and finance through the bulk
  path (``gpu-health run --direct``). Target: <= 2 min, <= 4 GB on 2 cores (the whole run: ``peak_total_mib``).
* ``week_dagster``: the same week through Dagster (``gpu-health run``: a run per day, or with ``--workers`` > 1 a
  run per day and pipeline stage, the stages in processes of their own). Target: <= 15 min.
* ``store_size``: the warehouse (SQLite file) and the telemetry store (Parquet) per simulated day, after week_bulk.
  Target: <= 50 MB a day at 1,200 GPUs, all tables.
* ``live_partition``: one partition from its files landing to its alerts written, through the run the sensor
  starts (the five_minute_job for that partition), with an hour of history before it (at 100,000 GPUs: cold start,
  an hour of history would dominate). Target: <= 10 s at 1,200 GPUs, <= 60 s and <= 4 GB at 100,000.
* ``suite``: ``gpu-health evaluate`` on scenarios/suite with ``--workers``. Target: <= 60 min.
* ``partition_steps``: the same partition as ``live_partition`` through the bulk path (``gpu-health run --direct``),
  each step's seconds (``step_seconds``) and the rows each SQL table received for it (``sql_rows``), into SQLite or
  the warehouse ``--warehouse`` names (a PostgreSQL URL: its write throughput). What a worker of the distributed
  profile spends per partition on each step (docs/scale.md).

Every line also carries ``reference_cpu_seconds``: the CPU seconds of a fixed piece of work like the pipeline's
(:func:`reference_work`: text factorized, rows grouped, sorted, joined and pickled; a Python loop), measured in a
process of its own just before and just after the measurement. The targets are wall times "on 2 cores", and the
cores of one machine differ from another's and from themselves an hour later (a week that took 120 s in one
session took 186-294 s on another machine, the same code, its speed falling through the session, and 181-222 s
in the next, its reference moving from 2.7 to 1.6 s within one run): a measurement compares with another by its
ratio to the reference taken beside it.
"""

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WEEK = ("2026-11-02T00:00:00Z", "2026-11-09T00:00:00Z")
LIVE = "2026-11-03T14:00:00Z"  # a Tuesday afternoon partition


def _cpu_seconds(reference: dict | None = None) -> dict:
    """User and system CPU seconds of the measurement's process and of the processes it waited for (the pipeline's
    stages, the suite's workers), its start-up included, without the ``reference`` work's: on a shared machine
    whose speed varies, the work a change saves shows in CPU more steadily than in wall time."""
    own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    ref = reference or {"user": 0.0, "sys": 0.0}
    return {"user": round(own.ru_utime + waited.ru_utime - ref["user"], 1),
            "sys": round(own.ru_stime + waited.ru_stime - ref["sys"], 1)}


def reference_work() -> None:
    """A fixed piece of work made of what the pipeline spends its time on, ~2-3 CPU s and ~0.3 GB on the machines
    of this project (under any measurement's peak, which it would otherwise raise): pandas on a million rows (a text
    column of 1,200 values factorized, a group-by of three keys, a sort, a join), numpy (a sort and a bincount of 2
    million integers), a protocol-5 pickle round trip, and a Python loop over dicts. Seeded: the same work on every
    machine."""
    import pickle

    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(14)
    n = 1_000_000
    names = np.array([f"gpu-{i:05d}" for i in range(1_200)], dtype=object)
    frame = pd.DataFrame({"gpu": pd.array(names[rng.integers(0, 1_200, n)], dtype="string"),
                          "minute": rng.integers(0, 1_440, n), "job": rng.integers(0, 40_000, n),
                          "util": rng.random(n) * 100})
    codes, _ = pd.factorize(frame["gpu"])
    frame["code"] = codes
    frame.groupby(["code", "minute", "job"], sort=False)["util"].sum()
    frame.sort_values(["job", "minute"])
    jobs = pd.DataFrame({"job": np.arange(40_000), "team": rng.integers(0, 30, 40_000)})
    frame.merge(jobs, on="job", how="left")
    keys = rng.integers(0, 1 << 40, 2_000_000)
    np.sort(keys)
    np.bincount(keys % 100_003)
    buffers: list = []
    pickle.loads(pickle.dumps(frame, protocol=5, buffer_callback=buffers.append), buffers=buffers)
    counts: dict = {}
    for i in range(1_000_000):
        counts[i % 977] = counts.get(i % 977, 0) + i


def _reference_cpu_seconds() -> tuple[float | None, dict]:
    """CPU seconds (user + system) of :func:`reference_work` in a fresh process (None if it failed), and what that
    process added to this one's RUSAGE_CHILDREN (taken out of the measurement's ``cpu_seconds``)."""
    code = ("import resource, sys; sys.path.insert(0, sys.argv[1]); import run; run.reference_work(); "
            "u = resource.getrusage(resource.RUSAGE_SELF); print(u.ru_utime + u.ru_stime)")
    t0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)], capture_output=True, text=True)
    t1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = {"user": t1.ru_utime - t0.ru_utime, "sys": t1.ru_stime - t0.ru_stime}
    if proc.returncode != 0 or not proc.stdout.strip():
        return None, spent
    return round(float(proc.stdout.strip().splitlines()[-1]), 2), spent


def _peak_mib() -> float:
    return round(max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                     resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024, 1)


class TotalMemory(threading.Thread):
    """The peak of the memory the whole measurement holds at once (``peak_total_mib``): every second, the summed
    proportional set size (PSS: a page shared by n processes counts 1/n in each) of this process and all its
    descendants -- a pipelined run's stages hold ~2 GB each at once, which ``peak_mib``, the largest process's
    peak, does not show -- plus the hand-over files waiting in the run's folders (``/dev/shm`` is memory; a file
    already mapped by the stage reading it counts twice, a day's table at most: an upper bound). Linux only
    (``/proc/<pid>/smaps_rollup``): elsewhere None. The sampling's own CPU time is taken out of ``cpu_seconds``."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak_kib, self.cpu = 0, {"user": 0.0, "sys": 0.0}
        self._done, self.supported = threading.Event(), Path(f"/proc/{os.getpid()}/smaps_rollup").exists()

    def run(self) -> None:
        while self.supported and not self._done.wait(1.0):
            self.peak_kib = max(self.peak_kib, self._sample())
        used = resource.getrusage(resource.RUSAGE_THREAD)
        self.cpu = {"user": used.ru_utime, "sys": used.ru_stime}

    def stop(self) -> float | None:
        self._done.set()
        self.join()
        return round(self.peak_kib / 1024, 1) if self.supported else None

    @staticmethod
    def _sample() -> int:
        parent = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:  # (the command may hold spaces or parentheses: the parent pid follows the last ")")
                    parent[int(entry.name)] = int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    pass
        ours, grew = {os.getpid()}, True
        while grew:
            more = {pid for pid, pp in parent.items() if pp in ours} - ours
            ours |= more
            grew = bool(more)
        kib = 0
        for pid in ours:
            try:
                kib += next(int(line.split()[1]) for line in open(f"/proc/{pid}/smaps_rollup") if line.startswith("Pss:"))
            except (OSError, StopIteration):  # gone meanwhile
                pass
        from gpu_health.steps.pipeline import handover_folders

        for folder in handover_folders(ours):
            with contextlib.suppress(OSError):  # (a run removing its folder meanwhile)
                kib += sum(f.stat().st_size for f in Path(folder).iterdir() if f.is_file()) // 1024
        return kib


def _scenario(tmp: Path, gpus: int, start: str, end: str) -> Path:
    path = tmp / f"bench_{gpus}.yaml"
    if gpus == 1200:  # the quiet week of the suite: maintenance windows, deploys, retrain waves
        text = (REPO / "scenarios" / "suite" / "quiet_week.yaml").read_text()
        path.write_text(text.replace("start: '2026-11-02T00:00:00Z'", f"start: '{start}'")
                        .replace("end: '2026-11-09T00:00:00Z'", f"end: '{end}'"))
    else:
        path.write_text(f"seed: 7\nstart: '{start}'\nend: '{end}'\ncluster: {{gpus: {gpus}}}\n")
    return path


def _du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def simulate(data: Path, gpus: int, start: str, end: str) -> dict:
    from gpu_health.cli import simulate as sim

    landing = data / "landing"
    if (landing / "labels.parquet").exists():
        return {"simulate_seconds": 0.0}
    t = time.perf_counter()
    sim(str(_scenario(data, gpus, start, end)), str(landing), start, end, quiet=True)
    return {"simulate_seconds": round(time.perf_counter() - t, 1)}


def week(data: Path, gpus: int, direct: bool, workers: int = 2) -> dict:
    from gpu_health.cli import run

    name = "bulk" if direct else "dagster"
    db = data / f"{name}.db"
    t = time.perf_counter()
    summary = run(*WEEK, landing=str(data / "landing"), warehouse=f"sqlite:///{db}", quiet=True, direct=direct,
                  workers=workers)
    out = {"seconds": round(time.perf_counter() - t, 1), "partitions": summary["partitions"], "workers": workers}
    if not direct and "stage_seconds" in summary:
        out["stage_seconds"] = summary["stage_seconds"]
    if direct:
        out["step_seconds"] = summary.get("step_seconds")
        days = 7
        sql, store = _du(db) + sum(_du(p) for p in db.parent.glob(db.name + "-*")), _du(data / f"{name}.telemetry")
        out["store"] = {"sql_mb_per_day": round(sql / days / 1e6, 1), "telemetry_mb_per_day": round(store / days / 1e6, 1),
                        "total_mb_per_day": round((sql + store) / days / 1e6, 1)}
    return out


def live_partition(data: Path, gpus: int) -> dict:
    """History (untimed, bulk path) up to the partition, then the partition through the sensor's job."""
    import dagster as dg
    import pandas as pd

    from gpu_health.cli import run
    from gpu_health.defs.build import build_definitions
    from gpu_health.defs.resources import TelemetrySourceResource, WarehouseIOManager, WarehouseResource
    from gpu_health.settings import Settings

    p = pd.Timestamp(LIVE)
    history = gpus <= 10_000
    h0 = p - pd.Timedelta(hours=1) if history else p
    url = f"sqlite:///{data / 'live.db'}"
    landing = str(data / "landing")
    if history:
        run(h0.isoformat(), p.isoformat(), landing=landing, warehouse=url, quiet=True, direct=True)
    res = {"warehouse": WarehouseResource(url=url), "warehouse_io_manager": WarehouseIOManager(url=url),
           "source": TelemetrySourceResource(kind="landing", landing_dir=landing)}
    defs = build_definitions(Settings(partition_start=p.normalize().strftime("%Y-%m-%d-%H:%M")), res)
    instance = dg.DagsterInstance.ephemeral()
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    if not history:  # the day's capacity and the calendar, as the daily and hourly schedules have them
        defs.resolve_job_def("calendar_job").execute_in_process(instance=instance, run_config=quiet)
        daily = defs.resolve_job_def("daily_job")
        cost = [k for k in daily.asset_layer.executable_asset_keys if k.to_user_string() == "cost_capacity"]
        daily.execute_in_process(instance=instance, partition_key=f"{p:%Y-%m-%d}", asset_selection=cost, run_config=quiet)
    t = time.perf_counter()
    result = defs.resolve_job_def("five_minute_job").execute_in_process(
        instance=instance, partition_key=p.strftime("%Y-%m-%d-%H:%M"), run_config=quiet, raise_on_error=True)
    return {"seconds": round(time.perf_counter() - t, 2), "history": "1 h" if history else "none (cold start)",
            "success": result.success}


def partition_steps(data: Path, gpus: int, warehouse: str | None) -> dict:
    """History (untimed, as live_partition's) up to the partition, then the partition through the bulk path."""
    import pandas as pd

    from gpu_health.catalog import CATALOG
    from gpu_health.cli import run
    from gpu_health.contracts.table import SQL
    from gpu_health.storage.warehouse import Warehouse

    p = pd.Timestamp(LIVE)
    end = p + pd.Timedelta(minutes=5)
    url, telemetry = warehouse or f"sqlite:///{data / 'steps.db'}", str(data / "steps.telemetry")
    landing = str(data / "landing")
    if gpus <= 10_000:
        run((p - pd.Timedelta(hours=1)).isoformat(), p.isoformat(), landing=landing, warehouse=url,
            telemetry_dir=telemetry, quiet=True, direct=True)
    t = time.perf_counter()
    summary = run(p.isoformat(), end.isoformat(), landing=landing, warehouse=url, telemetry_dir=telemetry, quiet=True,
                  direct=True)
    seconds = round(time.perf_counter() - t, 2)
    wh = Warehouse(url, telemetry)
    rows = {name: len(wh.read_window(name, p, end)) for name, entry in sorted(CATALOG.items())
            if entry.storage == SQL}
    wh.engine.dispose()
    return {"seconds": seconds, "history": "1 h" if gpus <= 10_000 else "none (cold start)",
            "warehouse": "postgresql" if url.startswith("postgresql") else "sqlite",
            "step_seconds": summary.get("step_seconds"), "sql_rows": {k: v for k, v in rows.items() if v},
            "sql_rows_total": sum(rows.values())}


def suite(workers: int) -> dict:
    from gpu_health.cli import run
    from gpu_health.evaluation.harness import evaluate

    t = time.perf_counter()
    report = evaluate(str(REPO / "scenarios" / "suite"), run=run, workers=workers)
    overall = report.get("overall", {})
    return {"seconds": round(time.perf_counter() - t, 1), "scenarios": len(report.get("scenarios", [])),
            "workers": workers, "overall": overall}


def child(args) -> dict:
    warnings.filterwarnings("ignore")
    data = Path(args.data)
    out = {"name": args.only, "gpus": args.gpus}
    referenced = args.only != "simulate"  # (the landing zone's writing is untimed)
    before, ref_spent = _reference_cpu_seconds() if referenced else (None, None)
    memory = TotalMemory()
    memory.start()
    if args.only == "simulate":
        import pandas as pd

        p = pd.Timestamp(LIVE)
        start, end = WEEK
        if args.live:  # the partition, and the hour before it below fleet scale
            start = (p - pd.Timedelta(hours=1) if args.gpus <= 10_000 else p).isoformat()
            end = (p + pd.Timedelta(minutes=5)).isoformat()
        out.update(simulate(data, args.gpus, start, end))
    elif args.only in ("week_bulk", "week_dagster"):
        out.update(week(data, args.gpus, direct=args.only == "week_bulk", workers=args.workers))
    elif args.only == "live_partition":
        out.update(live_partition(data, args.gpus))
    elif args.only == "partition_steps":
        out.update(partition_steps(data, args.gpus, args.warehouse))
    elif args.only == "suite":
        out.update(suite(args.workers))
    else:
        raise SystemExit(f"unknown measurement {args.only}")
    out["peak_mib"] = _peak_mib()
    out["peak_total_mib"] = memory.stop()
    out["sampler_cpu_seconds"] = round(memory.cpu["user"] + memory.cpu["sys"], 1)  # (not in cpu_seconds)
    spent = {k: (ref_spent or {}).get(k, 0.0) + memory.cpu[k] for k in ("user", "sys")}
    out["cpu_seconds"] = _cpu_seconds(spent)
    if referenced:
        out["reference_cpu_seconds"] = [before, _reference_cpu_seconds()[0]]
    return out


def _spawn(name: str, data: Path, gpus: int, workers: int = 2, live: bool = False, warehouse: str | None = None) -> dict:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    cmd = [sys.executable, __file__, "--child", "--only", name, "--gpus", str(gpus), "--workers", str(workers),
           "--data", str(data), *(["--live"] if live else []), *(["--warehouse", warehouse] if warehouse else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not line.startswith("{"):
        return {"name": name, "gpus": gpus, "error": (proc.stderr or proc.stdout).strip().splitlines()[-3:]}
    return json.loads(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="week_bulk | week_dagster | live_partition | partition_steps | suite")
    ap.add_argument("--gpus", type=int, default=1200)
    ap.add_argument("--dagster", action="store_true", help="also the week through Dagster (about 10-20 minutes)")
    ap.add_argument("--workers", type=int, default=2,
                    help="processes: of the suite evaluation, of the week's runs, bulk and Dagster (2 = the sources "
                         "pipelined beside the rest, 3 = and the diagnosis beside the loss tree)")
    ap.add_argument("--data", help="keep the landing zone and warehouses here (default: a temporary directory)")
    ap.add_argument("--warehouse", help="partition_steps: the warehouse URL (default: a SQLite file in --data)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--live", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args), default=str), flush=True)
        return
    plan = [args.only] if args.only else ["week_bulk", *(["week_dagster"] if args.dagster else []), "live_partition"]
    with tempfile.TemporaryDirectory(dir=args.data) as tmp:
        for name in plan:
            if name == "suite":
                print(json.dumps(_spawn(name, Path(tmp), args.gpus, args.workers)), flush=True)
                continue
            live = name in ("live_partition", "partition_steps")
            data = Path(tmp) / (f"live_{args.gpus}" if live else f"week_{args.gpus}")
            data.mkdir(exist_ok=True)
            sim = _spawn("simulate", data, args.gpus, live=live)
            if "error" in sim:
                print(json.dumps(sim), flush=True)
                continue
            out = _spawn(name, data, args.gpus, args.workers, warehouse=args.warehouse)
            out.update({k: v for k, v in sim.items() if k == "simulate_seconds"})
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

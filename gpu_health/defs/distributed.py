"""A range through Dagster on the distributed profile: the runs of :func:`~gpu_health.defs.range_runs.run_range`
(the calendar, each day's capacity, the 5-minute range a day at a time as one run, each day's finance) launched on
the configured instance (``$DAGSTER_HOME``: PostgreSQL, ``deploy/dagster_distributed.yaml``), each run's steps sent
by Dagster's Celery executor to the workers (``GPU_HEALTH_EXECUTOR=celery``, ``scripts/celery_workers.sh``).

This process orchestrates, as the run worker the daemon starts for a queued run does: it walks a run's plan and
hands each step whose upstream steps are done to the broker; the workers load the code location by name
(``gpu_health.definitions``, from their own environment, which must be this one's), run the step against the
same instance, warehouse and telemetry store, and send its events back. Steps of one run that do not depend on
each other (the sources, the KPIs beside the baselines) run on different workers at once; a step that reads
earlier partitions of its own table walks its range in order inside one step, so the result does not depend on
which worker takes which step.

    python -m gpu_health.defs.distributed --start 2026-11-03T10:00:00Z --end 2026-11-03T12:00:00Z

``--backfill``: the same range as one Dagster asset backfill instead, as the UI's "Materialize" of a partition
range launches it (every asset: the calendar, the range's days, its 5-minute partitions), left to the daemon
(``dagster-daemon run``: its backfill daemon plans the runs from the assets' dependencies, including each
asset's own earlier partitions, and the QueuedRunCoordinator starts them under the instance's limits; each run's
steps go to the workers); this process only submits it and waits for it to finish.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import dagster as dg
import pandas as pd

from gpu_health.defs.range_runs import QUIET_LOGS, CodeLocation, _Runs, run_range
from gpu_health.settings import CELERY, Settings

CODE_LOCATION = "gpu_health.definitions"
PARTITION_TAG = "dagster/partition"


class CeleryRuns(_Runs):
    """The runs of a range on ``instance``, each through its job's executor (the workers'), not in process."""

    def __init__(self, instance: dg.DagsterInstance):
        from dagster._core.definitions.reconstruct import ReconstructableRepository

        from gpu_health.defs.build import build_definitions

        settings = Settings.from_env()
        if settings.executor != CELERY:
            raise ValueError(f"the distributed runs need GPU_HEALTH_EXECUTOR={CELERY} (here {settings.executor!r})")
        self.defs = build_definitions(settings)  # the same as the workers build: only its asset keys are read here
        self.instance = instance
        self.count = 0
        self.repo = ReconstructableRepository.for_module(CODE_LOCATION, "defs", working_directory=os.getcwd())

    def launch(self, job_name: str, *, partition_key: str | None = None, tags: dict | None = None,
               asset_selection=None):
        tags = {**(tags or {}), **({PARTITION_TAG: partition_key} if partition_key else {})}
        return dg.execute_job(self.repo.get_reconstructable_job(job_name), self.instance, run_config=QUIET_LOGS,
                              tags=tags, asset_selection=asset_selection, raise_on_error=False)


BACKFILL_DONE = ("COMPLETED_SUCCESS", "COMPLETED_FAILED", "COMPLETED", "FAILED", "CANCELED")


def range_subset(defs: dg.Definitions, start: pd.Timestamp, end: pd.Timestamp):
    """Every asset's partitions of ``[start, end)``: the 5-minute ones inside it, the days it touches, the
    unpartitioned (calendar) assets."""
    from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
    from dagster._core.definitions.events import AssetKeyPartitionKey
    from dagster._core.definitions.partitions.utils.time_window import TimeWindow

    graph = defs.resolve_asset_graph()
    wanted = set()
    for key in graph.materializable_asset_keys:
        parts = graph.get(key).partitions_def
        if parts is None:
            wanted.add(AssetKeyPartitionKey(key, None))
            continue
        # from the start of the partition holding ``start`` (a day's, for the daily assets)
        first = parts.time_window_for_partition_key(parts.get_partition_key_for_timestamp(start.timestamp()))
        wanted |= {AssetKeyPartitionKey(key, k)
                   for k in parts.get_partition_keys_in_time_window(TimeWindow(first.start, end))}
    return AssetGraphSubset.from_asset_partition_set(wanted, graph)


def launch_backfill(instance: dg.DagsterInstance, start: pd.Timestamp, end: pd.Timestamp) -> str:
    """Submit the range as one asset backfill (what the UI's launchPartitionBackfill stores); the daemon runs it."""
    import time

    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.utils import make_new_backfill_id

    from gpu_health.defs.build import build_definitions

    backfill = PartitionBackfill.from_asset_graph_subset(
        backfill_id=make_new_backfill_id(), backfill_timestamp=time.time(), tags={},
        dynamic_partitions_store=instance, title=f"range {start:%Y-%m-%d %H:%M} - {end:%Y-%m-%d %H:%M}",
        asset_graph_subset=range_subset(build_definitions(Settings.from_env()), start, end),
        description=None, run_config=QUIET_LOGS)
    instance.add_backfill(backfill)
    return backfill.backfill_id


def wait_for_backfill(instance: dg.DagsterInstance, backfill_id: str, timeout_s: float) -> dict:
    """Wait until the daemon finished the backfill: its status and its runs' (a run per asset group and range)."""
    import time

    from dagster._core.storage.dagster_run import RunsFilter

    began = time.monotonic()
    while (status := instance.get_backfill(backfill_id).status.value) not in BACKFILL_DONE:
        if time.monotonic() > began + timeout_s:
            break
        time.sleep(2)
    records = instance.get_run_records(filters=RunsFilter.for_backfill(backfill_id))
    spans = [(r.start_time, r.end_time) for r in records if r.start_time and r.end_time]
    # the most runs in flight at one time: how far the daemon and the queue let the backfill spread
    at_once = max((sum(s <= t < e for s, e in spans) for t, _ in spans), default=0)
    return {"backfill_id": backfill_id, "status": status, "seconds": round(time.monotonic() - began, 1),
            "runs": len(records), "max_runs_at_once": at_once,
            "runs_by_status": pd.Series([r.dagster_run.status.value for r in records]).value_counts().to_dict()
            if records else {}}


def _utc(text: str) -> pd.Timestamp:
    ts = pd.Timestamp(text)
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_health.defs.distributed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--start", required=True, help="first partition's start (UTC)")
    parser.add_argument("--end", required=True, help="end of the range (exclusive, UTC)")
    parser.add_argument("--backfill", action="store_true",
                        help="submit the range as one Dagster asset backfill for the daemon and wait for it")
    parser.add_argument("--timeout", type=float, default=3600, help="--backfill: seconds to wait at most")
    args = parser.parse_args(argv)
    url = os.environ.get("GPU_HEALTH_WAREHOUSE_URL", "")
    if not url:
        parser.error("GPU_HEALTH_WAREHOUSE_URL is not set (the workers read the same warehouse)")
    location = CodeLocation(url=url, telemetry_dir=os.environ.get("GPU_HEALTH_TELEMETRY_DIR", ""), source=None,
                            partition_start=Settings.from_env().partition_start)
    with dg.DagsterInstance.get() as instance:
        if args.backfill:
            summary = wait_for_backfill(instance, launch_backfill(instance, _utc(args.start), _utc(args.end)),
                                        args.timeout)
            print(json.dumps(summary, default=str))
            return 0 if summary["status"] == "COMPLETED_SUCCESS" and set(summary["runs_by_status"]) == {"SUCCESS"} else 1
        summary = run_range(location, _utc(args.start), _utc(args.end), runs=CeleryRuns(instance))
    print(json.dumps(summary, default=str))
    return 1 if summary.get("failed_partitions") else 0


if __name__ == "__main__":
    sys.exit(main())

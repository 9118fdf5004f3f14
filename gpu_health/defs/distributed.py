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


def _utc(text: str) -> pd.Timestamp:
    ts = pd.Timestamp(text)
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_health.defs.distributed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--start", required=True, help="first partition's start (UTC)")
    parser.add_argument("--end", required=True, help="end of the range (exclusive, UTC)")
    args = parser.parse_args(argv)
    url = os.environ.get("GPU_HEALTH_WAREHOUSE_URL", "")
    if not url:
        parser.error("GPU_HEALTH_WAREHOUSE_URL is not set (the workers read the same warehouse)")
    location = CodeLocation(url=url, telemetry_dir=os.environ.get("GPU_HEALTH_TELEMETRY_DIR", ""), source=None,
                            partition_start=Settings.from_env().partition_start)
    with dg.DagsterInstance.get() as instance:
        summary = run_range(location, _utc(args.start), _utc(args.end), runs=CeleryRuns(instance))
    print(json.dumps(summary, default=str))
    return 1 if summary.get("failed_partitions") else 0


if __name__ == "__main__":
    sys.exit(main())

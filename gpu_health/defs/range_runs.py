"""A range through Dagster: the runs ``gpu-health run`` (without ``--direct``) launches, in one process or
pipelined over several.

The order is the calendar; each day's ``cost_capacity`` (the loss tree needs what Finance pays for); the 5-minute
assets a day at a time, each day one run over its partition range (as a Dagster single-run backfill does); then
each day's finance tables. Every run executes in process on an ephemeral instance (the run history of a CLI run
is not kept; the tables are what it is for).

With ``workers`` > 1 the 5-minute runs are pipelined as the bulk path's are (:func:`gpu_health.steps.direct.
stages`): each stage -- the sources; the loss tree and KPIs; the diagnosis -- is a process with its own code
location and instance, running its assets of each day as one run (``asset_selection``) once the stage before
finished that day. :func:`~gpu_health.steps.direct.check_stages` proves from the declared reads that no stage
reads what a later stage writes, nor an earlier stage's tables past its window, so the tables are those of one
process (``test_direct_path.py``). Half of a Dagster range run's time is the framework's events (a planned and a
materialization event per asset and partition, ~5 ms each on the in-memory instance); they are spread over the
stages with the assets, so on two cores the week takes about half the time of one process.

A day's run that is not the range's last carries :data:`~gpu_health.defs.common.JUDGED_LATER_TAG`: the next day's
run follows it, so the alerts step does not re-derive the partitions after its window (the bulk path's
``judged_later``); with stages this is required, since the loss tree of the next day may already be stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from gpu_health.constants import PARTITION, PARTITION_KEY_FMT, day_chunks
from gpu_health.defs.common import JUDGED_LATER_TAG, RANGE_END_TAG, RANGE_START_TAG
from gpu_health.steps.direct import stages
from gpu_health.steps.pipeline import run_stages, stage_loop

QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass(frozen=True)
class CodeLocation:
    """What a process needs to build the code location a range runs in (picklable: a stage's process builds its
    own). ``source``: a :class:`~gpu_health.defs.resources.SourceSpec`."""

    url: str
    telemetry_dir: str
    source: object
    partition_start: str

    def definitions(self):
        from gpu_health.defs.build import build_definitions
        from gpu_health.defs.resources import (WarehouseIOManager, WarehouseResource, default_resources,
                                               warehouse_url_field)
        from gpu_health.settings import Settings

        resources, url = default_resources(), warehouse_url_field(self.url)  # a password stays out of the defs
        resources.update(warehouse=WarehouseResource(url=url, telemetry_dir=self.telemetry_dir),
                         warehouse_io_manager=WarehouseIOManager(url=url, telemetry_dir=self.telemetry_dir),
                         source=self.source.resource())
        return build_definitions(Settings(partition_start=self.partition_start), resources)


def _root_message(error) -> str:
    """The innermost cause of a step failure: the user's exception (it names file and column), not
    Dagster's "Error occurred while executing op" wrapper around it."""
    while error.cause is not None:
        error = error.cause
    return error.message.strip()


def _contract_findings(ev, fragment: dict) -> None:
    """Files quarantined whole and extra columns dropped, from a contract check's metadata, into ``fragment``."""
    table = ev.asset_key.to_user_string()
    meta = ev.metadata or {}
    files = meta.get("quarantined_files")
    for f in (files.value if files is not None else []) or []:
        entry = {"source": table, **f}
        if entry not in fragment.setdefault("quarantined_files", []):  # a daily table is read again when it settles
            fragment["quarantined_files"].append(entry)
    dropped = meta.get("dropped_columns")
    for col, origins in ((dropped.value if dropped is not None else {}) or {}).items():
        fragment.setdefault("dropped_columns", {}).setdefault(table, {})[col] = origins


class _Runs:
    """The runs of one process: its code location and instance; each run's failed checks and contract findings
    into ``fragment`` (the run's summary, or a stage's report of a day), each once; a failed run's partitions
    into its ``failed_partitions`` (job, partitions, step and the user's error): the range's other runs go on."""

    def __init__(self, location: CodeLocation):
        import dagster as dg

        self.defs = location.definitions()
        self.instance = dg.DagsterInstance.ephemeral()
        self.count = 0

    def launch(self, job_name: str, **kw):
        """One run of ``job_name`` in this process (``kw``: ``partition_key``, ``asset_selection``, ``tags``)."""
        return self.defs.resolve_job_def(job_name).execute_in_process(
            instance=self.instance, raise_on_error=False, run_config=QUIET_LOGS, **kw)

    def execute(self, job_name: str, fragment: dict, **kw):
        result = self.launch(job_name, **kw)
        self.count += 1
        if not result.success:  # recorded, never raised: the range's other runs go on (``failed_partitions``)
            failures = [e for e in result.all_events if e.is_step_failure]
            tags = kw.get("tags", {})
            where = kw.get("partition_key") or (f"{tags[RANGE_START_TAG]} .. {tags[RANGE_END_TAG]}"
                                                if RANGE_START_TAG in tags else "calendar")
            for e in failures or [None]:
                entry = {"job": job_name, "partitions": where, "step": e.step_key if e else None,
                         "reason": _root_message(e.event_specific_data.error) if e else "see logs"}
                if entry not in fragment.setdefault("failed_partitions", []):
                    fragment["failed_partitions"].append(entry)
        for ev in result.get_asset_check_evaluations():
            if not ev.passed:
                name = f"{ev.asset_key.to_user_string()}:{ev.check_name}"
                if name not in fragment.setdefault("failed_checks", []):
                    fragment["failed_checks"].append(name)
            _contract_findings(ev, fragment)
        return result

    def day_keys(self, job_name: str, names: set[str]) -> list:
        return [k for k in self.defs.resolve_job_def(job_name).asset_layer.executable_asset_keys
                if k.to_user_string() in names]


def _range_tags(c_start: pd.Timestamp, c_end: pd.Timestamp, range_end: pd.Timestamp) -> dict:
    tags = {RANGE_START_TAG: c_start.strftime(PARTITION_KEY_FMT),
            RANGE_END_TAG: (c_end - PARTITION).strftime(PARTITION_KEY_FMT)}
    if c_end < range_end:  # the next day's run follows: nothing after this window is re-derived here
        tags[JUDGED_LATER_TAG] = "true"
    return tags


def _stage_runs(k: int, location: CodeLocation, processes: int, chunks, inbox, outbox, reports) -> None:
    """Stage ``k`` of :func:`~gpu_health.steps.direct.stages` in its process: each day, once the stage before
    finished it, one run of the stage's 5-minute assets over the day's partitions."""

    def setup():
        runs = _Runs(location)
        keys = runs.day_keys("five_minute_job", {t for step in stages(processes)[k] for t in step.writes})

        def work(i, c0, c1, handed):
            fragment = {}
            t0 = time.time()
            runs.execute("five_minute_job", fragment, asset_selection=keys, tags=_range_tags(c0, c1, chunks[-1][1]))
            return fragment, {f"stage {k}": time.time() - t0}, None
        return work

    stage_loop(k, chunks, inbox, outbox, reports, setup)


def run_range(location: CodeLocation, start: pd.Timestamp, end: pd.Timestamp, *, workers: int = 1,
              progress: Callable[[pd.Timestamp, pd.Timestamp], None] | None = None, runs: _Runs | None = None) -> dict:
    """Every asset over ``[start, end)`` through Dagster runs; returns the summary ``gpu-health run`` prints (runs,
    partitions, failed checks, files quarantined, columns dropped, failed partitions with their reasons; with
    stages, each stage's seconds). A failed run never stops the range: the others run and it is reported.
    ``progress(c_start, c_end)`` is called as each day's run is done. ``runs``: how each run is launched (default
    in this process; :class:`gpu_health.defs.distributed.CeleryRuns`: on the instance, its steps on the workers)."""
    runs = runs if runs is not None else _Runs(location)
    summary: dict = {"runs": 0, "partitions": 0}
    runs.execute("calendar_job", summary)
    days = pd.date_range(start.normalize(), end, freq="D", inclusive="left")
    cost_only = runs.day_keys("daily_job", {"cost_capacity"})
    for day in days:  # capacity first: the 5-minute loss tree needs what Finance pays for
        runs.execute("daily_job", summary, partition_key=day.strftime("%Y-%m-%d"), asset_selection=cost_only)
    chunks = list(day_chunks(start, end))

    def on_chunk(i):
        c_start, c_end = chunks[i]
        summary["partitions"] += int((c_end - c_start) / PARTITION)
        if progress is not None:
            progress(c_start, c_end)

    cut = stages(workers) if workers > 1 and len(chunks) > 1 else None
    if cut is not None:
        seconds: dict[str, float] = {}
        run_stages(_stage_runs, [(location, workers)] * len(cut), chunks, summary, seconds, on_chunk)
        summary["runs"] += len(cut) * len(chunks)
        summary["stage_seconds"] = {k: round(v, 1) for k, v in seconds.items()}
    else:
        for i, (c_start, c_end) in enumerate(chunks):
            runs.execute("five_minute_job", summary, tags=_range_tags(c_start, c_end, end))
            on_chunk(i)
    for day in days:  # then settle each day (failures of the next day settle back into it)
        runs.execute("daily_job", summary, partition_key=day.strftime("%Y-%m-%d"))
    if not summary.get("failed_partitions"):  # re-derived from a complete range only (a failed piece is re-run first)
        rederive(runs, location, end, summary)
    summary["runs"] += runs.count
    return summary


def rederive(runs: _Runs, location: CodeLocation, end: pd.Timestamp, summary: dict) -> None:
    """The range's last window is a correction of the stored partitions after it: Dagster runs of the derived
    5-minute assets over them, a day's range a run, up to the bound (:func:`gpu_health.steps.rederive.plan`; each
    run carries JUDGED_LATER_TAG: the next follows, and past the bound the partitions are stale, reported), then
    the stored finance days they touch: the bulk path's :func:`~gpu_health.steps.rederive.rederive`."""
    from gpu_health.steps import rederive as R
    from gpu_health.steps.graph import DAILY, FIVE_MINUTE
    from gpu_health.storage.warehouse import Warehouse

    wh = Warehouse(location.url, location.telemetry_dir or None)
    plan = R.plan(wh, end)
    summary.update(plan.summary())
    if plan.stop <= plan.start:
        return
    derived = runs.day_keys("five_minute_job", {t for s in R.derived(FIVE_MINUTE) for t in s.writes})
    for c0, c1 in day_chunks(plan.start, plan.stop):
        runs.execute("five_minute_job", summary, asset_selection=derived,
                     tags={**_range_tags(c0, c1, c1), JUDGED_LATER_TAG: "true"})
    days = R.stored_days(wh, R.finance_days(plan.start, plan.stop), R.derived(DAILY))
    for day in days:
        runs.execute("daily_job", summary, partition_key=day.strftime("%Y-%m-%d"))
    if days:
        summary["rederived_days"] = [d.strftime("%Y-%m-%d") for d in days]

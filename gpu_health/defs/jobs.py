"""Jobs and schedules: the 5-minute path, the daily finance path, the calendar."""

import dagster as dg

from gpu_health.defs.executors import job_executor
from gpu_health.settings import IN_PROCESS

FIVE_MINUTE_GROUPS = ["telemetry", "kpis", "baselines", "diagnosis", "alerting", "status"]


# A run tag naming the job: the run queue limits each job's runs by it (deploy/dagster_distributed.yaml)
JOB_TAG = "gpu_health/job"


def build_jobs(assets: list[dg.AssetsDefinition], five_minute, daily, executor: str = IN_PROCESS):
    """The jobs and schedules; ``executor``: every job's (:func:`~gpu_health.defs.executors.job_executor`)."""
    run_on = job_executor(executor)
    five_keys = [k for a in assets if a.partitions_def == five_minute for k in a.keys]
    daily_keys = [k for a in assets if a.partitions_def == daily for k in a.keys]
    calendar_keys = [k for a in assets if a.partitions_def is None for k in a.keys]
    five_job = dg.define_asset_job("five_minute_job", selection=dg.AssetSelection.assets(*five_keys),
                                   partitions_def=five_minute, executor_def=run_on, tags={JOB_TAG: "five_minute_job"},
                                   description="Every 5-minute asset of one partition (or a range, as one run).")
    daily_job = dg.define_asset_job("daily_job", selection=dg.AssetSelection.assets(*daily_keys),
                                    partitions_def=daily, executor_def=run_on, tags={JOB_TAG: "daily_job"},
                                    description="Finance's daily assets: cost and capacity, wasted spend.")
    calendar_job = dg.define_asset_job("calendar_job", selection=dg.AssetSelection.assets(*calendar_keys),
                                       executor_def=run_on, tags={JOB_TAG: "calendar_job"},
                                       description="Unpartitioned reference tables (the maintenance calendar).")
    schedules = [
        dg.build_schedule_from_partitioned_job(daily_job, hour_of_day=0, minute_of_hour=20,
                                               default_status=dg.DefaultScheduleStatus.RUNNING),
        dg.ScheduleDefinition(job=calendar_job, cron_schedule="7 * * * *",
                              default_status=dg.DefaultScheduleStatus.RUNNING),
    ]
    return five_job, daily_job, calendar_job, schedules

"""The Definitions of the code location, built from settings and resources (the range runs build their own)."""

import dagster as dg

from gpu_health.defs.status.assets import build_status_assets
from gpu_health.defs.alerting.assets import build_alerting_assets
from gpu_health.defs.alerting.sensors import alertmanager_delivery_sensor
from gpu_health.defs.baselines.assets import build_baseline_assets
from gpu_health.defs.diagnosis.assets import build_diagnosis_assets
from gpu_health.defs.finance.assets import build_finance_assets
from gpu_health.defs.executors import job_executor
from gpu_health.defs.jobs import build_jobs
from gpu_health.defs.kpis.assets import build_kpi_assets
from gpu_health.defs.resources import default_resources
from gpu_health.defs.telemetry.assets import build_telemetry_assets
from gpu_health.defs.telemetry.sensors import build_partition_sensor, build_settle_sensor
from gpu_health.partitions import daily_partitions, five_minute_partitions
from gpu_health.settings import Settings


def build_definitions(settings: Settings, resources: dict | None = None) -> dg.Definitions:
    five_minute = five_minute_partitions(settings.partition_start)
    daily = daily_partitions(settings.partition_start)
    assets = [*build_telemetry_assets(five_minute, daily), *build_baseline_assets(five_minute), *build_kpi_assets(five_minute),
              *build_alerting_assets(five_minute), *build_diagnosis_assets(five_minute),
              *build_status_assets(five_minute),
              *build_finance_assets(daily)]
    five_job, daily_job, calendar_job, schedules = build_jobs(assets, five_minute, daily, settings.executor)
    return dg.Definitions(
        assets=assets,
        jobs=[five_job, daily_job, calendar_job],
        schedules=schedules,
        sensors=[build_partition_sensor(five_job, five_minute), build_settle_sensor(five_job, daily_job),
                 alertmanager_delivery_sensor],
        resources=resources if resources is not None else default_resources(),
        executor=job_executor(settings.executor),
    )


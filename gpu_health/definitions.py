"""The gpu_health code location: only assembles the Definitions."""

import dagster as dg

from gpu_health.defs.alerting.assets import build_alerting_assets
from gpu_health.defs.alerting.sensors import AlertmanagerResource, alertmanager_delivery_sensor
from gpu_health.defs.baselines.assets import build_baseline_assets
from gpu_health.defs.diagnosis.assets import build_diagnosis_assets
from gpu_health.defs.finance.assets import build_finance_assets
from gpu_health.defs.jobs import build_jobs
from gpu_health.defs.kpis.assets import build_kpi_assets
from gpu_health.defs.resources import TelemetrySourceResource, WarehouseIOManager, WarehouseResource
from gpu_health.defs.telemetry.assets import build_telemetry_assets
from gpu_health.defs.telemetry.sensors import build_partition_sensor
from gpu_health.partitions import daily_partitions, five_minute_partitions
from gpu_health.settings import Settings
from gpu_health.sources.base import DEFAULT_ABSENT_AFTER

WAREHOUSE_URL = dg.EnvVar("GPU_HEALTH_WAREHOUSE_URL")
TELEMETRY_DIR = dg.EnvVar("GPU_HEALTH_TELEMETRY_DIR")


def default_resources() -> dict:
    """Resources from the environment (README: Configuration)."""
    url = WAREHOUSE_URL.get_value("sqlite:///var/warehouse.db")
    telemetry_dir = TELEMETRY_DIR.get_value("")  # empty: beside the warehouse (WarehouseResource)
    return {
        "warehouse": WarehouseResource(url=url, telemetry_dir=telemetry_dir),
        "warehouse_io_manager": WarehouseIOManager(url=url, telemetry_dir=telemetry_dir),
        "source": TelemetrySourceResource(
            kind=dg.EnvVar("GPU_HEALTH_SOURCE").get_value("simulator"),
            scenario=dg.EnvVar("GPU_HEALTH_SCENARIO").get_value(""),
            live=dg.EnvVar("GPU_HEALTH_LIVE").get_value("false").lower() == "true",
            landing_dir=dg.EnvVar("GPU_HEALTH_LANDING_DIR").get_value("var/landing"),
            prometheus_url=dg.EnvVar("GPU_HEALTH_PROMETHEUS_URL").get_value(""),
            prometheus_region=dg.EnvVar("GPU_HEALTH_PROMETHEUS_REGION").get_value(""),
            prometheus_region_label=dg.EnvVar("GPU_HEALTH_PROMETHEUS_REGION_LABEL").get_value("region"),
            prometheus_selector=dg.EnvVar("GPU_HEALTH_PROMETHEUS_SELECTOR").get_value(""),
            prometheus_labels=dg.EnvVar("GPU_HEALTH_PROMETHEUS_LABELS").get_value(""),
            prometheus_step=dg.EnvVar("GPU_HEALTH_PROMETHEUS_STEP").get_value("60s"),
            prometheus_ready_lag=dg.EnvVar("GPU_HEALTH_PROMETHEUS_READY_LAG").get_value("2min"),
            absent_after=dg.EnvVar("GPU_HEALTH_ABSENT_AFTER").get_value(DEFAULT_ABSENT_AFTER),
            slurm_dir=dg.EnvVar("GPU_HEALTH_SLURM_DIR").get_value(""),
            ipmi_racks=dg.EnvVar("GPU_HEALTH_IPMI_RACKS").get_value(""),
            ipmi_hall_metric=dg.EnvVar("GPU_HEALTH_IPMI_HALL_METRIC").get_value(""),
            prometheus_kube_state_metrics=dg.EnvVar("GPU_HEALTH_PROMETHEUS_KUBE_STATE_METRICS").get_value("false"),
            prometheus_serving=dg.EnvVar("GPU_HEALTH_PROMETHEUS_SERVING").get_value("false"),
            prometheus_serving_metrics=dg.EnvVar("GPU_HEALTH_PROMETHEUS_SERVING_METRICS").get_value(""),
        ),
        "alertmanager": AlertmanagerResource(
            url=dg.EnvVar("GPU_HEALTH_ALERTMANAGER_URL").get_value(""),
            generator_url=dg.EnvVar("GPU_HEALTH_ALERT_LINK").get_value(""),
        ),
    }


def build_definitions(settings: Settings, resources: dict | None = None) -> dg.Definitions:
    five_minute = five_minute_partitions(settings.partition_start)
    daily = daily_partitions(settings.partition_start)
    assets = [*build_telemetry_assets(five_minute, daily), *build_baseline_assets(five_minute), *build_kpi_assets(five_minute),
              *build_alerting_assets(five_minute), *build_diagnosis_assets(five_minute),
              *build_finance_assets(daily)]
    five_job, daily_job, calendar_job, schedules = build_jobs(assets, five_minute, daily)
    return dg.Definitions(
        assets=assets,
        jobs=[five_job, daily_job, calendar_job],
        schedules=schedules,
        sensors=[build_partition_sensor(five_job, five_minute), alertmanager_delivery_sensor],
        resources=resources if resources is not None else default_resources(),
        executor=dg.in_process_executor,
    )


defs = build_definitions(Settings.from_env())

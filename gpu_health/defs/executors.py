"""The jobs' executor: in process (the default), or Dagster's Celery executor for the production profile.

The Celery executor sends each step of a run to a broker as a task; any worker listening on it runs the step
against the same instance (PostgreSQL run and event storage), warehouse and shared telemetry store, and sends its
events back. Its settings live in one YAML file (``GPU_HEALTH_CELERY_CONFIG``, default ``deploy/celery.yaml``)
read by both sides: the run's orchestrator (this executor) and each worker (``dagster-celery worker start -y``,
``scripts/celery_workers.sh``). The broker and result backend URLs come from the environment
(``GPU_HEALTH_CELERY_BROKER``, ``GPU_HEALTH_CELERY_BACKEND``).
"""

import os
from pathlib import Path

import dagster as dg
import yaml

from gpu_health.settings import CELERY, IN_PROCESS

CELERY_CONFIG_ENV = "GPU_HEALTH_CELERY_CONFIG"
DEFAULT_CELERY_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "celery.yaml"


def celery_config() -> dict:
    """The ``execution.config`` block of the Celery YAML: the executor's config, as the workers read it."""
    path = Path(os.environ.get(CELERY_CONFIG_ENV) or DEFAULT_CELERY_CONFIG)
    if not path.is_file():
        raise FileNotFoundError(f"the Celery executor's config {path} does not exist (set {CELERY_CONFIG_ENV})")
    return (yaml.safe_load(path.read_text()) or {}).get("execution", {}).get("config", {})


def job_executor(kind: str = IN_PROCESS) -> dg.ExecutorDefinition:
    """The executor of every job: ``in_process`` or ``celery`` (:data:`gpu_health.settings.CELERY`)."""
    if kind == IN_PROCESS:
        return dg.in_process_executor
    if kind == CELERY:
        from dagster_celery import celery_executor

        return celery_executor.configured(celery_config(), name="gpu_health_celery")
    raise ValueError(f"unknown executor {kind!r}")

"""Deployment settings read once, where the Definitions are assembled.

Everything a resource can take is a ``ConfigurableResource`` field fed by
``dg.EnvVar``; only what must exist before resources do (the partition start,
which shapes the asset graph, and the jobs' executor) is read here.
"""

import os
from dataclasses import dataclass

from gpu_health.partitions import DEFAULT_START

# the jobs' executors (GPU_HEALTH_EXECUTOR): every step in the run's own process (the default, `make dev`), or
# each step a task on the Celery workers of the production profile (deploy/celery.yaml, docs/deployment.md)
IN_PROCESS, CELERY = "in_process", "celery"


@dataclass(frozen=True)
class Settings:
    partition_start: str = DEFAULT_START
    executor: str = IN_PROCESS

    def __post_init__(self):
        if self.executor not in (IN_PROCESS, CELERY):
            raise ValueError(f"GPU_HEALTH_EXECUTOR must be {IN_PROCESS!r} or {CELERY!r}, got {self.executor!r}")

    @classmethod
    def from_env(cls) -> "Settings":
        return cls(partition_start=os.environ.get("GPU_HEALTH_PARTITION_START", DEFAULT_START),
                   executor=os.environ.get("GPU_HEALTH_EXECUTOR", IN_PROCESS) or IN_PROCESS)

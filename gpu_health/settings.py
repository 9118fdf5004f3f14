"""Deployment settings read once, where the Definitions are assembled.

Everything a resource can take is a ``ConfigurableResource`` field fed by
``dg.EnvVar``; only what must exist before resources do (the partition start,
which shapes the asset graph) is read here.
"""

import os
from dataclasses import dataclass

from gpu_health.partitions import DEFAULT_START


@dataclass(frozen=True)
class Settings:
    partition_start: str = DEFAULT_START

    @classmethod
    def from_env(cls) -> "Settings":
        return cls(partition_start=os.environ.get("GPU_HEALTH_PARTITION_START", DEFAULT_START))

"""The gpu_health code location: only assembles the Definitions (its resources from the environment:
:func:`gpu_health.defs.resources.default_resources`, importable without building them)."""

from gpu_health.defs.build import build_definitions
from gpu_health.settings import Settings

defs = build_definitions(Settings.from_env())

"""The gpu_health code location: only assembles the Definitions (its resources from the environment:
:func:`gpu_health.defs.resources.default_resources`, importable without building them)."""

import warnings

import dagster as dg

# Three beta APIs the code location builds on, pinned with dagster (requirements.lock): the pandera contracts as
# Dagster types (dagster-pandera), a backfill policy that runs a range of partitions as one run, and a look-back
# drawn on earlier partitions that may precede the first one. Dagster warns once per asset each time a process
# loads the location (the code server, every run), which buried the log of `make dev` under a thousand identical
# lines; any other beta API still warns.
for api in ("Function `pandera_schema_to_dagster_type`", "Parameter `backfill_policy`",
            "Parameter `allow_nonexistent_upstream_partitions`"):
    warnings.filterwarnings("ignore", message=api, category=dg.BetaWarning)

from gpu_health.defs.build import build_definitions  # noqa: E402 -- after the filters: the imports warn
from gpu_health.settings import Settings

defs = build_definitions(Settings.from_env())

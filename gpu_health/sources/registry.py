"""The registry of source adapters: name -> factory, plus per-table routing.

``make_source("simulator", scenario=...)``, ``make_source("landing", landing_dir=...)``,
``make_source("prometheus", url=...)``, ``make_source("slurm", sacct_dir=...)``.
A :class:`RoutedSource` serves each table from the first adapter that has it,
e.g. Prometheus for telemetry, Slurm for scheduler tables, the landing zone for
the rest.
"""

from importlib import import_module

import pandas as pd

from gpu_health.sources.base import Fetched

# name -> "module:factory" (imported lazily so optional adapters cost nothing)
ADAPTERS = {
    "simulator": "gpu_health.sources.simulator:SimulatorSource",
    "landing": "gpu_health.sources.landing:LandingSource",
    "prometheus": "gpu_health.sources.prometheus:PrometheusSource",
    "slurm": "gpu_health.sources.slurm:SlurmSource",
    "ipmi": "gpu_health.sources.ipmi:IpmiFacilitySource",  # facility_telemetry from ipmi_exporter series
}


def make_source(name: str, *args, **kwargs):
    if name not in ADAPTERS:
        raise ValueError(f"unknown source {name!r}; known: {sorted(ADAPTERS)}")
    module, attr = ADAPTERS[name].split(":")
    return getattr(import_module(module), attr)(*args, **kwargs)


class RoutedSource:
    """Serves each table from the first of ``sources`` that provides it."""

    name = "routed"

    def __init__(self, *sources):
        self.sources = sources

    def tables(self) -> frozenset[str]:
        out = frozenset()
        for s in self.sources:
            out |= s.tables()
        return out

    def for_table(self, table: str):
        for s in self.sources:
            if table in s.tables():
                return s
        raise KeyError(f"no configured source provides {table}")

    def version(self, table: str, start, now=None) -> str | None:
        """Readiness token of a 5-minute partition of ``table`` from the adapter that serves it, judged at ``now``
        (None while it is not ready); an adapter without one is ready once the partition closed."""
        src = self.for_table(table)
        return src.version(table, start, now=now) if hasattr(src, "version") else "clock"

    def read(self, table: str, start, end) -> Fetched:
        return self.for_table(table).read(table, pd.Timestamp(start) if start is not None else None,
                                          pd.Timestamp(end) if end is not None else None)

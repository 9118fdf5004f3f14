"""The supporting KPIs of the metric framework, as code: defined in :mod:`gpu_health.contracts.kpi_catalog`.

The catalog is what the ``kpi_values`` contract checks a row's series and unit against, so it lives with the
contracts (a contract imports no metric code); :mod:`gpu_health.metrics.kpis` computes the series it names and
``docs/kpis.md`` is generated from it (``python -m gpu_health.metrics.kpi_docs``). Its names are re-exported here
for the code that reads the catalog as part of the metrics.
"""

from gpu_health.contracts.kpi_catalog import (  # noqa: F401
    ALERT_INTENTS, CATALOG, DIMENSIONS, FACILITY_KPIS, INVENTORY_KPIS, KINDS, LAYERS, NORTH_STAR, OWNERS, SEVERITIES,
    SUPPORTING, TIERS, Component, Kpi, by_name, series_units,
)

"""The supporting KPIs of one window, one row per series x slice x 5-minute partition.

Pure pandas (no Dagster). :func:`compute_kpis` takes the source frames of a
window ``[start, end)`` -- one 5-minute partition or a whole day; everything is
grouped by the row's timestamp floored to 5 minutes -- and returns the
``kpi_values`` table (contract :class:`KpiValues`). What each series means,
who owns it and how it degrades is in :mod:`gpu_health.metrics.kpi_catalog`.

Rows outside ``[start, end)`` are history: they answer look-ups (a job's
submission time, whether it was running at its SLA deadline) but are never
counted. Job attributes come from the window's ``job_metadata`` and from
``job_metadata_lookup`` (long-running jobs landed their metadata days ago); a
job found in neither counts under ``'unknown'`` and is never dropped.

Slicing (per KPI, ``Kpi.dimensions``; the other dimension columns hold ``'*'``):

* region x sku -- allocation_rate, hw_fault_rate, comm_health,
  cost_per_productive_gpu_hour: hardware, fabric and price live there.
* region x sku x workload_class -- fragmentation: free GPUs where they are,
  against the smallest blocked job of each class (queues are per class).
* region x workload_class -- job_failure_rate: a deploy hits a region's nodes;
  interactive and training jobs fail differently.
* workload_class -- queue_wait_p95 and sla_attainment: a pending job has no
  region yet, and queues are per class.
* region x sku x workload_class -- step_time_inflation: the baseline is per
  SKU, the causes per region, the jobs per class.
* team -- gaming_guardrails: gaming is a team's choice.

Only the finest slice is emitted (no roll-ups): ratio series carry
``numerator`` and ``denominator`` so that any roll-up is a sum of both; the
quantile series (queue_wait_p95) carries ``numerator`` = NaN and the number of
waits as ``denominator``.

Status per row: ``no_data`` when the slice had nothing to measure in the
partition (no rows, or a zero denominator); ``degraded`` when it had, but under
:data:`MIN_COVERAGE` of them report the optional field or input the series
needs; ``ok`` otherwise. ``value`` is NaN unless the status is ``ok`` -- a
missing reading is never a zero. For region x sku KPIs every region x SKU of
the partition's inventory (its node inventory as known when it closed, its
day's cost_capacity rows, its GPU and node rows) gets a row, so a silent
region x SKU shows as ``no_data`` rather than as a missing row; every other
slice gets a row in the partitions it was seen in, and a series seen nowhere in
a partition one ``*`` row. A partition's rows depend on nothing after its end:
the sensor's 5-minute run and a day's run of the same partition write the same
rows.
"""

# The package's names, re-exported so that ``from gpu_health.metrics.kpis import X`` keeps working. The context and
# the helpers the families share are in context.py, one module per KPI family beside it, the driver in driver.py;
# the modules import each other, never this file.
from gpu_health.contracts.derived import SERIES_UNITS, KpiValues  # noqa: F401
from gpu_health.metrics.kpis.context import (FAILED_EXITS, MIN_COVERAGE, OUT_COLUMNS, PENDING_GRACE,  # noqa: F401
                                             QUANTILE, STAR, UNKNOWN, UNSCHEDULABLE, UTC_NS, _Context)
from gpu_health.metrics.kpis.driver import compute_kpis, pending_jobs  # noqa: F401
from gpu_health.metrics.kpis.failures import REASON_CLASSES  # noqa: F401
from gpu_health.metrics.kpis.scheduling import _group_quantile  # noqa: F401

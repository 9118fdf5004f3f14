"""The table catalogue: every table the pipeline stores, declared once.

Rule: a table exists because it has an entry here, and everything else that
names tables derives from that entry — the SQL warehouse schema
(:mod:`gpu_health.storage.schema`, and its reviewed rendering ``sql/schema.sql``),
which tables the columnar telemetry store holds instead, the source assets'
owners and grains (``defs/telemetry/assets.py``), and the table list of
``docs/tables.md`` (:func:`markdown`, checked by a test), every Dagster asset's
description, owners, group and column schema (``defs.common.asset_from_catalog``),
and every list of sources (the 5-minute, optional, daily and calendar ones). The
reason is drift: a table described in four places is described four ways, and the
places that disagree are found by users, not by tests.

A source's entry is declared beside its contract (``SOURCE_TABLES`` in
:mod:`gpu_health.contracts.models`); the derived and quality tables' here. Each
:class:`~gpu_health.contracts.table.Table` says

* ``model`` — its pandera contract (the columns, types, units and grain); ``None``
  only for the two quarantine tables, whose SQLAlchemy declaration in
  :mod:`gpu_health.storage.schema` is the contract, since they hold any other
  table's broken rows as text;
* ``partition_column`` — the column that places a row in a partition (``None``: the
  table is read whole, e.g. the maintenance calendar);
* ``cadence`` — the time grain of its rows: ``minute`` (a sample a minute, written a
  5-minute partition at a time), ``five_minute`` (one value per partition, the
  cadence of the steps that run on 5-minute partitions), ``daily`` (one per day),
  ``event`` (one per event, landed in the partition of its time) or ``calendar``
  (not partitioned);
* ``storage`` — ``sql`` (the SQL warehouse, where the KPI, loss-tree, alert and
  finance tables are joined) or ``columnar`` (Parquet in the telemetry store: see
  the comment above ``_TABLES`` for why);
* ``group`` — the Dagster asset group (= folder under ``defs/``);
* ``owner`` — the team that answers for it (``infra``, ``ml_platform``, ``finance``);
* ``grain`` — one row per what, in words (the model's ``Config.unique`` says it in
  columns);
* ``description`` — what it holds, for the docs and the Dagster UI (the only one);
* for a source: ``landing`` — its landing layout (``five_minute``: a file per
  5-minute partition, ``daily``: a file per day, ``calendar``: one whole file),
  ``optional`` — the optional family it belongs to (``serving``, ``facility``,
  ``platform``; ``None``: every producer writes it and a partition waits for it)
  and ``optional_columns`` — columns added after files were written.

This module imports the models it lists and nothing that reads or writes data,
so the storage layer can build its schema from it without importing the
metric logic back (the old ``metrics`` <-> ``storage.schema`` cycle).
"""

from __future__ import annotations

from gpu_health.constants import OWNERS  # noqa: F401  (re-exported: the owners an entry may name)
from gpu_health.contracts.models import SOURCE_TABLES
from gpu_health.contracts.table import (  # noqa: F401  (re-exported: the vocabularies and the entry)
    CADENCES,
    CALENDAR,
    COLUMNAR,
    DAILY,
    EVENT,
    EVERY_MINUTE,
    FIVE_MINUTE,
    GROUPS,
    KINDS,
    SQL,
    STORAGES,
    Table,
)
from gpu_health.contracts import derived as M
from gpu_health.contracts.derived import GoodputDecomposition, KpiBaselines, KpiValues, RackFacility

# Stored columnar (Parquet in the telemetry store), never as SQL rows: every table whose rows grow with the fleet or
# the event rate and that is read by time window, never joined in SQL by finance.
#
# * The minute-grain telemetry, one row per GPU, node, link or running job per minute: 1,200 GPUs give 1.7 M GPU rows
#   a day, 100,000 GPUs 144 M. The serving layer's two tables are minute-grain too (``inference_latency_buckets`` is
#   one row per deployment x histogram x bucket per minute: ~43,000 a day per deployment), and so are the optional
#   facility and Kubernetes sources.
# * The event sources ``scheduler_events`` and ``job_metadata``: a row per event or per job, so they grow with the
#   fleet times its job rate (16 + 8 MB a day as SQL rows at 1,200 GPUs, 2.2 as Parquet).
# * The per-node facts of the loss tree, ``goodput_leaves`` (one row per node x job dimensions x state per partition,
#   52 MB a day in SQLite, its largest table) and ``goodput_node_states``, and ``node_inventory`` (a row per node per
#   partition; 80 distinct rows a day repeated 288 times, which Parquet's dictionaries store once): all grow with
#   the node count. What finance reads of the loss tree is its roll-up at the cluster grain (``goodput_states``,
#   ``cluster_goodput``, ``wasted_spend``), which stays in SQL.
# * The per-partition model state ``kpi_baselines`` (a row per KPI series x slice per partition, 3 % of them
#   distinct: 17 MB a day in SQLite, 0.2 MB as Parquet) and the step-time model state ``workload_step_stats`` /
#   ``step_time_baselines`` (a row per workload signature per partition), read back by window by the steps alone.
#
# Every reader goes through ``Warehouse.read_window`` and ``gpu-health export``, which do not care where a table is.
# ``change_events`` (a few a day), the quarantine tables and everything finance joins stay in SQL.

def _derived(name: str, model, cadence: str, group: str, owner: str, grain: str, description: str,
             partition_column: str = "partition_start", storage: str = SQL) -> Table:
    return Table(name, "derived", model, partition_column, cadence, storage, group, owner, grain, description)


_TABLES: tuple[Table, ...] = (
    # --- sources: landed, validated against their contract ---------------------------------------------------------
    *SOURCE_TABLES,  # declared beside their contracts (gpu_health.contracts.models)
    # --- quality of the sources -------------------------------------------------------------------------------------
    Table("source_rejects", "quality", None, "partition_start", EVENT, SQL, "telemetry", "infra",
          "one row per rejected source row (or quarantined file) with the check it broke",
          "Quarantined source rows with the reason they broke their contract."),
    Table("source_gaps", "quality", None, "partition_start", FIVE_MINUTE, SQL, "telemetry", "infra",
          "one row per source x 5-minute partition written empty because its producer was silent",
          "Missing data: partitions computed without a silent source instead of waiting forever."),
    # --- derived: baselines --------------------------------------------------------------------------------------------
    _derived("node_inventory", M.NodeInventory, FIVE_MINUTE, "baselines", "infra",
             "one row per node seen per 5-minute partition",
             "Nodes and GPUs that reported: the trailing day of it (as of each partition) is the inventory behind "
             "paid GPU-minutes and tells a node gone silent from a collector gone silent; a region none of whose "
             "nodes reported in a day keeps its inventory as of its last report for up to 7 days "
             "(steps.telemetry.inventory_segments).", storage=COLUMNAR),
    _derived("workload_step_stats", M.WorkloadStepStats, FIVE_MINUTE, "baselines", "ml_platform",
             "one row per workload signature (model_type, sku, gpus) per 5-minute partition",
             "Median step time, loader wait and gradient sync of healthy, progressing job-minutes (no slowdown "
             "throttling, no Xid, node ok, outside maintenance).", storage=COLUMNAR),
    _derived("step_time_baselines", M.StepTimeBaselines, FIVE_MINUTE, "baselines", "ml_platform",
             "one row per workload signature per 5-minute partition",
             "The baseline step time each partition is judged against: weighted median of 7 days of "
             "workload_step_stats as of the partition's hour; the partition's own cohort at cold start.",
             storage=COLUMNAR),
    _derived("kpi_baselines", KpiBaselines, FIVE_MINUTE, "baselines", "ml_platform",
             "one row per KPI series or loss-state share x slice per 5-minute partition",
             "Expected value (median, MAD, quantiles) of every KPI and loss-state share: the same hour of the week "
             "(2+ weeks of history), else the same hour of day on days of the same type, else the trailing two hours "
             "(cold start); incident (paged) and maintenance minutes never teach it.", storage=COLUMNAR),
    # --- derived: the loss tree and KPIs -------------------------------------------------------------------------------
    _derived("goodput_leaves", M.GoodputLeaves, FIVE_MINUTE, "kpis", "ml_platform",
             "one row per (region, node, sku, driver, team, workload class, model type, framework, queue) x state "
             "per partition",
             "GPU-minutes per loss state at the drill-down grain.", storage=COLUMNAR),
    _derived("goodput_states", M.GoodputStates, FIVE_MINUTE, "kpis", "ml_platform",
             "one row per region x sku x workload_class x team x state per 5-minute partition",
             "GPU-minutes per loss state; every paid GPU-minute is in exactly one state."),
    _derived("goodput_node_states", M.GoodputNodeStates, FIVE_MINUTE, "kpis", "infra",
             "one row per node x state per 5-minute partition",
             "GPU-minutes per loss state per node, for the hardware drill-down.", storage=COLUMNAR),
    _derived("job_failures", M.JobFailures, FIVE_MINUTE, "kpis", "ml_platform",
             "one row per failed job, in the partition of its failure",
             "Jobs that failed and the GPU-minutes they threw away since their last checkpoint."),
    _derived("cluster_goodput", M.ClusterGoodput, FIVE_MINUTE, "kpis", "finance",
             "one row per region (and * for the cluster) per 5-minute partition",
             "North star, provisional: productive / paid GPU-minutes, with each state's share."),
    _derived("kpi_values", KpiValues, FIVE_MINUTE, "kpis", "ml_platform",
             "one row per KPI x region x sku x workload_class x team slice per 5-minute partition",
             "The KPIs of the KPI catalogue (docs/kpis.md): the north star's supporting KPIs and the facility's and "
             "inventory's indicators (its tier); definition, owner and alert intent are code "
             "(gpu_health/metrics/kpi_catalog.py). A KPI whose optional source field is missing says 'degraded' with "
             "a null value, never 0."),
    _derived("serving_slis", M.ServingSlis, FIVE_MINUTE, "kpis", "ml_platform",
             "one row per region x model x version x 5-minute partition",
             "Serving SLIs: requests, errors, error rate, p50 / p95 / p99 latency and p99 time to first token, each "
             "quantile computed from the partition's summed bucket counts with Prometheus' own histogram_quantile "
             "interpolation (gpu_health/metrics/serving.py). Empty on a cluster without serving."),
    _derived("slo_error_budgets", M.SloErrorBudgets, FIVE_MINUTE, "kpis", "ml_platform",
             "one row per SLO x region x model x 5-minute partition",
             "Each serving SLO's events, bad events and error budget remaining over its rolling 30-day window (the "
             "SLO catalogue: gpu_health/metrics/slo_catalog.py, docs/slos.md); the slo_burn detector reads it. A "
             "threshold inside a histogram bucket is marked interpolated. Empty on a cluster without serving."),
    _derived("slo_version_events", M.SloVersionEvents, FIVE_MINUTE, "kpis", "ml_platform",
             "one row per SLO x region x model x version x 5-minute partition",
             "Each serving SLO's events and bad events per model version (slo_error_budgets split by version): which "
             "release spends the budget. The release_regression detector judges a new version by it against the "
             "version it replaced. Empty on a cluster without serving."),
    _derived("rack_facility", RackFacility, FIVE_MINUTE, "kpis", "infra",
             "one row per rack x 5-minute partition",
             "Each rack's energy, peak draw against 80 % of its rating (NEC continuous-load limit), hottest inlet, "
             "failed PSUs and its GPUs throttled for power or heat (gpu_health/metrics/facility.py). Empty on a "
             "cluster without facility_telemetry."),
    # --- derived: diagnosis and alerting -------------------------------------------------------------------------------
    _derived("goodput_decomposition", GoodputDecomposition, FIVE_MINUTE, "diagnosis", "infra",
             "one row per ranked cause per 5-minute partition",
             "Why goodput moved against its baseline (the same slot of the previous days, or the trailing two hours "
             "at cold start): the loss-state deltas explain the change exactly; inside the states that grew, a "
             "drill-down (Adtributor explanatory power and surprise, with combinations) names the narrowest set of "
             "dimension values (region, node, sku, driver, framework, queue, team, model type) carrying it, with its "
             "cause family and share of the drop."),
    _derived("alerts", M.Alerts, FIVE_MINUTE, "alerting", "infra",
             "one row per alert per 5-minute partition in which it is open",
             "One alert per incident: what is broken, where, since when, the top cause with its evidence, USD per "
             "hour burning, the first action and the deploy it follows. Pages are ERROR checks, tickets WARN checks; "
             "dashboards are metadata only. A re-run partition re-derives the later partitions' alerts (withdrawing "
             "those whose evidence vanished)."),
    # --- derived: the cluster at a glance ------------------------------------------------------------------------------
    _derived("cluster_status", M.ClusterStatus, FIVE_MINUTE, "status", "infra",
             "one row per 5-minute partition",
             "The cluster at a glance, the page an on-call engineer reads first: the north star against its baseline,"
             " the open pages and tickets with their first action, the KPIs furthest from their baselines and the "
             "data gaps (gpu_health/diagnosis/status.py); its numbers are the asset's plotted metadata."),
    # --- derived: finance ----------------------------------------------------------------------------------------------
    _derived("cluster_goodput_daily", M.ClusterGoodputDaily, DAILY, "finance", "finance",
             "one row per day per region (and * for the cluster)",
             "North star, settled: work thrown away by failures moved back to the minutes where it was spent. Finance"
             " reads this one; the 5-minute cluster_goodput is the leading, provisional view.",
             partition_column="date"),
    _derived("capacity_demand_daily", M.CapacityDemandDaily, DAILY, "finance", "finance",
             "one row per day x region x SKU x workload class",
             "GPU-hour demand: allocated loss-tree states plus the demand that waited (queue backlog, or idle_blocked"
             " where larger). What users asked for, so growth shows even at capacity.", partition_column="date"),
    _derived("capacity_forecast", M.CapacityForecast, DAILY, "finance", "finance",
             "one row per forecast day x region x SKU x workload class x horizon day",
             "Demand forecast 1-84 days (12 weeks) ahead, p10 / p50 / p90, by the method with the lower "
             "rolling-origin MASE on the series' history (seasonal-naive or day-of-week + trend).",
             partition_column="date"),
    _derived("capacity_headroom", M.CapacityHeadroom, DAILY, "finance", "finance",
             "one row per day x region x SKU",
             "Installed GPUs minus the p90 forecast, the first day within 12 weeks demand runs out of them, and the "
             "reserved mix that would have cost least over the last 30 days and over the next 30.",
             partition_column="date"),
    _derived("wasted_spend", M.WastedSpend, DAILY, "finance", "finance",
             "one row per day x region x SKU x state x team",
             "USD per loss state, cause family and team: settled GPU-hours x that day's blended USD per GPU-hour "
             "(reserved + burst spend / paid GPU-hours). Productive rows reconcile to total spend.",
             partition_column="date"),
)

CATALOG: dict[str, Table] = {t.name: t for t in _TABLES}
if len(CATALOG) != len(_TABLES):  # pragma: no cover - a declaration error
    raise ValueError("catalog: a table is declared twice")

SOURCES: tuple[str, ...] = tuple(t.name for t in _TABLES if t.kind == "source")
DERIVED: tuple[str, ...] = tuple(t.name for t in _TABLES if t.kind == "derived")
COLUMNAR_TABLES: frozenset[str] = frozenset(t.name for t in _TABLES if t.storage == COLUMNAR)


def table(name: str) -> Table:
    """The catalogue entry of ``name`` (KeyError naming the known tables when there is none)."""
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"no table {name!r} in the catalogue; known: {sorted(CATALOG)}") from None


def partition_column(name: str) -> str | None:
    return table(name).partition_column


def owners() -> dict[str, str]:
    """Table -> owning team, for the tables of ``group`` ``telemetry`` and beyond."""
    return {t.name: t.owner for t in _TABLES}


def grains() -> dict[str, str]:
    return {t.name: t.grain for t in _TABLES}


_STORAGE_WORDS = {SQL: "SQL warehouse", COLUMNAR: "telemetry store (Parquet)"}


def markdown() -> str:
    """The table list of ``docs/tables.md`` (a test fails when the file and this drift)."""
    out = ["# Tables", "",
           "Generated from `gpu_health/catalog.py` by `python -m gpu_health.catalog docs/tables.md`; "
           "do not edit by hand (a test fails when they drift). Columns, types and units: "
           "`sql/schema.sql` and the pandera models named here.", ""]
    for kind, title in (("source", "Sources"), ("quality", "Source quality"), ("derived", "Derived")):
        out += [f"## {title}", "",
                "| table | model | partition column | cadence | stored in | group | owner | grain | description |",
                "|---|---|---|---|---|---|---|---|---|"]
        for t in _TABLES:
            if t.kind != kind:
                continue
            model = f"`{t.model.__name__}`" if t.model is not None else "(SQLAlchemy)"
            part = f"`{t.partition_column}`" if t.partition_column else "(whole)"
            out.append(f"| `{t.name}` | {model} | {part} | {t.cadence} | {_STORAGE_WORDS[t.storage]} | {t.group} | "
                       f"{t.owner} | {t.grain} | {t.description} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover - a developer command
    import sys
    from pathlib import Path

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/tables.md")
    target.write_text(markdown())
    print(f"wrote {target}")

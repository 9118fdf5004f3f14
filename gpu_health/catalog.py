"""The table catalogue: every table the pipeline stores, declared once.

Rule: a table exists because it has an entry here, and everything else that
names tables derives from that entry — the SQL warehouse schema
(:mod:`gpu_health.storage.schema`, and its reviewed rendering ``sql/schema.sql``),
which tables the columnar telemetry store holds instead, the source assets'
owners and grains (``defs/telemetry/assets.py``), and the table list of
``docs/tables.md`` (:func:`markdown`, checked by a test). The reason is drift:
a table described in four places is described four ways, and the places that
disagree are found by users, not by tests.

Each :class:`Table` says

* ``model`` — its pandera contract (the columns, types, units and grain); ``None``
  only for the two quarantine tables, whose SQLAlchemy declaration in
  :mod:`gpu_health.storage.schema` is the contract, since they hold any other
  table's broken rows as text;
* ``partition_column`` — the column that places a row in a partition (``None``: the
  table is read whole, e.g. the maintenance calendar);
* ``cadence`` — the time grain of its rows: ``minute`` (a sample a minute, written a
  5-minute partition at a time), ``5-minute`` (one value per partition), ``daily``
  (one per day), ``event`` (one per event, landed in the partition of its time) or
  ``calendar`` (not partitioned);
* ``storage`` — ``sql`` (the SQL warehouse, where the KPI, loss-tree, alert and
  finance tables are joined) or ``columnar`` (Parquet in the telemetry store: see
  :data:`COLUMNAR` for why);
* ``group`` — the Dagster asset group (= folder under ``defs/``);
* ``owner`` — the team that answers for it (``infra``, ``ml_platform``, ``finance``);
* ``grain`` — one row per what, in words (the model's ``Config.unique`` says it in
  columns);
* ``description`` — one line for the docs.

This module imports the models it lists and nothing that reads or writes data,
so the storage layer can build its schema from it without importing the
metric logic back (the old ``metrics`` <-> ``storage.schema`` cycle).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandera.pandas as pa

from gpu_health.constants import OWNERS
from gpu_health.contracts import derived as M
from gpu_health.contracts.derived import KpiBaselines, KpiValues, RackFacility
from gpu_health.contracts.models import CONTRACTS, PARTITION_COLUMN
from gpu_health.diagnosis.decompose import GoodputDecomposition

CADENCES = ("minute", "5-minute", "daily", "event", "calendar")
STORAGES = ("sql", "columnar")
GROUPS = ("telemetry", "kpis", "baselines", "diagnosis", "alerting", "finance")
KINDS = ("source", "derived", "quality")


@dataclass(frozen=True)
class Table:
    name: str
    kind: str  # source (landed and validated), derived (computed), quality (rejects and gaps of the sources)
    model: type[pa.DataFrameModel] | None
    partition_column: str | None
    cadence: str
    storage: str
    group: str
    owner: str
    grain: str
    description: str

    def __post_init__(self):
        for value, allowed, what in ((self.kind, KINDS, "kind"), (self.cadence, CADENCES, "cadence"),
                                     (self.storage, STORAGES, "storage"), (self.group, GROUPS, "group"),
                                     (self.owner, OWNERS, "owner")):
            if value not in allowed:
                raise ValueError(f"catalog: table {self.name!r} has {what} {value!r}, not one of {allowed}")
        if self.model is None and self.kind != "quality":
            raise ValueError(f"catalog: table {self.name!r} has no pandera model")


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
COLUMNAR = "columnar"
SQL = "sql"


def _source(name: str, cadence: str, storage: str, owner: str, grain: str, description: str) -> Table:
    return Table(name, "source", CONTRACTS[name], PARTITION_COLUMN[name], cadence, storage, "telemetry", owner,
                 grain, description)


def _derived(name: str, model, cadence: str, group: str, owner: str, grain: str, description: str,
             partition_column: str = "partition_start", storage: str = SQL) -> Table:
    return Table(name, "derived", model, partition_column, cadence, storage, group, owner, grain, description)


_TABLES: tuple[Table, ...] = (
    # --- sources: landed, validated against their contract ---------------------------------------------------------
    _source("gpu_telemetry", "minute", COLUMNAR, "infra", "one row per reporting GPU per minute",
            "DCGM exporter fields per GPU: utilization, SM/tensor activity, framebuffer, power, temperature, "
            "SM clock, clock-event reasons, ECC and Xid."),
    _source("node_telemetry", "minute", COLUMNAR, "infra", "one row per node per minute",
            "Per node: CPU, memory, disk and NVMe load, driver and kernel versions, health state."),
    _source("network_telemetry", "minute", COLUMNAR, "infra", "one row per InfiniBand/RoCE link per minute",
            "Per fabric link: throughput, packet loss, retransmits, latency, link up."),
    _source("scheduler_events", "event", COLUMNAR, "ml_platform", "one row per scheduler event",
            "Submissions, starts, ends, preemptions and requeues from the scheduler."),
    _source("job_runtime_metrics", "minute", COLUMNAR, "ml_platform",
            "one row per running job per minute that reports training metrics",
            "Training-loop progress reported by jobs: steps, step time, loader wait, gradient sync, checkpoints, "
            "loss and (where logged) gradient norm."),
    _source("job_metadata", "event", COLUMNAR, "ml_platform", "one row per job, in the partition of its submission",
            "What each job is: team, model type, workload class, dataset, requested GPUs, image, framework, SLA."),
    _source("change_events", "event", SQL, "ml_platform", "one row per deploy or configuration change",
            "Deploys and configuration changes (driver, firmware, framework, scheduler config) with their scope."),
    _source("cost_capacity", "daily", SQL, "finance", "one row per region x SKU per day",
            "Finance's daily GPU capacity, reserved GPUs and USD per GPU-hour (reserved and on demand)."),
    _source("maintenance_windows", "calendar", SQL, "infra",
            "one row per planned-maintenance window (the whole calendar)",
            "Planned maintenance: nodes drained on purpose, never paged on."),
    _source("inference_requests", "minute", COLUMNAR, "ml_platform",
            "one row per region x model x version x minute (optional: serving)",
            "Per deployment: requests, errors, latency sum, queue depth, replicas, GPUs."),
    _source("inference_latency_buckets", "minute", COLUMNAR, "ml_platform",
            "one row per region x model x version x histogram x le x minute (optional: serving)",
            "Serving latency and time-to-first-token histograms per deployment."),
    _source("facility_telemetry", "minute", COLUMNAR, "infra",
            "one row per rack per minute (optional: facility power and cooling)",
            "Per rack: power draw and budget, inlet and outlet temperature, failed PSUs, the hall's power for PUE."),
    _source("kube_pods", "minute", COLUMNAR, "ml_platform", "one row per pod per minute while it exists (optional: Kubernetes)",
            "kube-state-metrics and events per pod: phase, reason, node, GPU request, restarts, job."),
    _source("kube_nodes", "minute", COLUMNAR, "infra", "one row per node per minute (optional: Kubernetes)",
            "Per Kubernetes node: GPU capacity and allocatable, taints, ready, unschedulable."),
    # --- quality of the sources -------------------------------------------------------------------------------------
    Table("source_rejects", "quality", None, "partition_start", "event", SQL, "telemetry", "infra",
          "one row per rejected source row (or quarantined file) with the check it broke",
          "Quarantined source rows with the reason they broke their contract."),
    Table("source_gaps", "quality", None, "partition_start", "5-minute", SQL, "telemetry", "infra",
          "one row per source x 5-minute partition written empty because its producer was silent",
          "Missing data: partitions computed without a silent source instead of waiting forever."),
    # --- derived: baselines --------------------------------------------------------------------------------------------
    _derived("node_inventory", M.NodeInventory, "5-minute", "baselines", "infra",
             "one row per node seen per 5-minute partition",
             "Nodes and GPUs that reported; the trailing day is the inventory behind paid GPU-minutes.", storage=COLUMNAR),
    _derived("workload_step_stats", M.WorkloadStepStats, "5-minute", "baselines", "ml_platform",
             "one row per workload signature (model_type, sku, gpus) per 5-minute partition",
             "Median step time, loader wait and gradient sync of healthy, progressing job-minutes.", storage=COLUMNAR),
    _derived("step_time_baselines", M.StepTimeBaselines, "5-minute", "baselines", "ml_platform",
             "one row per workload signature per 5-minute partition",
             "The baseline step time each partition is judged against.", storage=COLUMNAR),
    _derived("kpi_baselines", KpiBaselines, "5-minute", "baselines", "ml_platform",
             "one row per KPI series or loss-state share x slice per 5-minute partition",
             "Expected value (median, MAD, quantiles) of every KPI and loss-state share.", storage=COLUMNAR),
    # --- derived: the loss tree and KPIs -------------------------------------------------------------------------------
    _derived("goodput_leaves", M.GoodputLeaves, "5-minute", "kpis", "ml_platform",
             "one row per (region, node, sku, driver, team, workload class, model type, framework, queue) x state "
             "per partition",
             "GPU-minutes per loss state at the drill-down grain.", storage=COLUMNAR),
    _derived("goodput_states", M.GoodputStates, "5-minute", "kpis", "ml_platform",
             "one row per region x sku x workload_class x team x state per 5-minute partition",
             "GPU-minutes per loss state; every paid GPU-minute is in exactly one state."),
    _derived("goodput_node_states", M.GoodputNodeStates, "5-minute", "kpis", "infra",
             "one row per node x state per 5-minute partition",
             "GPU-minutes per loss state per node, for the hardware drill-down.", storage=COLUMNAR),
    _derived("job_failures", M.JobFailures, "5-minute", "kpis", "ml_platform",
             "one row per failed job, in the partition of its failure",
             "Jobs that failed and the GPU-minutes they threw away since their last checkpoint."),
    _derived("cluster_goodput", M.ClusterGoodput, "5-minute", "kpis", "finance",
             "one row per region (and * for the cluster) per 5-minute partition",
             "North star, provisional: productive / paid GPU-minutes, with each state's share."),
    _derived("kpi_values", KpiValues, "5-minute", "kpis", "ml_platform",
             "one row per KPI x region x sku x workload_class x team slice per 5-minute partition",
             "The supporting KPIs of the KPI catalogue (docs/kpis.md)."),
    _derived("serving_slis", M.ServingSlis, "5-minute", "kpis", "ml_platform",
             "one row per region x model x version x 5-minute partition",
             "Serving SLIs: requests, errors, error rate, latency quantiles, time to first token."),
    _derived("slo_error_budgets", M.SloErrorBudgets, "5-minute", "kpis", "ml_platform",
             "one row per SLO x region x model x 5-minute partition",
             "Each serving SLO's events, bad events and error budget remaining over its rolling window."),
    _derived("slo_version_events", M.SloVersionEvents, "5-minute", "kpis", "ml_platform",
             "one row per SLO x region x model x version x 5-minute partition",
             "Each serving SLO's events and bad events per model version: which release spends the budget."),
    _derived("rack_facility", RackFacility, "5-minute", "kpis", "infra",
             "one row per rack x 5-minute partition",
             "Each rack's energy, peak draw against 80 % of its rating, hottest inlet, failed PSUs, GPUs throttled."),
    # --- derived: diagnosis and alerting -------------------------------------------------------------------------------
    _derived("goodput_decomposition", GoodputDecomposition, "5-minute", "diagnosis", "infra",
             "one row per ranked cause per 5-minute partition",
             "Why goodput moved against its baseline: the ranked causes of the change."),
    _derived("alerts", M.Alerts, "5-minute", "alerting", "infra",
             "one row per alert per 5-minute partition in which it is open",
             "One alert per incident: what, where, since when, top cause and evidence, USD per hour burning."),
    # --- derived: finance ----------------------------------------------------------------------------------------------
    _derived("cluster_goodput_daily", M.ClusterGoodputDaily, "daily", "finance", "finance",
             "one row per day per region (and * for the cluster)",
             "North star, settled: work thrown away by failures moved back to the minutes where it was spent.",
             partition_column="date"),
    _derived("capacity_demand_daily", M.CapacityDemandDaily, "daily", "finance", "finance",
             "one row per day x region x SKU x workload class",
             "GPU-hour demand: allocated loss-tree states plus the demand that waited (max of queue backlog and "
             "idle_blocked).", partition_column="date"),
    _derived("capacity_forecast", M.CapacityForecast, "daily", "finance", "finance",
             "one row per forecast day x region x SKU x workload class x horizon day",
             "Demand forecast 1-84 days ahead with p10 / p50 / p90, by the method with the lower rolling-origin MASE.",
             partition_column="date"),
    _derived("capacity_headroom", M.CapacityHeadroom, "daily", "finance", "finance",
             "one row per day x region x SKU",
             "Installed GPUs minus the p90 forecast, the first run-out date within 12 weeks, and the cheapest reserved mix.",
             partition_column="date"),
    _derived("wasted_spend", M.WastedSpend, "daily", "finance", "finance",
             "one row per day x region x SKU x state x team",
             "USD per loss state, cause family and team at that day's blended GPU-hour cost.",
             partition_column="date"),
)

CATALOG: dict[str, Table] = {t.name: t for t in _TABLES}
if len(CATALOG) != len(_TABLES):  # pragma: no cover - a declaration error
    raise ValueError("catalog: a table is declared twice")
_missing = set(CONTRACTS) - set(CATALOG)
if _missing:  # pragma: no cover - a declaration error
    raise ValueError(f"catalog: source contracts without a catalogue entry: {sorted(_missing)}")

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

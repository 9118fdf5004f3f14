"""Every step of the pipeline, declared once: what it reads (with its look-back), what it writes, how it runs.

The Dagster assets (``gpu_health/defs``) and the bulk path (:mod:`gpu_health.steps.direct`) both call
``step.run``; a step validates its tables against their pandera models and stores them itself (one transaction
for a step's tables), so both paths write the same rows by construction. A step's body (``telemetry``, ``kpis``,
``diagnosis``, ``finance``, ``capacity``) never holds the warehouse: it reads through the
:class:`~gpu_health.steps.resolve.Inputs` of its declaration, which refuses a table not declared here or a span
past the declared look-back, so a look-back is typed here once and the body asks for "the declared span"
(``test_step_graph.py`` records the reads and holds them to the declarations). Only the resolver and ``_store``
touch the warehouse for a step.
"""

from __future__ import annotations

import pandas as pd

from gpu_health.contracts import FIVE_MINUTE_SOURCES, OPTIONAL_SOURCES
from gpu_health.diagnosis.detect import DEPLOY_LOOKBACK
from gpu_health.diagnosis.detectors.gaming import COMPUTE_HISTORY
from gpu_health.diagnosis.detectors.scheduling import SEASON_HISTORY
from gpu_health.diagnosis.convergence import CONVERGENCE_LOOKBACK
from gpu_health.diagnosis.platform import RESTART_WINDOW as PLATFORM_RESTART_WINDOW
from gpu_health.metrics import baselines as B
from gpu_health.metrics import goodput as G
from gpu_health.metrics.slo import LOOKBACK as SLO_LOOKBACK
from gpu_health.metrics.slo import RELEASE_LOOKBACK
from gpu_health.metrics.slo_catalog import WINDOW_DAYS as SLO_WINDOW_DAYS
from gpu_health.steps import diagnosis as D
from gpu_health.steps import finance as F
from gpu_health.steps import kpis as K
from gpu_health.steps import status as S
from gpu_health.steps import telemetry as T
from gpu_health.steps.graph import CALENDAR, DAILY, FIVE_MINUTE, Read, Step, StepResult
from gpu_health.steps.resolve import Inputs, Window

DAY = pd.Timedelta(days=1)
HOUR = pd.Timedelta(hours=1)
# a window's day: cost_capacity and the like are read from the day the window starts in (start.normalize())
TO_DAY_START = DAY
# Finance's capacity as of a window's days: the last day it sent, up to CAPACITY_MEMORY back (F.capacity_as_of)
CAPACITY = Read("cost_capacity", before=TO_DAY_START + F.CAPACITY_MEMORY)
# the inventory as of a partition: the trailing day of node_inventory, and for a silent region its inventory as
# of its last report up to SILENT_REGION_MEMORY back (T.inventory_segments)
INVENTORY = (Read("node_inventory", before=T.INVENTORY_LOOKBACK + T.FIVE),
             Read("node_inventory", before=T.SILENT_REGION_MEMORY + T.INVENTORY_LOOKBACK, optional=True))
# a renamed node: the GPU UUIDs a node silent in the partition reported at its last report, up to the inventory's
# look-back (T.moved_gpus): that node's rows of that partition only
RENAMED = Read("gpu_telemetry", before=T.INVENTORY_LOOKBACK + T.FIVE, optional=True, filtered=True)
# the rejects of Finance's cost file of a window's day and of the day before (D.COST_REJECT_DAYS), filed under the
# day's midnight: the missing_data ticket of a day whose money is null
COST_REJECTS = Read("source_rejects", before=TO_DAY_START + D.COST_REJECT_DAYS)
# a suspect job's own GPU rows before the partition (did it compute before it went idle: a hang, not a dummy load):
# the gaming and stall detectors ask for a few jobs only (a filtered read), when they would raise a finding
JOB_COMPUTE = Read("gpu_telemetry", before=COMPUTE_HISTORY, optional=True, filtered=True)
# the alerts of the week before (the snapshot a window's first partition continues, the pages that held it)
ALERT_HISTORY = pd.Timedelta(days=7, hours=1)
# the history of the loss tree the scheduling detector's seasonal baseline reads (the same hour of the previous
# SEASON_WEEKS weeks: three columns, a row per region and partition), and the scheduling pages that held it (a
# filtered read: those rows only)
SEASONAL_GOODPUT = Read("cluster_goodput", before=SEASON_HISTORY)
SEASONAL_PAGES = Read("alerts", before=SEASON_HISTORY, filtered=True)
# the KPIs' expected values: the same slot (padded) on each of the previous K.KPI_SLOT_DAYS days; the partitions
# paged in the previous 15 days are no sample of them
KPI_HISTORY = K.KPI_SLOT_DAYS * DAY + K.KPI_SLOT_PAD
PAGED_KPI_HISTORY = pd.Timedelta(days=15)
# a read that stops at the window's last partition: each partition reads only the partitions before it (the
# pages that keep a partition out of its successors' baselines), so the asset graph draws it as a dependency on
# earlier partitions (earlier_reads), not on the same one
EARLIER = -T.FIVE
# the decomposition's expected leaves: the same slot on each of the previous D.DECOMPOSITION_DAYS days; the
# partitions paged in the day before those are no sample of them
LEAF_HISTORY = D.DECOMPOSITION_DAYS * DAY
PAGED_LEAF_HISTORY = LEAF_HISTORY + DAY
# the loss tree's own goodput of the GOODPUT_TREND before a window's end: the trend the Dagster asset draws (on a
# range run and on the partition closing each hour; the step's body never reads it, hence optional)
GOODPUT_TREND = pd.Timedelta(hours=24)
TREND = Read("cluster_goodput", before=GOODPUT_TREND, optional=True)


# --- sources --------------------------------------------------------------------------------------------------
def _ingest(table: str, lookback: pd.Timedelta | None):
    def run(wh, start, end, *, source) -> StepResult:
        from gpu_health.steps.ingest import ingest

        return ingest(wh, source, table, start, end, lookback=lookback)
    return run


def redelivery_lookback(table: str, cadence: str) -> pd.Timedelta | None:
    """How far back a source step looks in its own stored table for the rows a file delivers again (at-least-once
    delivery: contracts.redelivery._redelivered); None: it does not.

    A job's events and metadata: as far back as every consumer looks for a job (META_LOOKBACK), so a re-sent ending
    or description of a job is never counted twice by them. The other 5-minute tables: one partition, the file
    before, whose tail an exporter re-sends when it was not acknowledged; a row older than that is a late or
    misplaced row, rejected as a row with its reason (kept in source_rejects, never lost)."""
    if cadence != FIVE_MINUTE:
        return None
    return T.META_LOOKBACK if table in ("scheduler_events", "job_metadata") else T.FIVE


def _source_step(table: str, cadence: str) -> Step:
    side = ("source_rejects", "source_gaps") if table in FIVE_MINUTE_SOURCES else ("source_rejects",)
    lookback = redelivery_lookback(table, cadence)
    # optional: the minute tables look back only when a file holds rows of an earlier partition
    reads = (Read(table, before=lookback, optional=True),) if lookback is not None else ()
    return Step(table, cadence, writes=(table,), reads=reads, run=_ingest(table, lookback), side_writes=side,
                description=f"Source table {table}: read from the configured source, validated, rejects quarantined.")


SOURCE_STEPS = [*(_source_step(t, FIVE_MINUTE) for t in FIVE_MINUTE_SOURCES + OPTIONAL_SOURCES),
                _source_step("cost_capacity", DAILY), _source_step("maintenance_windows", CALENDAR)]


# --- derived ----------------------------------------------------------------------------------------------------
def _store(wh, tables: dict, start, end, **kw) -> dict:
    """Validate each table against its model and store them in one transaction."""
    from gpu_health.steps.models import validate

    tables = {name: validate(name, frame) for name, frame in tables.items()}
    wh.replace_windows(tables, start, end, **kw)
    return tables


def inputs_for(name: str, wh, start, end) -> Inputs:
    """What step ``name``'s body reads for ``[start, end)``: its declared reads, resolved (steps/resolve.py); also
    for a report, a trace or a test calling one step's body on a warehouse."""
    return Inputs(BY_NAME[name], wh, Window(start, end))


def _single(name: str, compute):
    def run(wh, start, end) -> StepResult:
        return StepResult(_store(wh, {name: compute(inputs_for(name, wh, start, end))}, start, end))
    return run


def _inventory(inputs: Inputs):
    return T.node_inventory({t: inputs.in_window(t) for t in ("gpu_telemetry", "node_telemetry")})


def _decomposition(inputs: Inputs):
    from gpu_health.diagnosis.decompose import GoodputDecomposition

    frame = D.decomposition(inputs)
    return frame if len(frame) else pd.DataFrame(columns=list(GoodputDecomposition.to_schema().columns))


def _goodput(wh, start, end) -> StepResult:
    """The five tables of the loss tree commit together (one transaction): a crash or a database killed mid-write
    leaves the partition's old loss tree or its new one, never some tables of each."""
    inputs = inputs_for("goodput", wh, start, end)
    segments = T.inventory_segments(inputs)  # (the inventory each partition is judged and paid against)
    frames = {t: inputs.in_window(t) for t in T.LOSS_TREE_SOURCES}
    moved = T.moved_gpus(inputs, segments, frames["gpu_telemetry"])  # (a renamed node's GPUs)
    leaves, failures = T.goodput(inputs, frames=frames, segments=segments, moved=moved)
    tables = _store(wh, {"goodput_leaves": leaves, "job_failures": failures, **T.rollups(leaves)}, start, end)
    return StepResult(tables, findings={"paid_invariant": T.paid_invariant(tables["goodput_states"], inputs,
                                                                           segments=segments, moved=moved)})


def _alerts(wh, start, end, *, judged_later: bool = False) -> StepResult:
    """This window's alerts, and the later partitions' re-derived from them when it re-runs
    (D.alerts_after_rerun), stored in one transaction: a crash leaves the old chain or the new one.
    ``judged_later``: the caller computes the partitions after ``end`` next, in order (a bulk run's next day), so
    none is re-derived here (it would be recomputed at once; alerts withdrawn inside the window still are)."""
    inputs = inputs_for("alerts", wh, start, end)
    frame = D.alerts(inputs)
    rows, stop, rerun = D.alerts_after_rerun(inputs, frame, horizon=pd.Timedelta(0) if judged_later else None)
    if judged_later:
        rerun["alerts_rederive_converged"] = True  # the caller's next window carries on from here
    _store(wh, {"alerts": rows}, start, stop, lock_partitions=T.FIVE)
    frame = rows[(rows["partition_start"] >= start) & (rows["partition_start"] < end)] if len(rows) else frame
    return StepResult({"alerts": frame}, metadata={**rerun, "rederived_until": stop})


def _serving(wh, start, end) -> StepResult:
    slis, mismatched = K.serving_slis(inputs_for("serving_slis", wh, start, end))
    return StepResult(_store(wh, {"serving_slis": slis}, start, end), findings={"mismatched": mismatched})


def _finance(name: str):
    def run(wh, start, end) -> StepResult:
        inputs = inputs_for(name, wh, start, end)
        out = [F.finance_day(inputs.at(d, d + DAY)) for d in inputs.period.days()]
        frame = pd.concat([o[name] for o in out], ignore_index=True)
        daily = name == "cluster_goodput_daily"
        meta = {"settled_gpu_minutes_moved": float(sum(o["moved_gpu_minutes"] for o in out))} if daily else {}
        # the findings its checks judge (steps.checks): the day's partitions, or Finance's bill to reconcile with
        found = "day_partitions" if daily else "billed"
        findings = {found: pd.concat([o[found] for o in out], ignore_index=True)}
        return StepResult(_store(wh, {name: frame}, start, end), metadata=meta, findings=findings)
    return run


WINDOW_SOURCES = ("gpu_telemetry", "node_telemetry", "job_runtime_metrics")
DERIVED_STEPS = [
    Step("node_inventory", FIVE_MINUTE, writes=("node_inventory",),
         reads=(Read("gpu_telemetry"), Read("node_telemetry")), run=_single("node_inventory", _inventory)),
    Step("workload_step_stats", FIVE_MINUTE, writes=("workload_step_stats",),
         reads=(*(Read(t) for t in WINDOW_SOURCES), Read("job_metadata", before=T.META_LOOKBACK),
                Read("maintenance_windows", whole=True)),
         run=_single("workload_step_stats", T.step_stats)),
    Step("step_time_baselines", FIVE_MINUTE, writes=("step_time_baselines",),
         # 7 days before the window's first hour
         reads=(Read("workload_step_stats", before=B.LOOKBACK + HOUR),),
         run=_single("step_time_baselines", T.step_baselines)),
    Step("goodput", FIVE_MINUTE,
         writes=("goodput_leaves", "goodput_states", "goodput_node_states", "job_failures", "cluster_goodput"),
         reads=(*(Read(t) for t in WINDOW_SOURCES), Read("job_runtime_metrics", before=G.FAILURE_LOOKBACK),
                Read("scheduler_events", before=T.META_LOOKBACK), Read("job_metadata", before=T.META_LOOKBACK),
                Read("maintenance_windows", whole=True), CAPACITY, *INVENTORY,
                Read("node_inventory", before=G.FAULT_MEMORY), Read("step_time_baselines"), RENAMED, TREND),
         run=_goodput),
    Step("kpi_values", FIVE_MINUTE, writes=("kpi_values",),
         reads=(*(Read(t) for t in ("gpu_telemetry", "node_telemetry", "network_telemetry", "job_runtime_metrics",
                                    "change_events", "goodput_states", "step_time_baselines", "facility_telemetry")),
                Read("job_metadata", before=T.META_LOOKBACK), Read("scheduler_events", before=T.SCHED_LOOKBACK),
                CAPACITY, *INVENTORY),
         run=_single("kpi_values", K.kpi_values)),
    Step("rack_facility", FIVE_MINUTE, writes=("rack_facility",),
         # the GPUs' clock-event bits are read only when the window has facility rows (a rack to attribute them to)
         reads=(Read("facility_telemetry"), Read("gpu_telemetry", optional=True)),
         run=_single("rack_facility", K.rack_facility)),
    Step("serving_slis", FIVE_MINUTE, writes=("serving_slis",),
         reads=(Read("inference_requests"), Read("inference_latency_buckets")), run=_serving),
    Step("slo_error_budgets", FIVE_MINUTE, writes=("slo_error_budgets",),
         reads=(Read("inference_requests"), Read("inference_latency_buckets"),
                Read("slo_error_budgets", before=pd.Timedelta(days=SLO_WINDOW_DAYS))),
         run=_single("slo_error_budgets", K.slo_error_budgets)),
    Step("slo_version_events", FIVE_MINUTE, writes=("slo_version_events",),
         reads=(Read("inference_requests"), Read("inference_latency_buckets")),
         run=_single("slo_version_events", K.slo_version_events)),
    Step("alerts", FIVE_MINUTE, writes=("alerts",),
         # a re-run re-derives up to ALERT_LOOKAHEAD of later partitions (D.alerts_after_rerun): every read
         # reaches that far past the window; and whether the partition just past that is stored (the
         # re-derivation cut short by the horizon: not converged)
         reads=(*(Read(r.table, r.before, D.ALERT_LOOKAHEAD, r.whole, r.optional, r.filtered) for r in (
             Read("gpu_telemetry"), Read("node_telemetry"), Read("network_telemetry"),
             Read("job_runtime_metrics", before=T.FIVE), Read("scheduler_events", before=T.SCHED_LOOKBACK),
             Read("change_events", before=DEPLOY_LOOKBACK), Read("maintenance_windows", whole=True),
             Read("goodput_leaves"), Read("step_time_baselines"), Read("job_metadata", before=T.META_LOOKBACK),
             *INVENTORY, RENAMED, JOB_COMPUTE, SEASONAL_GOODPUT, Read("alerts", before=ALERT_HISTORY), SEASONAL_PAGES,
             CAPACITY, Read("source_rejects"), COST_REJECTS, Read("source_gaps"),
             Read("slo_error_budgets", before=SLO_LOOKBACK), Read("slo_version_events", before=RELEASE_LOOKBACK),
             Read("facility_telemetry"),
             Read("kube_pods", before=PLATFORM_RESTART_WINDOW), Read("kube_nodes"),
             Read("job_runtime_metrics", before=CONVERGENCE_LOOKBACK))),
             Read("cluster_goodput", after=D.ALERT_LOOKAHEAD + T.FIVE, optional=True, filtered=True)),
         run=_alerts, rederives_later=True),
    Step("kpi_baselines", FIVE_MINUTE, writes=("kpi_baselines",),
         reads=(Read("kpi_values", before=KPI_HISTORY), Read("goodput_states", before=KPI_HISTORY),
                Read("alerts", before=PAGED_KPI_HISTORY, after=EARLIER), Read("maintenance_windows", whole=True)),
         run=_single("kpi_baselines", K.kpi_baselines)),
    Step("goodput_decomposition", FIVE_MINUTE, writes=("goodput_decomposition",),
         reads=(Read("goodput_leaves", before=LEAF_HISTORY), Read("alerts", before=PAGED_LEAF_HISTORY, after=EARLIER)),
         run=_single("goodput_decomposition", _decomposition)),
    Step("cluster_status", FIVE_MINUTE, writes=("cluster_status",),
         # the window's own rows of what the status page quotes; of the KPIs and baselines the cluster-wide slice
         reads=(Read("cluster_goodput"), Read("kpi_baselines", filtered=True), Read("kpi_values", filtered=True),
                Read("alerts"), Read("source_gaps"), Read("source_rejects")),
         run=_single("cluster_status", S.cluster_status),
         description="The cluster at a glance: the page an on-call engineer reads first."),
    Step("cluster_goodput_daily", DAILY, writes=("cluster_goodput_daily",),
         # failures up to a day later settle back into the day
         reads=(Read("goodput_states"), Read("job_failures", after=DAY), Read("cluster_goodput"),
                Read("cost_capacity")),
         run=_finance("cluster_goodput_daily")),
    Step("wasted_spend", DAILY, writes=("wasted_spend",),
         reads=(Read("goodput_states"), Read("job_failures", after=DAY), Read("cluster_goodput"),
                Read("cost_capacity")),
         run=_finance("wasted_spend")),
]



# --- capacity planning: demand history, its forecast, headroom against cost_capacity ----------------
def _capacity(name: str):
    def run(wh, start, end) -> StepResult:
        from gpu_health.steps import capacity as C

        compute = {"capacity_demand_daily": C.demand, "capacity_forecast": C.forecasts,
                   "capacity_headroom": C.headrooms}[name]
        inputs = inputs_for(name, wh, start, end)
        frame = compute(inputs)
        if frame.empty:
            from gpu_health.steps.models import model_of

            frame = pd.DataFrame(columns=list(model_of(name).to_schema().columns))
        # the demand of a partial day is short: its day_complete check (steps.checks)
        found = {"day_partitions": C.day_partitions(inputs)} if name == "capacity_demand_daily" else {}
        return StepResult(_store(wh, {name: frame}, start, end), findings=found)
    return run


def _capacity_steps() -> list[Step]:
    from gpu_health.steps import capacity as C

    return [
        Step("capacity_demand_daily", DAILY, writes=("capacity_demand_daily",),
             reads=(Read("goodput_states"), Read("scheduler_events", before=C.BACKLOG_LOOKBACK),
                    Read("job_metadata", before=T.META_LOOKBACK), Read("node_inventory")),
             run=_capacity("capacity_demand_daily")),
        Step("capacity_forecast", DAILY, writes=("capacity_forecast",),
             reads=(Read("capacity_demand_daily", before=C.FORECAST_HISTORY),),
             run=_capacity("capacity_forecast")),
        Step("capacity_headroom", DAILY, writes=("capacity_headroom",),
             reads=(Read("capacity_forecast"), Read("cost_capacity"),
                    Read("capacity_demand_daily", before=C.RESERVED_WINDOW - DAY)),
             run=_capacity("capacity_headroom")),
    ]


DERIVED_STEPS += _capacity_steps()
STEPS: list[Step] = [*SOURCE_STEPS, *DERIVED_STEPS]
BY_NAME: dict[str, Step] = {s.name: s for s in STEPS}


def step(name: str) -> Step:
    return BY_NAME[name]


def steps_of(cadence: str) -> list[Step]:
    from gpu_health.steps.graph import order

    return [s for s in order(STEPS) if s.cadence == cadence]


def dependencies(name: str) -> list[str]:
    """The names of the steps ``name`` depends on (Dagster's ``deps``)."""
    from gpu_health.steps.graph import upstream_steps

    return [s.name for s in upstream_steps(BY_NAME[name], STEPS)]


def earlier_reads(name: str) -> dict[str, int]:
    """The tables of :func:`asset_deps` that step ``name`` reads only in partitions before each of its own (every
    read of them ends a partition or more before the window's end), with how many partitions back the furthest
    reaches: Dagster draws them as dependencies on those earlier partitions. The steps still run after the step
    writing them (:func:`~gpu_health.steps.graph.order`): in a range, a partition reads its predecessors' rows."""
    reads: dict[str, list[Read]] = {}
    for r in BY_NAME[name].reads:
        reads.setdefault(r.table, []).append(r)
    return {table: -(-max(r.before for r in rs) // T.FIVE) for table, rs in reads.items()
            if table in asset_deps(name) and not any(r.whole for r in rs) and max(r.after for r in rs) <= EARLIER}


def own_earlier_reads(name: str) -> dict[str, int]:
    """The tables step ``name`` writes and also reads in the partitions before its window (a source's re-delivery
    window, the alerts' last weeks, the SLO budgets' last days), with how many partitions back the read reaches: a
    partition's rows depend on its predecessors' in the same table, a dependency Dagster draws on the asset's own
    earlier partitions, so a backfill computes a partition only after those (in one run of the range, or run after
    run). A read of the table's later partitions (the alerts re-deriving their successors) is a write ahead, not a
    dependency. Nor is the loss tree's trend (TREND): it feeds the goodput asset's picture, never a row, and as a
    dependency of that multi-asset it would hold all five of its tables to their earlier partitions (a backfill
    would then walk the range a partition per run)."""
    me = BY_NAME[name]
    if me.cadence != FIVE_MINUTE:
        return {}
    reads = [r for r in me.reads if r.table in me.writes and r is not TREND]
    reach = {t: max(r.before for r in reads if r.table == t) for t in {r.table for r in reads}}
    return {t: -(-b // T.FIVE) for t, b in reach.items() if b > pd.Timedelta(0)}


def asset_deps(name: str) -> list[str]:
    """The tables (assets) step ``name`` depends on: each table it reads that another step writes; a side table
    (``source_rejects``, ``source_gaps``) stands for the source steps that write it."""
    me = BY_NAME[name]
    out: set[str] = set()
    for table in me.read_tables():
        for s in STEPS:
            if s.name == me.name:
                continue
            if table in s.writes:
                out.add(table)
            elif table in s.side_writes:
                out.update(s.writes)
    return sorted(out - set(me.writes))

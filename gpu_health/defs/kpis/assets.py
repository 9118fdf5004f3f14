"""The loss tree and the north star (5-minute, provisional)."""

import dagster as dg
import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.defs import headlines
from gpu_health.defs.common import asset_from_catalog, derived_asset, output_metadata, step_deps, window_of
from gpu_health.defs.common import retry_transient_errors
from gpu_health.defs.resources import WarehouseResource
from gpu_health.metrics import charts
from gpu_health.steps.checks import LATENCY_MATCHES_REQUESTS, PAID_INVARIANT
from gpu_health.steps.registry import GOODPUT_TREND, inputs_for, step

# the loss tree's five tables: one step, one multi-asset; model, group, owner and grain from the catalogue
OUTS = step("goodput").writes


def _render_pictures(start, end) -> bool:
    """Pictures cost ~1-2 s (matplotlib): draw them once per range run (for its latest partition) and on the
    partition that closes each hour, never on every 5-minute run."""
    return (end - start) > PARTITION or end.minute == 0


def _pictures(frame: pd.DataFrame, history: pd.DataFrame, end) -> dict:
    """The loss tree of the range's latest partition and the goodput of the 24 hours up to ``end``."""
    latest = frame[frame["partition_start"] == frame["partition_start"].max()]
    p = latest["partition_start"].iloc[0]
    trend = pd.concat([history, frame[["partition_start", "region", "goodput"]]])
    trend = trend[trend["partition_start"] >= end - pd.Timedelta(hours=24)]
    return {"loss_tree": dg.MetadataValue.md(charts.waterfall(charts.shares_of(latest), f"Loss tree {p:%Y-%m-%d %H:%M} UTC")),
            "goodput_trend": dg.MetadataValue.md(charts.trend(trend, "Goodput, last 24 h"))}


def paid_invariant(found: dict) -> dg.AssetCheckResult:
    """States must sum to paid GPU-minutes (steps.telemetry.paid_invariant) as an ERROR check."""
    bad = found["examples"]
    return dg.AssetCheckResult(
        check_name=PAID_INVARIANT[1], asset_key=PAID_INVARIANT[0], passed=found["passed"],
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"slices": found["slices"], "violations": found["violations"],
                  "max_abs_error_gpu_minutes": found["max_abs_error_gpu_minutes"],
                  "examples": dg.MetadataValue.md(bad.to_markdown(index=False) if len(bad) else "(none)")},
    )


def build_kpi_assets(five_minute) -> list:
    outs = {name: asset_from_catalog(name, out=True) for name in OUTS}

    @dg.multi_asset(
        name="goodput", outs=outs, partitions_def=five_minute, backfill_policy=dg.BackfillPolicy.single_run(),
        deps=step_deps("goodput"),
        check_specs=[dg.AssetCheckSpec(PAID_INVARIANT[1], asset=PAID_INVARIANT[0], blocking=True,
                                       description="Every partition's states sum exactly to paid GPU-minutes.")],
    )
    @retry_transient_errors
    def goodput(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
        """The five tables of the loss tree commit together (one transaction): a crash or a database killed
        mid-write leaves the partition's old loss tree or its new one, never some tables of each."""
        wh = warehouse.get()
        start, end = window_of(context)
        # (the step's declared trend: the only table read here, through the step's declaration)
        history = inputs_for("goodput", wh, start, end).span(
            "cluster_goodput", end - GOODPUT_TREND, start, columns=["partition_start", "region", "goodput"]) \
            if _render_pictures(start, end) else None
        result = step("goodput").run(wh, start, end)  # stores the outputs (STORED_BY_STEP: the IO manager skips them)
        tables = result.tables
        for name in OUTS:
            frame = tables[name]
            extra = {}
            if name == "cluster_goodput" and len(frame):
                # the numbers on every materialization (Dagster plots them), the pictures once an hour
                extra = headlines.goodput_headline(frame)
                mean = frame.loc[frame["region"] == "*", "goodput"].mean()
                extra |= {"goodput_mean": float(mean)} if pd.notna(mean) else {}
                if _render_pictures(start, end):
                    extra |= _pictures(frame, history, end)
            yield dg.Output(frame, output_name=name, metadata=output_metadata(frame, **extra))
        yield paid_invariant(result.findings["paid_invariant"])

    # each KPI's cluster-wide headline, on every materialization
    kpis = derived_asset("kpi_values", partitions_def=five_minute,
                         checks=lambda result, wh, start, end: ([], headlines.kpi_headline(result.tables["kpi_values"])))

    def _serving(result, wh, start, end):
        slis, mismatched = result.tables["serving_slis"], result.findings["mismatched"]
        check = dg.AssetCheckResult(
            check_name=LATENCY_MATCHES_REQUESTS[1], asset_key=LATENCY_MATCHES_REQUESTS[0], passed=mismatched.empty,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"mismatched_minutes": len(mismatched),
                      "examples": dg.MetadataValue.md(mismatched.head(20).to_markdown(index=False) if len(mismatched) else "(none)")})
        return [check], {"deployments": int(slis[["region", "model_name", "model_version"]].drop_duplicates().shape[0]) if len(slis) else 0}

    serving = derived_asset(
        "serving_slis", partitions_def=five_minute, checks=_serving,
        check_specs=[dg.AssetCheckSpec(LATENCY_MATCHES_REQUESTS[1], asset=LATENCY_MATCHES_REQUESTS[0],
                                       description="WARN when a minute's latency +Inf bucket differs from its requests "
                                                   "(the two source tables came from different scrapes).")])
    budgets = derived_asset("slo_error_budgets", partitions_def=five_minute)
    versions = derived_asset("slo_version_events", partitions_def=five_minute)
    racks = derived_asset("rack_facility", partitions_def=five_minute)
    return [goodput, kpis, serving, budgets, versions, racks]

"""One asset per telemetry source, each guarded by its pandera contract."""

import dagster as dg
import pandas as pd

from gpu_health.catalog import CALENDAR, CATALOG, DAILY, FIVE_MINUTE, SOURCES
from gpu_health.defs.common import asset_from_catalog, contract_check_result, contract_check_spec, preview, step_deps
from gpu_health.defs.common import retry_transient_errors
from gpu_health.defs.resources import TelemetrySourceResource, WarehouseResource
from gpu_health.sources.read import read_validated  # noqa: F401  (re-exported: tests and tools import it here)
from gpu_health.steps.registry import step

# owner and grain of each source table: the table catalogue's (gpu_health/catalog.py)
OWNER = {name: CATALOG[name].owner for name in SOURCES}
GRAIN = {name: CATALOG[name].grain for name in SOURCES}


def build_source_asset(table: str, partitions_def) -> dg.AssetsDefinition:
    # deps: its own earlier partitions, as far back as it looks for re-sent rows (none for a daily or calendar one)
    @asset_from_catalog(table, partitions_def=partitions_def, check_specs=[contract_check_spec(table)],
                        deps=step_deps(table))
    @retry_transient_errors
    def _asset(context: dg.AssetExecutionContext, source: TelemetrySourceResource, warehouse: WarehouseResource):
        start = end = None
        if context.assets_def.partitions_def is not None:  # one partition or a single-run range
            tw = context.partition_time_window
            start, end = pd.Timestamp(tw.start).tz_convert("UTC"), pd.Timestamp(tw.end).tz_convert("UTC")
        result = step(table).run(warehouse.get(), start, end, source=source.get())  # stores rows, rejects, gaps
        found, frame = result.findings, result.tables[table]
        for _, f in found["quarantined"].iterrows():
            context.log.warning(f"{table}: partition {f['partition_start']} quarantined whole: {f['reason']}")
        for col, origins in found["dropped_columns"].items():
            context.log.warning(f"{table}: extra column '{col}' dropped (schema evolution: not in the contract) "
                                f"in {len(origins)} file(s), e.g. {origins[0]}")
        gaps = found["gaps"]
        if len(gaps):
            context.log.warning(f"{table}: {len(gaps)} partition(s) missing data ({result.metadata['missing_family']} "
                                f"silent); written empty, recorded in source_gaps")
        if found.get("calendar_kept"):
            context.log.warning(f"{table}: {found['calendar_kept']}")
        check = contract_check_result(table, len(frame), found["rejects"], dropped_columns=found["dropped_columns"],
                                      partitions=found.get("partitions"), kept=found.get("calendar_kept"),
                                      duplicates_dropped=result.metadata["duplicates_dropped"])
        # validate_frame returned Model.validate(df, lazy=True) output: coerced to the contract (style.md)
        yield dg.Output(frame, metadata={
            **result.metadata, "rejected_rows": check.metadata["rejected_rows"],
            "quarantined_files": check.metadata["quarantined_files"], "preview": preview(frame)})
        yield check

    return _asset


def build_telemetry_assets(five_minute, daily) -> list[dg.AssetsDefinition]:
    """One asset per source, partitioned as its files land (its entry's ``landing``): the 5-minute sources first."""
    partitions = {FIVE_MINUTE: five_minute, DAILY: daily, CALENDAR: None}
    by_layout = sorted(SOURCES, key=lambda t: list(partitions).index(CATALOG[t].landing))
    return [build_source_asset(t, partitions[CATALOG[t].landing]) for t in by_layout]

"""One asset per telemetry source, each guarded by its pandera contract."""

import dagster as dg
import pandas as pd
from dagster_pandera import pandera_schema_to_dagster_type

from gpu_health.catalog import CATALOG, SOURCES
from gpu_health.contracts import CONTRACTS, FIVE_MINUTE_SOURCES, OPTIONAL_SOURCES
from gpu_health.defs.common import KINDS, OWNER_TAGS, column_schema, contract_check_result, contract_check_spec, preview
from gpu_health.defs.common import retry_transient_errors
from gpu_health.defs.resources import STORED_BY_STEP, TelemetrySourceResource, WarehouseResource
from gpu_health.sources.read import read_validated  # noqa: F401  (re-exported: tests and tools import it here)
from gpu_health.steps.registry import step

# owner and grain of each source table: the table catalogue's (gpu_health/catalog.py)
OWNER = {name: CATALOG[name].owner for name in SOURCES}
GRAIN = {name: CATALOG[name].grain for name in SOURCES}


def build_source_asset(table: str, partitions_def) -> dg.AssetsDefinition:
    model = CONTRACTS[table]

    @dg.asset(
        name=table,
        group_name="telemetry",
        owners=OWNER_TAGS[OWNER[table]],
        kinds=KINDS,
        partitions_def=partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run() if partitions_def is not None else None,
        io_manager_key="warehouse_io_manager",
        dagster_type=pandera_schema_to_dagster_type(model.to_schema()),
        check_specs=[contract_check_spec(table)],
        description=f"Source table `{table}` ({GRAIN[table]}), read from the configured source and "
                    f"validated against the `{model.__name__}` contract; rows that break it are quarantined "
                    f"in `source_rejects`.",
        metadata={"dagster/column_schema": column_schema(model), "grain": GRAIN[table], STORED_BY_STEP: True},
    )
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
    assets = [build_source_asset(t, five_minute) for t in FIVE_MINUTE_SOURCES + OPTIONAL_SOURCES]
    assets.append(build_source_asset("cost_capacity", daily))
    assets.append(build_source_asset("maintenance_windows", None))
    return assets

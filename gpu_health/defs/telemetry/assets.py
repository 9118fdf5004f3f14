"""One asset per telemetry source, each guarded by its pandera contract."""

import dagster as dg
import pandas as pd
from dagster_pandera import pandera_schema_to_dagster_type

from gpu_health.catalog import CATALOG, SOURCES
from gpu_health.contracts import CONTRACTS, FIVE_MINUTE_SOURCES, OPTIONAL_SOURCES
from gpu_health.contracts.validate import ContractViolation
from gpu_health.defs.common import KINDS, OWNERS, column_schema, contract_check_result, contract_check_spec, preview
from gpu_health.defs.common import retry_transient_errors
from gpu_health.defs.resources import TelemetrySourceResource, WarehouseResource
from gpu_health.sources.read import read_validated  # noqa: F401  (re-exported: tests and tools import it here)
from gpu_health.sources.read import read_window

# owner and grain of each source table: the table catalogue's (gpu_health/catalog.py)
OWNER = {name: CATALOG[name].owner for name in SOURCES}
GRAIN = {name: CATALOG[name].grain for name in SOURCES}
# ranges are processed in chunks so a week-long backfill never holds a week in memory
CHUNK = pd.Timedelta(days=1)


def _chunks(start: pd.Timestamp | None, end: pd.Timestamp | None):
    if start is None:
        yield None, None
        return
    t = start
    while t < end:
        yield t, min(t + CHUNK, end)
        t = t + CHUNK


def build_source_asset(table: str, partitions_def) -> dg.AssetsDefinition:
    model = CONTRACTS[table]

    @dg.asset(
        name=table,
        group_name="telemetry",
        owners=OWNERS[OWNER[table]],
        kinds=KINDS,
        partitions_def=partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run() if partitions_def is not None else None,
        io_manager_key="warehouse_io_manager",
        dagster_type=pandera_schema_to_dagster_type(model.to_schema()),
        check_specs=[contract_check_spec(table)],
        description=f"Source table `{table}` ({GRAIN[table]}), read from the configured source and "
                    f"validated against the `{model.__name__}` contract; rows that break it are quarantined "
                    f"in `source_rejects`.",
        metadata={"dagster/column_schema": column_schema(model), "grain": GRAIN[table]},
    )
    @retry_transient_errors
    def _asset(context: dg.AssetExecutionContext, source: TelemetrySourceResource, warehouse: WarehouseResource):
        src = source.get()
        wh = warehouse.get()
        if context.assets_def.partitions_def is not None:  # one partition or a single-run range
            tw = context.partition_time_window
            start, end = pd.Timestamp(tw.start).tz_convert("UTC"), pd.Timestamp(tw.end).tz_convert("UTC")
        else:
            start = end = None
        valid, rejects, nulled, dropped, missing = [], [], 0, {}, []
        for c_start, c_end in _chunks(start, end):
            v, gaps = read_window(src, table, c_start, c_end)
            files = v.files_quarantined
            if start is None and len(files):
                # the calendar is read whole: an empty one would turn planned maintenance into pages, so
                # it fails (naming the file) and the stored calendar stays as it was
                raise ContractViolation(table, str(files["origin"].iloc[0]), files["column"].iloc[0],
                                        str(files["reason"].iloc[0]))
            for _, f in files.iterrows():
                context.log.warning(f"{table}: partition {f['partition_start']} quarantined whole: {f['reason']}")
            for col, origins in v.dropped_columns.items():
                dropped.setdefault(col, []).extend(origins)
                context.log.warning(f"{table}: extra column '{col}' dropped (schema evolution: not in the contract) "
                                    f"in {len(origins)} file(s), e.g. {origins[0]}")
            valid.append(v.valid)
            rejects.append(v.rejects)
            nulled += v.sentinels_nulled
            wh.replace_window("source_rejects", v.rejects, c_start, c_end, where={"source": table})
            if c_start is not None and table in FIVE_MINUTE_SOURCES:
                wh.replace_window("source_gaps", gaps, c_start, c_end, where={"source": table})
            missing.append(gaps)
        frame = pd.concat(valid, ignore_index=True) if len(valid) > 1 else valid[0]
        rej = pd.concat(rejects, ignore_index=True)
        gaps = pd.concat(missing, ignore_index=True)
        if len(gaps):
            context.log.warning(f"{table}: {len(gaps)} partition(s) missing data ({', '.join(sorted(set(gaps['missing_family'])))} "
                                f"silent); written empty, recorded in source_gaps")
        check = contract_check_result(table, len(frame), rej, dropped_columns=dropped)
        # validate_frame returned Model.validate(df, lazy=True) output: coerced to the contract (style.md)
        yield dg.Output(frame, metadata={
            "rows": len(frame), "rejected_rows": check.metadata["rejected_rows"],
            "quarantined_files": check.metadata["quarantined_files"],
            "dcgm_sentinels_nulled": nulled, "preview": preview(frame),
            "missing_data_partitions": len(gaps),
            "missing_family": ", ".join(sorted(set(gaps["missing_family"]))) if len(gaps) else "",
        })
        yield check

    return _asset


def build_telemetry_assets(five_minute, daily) -> list[dg.AssetsDefinition]:
    assets = [build_source_asset(t, five_minute) for t in FIVE_MINUTE_SOURCES + OPTIONAL_SOURCES]
    assets.append(build_source_asset("cost_capacity", daily))
    assets.append(build_source_asset("maintenance_windows", None))
    return assets

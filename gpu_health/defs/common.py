"""Conventions shared by every asset: kinds, owners, column schemas, the contract check factory."""

import dagster as dg
import pandas as pd
import pandera.pandas as pa

from gpu_health.contracts.table import COLUMNAR, SQL
from gpu_health.defs.retry import retry_transient_errors, transient_retry  # noqa: F401  (re-exported)
# above this share of a partition's rows rejected, downstream numbers would be wrong (the source step quarantines it)
from gpu_health.steps.checks import contract_check
from gpu_health.steps.ingest import ERROR_REJECT_SHARE

KINDS = {"pandas", "pandera"}
# where a table's rows are stored (the catalogue's ``storage``), shown as a kind: the telemetry store's Parquet
# files, or the SQL warehouse (SQLite or PostgreSQL: the URL is a resource's, unknown when the assets are defined)
STORAGE_KINDS = {COLUMNAR: "parquet", SQL: "sql"}
OWNER_TAGS = {"infra": ["team:infra"], "ml_platform": ["team:ml-platform"], "finance": ["team:finance"]}
MAX_CHECK_EXAMPLES = 20
# A run tag: the run of the partitions after this run's range follows it in order (a range run's next day), so a
# step re-deriving later partitions (the alerts) leaves them to it (``judged_later``, gpu_health.steps.direct)
JUDGED_LATER_TAG = "gpu_health/judged_later"
# the run tags that make one run of a partition range (a single-run backfill)
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def column_schema(model: type[pa.DataFrameModel]) -> dg.TableSchema:
    schema = model.to_schema()
    return dg.TableSchema(columns=[
        dg.TableColumn(name, str(col.dtype), description=col.description or "",
                       constraints=dg.TableColumnConstraints(nullable=bool(col.nullable)))
        for name, col in schema.columns.items()
    ])


def preview(frame: pd.DataFrame, rows: int = 5) -> dg.MetadataValue:
    return dg.MetadataValue.md(frame.head(rows).to_markdown(index=False) if len(frame) else "(no rows)")


def contract_check_spec(asset_name: str) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(
        name=contract_check(asset_name), asset=asset_name, blocking=True,
        description=f"Rows of {asset_name} that break the pandera contract are quarantined; "
                    f"judged per partition: a partition with more than {ERROR_REJECT_SHARE:.0%} of its rows rejected "
                    f"is quarantined whole, like a file that is unreadable, wrong-shaped or outside its partition, "
                    f"and fails the check with WARN: its minutes are missing data, and every other partition "
                    f"lands. ERROR (blocks downstream) only if rows over that share would feed derived tables.",
    )


def contract_check_result(asset_name: str, accepted: int, rejects: pd.DataFrame,
                          dropped_columns: dict[str, list[str]] | None = None,
                          partitions: pd.DataFrame | None = None, kept: str | None = None,
                          duplicates_dropped: int = 0) -> dg.AssetCheckResult:
    """One result per materialization: counts by reason, the files quarantined whole and at most 20 example rows.

    Severity, per partition (``partitions``: the source step's reject share of each partition with a reject,
    :func:`gpu_health.steps.ingest.quarantine_over_share`): a partition over :data:`ERROR_REJECT_SHARE` is
    quarantined whole by the step, so it fails the check with WARN, like a file quarantined whole: its minutes
    are missing data (the loss tree's ``no_data``), not a wrong number, and a blocking ERROR would cost every
    other partition of a single-run range its derived tables. ERROR only when a partition over the share still
    fed the table (``partitions`` not given: the share of the whole run). Each partition's share and verdict is in
    the metadata (``partition_severities``). ``kept``: the calendar's file could not be used and the stored one
    was kept (WARN, named). Extra columns dropped (schema evolution) are listed but do not fail the check, nor do
    ``duplicates_dropped``, the re-sent rows the source step dropped (at-least-once delivery: the rows are stored
    once), counted so an operator watching the checks sees the re-deliveries.
    """
    whole = rejects["row_index"] == -1 if len(rejects) else pd.Series(dtype=bool)
    files, rows = (rejects[whole], rejects[~whole]) if len(rejects) else (rejects, rejects)
    keys = ["origin", "partition_start", "row_index"]
    n_rej = int(len(rows.drop_duplicates(keys))) if len(rows) else 0
    total = accepted + n_rej
    share = n_rej / total if total else 0.0
    by_reason = (rows.drop_duplicates([*keys, "reason"]).groupby("reason").size().sort_values(ascending=False).to_dict()
                 if n_rej else {})
    examples = rows.drop_duplicates(keys).head(MAX_CHECK_EXAMPLES)[["origin", "row_index", "column", "value", "reason"]] if n_rej else rows
    if partitions is not None and len(partitions):
        leaked = partitions[~partitions["quarantined"].astype(bool) & (partitions["share"] > ERROR_REJECT_SHARE)]
        error = len(leaked) > 0
    else:
        error = share > ERROR_REJECT_SHARE and partitions is None
    severities = [{"partition": pd.Timestamp(p.partition_start).isoformat(), "file": p.origin,
                   "rejected_rows": int(p.rejected), "rows": int(p.rejected + p.accepted), "share": float(p.share),
                   "verdict": "WARN: quarantined whole, missing data" if p.quarantined
                   else ("ERROR" if p.share > ERROR_REJECT_SHARE else "WARN")}
                  for p in (partitions if partitions is not None else pd.DataFrame()).head(MAX_CHECK_EXAMPLES).itertuples()]
    quarantined = [{"partition": None if pd.isna(f["partition_start"]) else pd.Timestamp(f["partition_start"]).isoformat(),
                    "file": f["origin"], "check": f["check"], "reason": f["reason"]}
                   for _, f in files.head(MAX_CHECK_EXAMPLES).iterrows()]
    return dg.AssetCheckResult(
        check_name=contract_check(asset_name), asset_key=asset_name, passed=n_rej == 0 and len(files) == 0,
        severity=dg.AssetCheckSeverity.ERROR if error else dg.AssetCheckSeverity.WARN,
        metadata={"accepted_rows": accepted, "rejected_rows": n_rej, "rejected_share": round(share, 6),
                  "rejects_by_reason": dg.MetadataValue.json({str(k): int(v) for k, v in by_reason.items()}),
                  "partition_severities": dg.MetadataValue.json(severities),
                  **({"calendar_kept": kept} if kept else {}),
                  "files_quarantined": len(files), "duplicates_dropped": int(duplicates_dropped),
                  "quarantined_files": dg.MetadataValue.json(quarantined),
                  "dropped_columns": dg.MetadataValue.json({c: sorted(set(o))[:MAX_CHECK_EXAMPLES]
                                                            for c, o in (dropped_columns or {}).items()}),
                  "examples": preview(examples, MAX_CHECK_EXAMPLES)},
    )


def window_of(context) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
    """The partition window (one partition or a single-run range), or (None, None)."""
    if context.assets_def.partitions_def is None:
        return None, None
    tw = context.partition_time_window
    return pd.Timestamp(tw.start).tz_convert("UTC"), pd.Timestamp(tw.end).tz_convert("UTC")


def output_metadata(frame: pd.DataFrame, **extra) -> dict:
    return {"rows": len(frame), "preview": preview(frame), **extra}


def asset_from_catalog(name: str, *, partitions_def=None, out: bool = False, **kwargs):
    """The Dagster asset of table ``name`` as its catalogue entry (``gpu_health.catalog``) declares it: group,
    owners, kinds, the Dagster type and column schema of its model, its grain, and its description (the
    catalogue's, the only one; a source's also says where its rows come from and where its rejects go). Its rows
    are the ones its step stored (STORED_BY_STEP: the IO manager leaves them alone), so Dagster and the bulk path
    write the same.

    The ``@dg.asset`` decorator, partitioned by ``partitions_def`` (the partitions of the entry's cadence, or of a
    source's landing layout; None: read whole) with one run per range; ``kwargs`` are the asset's own (``deps``,
    ``check_specs``). ``out=True``: the ``AssetOut`` of one table of a multi-asset (which carries the partitions).
    """
    from dagster_pandera import pandera_schema_to_dagster_type

    from gpu_health.catalog import CATALOG
    from gpu_health.defs.resources import STORED_BY_STEP

    entry = CATALOG[name]
    description = f"{entry.description} Grain: {entry.grain}."
    if entry.kind == "source":
        description += (f" Read from the configured source and validated against the `{entry.model.__name__}` "
                        f"contract; rows that break it are quarantined in `source_rejects`.")
    facts = {"group_name": entry.group, "owners": OWNER_TAGS[entry.owner],
             "kinds": KINDS | {STORAGE_KINDS[entry.storage]},
             "io_manager_key": "warehouse_io_manager", "description": description,
             "dagster_type": pandera_schema_to_dagster_type(entry.model.to_schema()),
             "metadata": {"dagster/column_schema": column_schema(entry.model), "grain": entry.grain,
                          STORED_BY_STEP: True}}
    if out:
        return dg.AssetOut(**facts, is_required=True, **kwargs)
    return dg.asset(name=name, partitions_def=partitions_def,
                    backfill_policy=dg.BackfillPolicy.single_run() if partitions_def is not None else None,
                    **facts, **kwargs)


def _on_earlier(table: str, partitions: int) -> dg.AssetDep:
    """A dependency on the ``partitions`` partitions of ``table`` before each of the asset's own; a partition near
    the first one has fewer of them, not an error."""
    return dg.AssetDep(table, partition_mapping=dg.TimeWindowPartitionMapping(
        start_offset=-partitions, end_offset=-1, allow_nonexistent_upstream_partitions=True))


def step_deps(name: str) -> list:
    """Dagster's ``deps`` of the assets step ``name`` writes, from its declared reads
    (:func:`~gpu_health.steps.registry.asset_deps`): a table it reads only in the partitions before each of its own
    (:func:`~gpu_health.steps.registry.earlier_reads`, the pages the baselines leave out) is a dependency on those
    earlier partitions, so the lineage draws the same partition's edges in the order the data flows. A table the
    step writes and reads back before its window (:func:`~gpu_health.steps.registry.own_earlier_reads`) is a
    dependency of the asset on its own earlier partitions: a backfill (Dagster's asset backfill daemon) then
    computes a partition only after them, in one run of the range or run after run, never side by side."""
    from gpu_health.steps.registry import asset_deps, earlier_reads, own_earlier_reads

    earlier = earlier_reads(name)
    return [*(_on_earlier(t, earlier[t]) if t in earlier else t for t in asset_deps(name)),
            *(_on_earlier(t, n) for t, n in own_earlier_reads(name).items())]


def derived_asset(name: str, *, partitions_def, checks=None, check_specs=None):
    """The asset of table ``name`` (:func:`asset_from_catalog`), computed and stored by its declared step
    (``gpu_health.steps.registry``): its ``deps`` come from the step's declared reads.

    ``checks(result, warehouse, start, end)`` returns (check results, extra output metadata) from the step's
    :class:`~gpu_health.steps.graph.StepResult`.
    """
    from gpu_health.defs.resources import WarehouseResource
    from gpu_health.steps.registry import step

    the_step = step(name)

    @asset_from_catalog(name, partitions_def=partitions_def, deps=step_deps(name), check_specs=check_specs)
    @retry_transient_errors
    def _asset(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
        start, end = window_of(context)
        wh = warehouse.get()
        judged_later = the_step.rederives_later and context.run.tags.get(JUDGED_LATER_TAG) == "true"
        result = the_step.run(wh, start, end, **({"judged_later": True} if judged_later else {}))
        events, extra = checks(result, wh, start, end) if checks is not None else ([], {})
        frame = result.tables[name]
        yield dg.Output(frame, metadata=output_metadata(frame, **{k: v for k, v in result.metadata.items()
                                                                   if isinstance(v, int | float | str | bool)}, **extra))
        yield from events

    return _asset

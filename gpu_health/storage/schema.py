"""The warehouse schema: one SQLAlchemy ``MetaData``, the only schema truth.

Source tables are derived from their pandera contracts (so a column exists in
exactly one hand-written place); derived tables register their pandera model in
:data:`DERIVED_MODELS` and are derived the same way. ``sql/schema.sql`` is the
reviewed rendering of this module (``python -m gpu_health.storage.schema``
rewrites it; a test fails when they drift).

The minute-grain telemetry tables (:data:`COLUMNAR_TABLES`) are declared here
like every other table, but stored as Parquet by the columnar telemetry store
(``storage/telemetry_store.py``), never as SQL rows: their Arrow schemas
(:func:`arrow_schema`) derive from the same ``Table`` objects, and the SQL
warehouse neither creates nor renders them.
"""

import sys

import pandas as pd
import pandera.pandas as pa
import pyarrow
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from gpu_health.contracts.models import CONTRACTS, PARTITION_COLUMN

metadata = sa.MetaData()

# Tables stored columnar (Parquet in the telemetry store), not as SQL rows: the minute-grain telemetry, one row per
# GPU, node, link or running job per minute. These grow with the fleet times the minutes (1,200 GPUs: 1.7 M GPU rows a
# day; 100,000 GPUs: 144 M), are written once per partition and read by time window, which is what a column store is
# for. The event and metadata sources (scheduler_events, job_metadata, change_events) are per event or per job, a few
# ten thousand rows a day, and stay in SQL beside the KPI, loss-tree, alert and finance tables that join them.
#
# The serving layer's two tables are minute-grain too and go the same way: ``inference_requests`` is one row per
# deployment per minute and ``inference_latency_buckets`` one per deployment x histogram x bucket per minute (a
# classic histogram exports ~10-20 buckets, so 2 histograms x 15 buckets x a deployment x 1,440 minutes is 43,000
# rows a day per deployment; a few hundred deployments is tens of millions). Both are written once per partition and
# read by window (``serving_slis`` sums a partition's buckets); what SQL users join is the 5-minute ``serving_slis``.
COLUMNAR_TABLES: frozenset[str] = frozenset({"gpu_telemetry", "node_telemetry", "network_telemetry", "job_runtime_metrics",
                                            "inference_requests", "inference_latency_buckets",
                                            # the platform layer: one row per pod (node) per minute, like the GPUs
                                            "kube_pods", "kube_nodes"})

# derived tables: name -> (pandera model, partition column). Filled by gpu_health.metrics.
DERIVED_MODELS: dict[str, tuple[type[pa.DataFrameModel], str | None]] = {}


def _sa_type(dtype) -> sa.types.TypeEngine:
    kind = dtype.type if hasattr(dtype, "type") else dtype
    text = str(dtype)
    if isinstance(kind, pd.DatetimeTZDtype) or text.startswith("datetime64"):
        return sa.DateTime(timezone=True)
    if text == "date":
        return sa.Date()
    if text == "bool":
        return sa.Boolean()
    if text in ("int64", "Int64", "int32"):
        return sa.BigInteger()
    if text in ("float64", "Float64", "float32"):
        return sa.Float()
    return sa.Text()


def grain(model: type[pa.DataFrameModel], partition_col: str | None) -> list[str]:
    """The table's key: the contract's unique columns, partition column first (clusters windows)."""
    schema = model.to_schema()
    keys = list(schema.unique or []) or [n for n, c in schema.columns.items() if c.unique]
    if partition_col and keys and partition_col not in keys:
        keys = [partition_col] + keys
    elif partition_col in keys:
        keys = [partition_col] + [k for k in keys if k != partition_col]
    return keys


def _table_from_model(name: str, model: type[pa.DataFrameModel], partition_col: str | None) -> sa.Table:
    schema = model.to_schema()
    keys = grain(model, partition_col)
    cols = [
        sa.Column(col_name, _sa_type(col.dtype), nullable=bool(col.nullable), comment=(col.description or None))
        for col_name, col in schema.columns.items()
    ]
    extra = [sa.PrimaryKeyConstraint(*keys, name=f"pk_{name}")] if keys else []
    table = sa.Table(name, metadata, *cols, *extra,
                     comment=(model.__doc__ or "").strip().splitlines()[0] if model.__doc__ else None,
                     # SQLite: cluster rows by the key, so a window is one contiguous range
                     sqlite_with_rowid=not keys)
    if partition_col and (not keys or keys[0] != partition_col):
        sa.Index(f"ix_{name}_{partition_col}", table.c[partition_col])
    return table


def _build_sources() -> dict[str, sa.Table]:
    return {name: _table_from_model(name, model, PARTITION_COLUMN[name]) for name, model in CONTRACTS.items()}


SOURCE_TABLES = _build_sources()

source_rejects = sa.Table(
    "source_rejects", metadata,
    sa.Column("source", sa.Text, nullable=False, comment="Contract table the row was read for."),
    sa.Column("partition_start", sa.DateTime(timezone=True), nullable=True, comment="Partition of the file the row came from (the row's own partition for non-file sources)."),
    sa.Column("origin", sa.Text, nullable=False, comment="File, URL or simulator the row came from."),
    sa.Column("row_index", sa.BigInteger, nullable=False, comment="Row number within its file (0-based); -1 = the whole file (quarantined whole, or a stray file not read)."),
    sa.Column("column", sa.Text, nullable=True, comment="Column that broke the rule."),
    sa.Column("check", sa.Text, nullable=False, comment="Contract check that failed."),
    sa.Column("value", sa.Text, nullable=True, comment="Offending value."),
    sa.Column("reason", sa.Text, nullable=False, comment="Human-readable reason."),
    sa.Column("row_json", sa.Text, nullable=False, comment="The whole row, so nothing is lost."),
    comment="Quarantined source rows with the reason they broke their contract.",
)
sa.Index("ix_source_rejects_source_partition", source_rejects.c.source, source_rejects.c.partition_start)

source_gaps = sa.Table(
    "source_gaps", metadata,
    sa.Column("source", sa.Text, nullable=False, comment="Contract table that has no data for the partition."),
    sa.Column("partition_start", sa.DateTime(timezone=True), nullable=False, comment="5-minute partition start."),
    sa.Column("partition_end", sa.DateTime(timezone=True), nullable=False, comment="5-minute partition end."),
    sa.Column("missing_family", sa.Text, nullable=False,
              comment="Metric family or input whose silence this is (e.g. node_cpu_seconds_total)."),
    sa.Column("origin", sa.Text, nullable=False, comment="The source read, with the readiness decision."),
    sa.Column("reason", sa.Text, nullable=False, comment="Human-readable reason."),
    sa.PrimaryKeyConstraint("partition_start", "source", name="pk_source_gaps"),
    comment="Missing data: source partitions written empty because their producer was silent (absent "
            "exporter or dump); the partition was computed without them instead of waiting forever.",
)


def register_derived(name: str, model: type[pa.DataFrameModel], partition_col: str | None) -> sa.Table:
    """Declare a derived table from its pandera model (idempotent)."""
    if name in metadata.tables:
        return metadata.tables[name]
    DERIVED_MODELS[name] = (model, partition_col)
    return _table_from_model(name, model, partition_col)


def sql_tables() -> list[sa.Table]:
    """The tables the SQL warehouse creates: every declared table but the columnar ones, in dependency order."""
    return [t for t in metadata.sorted_tables if t.name not in COLUMNAR_TABLES]


def _arrow_type(col: sa.Column) -> pyarrow.DataType:
    """The Arrow type a column is stored as in Parquet.

    Timestamps are microseconds, UTC-adjusted: the unit Spark, Trino and DuckDB all read as a timestamp (Spark
    rejects nanosecond Parquet timestamps), and finer than any telemetry clock (DCGM samples at >= 1 ms).
    """
    t = col.type
    if isinstance(t, sa.DateTime):
        return pyarrow.timestamp("us", tz="UTC")
    if isinstance(t, sa.Date):
        return pyarrow.date32()
    if isinstance(t, sa.Boolean):
        return pyarrow.bool_()
    if isinstance(t, sa.BigInteger):
        return pyarrow.int64()
    if isinstance(t, sa.Float):
        return pyarrow.float64()
    return pyarrow.string()


def arrow_schema(table: str, *, descriptions: bool = True) -> pyarrow.Schema:
    """The Arrow schema of ``table``, derived from its declaration: names, order, types, nullability and (unless
    ``descriptions=False``) each column's description as field metadata.

    The telemetry store leaves the descriptions out: they would be repeated in the footer of every 5-minute file
    (~19 KB for the four tables' files of one partition, ~5 MB a day), and the catalogue already holds them.
    """
    if table not in metadata.tables:
        import gpu_health.metrics  # noqa: F401  (registers derived tables)
    tbl = metadata.tables[table]
    return pyarrow.schema([pyarrow.field(c.name, _arrow_type(c), nullable=bool(c.nullable),
                                         metadata={"description": c.comment} if c.comment and descriptions else None)
                           for c in tbl.columns])


def partition_column(table: str) -> str | None:
    if table in PARTITION_COLUMN:
        return PARTITION_COLUMN[table]
    if table in ("source_rejects", "source_gaps"):
        return "partition_start"
    return DERIVED_MODELS[table][1]


def render_sql(dialect_name: str = "postgresql") -> str:
    """DDL of every table, as reviewed in sql/schema.sql."""
    import gpu_health.metrics  # noqa: F401  (registers derived tables)

    dialect = postgresql.dialect() if dialect_name == "postgresql" else sqlite.dialect()
    out = ["-- Generated from gpu_health/storage/schema.py by `python -m gpu_health.storage.schema`.",
           "-- Do not edit by hand: a test fails when this file and the module drift.",
           "--",
           "-- Not in SQL: the minute-grain telemetry tables " + ", ".join(sorted(COLUMNAR_TABLES)) + " are stored",
           "-- as Parquet in the telemetry store, <telemetry_dir>/<table>/date=YYYY-MM-DD/<HHMM>.parquet (README).", ""]
    for table in sql_tables():
        out.append(str(CreateTable(table).compile(dialect=dialect)).strip() + ";")
        for idx in sorted(table.indexes, key=lambda i: i.name):
            out.append(str(CreateIndex(idx).compile(dialect=dialect)).strip() + ";")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover - a developer command
    from pathlib import Path

    # run as a script this file is `__main__`, a second copy of the module: the derived tables
    # register into the imported module's metadata, so render from that one
    from gpu_health.storage import schema

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "sql/schema.sql")
    target.write_text(schema.render_sql())
    print(f"wrote {target}")

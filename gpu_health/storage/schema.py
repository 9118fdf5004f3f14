"""The warehouse schema: one SQLAlchemy ``MetaData``, derived from the table catalogue.

Every table of :mod:`gpu_health.catalog` with a pandera model becomes a
``Table`` here, its columns, types, nullability, comments and key derived from
the model (so a column exists in exactly one hand-written place); the two
quarantine tables, which hold other tables' broken rows as text, are declared
here directly. ``sql/schema.sql`` is the reviewed rendering of this module
(``python -m gpu_health.storage.schema`` rewrites it; a test fails when they
drift).

The tables the catalogue stores columnar (:data:`COLUMNAR_TABLES`, the
minute-grain telemetry) are declared here like every other table, but stored as
Parquet by the columnar telemetry store (``storage/telemetry_store.py``), never
as SQL rows: their Arrow schemas (:func:`arrow_schema`) derive from the same
``Table`` objects, and the SQL warehouse neither creates nor renders them.
"""

import sys

import pandas as pd
import pandera.pandas as pa
import pyarrow
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from gpu_health import catalog as C

metadata = sa.MetaData()

# Stored as Parquet in the telemetry store, not as SQL rows: the catalogue says which and why.
COLUMNAR_TABLES: frozenset[str] = C.COLUMNAR_TABLES


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


SOURCE_TABLES: dict[str, sa.Table] = {name: _table_from_model(name, C.CATALOG[name].model, C.partition_column(name))
                                     for name in C.SOURCES}

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


DERIVED_TABLES: dict[str, sa.Table] = {name: _table_from_model(name, C.CATALOG[name].model, C.partition_column(name))
                                      for name in C.DERIVED}
_undeclared = set(metadata.tables) ^ set(C.CATALOG)
if _undeclared:  # pragma: no cover - a declaration error
    raise ValueError(f"schema: tables not both in the catalogue and the schema: {sorted(_undeclared)}")


def sql_tables(columnar: frozenset[str] = COLUMNAR_TABLES) -> list[sa.Table]:
    """The tables the SQL warehouse creates: every declared table but the columnar ones, in dependency order."""
    return [t for t in metadata.sorted_tables if t.name not in columnar]


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
    tbl = metadata.tables[table]
    return pyarrow.schema([pyarrow.field(c.name, _arrow_type(c), nullable=bool(c.nullable),
                                         metadata={"description": c.comment} if c.comment and descriptions else None)
                           for c in tbl.columns])


def partition_column(table: str) -> str | None:
    """The column that places a row of ``table`` in a partition (the catalogue's)."""
    return C.partition_column(table)


def render_sql(dialect_name: str = "postgresql") -> str:
    """DDL of every table, as reviewed in sql/schema.sql."""

    dialect = postgresql.dialect() if dialect_name == "postgresql" else sqlite.dialect()
    out = ["-- Generated from gpu_health/storage/schema.py by `python -m gpu_health.storage.schema`.",
           "-- Do not edit by hand: a test fails when this file and the module drift.",
           "--",
           "-- Not in SQL (the catalogue's columnar tables: minute-grain telemetry, event sources, per-node loss tree,",
           "-- inventory, per-partition baselines): " + ", ".join(sorted(COLUMNAR_TABLES)) + " are stored",
           "-- as Parquet in the telemetry store, <telemetry_dir>/<table>/date=YYYY-MM-DD/<HH>.parquet (a complete hour) or <HHMM>.parquet (docs/storage.md).", ""]
    for table in sql_tables():
        out.append(str(CreateTable(table).compile(dialect=dialect)).strip() + ";")
        for idx in sorted(table.indexes, key=lambda i: i.name):
            out.append(str(CreateIndex(idx).compile(dialect=dialect)).strip() + ";")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover - a developer command
    from pathlib import Path

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "sql/schema.sql")
    target.write_text(render_sql())
    print(f"wrote {target}")

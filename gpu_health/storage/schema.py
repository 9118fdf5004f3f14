"""The warehouse schema: one SQLAlchemy ``MetaData``, the only schema truth.

Source tables are derived from their pandera contracts (so a column exists in
exactly one hand-written place); derived tables register their pandera model in
:data:`DERIVED_MODELS` and are derived the same way. ``sql/schema.sql`` is the
reviewed rendering of this module (``python -m gpu_health.storage.schema``
rewrites it; a test fails when they drift).
"""

import sys

import pandas as pd
import pandera.pandas as pa
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from gpu_health.contracts.models import CONTRACTS, PARTITION_COLUMN

metadata = sa.MetaData()

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


def register_derived(name: str, model: type[pa.DataFrameModel], partition_col: str | None) -> sa.Table:
    """Declare a derived table from its pandera model (idempotent)."""
    if name in metadata.tables:
        return metadata.tables[name]
    DERIVED_MODELS[name] = (model, partition_col)
    return _table_from_model(name, model, partition_col)


def partition_column(table: str) -> str | None:
    if table in PARTITION_COLUMN:
        return PARTITION_COLUMN[table]
    if table == "source_rejects":
        return "partition_start"
    return DERIVED_MODELS[table][1]


def render_sql(dialect_name: str = "postgresql") -> str:
    """DDL of every table, as reviewed in sql/schema.sql."""
    import gpu_health.metrics  # noqa: F401  (registers derived tables)

    dialect = postgresql.dialect() if dialect_name == "postgresql" else sqlite.dialect()
    out = ["-- Generated from gpu_health/storage/schema.py by `python -m gpu_health.storage.schema`.",
           "-- Do not edit by hand: a test fails when this file and the module drift.", ""]
    for table in metadata.sorted_tables:
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

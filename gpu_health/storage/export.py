"""Export any table's rows for a time range to one Parquet or CSV file, wherever the table is stored.

Rules:

* The rows are what :meth:`Warehouse.read_window` returns for ``[start, end)`` on the table's partition column
  (a daily table: the days the range overlaps; a table without one, ``maintenance_windows``: all of it), so an
  export reads the SQL warehouse and the columnar telemetry store alike.
* The range is read one UTC day at a time and appended, so a week of GPU telemetry never sits in memory whole.
* Parquet files carry the table's Arrow schema from the catalogue (types, nullability, column descriptions);
  CSV files have one header line and ISO 8601 timestamps with their UTC offset.
* The file is written to a temporary name beside the target and renamed: a failed export leaves no half file.
"""

import os
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from gpu_health.storage.schema import COLUMNAR_TABLES, arrow_schema, metadata, partition_column
from gpu_health.storage.telemetry_store import to_arrow

FORMATS = (".parquet", ".csv")


def export_table(wh, table: str, start: pd.Timestamp, end: pd.Timestamp, out: str | Path) -> dict:
    """Write ``table``'s rows for ``[start, end)`` from warehouse ``wh`` to ``out`` (``.parquet`` or ``.csv``)."""
    if table not in metadata.tables:
        raise ValueError(f"unknown table {table!r}; tables: {', '.join(sorted(metadata.tables))}")
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{out}: the output format is taken from its suffix, one of {', '.join(FORMATS)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    schema = arrow_schema(table)
    rows = 0
    try:
        writer = pq.ParquetWriter(tmp, schema, compression="zstd") if suffix == ".parquet" else None
        try:
            for c_start, c_end in _chunks(table, start, end):
                frame = wh.read_window(table, c_start, c_end)
                rows += len(frame)
                if writer is not None:
                    writer.write_table(to_arrow(frame, schema, table))
                else:
                    frame.to_csv(tmp, mode="w" if c_start == start or c_start is None else "a",
                                 header=c_start == start or c_start is None, index=False)
        finally:
            if writer is not None:
                writer.close()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return {"table": table, "rows": rows, "out": str(out),
            "stored": "telemetry store (Parquet)" if table in COLUMNAR_TABLES else "SQL warehouse"}


def _chunks(table: str, start: pd.Timestamp, end: pd.Timestamp):
    """``[start, end)`` cut at UTC midnights (a daily table then reads each day once); one whole read for a table
    without a partition column."""
    if partition_column(table) is None:
        yield None, None
        return
    t = start
    while t < end:
        nxt = min((t + pd.Timedelta(days=1)).normalize(), end)
        yield t, nxt
        t = nxt

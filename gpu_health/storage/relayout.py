"""Move a warehouse to the catalogue's layout: the rows of tables the catalogue now stores columnar, still held as
SQL rows by a warehouse written by an older layout (the event sources, the loss tree's per-node facts, the node
inventory and the per-partition baselines), are copied into its telemetry store.

    python -m gpu_health.storage.relayout WAREHOUSE_URL [--telemetry-dir DIR] [--drop]

Rules:

* A table is copied one UTC day of its partition column at a time (a day's window replaces that day in the store
  whole), and each day is read back from the store and compared with the SQL rows it came from: values, dtypes,
  nulls and row order must be identical, or it stops with a ValueError naming the table and day, having dropped
  nothing. Why: the move must lose nothing, and "the store reads back what SQL held" is checked on the data itself,
  not assumed.
* ``--drop`` drops a table's SQL rows (``DROP TABLE``) only after all its days were copied and checked. On SQLite run
  ``VACUUM`` afterwards to give the space back to the file system (it is not done here: it rewrites the whole file).
* A table the SQL warehouse does not hold (a warehouse created with this layout) is skipped; re-running is safe (a
  day copied again replaces itself).
"""

from __future__ import annotations

import argparse
import json

import pandas as pd
import sqlalchemy as sa

from gpu_health import catalog
from gpu_health.storage.schema import COLUMNAR_TABLES, partition_column
from gpu_health.storage.warehouse import Warehouse, masked_url

DAY = pd.Timedelta(days=1)


def sql_held(url: str) -> list[str]:
    """The tables stored columnar by the catalogue that the SQL warehouse at ``url`` still has as SQL tables."""
    names = set(sa.inspect(Warehouse(url).engine).get_table_names())
    return sorted(t for t in COLUMNAR_TABLES if t in names)


def relayout(url: str, telemetry_dir=None, *, tables: list[str] | None = None, drop: bool = False) -> dict:
    """Copy ``tables`` (default: :func:`sql_held`) from SQL rows into the telemetry store of the warehouse at
    ``url``; returns ``{table: {"rows": n, "days": d}}`` (module docstring for the rules)."""
    held = sql_held(url)
    tables = held if tables is None else tables
    missing = set(tables) - set(held)
    if missing:
        raise ValueError(f"not held as SQL tables at {masked_url(url)}: {sorted(missing)}")
    # the SQL side: a warehouse that routes these tables to SQL (read only); the store side: the catalogue's layout
    old = Warehouse(url, telemetry_dir, columnar=COLUMNAR_TABLES - set(tables))
    new = Warehouse(url, telemetry_dir)
    out = {}
    for name in tables:
        col = partition_column(name)
        table = sa.Table(name, sa.MetaData(), autoload_with=old.engine)
        with old.engine.connect() as conn:
            lo, hi = conn.execute(sa.select(sa.func.min(table.c[col]), sa.func.max(table.c[col]))).one()
        rows = days = 0
        if lo is not None:
            first, last = (pd.Timestamp(v) for v in (lo, hi))
            first = (first.tz_localize("UTC") if first.tzinfo is None else first.tz_convert("UTC")).normalize()
            last = last.tz_localize("UTC") if last.tzinfo is None else last.tz_convert("UTC")
            for day in pd.date_range(first, last, freq=DAY):
                frame = old.read_window(name, day, day + DAY)
                new.telemetry.replace_window(name, frame, day, day + DAY)
                back = new.telemetry.read_window(name, day, day + DAY)
                try:
                    pd.testing.assert_frame_equal(back, frame, check_exact=True)
                except AssertionError as err:
                    raise ValueError(f"{name} {day:%Y-%m-%d}: the store does not read back the SQL rows; "
                                     f"nothing dropped: {err}") from None
                rows, days = rows + len(frame), days + 1
        out[name] = {"rows": rows, "days": days, "storage": catalog.table(name).storage}
    if drop:
        with new.engine.begin() as conn:
            for name in tables:
                conn.exec_driver_sql(f'DROP TABLE "{name}"')
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--telemetry-dir", default=None)
    ap.add_argument("--drop", action="store_true", help="drop each copied table's SQL rows once checked")
    args = ap.parse_args(argv)
    print(json.dumps(relayout(args.url, args.telemetry_dir, drop=args.drop)))
    return 0


if __name__ == "__main__":  # pragma: no cover - a developer command
    raise SystemExit(main())

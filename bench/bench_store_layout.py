"""Bytes stored per simulated day, per table, in the SQL warehouse and the telemetry store, before and after
:func:`gpu_health.storage.relayout.relayout` moves the tables the catalogue stores columnar out of SQL.

    PYTHONPATH=. nice .venv/bin/python bench/bench_store_layout.py WAREHOUSE.db TELEMETRY_DIR --workdir DIR

WAREHOUSE.db and TELEMETRY_DIR (a warehouse written by ``gpu-health run``, e.g. one written before
the minute-grain tables moved to Parquet) are only read: they are copied to ``--workdir`` (which must not exist) and the copy is measured, moved, and
measured again. SQLite bytes are each table's B-tree pages with its indexes (``dbstat``) after ``VACUUM`` (4 KiB
pages), so free pages of deleted rows do not count; store bytes are the table folder's files. Days: the distinct UTC
days of ``cluster_goodput``. One JSON line per table (``store_layout_table``: where it lives after, MB a day before
and after) and one with the totals (``store_layout_total``), plus the move's own time (``relayout_s``).
"""

import argparse
import json
import shutil
import sqlite3
import time
from pathlib import Path


def _emit(**row) -> None:
    print(json.dumps(row), flush=True)


def _vacuum(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.execute("PRAGMA journal_mode=DELETE")
    con.execute("VACUUM")
    con.close()


def _sql_bytes(db: Path) -> dict[str, int]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    stat = dict(con.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
    con.close()
    return {t: sum(v for k, v in stat.items() if k == t or k.startswith((f"ix_{t}_", f"sqlite_autoindex_{t}_")))
            for t in tables}


def _store_bytes(root: Path) -> dict[str, int]:
    return {d.name: sum(f.stat().st_size for f in d.rglob("*.parquet")) for d in sorted(root.iterdir()) if d.is_dir()}


def _days(db: Path) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    n = con.execute("SELECT COUNT(DISTINCT substr(partition_start, 1, 10)) FROM cluster_goodput").fetchone()[0]
    con.close()
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("warehouse", type=Path)
    ap.add_argument("telemetry", type=Path)
    ap.add_argument("--workdir", type=Path, required=True)
    args = ap.parse_args()
    from gpu_health import catalog
    from gpu_health.storage.relayout import relayout
    from gpu_health.storage.warehouse import engine_for

    args.workdir.mkdir(parents=True)
    db, store = args.workdir / "w.db", args.workdir / "w.telemetry"
    shutil.copyfile(args.warehouse, db)
    shutil.copytree(args.telemetry, store)
    _vacuum(db)
    days = _days(db)
    before_sql, before_store, before_file = _sql_bytes(db), _store_bytes(store), db.stat().st_size
    t0 = time.perf_counter()
    moved = relayout(f"sqlite:///{db}", store, drop=True)
    seconds = time.perf_counter() - t0
    engine_for(f"sqlite:///{db}").dispose()  # the pooled connections would hold the file VACUUM rewrites
    _vacuum(db)
    after_sql, after_store, after_file = _sql_bytes(db), _store_bytes(store), db.stat().st_size

    def per_day(n: int) -> float:
        return round(n / days / 1e6, 3)

    for name in sorted(set(before_sql) | set(before_store) | set(after_sql) | set(after_store)):
        b = before_sql.get(name, 0) + before_store.get(name, 0)
        a = after_sql.get(name, 0) + after_store.get(name, 0)
        _emit(bench="store_layout_table", table=name,
              stored=catalog.table(name).storage if name in catalog.CATALOG else "sql",
              rows=moved.get(name, {}).get("rows"), before_mb_day=per_day(b), after_mb_day=per_day(a))
    _emit(bench="store_layout_total", days=days, relayout_s=round(seconds, 1),
          before_sql_file_mb_day=per_day(before_file), before_store_mb_day=per_day(sum(before_store.values())),
          before_total_mb_day=per_day(before_file + sum(before_store.values())),
          after_sql_file_mb_day=per_day(after_file), after_store_mb_day=per_day(sum(after_store.values())),
          after_total_mb_day=per_day(after_file + sum(after_store.values())))


if __name__ == "__main__":
    main()

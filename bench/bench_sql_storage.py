"""What the SQL warehouse's tables would cost stored otherwise: measurements for a decision, nothing changed.

    PYTHONPATH=. nice .venv/bin/python bench/bench_sql_storage.py WAREHOUSE.db [--min-mb 1]

WAREHOUSE.db (a SQLite warehouse after ``gpu-health run``, checkpointed) is only read; copies go to a temporary
folder. One JSON line per measurement:

* ``sql_size_vacuum``: the file as it is, and after ``VACUUM`` at 4, 8, 16 and 64 KiB pages;
* ``sql_size_table`` (each table of at least ``--min-mb`` MB, vacuumed at 4 KiB pages, its indexes included) against
  the same rows (0) copied as they are (``copied``: text timestamps, ``WITHOUT ROWID`` like the warehouse's tables;
  the check that a copy measures as the original does), (a) with every ``DATETIME`` stored as ``INTEGER`` epoch
  seconds (``whole_seconds``: whether that is lossless for every value) and as epoch microseconds (``int_us_time``,
  always lossless: the text's precision), (b) also every ``TEXT`` column but
  the ``*_id`` ones as an integer id into a dictionary table (``dim_<table>_<column>``, counted in), both with the
  same primary key, ``WITHOUT ROWID``; and as Parquet (zstd; timestamps as timestamps) in one file for the whole
  range, one file per hour and one per 5 minutes of its partition column (what the telemetry store would write);
  ``distinct_rows``: the rows left if repeated content (every column but the partition column) were stored once;
* ``sql_size_leaf_ids``: ``goodput_leaves`` with one integer id per distinct combination of its dimension columns
  (a ``goodput_leaf_dims`` table) and the state as an id: partition, leaf, state, minutes.
"""

import argparse
import io
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


def _emit(**row) -> None:
    print(json.dumps(row), flush=True)


def _mb(n: float) -> float:
    return round(n / 1e6, 2)


def _pk(con: sqlite3.Connection, table: str) -> str:
    sql = con.execute("SELECT sql FROM sqlite_schema WHERE name = ?", (table,)).fetchone()[0]
    start = sql.index("PRIMARY KEY (") + len("PRIMARY KEY (")
    return sql[start: sql.index(")", start)]


def _parquet_bytes(frame: pd.DataFrame) -> int:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buf, compression="zstd", store_schema=False)
    return len(buf.getvalue())


def _load(con: sqlite3.Connection, table: str) -> tuple[pd.DataFrame, dict[str, str]]:
    frame = pd.read_sql(f'SELECT * FROM "{table}"', con)
    types = {name: typ.upper() for _, name, typ, *_ in con.execute(f'PRAGMA table_info("{table}")')}
    for name, typ in types.items():
        if typ == "DATETIME":
            frame[name] = pd.to_datetime(frame[name], utc=True, format="mixed")
    return frame, types


def _sqlite_copy(dst: sqlite3.Connection, name: str, frame: pd.DataFrame, types: dict[str, str], pk: str) -> None:
    cols = ", ".join(f'"{c}" {types[c]}' for c in frame.columns)
    dst.execute(f'CREATE TABLE "{name}" ({cols}, PRIMARY KEY ({pk})) WITHOUT ROWID')
    rows = ([None if pd.isna(v) else (v.item() if hasattr(v, "item") else v) for v in r]
            for r in frame.itertuples(index=False))
    dst.executemany(f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(frame.columns))})', rows)


def _int_time(frame: pd.DataFrame, types: dict[str, str], unit: int = 10**9) -> tuple[pd.DataFrame, dict[str, str]]:
    """``frame`` with every ``DATETIME`` as integer epoch ``ns // unit`` (seconds by default; 10**3: microseconds)."""
    out, ty = frame.copy(), {}
    for name, typ in types.items():
        if typ == "DATETIME":
            out[name] = (out[name].astype("int64") // unit).astype("Int64").where(frame[name].notna())
            ty[name] = "INTEGER"
        else:
            ty[name] = {"FLOAT": "REAL", "BIGINT": "INTEGER"}.get(typ, typ)
    return out, ty


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("warehouse", type=Path)
    ap.add_argument("--min-mb", type=float, default=1.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sizes = {"as_is": args.warehouse.stat().st_size}
        for page in (4096, 8192, 16384, 65536):
            copy = Path(tmp) / f"v{page}.db"
            shutil.copyfile(args.warehouse, copy)
            con = sqlite3.connect(copy)
            con.execute("PRAGMA journal_mode=DELETE")
            con.execute(f"PRAGMA page_size={page}")
            con.execute("VACUUM")
            con.close()
            sizes[f"vacuum_{page // 1024}k"] = copy.stat().st_size
        _emit(bench="sql_size_vacuum", **{k: _mb(v) for k, v in sizes.items()})

        src = sqlite3.connect(f"file:{Path(tmp) / 'v4096.db'}?mode=ro", uri=True)
        stat = dict(src.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))
        tables = [r[0] for r in src.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")]
        owned = {t: sum(v for k, v in stat.items() if k == t or k.startswith((f"ix_{t}_", f"sqlite_autoindex_{t}_")))
                 for t in tables}
        dst = sqlite3.connect(Path(tmp) / "variants.db")
        dst.execute("PRAGMA journal_mode=OFF")
        dst.execute("PRAGMA synchronous=OFF")
        dst.execute("ATTACH DATABASE ? AS src", (f"file:{Path(tmp) / 'v4096.db'}?mode=ro",))
        big = [t for t in sorted(tables, key=lambda t: -owned[t]) if owned[t] >= args.min_mb * 1e6]
        measured = {}
        for table in big:
            frame, types = _load(src, table)
            pk = _pk(src, table)
            cols = ", ".join(f'"{c}" {types[c]}' for c in frame.columns)  # the stored values as they are (text times)
            dst.execute(f'CREATE TABLE "{table}__copied" ({cols}, PRIMARY KEY ({pk})) WITHOUT ROWID')
            dst.execute(f'INSERT INTO "{table}__copied" SELECT * FROM src."{table}"')
            _sqlite_copy(dst, f"{table}__int_us_time", *_int_time(frame, types, 10**3), pk)
            ints, ty = _int_time(frame, types)
            _sqlite_copy(dst, f"{table}__int_time", ints, ty, pk)
            ids, ty_ids = ints.copy(), dict(ty)
            for name, typ in ty.items():
                if typ == "TEXT" and not name.endswith("_id"):
                    codes, uniq = pd.factorize(ids[name])
                    ids[name] = pd.Series(codes, dtype="Int64").where(codes >= 0)
                    ty_ids[name] = "INTEGER"
                    dst.execute(f'CREATE TABLE "dim_{table}_{name}" (id INTEGER PRIMARY KEY, value TEXT NOT NULL)')
                    dst.executemany(f'INSERT INTO "dim_{table}_{name}" VALUES (?, ?)', enumerate(map(str, uniq)))
            _sqlite_copy(dst, f"{table}__ids", ids, ty_ids, pk)
            dst.commit()
            time_cols = [c for c, t in types.items() if t == "DATETIME"]
            part = "partition_start" if "partition_start" in frame else (time_cols[0] if time_cols else None)
            whole = all((frame[c].dropna().astype("int64") % 10**9 == 0).all() for c in time_cols)
            row = {"table": table, "rows": len(frame), "sqlite_mb": _mb(owned[table]), "whole_seconds": bool(whole),
                   "parquet_one_file_mb": _mb(_parquet_bytes(frame))}
            if part is not None:
                for label, width in (("hour", "h"), ("5min", "5min")):
                    groups = frame.groupby(frame[part].dt.floor(width))
                    row[f"parquet_{label}_files_mb"] = _mb(sum(_parquet_bytes(g) for _, g in groups))
                row["distinct_rows"] = int(len(frame.drop(columns=[part]).drop_duplicates()))
            measured[table] = row
        # (c) goodput_leaves: one id per distinct combination of its dimensions
        if "goodput_leaves" in big:
            leaves, _ = _load(src, "goodput_leaves")
            dims = [c for c in leaves.columns if c not in ("partition_start", "state", "gpu_minutes")]
            leaf, combos = pd.factorize(pd.MultiIndex.from_frame(leaves[dims]))
            state, _ = pd.factorize(leaves["state"])
            slim = pd.DataFrame({"partition_start": leaves["partition_start"].astype("int64") // 10**9, "leaf": leaf,
                                 "state": state, "gpu_minutes": leaves["gpu_minutes"]})
            _sqlite_copy(dst, "goodput_leaves__leaf_ids", slim, {"partition_start": "INTEGER", "leaf": "INTEGER",
                                                                 "state": "INTEGER", "gpu_minutes": "REAL"},
                         "partition_start, leaf, state")
            dims_frame = pd.DataFrame(list(combos), columns=dims)
            dims_frame.insert(0, "leaf", range(len(dims_frame)))
            _sqlite_copy(dst, "goodput_leaf_dims", dims_frame, {"leaf": "INTEGER", **{c: "TEXT" for c in dims}}, "leaf")
            dst.commit()
        dst.execute("DETACH DATABASE src")
        dst.execute("VACUUM")
        vstat = dict(dst.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))
        for table, row in measured.items():
            dim_bytes = sum(v for k, v in vstat.items() if k.startswith(f"dim_{table}_"))
            _emit(bench="sql_size_table", **row, sqlite_copied_mb=_mb(vstat[f"{table}__copied"]),
                  sqlite_int_us_time_mb=_mb(vstat[f"{table}__int_us_time"]),
                  sqlite_int_time_mb=_mb(vstat[f"{table}__int_time"]),
                  sqlite_int_time_text_ids_mb=_mb(vstat[f"{table}__ids"] + dim_bytes))
        if "goodput_leaves__leaf_ids" in vstat:
            _emit(bench="sql_size_leaf_ids", table="goodput_leaves", leaf_combinations=len(combos),
                  rows=len(leaves), sqlite_mb=_mb(owned["goodput_leaves"]),
                  leaf_ids_mb=_mb(vstat["goodput_leaves__leaf_ids"] + vstat["goodput_leaf_dims"]),
                  dims_mb=_mb(vstat["goodput_leaf_dims"]))
        rest = sum(v for t, v in owned.items() if t not in measured)
        _emit(bench="sql_size_total", tables_measured=len(measured),
              sqlite_measured_mb=_mb(sum(owned[t] for t in measured)), sqlite_other_tables_mb=_mb(rest),
              **{k: _mb(sum(r.get(k, 0) for r in measured.values()) * 1e6)
                 for k in ("parquet_one_file_mb", "parquet_hour_files_mb", "parquet_5min_files_mb")},
              **{f"sqlite_{v}_mb": _mb(sum(vstat[f"{t}__{v}"] for t in measured))
                 for v in ("copied", "int_us_time", "int_time")},
              sqlite_int_time_text_ids_mb=_mb(sum(vstat[f"{t}__ids"] for t in measured)
                                              + sum(v for k, v in vstat.items() if k.startswith("dim_"))))


if __name__ == "__main__":
    main()

"""The columnar telemetry store: bytes per simulated day, write time, and reads by window per engine.

    PYTHONPATH=. nice .venv/bin/python bench/bench_telemetry_store.py [--hours 24]

One simulated hour of the default cluster (1,200 GPUs, 12:00-13:00 UTC on a Tuesday) is validated against its
contracts and written through :class:`~gpu_health.storage.telemetry_store.TelemetryStore` ``--hours`` times, each
copy shifted by an hour (a bulk write of whole hours: one file per hour), so a day of files costs one hour of
simulation. Sizes are of a busy daytime hour repeated, so they bound a quiet day from above. Then the live path:
the hour after them written partition by partition (12 writes; the 12th completes the hour and compacts its 11
partition files and itself into one hour file): ``write_live`` gives the mean and the largest write.

Reads compare three ways of reading the files of a window into the pandas frame the pipeline gets (the same dtype
conversion after each): ``pyarrow.dataset`` (a dataset over the window's files with the filter pushed into the scan:
what the store does), ``pyarrow.parquet`` (one ``read_table`` per file, concatenated, then filtered) and ``duckdb``
(``read_parquet`` over the same files, the window as a ``WHERE``). ``one_partition`` reads 5 minutes out of a
complete hour's file, ``one_partition_open_hour`` out of a partition file of an hour not yet complete (what a live
run reads). Each case is the best of ``--repeat`` runs. One JSON line per measurement.

``--rewrite DIR`` measures an existing store instead (e.g. the ``X.telemetry`` beside a warehouse after
``gpu-health run``; DIR is only read): every table is read back day by day, written into a temporary store through
``replace_window`` (the day's partitions as one window when contiguous, else one by one), read again and compared
(equal frames, the same partitions, or the bench fails), and the bytes of both stores are printed per table and in
total.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import pandas as pd

TABLES = ["gpu_telemetry", "node_telemetry", "network_telemetry", "job_runtime_metrics"]
START = pd.Timestamp("2026-11-03T12:00:00Z")
HOUR = pd.Timedelta(hours=1)


def simulated_hour() -> dict[str, pd.DataFrame]:
    from gpu_health.contracts.validate import validate_frame
    from gpu_health.sim.scenario import default_scenario
    from gpu_health.sim.telemetry import Window

    raw = Window(default_scenario(seed=7), START, START + HOUR).tables()
    return {t: validate_frame(raw[t], t, start=START, end=START + HOUR, origin="simulator").valid for t in TABLES}


def readers(store, table: str):
    """engine -> read(start, end, columns) -> the window's rows as an Arrow table (before the pandas conversion,
    which is the same for all three and is timed on its own)."""
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from gpu_health.storage import telemetry_store as T

    schema = T._schema(table)
    ts_type = schema.field("ts").type
    con = duckdb.connect()
    con.execute("SET threads TO 2")

    def by_dataset(start, end, columns):  # what the store does
        cond = (ds.field("ts") >= pa.scalar(start, ts_type)) & (ds.field("ts") < pa.scalar(end, ts_type))
        files = [str(f) for f in store._files(table, start, end)]
        return ds.dataset(files, schema=schema, format="parquet").to_table(columns=columns or schema.names, filter=cond)

    def by_file(start, end, columns):
        cols = columns or schema.names
        data = pa.concat_tables([pq.read_table(f, columns=cols, schema=schema) for f in store._files(table, start, end)])
        t = data.column("ts")
        return data.filter(pc.and_(pc.greater_equal(t, pa.scalar(start, ts_type)), pc.less(t, pa.scalar(end, ts_type))))

    def by_duckdb(start, end, columns):
        files = [str(f) for f in store._files(table, start, end)]
        cols = ", ".join(f'"{c}"' for c in (columns or schema.names))
        return con.execute(f"SELECT {cols} FROM read_parquet(?) WHERE ts >= ? AND ts < ?",
                           [files, start.to_pydatetime(), end.to_pydatetime()]).to_arrow_table()

    return {"pyarrow.dataset": by_dataset, "pyarrow.parquet": by_file, "duckdb": by_duckdb}


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def rewrite(root: Path) -> None:
    """Re-write the store at ``root`` into a temporary one; one JSON line a table, then the total."""
    from gpu_health.storage.schema import COLUMNAR_TABLES, partition_column
    from gpu_health.storage.telemetry_store import TelemetryStore

    src, day_span, five = TelemetryStore(root), pd.Timedelta(days=1), pd.Timedelta(minutes=5)
    total = {"before": 0, "after": 0}
    with tempfile.TemporaryDirectory() as tmp:
        dst = TelemetryStore(tmp)
        for table in sorted(COLUMNAR_TABLES):
            parts = src.partitions(table)
            if not parts:
                continue
            t0, rows = time.perf_counter(), 0
            days = pd.date_range(parts[0].floor("D"), parts[-1].floor("D"), freq="D")
            for day in days:
                frame = src.read_window(table, day, day + day_span)
                written = [p for p in parts if day <= p < day + day_span]
                if written and written[-1] - written[0] == (len(written) - 1) * five:  # contiguous: one window
                    dst.replace_window(table, frame, written[0], written[-1] + five)
                else:
                    for p in written:
                        col = partition_column(table)
                        dst.replace_window(table, frame[(frame[col] >= p) & (frame[col] < p + five)], p, p + five)
                pd.testing.assert_frame_equal(dst.read_window(table, day, day + day_span), frame)
                rows += len(frame)
            seconds = time.perf_counter() - t0
            assert dst.partitions(table) == parts, table
            files = {k: list((base / table).rglob("*.parquet")) for k, base in (("before", root), ("after", Path(tmp)))}
            size = {k: sum(p.stat().st_size for p in v) for k, v in files.items()}
            for k in total:
                total[k] += size[k]
            print(json.dumps({"bench": "telemetry_store_rewrite", "table": table, "days": len(days), "rows": rows,
                              "files_before": len(files["before"]), "files_after": len(files["after"]),
                              "mb_before": round(size["before"] / 1e6, 2), "mb_after": round(size["after"] / 1e6, 2),
                              "read_write_compare_s": round(seconds, 2)}), flush=True)
    print(json.dumps({"bench": "telemetry_store_rewrite_total", "mb_before": round(total["before"] / 1e6, 2),
                      "mb_after": round(total["after"] / 1e6, 2)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rewrite", type=Path, help="measure this existing store (read only) instead of a simulated one")
    args = ap.parse_args()
    if args.rewrite:
        return rewrite(args.rewrite)
    from gpu_health.storage.telemetry_store import TelemetryStore

    hour = simulated_hour()
    with tempfile.TemporaryDirectory() as tmp:
        store = TelemetryStore(tmp)
        for table, frame in hour.items():
            t0 = time.perf_counter()
            for h in range(args.hours):
                shift = h * HOUR
                store.replace_window(table, frame.assign(ts=frame["ts"] + shift), START + shift, START + shift + HOUR)
            seconds = time.perf_counter() - t0
            size = sum(p.stat().st_size for p in (Path(tmp) / table).rglob("*.parquet"))
            print(json.dumps({"bench": "telemetry_store_write", "table": table, "hours": args.hours,
                              "rows": len(frame) * args.hours, "partitions": len(store.partitions(table)),
                              "files": len(list((Path(tmp) / table).rglob("*.parquet"))),
                              "bytes": size, "mb_per_day": round(size / args.hours * 24 / 1e6, 2),
                              "write_s": round(seconds, 2)}), flush=True)
        total = sum(p.stat().st_size for p in Path(tmp).rglob("*.parquet"))
        print(json.dumps({"bench": "telemetry_store_size", "hours": args.hours, "bytes": total,
                          "mb_per_day": round(total / args.hours * 24 / 1e6, 2)}), flush=True)

        five = pd.Timedelta(minutes=5)
        live = START + args.hours * HOUR  # the hour after the bulk ones, written as the live path writes it
        for table, frame in hour.items():
            seconds = []
            for i in range(12):
                part = frame[(frame["ts"] >= START + i * five) & (frame["ts"] < START + (i + 1) * five)]
                s0 = live + i * five
                seconds.append(timed(lambda: store.replace_window(table, part.assign(ts=part["ts"] + (live - START)),
                                                                  s0, s0 + five))[0])
            print(json.dumps({"bench": "telemetry_store_write_live", "table": table, "writes": len(seconds),
                              "mean_s": round(sum(seconds) / len(seconds), 4), "max_s": round(max(seconds), 4),
                              "compacting_write_s": round(seconds[-1], 4)}), flush=True)

        from gpu_health.storage.telemetry_store import _to_pandas

        table = "gpu_telemetry"
        frame, open_hour = hour[table], live + HOUR  # three partitions of an hour not yet complete
        for i in range(3):
            part = frame[(frame["ts"] >= START + i * five) & (frame["ts"] < START + (i + 1) * five)]
            store.replace_window(table, part.assign(ts=part["ts"] + (open_hour - START)), open_hour + i * five,
                                 open_hour + (i + 1) * five)
        engines = readers(store, table)
        cases = {"one_partition": (START, START + five, None),
                 "one_partition_open_hour": (open_hour + five, open_hour + 2 * five, None),
                 "one_hour": (START, START + HOUR, None),
                 "all_hours": (START, START + args.hours * HOUR, None),
                 "all_hours_4_columns": (START, START + args.hours * HOUR, ["ts", "gpu_uuid", "gpu_util_pct", "power_w"])}
        for case, (start, end, columns) in cases.items():
            best: dict[str, float] = {}
            for _ in range(args.repeat):  # engines interleaved, so a busy moment of the shared machine hits all
                for engine, read in engines.items():
                    seconds, data = timed(lambda: read(start, end, columns))
                    best[engine] = min(best.get(engine, float("inf")), seconds)
            to_pandas, frame = timed(lambda: _to_pandas(data, table))
            for engine, seconds in best.items():
                print(json.dumps({"bench": "telemetry_store_read", "table": table, "case": case, "engine": engine,
                                  "rows": len(frame), "columns": len(frame.columns), "arrow_s": round(seconds, 4),
                                  "to_pandas_s": round(to_pandas, 4)}), flush=True)


if __name__ == "__main__":
    main()

"""The warehouse's write throughput on PostgreSQL: ``Warehouse.replace_window`` of ~200,000 rows of two SQL tables
(goodput_states, kpi_values), first into empty windows (insert: ``COPY``), then again over the same windows
(replace: the delete of the rows there, then the ``COPY``), one transaction each, the per-window advisory lock
taken as in a run. The rows are a warehouse's own, copied into later windows until there are ~200,000.

    python -m gpu_health_tests.services.postgres &            # prints a URL (or use your server)
    python bench/run.py --only partition_steps --gpus 10000 --warehouse URL   # leaves a partition's rows there
    PYTHONPATH=. .venv/bin/python bench/bench_pg_writes.py URL

One JSON line per table and attempt: rows, columns, seconds, rows_per_s. The copies go 30 days after the rows
read (their windows must be empty); run it on a throwaway database.
"""

import argparse
import json
import tempfile
import time
import warnings

import pandas as pd

ROWS = 200_000
TABLES = ("goodput_states", "kpi_values")


def main() -> None:
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", help="a PostgreSQL warehouse URL holding at least a partition of the tables")
    args = ap.parse_args()
    from gpu_health.storage.warehouse import Warehouse

    with tempfile.TemporaryDirectory() as telemetry:
        wh = Warehouse(args.url, telemetry)
        for table in TABLES:
            base = wh.read_window(table)
            if base.empty:
                raise SystemExit(f"{table} is empty in {args.url}: run a partition into it first")
            col = "partition_start"
            span = base[col].max() - base[col].min() + pd.Timedelta(minutes=5)
            shifted = [base.assign(**{col: base[col] + pd.Timedelta(days=30) + span * k})
                       for k in range(1, max(1, ROWS // len(base)) + 1)]
            big = pd.concat(shifted, ignore_index=True)
            start, end = big[col].min(), big[col].max() + pd.Timedelta(minutes=5)
            for attempt in ("insert", "replace"):
                t = time.perf_counter()
                wh.replace_window(table, big, start, end)
                seconds = time.perf_counter() - t
                print(json.dumps({"name": "pg_writes", "table": table, "attempt": attempt, "rows": len(big),
                                  "columns": big.shape[1], "seconds": round(seconds, 2),
                                  "rows_per_s": int(len(big) / seconds)}), flush=True)
        wh.engine.dispose()


if __name__ == "__main__":
    main()

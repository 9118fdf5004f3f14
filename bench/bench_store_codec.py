"""CPU seconds of the telemetry store's own writes and reads per table, on an existing store.

    PYTHONPATH=. .venv/bin/python bench/bench_store_codec.py --store var/bench.telemetry \
        [--day 2026-11-03] [--read-days 2] [--repeat 3]

For each table: the day ``--day`` is read from ``--store`` (which is only read), then written through
``TelemetryStore.replace_window`` into a temporary store ``--repeat`` times (a bulk write of whole hours, as
``gpu-health run`` does), and ``--read-days`` days ending with it are read back through ``read_window``; the best
of the repetitions, in CPU seconds of this process (Arrow's threads included). Run it once with the code under test
and once with another checkout on ``PYTHONPATH`` to compare the two on the same files. One JSON line per table.
"""

import argparse
import json
import resource
import shutil
import tempfile

import pandas as pd

TABLES = ["gpu_telemetry", "network_telemetry", "job_runtime_metrics", "scheduler_events", "job_metadata",
          "goodput_leaves"]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True)
    ap.add_argument("--day", default="2026-11-03")
    ap.add_argument("--read-days", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from gpu_health.storage.telemetry_store import TelemetryStore

    source = TelemetryStore(args.store)
    day = pd.Timestamp(args.day, tz="UTC")
    window = (day, day + pd.Timedelta(days=1))
    for table in TABLES:
        frame = source.read_window(table, *window)
        write = read = float("inf")
        for _ in range(args.repeat):
            folder = tempfile.mkdtemp()
            try:
                store = TelemetryStore(folder)
                t = _cpu()
                store.replace_window(table, frame, *window, order_out=[])
                write = min(write, _cpu() - t)
            finally:
                shutil.rmtree(folder)
            t = _cpu()
            source.read_window(table, day - pd.Timedelta(days=args.read_days - 1), window[1])
            read = min(read, _cpu() - t)
        print(json.dumps({"table": table, "rows_a_day": len(frame), "write_day_cpu_s": round(write, 3),
                          f"read_{args.read_days}_days_cpu_s": round(read, 3)}), flush=True)


if __name__ == "__main__":
    main()

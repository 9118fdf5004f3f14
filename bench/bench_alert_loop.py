"""CPU cost of the alerts step (pipeline ``alerts``) over a range of partitions.

    python bench/bench_alert_loop.py --warehouse sqlite:///var/wh.db --start 2026-11-02T00:00Z --end 2026-11-03T00:00Z
    python bench/bench_alert_loop.py ... --profile var/alerts.prof      # and a cProfile (CPU time) of it

Runs the alerts step on stored data (a warehouse that ``gpu-health run`` filled) and prints, in CPU seconds
(``time.process_time``: wall time on a shared machine measures the neighbours) and per partition: the whole
step, the detectors (``detect``), the alert lifecycle (``alerts.step``) and the rest (reads, per-range set-up,
per-partition context building). The budget is 20 ms a partition for the step.

Measured (2026-11-24, 2 shared cores, 1,200 GPUs, one simulated day = 288 partitions, CPU seconds; alert rows
identical before and after, pd.testing.assert_frame_equal exact; "loop" = everything after the reads, with
pipeline.alerts passing ``prepared=prepare_range(...)`` as the branch detect-speed's report describes):

| day | before: total / loop ms a partition | after: total / loop ms a partition | reads + set-up |
|---|---|---|---|
| quiet (2026-11-02, 9 alert rows) | 112.1 / 86.9 | 41.3 / 13.9 | 7.3-7.9 s (25-27 ms) |
| 13 incidents (2026-11-03, 189 rows) | 133.6 / 108.0 | 51.5 / 26.4 | 7.2-7.4 s (25-26 ms) |

Without the pipeline change (this script on the quiet day, detectors of this branch): 49.4 ms a partition,
detect 11.8, alerts.step 0.2, the rest 37.4 (reads plus per-partition jobs_as_of / window masks).

Branch alerts (2026-11-24; prof5 warehouse copy of the quiet week, 1,200 GPUs, 288 partitions
a day, CPU s; this script, reads cold from the warehouse and the telemetry store; alerts and every finding of
every partition identical to main's):

| day | main: total / detect ms a partition | alerts: total / detect ms a partition | alerts.step | rest (reads, set-up) |
|---|---|---|---|---|
| 2026-11-03 | 18.31 s / 40.8 | 8.85 s / 9.4 | 0.2 ms | 21.1 ms |
| 2026-11-04 (maintenance, kernel upgrade) | 20.02 s / 46.8 | 9.85 s / 10.4 | 0.2 ms | 23.6 ms |

The alert state machine (alerts.step) costs 0.2 ms a partition (budget 20 ms). With the run's cache warm as in the
bulk path (the day's sources already read), the step costs 6.3-7.2 CPU s a day (main: 14.8-15.4), of which the
detectors 3.0-3.2 s and reads + per-range set-up about 3-4 s.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from gpu_health.diagnosis import alerts as A  # noqa: E402
from gpu_health.diagnosis import detect as D  # noqa: E402
from gpu_health.storage.warehouse import Warehouse  # noqa: E402


def _alerts_function():
    """The alerts step, wherever the pipeline module lives: ``alerts(wh, start, end)``."""
    try:  # a body reading through its step's declared inputs
        from gpu_health.steps.diagnosis import alerts
        from gpu_health.steps.registry import inputs_for

        return lambda wh, start, end: alerts(inputs_for("alerts", wh, start, end))
    except ImportError:
        pass
    for name in ("gpu_health.steps.compute", "gpu_health.metrics.pipeline"):
        try:
            module = __import__(name, fromlist=["alerts"])
        except ImportError:
            continue
        if hasattr(module, "alerts"):
            return module.alerts
    raise SystemExit("no alerts step found")


def _timed(fn, acc: dict, key: str):
    def wrapper(*a, **kw):
        t = time.process_time()
        try:
            return fn(*a, **kw)
        finally:
            acc[key] += time.process_time() - t
    return wrapper


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--start", required=True)
    ap.add_argument("--end", required=True)
    ap.add_argument("--profile", help="write a cProfile (CPU time) of the step here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    alerts = _alerts_function()
    start, end = pd.Timestamp(args.start), pd.Timestamp(args.end)
    parts = int((end - start) / pd.Timedelta(minutes=5))
    acc = {"detect": 0.0, "step": 0.0}
    detect, step = D.detect, A.step
    D.detect, A.step = _timed(detect, acc, "detect"), _timed(step, acc, "step")
    try:
        wh = Warehouse(args.warehouse)
        prof = cProfile.Profile(time.process_time) if args.profile else None
        t = time.process_time()
        if prof:
            prof.enable()
        frame = alerts(wh, start, end)
        if prof:
            prof.disable()
            prof.dump_stats(args.profile)
        total = time.process_time() - t
    finally:
        D.detect, A.step = detect, step
    result = {"partitions": parts, "rows": len(frame), "cpu_s": round(total, 2),
              "ms_per_partition": round(1000 * total / parts, 1),
              "detect_ms_per_partition": round(1000 * acc["detect"] / parts, 1),
              "step_ms_per_partition": round(1000 * acc["step"] / parts, 1),
              "rest_ms_per_partition": round(1000 * (total - acc["detect"] - acc["step"]) / parts, 1)}
    if args.json:
        print(json.dumps(result))
    else:
        print("| partitions | alert rows | CPU s | ms/partition | detect | alerts.step | reads, set-up, contexts |")
        print("|---|---|---|---|---|---|---|")
        print(f"| {parts} | {len(frame)} | {total:.1f} | {result['ms_per_partition']} | {result['detect_ms_per_partition']} "
              f"| {result['step_ms_per_partition']} | {result['rest_ms_per_partition']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The bulk path: the declared steps over a range, in dependency order, without Dagster.

``gpu-health run --direct`` and ``gpu-health evaluate`` call :func:`run_range`; the Dagster assets call the very
same ``step.run`` (``gpu_health/defs``), so both paths write the same tables (``test_direct_path.py`` proves it on a
window with incidents, late data and a maintenance window). What it saves is the framework's per-run and
per-partition bookkeeping (run creation, planned and materialization events, per-output type checks), about a third
of a Dagster range run's time, and every process start.

The order is the one ``gpu-health run`` gives Dagster: the calendar; each day's ``cost_capacity`` (the loss tree needs
what Finance pays for); the 5-minute steps a day at a time (each day's range as one run, as a Dagster single-run
backfill does); then each day's finance tables (a day's failures settle back into it up to a day later).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd

from gpu_health.steps.graph import CALENDAR, DAILY, FIVE_MINUTE
from gpu_health.steps.registry import steps_of

DAY = pd.Timedelta(days=1)


def day_chunks(start: pd.Timestamp, end: pd.Timestamp):
    """``[start, end)`` cut at UTC midnights: the ranges one run covers."""
    t = start
    while t < end:
        nxt = min((t + DAY).normalize(), end)
        yield t, nxt
        t = nxt


def _findings(step, result, summary: dict, start, end) -> None:
    """The checks the Dagster assets would fail, from a step's findings, into ``summary``: ``failed_checks``
    (``asset:check``), ``quarantined_files`` and ``dropped_columns`` (as ``gpu-health run`` reports them)."""
    found = result.findings
    failed = summary.setdefault("failed_checks", [])

    def fail(name):
        if name not in failed:
            failed.append(name)

    if "rejects" in found:  # a source step
        table = step.name
        if len(found["rejects"]) or len(found["quarantined"]):
            fail(f"{table}:{table}_contract")
        for _, f in found["quarantined"].iterrows():
            entry = {"source": table, "partition": None if pd.isna(f["partition_start"]) else pd.Timestamp(f["partition_start"]).isoformat(),
                     "file": f["origin"], "check": f["check"], "reason": f["reason"]}
            if entry not in summary.setdefault("quarantined_files", []):
                summary["quarantined_files"].append(entry)
        for col, origins in found["dropped_columns"].items():
            summary.setdefault("dropped_columns", {}).setdefault(table, {})[col] = origins
    if "paid_invariant" in found and not found["paid_invariant"]["passed"]:
        fail("goodput_states:paid_minutes_invariant")
    if "mismatched" in found and len(found["mismatched"]):
        fail("serving_slis:latency_count_matches_requests")
    if step.name == "alerts":
        frame = result.tables["alerts"]
        last = frame[frame["partition_start"] == frame["partition_start"].max()] if len(frame) else frame
        firing = last[last["status"] == "firing"] if len(last) else last
        for check, severity in (("pages", "page"), ("tickets", "ticket")):
            if len(firing) and (firing["severity"] == severity).any():
                fail(f"alerts:{check}")


def run_range(wh, source, start, end, *, progress: Callable[[str], None] | None = None) -> dict:
    """Every step over ``[start, end)`` (5-minute aligned) into ``wh`` from ``source``; returns the summary
    ``gpu-health run`` prints (partitions, seconds per step family, failed checks, files quarantined)."""
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    summary: dict = {"runs": 0, "partitions": 0}
    seconds: dict[str, float] = {}
    t_all = time.time()

    def run(step, s0, s1):
        t0 = time.time()
        kw = {"source": source} if not step.reads and step.side_writes else {}
        result = step.run(wh, s0, s1, **kw)
        seconds[step.name] = seconds.get(step.name, 0.0) + time.time() - t0
        _findings(step, result, summary, s0, s1)

    days = pd.date_range(start.normalize(), end, freq="D", inclusive="left")
    for step in steps_of(CALENDAR):
        run(step, None, None)
    summary["runs"] += 1
    daily = steps_of(DAILY)
    for day in days:
        for step in daily:
            if step.name == "cost_capacity":
                run(step, day, day + DAY)
        summary["runs"] += 1
    for c_start, c_end in day_chunks(start, end):
        for step in steps_of(FIVE_MINUTE):
            run(step, c_start, c_end)
        summary["runs"] += 1
        summary["partitions"] += int((c_end - c_start) / pd.Timedelta(minutes=5))
        if progress is not None:
            progress(f"materialized {c_start:%Y-%m-%d %H:%M} .. {c_end:%Y-%m-%d %H:%M} ({time.time() - t_all:.0f}s)")
    for day in days:
        for step in daily:
            run(step, day, day + DAY)
        summary["runs"] += 1
    summary["step_seconds"] = {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}
    return summary

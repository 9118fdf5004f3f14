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

from gpu_health.constants import PARTITION
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


def _is_source(step) -> bool:
    return not step.reads and bool(step.side_writes)


def _ingest_days(url: str, telemetry_dir: str, source_spec, chunks, queue) -> None:
    """The 5-minute source steps of each chunk, in order, in a process of their own: after each chunk, put
    (chunk index, summary fragment, step seconds) on ``queue``; on an error, ("error", text)."""
    import traceback

    from gpu_health.storage.warehouse import Warehouse

    try:
        wh, source = Warehouse(url, telemetry_dir), source_spec.get()
        sources = [s for s in steps_of(FIVE_MINUTE) if _is_source(s)]
        for i, (c0, c1) in enumerate(chunks):
            fragment, seconds = {}, {}
            for step in sources:
                t0 = time.time()
                result = step.run(wh, c0, c1, source=source)
                seconds[step.name] = time.time() - t0
                _findings(step, result, fragment, c0, c1)
            queue.put((i, fragment, seconds))
    except Exception:  # noqa: BLE001 -- reported to the parent, which raises it
        queue.put(("error", traceback.format_exc(), None))


def _next(queue, worker):
    """The ingest process's next report; an error when it died without one."""
    import queue as q

    while True:
        try:
            return queue.get(timeout=5)
        except q.Empty:
            if not worker.is_alive():
                return ("error", f"the ingest process exited with code {worker.exitcode} without finishing", None)


def _merge(summary: dict, fragment: dict) -> None:
    for name in fragment.get("failed_checks", []):
        if name not in summary.setdefault("failed_checks", []):
            summary["failed_checks"].append(name)
    for entry in fragment.get("quarantined_files", []):
        if entry not in summary.setdefault("quarantined_files", []):
            summary["quarantined_files"].append(entry)
    for table, cols in fragment.get("dropped_columns", {}).items():
        summary.setdefault("dropped_columns", {}).setdefault(table, {}).update(cols)


def run_range(wh, source, start, end, *, progress: Callable[[str], None] | None = None,
              source_spec=None) -> dict:
    """Every step over ``[start, end)`` (5-minute aligned) into ``wh`` from ``source``; returns the summary
    ``gpu-health run`` prints (partitions, seconds per step, failed checks, files quarantined).

    ``source_spec`` (a picklable object whose ``get()`` builds the source, e.g. the ``TelemetrySourceResource``)
    pipelines the range over two processes: a second process reads and stores each day's 5-minute sources while
    this one computes the derived tables of the day before. The derived steps of a day start only after its
    sources are stored, and the sources never read derived tables, so the tables written are the same as in one
    process (``test_direct_path.py``); on two cores it hides the sources' time behind the derived steps'."""
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    summary: dict = {"runs": 0, "partitions": 0}
    seconds: dict[str, float] = {}
    t_all = time.time()

    def run(step, s0, s1):
        t0 = time.time()
        kw = {"source": source} if _is_source(step) else {}
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
    chunks = list(day_chunks(start, end))
    worker = queue = None
    if source_spec is not None and len(chunks) > 1:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        worker = ctx.Process(target=_ingest_days, args=(wh.url, str(wh.telemetry.root), source_spec, chunks, queue),
                             daemon=True)
        worker.start()
    try:
        for c_start, c_end in chunks:
            if worker is not None:
                got = _next(queue, worker)
                if got[0] == "error":
                    raise RuntimeError(f"source steps failed in the ingest process:\n{got[1]}")
                _merge(summary, got[1])
                for name, sec in got[2].items():
                    seconds[name] = seconds.get(name, 0.0) + sec
            for step in steps_of(FIVE_MINUTE):
                if worker is None or not _is_source(step):
                    run(step, c_start, c_end)
            summary["runs"] += 1
            summary["partitions"] += int((c_end - c_start) / PARTITION)
            if progress is not None:
                progress(f"materialized {c_start:%Y-%m-%d %H:%M} .. {c_end:%Y-%m-%d %H:%M} ({time.time() - t_all:.0f}s)")
    finally:
        if worker is not None:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.terminate()
    for day in days:
        for step in daily:
            run(step, day, day + DAY)
        summary["runs"] += 1
    summary["step_seconds"] = {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}
    return summary

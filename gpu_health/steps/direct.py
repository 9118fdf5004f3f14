"""The bulk path: the declared steps over a range, in dependency order, without Dagster.

``gpu-health run --direct`` and ``gpu-health evaluate`` call :func:`run_range`; the Dagster assets call the very
same ``step.run`` (``gpu_health/defs``), so both paths write the same tables (``test_direct_path.py`` proves it on a
window with incidents, late data and a maintenance window). What it saves is the framework's per-run and
per-partition bookkeeping (run creation, planned and materialization events, per-output type checks), about a third
of a Dagster range run's time, and every process start.

The order is the one ``gpu-health run`` gives Dagster: the calendar; each day's ``cost_capacity`` (the loss tree needs
what Finance pays for); the 5-minute steps a piece of a day at a time (:data:`RUN_CHUNK`: 8 hours; a Dagster
single-run backfill runs a day's range as one run); and each day's finance tables as soon as the 5-minute tables
they read are final (a day's failures settle back into it up to a day later: once the range is done a day past it).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from gpu_health.allocator import keep_freed_memory
from gpu_health.constants import PARTITION, PIECE, day_chunks
from gpu_health.steps.graph import CALENDAR, DAILY, FIVE_MINUTE
from gpu_health.steps.pipeline import run_stages, stage_loop
from gpu_health.steps.registry import steps_of

DAY = pd.Timedelta(days=1)
# The pieces a range runs in, each cut from one UTC day (:func:`~gpu_health.constants.day_chunks`): what a step
# computes at once and a stage hands on. A step's working arrays, its cache and a stage's hand-over scale with the
# piece, and every partition's rows are the same whatever the piece (each reads its declared look-back), so the
# piece trades memory for per-piece work: 8-hour pieces hold about half the memory of whole days for a tenth or so
# more CPU, every table equal -- not the look-back reads but a set-up each step pays per piece (docs/architecture.md,
# "Memory"; docs/benchmarks.md has the figures). The rows of a piece
# scale with the cluster; ``gpu-health run --direct --chunk-hours`` sets it. One length with the loss tree's chunks
# (constants.PIECE).
RUN_CHUNK = PIECE
_EVER = pd.Timestamp.max.tz_localize("UTC")  # finance(_EVER): every pending day, however late it settles


def _findings(step, result, summary: dict, start, end) -> None:
    """The checks the Dagster assets would fail, from a step's findings, into ``summary``: ``failed_checks``
    (``asset:check``, judged as the assets judge them: :mod:`gpu_health.steps.checks`), ``quarantined_files`` and
    ``dropped_columns`` (as ``gpu-health run`` reports them)."""
    from gpu_health.steps.checks import failed_checks

    found = result.findings
    failed = summary.setdefault("failed_checks", [])
    failed += [name for name in failed_checks(step.name, result) if name not in failed]
    if "rejects" in found:  # a source step
        table = step.name
        for _, f in found["quarantined"].iterrows():
            entry = {"source": table, "partition": None if pd.isna(f["partition_start"]) else pd.Timestamp(f["partition_start"]).isoformat(),
                     "file": f["origin"], "check": f["check"], "reason": f["reason"]}
            if entry not in summary.setdefault("quarantined_files", []):
                summary["quarantined_files"].append(entry)
        for col, origins in found["dropped_columns"].items():
            summary.setdefault("dropped_columns", {}).setdefault(table, {})[col] = origins


def run_step(step, wh, s0, s1, inputs: dict, failed: set, summary: dict):
    """``step.run`` over ``[s0, s1)``, its failure recorded in ``summary['failed_partitions']`` (step, window, the
    error) instead of raised, so a range goes on with its other pieces; ``failed``: the tables of the window whose
    step failed or was skipped: a step reading one is skipped (as Dagster skips the assets downstream of a failed
    one in a run). Returns the step's result, or None."""
    if any(r.table in failed for r in step.reads):
        failed.update((*step.writes, *step.side_writes))
        return None
    try:
        return step.run(wh, s0, s1, **inputs)
    except Exception as err:  # noqa: BLE001 (any error of a piece costs that piece, named; the others go on)
        failed.update((*step.writes, *step.side_writes))
        where = "calendar" if s0 is None else f"{pd.Timestamp(s0).isoformat()} .. {pd.Timestamp(s1).isoformat()}"
        entry = {"step": step.name, "partitions": where, "reason": f"{type(err).__name__}: {err}"}
        if entry not in summary.setdefault("failed_partitions", []):
            summary["failed_partitions"].append(entry)
        return None


def _is_source(step) -> bool:
    return step.is_source


def _inputs(step, source, window_end, range_end) -> dict:
    """What a step of a run over a range takes beside its window: a source step the source; a step re-deriving
    later partitions, whether the run computes them itself next (every window but the last)."""
    if _is_source(step):
        return {"source": source}
    if step.rederives_later and window_end is not None:
        return {"judged_later": window_end < range_end}
    return {}


# The 5-minute steps cut into pipeline stages for a run over several processes: each stage runs its steps a day
# at a time in a process of its own, a day once the stages before it finished that day. The diagnosis steps
# (alerts onwards: alerts, kpi_baselines, goodput_decomposition) read the day's loss tree and KPIs and their own
# history, but nothing before them reads what they write: the natural cut. :func:`check_stages` proves any cut
# safe from the declarations (a stage never reads what a later stage writes, nor reads an earlier stage's tables
# past its window, where that stage may already be a day ahead).
DIAGNOSIS_CUT = "alerts"


def stages(processes: int, only: frozenset[str] | None = None) -> list[list]:
    """The 5-minute steps (those named in ``only``, when given) cut into ``processes`` stages (1: one; 2: sources |
    derived; 3 or more: sources | derived before the diagnosis | diagnosis), checked by :func:`check_stages`."""
    five = [s for s in steps_of(FIVE_MINUTE) if only is None or s.name in only]
    sources = [s for s in five if _is_source(s)]
    derived = [s for s in five if not _is_source(s)]
    if processes <= 1:
        cut = [five]
    elif processes == 2:
        cut = [sources, derived]
    else:
        i = next((k for k, s in enumerate(derived) if s.name == DIAGNOSIS_CUT), len(derived))
        cut = [sources, derived[:i], derived[i:]]
    check_stages(cut)
    return cut


def check_stages(cut: list[list]) -> None:
    """Raise unless running ``cut``'s stages concurrently, each a day behind the one before at most, writes what
    one process running them in order writes: no step reads a table a later stage writes (at any look-back), and
    no step reads past its window (``after``) a table an earlier stage writes."""
    stage_of = {t: k for k, stage in enumerate(cut) for s in stage for t in (*s.writes, *s.side_writes)}
    for k, stage in enumerate(cut):
        for step in stage:
            for read in step.reads:
                j = stage_of.get(read.table)
                if j is not None and j > k:
                    raise ValueError(f"stage {k} step {step.name} reads {read.table}, written by later stage {j}")
                # a step re-deriving later partitions reads past its window only for them; a run judging its
                # range in order asks for none before its last window (``judged_later``), when every stage is done
                ahead = (read.after > pd.Timedelta(0) and not step.rederives_later) or read.whole
                if j is not None and j < k and ahead:
                    raise ValueError(f"stage {k} step {step.name} reads {read.table} past its window, while "
                                     f"stage {j} writing it may be a day ahead")


def feeding_stage(cut: list[list], daily) -> int:
    """The stage of ``cut`` after which every table the ``daily`` steps read is written for a day: the last stage
    writing one of them (0 when none does). Once it finished a day, so has every stage before it."""
    read = {r.table for s in daily for r in s.reads}
    return max((k for k, stage in enumerate(cut) for s in stage if read & {*s.writes, *s.side_writes}), default=0)


def cache_depths(steps, chunk: pd.Timedelta = DAY) -> dict[str, int]:
    """table -> how many ``chunk``-long windows a run's cache keeps so that each read of ``steps`` (a chunk at a
    time, in time order) finds the run's earlier windows it looks back to in it: the chunks its declared
    ``[start - before, end)`` spans (a run in order reads past its window only at its end: ``judged_later``). A
    day's 14 days of KPI history are then stitched from the cache (FrameCache) instead of read back from the
    database every day (a run's seventh day would read 300,000 rows back, more with each day to the 14th)."""
    out: dict[str, int] = {}
    for step in steps:
        if _is_source(step):
            continue  # its look-back at its own table is for a file's re-sent rows: a few, and seldom
        for read in step.reads:
            if not read.whole and not read.filtered:  # (a filtered read is never served from the cache)
                windows = int(np.ceil((read.before + chunk) / chunk))
                out[read.table] = max(out.get(read.table, 0), windows)
    return out


def stage_cache(steps, chunk: pd.Timedelta = DAY):
    """The run cache of a stage process running ``steps`` over ``chunk``-long pieces: each table's windows as deep
    as the steps look back (:func:`cache_depths`), and one -- the piece the stage hands on -- of every other table
    it writes or adopts.
    (A cache's default keeps two windows of every table: in each stage the day before's frames, a day of GPU
    telemetry among them, that no step reads again. Kept to one, the bulk week's 3 processes held 6.8 GB at
    their peak instead of 7.5 -- the largest 2.4 instead of 2.7 -- in the same CPU time, every table equal.)"""
    from gpu_health.storage.warehouse import FrameCache

    return FrameCache(entries_per_table=1, depth=cache_depths(steps, chunk))


def _forwarded(cut: list[list], k: int) -> list[str]:
    """The tables stages up to ``k`` write that later stages read: their day's frames travel with the day's
    hand-over, as a run's cache would serve them in one process. Columnar ones too: reading a day of gpu_telemetry
    (1.7 million rows at 1,200 GPUs) back from the store costs several times what pickling it across does."""
    written = {t for stage in cut[:k + 1] for s in stage for t in s.writes}
    read = {r.table for stage in cut[k + 1:] for s in stage for r in s.reads}
    return sorted(written & read)


# What the stages' steps import (most of it lazily, inside the steps), imported once by the stages' fork server
# (pipeline.stage_context). Not Dagster: only the source stage's source needs it.
STAGE_MODULES = ("gpu_health.storage.warehouse", "gpu_health.contracts.validate", "gpu_health.sources.landing",
                 "gpu_health.steps.telemetry", "gpu_health.steps.kpis",
                 "gpu_health.steps.diagnosis", "gpu_health.steps.finance", "gpu_health.steps.capacity",
                 "gpu_health.metrics.goodput",
                 "gpu_health.metrics.kpis", "gpu_health.metrics.baselines", "gpu_health.metrics.kpi_baselines",
                 "gpu_health.metrics.serving", "gpu_health.metrics.slo", "gpu_health.metrics.facility",
                 "gpu_health.diagnosis.detect", "gpu_health.diagnosis.alerts", "gpu_health.diagnosis.decompose",
                 "gpu_health.diagnosis.platform", "gpu_health.diagnosis.facility")


def _stage_days(k: int, url: str, telemetry_dir: str, cut_processes: int, only, source_spec, chunk,
                chunks, inbox, outbox, reports) -> None:
    """Stage ``k`` of :func:`stages` over ``chunks`` in a process of its own (:func:`~gpu_health.steps.pipeline.
    stage_loop`): each piece, adopt the frames the stage before handed over into the run's cache, run the stage's
    steps, and hand on the piece's frames of the tables later stages read (:func:`_forwarded`)."""

    def setup():
        from gpu_health.storage.warehouse import Warehouse

        cut = stages(cut_processes, only)
        steps, forward = cut[k], _forwarded(cut, k)
        wh = Warehouse(url, telemetry_dir, cache=stage_cache(steps, chunk))
        source = source_spec.get() if any(_is_source(s) for s in steps) else None

        failed: dict = {}  # piece -> tables whose step failed (the later stages of a piece see theirs empty)

        def work(i, c0, c1, handed):
            if handed is not None:
                wh.cache.adopt(handed)
            fragment, seconds = {}, {}
            for step in steps:
                t0 = time.time()
                result = run_step(step, wh, c0, c1, _inputs(step, source, c1, chunks[-1][1]),
                                  failed.setdefault((c0, c1), set()), fragment)
                seconds[step.name] = time.time() - t0
                if result is not None:
                    _findings(step, result, fragment, c0, c1)
            return fragment, seconds, wh.cache.window(forward, c0, c1) if outbox is not None else None
        return work

    stage_loop(k, chunks, inbox, outbox, reports, setup)


def run_range(wh, source, start, end, *, progress: Callable[[pd.Timestamp, pd.Timestamp], None] | None = None,
              source_spec=None, processes: int = 2, targets=None, chunk: pd.Timedelta = RUN_CHUNK) -> dict:
    """Every step over ``[start, end)`` (5-minute aligned) into ``wh`` from ``source``; returns the summary
    ``gpu-health run`` prints (partitions, seconds per step, failed checks, files quarantined).

    ``source_spec`` (a picklable object whose ``get()`` builds the source, e.g. the ``TelemetrySourceResource``)
    pipelines the range over ``processes`` processes, one per stage of :func:`stages`: with 2 a process reads and
    stores each day's sources while another computes the derived tables of the day before; with 3 the diagnosis
    steps (alerts, baselines, decomposition) of a day run beside the loss tree and KPIs of the next. A stage starts
    a day only once the stages before it finished it, and :func:`check_stages` proves from the declared reads that
    no stage reads what a later one writes, so the tables written are the same as in one process
    (``test_direct_path.py``). On two cores, 3 stages keep both busy: the sources are the smallest.

    ``chunk``: the pieces the 5-minute steps run in, a day at most (:data:`RUN_CHUNK`); ``progress(c_start, c_end)``
    is called as each piece is done.

    ``targets``: only the steps these tables need (:func:`~gpu_health.steps.graph.feeding`), e.g. ``gpu-health
    evaluate``'s alerts and capacity headroom; the tables they write are the full run's.

    The process (and each stage's) keeps the memory its steps free for the next day's arrays (:mod:`gpu_health.
    allocator`)."""
    chunk = min(pd.Timedelta(chunk), DAY)
    if chunk < PARTITION or chunk % PARTITION:
        raise ValueError(f"a run's pieces are whole 5-minute partitions, up to a day: got {chunk}")
    keep_freed_memory()
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    summary: dict = {"runs": 0, "partitions": 0}
    seconds: dict[str, float] = {}

    failed: dict = {}  # window -> tables whose step failed there (run_step)

    def run(step, s0, s1):
        t0 = time.time()
        result = run_step(step, wh, s0, s1, _inputs(step, source, s1, end), failed.setdefault((s0, s1), set()), summary)
        seconds[step.name] = seconds.get(step.name, 0.0) + time.time() - t0
        if result is not None:
            _findings(step, result, summary, s0, s1)

    days = pd.date_range(start.normalize(), end, freq="D", inclusive="left")
    only = None
    if targets is not None:
        from gpu_health.steps.graph import feeding
        from gpu_health.steps.registry import STEPS

        only = frozenset(s.name for s in feeding(list(targets), STEPS))

    def wanted(steps):
        return [s for s in steps if only is None or s.name in only]

    if wh.cache is not None:
        wh.cache.deepen(cache_depths(wanted(steps_of(FIVE_MINUTE)) + wanted(steps_of(DAILY)), chunk))

    for step in wanted(steps_of(CALENDAR)):
        run(step, None, None)
    summary["runs"] += 1
    daily = wanted(steps_of(DAILY))
    for day in days:
        for step in daily:
            if step.name == "cost_capacity":
                run(step, day, day + DAY)
        summary["runs"] += 1
    chunks = list(day_chunks(start, end, chunk))
    # a day's finance tables read the 5-minute tables up to ``settles`` after it (the longest ``after`` of
    # their declared reads: a day's job failures settle a day later); once the range is done that far they
    # are final, so a pipelined run computes them here while its stages work on the next days
    settles = max((r.after for s in daily for r in s.reads), default=pd.Timedelta(0))
    pending = list(days)

    def finance(until):
        while pending and (pending[0] + DAY + settles <= until):
            day = pending.pop(0)
            for step in daily:
                run(step, day, day + DAY)
            summary["runs"] += 1

    def on_chunk(i):
        c_start, c_end = chunks[i]
        summary["runs"] += 1
        summary["partitions"] += int((c_end - c_start) / PARTITION)
        if progress is not None:
            progress(c_start, c_end)
        finance(c_end)  # (a pipelined run has settled them already: see on_stage)

    if source_spec is not None and processes > 1 and len(chunks) > 1:
        cut = stages(processes, only)
        # the source only to the stages reading one (unpickling it imports Dagster: ~0.4 s a process)
        args = [(wh.url, str(wh.telemetry.root), processes, only,
                 source_spec if any(_is_source(s) for s in stage) else None, chunk) for stage in cut]
        feeds = feeding_stage(cut, daily)

        def on_stage(k, i):
            # the finance days settle once the stages writing what they read are done: here while the later
            # stages work (the last day's diagnosis, alone on its core, beside the last days' finance)
            if k == feeds:
                finance(chunks[i][1] if i < len(chunks) - 1 else _EVER)

        run_stages(_stage_days, args, chunks, summary, seconds, on_chunk, on_stage, preload=STAGE_MODULES)
    else:
        for i, (c_start, c_end) in enumerate(chunks):
            for step in wanted(steps_of(FIVE_MINUTE)):
                run(step, c_start, c_end)
            on_chunk(i)
    finance(_EVER)  # the days whose settling time the range does not reach
    # the range's last window is a correction of the stored partitions after it: re-derived up to the bound
    from gpu_health.steps.rederive import rederive

    if not summary.get("failed_partitions"):  # re-derived from a complete range only (a failed piece is re-run first)
        summary.update(rederive(wh, end, only=only, chunk=chunk))
    summary["step_seconds"] = {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}
    return summary

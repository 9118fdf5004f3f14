"""Days through a pipeline of processes: the plumbing both range paths share.

A run over a range cut into stages (:func:`gpu_health.steps.direct.stages`) runs each stage in a spawned process
of its own, a day at a time: a stage starts a day once the stage before it handed that day over, so on two cores
the sources of one day are read while the loss tree of the day before is computed and the alerts of the day before
that. The bulk path (:mod:`gpu_health.steps.direct`) hands each day's frames over with it; the Dagster path
(:mod:`gpu_health.defs.range_runs`) only the day (each stage's run reads the warehouse).

Both sides of it are here: :func:`stage_loop` in a stage's process, :func:`run_stages` in the parent, which
collects every stage's reports and raises the first error a stage reports (or the exit of one that died without a
word), after which no stage waits for ever.
"""

from __future__ import annotations

import queue
import traceback
from collections.abc import Callable

from gpu_health.allocator import keep_freed_memory


def stage_loop(k: int, chunks, inbox, outbox, reports, setup: Callable) -> None:
    """Stage ``k`` over ``chunks`` in its process. ``setup()`` builds the stage's worker ``work(i, start, end,
    handed)`` -> (summary fragment, step seconds, what to hand the next stage); for each chunk, wait for the stage
    before to hand it over (``inbox``: (chunk index, what it handed)), work, hand the chunk on (``outbox``) and
    report (stage, chunk index, fragment, seconds) on ``reports``. On an error: report ("error", stage, text) and
    hand "error" on."""
    keep_freed_memory()
    try:
        work = setup()
        for i, (c0, c1) in enumerate(chunks):
            handed = None
            if inbox is not None:
                got = inbox.get()
                if got[0] == "error":  # a stage before failed: tell the next one, which waits on this one
                    _hand_on_error(outbox)
                    return
                handed = got[1]
            fragment, seconds, forward = work(i, c0, c1, handed)
            if outbox is not None:
                outbox.put((i, forward))
            reports.put((k, i, fragment, seconds))
    except Exception:  # noqa: BLE001 -- reported to the parent, which raises it
        reports.put(("error", k, traceback.format_exc()))
        _hand_on_error(outbox)


def _hand_on_error(outbox) -> None:
    """Tell the next stage that no more days come, so that it ends instead of waiting for ever."""
    if outbox is None:
        return
    try:
        outbox.put(("error", None), timeout=60)  # the next stage may be gone: the parent ends the run anyway
    except queue.Full:  # nobody left to tell
        pass


def _next(reports, workers):
    """The stages' next report; an error when one died without reporting."""
    while True:
        try:
            return reports.get(timeout=5)
        except queue.Empty:
            for k, worker in enumerate(workers):
                if not worker.is_alive() and worker.exitcode != 0:
                    return ("error", k, f"stage {k}'s process exited with code {worker.exitcode} without finishing")


def merge_findings(summary: dict, fragment: dict) -> None:
    """A stage's findings about a chunk (``failed_checks``, ``quarantined_files``, ``dropped_columns``) into the
    run's summary, each once."""
    for name in fragment.get("failed_checks", []):
        if name not in summary.setdefault("failed_checks", []):
            summary["failed_checks"].append(name)
    for entry in fragment.get("quarantined_files", []):
        if entry not in summary.setdefault("quarantined_files", []):
            summary["quarantined_files"].append(entry)
    for table, cols in fragment.get("dropped_columns", {}).items():
        summary.setdefault("dropped_columns", {}).setdefault(table, {}).update(cols)


def run_stages(target: Callable, stage_args: list[tuple], chunks, summary: dict, seconds: dict,
               on_chunk: Callable[[int], None], on_stage: Callable[[int, int], None] | None = None) -> None:
    """One spawned process per stage, ``target(k, *stage_args[k], chunks, inbox, outbox, reports)`` (a module-level
    function calling :func:`stage_loop`), joined by hand-overs that hold one day at most; each report's findings
    merged into ``summary`` and its step seconds added to ``seconds``; ``on_stage(k, i)`` when stage ``k`` finished
    chunk ``i`` (every stage before it has finished it too), then ``on_chunk(i)`` when the last stage finished chunk
    ``i``. Raises ``RuntimeError`` with a stage's traceback when one fails."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    reports = ctx.Queue()
    # one day waiting per hand-over at most: a stage that outruns the next (the sources do) blocks instead of
    # holding every day's frames (~0.3 GB a day at 1,200 GPUs) in its queue
    handovers = [ctx.Queue(maxsize=1) for _ in stage_args[1:]]
    last = len(stage_args) - 1
    workers = [ctx.Process(target=target, daemon=True,
                           args=(k, *args, chunks, handovers[k - 1] if k > 0 else None,
                                 handovers[k] if k < last else None, reports))
               for k, args in enumerate(stage_args)]
    for worker in workers:
        worker.start()
    try:
        finished = 0
        while finished < len(chunks):
            got = _next(reports, workers)
            if got[0] == "error":
                raise RuntimeError(f"stage {got[1]} of the pipelined run failed:\n{got[2]}")
            k, i, fragment, secs = got
            merge_findings(summary, fragment)
            for name, sec in secs.items():
                seconds[name] = seconds.get(name, 0.0) + sec
            if on_stage is not None:
                on_stage(k, i)
            if k == last:
                finished += 1
                on_chunk(i)
    finally:
        for worker in workers:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.terminate()

"""The declared step graph: what each step of the pipeline reads and writes, declared once.

A step computes and stores the tables of one window ``[start, end)``. Its declaration says which tables it writes
and which it reads, each read with how far it looks back before ``start`` (and ahead past ``end``, for the alerts
re-derived after a re-run) -- the facts a scheduler needs and a reader of the code looks for first:

* Dagster's ``deps`` are derived from the declarations (:func:`upstream_steps`): a step depends on the steps that
  write the tables it reads, never on itself (a step reading its own history, e.g. ``alerts`` the open alerts of
  the partition before, is not a dependency).
* The bulk path (:mod:`gpu_health.steps.direct`) runs the steps in :func:`order` over a range, without Dagster.
* ``gpu_health_tests/test_step_graph.py`` records the reads each step actually makes and fails when they differ
  from its declaration (a table read but not declared, declared but not read, or read further back than declared).

Nothing here imports Dagster; the steps' bodies are in :mod:`gpu_health.steps.telemetry`, ``kpis``, ``diagnosis``,
``finance`` and ``capacity`` (reading what their step declares through :mod:`gpu_health.steps.resolve`; the step
stores what they return) over the pure functions of ``metrics`` and ``diagnosis``, which never read the warehouse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

ZERO = pd.Timedelta(0)

FIVE_MINUTE = "five_minute"  # a step run on 5-minute partitions (one, or a range as one run)
DAILY = "daily"  # on UTC days
CALENDAR = "calendar"  # on the whole table (unpartitioned)


@dataclass(frozen=True)
class Read:
    """A table a step reads for the window ``[start, end)``: ``[start - before, end + after)``, or all of it
    (``whole``). ``optional``: read only when the data calls for it (e.g. a silent region's inventory as of its
    last report), so a run may not make it. ``filtered``: read only with a ``where`` filter (a few nodes' rows),
    which a run's cache never serves, so it keeps no window of the table for it."""

    table: str
    before: pd.Timedelta = ZERO
    after: pd.Timedelta = ZERO
    whole: bool = False
    optional: bool = False
    filtered: bool = False


@dataclass(frozen=True)
class Step:
    """One step: ``run(wh, start, end, **inputs)`` computes ``writes`` for ``[start, end)``, stores them and
    returns a :class:`StepResult`."""

    name: str
    cadence: str
    writes: tuple[str, ...]
    reads: tuple[Read, ...]
    run: Callable[..., StepResult]
    description: str = ""
    # tables it also writes for the partitions it touches but does not own (a source's rejects and gaps, keyed by
    # source): shared by many steps, so they are side outputs, not assets
    side_writes: tuple[str, ...] = ()
    # it re-derives the partitions after its window that were already computed (its reads reach past the window
    # for them); ``run`` takes ``judged_later=True`` from a caller that computes those partitions itself, in
    # order, next (a bulk run over a longer range): then nothing past the window is re-derived
    rederives_later: bool = False

    def read_tables(self) -> set[str]:
        return {r.table for r in self.reads}

    @property
    def is_source(self) -> bool:
        """A source step: it reads a source (and at most its own table's history, for re-sent rows) and files its
        rejects; every other step derives its tables from stored ones."""
        return "source_rejects" in self.side_writes


@dataclass
class StepResult:
    """What a step stored for its window (its ``writes``, validated) and what it found on the way: ``metadata``
    (counts for the UI), ``findings`` (contract rejects, quarantined files, invariants) for its checks."""

    tables: dict[str, pd.DataFrame]
    metadata: dict = field(default_factory=dict)
    findings: dict = field(default_factory=dict)


def writers(steps) -> dict[str, Step]:
    """table -> the step that writes it (its own tables and its side outputs)."""
    out: dict[str, Step] = {}
    for step in steps:
        for table in (*step.writes, *step.side_writes):
            if table in out and table not in step.side_writes:
                raise ValueError(f"table {table!r} is written by both {out[table].name} and {step.name}")
            out.setdefault(table, step)
    return out


def upstream_steps(step: Step, steps) -> list[Step]:
    """The steps ``step`` depends on: every step writing a table it reads (itself excluded)."""
    by_table: dict[str, list[Step]] = {}
    for s in steps:
        for t in (*s.writes, *s.side_writes):
            by_table.setdefault(t, []).append(s)
    out = []
    for table in sorted(step.read_tables()):
        for s in by_table.get(table, []):
            if s.name != step.name and s not in out:
                out.append(s)
    return out


def feeding(tables, steps) -> list[Step]:
    """The steps that write ``tables`` and every step those depend on, transitively, in ``steps``' order: what a
    run that only needs ``tables`` must compute (``gpu-health evaluate`` needs the alerts and the headroom, not
    the KPIs or the drill-down). An unknown table raises."""
    steps = list(steps)
    by_table = writers(steps)
    unknown = [t for t in tables if t not in by_table]
    if unknown:
        raise ValueError(f"no step writes {unknown}")
    need: set[str] = set()
    todo = [by_table[t] for t in tables]
    while todo:
        step = todo.pop()
        if step.name not in need:
            need.add(step.name)
            todo += upstream_steps(step, steps)
    return [s for s in steps if s.name in need]


def order(steps) -> list[Step]:
    """The steps in dependency order (stable: declaration order among independent steps); a cycle raises."""
    steps = list(steps)
    done: list[Step] = []
    pending = list(steps)
    while pending:
        ready = [s for s in pending if all(u in done for u in upstream_steps(s, steps))]
        if not ready:
            raise ValueError(f"step graph has a cycle among {[s.name for s in pending]}")
        for s in ready:
            done.append(s)
            pending.remove(s)
    return done

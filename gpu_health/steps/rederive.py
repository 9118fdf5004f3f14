"""A correction re-derives what it changes: the stored partitions after a re-run window.

A window ``[start, end)`` run again (its landing files replaced: a late correction) changes what every later
partition read of it through a declared look-back (``registry.py``): the loss tree and the KPIs of a job running
after it read its metadata up to ``META_LOOKBACK`` back, the baselines a week of statistics, the alerts the
previous snapshot and a week of history. So after the window, the later partitions already computed -- the
unbroken run of stored loss-tree partitions from ``end`` (:func:`~gpu_health.steps.diagnosis.computed_until`, as
the alerts' re-derivation finds them) -- are computed again, in order, up to a bound; those past the bound keep
their rows and are reported stale. The days whose finance read a re-derived partition (a day's failures settle
back into it up to a day later) are settled again when they are already stored.

The whole bounded window is re-derived, with no stop where a partition comes out unchanged: a partition after an
unchanged one may still read the corrected window itself. Stopping at an unchanged partition is sound only past
the longest declared look-back of the 5-minute steps (:func:`reach`: a month, the SLO error budgets; a job's
metadata 4 days, the baselines a week), where nothing reads the corrected window any more; that is always
further than the bound, so inside it an unchanged partition proves nothing about the next.
(The alerts, whose snapshot chain converges, still stop their own look-ahead where it does:
``diagnosis.alerts_after_rerun``; here they run with ``judged_later``, the next window following in order.)

Both range paths call this at a range's end (its last window is a correction of what follows):
``steps.direct.run_range`` through :func:`rederive`, ``defs.range_runs.run_range`` with :func:`plan` and Dagster runs
of the same steps; the sensor plans the same range from its records (``readiness.plan_rederive``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from gpu_health.constants import PARTITION, PIECE, day_chunks
from gpu_health.steps import diagnosis as D
from gpu_health.steps.graph import DAILY, FIVE_MINUTE

DAY = pd.Timedelta(days=1)


def default_bound() -> pd.Timedelta:
    """How far past a corrected window its later partitions are re-derived: the alerts' look-ahead
    (``diagnosis.ALERT_LOOKAHEAD``, a day), one bound for both: the longest window one ordinary run covers (``gpu-health
    run`` and a backfill run a range as day-long runs), so a correction costs at most one more such run, and the
    alerts' re-derivation is the case of this one. Read at call time, so one setting moves both."""
    return D.ALERT_LOOKAHEAD


def reach() -> pd.Timedelta:
    """The longest look-back a derived 5-minute step declares: how far after a corrected window a partition may
    still read it directly (a whole-table read is of the calendar, not of a partition's data)."""
    from gpu_health.steps.registry import steps_of

    return max(r.before for s in steps_of(FIVE_MINUTE) if not s.is_source for r in s.reads if not r.whole)


@dataclass(frozen=True)
class Plan:
    """Re-derive ``[start, stop)``; ``stale``: the stored partitions ``[from, until)`` past the bound, left as they
    were (None when the bound was not reached)."""

    start: pd.Timestamp
    stop: pd.Timestamp
    stale: tuple[pd.Timestamp, pd.Timestamp] | None = None

    @property
    def partitions(self) -> int:
        return int((self.stop - self.start) / PARTITION)

    def summary(self) -> dict:
        """What a run reports: ``rederived`` (and ``stale``) as ISO times and partition counts; {} when nothing."""
        out = {}
        if self.stop > self.start:
            out["rederived"] = {"from": self.start.isoformat(), "until": self.stop.isoformat(),
                                "partitions": self.partitions}
        if self.stale is not None:
            s0, s1 = self.stale
            out["stale"] = {"from": s0.isoformat(), "until": s1.isoformat(), "partitions": int((s1 - s0) / PARTITION)}
        return out


def plan(wh, end, *, bound: pd.Timedelta | None = None) -> Plan:
    """The later partitions of a window ending at ``end`` to re-derive, and the stale ones past the bound (the
    unbroken run of stored partitions that goes on past it, as far as a declared look-back reaches)."""
    end = pd.Timestamp(end)
    limit = default_bound() if bound is None else bound
    # (no step: which partitions are stored, read from the warehouse itself; see computed_until)
    stop = D.computed_until(wh.read_window, end, limit)
    stale = None
    if stop == end + limit:  # the bound reached: the stored partitions may go on past it
        last = D.computed_until(wh.read_window, stop, end + reach() - stop)
        stale = (stop, last) if last > stop else None
    return Plan(end, stop, stale)


def finance_days(start, stop) -> list[pd.Timestamp]:
    """The days whose finance tables read a partition of ``[start, stop)``: a day reads its own partitions and
    the failures of up to ``settles`` after it (the longest ``after`` of the daily steps' reads)."""
    from gpu_health.steps.registry import steps_of

    settles = max((r.after for s in steps_of(DAILY) for r in s.reads), default=pd.Timedelta(0))
    start, stop = pd.Timestamp(start), pd.Timestamp(stop)
    # the first day d with d + DAY + settles > start
    return list(pd.date_range((start - DAY - settles).floor("D") + DAY, (stop - PARTITION).floor("D"), freq="D"))


def stored_days(wh, days, steps) -> list[pd.Timestamp]:
    """The ``days`` some of whose ``steps``' tables are already stored (a day never settled stays for its schedule)."""
    out = []
    for day in days:
        if any(len(wh.read_window(s.writes[0], day, day + DAY)) for s in steps):
            out.append(day)
    return out


def derived(cadence: str, only=None) -> list:
    """The derived steps of ``cadence`` (not the sources: their files did not change), in order; those named in
    ``only`` when given (a run for some tables)."""
    from gpu_health.steps.registry import steps_of

    return [s for s in steps_of(cadence) if not s.is_source and (only is None or s.name in only)]


def rederive(wh, end, *, only=None, chunk: pd.Timedelta = PIECE, bound: pd.Timedelta | None = None) -> dict:
    """Re-derive the stored partitions after a window ending at ``end`` (:func:`plan`), in order a piece at a
    time, then the stored finance days they touch; returns :meth:`Plan.summary` (with ``rederived_days``)."""
    the_plan = plan(wh, end, bound=bound)
    five = derived(FIVE_MINUTE, only)
    for c0, c1 in day_chunks(the_plan.start, the_plan.stop, chunk):
        for step in five:
            # the alerts of the next piece follow; past the plan's stop the partitions are stale (reported)
            step.run(wh, c0, c1, **({"judged_later": True} if step.rederives_later else {}))
    out = the_plan.summary()
    if the_plan.stop > the_plan.start:
        daily = derived(DAILY, only)
        days = stored_days(wh, finance_days(the_plan.start, the_plan.stop), daily)
        for day in days:
            for step in daily:
                step.run(wh, day, day + DAY)
        if days:
            out["rederived_days"] = [d.strftime("%Y-%m-%d") for d in days]
    return out

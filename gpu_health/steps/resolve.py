"""What a step's body reads: the reads its declaration (``registry.py``) names, resolved for its window.

A step's body never holds the warehouse. It gets an :class:`Inputs`: the step's declared reads over its
:class:`Window`, the only way it reads a table. ``inputs.window(table)`` is the declared span
``[start - before, end + after)`` (all of the table for a ``whole`` read); a body needing less asks for a sub-span
(``inputs.span``, ``inputs.in_window``, ``inputs.last_partition_by``), which raises when it leaves the declaration,
as does a table the step does not declare. So a look-back is typed once, in the declaration, and a body cannot read
further back (or ahead) than its step says: the Dagster deps, the bulk path's stages and cache depths, and the
re-derivation's reach, all derived from the declarations, stay true. The reads go to the warehouse as before
(column-filtered, served by a run's cache where it holds the window): the resolver adds a check, not a copy.

A table declared more than once (e.g. the runtime metrics of the window and of the failures' look-back) is bounded
by its widest declaration. A step re-deriving later partitions (``Step.rederives_later``) declares with ``after``
how far past its window it may read for them: its per-window reads do not include it, and :meth:`Inputs.at`
gives the same declarations over a later window inside that reach.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from gpu_health.constants import PARTITION


@dataclass(frozen=True)
class Window:
    """The window ``[start, end)`` a step computes (both None: the whole table, a calendar step)."""

    start: pd.Timestamp | None
    end: pd.Timestamp | None

    def __post_init__(self):
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, pd.Timestamp(value))

    def partitions(self) -> pd.DatetimeIndex:
        """The starts of the window's 5-minute partitions."""
        return pd.date_range(self.start, self.end, freq=PARTITION, inclusive="left")

    def days(self) -> pd.DatetimeIndex:
        """The UTC days starting in the window (a daily step's window is whole days)."""
        return pd.date_range(self.start, self.end, freq="D", inclusive="left")

    @property
    def day_start(self) -> pd.Timestamp:
        """Midnight of the day the window starts in."""
        return self.start.normalize()


class UndeclaredRead(LookupError):
    """A step's body asked for a table its step does not declare, or for rows outside the declared span."""


class Inputs:
    """Read-only access to the reads ``step`` declares over ``period`` (:class:`Window`), through ``wh``.

    ``bounds`` (table -> (lo, hi), None for a whole read): what may be read at all; by default the declaration's
    span around ``period``. :meth:`at` keeps them for another window of the same run."""

    def __init__(self, step, wh, period: Window, *, bounds: dict | None = None):
        self.step = step
        self.period = period
        self._wh = wh
        self._reads: dict[str, list] = {}
        for r in step.reads:
            self._reads.setdefault(r.table, []).append(r)
        self._bounds = bounds if bounds is not None else {t: self._span_of(t, ahead=True) for t in self._reads}

    @property
    def start(self) -> pd.Timestamp:
        return self.period.start

    @property
    def end(self) -> pd.Timestamp:
        return self.period.end

    def at(self, start, end) -> Inputs:
        """The same declarations over ``[start, end)`` (a part of the window, or a later window a re-deriving step
        judges), still bounded by what the step declared around its own window."""
        return Inputs(self.step, self._wh, Window(start, end), bounds=self._bounds)

    # --- the declaration ------------------------------------------------------------------------------------
    def _declared(self, table: str) -> list:
        if table not in self._reads:
            raise UndeclaredRead(f"step {self.step.name} reads {table!r}, which it does not declare "
                                 f"(declared: {sorted(self._reads)}); declare it in gpu_health/steps/registry.py")
        return self._reads[table]

    def _span_of(self, table: str, *, ahead: bool) -> tuple[pd.Timestamp, pd.Timestamp] | None:
        reads = self._declared(table)
        if any(r.whole for r in reads) or self.start is None:
            return None
        before = max(r.before for r in reads)
        # a re-deriving step's ``after`` is its reach for the later partitions, not part of a window's reads
        after = max(r.after for r in reads) if ahead or not self.step.rederives_later else pd.Timedelta(0)
        return self.start - before, self.end + after

    def since(self, table: str) -> pd.Timestamp:
        """The earliest instant the declaration reads of ``table`` for this window (``start - before``)."""
        span = self._span_of(table, ahead=False)
        if span is None:
            raise UndeclaredRead(f"step {self.step.name} reads all of {table!r}: it has no look-back")
        return span[0]

    def _check(self, table: str, lo, hi) -> None:
        self._declared(table)
        bound = self._bounds[table]
        if bound is None:
            return
        if lo is None or hi is None:
            raise UndeclaredRead(f"step {self.step.name} reads all of {table!r}; its declaration bounds it "
                                 f"to [{bound[0]}, {bound[1]})")
        if pd.Timestamp(lo) < bound[0] or pd.Timestamp(hi) > bound[1]:
            raise UndeclaredRead(f"step {self.step.name} reads {table!r} over [{lo}, {hi}), outside its declared "
                                 f"[{bound[0]}, {bound[1]}) for the window [{self.start}, {self.end})")

    # --- the reads -----------------------------------------------------------------------------------------
    def window(self, table: str, columns: list[str] | None = None, where: dict | None = None) -> pd.DataFrame:
        """The declared span of ``table`` for this window (all of it for a ``whole`` read)."""
        span = self._span_of(table, ahead=False)
        lo, hi = span if span is not None else (None, None)
        return self.span(table, lo, hi, columns=columns, where=where)

    def in_window(self, table: str, columns: list[str] | None = None, where: dict | None = None) -> pd.DataFrame:
        """The rows of ``table`` in the window itself, ``[start, end)``."""
        return self.span(table, self.start, self.end, columns=columns, where=where)

    def span(self, table: str, lo, hi, columns: list[str] | None = None, where: dict | None = None) -> pd.DataFrame:
        """The rows of ``table`` in ``[lo, hi)``, a span inside the declared one (raises outside it)."""
        self._check(table, lo, hi)
        return self._wh.read_window(table, lo, hi, columns=columns, where=where)

    def last_partition_by(self, table: str, by: str, lo, hi, *, positive: str | None = None) -> pd.Series:
        """``by`` -> its latest partition in ``[lo, hi)`` (aggregated in the database), inside the declared span."""
        self._check(table, lo, hi)
        return self._wh.last_partition_by(table, by, lo, hi, positive=positive)


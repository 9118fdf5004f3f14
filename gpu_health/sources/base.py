"""The small interface every source adapter implements.

A source reads one contract table for a half-open UTC window ``[start, end)``
and returns a frame with exactly the contract's columns (validation happens
downstream, in one place: :mod:`gpu_health.contracts.validate`).
"""

from dataclasses import dataclass
from typing import Protocol

import pandas as pd


# How long a window a live producer has not covered yet is waited for before it is written empty as
# missing data (PrometheusSource / SlurmSource ``absent_after``): two 5-minute partitions. That is longer
# than any delay a *working* producer has -- a scrape interval (at most the contract's minute), a
# remote-write or federation queue (seconds to a couple of minutes), a dump job run every partition --
# so what is still silent then is absent (not deployed, or down); and it is short enough that an absent
# exporter holds the KPIs of a partition back by two partitions, not forever.
DEFAULT_ABSENT_AFTER = "10min"

# The readiness token (``version()``) of a partition whose file a source judged absent: no file token
# (``mtime_ns:size``) can equal it, so a file arriving later is a new version and runs the partition again.
ABSENT = "absent"


class DataNotReady(Exception):
    """The window's data is not complete yet: retry later, never write it half."""


class SourceError(Exception):
    """A source failed for a reason other than lateness (bad response, unreachable)."""


@dataclass(frozen=True)
class Fetched:
    """What a source returns for one table and window: rows plus where they came from."""

    frame: pd.DataFrame
    origin: str  # file path, URL or "simulator:<scenario>" -- named in error messages
    start: pd.Timestamp | None = None  # the partition a file holds, when it holds one
    end: pd.Timestamp | None = None
    # Set by sources that read a live producer (an exporter, a scheduler dump): the metric family or
    # input whose silence this read stands for. A 5-minute partition of the window with no row is
    # then *missing data* (recorded in ``source_gaps``), not "nothing happened": a cluster's GPUs
    # always report something while their exporter runs. None (files, the simulator): an empty
    # partition is a fact the producer wrote.
    silent_family: str | None = None
    # why the file could not be read at all (its frame is then empty): the file is quarantined whole
    unreadable: str | None = None
    # why a file that was found is not read at all (e.g. a name outside the landing layout): reported only
    ignored: str | None = None


class Source(Protocol):
    """A source of contract tables."""

    name: str

    def tables(self) -> frozenset[str]:
        """Contract tables this source provides."""
        ...

    def read(self, table: str, start: pd.Timestamp, end: pd.Timestamp) -> Fetched:
        """Rows of ``table`` whose partition column lies in ``[start, end)``.

        Raises :class:`DataNotReady` when the window is not complete yet.
        """
        ...

"""The small interface every source adapter implements.

A source reads one contract table for a half-open UTC window ``[start, end)``
and returns a frame with exactly the contract's columns (validation happens
downstream, in one place: :mod:`gpu_health.contracts.validate`).
"""

from dataclasses import dataclass
from typing import Protocol

import pandas as pd


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

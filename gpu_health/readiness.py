"""Which 5-minute partitions are ready to run, and with which data version.

Pure logic behind the sensor (no Dagster import). A partition is *ready* when
it has closed, a grace period has passed, and every 5-minute source has its
data: for the landing zone, every source's file exists (a zero-row file says
"nothing happened"); for the simulator, the wall clock has passed the window.
Its *version* is the files' (mtime, size) tokens, so a replaced file yields a
new version.
"""

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd

from gpu_health.constants import PARTITION, PARTITION_FREQ
from gpu_health.contracts import FIVE_MINUTE_SOURCES
from gpu_health.partitions import FIVE_MINUTE_FMT



@dataclass
class SensorCursor:
    next_start: pd.Timestamp | None = None          # oldest partition not yet requested
    versions: dict[str, str] = field(default_factory=dict)  # partition key -> version it ran with

    def dumps(self) -> str:
        return json.dumps({"next": self.next_start.isoformat() if self.next_start is not None else None,
                           "versions": self.versions}, sort_keys=True)

    @classmethod
    def loads(cls, text: str | None) -> "SensorCursor":
        if not text:
            return cls()
        raw = json.loads(text)
        nxt = pd.Timestamp(raw["next"]) if raw.get("next") else None
        return cls(nxt, dict(raw.get("versions", {})))


@dataclass(frozen=True)
class Request:
    partition_key: str
    version: str
    attempt: int = 0  # 0: the first run of this data; n: the n-th re-request after a failed run

    @property
    def run_key(self) -> str:
        """``partition@version`` (``#retryN`` for a re-request): the same data never runs twice, a retry once."""
        base = f"{self.partition_key}@{self.version}"
        return f"{base}#retry{self.attempt}" if self.attempt else base


@dataclass(frozen=True)
class PartitionRun:
    """The latest run the sensor requested for a partition, as the Dagster instance records it."""

    partition_key: str
    version: str | None  # the data version it ran with (its run tag)
    attempt: int  # 0 for the first request of that version, n for the n-th retry
    status: str  # "success" | "failure" | "canceled" | "in_progress"
    ended_at: pd.Timestamp | None = None


def plan_retries(latest: Iterable[PartitionRun], versions: dict[str, str], *, now: pd.Timestamp,
                 max_retries: int, backoff: pd.Timedelta) -> list[Request]:
    """Re-requests of partitions whose latest run failed on the data they still hold.

    A partition is requested again when its latest run failed, with the version the cursor
    still holds for it (a replaced file already gets a request of its own from
    ``plan_requests``; a partition past the lookback has no record and is left alone), it
    has been retried fewer than ``max_retries`` times, and ``backoff * 2**attempt`` has
    passed since the failed run ended. The reason: the step retries inside a run cover a
    fault of seconds, these cover one of minutes (a database restarting, a collector
    backfilling); a failure that is not transient stops after ``max_retries`` and stays
    failed and visible in Dagster, instead of being tried forever. A canceled run was
    stopped on purpose and is not retried; a run in progress is waited for.
    """
    out = []
    for run in latest:
        if run.status != "failure" or run.version is None or versions.get(run.partition_key) != run.version:
            continue
        if run.attempt >= max_retries:
            continue
        wait = backoff * (2 ** run.attempt)
        if run.ended_at is not None and now < run.ended_at + wait:
            continue
        out.append(Request(run.partition_key, run.version, run.attempt + 1))
    return sorted(out, key=lambda r: r.partition_key)


def partition_key(start: pd.Timestamp) -> str:
    return start.strftime(FIVE_MINUTE_FMT)


def data_version(source, start: pd.Timestamp, now: pd.Timestamp, grace: pd.Timedelta) -> str | None:
    """The partition's data version, or None if it is not ready yet."""
    if start + PARTITION + grace > now:
        return None
    if hasattr(source, "version"):  # file-based: every source file must have arrived
        tokens = []
        for table in FIVE_MINUTE_SOURCES:
            tok = source.version(table, start)
            if tok is None:
                return None
            tokens.append(f"{table}={tok}")
        return hashlib.sha1("|".join(tokens).encode()).hexdigest()[:16]
    return "clock"  # generated / queried sources: ready once closed


def plan_requests(source, cursor: SensorCursor, *, now: pd.Timestamp, partitions_start: pd.Timestamp,
                  grace: pd.Timedelta, lookback: pd.Timedelta, initial_lookback: pd.Timedelta,
                  max_requests: int) -> tuple[list[Request], SensorCursor]:
    """Requests for this tick and the cursor after it."""
    last_closed = (now - grace - PARTITION).floor(PARTITION_FREQ)
    nxt = cursor.next_start
    if nxt is None:
        nxt = max(partitions_start, (now - initial_lookback).floor(PARTITION_FREQ))
    scan_from = max(partitions_start, min(nxt, (now - lookback).floor(PARTITION_FREQ)))
    if hasattr(source, "version") is False:
        scan_from = nxt  # nothing can be replaced: only the new partitions
    versions = dict(cursor.versions)
    requests: list[Request] = []
    new_next = nxt
    holding = False  # a not-ready partition at/after `nxt` holds the cursor
    t = scan_from
    while t <= last_closed and len(requests) < max_requests:
        key = partition_key(t)
        ver = data_version(source, t, now, grace)
        if ver is None:
            if t >= nxt:
                holding = True
        elif versions.get(key) != ver and (t >= nxt or key in versions):
            # before `nxt` only a partition that ran with another version is requested again: one
            # without a record never ran (a fresh cursor starts `initial_lookback` back, not
            # `lookback`) or ran so long ago that its record was dropped
            requests.append(Request(key, ver))
            versions[key] = ver
        if not holding and t >= new_next and ver is not None:
            new_next = t + PARTITION
        t += PARTITION
    horizon = partition_key((now - lookback).floor(PARTITION_FREQ))
    versions = {k: v for k, v in versions.items() if k >= horizon}
    return requests, SensorCursor(new_next, versions)

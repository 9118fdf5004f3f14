"""Which 5-minute partitions are ready to run, and with which data version.

Pure logic behind the sensor (no Dagster import). A partition is *ready* when
it has closed, a grace period has passed, and every 5-minute source has its
data: for the landing zone, every source's file exists (a zero-row file says
"nothing happened") or was judged absent (``LandingSource.absent_after`` past
the partition's end: it runs without it, with a ``source_gaps`` row); for the
simulator, the wall clock has passed the window. Its *version* is the files'
(mtime, size) tokens, so a replaced or late-arriving file yields a new version.

It lives with the steps (floor 5 of the import layout), below the sensor that asks it
(``defs.telemetry.sensors``): it plans runs over the sources and the contracts'
tables, which a floor-1 module may not import.
"""

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import pandas as pd

from gpu_health.constants import DAILY_KEY_FMT, PARTITION, PARTITION_FREQ, PARTITION_KEY_FMT
from gpu_health.contracts import FIVE_MINUTE_SOURCES
from gpu_health.sources.base import ABSENT

# A version with tables judged absent ends in this mark and a hex bit mask of them (in FIVE_MINUTE_SOURCES order):
# the run key stays a short plain tag value, and a partition that ran with a file is never run again because that
# file has since gone (a landing zone's retention cleaning it would otherwise re-run it empty).
ABSENT_MARK = "-absent-"


@dataclass
class SensorCursor:
    next_start: pd.Timestamp | None = None          # oldest partition not yet requested
    versions: dict[str, str] = field(default_factory=dict)  # partition key -> version it ran with
    # what the tick waits for, for the operator (never read back to plan): the oldest partition not ready, its late
    # source tables and until when they are waited for; and the last partition the cursor moved past unrun
    waiting: dict | None = None
    passed_over: dict | None = None
    # the last correction whose re-derivation stopped at the bound: the requested partitions past it keep rows
    # judged with the old data (RangeRequest.stale)
    stale: dict | None = None

    def dumps(self) -> str:
        out = {"next": self.next_start.isoformat() if self.next_start is not None else None, "versions": self.versions}
        if self.waiting:
            out["waiting"] = self.waiting
        if self.passed_over:
            out["passed_over"] = self.passed_over
        if self.stale:
            out["stale"] = self.stale
        return json.dumps(out, sort_keys=True)

    @classmethod
    def loads(cls, text: str | None) -> "SensorCursor":
        if not text:
            return cls()
        raw = json.loads(text)
        nxt = pd.Timestamp(raw["next"]) if raw.get("next") else None
        return cls(nxt, dict(raw.get("versions", {})), raw.get("waiting"), raw.get("passed_over"), raw.get("stale"))


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
    started_at: pd.Timestamp | None = None
    corrected: bool = False  # a corrected partition's run that needed no range (it settles finance again)


def _retry_due(status: str, attempt: int, ended_at: pd.Timestamp | None, *, now: pd.Timestamp, max_retries: int,
               backoff: pd.Timedelta) -> bool:
    """A failed run is requested again after ``backoff * 2**attempt``, at most ``max_retries`` times."""
    if status != "failure" or attempt >= max_retries:
        return False
    return ended_at is None or now >= ended_at + backoff * (2 ** attempt)


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
        if run.version is None or versions.get(run.partition_key) != run.version:
            continue
        if _retry_due(run.status, run.attempt, run.ended_at, now=now, max_retries=max_retries, backoff=backoff):
            out.append(Request(run.partition_key, run.version, run.attempt + 1))
    return sorted(out, key=lambda r: r.partition_key)


def partition_key(start: pd.Timestamp) -> str:
    return start.strftime(PARTITION_KEY_FMT)


def partition_start(key: str) -> pd.Timestamp:
    return pd.to_datetime(key, format=PARTITION_KEY_FMT, utc=True)


@dataclass(frozen=True)
class RangeRequest:
    """One run of the 5-minute job over the partitions ``first`` .. ``last`` (keys, both included, as Dagster's
    range tags): the corrected partitions (``corrected``, from ``first``) and the partitions already requested
    after them, re-derived in order from the corrected data. ``stale``: the requested partitions past the bound
    (``first_key``, ``last_key``), left as they were. ``version`` digests the corrections' versions."""

    first: str
    last: str
    version: str
    corrected: tuple[str, ...]
    stale: tuple[str, str] | None = None
    attempt: int = 0  # as Request.attempt: n for the n-th re-request after a failed run

    @property
    def correction_key(self) -> str:
        """``rederive:first..last@version``: the corrections it re-derives, whichever attempt."""
        return f"rederive:{self.first}..{self.last}@{self.version}"

    @property
    def run_key(self) -> str:
        """The correction key (``#retryN`` for a re-request): the same corrections re-derive once, a retry once."""
        return f"{self.correction_key}#retry{self.attempt}" if self.attempt else self.correction_key

    def stale_report(self) -> dict | None:
        if self.stale is None:
            return None
        s0, s1 = self.stale
        n = int((partition_start(s1) - partition_start(s0)) / PARTITION) + 1
        return {"corrected": self.first, "from": s0, "to": s1, "partitions": n}


def _replaced(old: str | None, new: str) -> bool:
    """A partition that ran with ``old`` now holds replaced files (a correction): the same files, another
    version. A file arriving after it was judged absent is late data, as a partition run late is: what ran
    after it without it is not re-derived (it keeps its source_gaps row)."""
    return old is not None and old != new and _absent_mask(old) == _absent_mask(new)


def corrections(requests: Iterable[Request], before: dict[str, str]) -> dict[str, str]:
    """The tick's requests of replaced partitions (corrections): partition key -> its new version."""
    return {r.partition_key: r.version for r in requests
            if r.attempt == 0 and _replaced(before.get(r.partition_key), r.version)}


def _digest(held: Iterable[str], versions: dict[str, str]) -> str:
    """A range's version: its corrected partitions with their versions."""
    return hashlib.sha1("|".join(f"{k}@{versions[k]}" for k in held).encode()).hexdigest()[:16]


def plan_rederive(requests: Iterable[Request], before: dict[str, str], *,
                  bound: pd.Timedelta) -> list[RangeRequest]:
    """The re-derivations a tick's corrections call for: for each replaced partition (a request whose partition
    ran before with other files, ``before`` being the cursor's versions ahead of the tick), one range from it over
    the unbroken run of partitions requested before the tick that follow it, up to ``bound`` past the last
    correction it holds (a correction inside a range joins it: one range from the earliest). A correction with no
    later partition requested needs none (its own run is all). The requested partitions that go on past the
    bound are the range's ``stale``."""
    fixes = corrections(requests, before)
    out: list[RangeRequest] = []
    done: set[str] = set()
    for first in sorted(fixes):
        if first in done:
            continue
        t0 = partition_start(first)
        t, limit, held = t0 + PARTITION, t0 + PARTITION + bound, [first]
        while t < limit and partition_key(t) in before:
            if partition_key(t) in fixes:
                held.append(partition_key(t))
                limit = max(limit, t + PARTITION + bound)
            t += PARTITION
        done.update(held)
        if t == t0 + PARTITION:
            continue
        stale, u = None, t
        while partition_key(u) in before:
            u += PARTITION
        if u > t:
            stale = (partition_key(t), partition_key(u - PARTITION))
        out.append(RangeRequest(first, partition_key(t - PARTITION), _digest(held, fixes), tuple(held), stale))
    return out


@dataclass(frozen=True)
class RangeRun:
    """The latest run of a re-derivation range (``request``, as it was requested: its attempt the retry it was),
    as the Dagster instance records it; ``status`` and ``ended_at`` as :class:`PartitionRun`'s."""

    request: RangeRequest
    status: str
    ended_at: pd.Timestamp | None = None


def plan_range_retries(latest: Iterable[RangeRun], versions: dict[str, str], *, now: pd.Timestamp,
                       max_retries: int, backoff: pd.Timedelta) -> list[RangeRequest]:
    """Re-requests of re-derivations whose latest run failed, as :func:`plan_retries`' of partitions (the same
    backoff and bound): a fault of minutes during a range (a database restarting) heals without a changed file.
    Only a range whose corrected partitions still hold the versions it was planned with is retried (its version is
    their digest): one corrected again gets a range of its own from ``plan_rederive``, and one past the cursor's
    records is left alone."""
    out = []
    for run in latest:
        req = run.request
        if not all(k in versions for k in req.corrected) or _digest(req.corrected, versions) != req.version:
            continue
        if _retry_due(run.status, req.attempt, run.ended_at, now=now, max_retries=max_retries, backoff=backoff):
            out.append(replace(req, attempt=req.attempt + 1))
    return sorted(out, key=lambda r: (r.first, r.last))


@dataclass(frozen=True)
class Correction:
    """A correction whose run succeeded: ``key`` names it whichever attempt ran it (``RangeRequest.correction_key``
    of a re-derivation; ``partition@version`` of a corrected partition that needed none), ``first`` .. ``last``
    the partitions it wrote (keys, both included), ``ended_at`` when it succeeded."""

    key: str
    first: str
    last: str
    ended_at: pd.Timestamp


@dataclass(frozen=True)
class Settle:
    """A finance day (daily partition key) to settle again after ``correction`` (a :attr:`Correction.key`)."""

    day: str
    correction: str

    @property
    def run_key(self) -> str:
        """``settle:day@correction``: a day settles once per correction."""
        return f"settle:{self.day}@{self.correction}"


def plan_settles(done: Iterable[Correction], daily: Iterable[PartitionRun], *, finance_days) -> list[Settle]:
    """The finance days to settle again after corrections that succeeded: each day whose finance read a partition
    a correction wrote (``finance_days(start, stop)``, :func:`gpu_health.steps.rederive.finance_days`) and whose
    latest daily run (``daily``: the newest run per daily partition key) began before the correction ended and has
    finished: its tables hold the old data. A day never settled is left to its schedule; a daily run that began
    after the correction ended, or has not begun yet, reads the corrected data; one still running is waited for
    (a run requested now could finish before it, and its old tables would be the ones kept)."""
    latest = {r.partition_key: r for r in daily}
    out = set()
    for fix in done:
        for day in finance_days(partition_start(fix.first), partition_start(fix.last) + PARTITION):
            run = latest.get(day.strftime(DAILY_KEY_FMT))
            if run is None or run.status == "in_progress":
                continue
            began = run.started_at if run.started_at is not None else run.ended_at
            if began is not None and began < fix.ended_at:
                out.add(Settle(day.strftime(DAILY_KEY_FMT), fix.key))
    return sorted(out, key=lambda s: (s.day, s.correction))


def data_version(source, start: pd.Timestamp, now: pd.Timestamp, grace: pd.Timedelta) -> str | None:
    """The partition's data version, or None if it is not ready yet."""
    return judge(source, start, now, grace)[0]


def judge(source, start: pd.Timestamp, now: pd.Timestamp, grace: pd.Timedelta) -> tuple[str | None, list[str]]:
    """(the partition's data version or None, the 5-minute source tables it waits for), judged at ``now``."""
    if start + PARTITION + grace > now:
        return None, []
    if not hasattr(source, "version"):
        return "clock", []  # generated / queried sources: ready once closed
    tokens, late, absent = [], [], 0
    for i, table in enumerate(FIVE_MINUTE_SOURCES):  # file-based: every source file arrived or was judged absent
        tok = source.version(table, start, now=now)
        if tok is None:
            late.append(table)
        elif tok == ABSENT:
            absent |= 1 << i
        tokens.append(f"{table}={tok}")
    if late:
        return None, late
    digest = hashlib.sha1("|".join(tokens).encode()).hexdigest()[:16]
    return (f"{digest}{ABSENT_MARK}{absent:x}" if absent else digest), []


def _absent_mask(version: str) -> int:
    return int(version.rsplit(ABSENT_MARK, 1)[1], 16) if ABSENT_MARK in version else 0


def _rerun(old: str | None, new: str) -> bool:
    """Whether a partition that ran with ``old`` runs again with ``new``: new data, never data gone (a file judged
    absent that the run had is kept as it landed, not replaced by nothing)."""
    return old != new and (old is None or _absent_mask(new) & ~_absent_mask(old) == 0)


def _waiting(source, start: pd.Timestamp, late: list[str]) -> dict:
    """The oldest partition the sensor waits for: which source tables (and files) are late, until when."""
    out = {"partition": partition_key(start), "sources": late}
    adapters = [source.for_table(t) if hasattr(source, "for_table") else source for t in late]
    afters = [getattr(a, "absent_after", None) for a in adapters]
    if all(a is not None for a in afters):  # a source without an absence rule waits with no end
        out["until"] = (start + PARTITION + max(pd.Timedelta(a) for a in afters)).isoformat()
    out["files"] = [str(a.files(t, start, start + PARTITION)[0][0]) if hasattr(a, "files") else t
                    for a, t in zip(adapters, late)]
    return out


def describe_wait(cursor: SensorCursor) -> str:
    """The cursor's wait, in a sentence (the sensor's SkipReason)."""
    w = cursor.waiting
    if not w:
        return f"no new ready partition; the next is {cursor.next_start}, not closed yet"
    until = (f"; waited for until {w['until']}, then run without it (missing data)" if w.get("until")
             else "; its source has no absence timeout")
    return (f"no new ready partition; waiting on {cursor.next_start} (partition {w['partition']}): not arrived yet: "
            f"{', '.join(w['files'])}{until}")


def plan_requests(source, cursor: SensorCursor, *, now: pd.Timestamp, partitions_start: pd.Timestamp,
                  grace: pd.Timedelta, lookback: pd.Timedelta, initial_lookback: pd.Timedelta,
                  max_requests: int) -> tuple[list[Request], SensorCursor]:
    """Requests for this tick and the cursor after it.

    The cursor keeps the versions of the newest ``lookback / PARTITION + 1`` requested partitions, by count:
    every partition a tick scans from ``lookback`` back is among them, so none is requested again because its
    record was dropped. A late partition holds ``next`` until its source decides (``absent_after``); one still not
    decided when as many later partitions have run as the records hold (a source without an absence rule) is
    passed over (reported in ``passed_over``), so the records never stop covering the scan."""
    last_closed = (now - grace - PARTITION).floor(PARTITION_FREQ)
    nxt = cursor.next_start
    if nxt is None:
        nxt = max(partitions_start, (now - initial_lookback).floor(PARTITION_FREQ))
    scan_from = max(partitions_start, min(nxt, (now - lookback).floor(PARTITION_FREQ)))
    if hasattr(source, "version") is False:
        scan_from = nxt  # nothing can be replaced: only the new partitions
    versions = dict(cursor.versions)
    requests: list[Request] = []
    waiting: list[tuple[pd.Timestamp, list[str]]] = []  # not-ready partitions at/after `nxt`, oldest first
    t = scan_from
    while t <= last_closed and len(requests) < max_requests:
        key = partition_key(t)
        ver, late = judge(source, t, now, grace)
        if ver is None:
            if t >= nxt:
                waiting.append((t, late))
        elif (t >= nxt or key in versions) and _rerun(versions.get(key), ver):
            # before `nxt` only a partition that ran with another version is requested again: one
            # without a record never ran (a fresh cursor starts `initial_lookback` back, not
            # `lookback`) or ran before the records kept
            requests.append(Request(key, ver))
            versions[key] = ver
        t += PARTITION
    keep = int(lookback / PARTITION) + 1
    kept = dict(sorted(versions.items())[-keep:])
    cut = min(kept) if len(versions) > keep else None  # the oldest record kept (keys sort as their times)
    passed = [w for w in waiting if cut is not None and partition_key(w[0]) < cut]
    waiting = [w for w in waiting if cut is None or partition_key(w[0]) >= cut]
    new_next = waiting[0][0] if waiting else max(t, nxt)
    passed_over = cursor.passed_over
    if passed:
        start, late = passed[-1]
        passed_over = {"partition": partition_key(start), "sources": late,
                       "reason": f"not ready while {keep} later partitions ran: passed over, never requested"}
    report = _waiting(source, *waiting[0]) if waiting else None
    return requests, SensorCursor(new_next, kept, report, passed_over)

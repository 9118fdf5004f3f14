"""At-least-once delivery: rows re-sent (the tail of the file before at the head of this one, a job described
again, a job's ending delivered twice) are dropped and counted, never rejected; the other rows outside their file's
partition are rejected one by one, or quarantine the file when they are most of it."""

import numpy as np
import pandas as pd

from gpu_health.contracts.models import CONTRACTS, PARTITION_COLUMN
from gpu_health.contracts.precheck import _Kept
from gpu_health.contracts.rejects import ContractViolation, _violation_reject
from gpu_health.contracts.timestamps import MISPLACED_SHARE, _check_window, _misplaced_rejects


# The event a job ends with (contracts.md: scheduler_events.event). A job ends once: a requeued job is re-opened by
# ``requeued`` (or ``started``) before it can end again, so an ``ended`` that follows the job's ``ended`` is the
# same ending delivered again (with a new event_id by a scheduler that mints one per delivery).
TERMINAL_EVENTS = ("ended",)


def _key_columns(source: str) -> list[str]:
    """The columns that identify a row of ``source`` (its contract's unique key), as the warehouse keys it."""
    schema = CONTRACTS[source].to_schema()
    return list(schema.unique or []) or [n for n, c in schema.columns.items() if c.unique]


def _read_rows(kept: list[_Kept], columns: list[str]) -> pd.DataFrame:
    """``columns`` of every row kept so far, with its file's partition start (``_part``, ns), its entry in ``kept``
    (``_entry``), its position there (``_pos``) and whether it lies inside its file's partition (``_inside``)."""
    parts = []
    for i, k in enumerate(kept):
        n = len(k.frame)
        part = np.repeat(np.array([p.value for p in k.partitions], dtype=np.int64), k.lengths)
        parts.append(k.frame[columns].reset_index(drop=True).assign(
            _part=part, _entry=i, _pos=np.arange(n), _inside=~k.outside if k.outside is not None else True))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=[*columns, "_part", "_entry", "_pos", "_inside"])


def _redelivered(kept: list[_Kept], source: str, history) -> pd.DataFrame:
    """The rows of ``kept`` that repeat what is already stored or read earlier (``_entry``, ``_pos``):

    * a row outside its file's partition whose key (:func:`_key_columns`) a stored row or a row of an earlier
      partition's file holds: the tail of the file before, re-sent at the head of this one;
    * ``job_metadata``: a job already described (one row per job: the first stored wins), whatever partition
      re-sends it;
    * ``scheduler_events``: a :data:`TERMINAL_EVENTS` event of a job whose previous event is one (stored or read
      earlier), under whatever event_id.
    """
    none = pd.DataFrame({"_entry": pd.Series(dtype="int64"), "_pos": pd.Series(dtype="int64")})
    key = _key_columns(source)
    by_job = source in ("job_metadata", "scheduler_events")
    if not key or not kept or not (by_job or any(k.outside is not None for k in kept)):
        return none
    found = []
    if source == "scheduler_events":
        cols = ["job_id", "ts", "event"]
        read = _read_rows(kept, cols)
        stored = history(cols) if history is not None else None
        if stored is not None and len(stored):
            stored = stored[cols].assign(_part=np.iinfo(np.int64).min, _entry=-1, _pos=-1, _inside=True)
            read = pd.concat([stored, read], ignore_index=True)
        read = read.sort_values(["job_id", "ts", "_part", "_entry", "_pos"], kind="stable")
        terminal = read["event"].isin(TERMINAL_EVENTS)
        again = terminal & terminal.groupby(read["job_id"], sort=False).shift(1, fill_value=False).astype(bool)
        found.append(read.loc[again & (read["_entry"] >= 0), ["_entry", "_pos"]])
    if source == "job_metadata":
        key = ["job_id"]
    if by_job or any(k.outside is not None for k in kept):
        read = _read_rows(kept, key)
        candidates = (read if source == "job_metadata" else read[~read["_inside"].astype(bool)])
        earlier = read.loc[read["_inside"].astype(bool), [*key, "_part"]]
        # (the stored keys only matter to rows that may repeat one: none, and nothing is read)
        stored = history(key) if history is not None and len(candidates) else None
        if stored is not None and len(stored):
            earlier = pd.concat([stored[key].assign(_part=np.iinfo(np.int64).min), earlier], ignore_index=True)
        hit = candidates[[*key, "_part", "_entry", "_pos"]].merge(earlier, on=key, suffixes=("", "_before"))
        found.append(hit.loc[hit["_part_before"] < hit["_part"], ["_entry", "_pos"]])
    found = [f for f in found if len(f)]
    return pd.concat(found, ignore_index=True).drop_duplicates() if found else none


def _settle_redeliveries(kept: list[_Kept], source: str, history, quarantined: list) -> tuple[list[_Kept], list, int]:
    """Drop the re-delivered rows (:func:`_redelivered`), reject the other rows outside their file's partition one
    by one, or quarantine the file (appended to ``quarantined``) when they are most of it
    (:data:`~gpu_health.contracts.timestamps.MISPLACED_SHARE`).
    Returns the entries to validate, the frames of row rejects and the count of rows dropped as duplicates."""
    again = _redelivered(kept, source, history)
    if not len(again) and all(k.outside is None for k in kept):
        return kept, [], 0
    dup_of = {e: g["_pos"].to_numpy() for e, g in again.groupby("_entry")}
    out, rejects, duplicates = [], [], 0
    col = PARTITION_COLUMN.get(source)
    for i, k in enumerate(kept):
        if i not in dup_of and k.outside is None:
            out.append(k)
            continue
        dup = np.zeros(len(k.frame), dtype=bool)
        dup[dup_of.get(i, [])] = True
        pieces = k.per_file()
        bounds = np.concatenate([[0], np.cumsum(k.lengths)]).astype(np.int64)
        for j, one in enumerate(pieces):
            d = dup[bounds[j]:bounds[j + 1]]
            o = k.outside if k.outside is not None else np.zeros(len(d), dtype=bool)
            misplaced = o & ~d
            f, frame = one.file, one.frame
            # misplaced: most of its own rows belong elsewhere, or it holds none of its partition's (a copy of an
            # earlier file under a later name: landed as duplicates, its partition would read "nothing happened")
            if misplaced.sum() > MISPLACED_SHARE * (len(frame) - d.sum()) or (len(frame) and o.all()):
                try:
                    _check_window(frame[~d] if misplaced.any() else frame, source, f.origin,
                                  pd.Timestamp(f.start), pd.Timestamp(f.end))
                except ContractViolation as v:
                    quarantined.append(_violation_reject(source, f, v))
                continue
            duplicates += int(d.sum())
            if misplaced.any():
                rejects.append(_misplaced_rejects(frame, misplaced, source, f, col))
            keep = ~(d | misplaced)
            one.frame = frame[keep].reset_index(drop=True)
            one.lengths = np.array([int(keep.sum())], dtype=np.int64)
            one.rows = np.flatnonzero(keep).astype(np.int64)
            out.append(one)
    return out, rejects, duplicates

"""Judge a frame against its contract: fail the table, or quarantine the rows.

Two kinds of breakage, handled differently (contracts.md):

* **Table-level** -- the file as a whole is wrong: unreadable, a missing
  column, a column whose type cannot be coerced, naive timestamps, or
  timestamps outside the partition being read. Whatever rows we kept from it
  would be wrong, so :class:`ContractViolation` names the origin (file / URL),
  the column and up to five example values. Read file by file
  (:func:`validate_files`), such a file is **quarantined whole**: one reject
  row (``row_index`` = :data:`WHOLE_FILE`) carries its path and reason, its
  partition lands no rows, and every other file of the range lands as if it
  had been read alone. The blast radius of a bad file is its own partition.
* **Row-level** -- some rows break a rule (null in a required field, negative
  counter, percentage above 100, ``+-inf``, text over its bound, unknown enum
  value, duplicate key, DCGM "not supported" sentinel in a required field
  ...). Those rows go to the rejects table with their reason and the good
  rows go on.

An **extra column** is schema evolution, not corruption (exporters add fields
with new versions): it is dropped, named in ``Validated.dropped_columns``, and
the rows land.

Rejects are keyed by the partition of the file they came from and the row
number within that file, so re-running a partition replaces exactly its rejects.

DCGM sentinels in *optional* fields become null first: absence is not a zero
reading, and not a reason to reject the row either.

This module is the entry point (:func:`validate_frame`, :func:`validate_files`); the checks live by concern in
:mod:`~gpu_health.contracts.precheck` (table-level, per file), :mod:`~gpu_health.contracts.timestamps` (time
faults), :mod:`~gpu_health.contracts.rows` (row-level), :mod:`~gpu_health.contracts.passes` (the fast verdict on a
clean frame), :mod:`~gpu_health.contracts.redelivery` (re-sent rows) and :mod:`~gpu_health.contracts.rejects`
(what a reject looks like).
"""

import numpy as np
import pandas as pd
from pandera.errors import SchemaError, SchemaErrors

from gpu_health.contracts.models import CONTRACTS, empty_frame
from gpu_health.contracts.passes import ELEMENTWISE_BUILTINS, _distinct_text, passes_contract, text_codes
from gpu_health.contracts.precheck import (
    FileBatch,
    _check_columns,
    _empty_contract_frame,
    _Kept,
    _precheck_batch,
    _precheck_file,
    precheck,
)
from gpu_health.contracts.redelivery import TERMINAL_EVENTS, _settle_redeliveries
from gpu_health.contracts.rejects import (
    MAX_EXAMPLES,
    OUTSIDE_PARTITION,
    REJECT_COLUMNS,
    REJECT_VALUE_CHARS,
    WHOLE_FILE,
    ContractViolation,
    PerFile,
    Validated,
    _distinct_origins,
    _file_reject,
    _label,
    _no_failures,
    _rejects_frame,
    _violation_reject,
    empty_rejects,
)
from gpu_health.contracts.rows import WRONG_TYPE_SHARE, _check_types, _check_values, _null_sentinels, _pandera_failures
from gpu_health.contracts.timestamps import (
    MISPLACED_SHARE,
    _check_window,
    _floor_minutes,
    _normalise_timestamps,
    _timestamp_columns,
)

# the validation API, importable from this entry point whichever module below defines each name
__all__ = ["ELEMENTWISE_BUILTINS", "MAX_EXAMPLES", "MISPLACED_SHARE", "OUTSIDE_PARTITION", "REJECT_COLUMNS",
           "REJECT_VALUE_CHARS", "TERMINAL_EVENTS", "WHOLE_FILE", "WRONG_TYPE_SHARE", "ContractViolation", "FileBatch",
           "PerFile", "Validated", "empty_rejects", "passes_contract", "precheck", "strip_region", "text_codes",
           "validate_files", "validate_frame"]


def _default_index(df: pd.DataFrame) -> bool:
    idx = df.index
    return isinstance(idx, pd.RangeIndex) and idx.start == 0 and idx.step == 1


def strip_region(df: pd.DataFrame, distinct: dict | None, codes: dict | None) -> tuple[pd.DataFrame, dict | None, dict | None]:
    """``df`` with its ``region`` labels stripped of surrounding whitespace (``'us-east '`` is ``'us-east'``),
    and ``distinct`` / ``codes`` without the column when it changed (they are recomputed from the new values).

    A region label is an identifier (cloud and Slurm region names are letters, digits and dashes): whitespace
    around it is a typo in a collector's configuration, never a second region, and kept it would split one
    region's GPUs into a phantom region paid and priced apart. Case is not folded here: which spelling is the
    region's is Finance's list to say (cost_capacity), and a region x SKU it does not price is ticketed naming
    the priced spelling (gpu_health.diagnosis.inventory)."""
    if "region" not in df.columns:
        return df, distinct, codes
    uniq = distinct["region"] if distinct and "region" in distinct else _distinct_text(df["region"])
    if not any(isinstance(u, str) and u != u.strip() for u in uniq):
        return df, distinct, codes
    df["region"] = df["region"].str.strip()
    distinct = {k: v for k, v in (distinct or {}).items() if k != "region"}
    codes = {k: v for k, v in (codes or {}).items() if k != "region"}
    return df, distinct, codes


def validate_frame(df: pd.DataFrame, source: str, *, start=None, end=None, origin="<frame>",
                   partition=None, row_number=None, owned: bool = False, distinct: dict | None = None,
                   codes: dict | None = None) -> Validated:
    """Validate ``df`` as contract table ``source`` read for partition ``[start, end)``.

    ``origin`` names where the rows came from: one string, or one per row (when
    files were concatenated). ``partition`` and ``row_number`` (one per row, optional)
    key each reject by the partition of its file and its row within that file;
    without them a reject is filed under ``start`` with its position in ``df``.
    Returns the coerced good rows and the rejects; raises
    :class:`ContractViolation` on a table-level break. ``owned``: the caller hands
    ``df`` over (nobody else holds it), so clean rows may be returned without a copy.
    ``distinct``: per text column, values that include all of its non-null ones
    (see :func:`passes_contract`), so the text rules need not hash the column.
    ``codes``: per text column, ``(codes, na_code)`` for the rows of ``df`` as given
    (see :func:`passes_contract`).
    """
    model = CONTRACTS[source]
    schema = model.to_schema()
    # a shallow copy: every step below replaces whole columns, never writes into the caller's arrays
    df = df.reset_index(drop=True) if not _default_index(df) else df.copy(deep=False)
    per_row = not isinstance(origin, str)
    origins = (origin if isinstance(origin, PerFile) else np.asarray(origin, dtype=object)) if per_row else None
    label = _label(origins) if per_row else origin
    extra = _check_columns(df, schema, source, label)
    dropped = {c: sorted({str(o) for o in _distinct_origins(origins)}) if per_row else [label] for c in extra}
    if list(df.columns) != list(schema.columns):
        df = df[list(schema.columns)]
    df = _floor_minutes(_normalise_timestamps(df, _timestamp_columns(schema), source, label), source)
    start = pd.Timestamp(start) if start is not None else None
    end = pd.Timestamp(end) if end is not None else None
    _check_window(df, source, label, start, end)
    origin = origins if per_row else origin
    df, nulled, sentinel_rejects = _null_sentinels(df, source)
    df, type_rejects = _check_types(df, schema, source, label)
    df, distinct, codes = strip_region(df, distinct, codes)
    distinct, codes = text_codes(df, distinct, codes)
    value_rejects = _check_values(df, schema, distinct)
    # rows already condemned stay out of pandera: their values would break its coercion
    marked = [m for m in (sentinel_rejects, type_rejects, value_rejects) if not m.empty]
    premarked = pd.concat(marked, ignore_index=True) if marked else _no_failures()
    found, valid = _pandera_failures(df.drop(index=pd.Index(premarked["row_index"].unique())) if len(premarked) else df,
                                     model, source, label, distinct, None if len(premarked) else codes)
    parts = [f for f in (premarked, found) if not f.empty]
    failures = pd.concat(parts, ignore_index=True) if parts else _no_failures()
    if not failures.empty or valid is None:
        good = df.drop(index=pd.Index(failures["row_index"].unique()))
        try:
            valid = good if passes_contract(good, schema, distinct) else model.validate(good, lazy=True)
        except (SchemaError, SchemaErrors) as err:  # a rule that only breaks once rows are gone
            raise ContractViolation(source, label, None, f"remaining rows still break the contract: {err}") from err
    rejects = _rejects_frame(df, failures, source, origin, start, partition, row_number)
    if valid is df and not owned:
        valid = valid.copy()  # the caller's arrays stay the caller's
    valid = valid if _default_index(valid) else valid.reset_index(drop=True)
    return Validated(valid=valid, rejects=rejects, sentinels_nulled=nulled, dropped_columns=dropped)


def validate_files(parts, source: str, *, start=None, end=None, history=None) -> Validated:
    """Validate the files of a window, each judged on its own partition; a bad file costs only its own.

    ``parts`` are :class:`~gpu_health.sources.base.Fetched`, one per file, each with
    the partition ``[start, end)`` it must hold (and ``unreadable`` set when it could
    not be parsed), or :class:`FileBatch` (several files read as one frame: judged as
    if they came one by one). A file that is unreadable, lacks a column, has a column of
    the wrong type, naive timestamps or rows outside its partition is quarantined
    whole (one :data:`WHOLE_FILE` reject naming the file and why; none of its rows
    land). The others are validated together in one pass (so a duplicate
    key across files is still seen); if that pass finds a table-level break only
    the concatenation shows, the files are judged one by one and the culprits
    quarantined. Extra columns are dropped and reported per file.

    Rows re-delivered (at-least-once delivery: :func:`~gpu_health.contracts.redelivery._redelivered`) are dropped
    and counted in ``duplicates_dropped``, never rejected. Of the other rows, those outside their file's partition
    are rejected one by one (``outside_partition``), unless they are most of the file (:data:`MISPLACED_SHARE`):
    then the file is misplaced and quarantined whole. ``history(columns)`` (optional) returns those columns of the
    rows of this table already stored before the window (what a re-sent row may repeat).
    """
    schema = CONTRACTS[source].to_schema()
    quarantined, kept, dropped = [], [], {}
    for item in parts:
        if isinstance(item, FileBatch):
            fast = _precheck_batch(item, source, schema)
            if fast is not None:
                frame, extra = fast
                for c in extra:
                    dropped.setdefault(c, []).extend(item.origins)
                kept.append(_Kept.of_batch(item, frame))
                continue
            files = item.files()
        else:
            files = [item]
        for f in files:
            if getattr(f, "ignored", None):
                quarantined.append(_file_reject(source, f, "stray_file", None, f.ignored, None))
                continue
            if getattr(f, "unreadable", None):
                quarantined.append(_file_reject(source, f, "unreadable_file", None, f.unreadable, None))
                continue
            if _empty_contract_frame(f.frame, source):
                kept.append(_Kept.of_file(f, f.frame))
                continue
            try:
                frame, extra, outside = _precheck_file(f.frame, source, start=f.start, end=f.end, origin=f.origin)
            except ContractViolation as v:
                quarantined.append(_violation_reject(source, f, v))
                continue
            for c in extra:
                dropped.setdefault(c, []).append(f.origin)
            k = _Kept.of_file(f, frame)
            k.outside = outside
            kept.append(k)
    kept, misplaced, duplicates = _settle_redeliveries(kept, source, history, quarantined)
    try:
        result = _validate_kept(kept, source, start, end)
    except ContractViolation:
        alone = []
        for k in [one for k in kept for one in k.per_file()]:
            f = k.file
            try:
                _validate_kept([k], source, f.start, f.end)
                alone.append(k)
            except ContractViolation as v:
                quarantined.append(_violation_reject(source, f, v))
        result = _validate_kept(alone, source, start, end)
    files = pd.DataFrame(quarantined, columns=REJECT_COLUMNS) if quarantined else empty_rejects()
    if len(files):
        files["partition_start"] = pd.to_datetime(files["partition_start"], utc=True)
        files["row_index"] = files["row_index"].astype("int64")
    frames = [r for r in (files, *misplaced, result.rejects) if len(r)]
    rejects = pd.concat(frames, ignore_index=True) if len(frames) > 1 else (frames[0] if frames else empty_rejects())
    return Validated(valid=result.valid, rejects=rejects, sentinels_nulled=result.sentinels_nulled, dropped_columns=dropped,
                     duplicates_dropped=duplicates)


def _validate_kept(kept: list[_Kept], source: str, start, end) -> Validated:
    """One validation pass over the files that passed their precheck, rejects keyed by file partition and row."""
    if not kept:
        return Validated(valid=empty_frame(source), rejects=empty_rejects())
    lengths = np.concatenate([k.lengths for k in kept])
    codes = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    origins = PerFile([o for k in kept for o in k.origins], codes)
    partition = PerFile([p for k in kept for p in k.partitions], codes)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    row_number = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(offsets, lengths)
    if any(k.rows is not None for k in kept):  # files some rows were dropped from: each row keeps its number
        row_number = np.concatenate([k.rows if k.rows is not None else row_number[o:o + int(k.lengths.sum())]
                                     for k, o in zip(kept, np.concatenate([[0], np.cumsum([int(k.lengths.sum()) for k in kept])[:-1]]))])
    non_empty = [k for k in kept if len(k.frame)] or [kept[0]]
    frame = pd.concat([k.frame for k in non_empty], ignore_index=True) if len(non_empty) > 1 else non_empty[0].frame
    distinct = non_empty[0].distinct if len(non_empty) == 1 else None
    codes = non_empty[0].codes if len(non_empty) == 1 else None
    return validate_frame(frame, source, start=start, end=end, origin=origins, partition=partition, row_number=row_number,
                          owned=True, distinct=distinct, codes=codes)

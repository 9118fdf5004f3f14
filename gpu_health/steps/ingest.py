"""The source steps: read a window of a contract table from the configured source, judge it, store it.

Rows that break the contract go to ``source_rejects`` (keyed by source, file partition and row), partitions a live
producer left silent to ``source_gaps``; the good rows go to the table. A range is read a day at a time so a
week-long backfill never holds a week in memory.

Blast radius: the severity of a bad input is judged per partition, never per run. A partition losing more than
:data:`ERROR_REJECT_SHARE` of its rows is quarantined whole (:func:`quarantine_over_share`): its minutes are missing
data, as a file that could not be read at all, and every other partition of the range lands. So the same file is
judged the same in a 5-minute run, an hour or a day, on the Dagster path as on the bulk path (both run this step).
The daily and calendar inputs never block the 5-minute partitions: a ``cost_capacity`` day not arrived is
quarantined like an unreadable one (its money columns stay null), and a calendar that cannot be read keeps the
last good stored one (:func:`ingest`).
"""

import json

import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.contracts import FIVE_MINUTE_SOURCES, PARTITION_COLUMN, empty_frame
from gpu_health.contracts.validate import OUTSIDE_PARTITION, WHOLE_FILE, Validated, validate_files
from gpu_health.landing import DAILY_SOURCES
from gpu_health.sources.base import DataNotReady, Fetched
from gpu_health.sources.gaps import empty_gaps
from gpu_health.sources.read import read_window
from gpu_health.steps.graph import StepResult

CHUNK = pd.Timedelta(days=1)
# Above this share of a partition's rows rejected, the rows that did land would give wrong numbers downstream (a
# loss tree, a blended price, a KPI computed over a sample the contract chose, not the cluster): the partition is
# then missing data for its minutes. Below it the rejects are rows a reader can see in source_rejects and each
# rejected GPU-minute is already no_data. A share, not a count: it holds for any cluster size and partition length.
ERROR_REJECT_SHARE = 0.05
REJECT_SHARE_CHECK = "file:reject_share"


def chunks(start: pd.Timestamp | None, end: pd.Timestamp | None):
    if start is None:
        yield None, None
        return
    t = start
    while t < end:
        yield t, min(t + CHUNK, end)
        t = t + CHUNK


def _stored_before(wh, table: str, start, c_start, lookback, earlier: list):
    """``history(columns)`` for :func:`~gpu_health.contracts.validate.validate_files`: those columns of the rows of
    ``table`` already there before the chunk ``c_start``: stored before the step's window (up to ``lookback``
    back), or validated in the step's earlier chunks (``earlier``: stored only once the step ends)."""
    col = PARTITION_COLUMN[table]

    def history(columns: list[str]) -> pd.DataFrame:
        parts = [wh.read_window(table, start - lookback, start, columns=columns)]
        parts += [f.loc[(f[col] >= c_start - lookback) & (f[col] < c_start), columns] for f in earlier if len(f)]
        parts = [p for p in parts if len(p)]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    return history


def _home(frame: pd.DataFrame, table: str) -> pd.Series:
    """Each row's partition (UTC): its partition column floored to the table's grain."""
    col = PARTITION_COLUMN.get(table)
    if col is None or col not in frame.columns or not len(frame):
        return pd.Series(pd.NaT, index=frame.index, dtype="datetime64[ns, UTC]")
    if table in DAILY_SOURCES:
        return pd.to_datetime(frame[col].astype(str), utc=True, errors="coerce").dt.normalize()
    return pd.to_datetime(frame[col], utc=True).dt.floor(PARTITION)


def quarantine_over_share(v: Validated, table: str) -> tuple[Validated, pd.DataFrame]:
    """``v`` with each partition that lost more than :data:`ERROR_REJECT_SHARE` of its rows quarantined whole (its
    good rows dropped, one :data:`~gpu_health.contracts.validate.WHOLE_FILE` reject naming the file, the share and
    an example column and value), and the share of every partition with a reject: ``partition_start``, ``origin``,
    ``accepted``, ``rejected``, ``share``, ``quarantined``. The rows' own rejects are kept (they say what is wrong)."""
    cols = ["partition_start", "origin", "accepted", "rejected", "share", "quarantined"]
    # rows a file holds for another partition (a node's clock off) are not this partition's rows: its own
    # minutes are whole without them, so they are rejected as rows and never count against the partition
    rows = v.row_rejects
    rows = rows[rows["check"] != OUTSIDE_PARTITION] if len(rows) else rows
    if not len(rows):
        return v, pd.DataFrame(columns=cols)
    rows = rows.drop_duplicates(["origin", "partition_start", "row_index"]).assign(
        partition_start=pd.to_datetime(rows["partition_start"], utc=True))
    home = _home(v.valid, table)
    accepted = home.value_counts()
    out = []
    for p, grp in rows.groupby("partition_start", sort=True):
        n_ok = int(accepted.get(p, 0))
        share = len(grp) / (len(grp) + n_ok)
        out.append({"partition_start": p, "origin": str(grp["origin"].value_counts().index[0]), "accepted": n_ok,
                    "rejected": len(grp), "share": round(share, 6), "quarantined": share > ERROR_REJECT_SHARE})
    shares = pd.DataFrame(out, columns=cols)
    over = shares[shares["quarantined"]]
    if not len(over):
        return v, shares
    whole = []
    for r in over.itertuples():
        grp = rows[rows["partition_start"] == r.partition_start]
        top = grp["column"].astype(str).value_counts().index[0]
        ex = grp[grp["column"].astype(str) == top].head(3)
        values = [str(x) for x in ex["value"]]
        whole.append({"source": table, "partition_start": r.partition_start, "origin": r.origin, "row_index": WHOLE_FILE,
                      "column": top, "check": REJECT_SHARE_CHECK, "value": json.dumps(values),
                      "reason": f"{r.origin}: {r.rejected} of {r.rejected + r.accepted} rows rejected ({r.share:.1%}, "
                                f"over the {ERROR_REJECT_SHARE:.0%} a partition may lose and still give right numbers), "
                                f"e.g. {top} = {', '.join(values)} ({ex['reason'].iloc[0]}): the partition is quarantined "
                                f"whole, missing data for its minutes",
                      "row_json": json.dumps({"file": r.origin, "rows": int(r.rejected + r.accepted),
                                              "quarantined": "whole partition: its rows were not used"})})
    whole = pd.DataFrame(whole, columns=v.rejects.columns).astype({"row_index": "int64"})
    keep = ~home.isin(set(over["partition_start"])).to_numpy()
    valid = v.valid[keep].reset_index(drop=True) if not keep.all() else v.valid
    rejects = pd.concat([v.rejects.assign(partition_start=pd.to_datetime(v.rejects["partition_start"], utc=True)), whole],
                        ignore_index=True)
    return Validated(valid=valid, rejects=rejects, sentinels_nulled=v.sentinels_nulled,
                     dropped_columns=v.dropped_columns), shares


def _not_arrived(source, table: str, start, end) -> Validated:
    """A daily file that has not arrived, judged as a file that cannot be read: its day is quarantined whole
    (missing data: the day's money columns stay null), so the 5-minute partitions do not wait for Finance."""
    root = getattr(source, "root", None)
    if root is not None:
        from gpu_health.landing import partition_path

        origin = str(partition_path(root, table, start))
    else:
        origin = f"{getattr(source, 'name', 'source')}: {table} {start:%Y-%m-%d}"
    reason = f"{origin}: not arrived; the day's money columns are missing data until it lands and the day re-runs"
    return validate_files([Fetched(empty_frame(table), origin, start, end, unreadable=reason)], table, start=start, end=end)


def ingest(wh, source, table: str, start, end, *, lookback: pd.Timedelta | None = None) -> StepResult:
    """Read ``table`` for ``[start, end)`` (the whole table when ``start`` is None) from ``source``, store its valid
    rows, its rejects and its missing partitions. ``findings``: ``rejects`` (every reject row), ``dropped_columns``
    (column -> files), ``quarantined`` (files and partitions quarantined whole, for warnings), ``gaps``,
    ``partitions`` (the reject share of each partition with a reject: :func:`quarantine_over_share`), and for the
    calendar ``calendar_kept`` (why the stored calendar was kept, or None); ``metadata``: counts.

    The calendar (``maintenance_windows``) is read whole: an empty one would turn planned maintenance into pages, so
    when its file is absent or quarantined whole the stored calendar stays as it was (the last good one), the
    file's reject is recorded and ``calendar_kept`` says why.

    ``lookback``: how far back a file's re-delivered rows are looked up among the rows already stored (the step's
    declared read of its own table); re-deliveries are dropped and counted (``duplicates_dropped``)."""
    start = None if start is None else pd.Timestamp(start)
    end = None if end is None else pd.Timestamp(end)
    valid, rejects, missing, quarantined, shares, nulled, dropped, duplicates = [], [], [], [], [], 0, {}, 0
    for c_start, c_end in chunks(start, end):
        history = None if c_start is None or lookback is None else _stored_before(wh, table, start, c_start, lookback, list(valid))
        try:
            v, gaps = read_window(source, table, c_start, c_end, history=history)
        except DataNotReady:
            if table not in DAILY_SOURCES or c_start is None:
                raise
            v, gaps = _not_arrived(source, table, c_start, c_end), empty_gaps()
        duplicates += v.duplicates_dropped
        v, share = quarantine_over_share(v, table)
        files = v.files_quarantined
        if start is None and len(files):
            return _keep_calendar(wh, table, v, files)
        quarantined.append(files)
        shares.append(share)
        for col, origins in v.dropped_columns.items():
            dropped.setdefault(col, []).extend(origins)
        valid.append(v.valid)
        rejects.append(v.rejects)
        nulled += v.sentinels_nulled
        wh.replace_window("source_rejects", v.rejects, c_start, c_end, where={"source": table})
        if c_start is not None and table in FIVE_MINUTE_SOURCES:
            wh.replace_window("source_gaps", gaps, c_start, c_end, where={"source": table})
        missing.append(gaps)
    frame = pd.concat(valid, ignore_index=True) if len(valid) > 1 else valid[0]
    wh.replace_window(table, frame, start, end)
    gaps = pd.concat(missing, ignore_index=True)
    return StepResult(
        {table: frame},
        metadata={"rows": len(frame), "dcgm_sentinels_nulled": nulled, "duplicates_dropped": duplicates, "missing_data_partitions": len(gaps),
                  "missing_family": ", ".join(sorted(set(gaps["missing_family"]))) if len(gaps) else ""},
        findings={"rejects": pd.concat(rejects, ignore_index=True), "dropped_columns": dropped,
                  "quarantined": pd.concat(quarantined, ignore_index=True), "gaps": gaps,
                  "partitions": pd.concat(shares, ignore_index=True), "calendar_kept": None})


def _keep_calendar(wh, table: str, v: Validated, files: pd.DataFrame) -> StepResult:
    """The calendar file absent or quarantined whole: its reject is stored, the stored calendar kept (never wiped:
    an empty calendar turns every node in a planned window into ``hw_unavailable`` and a hardware ticket)."""
    wh.replace_window("source_rejects", v.rejects, None, None, where={"source": table})
    kept = wh.read_window(table)
    f = files.iloc[0]
    note = f"{f['reason']}; the last good stored calendar ({len(kept)} window(s)) is kept"  # the reason names the file
    return StepResult(
        {table: kept},
        metadata={"rows": len(kept), "dcgm_sentinels_nulled": 0, "duplicates_dropped": 0, "missing_data_partitions": 0,
                  "missing_family": "",
                  "calendar_kept": note},
        findings={"rejects": v.rejects, "dropped_columns": v.dropped_columns, "quarantined": files,
                  "gaps": empty_gaps(), "partitions": pd.DataFrame(), "calendar_kept": note})

"""The columnar telemetry store: the tables the catalogue stores columnar (the minute-grain telemetry, the event
sources, the loss tree's per-node facts, the node inventory and the per-partition baselines: what grows with the
fleet) as Parquet, a file per 5-minute partition until its hour is complete, then one file per hour.

Layout (Hive-style partitions, so DuckDB, Spark, Trino and ClickHouse read it as it is)::

    <telemetry_dir>/<table>/date=YYYY-MM-DD/<HH>.parquet      # a complete hour: its 12 partitions, HH = hour (UTC)
    <telemetry_dir>/<table>/date=YYYY-MM-DD/<HHMM>.parquet    # a partition of an hour not yet complete, HHMM = start

Rules:

* **The partition is the unit of replacement; the hour is the unit of storage.** A write of ``[start, end)``
  replaces every 5-minute partition the window covers. While an hour has partitions never written, each written
  partition is its own file (a partition with no rows still gets one: zero rows, full schema, so "nothing was
  reported" differs from "never written"). The write that leaves all 12 partitions of an hour written stores the
  hour as one file, and then deletes the hour's partition files; later writes into that hour
  (late data, a re-run) rewrite the hour file, keeping its rows outside the window. A bulk write of whole hours
  writes hour files directly. An hour file means all 12 of its partitions were written.
* **Why an hour:** Parquet stores a dictionary and statistics per column chunk and a footer per file, so a 5-minute
  file paid for every GPU's UUID, node and job id, and every distinct reading, once per 5 minutes; an hour file pays
  once per hour, a ratio that does not depend on the cluster's size (a file holds 5 or 60 rows per entity whatever
  the number of entities), which shrinks the minute-grain tables by about a third. Not a
  day: a late partition rewrites its whole file, so an hour bounds that rewrite (and the one compaction per hour of
  the live path) to an hour of rows.
* **Atomic.** Each file is written to a hidden temporary name in its own folder (``.HH.parquet.<pid>.<thread>.tmp``,
  which Hive-style readers skip) and renamed over the old one: a reader sees the old file or the new one, never half
  a file. An hour file is renamed into place before the hour's partition files are deleted, and readers take an
  hour's file over its partition files, checking after listing that no hour file appeared meanwhile (and listing
  again if one did, or if a listed file vanished), so a reader sees every row once, never twice, never none. Writers
  of one table take an exclusive lock (``<table>/.lock``) for the whole window, so two runs racing over the same
  partitions leave one run's rows, whole.
* **A window not aligned to 5 minutes** replaces only its minutes: the rows of the partitions it cuts that lie
  outside the window are kept (a cut partition that was never written gets a file holding only the window's rows).
  A row outside the window it is written for is refused (ValueError): it would overwrite a partition nobody asked to
  replace.
* **Schemas derive from the table catalogue** (:func:`gpu_health.storage.schema.arrow_schema`); within a file rows
  are sorted by the table's key with the partition column last (each entity's rows together, in time order: they
  compress better, see :func:`_in_file_order`), and compressed with zstd.
* **Reads** return what the SQL warehouse returned for the same table: ``datetime64[ns, UTC]`` timestamps,
  ``int64`` / nullable ``Int64`` integers, ``float64``, ``bool``, and the ``string`` dtype for text; rows in key
  order (time first).

A store written before hours were compacted (5-minute files only) reads as it is: its hours are compacted when
next written.

Why Parquet files and not a DuckDB database file: a DuckDB file takes one writer process, and Dagster runs
partitions in several processes (stack-notes.md); files have no shared writer at all.
"""

import contextlib
import fcntl
import functools
import os
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import sqlalchemy as sa

from gpu_health.arrow_text import text_values
from gpu_health.codes import factorize
from gpu_health.constants import PARTITION
from gpu_health.storage.schema import COLUMNAR_TABLES, arrow_schema, grain, metadata, partition_column

# The pipeline's partition width (gpu_health.constants.PARTITION): the unit a write replaces.
_PARTITION_US = PARTITION // pd.Timedelta(microseconds=1)
# The span of a complete file (see "Why an hour"): a whole number of partitions, never straddling a date folder.
HOUR = pd.Timedelta(hours=1)
_HOUR_US = HOUR // pd.Timedelta(microseconds=1)
_PER_HOUR = HOUR // PARTITION
# A reader lists again when a file it listed was compacted away meanwhile; compaction happens once an hour per table,
# so a second listing normally succeeds: the bound only turns a pathological livelock into an error.
_READ_ATTEMPTS = 5
# zstd at Arrow's default level: on a simulated hour of the default cluster, levels 3 and 9 saved under 2 % of the
# bytes; what remains once an hour shares the dictionaries is noise in the readings.
COMPRESSION = "zstd"


# The file at a store's root naming the warehouse whose store it is (TelemetryStore's ``owner``).
OWNER_FILE = ".warehouse"


class StoreOwnedElsewhere(ValueError):
    """The telemetry store belongs to another warehouse (a configuration error: never retried)."""


class TelemetryStore:
    """The Parquet files of the columnar tables under ``root`` (created on first write).

    ``owner``: the warehouse this store belongs to (:func:`warehouse_identity`; None: not checked). Its first write
    records the owner in ``<root>/.warehouse``; a store recorded for another warehouse refuses reads and writes
    (:class:`StoreOwnedElsewhere`). Why: a warehouse's minute-grain tables live only here, so two warehouses given one
    store (two PostgreSQL databases on the default ``var/telemetry/``, a scratch run beside production, a
    ``--telemetry-dir`` copied between configurations) would silently overwrite each other's rows and read them as
    their own. A store written before owners were recorded is claimed by its next writer.
    """

    def __init__(self, root: str | Path, *, owner: str | None = None):
        self.root = Path(root)
        self.owner = owner
        self._claimed = owner is None

    def _claim(self, *, writing: bool) -> None:
        """Check (and on a first write, record) that this store is ``owner``'s; once per instance."""
        if self._claimed:
            return
        marker = self.root / OWNER_FILE
        try:
            held = marker.read_text().strip()
        except FileNotFoundError:
            if not writing:  # nothing written by anyone yet (or a store from before owners): nothing to mix up
                return
            held = self._record_owner(marker)
        if held != self.owner:
            raise StoreOwnedElsewhere(
                f"the telemetry store {self.root} belongs to the warehouse {held} ({marker}), not to {self.owner}: two "
                "warehouses sharing one store overwrite each other's minute-grain tables. Give this warehouse a store "
                "of its own (--telemetry-dir, or GPU_HEALTH_TELEMETRY_DIR), or delete the file if that warehouse is "
                "gone for good.")
        self._claimed = True

    def _record_owner(self, marker: Path) -> str:
        """Write ``marker`` naming ``owner`` unless another writer got there first; the owner it then names.
        Linked into place from a whole temporary file: a racing reader never sees it half written."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f"{OWNER_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(self.owner + "\n")
        try:
            os.link(tmp, marker)
        except FileExistsError:
            return marker.read_text().strip()
        finally:
            tmp.unlink()
        return self.owner

    # --- layout -----------------------------------------------------------------------------
    def partition_path(self, table: str, start) -> Path:
        """The file of ``table``'s partition starting at ``start`` (a 5-minute boundary, UTC) while its hour is not
        complete (:meth:`hour_path` afterwards)."""
        start = _utc(start)
        if start != start.floor(PARTITION):
            raise ValueError(f"{table}: {start} is not a 5-minute partition start")
        return self.root / table / f"date={start:%Y-%m-%d}" / f"{start:%H%M}.parquet"

    def hour_path(self, table: str, start) -> Path:
        """The file of the complete hour holding ``start`` (UTC)."""
        hour = _utc(start).floor(HOUR)
        return self.root / table / f"date={hour:%Y-%m-%d}" / f"{hour:%H}.parquet"

    def partitions(self, table: str) -> list[pd.Timestamp]:
        """Start of every partition of ``table`` ever written (with rows or without), in time order."""
        out = []
        for path in self._files(table, None, None):
            start = _start_of(path)
            out += [start + i * PARTITION for i in range(_PER_HOUR)] if _is_hour(path) else [start]
        return out

    def _files(self, table: str, start, end) -> list[Path]:
        """The files holding the partitions overlapping ``[start, end)`` (either bound may be None), in time order:
        an hour's file if it has one, else its partition files. Listed until no hour file appeared while listing."""
        _known(table)
        self._claim(writing=False)
        lo = _utc(start) if start is not None else None
        hi = _utc(end) if end is not None else None
        for _ in range(_READ_ATTEMPTS):
            files = self._list(table, lo, hi)
            open_hours = {_start_of(p).floor(HOUR) for p in files if not _is_hour(p)}
            if not any(self.hour_path(table, h).exists() for h in open_hours):
                return files
        raise RuntimeError(f"{table}: hours kept being compacted while listing [{start}, {end})")

    def _list(self, table: str, lo, hi) -> list[Path]:
        if lo is None or hi is None:
            found = sorted((p for p in (self.root / table).glob("date=*/*.parquet")  # only the store's own names
                            if p.stem.isdigit() and len(p.stem) in (2, 4)), key=_start_of)
            hours = {_start_of(p) for p in found if _is_hour(p)}
            files = [p for p in found if _is_hour(p) or _start_of(p).floor(HOUR) not in hours]
            return [p for p in files if (lo is None or _start_of(p) + (HOUR if _is_hour(p) else PARTITION) > lo)
                    and (hi is None or _start_of(p) < hi)]
        # each date folder is listed once and the names are matched as strings: a week's look-back is 168 hours and
        # 2,016 partitions, each a path to build and stat otherwise (most of them in look-backs reaching before the
        # first written day, where a missing folder answers for a whole day)
        files = []
        lo_us, hi_us = _us(lo), _us(hi)
        day = lo.normalize()
        while day < hi:
            folder = self.root / table / f"date={day:%Y-%m-%d}"
            try:
                names = set(os.listdir(folder))
            except FileNotFoundError:
                names = set()
            day_us = _us(day)
            for h in range(24):
                h_us = day_us + h * _HOUR_US
                if h_us + _HOUR_US <= lo_us or h_us >= hi_us or not names:
                    continue
                if f"{h:02d}.parquet" in names:
                    files.append(folder / f"{h:02d}.parquet")
                    continue
                for i in range(_PER_HOUR):  # the partitions of the hour overlapping [lo, hi)
                    s_us = h_us + i * _PARTITION_US
                    minute = (i * _PARTITION_US) // 60_000_000
                    if s_us + _PARTITION_US > lo_us and s_us < hi_us and f"{h:02d}{minute:02d}.parquet" in names:
                        files.append(folder / f"{h:02d}{minute:02d}.parquet")
            day += pd.Timedelta(days=1)
        return files

    # --- writes -----------------------------------------------------------------------------
    def replace_window(self, table: str, frame: pd.DataFrame, start, end, *, column: str | None = None,
                       where: dict | None = None, order_out: list | None = None) -> int:
        """Replace ``table``'s rows whose partition column lies in ``[start, end)`` with ``frame``; returns its rows.
        ``order_out``: a list that receives the rows' positions in the order :meth:`read_window` returns them
        (by the table's key, time first)."""
        with self.staged({table: frame}, start, end, column=column, where=where, order_out=order_out) as staged:
            staged.publish()
        return len(frame)

    @contextmanager
    def staged(self, frames: dict[str, pd.DataFrame], start, end, *, column: str | None = None,
               where: dict | None = None, order_out: list | None = None):
        """Write the ``[start, end)`` window of every table in ``frames`` under hidden temporary names, and yield a
        :class:`Staged` whose ``publish()`` puts them in place; what is published stays only if the ``with`` block
        ends without an exception, otherwise every file is put back as it was.

        Rule: the store's part of a write that also commits SQL rows (the loss tree's five tables, two of them
        columnar) is staged before the SQL transaction, published inside it right before its commit, and rolled back
        if the commit fails, so the two stores commit together: a failure anywhere before the commit leaves every
        table as it was. (A process killed in the instant between the files' renames and the SQL commit would leave
        the new files beside the old SQL rows; the step's re-run rewrites both.) The tables are locked, in name
        order, from the staging to the end of the block. ``order_out`` receives one array per table, in
        ``frames``' order (see :meth:`replace_window`)."""
        names = list(frames)
        if not names:  # nothing columnar in this write (the SQL tables of a step)
            yield Staged()
            return
        self._claim(writing=True)
        for name in names:
            _known(name)
            col = partition_column(name)
            if column not in (None, col):
                raise ValueError(f"{name} is stored by {col!r}: a window on {column!r} cannot be replaced")
            if where:
                raise ValueError(f"{name} is stored columnar: replace whole windows (where={where!r} is not supported)")
            if start is None or end is None:
                raise ValueError(f"{name} is partitioned by {col!r}: a write needs a window [start, end)")
        start, end = _utc(start), _utc(end)
        if end <= start:
            raise ValueError(f"{', '.join(names)}: empty window [{start}, {end})")
        data = {name: self._sorted(name, frames[name], start, end, order_out) for name in names}
        staged = Staged()
        with contextlib.ExitStack() as locks:
            for name in sorted(names):
                locks.enter_context(self._lock(name))
            try:
                for name in names:
                    ts = data[name].column(partition_column(name)).cast(pa.int64()).to_numpy(zero_copy_only=False)
                    lo_us, hi_us = _us(start), _us(end)
                    for h in pd.date_range(start.floor(HOUR), end, freq=HOUR, inclusive="left"):
                        h_lo, h_hi = max(lo_us, _us(h)), min(hi_us, _us(h + HOUR))
                        i, j = np.searchsorted(ts, [h_lo, h_hi])
                        self._stage_hour(staged, name, h, data[name].slice(i, j - i), h_lo, h_hi)
                yield staged
            except BaseException:
                staged.rollback()
                raise
            else:
                staged.finish()
            finally:
                staged.discard()

    def _sorted(self, table: str, frame: pd.DataFrame, start, end, order_out: list | None) -> pa.Table:
        """``frame`` as Arrow in key order, refusing rows outside ``[start, end)``."""
        col = partition_column(table)
        data = to_arrow(frame, _schema(table), table, text_as_dictionary=True)
        ts = data.column(col).cast(pa.int64()).to_numpy(zero_copy_only=False)
        outside = (ts < _us(start)) | (ts >= _us(end))
        if outside.any():
            bad = pd.to_datetime(ts[outside][:5], unit="us", utc=True)
            raise ValueError(f"{table}: {int(outside.sum())} row(s) lie outside the window [{start}, {end}) they are "
                             f"written for (e.g. {', '.join(str(b) for b in bad)}); nothing was written")
        order = np.lexsort(_sort_keys(data, table)[::-1]) if len(data) else np.array([], dtype=np.int64)
        if order_out is not None:
            order_out.append(order)
        # the key's first column is the partition column: sorted by key is sorted by time
        return data.take(order) if len(data) else data

    def _stage_hour(self, staged: "Staged", table: str, hour: pd.Timestamp, new: pa.Table, lo_us: int,
                    hi_us: int) -> None:
        """Stage the replacement of the rows of ``[lo_us, hi_us)`` (inside ``hour``) with ``new`` (sorted by key)."""
        hour_file = self.hour_path(table, hour)
        # the hour's partition files, named as partition_path names them (one strftime for the hour, not twelve)
        slot_files = [hour_file.parent / f"{hour:%H}{(i * PARTITION).seconds // 60:02d}.parquet" for i in range(_PER_HOUR)]
        covered = {i for i in range(_PER_HOUR) if lo_us < _us(hour) + (i + 1) * _PARTITION_US and
                   _us(hour) + i * _PARTITION_US < hi_us}
        if len(covered) == _PER_HOUR and lo_us <= _us(hour) and _us(hour + HOUR) <= hi_us:  # the whole hour: no reads
            staged.write(hour_file, new, table)
        elif hour_file.exists():  # complete already: rewrite the hour
            staged.write(hour_file, _spliced(_read(hour_file, table), new, table, lo_us, hi_us), table)
        elif all(i in covered or p.exists() for i, p in enumerate(slot_files)):  # this write completes the hour
            old = [_read(p, table) for p in slot_files if p.exists()]
            old = pa.concat_tables(old) if old else _read_schema(table).empty_table()
            staged.write(hour_file, _spliced(old, new, table, lo_us, hi_us), table)
        else:
            ts = new.column(partition_column(table)).cast(pa.int64()).to_numpy(zero_copy_only=False)
            for i in sorted(covered):
                s_lo, s_hi = max(lo_us, _us(hour) + i * _PARTITION_US), min(hi_us, _us(hour) + (i + 1) * _PARTITION_US)
                a, b = np.searchsorted(ts, [s_lo, s_hi])
                part, path = new.slice(a, b - a), slot_files[i]
                if path.exists():  # a cut partition keeps its rows outside the window
                    part = _spliced(_read(path, table), part, table, s_lo, s_hi)
                staged.write(path, part, table)
            return
        staged.superseded += slot_files  # deleted once the hour file is in place (readers prefer it), never before

    @contextmanager
    def _lock(self, table: str):
        folder = self.root / table
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".lock", "a+b") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # --- reads ------------------------------------------------------------------------------
    def read_window(self, table: str, start=None, end=None, *, column: str | None = None,
                    columns: list[str] | None = None, where: dict | None = None) -> pd.DataFrame:
        """Rows of ``table`` whose ``column`` (default: the partition column) lies in ``[start, end)``, in key order.

        ``where`` keeps rows whose column equals a value (or is in a list of values), as the SQL warehouse does.
        Only the files of the hours overlapping the window are opened when the window is on the partition column.
        """
        _known(table)
        schema = _schema(table)
        col = column or partition_column(table)
        by_partition = col == partition_column(table)
        wanted = list(columns) if columns else schema.names
        cond = None
        if start is not None:
            cond = _and(cond, ds.field(col) >= pa.scalar(_utc(start), schema.field(col).type))
        if end is not None:
            cond = _and(cond, ds.field(col) < pa.scalar(_utc(end), schema.field(col).type))
        for k, v in (where or {}).items():
            typ = schema.field(k).type
            cond = _and(cond, ds.field(k).isin(pa.array(list(v), typ)) if isinstance(v, list | tuple | set)
                        else ds.field(k) == pa.scalar(v, typ))
        for _ in range(_READ_ATTEMPTS):
            files = self._files(table, start if by_partition else None, end if by_partition else None)
            if not files:
                return _to_pandas(pa.schema([schema.field(c) for c in wanted]).empty_table(), table)
            # one dataset over the window's files, read on Arrow's threads with the filter pushed into the scan
            # (bench/bench_telemetry_store.py compares it with file-by-file reads and DuckDB's read_parquet)
            part = partition_column(table)
            try:
                data = ds.dataset([str(f) for f in files], schema=_read_schema(table), format=_read_format(table)).to_table(
                    columns=wanted + ([part] if part not in wanted else []), filter=cond)
            except OSError:
                if all(f.exists() for f in files):
                    raise
                continue  # an hour was compacted after listing: its rows are in its hour file now
            return _to_pandas(_in_key_order(data, table).select(wanted), table)
        raise RuntimeError(f"{table}: hours kept being compacted while reading [{start}, {end})")

    def count(self, table: str) -> int:
        """Rows stored for ``table`` (from the files' footers)."""
        for _ in range(_READ_ATTEMPTS):
            files = self._files(table, None, None)
            try:
                return sum(pq.read_metadata(p).num_rows for p in files)
            except OSError:
                if all(f.exists() for f in files):
                    raise
        raise RuntimeError(f"{table}: hours kept being compacted while counting")


# --- helpers ----------------------------------------------------------------------------------
def default_telemetry_dir(url: str) -> Path:
    """Where the telemetry store of the warehouse at ``url`` lives unless configured.

    Beside a SQLite file: ``var/warehouse.db`` -> ``var/telemetry/``; any other file name ``X.db`` ->
    ``X.telemetry/`` beside it, so two warehouses in one folder never share (and overwrite) one store. PostgreSQL
    (or an in-memory SQLite): ``var/telemetry/``, like the embedded default's -- the store records which warehouse
    wrote it first and refuses any other (:class:`TelemetryStore`'s ``owner``), so a second database there fails
    with an error instead of mixing its rows into the first's.
    """
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        db = Path(parsed.database)
        return db.parent / ("telemetry" if db.name == "warehouse.db" else f"{db.stem}.telemetry")
    return Path("var") / "telemetry"


def warehouse_identity(url: str, store_root: str | Path) -> str | None:
    """The warehouse at ``url`` as its telemetry store at ``store_root`` records its owner: for PostgreSQL its
    server and database (``postgresql://host:port/database``: no user or password, which change without the data
    changing), for a SQLite file its path relative to the store (``sqlite:../warehouse.db``: a checkout or a volume
    can move). None for an in-memory SQLite (nothing outlives it to be mixed up with)."""
    parsed = sa.engine.make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            return None
        return f"sqlite:{os.path.relpath(Path(parsed.database).resolve(), Path(store_root).resolve())}"
    port = parsed.port or {"postgresql": 5432}.get(backend, "")
    return f"{backend}://{parsed.host or 'localhost'}:{port}/{parsed.database or ''}"


def _known(table: str) -> str:
    if table not in COLUMNAR_TABLES:
        raise ValueError(f"{table!r} is not stored columnar (columnar tables: {', '.join(sorted(COLUMNAR_TABLES))})")
    return table


def _utc(value) -> pd.Timestamp:
    ts = pd.Timestamp(value)
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def _us(ts: pd.Timestamp) -> int:
    return ts.value // 1000


def _is_hour(path: Path) -> bool:
    return len(path.stem) == 2


def _start_of(path: Path) -> pd.Timestamp:
    """The start of the hour (``HH.parquet``) or partition (``HHMM.parquet``) a file holds."""
    stem = path.stem
    return pd.Timestamp(f"{path.parent.name[len('date='):]}T{stem[:2]}:{stem[2:] or '00'}:00Z")


def _read(path: Path, table: str) -> pa.Table:
    """One file as the store's writes hold a table: text columns as dictionaries (:func:`_read_schema`)."""
    return ds.dataset(str(path), schema=_read_schema(table), format=_read_format(table)).to_table()


class Staged:
    """The files of one staged write (:meth:`TelemetryStore.staged`): written under hidden temporary names
    (``.HH.parquet.<pid>.<thread>.tmp``, which Hive-style readers skip), renamed into place by :meth:`publish`.

    A file it replaces is first hard-linked to a hidden backup (``.HH.parquet.<pid>.<thread>.bak``), so
    :meth:`rollback` can put it back after a publish; the partition files an hour file supersedes are deleted only
    by :meth:`finish`, once the write is final (readers take the hour file over them meanwhile)."""

    def __init__(self):
        self.pending: list[tuple[Path, Path]] = []      # (temporary, final)
        self.published: list[tuple[Path, Path | None]] = []  # (final, backup of the file it replaced, or None)
        self.superseded: list[Path] = []

    def write(self, path: Path, data: pa.Table, table: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        self.pending.append((tmp, path))
        _write_parquet(_in_file_order(_compacted(data), table), tmp)

    def publish(self) -> None:
        """Rename every staged file into place (each rename atomic: a reader sees the old file or the new one)."""
        while self.pending:
            tmp, path = self.pending[0]
            backup = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.bak")
            backup.unlink(missing_ok=True)  # a backup left by a crashed writer of the same pid and thread
            try:
                os.link(path, backup)
            except FileNotFoundError:
                backup = None
            os.replace(tmp, path)
            self.published.append((path, backup))
            self.pending.pop(0)

    def rollback(self) -> None:
        """Put back what :meth:`publish` replaced (newest first), remove what it created."""
        for path, backup in reversed(self.published):
            if backup is not None:
                os.replace(backup, path)
            else:
                path.unlink(missing_ok=True)
        self.published.clear()

    def finish(self) -> None:
        """The write is final: delete the partition files its hour files superseded, and the backups."""
        if self.published:
            for p in self.superseded:
                p.unlink(missing_ok=True)
        for _, backup in self.published:
            if backup is not None:
                backup.unlink(missing_ok=True)
        self.published.clear()

    def discard(self) -> None:
        """Remove the temporary files never published."""
        for tmp, _ in self.pending:
            tmp.unlink(missing_ok=True)
        self.pending.clear()


def _spliced(old: pa.Table, new: pa.Table, table: str, lo_us: int, hi_us: int) -> pa.Table:
    """``old``'s rows outside ``[lo_us, hi_us)`` and ``new`` (all inside it), in no particular order: the file they
    go to is put in its order when written (:func:`_in_file_order`), whatever order ``old`` was stored in."""
    ts = old.column(partition_column(table)).cast(pa.int64()).to_numpy(zero_copy_only=False)
    kept = old.filter(pa.array((ts < lo_us) | (ts >= hi_us)))
    return pa.concat_tables([kept, new])


def _and(cond, more):
    return more if cond is None else cond & more


def _sort_keys(data: pa.Table, table: str) -> list[np.ndarray]:
    """The table's key columns as sortable arrays, most significant first (np.lexsort takes them reversed)."""
    keys = []
    for name in grain(_model(table), partition_column(table)):
        arr = data.column(name)
        if pa.types.is_string(arr.type) or (pa.types.is_dictionary(arr.type) and pa.types.is_string(arr.type.value_type)):
            keys.append(_dense_rank(arr))
        elif pa.types.is_timestamp(arr.type):
            keys.append(arr.cast(pa.int64()).to_numpy(zero_copy_only=False))
        else:
            keys.append(arr.to_numpy(zero_copy_only=False))
    return keys


def _dense_rank(arr) -> np.ndarray:
    """pc.rank(arr, "ascending", tiebreaker="dense") of a string column (plain or dictionary), ranking its distinct
    values only (a key column repeats a few thousand names over millions of rows: hashing them is ~5x cheaper than
    sorting them). Ties in a dictionary holding a value twice (files concatenated) rank alike, as they should."""
    dictionary = pa.types.is_dictionary(arr.type)
    if arr.null_count:
        return pc.rank(arr.cast(arr.type.value_type) if dictionary else arr, sort_keys="ascending",
                       tiebreaker="dense").to_numpy()
    enc = arr if dictionary else arr.dictionary_encode()
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    ranks = pc.rank(enc.dictionary, sort_keys="ascending", tiebreaker="dense").to_numpy()
    return ranks[enc.indices.to_numpy(zero_copy_only=False)]


def _in_file_order(data: pa.Table, table: str) -> pa.Table:
    """``data`` in the order a file stores it: by the table's key with the partition column moved last (each GPU's,
    link's or job's rows of the hour together, in time order).

    Why: a column's consecutive values are then one entity's successive readings, which the dictionary indices,
    run lengths and zstd compress far better than the whole fleet's readings of one minute side by side (10-20 %
    smaller files). Reads put the rows back in key order (time first) with a stable sort by
    the partition column alone (:func:`_in_key_order`), cheap because each entity's rows are already in time order.
    """
    if data.num_rows < 2:
        return data
    keys = _sort_keys(data, table)  # most significant first, the partition column first
    return data.take(np.lexsort([keys[0], *keys[:0:-1]]))  # lexsort: least significant first


def _in_key_order(data: pa.Table, table: str) -> pa.Table:
    """Rows of files in :func:`_in_file_order` (or in key order: files written before) back in key order: a stable
    sort by the partition column keeps the rest of the key's order within each instant."""
    ts = data.column(partition_column(table)).cast(pa.int64()).to_numpy(zero_copy_only=False)
    if len(ts) < 2 or (ts[1:] >= ts[:-1]).all():
        return data
    return data.take(np.argsort(ts, kind="stable"))


@functools.cache
def _schema(table: str) -> pa.Schema:
    return arrow_schema(table, descriptions=False)


# Reads decode the text columns as dictionaries (the files store them dictionary-encoded): the scan then never
# builds a string per row, the key-order take moves 4-byte indices instead of strings, and the pandas strings are
# made once per distinct value (_to_pandas, arrow_text.text_values). The values and dtypes returned are the same as
# a plain read's.
@functools.cache
def _read_schema(table: str) -> pa.Schema:
    schema = _schema(table)
    return _as_dictionaries(schema, [f.name for f in schema if pa.types.is_string(f.type)])


@functools.cache
def _read_format(table: str) -> ds.ParquetFileFormat:
    text = [f.name for f in _schema(table) if pa.types.is_string(f.type)]
    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=text))


def _compacted(data: pa.Table) -> pa.Table:
    """``data`` with each dictionary column's dictionary cut to the values its rows use (their order kept). A
    write converts a whole window's text once (:func:`to_arrow`) and each hour's file takes a slice of it: left
    whole, every file would carry every value of the window (a day's event ids in each hour of scheduler events:
    ten times the bytes) and the file's key sort would rank them all again for each hour."""
    for i, field in enumerate(data.schema):
        if not pa.types.is_dictionary(field.type):
            continue
        col = data.column(i).combine_chunks()
        indices = pc.fill_null(col.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        used = np.bincount(indices[indices >= 0], minlength=len(col.dictionary)) > 0
        if used.all():
            continue
        renumber = np.append(np.cumsum(used) - 1, -1)  # old index -> new; a null (-1) stays null
        codes = renumber[indices]
        compact = pa.DictionaryArray.from_arrays(pa.array(codes, type=field.type.index_type, mask=codes < 0),
                                                 col.dictionary.filter(pa.array(used)))
        data = data.set_column(i, field, compact)
    return data


def _write_parquet(data: pa.Table, where) -> None:
    # store_schema=False: no serialized Arrow schema in the footer (~1 KB a file); the Parquet logical types
    # (UTC-adjusted microsecond timestamps included) already say everything a reader needs. A table without rows
    # is written as no row group at all: the schema and the footer only (~1 KB with 18 columns, not ~4 KB).
    # Statistics (min / max per column chunk) only for the time columns: a file is one row group holding every
    # entity of its hour, so only a time range can skip one by its statistics (this store's reads, and DuckDB's,
    # Spark's or Trino's); min / max of the other columns cost a quarter of the write and skip nothing.
    with pq.ParquetWriter(where, data.schema, compression=COMPRESSION, store_schema=False,
                          write_statistics=_time_columns(data.schema)) as writer:
        if data.num_rows:
            writer.write_table(data)


def _time_columns(schema: pa.Schema) -> list[str]:
    return [f.name for f in schema if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)]


def _model(table: str):
    from gpu_health.catalog import table as entry

    return entry(table).model


def to_arrow(frame: pd.DataFrame, schema: pa.Schema, table: str, *, text_as_dictionary: bool = False) -> pa.Table:
    """``frame`` as ``schema`` (its columns, in order; a frame without rows may lack them).

    ``text_as_dictionary``: the text columns as dictionaries (each distinct value converted once, the store's
    sorts and takes move 4-byte indices; Parquet stores them dictionary-encoded either way)."""
    text = [f.name for f in schema if pa.types.is_string(f.type)] if text_as_dictionary else []
    out_schema = _as_dictionaries(schema, text)
    if frame.empty:
        return out_schema.empty_table()
    missing = [n for n in schema.names if n not in frame.columns]
    if missing:
        raise ValueError(f"{table}: the frame lacks column(s) {missing}")
    cols = {}
    for field in schema:
        if field.name in text:
            continue
        s = frame[field.name]
        if isinstance(s.dtype, pd.CategoricalDtype):
            s = s.astype(object)
        if pa.types.is_timestamp(field.type) and not (isinstance(s.dtype, pd.DatetimeTZDtype) and str(s.dtype.tz) == "UTC"):
            s = pd.to_datetime(s, utc=True)  # (a UTC datetime column already is what this gives)
        cols[field.name] = s
    # safe=True: a value the type cannot hold exactly (a nanosecond, a fractional int) raises instead of being cut;
    # a null in a column the catalogue declares NOT NULL raises too (pyarrow checks non-nullable fields)
    rest = pa.Table.from_pandas(pd.DataFrame(cols), schema=pa.schema([f for f in schema if f.name not in text]),
                                preserve_index=False, safe=True)
    if not text:
        return rest
    arrays = [_text_dictionary(frame[f.name], f) if f.name in text else rest.column(f.name) for f in schema]
    return pa.Table.from_arrays(arrays, schema=out_schema)


def _as_dictionaries(schema: pa.Schema, names: list[str]) -> pa.Schema:
    return pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), pa.string()), f.nullable) if f.name in names else f
                      for f in schema])


def _text_dictionary(values: pd.Series, field: pa.Field) -> pa.DictionaryArray:
    """A text column as a dictionary array (a missing value a null index); raises as pyarrow's own conversion
    does on a value that is not text (ArrowTypeError) and on a null in a NOT NULL column (ValueError)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes, uniques = values.cat.codes.to_numpy(), np.asarray(values.cat.categories, dtype=object)
    else:
        codes, uniques = factorize(values)
        uniques = np.asarray(uniques, dtype=object)
    missing = codes < 0
    if not field.nullable and missing.any():
        raise ValueError(f"Field {field} was non-nullable but pandas column had {int(missing.sum())} null values")
    return pa.DictionaryArray.from_arrays(pa.array(codes, type=pa.int32(), mask=missing),
                                          pa.array(uniques, type=pa.string(), from_pandas=True))


def _to_pandas(data: pa.Table, table: str) -> pd.DataFrame:
    """Arrow -> the dtypes the SQL warehouse's reads return (``Warehouse._restore_types``)."""
    decl = metadata.tables[table].c
    out = {}
    for name in data.column_names:
        arr, c = data.column(name), decl[name]
        if isinstance(c.type, sa.DateTime):
            out[name] = arr.to_pandas(coerce_temporal_nanoseconds=True)
        elif isinstance(c.type, sa.BigInteger) and c.nullable:
            out[name] = arr.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
        elif isinstance(c.type, sa.Text):
            out[name] = pd.Series(text_values(arr)[0], copy=False)
        else:
            out[name] = arr.to_pandas()
    return pd.DataFrame(out, columns=data.column_names)

"""Reads and idempotent partition writes against the warehouse (SQLite or PostgreSQL + the telemetry store).

The tables the catalogue stores columnar (``schema.COLUMNAR_TABLES``: the minute-grain telemetry, the event sources,
the per-node facts of the loss tree, the node inventory and the per-partition baselines) are not SQL rows: the
warehouse routes them to its columnar :class:`~gpu_health.storage.telemetry_store.TelemetryStore` (Parquet,
``telemetry_dir``) behind the same ``replace_window`` / ``replace_windows`` / ``read_window`` / ``count`` calls, so
no caller knows where a table lives. Every other table (the KPIs, the loss tree at the grain finance reads, alerts,
finance and capacity, the small sources) stays in SQL, where finance's views and roles read it.

A partition write deletes the window's rows and inserts the new ones in one
transaction, under a lock on (table, window): re-running a partition, or two
runs of it racing, never duplicates or loses rows. On SQLite the transaction
takes the database write lock up front (``BEGIN IMMEDIATE``); on PostgreSQL a
transaction-scoped advisory lock keyed by table and window serialises racers
(row locks alone would let the second run miss the first run's inserts).
"""

import datetime
import io
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import sqlalchemy as sa

from gpu_health.sim.hashing import stable_id
from gpu_health.storage.schema import COLUMNAR_TABLES, metadata, partition_column, sql_tables
from gpu_health.storage.telemetry_store import TelemetryStore, default_telemetry_dir, warehouse_identity
from gpu_health.timestamps import as_utc

_ENGINES: dict[str, sa.Engine] = {}
_LOCK = threading.Lock()

_CACHE_ENTRIES_PER_TABLE = 2
_CACHE_MAX_ROWS = 4_000_000


class FrameCache:
    """A write-through cache of the frames one run wrote, per table: a run's later steps read the windows its
    earlier steps just wrote without a database round trip.

    It is an explicit argument of :class:`Warehouse` (``cache=``), owned by whoever runs the steps: the bulk path
    makes one per run, the Dagster ``WarehouseResource`` one per run's resource. A warehouse without one always
    reads the database. Writes invalidate overlapping entries, and a frame is cached in the order the database
    returns its rows (:meth:`Warehouse._cache_put`), so a cache never answers differently from the database it
    writes through to. Reads with ``where`` are never served. A read inside one cached window is served from it;
    a read across several windows (a day's 14 days of KPI history in a run over weeks) is stitched from the
    cached windows and database reads of the gaps between them, where the database orders rows by time first
    (:meth:`Warehouse._time_ordered`).
    """

    def __init__(self, entries_per_table: int = _CACHE_ENTRIES_PER_TABLE, max_rows: int = _CACHE_MAX_ROWS,
                 depth: dict[str, int] | None = None):
        """``depth``: table -> how many windows to keep, when more than ``entries_per_table`` (a run over many
        windows keeps as many as its steps' look-backs reach: :func:`gpu_health.steps.direct.cache_depths`)."""
        self.entries_per_table = entries_per_table
        self.max_rows = max_rows
        self.depth = dict(depth or {})
        self._entries: dict[str, list[tuple]] = {}
        self._lock = threading.Lock()

    def deepen(self, depth: dict[str, int]) -> None:
        """Keep at least ``depth[table]`` windows of each table named (see ``depth``)."""
        with self._lock:
            for name, n in depth.items():
                self.depth[name] = max(self.depth.get(name, 0), n)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def window(self, names, start, end) -> list[tuple]:
        """The entries of ``names`` cached for exactly ``[start, end)``, as ``(name, column, start, end, frame)``:
        what a later stage of a pipelined run (:mod:`gpu_health.steps.direct`), in a process of its own,
        :meth:`adopt` s so that its reads of those windows are served as they would be in one process."""
        s0, e0 = pd.Timestamp(start), pd.Timestamp(end)
        with self._lock:
            return [(name, *entry) for name in names for entry in self._entries.get(name, [])
                    if entry[1] == s0 and entry[2] == e0]

    def adopt(self, entries) -> None:
        """Cache frames another process wrote through to the same warehouse (:meth:`window`)."""
        with self._lock:
            for name, column, start, end, frame in entries:
                self._put(name, frame, start, end, column)

    def _put(self, name, frame, start, end, column, where=None) -> None:
        # the caller holds the lock: a write drops the overlapping windows, then caches its own
        entries = self._entries.get(name, [])
        if start is None or column is None:
            entries = []
        else:
            s0, e0 = pd.Timestamp(start), pd.Timestamp(end)
            entries = [e for e in entries if e[1] >= e0 or e[2] <= s0]
        if where is None and start is not None and column is not None and len(frame) <= self.max_rows:
            entries.append((column, pd.Timestamp(start), pd.Timestamp(end), frame))
            entries = entries[-max(self.entries_per_table, self.depth.get(name, 0)):]
        self._entries[name] = entries
# The advisory-lock key of the schema's DDL: one key for every process creating this project's
# tables in a database (a positive 63-bit id, the range pg_advisory_xact_lock takes).
_DDL_LOCK_KEY = stable_id("gpu_health|schema ddl") & 0x7FFFFFFFFFFFFFFF


def _add_nullable_columns(conn, tables) -> None:
    """Add to tables an older schema created the nullable columns the schema has gained since (extend, never
    rename): their old rows have no value to give, null says so. A NOT NULL column missing is left to fail the
    first write naming it: which value old rows should hold is a decision, not a default."""
    have = sa.inspect(conn).get_multi_columns()
    for t in tables:
        names = {c["name"] for c in have.get((None, t.name), [])}
        for c in t.columns:
            if names and c.name not in names and c.nullable:
                conn.execute(sa.text(f'ALTER TABLE "{t.name}" ADD COLUMN "{c.name}" {c.type.compile(conn.dialect)}'))


def masked_url(url: str) -> str:
    """``url`` as it may be printed or logged: its password, if any, as ``***``; any other URL unchanged."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:  # not a URL SQLAlchemy reads: nothing it could take a password from
        return url
    return url if parsed.password is None else parsed.render_as_string(hide_password=True)


def engine_for(url: str) -> sa.Engine:
    """One engine per URL (SQLite files get their folder created and WAL mode)."""
    with _LOCK:
        if url in _ENGINES:
            return _ENGINES[url]
        if url.startswith("sqlite"):
            path = sa.engine.make_url(url).database
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            engine = sa.create_engine(url, connect_args={"timeout": 60, "isolation_level": None})

            @sa.event.listens_for(engine, "connect")
            def _sqlite_pragmas(dbapi_conn, _record):
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.execute("PRAGMA cache_size=-131072")  # 128 MiB: key B-trees of a day fit
                cur.close()

            @sa.event.listens_for(engine, "begin")
            def _sqlite_begin(conn):
                conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            engine = sa.create_engine(url, pool_pre_ping=True)
        _ENGINES[url] = engine
        return engine


class Warehouse:
    """The warehouse at ``url`` with its telemetry store in ``telemetry_dir`` (default:
    :func:`~gpu_health.storage.telemetry_store.default_telemetry_dir`, beside a SQLite file); SQL tables are created
    on first use, the store's folders on first write."""

    def __init__(self, url: str, telemetry_dir: str | Path | None = None, *, cache: FrameCache | None = None,
                 columnar: frozenset[str] | None = None):
        """``columnar``: the tables this warehouse routes to its telemetry store (default: the catalogue's,
        ``schema.COLUMNAR_TABLES``); a subset reads and writes the others as SQL rows, which is how a warehouse
        of an earlier layout is read (``storage/relayout.py``, and the test that both layouts read back equal)."""
        self.url = url
        self.cache = cache
        self.columnar = COLUMNAR_TABLES if columnar is None else frozenset(columnar)
        if not self.columnar <= COLUMNAR_TABLES:
            raise ValueError(f"not columnar in the catalogue: {sorted(self.columnar - COLUMNAR_TABLES)}")
        self.engine = engine_for(url)
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        root = telemetry_dir or default_telemetry_dir(url)
        self.telemetry = TelemetryStore(root, owner=warehouse_identity(url, root))
        self._created = False

    def create_all(self) -> None:
        """Create the missing tables and the views once, whoever else is creating them.

        The whole DDL runs in one transaction under a lock on the schema: on PostgreSQL a
        transaction-scoped advisory lock (``_DDL_LOCK_KEY``), on SQLite the write lock that
        ``BEGIN IMMEDIATE`` takes. Two first runs on a fresh database would otherwise both
        see a table missing and both create it, and the second fails on PostgreSQL's
        catalogue (``duplicate key ... pg_type_typname_nsp_index``). Under the lock the
        second sees the first's committed tables and creates nothing.
        """
        if not self._created:
            from gpu_health.storage.views import create_views

            with self.engine.begin() as conn:
                if not self.is_sqlite:
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _DDL_LOCK_KEY})
                metadata.create_all(conn, tables=sql_tables(self.columnar))
                _add_nullable_columns(conn, sql_tables(self.columnar))
                create_views(conn)
            self._created = True

    def table(self, name: str) -> sa.Table:
        self.create_all()
        return metadata.tables[name]

    # --- writes ---------------------------------------------------------------------------
    def replace_window(self, name: str, frame: pd.DataFrame, start, end, *, column: str | None = None,
                       where: dict | None = None) -> int:
        """Replace the rows of ``name`` whose ``column`` lies in ``[start, end)``.

        ``where`` narrows the delete further (e.g. ``{"source": "gpu_telemetry"}``
        for the shared rejects table; the columnar tables refuse it: their windows are replaced whole).
        """
        if name in self.columnar:
            self.create_all()
            order: list = []
            written = self.telemetry.replace_window(name, frame, start, end, column=column, where=where, order_out=order)
            if self.cache is not None and not frame.empty:  # cached in the order the store returns the rows
                frame = _reordered(frame, order[0], list(metadata.tables[name].c.keys()))
            self._cache_put(name, frame, start, end, column or partition_column(name), where)
            return written
        table = self.table(name)
        column = column or partition_column(name)
        frame = frame[[c.name for c in table.columns]] if not frame.empty else frame
        with self.engine.begin() as conn:
            self._lock(conn, name, start, where)
            cond = []
            if column is not None and start is not None:
                col = table.c[column]
                cond += [col >= self._bound(start, col), col < self._bound(end, col, upper=True)]
            for k, v in (where or {}).items():
                cond.append(table.c[k] == v)
            conn.execute(table.delete().where(*cond) if cond else table.delete())
            self._insert(conn, table, frame)
        self._cache_put(name, frame, start, end, column, where)
        return len(frame)

    def replace_windows(self, frames: dict[str, pd.DataFrame], start, end, *, where: dict | None = None,
                        lock_partitions: pd.Timedelta | None = None) -> dict[str, int]:
        """Replace the ``[start, end)`` window of every table in ``frames`` in ONE transaction.

        The outputs of one step for one window commit together or not at all: a crash, a
        killed database or a lost connection mid-write leaves every table as it was before
        the step or every table as the step wrote it, never some new and some old (the loss
        tree's five tables, an alert window and the partitions after it). Each table's window
        is locked exactly as :meth:`replace_window` locks it (same advisory key on PostgreSQL,
        so a racing single-table write of the same window waits), the locks taken in table
        order so two multi-table writers cannot deadlock. ``where`` maps a table to the extra
        delete condition :meth:`replace_window` takes. ``lock_partitions`` (e.g. 5 minutes)
        also locks each partition of the window as a one-partition run of it would, in time
        order: a write spanning partitions others may be writing one by one (the alerts
        re-derived after a re-run) waits for them instead of racing them.
        """
        where = where or {}
        columnar = [name for name in frames if name in self.columnar]
        tables = {name: self.table(name) for name in sorted(frames) if name not in self.columnar}
        columns = {name: partition_column(name) for name in tables}
        framed = {name: (frames[name][[c.name for c in t.columns]] if not frames[name].empty else frames[name])
                  for name, t in tables.items()}
        orders: list = []
        for name in columnar:
            if where.get(name):
                raise ValueError(f"{name} is stored columnar: replace whole windows (where={where[name]!r})")
        # the columnar tables' files are staged first, published inside the SQL transaction right before it commits
        # and put back if the commit fails (TelemetryStore.staged): the step's tables commit together
        with self.telemetry.staged({name: frames[name] for name in columnar}, start, end, order_out=orders) as staged:
            with self.engine.begin() as conn:
                for name, table in tables.items():
                    self._lock(conn, name, start, where.get(name))
                    if lock_partitions is not None and start is not None:
                        for p in pd.date_range(pd.Timestamp(start), pd.Timestamp(end), freq=lock_partitions,
                                               inclusive="left")[1:]:
                            self._lock(conn, name, p, where.get(name))
                    cond = []
                    if columns[name] is not None and start is not None:
                        col = table.c[columns[name]]
                        cond += [col >= self._bound(start, col), col < self._bound(end, col, upper=True)]
                    for k, v in (where.get(name) or {}).items():
                        cond.append(table.c[k] == v)
                    conn.execute(table.delete().where(*cond) if cond else table.delete())
                    self._insert(conn, table, framed[name])
                staged.publish()
        for name, order in zip(columnar, orders):
            frame = frames[name]
            if self.cache is not None and not frame.empty:  # cached in the order the store returns the rows
                frame = _reordered(frame, order, list(metadata.tables[name].c.keys()))
            self._cache_put(name, frame, start, end, partition_column(name), None)
        for name, frame in framed.items():
            self._cache_put(name, frame, start, end, columns[name], where.get(name))
        return {name: len(frames[name]) for name in frames}

    # --- the write-through cache -------------------------------------------------------------
    def _cache_put(self, name, frame, start, end, column, where) -> None:
        cache = self.cache
        if cache is None:
            return
        if name not in self.columnar and self.is_sqlite and not frame.empty and _without_rowid(name):
            # SQLite reads a WITHOUT ROWID table in its key's order (columnar frames come here in the store's
            # order): writers need not produce it, and the loss tree's region rollups and job failures do not
            key = [c.name for c in metadata.tables[name].primary_key.columns]
            frame = frame.sort_values(key, kind="stable", ignore_index=True)
        if not frame.index.equals(pd.RangeIndex(len(frame))):  # reads hand out a RangeIndex, as the database does
            frame = frame.reset_index(drop=True)
        with cache._lock:
            cache._put(name, frame, start, end, column, where)

    def _cache_get(self, name, start, end, column, columns, where):
        cache = self.cache
        if cache is None or where or start is None or end is None:
            return None
        s0, e0 = pd.Timestamp(start), pd.Timestamp(end)
        col_def = metadata.tables[name].c[column]
        # a DATE column holds datetime.date values (which do not compare with Timestamps): same days as the database
        lo, hi = ((self._bound(s0, col_def), self._bound(e0, col_def, upper=True)) if isinstance(col_def.type, sa.Date)
                  else (s0, e0))
        with cache._lock:
            entries = [e for e in cache._entries.get(name, []) if e[0] == column]
        for col, cs, ce, frame in reversed(entries):
            if cs <= s0 and e0 <= ce:
                return _rows_between(frame, col, s0, e0, lo, hi, cs, ce, columns)
        overlap = sorted((e for e in entries if e[1] < e0 and s0 < e[2]), key=lambda e: e[1])
        if not overlap or isinstance(col_def.type, sa.Date) or not self._time_ordered(name):
            return None
        # stitched: the cached windows' rows and the database's rows of the gaps, in time order
        parts, at = [], s0
        for col, cs, ce, frame in overlap:
            if at < cs:
                parts.append(self._read_uncached(name, at, cs, column, columns))
            a, b = max(cs, s0), min(ce, e0)
            parts.append(_rows_between(frame, col, a, b, a, b, cs, ce, columns))
            at = max(at, b)
        if at < e0:
            parts.append(self._read_uncached(name, at, e0, column, columns))
        kept = [p for p in parts if len(p)] or parts[:1]
        return pd.concat(kept, ignore_index=True) if len(kept) > 1 else kept[0]

    def _read_uncached(self, name, start, end, column, columns) -> pd.DataFrame:
        """A gap between cached windows of a stitched read, read from where the table is stored."""
        return self._read_stored(name, start, end, column, columns)

    def _time_ordered(self, name: str) -> bool:
        """Whether the database returns ``name``'s rows of a window in time order (so the rows of adjacent windows,
        concatenated, are its rows of both): the telemetry store does (its key leads with the partition column), as
        SQLite does for a WITHOUT ROWID table (its key too). PostgreSQL returns a heap's order: never stitched."""
        return name in self.columnar or (self.is_sqlite and _without_rowid(name))

    def _bound(self, value, col, *, upper: bool = False):
        value = pd.Timestamp(value)
        if isinstance(col.type, sa.Date):
            # the days overlapping [start, end): an end inside a day keeps that day (a 5-minute window
            # reads its day's cost_capacity row), an end at midnight does not
            value = value.tz_convert("UTC") if value.tzinfo is not None else value
            day = value.date()
            return day + datetime.timedelta(days=1) if upper and value != value.normalize() else day
        if self.is_sqlite:
            return value.tz_convert("UTC").tz_localize(None).to_pydatetime()
        return value.to_pydatetime()

    def _lock(self, conn, name, start, where):
        if self.is_sqlite:
            return  # BEGIN IMMEDIATE already holds the database write lock
        key = stable_id(f"{name}|{start}|{sorted((where or {}).items())}") & 0x7FFFFFFFFFFFFFFF
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})

    def _insert(self, conn, table: sa.Table, frame: pd.DataFrame) -> None:
        if frame.empty:
            return
        if self.is_sqlite:
            cols = _columns_as_python(frame, table)
            names = ", ".join(f'"{c.name}"' for c in table.columns)
            marks = ", ".join("?" for _ in table.columns)
            conn.connection.dbapi_connection.executemany(
                f'INSERT INTO "{table.name}" ({names}) VALUES ({marks})', list(zip(*cols)))
            return
        # PostgreSQL: COPY is an order of magnitude faster than INSERTs
        buf = io.StringIO(copy_text(frame, table))
        raw = conn.connection.dbapi_connection
        cols = ", ".join(f'"{c.name}"' for c in table.columns)
        with raw.cursor() as cur:
            cur.copy_expert(f'COPY "{table.name}" ({cols}) FROM STDIN', buf)

    # --- reads ----------------------------------------------------------------------------
    def read_window(self, name: str, start=None, end=None, *, column: str | None = None,
                    columns: list[str] | None = None, where: dict | None = None) -> pd.DataFrame:
        if name in self.columnar:
            self.create_all()
        cached = self._cache_get(name, start, end, column or partition_column(name), columns, where)
        return cached if cached is not None else self._read_stored(name, start, end, column, columns, where)

    def _read_stored(self, name: str, start, end, column: str | None, columns: list[str] | None,
                     where: dict | None = None) -> pd.DataFrame:
        """:meth:`read_window` from the database or the telemetry store, never the cache."""
        if name in self.columnar:
            return self.telemetry.read_window(name, start, end, column=column, columns=columns, where=where)
        table = self.table(name)
        column = column or partition_column(name)
        cols = [table.c[c] for c in columns] if columns else list(table.columns)
        q = sa.select(*cols)
        if column is not None and start is not None:
            col = table.c[column]
            q = q.where(col >= self._bound(start, col))
        if column is not None and end is not None:
            col = table.c[column]
            q = q.where(col < self._bound(end, col, upper=True))
        for k, v in (where or {}).items():
            q = q.where(table.c[k].in_(v) if isinstance(v, list | tuple | set) else table.c[k] == v)
        return _restore_types(self._fetch(q, [c.name for c in cols]), table)

    def _fetch(self, query, names: list[str]) -> pd.DataFrame:
        """Raw driver rows of ``query`` (no per-row type processing; callers convert column-wise)."""
        compiled = query.compile(self.engine, compile_kwargs={"render_postcompile": True})
        params = compiled.params
        if self.is_sqlite:  # bind as the text SQLAlchemy stores
            params = tuple(_sqlite_param(compiled.params[k]) for k in compiled.positiontup)
        with self.engine.connect() as conn:
            # the driver's own cursor: its rows are plain tuples (a result's Row object per row costs more than
            # the read of a large window itself)
            cursor = conn.connection.dbapi_connection.cursor()
            try:
                cursor.execute(str(compiled), params)
                rows = cursor.fetchall()
            finally:
                cursor.close()
        return pd.DataFrame(rows, columns=names)

    def last_partition_by(self, name: str, by: str, start, end, *, column: str | None = None,
                          positive: str | None = None) -> pd.Series:
        """``by`` -> the latest ``column`` (the partition column) of its rows in ``[start, end)`` (only rows whose
        ``positive`` column is > 0, if given), aggregated in the database (one row per group comes back, however
        many rows the window holds)."""
        if name in self.columnar:
            col = column or partition_column(name)
            rows = self.telemetry.read_window(name, start, end, column=col, columns=[by, col, *([positive] if positive else [])])
            if positive is not None:
                rows = rows[rows[positive] > 0]
            last = rows.groupby(rows[by].astype(object))[col].max()
            return last.rename_axis(by)
        table = self.table(name)
        col = table.c[column or partition_column(name)]
        cond = [col >= self._bound(start, col), col < self._bound(end, col, upper=True)]
        if positive is not None:
            cond.append(table.c[positive] > 0)
        q = sa.select(table.c[by], sa.func.max(col).label(col.name)).where(*cond).group_by(table.c[by])
        frame = _restore_types(self._fetch(q, [by, col.name]), table)
        return frame.set_index(pd.Index(frame[by].astype(object), name=by))[col.name]

    def count(self, name: str) -> int:
        if name in self.columnar:
            return self.telemetry.count(name)
        table = self.table(name)
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def _without_rowid(name: str) -> bool:
    """A keyed SQL table (schema: ``sqlite_with_rowid=False``), whose key leads with its partition column."""
    return metadata.tables[name].dialect_options["sqlite"].get("with_rowid") is False


def _rows_between(frame: pd.DataFrame, col: str, s0, e0, lo, hi, cs, ce, columns) -> pd.DataFrame:
    """The rows of a cached window ``[cs, ce)`` whose ``col`` lies in ``[lo, hi)`` (``[s0, e0)`` as the column's
    type compares), in one copy: the caller may change what it reads and the cache must not change; selecting
    columns or rows copies already, and the cached frame has a RangeIndex (a copy of a day of gpu_telemetry is
    a second of CPU, read after read). The whole window is a shallow copy under Copy-on-Write (gpu_health/__init__.py):
    a caller's write copies what it writes, the cached frame stays as it is."""
    if cs == s0 and ce == e0:
        return frame[columns] if columns else frame.copy(deep=not _pd_copy_on_write())
    mask = ((frame[col] >= lo) & (frame[col] < hi)).to_numpy()
    part = frame.loc[mask, columns] if columns else frame[mask]
    part.index = pd.RangeIndex(len(part))
    return part


def _pd_copy_on_write() -> bool:
    return pd.get_option("mode.copy_on_write") is True


def _reordered(frame: pd.DataFrame, rows: np.ndarray, columns: list[str]) -> pd.DataFrame:
    """``frame.iloc[rows][columns]`` with a RangeIndex, in one copy (every write through the run cache takes
    this path)."""
    if list(frame.columns) == columns:
        out = frame.iloc[rows]
    else:
        where = frame.columns.get_indexer(columns)
        if (where < 0).any():
            raise KeyError(f"the frame lacks column(s) {[c for c, i in zip(columns, where) if i < 0]}")
        out = frame.iloc[rows, where]
    out.index = pd.RangeIndex(len(out))
    return out


def run_cache() -> FrameCache | None:
    """A fresh :class:`FrameCache` for one run, or None when ``GPU_HEALTH_WAREHOUSE_CACHE=0`` (every read goes to
    the database: what a test of stored rows wants)."""
    import os

    return FrameCache() if os.environ.get("GPU_HEALTH_WAREHOUSE_CACHE", "1") != "0" else None


def _sqlite_param(value):
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def _timestamp_text(s: pd.Series) -> list:
    """UTC timestamps as SQLite text; formats each distinct value once (minute grains repeat a lot)."""
    s = as_utc(s)
    codes, uniques = pd.factorize(s)
    text = np.asarray(pd.DatetimeIndex(uniques).strftime("%Y-%m-%d %H:%M:%S.%f"), dtype=object)
    out = np.empty(len(s), dtype=object)
    ok = codes >= 0
    out[ok] = text[codes[ok]]
    out[~ok] = None
    return out.tolist()


def _columns_as_python(frame: pd.DataFrame, table: sa.Table) -> list[list]:
    """Column-wise conversion to DB-API values (vectorized; SQLite stores UTC as naive text)."""
    cols = []
    for c in table.columns:
        s = frame[c.name]
        if isinstance(c.type, sa.DateTime):
            cols.append(_timestamp_text(s))
        elif isinstance(c.type, sa.Date):
            cols.append([None if pd.isna(v) else str(pd.Timestamp(v).date()) for v in s])
        elif isinstance(c.type, sa.Float):
            cols.append(pd.to_numeric(s, errors="coerce").astype("float64").to_numpy(dtype=object, na_value=None).tolist())
        else:
            cols.append(s.to_numpy(dtype=object, na_value=None).tolist())
    return cols


# COPY's text format (PostgreSQL docs, "COPY ... File Formats"): NULL is \N, and a backslash, tab, newline or
# carriage return inside a value is written as a backslash escape, so every text (``\N`` itself, "NULL", an
# empty string, quotes) round-trips exactly. CSV format cannot tell an empty string from NULL without quoting
# every text, and its former NULL marker '\N' turned the text ``\N`` into NULL.
COPY_NULL = "\\N"
_COPY_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"))


def _copy_escape(text: str) -> str:
    for raw, escaped in _COPY_ESCAPES:
        text = text.replace(raw, escaped)
    return text


def _copy_column(s: pd.Series, col: sa.Column) -> np.ndarray:
    """One column as COPY text values (object array; NULL as :data:`COPY_NULL`). Repeated values are formatted once."""
    if isinstance(col.type, sa.DateTime):
        ts = as_utc(s)
        codes, uniques = pd.factorize(ts)
        text = np.asarray(pd.DatetimeIndex(uniques).strftime("%Y-%m-%d %H:%M:%S.%f+00:00"), dtype=object)
    elif isinstance(col.type, sa.Date):
        codes, uniques = pd.factorize(s)
        text = np.asarray([str(pd.Timestamp(v).date()) for v in uniques], dtype=object)
    elif isinstance(col.type, sa.Boolean):
        codes, uniques = pd.factorize(s)
        text = np.asarray(["t" if bool(v) else "f" for v in uniques], dtype=object)
    elif isinstance(col.type, sa.Float):
        codes, uniques = pd.factorize(pd.to_numeric(s, errors="coerce").astype("float64"))
        text = np.asarray(uniques, dtype="float64").astype(str).astype(object)  # shortest repr: round-trips
    elif isinstance(col.type, sa.Integer):
        codes, uniques = pd.factorize(s)
        text = np.asarray([str(int(v)) for v in uniques], dtype=object)
    else:
        codes, uniques = pd.factorize(s)
        text = np.asarray([_copy_escape(str(v)) for v in uniques], dtype=object)
    out = np.full(len(s), COPY_NULL, dtype=object)
    ok = codes >= 0
    out[ok] = text[codes[ok]]
    return out


def copy_text(frame: pd.DataFrame, table: sa.Table) -> str:
    """``frame`` as the body of ``COPY table (columns) FROM STDIN`` in text format (see :data:`COPY_NULL`)."""
    if frame.empty:
        return ""
    cols = [_copy_column(frame[c.name].reset_index(drop=True), c).tolist() for c in table.columns]
    return "\n".join(map("\t".join, zip(*cols))) + "\n"


def _restore_types(frame: pd.DataFrame, table: sa.Table) -> pd.DataFrame:
    for c in table.columns:
        if c.name not in frame.columns:
            continue
        if isinstance(c.type, sa.DateTime):
            frame[c.name] = pd.to_datetime(frame[c.name], utc=True, format="ISO8601")
        elif isinstance(c.type, sa.Date):
            frame[c.name] = [None if v is None else pd.Timestamp(v).date() for v in frame[c.name]]
        elif isinstance(c.type, sa.BigInteger):
            frame[c.name] = pd.array(frame[c.name], dtype="Int64") if c.nullable else frame[c.name].astype("int64")
        elif isinstance(c.type, sa.Float):
            frame[c.name] = pd.to_numeric(frame[c.name], errors="coerce").astype("float64")
        elif isinstance(c.type, sa.Boolean):
            frame[c.name] = frame[c.name].astype(bool) if not c.nullable else frame[c.name]
        elif isinstance(c.type, sa.Text):
            frame[c.name] = frame[c.name].astype("string")  # the contracts' string dtype
    return frame

"""The landing zone as a source: the path real data takes (contracts.md layout).

A file that cannot be parsed is not an error of the whole read: it comes back
as a :class:`Fetched` with ``unreadable`` saying why (naming the file), so the
contract quarantines that partition alone. A file in a source's day folder
whose name is no partition of the layout is never read: :meth:`LandingSource.strays`
reports it, so it is not silently ignored.
"""

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from gpu_health.constants import PARTITION, PARTITION_FREQ
from gpu_health.arrow_text import text_values
from gpu_health.contracts import CONTRACTS, FIVE_MINUTE_SOURCES, OPTIONAL_SOURCES, empty_frame
from gpu_health.contracts.validate import FileBatch
from gpu_health.landing import DAILY_SOURCES, file_version, partition_path
from gpu_health.sources.base import ABSENT, DEFAULT_ABSENT_AFTER, DataNotReady, Fetched

_PARTITION_NAME = re.compile(r"^(\d{2})(\d{2})\.parquet$")
_LEADING_HHMM = re.compile(r"^(\d{2})(\d{2})")
PARQUET_MAGIC = b"PAR1"  # first and last four bytes of every Parquet file (Apache Parquet format spec)


def partition_starts(table: str, start, end) -> list[pd.Timestamp]:
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    if table in DAILY_SOURCES:
        return list(pd.date_range(start.normalize(), end, freq="D", inclusive="left"))
    return list(pd.date_range(start, end, freq=PARTITION_FREQ, inclusive="left"))


class LandingSource:
    """Reads ``<landing>/<source>/<day>/<HHMM>.parquet`` files; a missing file is DataNotReady (zero rows for the
    optional serving sources).

    A missing file of a 5-minute source is *late* (DataNotReady) until ``absent_after`` has passed since its
    partition's end, by ``clock`` (the wall clock unless given); then it is *absent*: read as zero rows with
    :attr:`Fetched.silent_family` set, so the partition runs without it and records a ``source_gaps`` row, as a
    silent exporter or Slurm dump does (``DEFAULT_ABSENT_AFTER`` says why the same wait holds for a file). A file
    arriving later changes the partition's version and runs it again."""

    name = "landing"
    ABSENT_FAMILY = "landing file"

    def __init__(self, landing_dir: str | Path, *, absent_after: str | pd.Timedelta = DEFAULT_ABSENT_AFTER,
                 clock=None):
        self.root = Path(landing_dir)
        self.absent_after = pd.Timedelta(absent_after)
        self._clock = clock or (lambda: pd.Timestamp.now(tz="UTC"))

    def absent(self, table: str, p_end: pd.Timestamp | None, now: pd.Timestamp | None = None) -> bool:
        """Whether a missing file of ``table`` for the partition ending ``p_end`` is absent (no longer waited for) at
        ``now`` (the source's clock when None). The daily and calendar files keep their own rules."""
        if table not in FIVE_MINUTE_SOURCES or p_end is None:
            return False
        return (self._clock() if now is None else now) >= p_end + self.absent_after

    def _absent_part(self, path, table: str, p_start, p_end) -> Fetched:
        return Fetched(empty_frame(table), f"{path} (absent: not arrived {self.absent_after} after the partition's end)",
                       p_start, p_end, silent_family=self.ABSENT_FAMILY)

    def _not_ready(self, table: str, missing: list) -> DataNotReady:
        shown = ", ".join(str(p) for p, _ in missing[:3])
        until = max(e for _, e in missing) + self.absent_after if all(e is not None for _, e in missing) else None
        wait = f"; waited for until {until}, then missing data" if until is not None and table in FIVE_MINUTE_SOURCES else ""
        return DataNotReady(f"{table}: {len(missing)} landing file(s) not arrived yet: {shown}{wait}")

    def tables(self) -> frozenset[str]:
        return frozenset(FIVE_MINUTE_SOURCES) | frozenset(OPTIONAL_SOURCES) | DAILY_SOURCES | {"maintenance_windows"}

    def files(self, table: str, start, end) -> list[tuple[Path, pd.Timestamp | None, pd.Timestamp | None]]:
        """(path, partition start, partition end) of every file the window needs."""
        return [(Path(p), s, e) for p, s, e in self._files(table, start, end)]

    def _files(self, table: str, start, end) -> list[tuple[str | Path, pd.Timestamp | None, pd.Timestamp | None]]:
        """:meth:`files`, the 5-minute paths as strings (a Path costs a parse per file: 288 per source and day)."""
        if table == "maintenance_windows":
            return [(partition_path(self.root, table), None, None)]
        step = pd.Timedelta(days=1) if table in DAILY_SOURCES else PARTITION
        starts = partition_starts(table, start, end)
        if table in DAILY_SOURCES or not starts or any(str(getattr(s, "tz", None)) != "UTC" for s in (starts[0], starts[-1])):
            return [(partition_path(self.root, table, s), s, s + step) for s in starts]
        # partition_path's layout, formatted once per day (a day of 5-minute partitions is 288 paths per source)
        base, days, out = f"{self.root}/{table}", {}, []
        for s in starts:
            day = s.normalize()
            if day not in days:
                days[day] = f"{base}/{day:%Y-%m-%d}/"
            out.append((f"{days[day]}{s.hour:02d}{s.minute:02d}.parquet", s, s + step))
        return out

    def read_files(self, table: str, start, end) -> list[Fetched]:
        """One Fetched per file, with the partition it must hold, so a violation names its file."""
        out, missing = [], []
        for path, p_start, p_end in self.files(table, start, end):
            if not path.exists() and table in OPTIONAL_SOURCES:
                # a serving source is optional (contracts.models.OPTIONAL_SOURCES): no file = nothing served
                out.append(Fetched(empty_frame(table), f"{path} (absent: no serving traffic)", p_start, p_end))
                continue
            if not path.exists() and self.absent(table, p_end):
                out.append(self._absent_part(path, table, p_start, p_end))
                continue
            if not path.exists():
                missing.append((path, p_end))
                continue
            out.append(read_file(path, table, p_start, p_end))
        if missing:
            if table == "maintenance_windows":
                # absent is not "no planned maintenance": the calendar is a file written whole (an empty one says
                # there is none), so a missing one is unreadable and the stored calendar is kept (steps.ingest)
                return [Fetched(empty_frame(table), str(missing[0][0]),
                                unreadable=f"{missing[0][0]}: absent (no calendar file)")]
            raise self._not_ready(table, missing)
        return out

    def read_batches(self, table: str, start, end) -> list:
        """:meth:`read_files`, faster: each run of consecutive files with one physical schema (every file of a
        healthy window) is read in one pyarrow call as a :class:`~gpu_health.contracts.validate.FileBatch`.

        The per-file meaning is kept: a file whose footer cannot be read, or whose schema differs from its
        neighbours', breaks the run and is read alone by :func:`read_file` (so an unreadable file is named
        with the same diagnosis), and the validator judges each file of a batch on its own partition.
        Reading file by file costs a pandas conversion per file (~3 ms each, 288 per source and day).
        """
        entries, missing, absent = [], [], None
        for path, p_start, p_end in self._files(table, start, end):
            if not os.path.exists(path) and table in OPTIONAL_SOURCES:
                # one zero-row stand-in for every absent file of the call (zero rows: nothing to change in it)
                absent = empty_frame(table) if absent is None else absent
                entries.append(Fetched(absent, f"{path} (absent: no serving traffic)", p_start, p_end))
            elif not os.path.exists(path) and self.absent(table, p_end):
                entries.append(self._absent_part(path, table, p_start, p_end))
            elif not os.path.exists(path):
                missing.append((path, p_end))
            else:
                entries.append((path, p_start, p_end))
        if missing:
            if table == "maintenance_windows":
                # absent is not "no planned maintenance": the calendar is a file written whole (an empty one says
                # there is none), so a missing one is unreadable and the stored calendar is kept (steps.ingest)
                return [Fetched(empty_frame(table), str(missing[0][0]),
                                unreadable=f"{missing[0][0]}: absent (no calendar file)")]
            raise self._not_ready(table, missing)
        out, run = [], []
        fmt = _format(table)
        for e in entries + [None]:
            if isinstance(e, tuple):
                frag = _fragment(str(e[0]), fmt)
                if frag is not None and run and not run[-1][1].physical_schema.equals(frag.physical_schema, check_metadata=True):
                    out += _read_run(run, table)
                    run = []
                if frag is not None:
                    run.append((e, frag))
                    continue
                out += _read_run(run, table)
                run = []
                out.append(read_file(Path(e[0]), table, e[1], e[2]))
                continue
            out += _read_run(run, table)
            run = []
            if e is not None:
                out.append(e)
        return out

    def read(self, table: str, start, end) -> Fetched:
        parts = self.read_files(table, start, end)
        frames = [p.frame for p in parts if len(p.frame)]
        frame = pd.concat(frames, ignore_index=True) if frames else (parts[0].frame if parts else empty_frame(table))
        origin = parts[0].origin if len(parts) == 1 else f"{self.root}/{table} ({len(parts)} files)"
        return Fetched(frame, origin)

    def strays(self, table: str, start, end) -> list[Fetched]:
        """Files in the day folders of a 5-minute source's window that no partition reads.

        The layout is ``<source>/<YYYY-MM-DD>/<HHMM>.parquet`` with HHMM a 5-minute
        boundary; anything else there (``1412.parquet``, ``1410.parquet.bak``,
        ``gpu.parquet``) is reported once, under the partition its leading HHMM
        falls in (the day's first partition when it has none), by the run that
        covers that partition. Hidden files (a writer's temp file) are skipped.
        """
        if table in DAILY_SOURCES or table == "maintenance_windows" or start is None:
            return []
        start, end = pd.Timestamp(start), pd.Timestamp(end)
        out = []
        for day in pd.date_range(start.normalize(), end, freq="D", inclusive="left"):
            folder = self.root / table / f"{day:%Y-%m-%d}"
            if not folder.is_dir():
                continue
            for path in sorted(folder.iterdir()):
                if path.name.startswith("."):
                    continue
                m = _PARTITION_NAME.match(path.name)
                if m and path.is_file() and int(m.group(2)) % 5 == 0 and int(m.group(1)) < 24 and int(m.group(2)) < 60:
                    continue  # a partition file: its own run reads it
                lead = _LEADING_HHMM.match(path.name)
                home = day
                if lead and int(lead.group(1)) < 24 and int(lead.group(2)) < 60:
                    home = day + pd.Timedelta(hours=int(lead.group(1)), minutes=int(lead.group(2)))
                home = home.floor(PARTITION_FREQ)
                if not (start <= home < end):
                    continue
                out.append(Fetched(empty_frame(table), str(path), home, home + PARTITION,
                                   ignored=f"{path}: not a partition file of the landing layout "
                                           f"({table}/<YYYY-MM-DD>/<HHMM>.parquet, HHMM on a 5-minute boundary); "
                                           f"not read -- rename it to its partition's name for its rows to land"))
        return out

    def version(self, table: str, start, now: pd.Timestamp | None = None) -> str | None:
        """The file's token (it changes when the file is replaced); ``ABSENT`` once a missing file is absent at
        ``now`` (the source's clock when None); None while it is late."""
        token = file_version(self.root, table, start)
        if token is None and start is not None and self.absent(table, pd.Timestamp(start) + PARTITION, now):
            return ABSENT
        return token


def read_file(path: Path, table: str, start, end) -> Fetched:
    """One landing file; an unparseable one comes back empty with the reason, naming the file.

    pyarrow's own message names only ``'<Buffer>'``: the path, the size and what
    the first bytes look like (no Parquet magic: text, e.g. a CSV renamed
    ``.parquet``) are what an operator needs to find and fix the file.
    """
    try:
        return Fetched(pd.read_parquet(path), str(path), start, end)
    except (pa.ArrowException, OSError, ValueError) as err:
        return Fetched(empty_frame(table), str(path), start, end, unreadable=f"{path}: {_diagnose(path, err)}")


_LOCAL = pafs.LocalFileSystem()
_FORMATS: dict[str, pads.ParquetFileFormat] = {}


def _format(table: str) -> pads.ParquetFileFormat:
    """Parquet reading for ``table``: its text columns read as dictionaries (the distinct values once, then
    codes: Parquet stores them so), turned back into the same plain values by :func:`_to_pandas`."""
    if table not in _FORMATS:
        text = [n for n, c in CONTRACTS[table].to_schema().columns.items() if isinstance(c.dtype.type, pd.StringDtype)]
        _FORMATS[table] = pads.ParquetFileFormat(read_options=pads.ParquetReadOptions(dictionary_columns=text))
    return _FORMATS[table]


def _fragment(path: str, fmt: pads.ParquetFileFormat):
    """The file as a pyarrow fragment with its footer read (schema, row count); None when that fails."""
    try:
        frag = fmt.make_fragment(path, filesystem=_LOCAL)
        frag.physical_schema  # noqa: B018 -- reads the footer: a broken file fails here, and is read alone
        frag.metadata  # noqa: B018
        return frag
    except (pa.ArrowException, OSError, ValueError):
        return None


def _read_run(run: list, table: str) -> list:
    """A run of files with one physical schema: one FileBatch (one file alone: :func:`read_file`). Any error
    reading the run falls back to reading its files one by one, so each is judged (and diagnosed) alone."""
    if not run:
        return []
    if len(run) == 1:
        (path, p_start, p_end), _ = run[0]
        return [read_file(Path(path), table, p_start, p_end)]
    frags = [frag for _, frag in run]
    try:
        lengths = np.array([frag.metadata.num_rows for frag in frags], dtype=np.int64)
        arrow = pads.FileSystemDataset(frags, frags[0].physical_schema, frags[0].format, _LOCAL).to_table()
        if arrow.num_rows != int(lengths.sum()):
            raise ValueError("row count differs from the files' footers")
        frame, distinct, codes = _to_pandas(arrow)
    except (pa.ArrowException, OSError, ValueError):
        return [read_file(Path(path), table, p_start, p_end) for (path, p_start, p_end), _ in run]
    return [FileBatch(frame, [str(p) for (p, _, _), _ in run], [s for (_, s, _), _ in run],
                      [e for (_, _, e), _ in run], lengths, distinct, codes)]


_PY_TEXT = pd.StringDtype("python")


def _to_pandas(table: pa.Table) -> tuple[pd.DataFrame, dict[str, np.ndarray], dict[str, tuple[np.ndarray, int]]]:
    """What ``pd.read_parquet`` returns for the files of ``table`` (read with text columns as dictionaries), and
    each text column's distinct non-null values (a superset: the files' dictionaries) and its dictionary codes
    (one per row, equal exactly when the values are; with the code of a missing value).

    pandas converts a text column value by value into new Python strings (~90 ns each: a day of GPU telemetry
    has 8.6 M text cells); from the dictionary the distinct values are converted once and the column points at
    them, which also makes later hashing of the column (distinct values, duplicate keys) cheaper. Same values,
    same dtypes: only columns pandas itself turns into ``string[python]`` are built this way; any other
    dictionary column is decoded back to its plain values first."""
    plain = pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in table.schema],
                      metadata=table.schema.metadata)
    names = table.column_names
    template = plain.empty_table().to_pandas()
    text = [] if len(set(names)) != len(names) or not _default_range(template.index) else [
        n for n in names if pa.types.is_string(plain.field(n).type) and n in template.columns
        and template[n].dtype == _PY_TEXT]
    for i, f in enumerate(table.schema):
        if pa.types.is_dictionary(f.type) and f.name not in text:
            table = table.set_column(i, plain.field(i), table.column(i).cast(plain.field(i).type))
    rest = table.drop_columns(text).to_pandas() if text else table.to_pandas()
    if text and (not _default_range(rest.index) or list(rest.columns) != [n for n in names if n not in text]):
        return table.cast(plain).to_pandas(), {}, {}
    distinct, codes = {}, {}
    for name in text:
        values, distinct[name], code = text_values(table.column(name))
        if code is not None:
            codes[name] = code
        rest.insert(names.index(name), name, values)
    return rest, distinct, codes


def _default_range(index: pd.Index) -> bool:
    return isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1




def _diagnose(path: Path, err: Exception) -> str:
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(64)
            fh.seek(max(0, size - 4))
            tail = fh.read(4)
    except OSError as os_err:
        return f"unreadable ({os_err.__class__.__name__}: {os_err})"
    detail = str(err).replace("Could not open Parquet input source '<Buffer>': ", "").strip()
    if size == 0:
        what = "empty file (0 bytes)"
    elif not head.startswith(PARQUET_MAGIC):
        text = head and all(32 <= b < 127 or b in (9, 10, 13) for b in head)
        what = f"not a Parquet file ({size:,} bytes{', text: a CSV or log renamed .parquet?' if text else ''})"
    elif tail != PARQUET_MAGIC:
        what = f"truncated Parquet file ({size:,} bytes, no footer: cut short or still being written)"
    else:
        what = f"corrupt Parquet file ({size:,} bytes)"
    return f"{what}; {err.__class__.__name__}: {detail}"

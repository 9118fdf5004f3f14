"""The landing zone as a source: the path real data takes (contracts.md layout)."""

from pathlib import Path

import pandas as pd

from gpu_health.contracts import FIVE_MINUTE_SOURCES, empty_frame
from gpu_health.landing import DAILY_SOURCES, file_version, partition_path
from gpu_health.sources.base import DataNotReady, Fetched

FIVE_MINUTES = pd.Timedelta(minutes=5)


def partition_starts(table: str, start, end) -> list[pd.Timestamp]:
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    if table in DAILY_SOURCES:
        return list(pd.date_range(start.normalize(), end, freq="D", inclusive="left"))
    return list(pd.date_range(start, end, freq="5min", inclusive="left"))


class LandingSource:
    """Reads ``<landing>/<source>/<day>/<HHMM>.parquet`` files; a missing file is DataNotReady."""

    name = "landing"

    def __init__(self, landing_dir: str | Path):
        self.root = Path(landing_dir)

    def tables(self) -> frozenset[str]:
        return frozenset(FIVE_MINUTE_SOURCES) | DAILY_SOURCES | {"maintenance_windows"}

    def files(self, table: str, start, end) -> list[tuple[Path, pd.Timestamp | None, pd.Timestamp | None]]:
        """(path, partition start, partition end) of every file the window needs."""
        if table == "maintenance_windows":
            return [(partition_path(self.root, table), None, None)]
        step = pd.Timedelta(days=1) if table in DAILY_SOURCES else FIVE_MINUTES
        return [(partition_path(self.root, table, s), s, s + step) for s in partition_starts(table, start, end)]

    def read_files(self, table: str, start, end) -> list[Fetched]:
        """One Fetched per file, with the partition it must hold, so a violation names its file."""
        out, missing = [], []
        for path, p_start, p_end in self.files(table, start, end):
            if not path.exists():
                missing.append(path)
                continue
            out.append(Fetched(pd.read_parquet(path), str(path), p_start, p_end))
        if missing:
            if table == "maintenance_windows":
                return [Fetched(empty_frame(table), f"{missing[0]} (absent: no planned maintenance)")]
            shown = ", ".join(str(p) for p in missing[:3])
            raise DataNotReady(f"{table}: {len(missing)} landing file(s) not arrived yet: {shown}")
        return out

    def read(self, table: str, start, end) -> Fetched:
        parts = self.read_files(table, start, end)
        frames = [p.frame for p in parts if len(p.frame)]
        frame = pd.concat(frames, ignore_index=True) if frames else (parts[0].frame if parts else empty_frame(table))
        origin = parts[0].origin if len(parts) == 1 else f"{self.root}/{table} ({len(parts)} files)"
        return Fetched(frame, origin)

    def version(self, table: str, start) -> str | None:
        return file_version(self.root, table, start)

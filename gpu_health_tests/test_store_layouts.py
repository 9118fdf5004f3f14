"""The tables moved from SQL rows to the columnar store read back exactly as SQL held them, and a step's
tables still commit together across the two stores.

The pipeline runs once (bulk path, a small cluster, an ECC fault that pages, a maintenance window) into a warehouse
of the catalogue's layout; every moved table is then written through the layout before (SQL rows: a warehouse with
``columnar`` = the minute-grain tables only) on SQLite and PostgreSQL and must read back what the store reads;
:func:`~gpu_health.storage.relayout.relayout` then moves the SQL copy into a store, which must read back the same.
"""

from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa
import yaml

from gpu_health import catalog
from gpu_health.cli import run
from gpu_health.storage.relayout import relayout, sql_held
from gpu_health.storage.schema import COLUMNAR_TABLES, grain, partition_column
from gpu_health.storage.telemetry_store import OWNER_FILE, Staged
from gpu_health.storage.warehouse import Warehouse, engine_for
from gpu_health_tests.services.postgres import fresh_database

START, END = "2026-11-03T23:20:00Z", "2026-11-04T00:10:00Z"  # across midnight: two date folders
ECC = {"kind": "gpu_ecc_fault", "start": "2026-11-03T23:22:00Z", "duration": "60m", "severity": "high",
       "scope": {"region": "us-east", "nodes": 1}}
MAINTENANCE = {"kind": "maintenance", "start": "2026-11-03T23:30:00Z", "duration": "30m", "severity": "low",
               "scope": {"region": "eu-west", "nodes": 2}}
MINUTE_GRAIN = frozenset(t for t in COLUMNAR_TABLES if catalog.table(t).cadence == "minute")
MOVED = sorted(COLUMNAR_TABLES - MINUTE_GRAIN)


@pytest.fixture(autouse=True)
def database_reads(monkeypatch):
    monkeypatch.setenv("GPU_HEALTH_WAREHOUSE_CACHE", "0")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[str, dict[str, pd.DataFrame]]:
    """(the warehouse URL, every moved table as its columnar store reads it back)."""
    folder = tmp_path_factory.mktemp("layout")
    spec = folder / "scenario.yaml"
    spec.write_text(yaml.safe_dump({"seed": 3, "start": START, "end": END, "cluster": {"gpus": 96},
                                    "incidents": [ECC, MAINTENANCE]}))
    url = f"sqlite:///{folder / 'columnar.db'}"
    run(START, END, scenario=str(spec), warehouse=url, quiet=True, direct=True)
    wh = Warehouse(url)
    frames = {t: wh.read_window(t) for t in MOVED}
    assert all(len(frames[t]) for t in MOVED), {t: len(f) for t, f in frames.items()}
    assert set(sa.inspect(wh.engine).get_table_names()).isdisjoint(COLUMNAR_TABLES)
    return url, frames


def _window(frame: pd.DataFrame, table: str):
    col = partition_column(table)
    return frame[col].min().floor("5min"), frame[col].max().floor("5min") + pd.Timedelta(minutes=5)


def _by_key(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    return frame.sort_values(grain(catalog.table(table).model, partition_column(table))).reset_index(drop=True)


def test_every_moved_table_reads_back_from_sqlite_rows_as_from_the_store(written, tmp_path):
    _, frames = written
    old = Warehouse(f"sqlite:///{tmp_path / 'sql.db'}", tmp_path / "sql.telemetry", columnar=MINUTE_GRAIN)
    for table, frame in frames.items():
        old.replace_window(table, frame, *_window(frame, table))
        # values, dtypes, nulls and row order (SQLite's clustered key order = the store's key order)
        pd.testing.assert_frame_equal(old.read_window(table), frame, check_exact=True, obj=table)
    assert set(sql_held(old.url)) == set(MOVED)
    assert not (tmp_path / "sql.telemetry").exists()  # nothing of these went to a store

    # the layout before, moved: the store reads back what the SQL rows held, and the SQL tables are gone
    moved = relayout(old.url, tmp_path / "sql.telemetry", drop=True)
    assert {t: m["rows"] for t, m in moved.items()} == {t: len(f) for t, f in frames.items()}
    assert sql_held(old.url) == []
    new = Warehouse(old.url, tmp_path / "sql.telemetry")
    for table, frame in frames.items():
        pd.testing.assert_frame_equal(new.read_window(table), frame, check_exact=True, obj=table)
    engine_for(old.url).dispose()


def test_every_moved_table_reads_back_from_postgresql_rows_as_from_the_store(written, postgres_url, tmp_path):
    _, frames = written
    with fresh_database(postgres_url, "layout") as url:
        old = Warehouse(url, tmp_path / "pg.telemetry", columnar=MINUTE_GRAIN)
        for table, frame in frames.items():
            old.replace_window(table, frame, *_window(frame, table))
            # PostgreSQL returns rows in no defined order: compared in key order
            pd.testing.assert_frame_equal(_by_key(old.read_window(table), table), frame, check_exact=True, obj=table)
        engine_for(url).dispose()


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
            and p.name != ".lock"}


@pytest.mark.parametrize("fail", ["before_publish", "at_commit"])
def test_a_failed_step_write_leaves_both_stores_as_they_were(written, tmp_path, monkeypatch, fail):
    """The loss tree's write (goodput_leaves, goodput_node_states columnar; goodput_states SQL) fails either while
    the SQL rows go in (the files staged, not yet published) or at the commit after the files were published:
    every table, file and byte is as before, and no temporary or backup file is left."""
    url, frames = written
    wh = Warehouse(f"sqlite:///{tmp_path / 'w.db'}", tmp_path / "store")
    tables = ["goodput_leaves", "goodput_node_states", "goodput_states"]
    source = Warehouse(url)
    state = {t: source.read_window(t) for t in tables}
    start, end = _window(state["goodput_states"], "goodput_states")
    wh.replace_windows(state, start, end)
    before_files = _files(tmp_path / "store")
    before = {t: wh.read_window(t) for t in tables}
    halved = {t: f.assign(gpu_minutes=f["gpu_minutes"] / 2) for t, f in state.items()}

    if fail == "before_publish":
        real = Warehouse._insert

        def die(self, conn, table, frame):
            if table.name == "goodput_states":
                raise RuntimeError("died")
            return real(self, conn, table, frame)
        monkeypatch.setattr(Warehouse, "_insert", die)
    else:
        real = Staged.publish

        def publish_then_die(self):  # the files are in place; the SQL commit then fails
            real(self)
            assert self.published and any((tmp_path / "store").rglob(".*.bak"))
            raise RuntimeError("died")
        monkeypatch.setattr(Staged, "publish", publish_then_die)
    with pytest.raises(RuntimeError, match="died"):
        wh.replace_windows(halved, start, end)
    monkeypatch.undo()
    monkeypatch.setenv("GPU_HEALTH_WAREHOUSE_CACHE", "0")
    assert _files(tmp_path / "store") == before_files
    for t in tables:
        pd.testing.assert_frame_equal(wh.read_window(t), before[t], obj=t)
    # and the same write, not failing, changes all three
    wh.replace_windows(halved, start, end)
    for t in tables:
        assert (wh.read_window(t)["gpu_minutes"].sum() * 2) == pytest.approx(before[t]["gpu_minutes"].sum()), t
    assert not [p for p in (tmp_path / "store").rglob(".*") if p.name not in (".lock", OWNER_FILE)]

"""The warehouse: idempotent partition writes, racing writers, round trips, schema drift.

Every behaviour that differs between the two backends (transactions, locks,
type round trips) runs on SQLite and on a real PostgreSQL 15 (``postgres_url``,
started by the test session); each test gets a database of its own.
"""

import datetime
import difflib
import threading
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa
import yaml

from gpu_health.contracts import CONTRACTS, FIVE_MINUTE_SOURCES, PARTITION_COLUMN
from gpu_health.contracts.validate import validate_frame
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window, cost_capacity, maintenance_windows
from gpu_health.storage.schema import COLUMNAR_TABLES, grain, metadata, render_sql
from gpu_health.storage.telemetry_store import TelemetryStore
from gpu_health.storage.warehouse import FrameCache, Warehouse
from gpu_health_tests.services.postgres import fresh_database
from gpu_health_tests.conftest import REPO, THERMAL_WEEK

T0 = pd.Timestamp("2026-11-03T14:00:00Z")
T1 = T0 + pd.Timedelta(minutes=5)
DAY0 = T0.normalize()
DAY1 = DAY0 + pd.Timedelta(days=1)
FIVE_MIN = pd.Timedelta(minutes=5)
CACHE_ENV = "GPU_HEALTH_WAREHOUSE_CACHE"
SCHEMA_SQL = REPO / "sql" / "schema.sql"
REGENERATE = ".venv/bin/python -m gpu_health.storage.schema sql/schema.sql"


def bounds(table: str):
    if table == "cost_capacity":
        return DAY0, DAY1
    if table == "maintenance_windows":
        return None, None
    return T0, T1


def sort_by_grain(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    keys = grain(CONTRACTS[table], PARTITION_COLUMN[table])
    return frame.sort_values(keys).reset_index(drop=True)


@pytest.fixture(scope="module")
def frames() -> dict[str, pd.DataFrame]:
    """Every source table of one simulated partition, as its contract holds it.

    The thermal week plus a benign kernel upgrade at a sub-second time (so that
    change_events has a row); a few optional fields are blanked and a link is
    down, so that nulls in nullable ints/floats and False bools travel too.
    """
    raw = yaml.safe_load(THERMAL_WEEK.read_text())
    raw["changes"] = [{"kind": "kernel_upgrade", "ts": "2026-11-03T14:01:30.250Z", "scope": {"region": "eu-west", "nodes": 4},
                       "from_version": "6.8.0-49-generic", "to_version": "6.8.0-51-generic"}]
    raw["cluster"] = {"profile": raw["cluster"], "serving": True,  # the serving tables too
                      "facility": True, "platform": True}  # the facility (#18) and kube (#17) tables
    scen = load_scenario(raw)
    raw_frames = Window(scen, T0, T1).tables()
    gpu = raw_frames["gpu_telemetry"].copy()
    blank = gpu.index[::97]
    for col in ("throttle_reasons", "ecc_sbe_delta", "ecc_dbe_delta", "sm_active", "tensor_active"):
        gpu[col] = gpu[col].astype("object")
        gpu.loc[blank, col] = None
    raw_frames["gpu_telemetry"] = gpu
    net = raw_frames["network_telemetry"].copy()
    net.loc[net.index[:8], "link_up"] = False
    raw_frames["network_telemetry"] = net
    raw_frames["cost_capacity"] = cost_capacity(scen, DAY0)
    raw_frames["maintenance_windows"] = maintenance_windows(scen)
    out = {}
    for table in CONTRACTS:
        start, end = bounds(table)
        checked = validate_frame(raw_frames[table], table, start=start, end=end, origin="simulator")
        assert checked.rejects.empty, f"{table}: the fixture itself breaks its contract"
        assert len(checked.valid), f"{table}: the fixture has no rows"
        out[table] = checked.valid
    return out


@pytest.fixture(autouse=True)
def database_reads(monkeypatch):
    """Reads go to the database: the process's write-through cache would otherwise serve back the very
    frames a test wrote (its own test below checks that cached reads equal database reads)."""
    monkeypatch.setenv(CACHE_ENV, "0")


@pytest.fixture
def pg_url(postgres_url):
    """A fresh database on the session's PostgreSQL server, dropped afterwards."""
    with fresh_database(postgres_url, "wh") as url:
        yield url


@pytest.fixture
def telemetry_dir(tmp_path) -> str:
    """The test's own columnar telemetry store (the PostgreSQL default, var/telemetry/, is shared)."""
    return str(tmp_path / "telemetry")


@pytest.fixture(params=["sqlite", "postgresql"])
def warehouse_url(request, sqlite_url):
    if request.param == "sqlite":
        return sqlite_url
    return request.getfixturevalue("pg_url")


# --- idempotent writes --------------------------------------------------------------------
def test_rerunning_a_partition_keeps_one_copy_and_leaves_neighbours(warehouse_url, frames, telemetry_dir):
    wh = Warehouse(warehouse_url, telemetry_dir)
    gpu = frames["gpu_telemetry"]
    before = gpu.assign(ts=gpu["ts"] - pd.Timedelta(minutes=5))  # the previous partition
    wh.replace_window("gpu_telemetry", before, T0 - pd.Timedelta(minutes=5), T0)
    assert wh.replace_window("gpu_telemetry", gpu, T0, T1) == len(gpu)
    assert wh.replace_window("gpu_telemetry", gpu, T0, T1) == len(gpu)
    assert wh.count("gpu_telemetry") == 2 * len(gpu)
    got = wh.read_window("gpu_telemetry", T0, T1)
    assert len(got) == len(gpu)
    assert not got.duplicated(["ts", "gpu_uuid"]).any()

    # a re-run with fewer rows leaves exactly those rows: nothing stale survives
    fewer = gpu[gpu["region"] == "us-east"]
    wh.replace_window("gpu_telemetry", fewer, T0, T1)
    got = wh.read_window("gpu_telemetry", T0, T1)
    assert sorted(got["gpu_uuid"].unique()) == sorted(fewer["gpu_uuid"].unique())
    assert len(got) == len(fewer)
    # the neighbouring partition is untouched by both re-runs
    assert len(wh.read_window("gpu_telemetry", T0 - pd.Timedelta(minutes=5), T0)) == len(before)

    # an empty frame empties the window (a partition in which nothing was reported)
    wh.replace_window("gpu_telemetry", gpu.iloc[:0], T0, T1)
    assert wh.read_window("gpu_telemetry", T0, T1).empty
    assert wh.count("gpu_telemetry") == len(before)


def _race(url: str, telemetry_dir: str, table: str, versions: list[pd.DataFrame], start, end, **kw) -> list[BaseException]:
    """Every frame in ``versions`` written to the same window at once, one thread each."""
    barrier = threading.Barrier(len(versions))
    errors: list[BaseException] = []

    def write(frame):
        try:
            wh = Warehouse(url, telemetry_dir)
            barrier.wait()
            wh.replace_window(table, frame, start, end, **kw)
        except BaseException as err:  # collected and reported by the test
            errors.append(err)

    threads = [threading.Thread(target=write, args=(f,)) for f in versions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_two_runs_racing_one_partition_leave_exactly_one_copy(warehouse_url, frames, telemetry_dir):
    gpu = frames["gpu_telemetry"]
    first = gpu
    second = gpu.assign(power_w=gpu["power_w"] + 1.0)  # the other run read a corrected file
    wh = Warehouse(warehouse_url, telemetry_dir)
    wh.replace_window("gpu_telemetry", gpu.iloc[:10], T0, T1)  # an earlier run's rows are there
    for round_ in range(3):
        errors = _race(warehouse_url, telemetry_dir, "gpu_telemetry", [first, second], T0, T1)
        assert errors == [], f"round {round_}: a racing writer failed: {errors!r}"
        got = sort_by_grain(wh.read_window("gpu_telemetry", T0, T1), "gpu_telemetry")
        assert len(got) == len(gpu)
        assert not got.duplicated(["ts", "gpu_uuid"]).any()
        # one run's rows, whole: never a mix of both, nor of the earlier run
        expected = [sort_by_grain(f, "gpu_telemetry")["power_w"] for f in (first, second)]
        assert any(got["power_w"].equals(e) for e in expected), f"round {round_}: rows of both runs mixed"


def test_where_narrows_the_replaced_rows_to_one_source(warehouse_url, frames, telemetry_dir):
    wh = Warehouse(warehouse_url, telemetry_dir)

    def rejects(table: str, bad_rows: int, column: str, value) -> pd.DataFrame:
        frame = frames[table].copy()
        frame[column] = frame[column].astype("float64")
        frame.loc[frame.index[:bad_rows], column] = value
        out = validate_frame(frame, table, start=T0, end=T1, origin=f"landing/{table}/2026-11-03/1400.parquet").rejects
        assert out["row_index"].nunique() == bad_rows
        return out

    wh.replace_window("source_rejects", rejects("gpu_telemetry", 3, "gpu_util_pct", 150.0), T0, T1, where={"source": "gpu_telemetry"})
    wh.replace_window("source_rejects", rejects("node_telemetry", 2, "cpu_util_pct", -1.0), T0, T1, where={"source": "node_telemetry"})
    # gpu_telemetry's partition is re-run after a fix: one bad row left
    wh.replace_window("source_rejects", rejects("gpu_telemetry", 1, "gpu_util_pct", 150.0), T0, T1, where={"source": "gpu_telemetry"})

    got = wh.read_window("source_rejects", T0, T1)
    assert got.groupby("source")["row_index"].nunique().to_dict() == {"gpu_telemetry": 1, "node_telemetry": 2}
    node = wh.read_window("source_rejects", T0, T1, where={"source": "node_telemetry"}, columns=["origin", "column", "reason"])
    assert list(node.columns) == ["origin", "column", "reason"]
    assert set(node["origin"]) == {"landing/node_telemetry/2026-11-03/1400.parquet"}
    assert set(node["column"]) == {"cpu_util_pct"}
    # a list in where= selects several sources
    assert len(wh.read_window("source_rejects", T0, T1, where={"source": ["gpu_telemetry", "node_telemetry"]})) == 3


# --- round trips -------------------------------------------------------------------------
def test_every_source_table_round_trips_values_and_dtypes(warehouse_url, frames, telemetry_dir):
    wh = Warehouse(warehouse_url, telemetry_dir)
    for table, frame in frames.items():
        start, end = bounds(table)
        wh.replace_window(table, frame, start, end)
    for table, frame in frames.items():
        start, end = bounds(table)
        back = wh.read_window(table, start, end)
        assert list(back.columns) == list(frame.columns), table
        assert len(back) == len(frame), table
        # what the warehouse hands back is what the contract holds: validate it as a source
        checked = validate_frame(back, table, start=start, end=end, origin=f"warehouse:{table}")
        assert checked.rejects.empty, f"{table}: {checked.reject_counts}"
        pd.testing.assert_frame_equal(sort_by_grain(checked.valid, table), sort_by_grain(frame, table),
                                      check_exact=False, rtol=1e-12, obj=table)
        # and the types come back without the contract's help (except strings: object)
        for col in frame.columns:
            if str(frame[col].dtype) not in ("string", "object"):
                assert back[col].dtype == frame[col].dtype, f"{table}.{col}: {back[col].dtype} != {frame[col].dtype}"

    gpu = wh.read_window("gpu_telemetry", T0, T1)
    assert str(gpu["ts"].dtype) == "datetime64[ns, UTC]"
    assert str(gpu["throttle_reasons"].dtype) == "Int64"
    assert gpu["throttle_reasons"].isna().sum() == frames["gpu_telemetry"]["throttle_reasons"].isna().sum() > 0
    assert gpu["sm_active"].isna().sum() == frames["gpu_telemetry"]["sm_active"].isna().sum() > 0
    net = wh.read_window("network_telemetry", T0, T1)
    assert net["link_up"].dtype == bool and (~net["link_up"]).sum() == 8
    change = wh.read_window("change_events", T0, T1)
    assert change["ts"].tolist() == [pd.Timestamp("2026-11-03T14:01:30.250Z")]  # sub-second kept
    cost = wh.read_window("cost_capacity", DAY0, DAY1)
    assert all(type(d) is datetime.date for d in cost["date"]) and set(cost["date"]) == {DAY0.date()}
    jobs = wh.read_window("job_metadata", T0, T1)
    assert jobs["sla_deadline"].isna().any() and jobs["sla_deadline"].notna().any()


# every text the contracts accept (NUL-free unicode, within the bounds) must come back exactly, on both backends
TRICKY_TEXTS = [
    "\\N", "\\N\\N", "NULL", "", " ", "\\", "back\\slash", "tab\there", "new\nline", "cr\rlf\r\n", '"quoted"', "'single'",
    "comma,separated", "semi;colon", "\\.", "end\\", "\\t literal", "ünïcødé ✓ 日本語 🚀", "\u2028 line sep", "a" * 4096,
]


def test_any_text_round_trips_exactly(warehouse_url, frames, telemetry_dir):
    # on PostgreSQL rows go in with COPY: the text \N once became NULL and failed a required column
    changes = frames["change_events"]
    base = changes.iloc[[0] * len(TRICKY_TEXTS)].reset_index(drop=True)
    base["event_id"] = [f"chg-{i}" for i in range(len(TRICKY_TEXTS))]
    base["description"] = TRICKY_TEXTS                                  # required
    base["from_version"] = list(reversed(TRICKY_TEXTS))                 # nullable: text, not NULL
    base["to_version"] = [None if i % 2 else t for i, t in enumerate(TRICKY_TEXTS)]  # and real NULLs
    checked = validate_frame(base, "change_events", start=T0, end=T1, origin="test")
    assert checked.rejects.empty, checked.reject_counts
    wh = Warehouse(warehouse_url, telemetry_dir)
    wh.replace_window("change_events", checked.valid, T0, T1)
    back = wh.read_window("change_events", T0, T1).sort_values("event_id", key=lambda s: s.str[4:].astype(int))
    assert back["description"].tolist() == TRICKY_TEXTS
    assert back["from_version"].tolist() == list(reversed(TRICKY_TEXTS))
    assert [None if pd.isna(v) else v for v in back["to_version"]] == [None if i % 2 else t for i, t in enumerate(TRICKY_TEXTS)]
    # the rejects table too: its row JSON and values carry whatever a bad file held
    rejects = pd.DataFrame({"source": "change_events", "partition_start": T0, "origin": "\\N", "row_index": range(3),
                            "column": ["\\N", None, ""], "check": "x", "value": ["\\N", "", None],
                            "reason": "tab\there", "row_json": ['{"a": "\\\\N"}', "{}", "\\N"]})
    wh.replace_window("source_rejects", rejects, T0, T1, where={"source": "change_events"})
    got = wh.read_window("source_rejects", T0, T1).sort_values("row_index").reset_index(drop=True)
    for col in ("origin", "column", "value", "reason", "row_json"):
        assert [None if pd.isna(v) else v for v in got[col]] == [None if pd.isna(v) else v for v in rejects[col]], col


def test_a_daily_table_read_for_a_window_gets_the_days_it_overlaps(warehouse_url, frames, telemetry_dir):
    wh = Warehouse(warehouse_url, telemetry_dir)
    cost = frames["cost_capacity"]
    next_day = cost.assign(date=[(DAY1).date()] * len(cost), capacity_gpus=cost["capacity_gpus"] + 8)
    wh.replace_window("cost_capacity", cost, DAY0, DAY1)
    wh.replace_window("cost_capacity", next_day, DAY1, DAY1 + pd.Timedelta(days=1))
    # a 5-minute partition's window reads its day's row (the day overlaps the window) ...
    assert set(wh.read_window("cost_capacity", DAY0, T1)["date"]) == {DAY0.date()}
    assert set(wh.read_window("cost_capacity", T0, T1)["date"]) == {DAY0.date()}
    # ... a window ending at midnight does not read the next day, one past it does
    assert set(wh.read_window("cost_capacity", DAY0, DAY1)["date"]) == {DAY0.date()}
    assert set(wh.read_window("cost_capacity", T0, DAY1 + FIVE_MIN)["date"]) == {DAY0.date(), DAY1.date()}
    # re-writing one day leaves the other
    wh.replace_window("cost_capacity", cost, DAY0, DAY1)
    assert wh.count("cost_capacity") == 2 * len(cost)


def test_reads_from_the_write_through_cache_equal_database_reads(warehouse_url, frames, telemetry_dir):
    wh = Warehouse(warehouse_url, telemetry_dir, cache=FrameCache())
    wh.replace_window("gpu_telemetry", frames["gpu_telemetry"], T0, T1)
    wh.replace_window("cost_capacity", frames["cost_capacity"], DAY0, DAY1)
    minute = T0 + pd.Timedelta(minutes=2)
    windows = [("gpu_telemetry", T0, T1, None), ("gpu_telemetry", minute, minute + pd.Timedelta(minutes=1), None),
               ("gpu_telemetry", T0, T1, ("ts", "gpu_uuid", "throttle_reasons")),
               ("cost_capacity", DAY0, DAY1, None), ("cost_capacity", DAY0, T1, None), ("cost_capacity", T0, T1, None)]
    served = {w: wh.read_window(w[0], w[1], w[2], columns=list(w[3] or []) or None) for w in windows}
    database = Warehouse(warehouse_url, telemetry_dir)  # no cache: every read goes to the database
    for w in windows:
        stored = database.read_window(w[0], w[1], w[2], columns=list(w[3] or []) or None)
        key = [c for c in grain(CONTRACTS[w[0]], PARTITION_COLUMN[w[0]]) if c in stored.columns]
        pd.testing.assert_frame_equal(served[w].sort_values(key).reset_index(drop=True),
                                      stored.sort_values(key).reset_index(drop=True), obj=str(w[:3]))
        assert len(stored), w


def _cluster_goodput(p: pd.Timestamp) -> pd.DataFrame:
    """cluster_goodput rows of partition ``p`` with the dtypes a read gives, written out of key order (regions
    descending), as the loss tree's rollup writes them."""
    table = metadata.tables["cluster_goodput"]
    rows = {c.name: [0.5, 0.25] for c in table.columns}
    rows.update(partition_start=[p, p], region=pd.array(["us-east", "eu-west"], dtype="string"),
                paid_gpu_minutes=[600.0, 480.0])
    return pd.DataFrame(rows)


def test_a_read_across_cached_windows_is_the_databases_read(warehouse_url, frames, telemetry_dir, monkeypatch):
    """A run keeping several windows of a table (FrameCache ``depth``) serves a read spanning them -- a day's two
    weeks of KPI history -- from the cached windows and database reads of the gaps between them: the rows and their
    order are the database's own read (SQLite: a keyed table in key order, whatever order it was written in; the
    telemetry store in key order). PostgreSQL returns a heap's order: never stitched, always its own read."""
    parts = [T0 + k * FIVE_MIN for k in range(4)]
    gpu = frames["gpu_telemetry"]
    plain = Warehouse(warehouse_url, telemetry_dir)
    for p in parts:  # every window in the database ...
        plain.replace_window("gpu_telemetry", gpu.assign(ts=gpu["ts"] + (p - T0)), p, p + FIVE_MIN)
        plain.replace_window("cluster_goodput", _cluster_goodput(p), p, p + FIVE_MIN)
    wh = Warehouse(warehouse_url, telemetry_dir, cache=FrameCache(depth={"gpu_telemetry": 3, "cluster_goodput": 3}))
    for p in parts[1::2]:  # ... and the second and fourth written again through the cache
        wh.replace_window("gpu_telemetry", gpu.assign(ts=gpu["ts"] + (p - T0)), p, p + FIVE_MIN)
        wh.replace_window("cluster_goodput", _cluster_goodput(p), p, p + FIVE_MIN)
    uncached = []
    read_uncached = Warehouse._read_uncached
    monkeypatch.setattr(Warehouse, "_read_uncached",
                        lambda self, name, a, b, *rest: uncached.append((name, a, b)) or read_uncached(self, name, a, b, *rest))
    minute = T0 + pd.Timedelta(minutes=2)
    for name, start, end, columns in [("gpu_telemetry", T0, parts[-1] + FIVE_MIN, None),
                                      ("gpu_telemetry", minute, parts[-1] + (minute - T0), ["ts", "gpu_uuid", "power_w"]),
                                      ("cluster_goodput", T0 - FIVE_MIN, parts[-1] + FIVE_MIN, None),
                                      ("cluster_goodput", parts[1], parts[-1] + FIVE_MIN, ["region", "goodput"])]:
        served = wh.read_window(name, start, end, columns=columns)
        pd.testing.assert_frame_equal(served, plain.read_window(name, start, end, columns=columns), obj=f"{name} {start}")
        assert served.index.equals(pd.RangeIndex(len(served)))
    stitched = warehouse_url.startswith("sqlite")
    assert [u for u in uncached if u[0] == "cluster_goodput"] == ([
        ("cluster_goodput", T0 - FIVE_MIN, parts[1]), ("cluster_goodput", parts[2], parts[3]),
        ("cluster_goodput", parts[2], parts[3])] if stitched else [])
    assert [u for u in uncached if u[0] == "gpu_telemetry"] == [
        ("gpu_telemetry", T0, parts[1]), ("gpu_telemetry", parts[2], parts[3]),
        ("gpu_telemetry", minute, parts[1]), ("gpu_telemetry", parts[2], parts[3])]


def test_a_write_while_a_stitched_read_reads_a_gap_is_cached(warehouse_url, frames, telemetry_dir, monkeypatch):
    """A stitched read's gaps are read beside the cache, not by switching the warehouse's cache off: a write
    another thread makes meanwhile (a run's steps share one warehouse) still replaces its window's cached rows,
    so no later read is served the rows it replaced."""
    parts = [T0 + k * FIVE_MIN for k in range(4)]
    gpu = frames["gpu_telemetry"]

    def window(p, watts=None):
        out = gpu.assign(ts=gpu["ts"] + (p - T0))
        return out if watts is None else out.assign(power_w=watts)

    wh = Warehouse(warehouse_url, telemetry_dir, cache=FrameCache(depth={"gpu_telemetry": 3}))
    for p in parts:
        wh.replace_window("gpu_telemetry", window(p), p, p + FIVE_MIN)
    wh.cache.clear()
    for p in parts[1::2]:
        wh.replace_window("gpu_telemetry", window(p), p, p + FIVE_MIN)
    read_store = TelemetryStore.read_window
    written = []

    def meanwhile(store, *args, **kw):
        got = read_store(store, *args, **kw)
        if not written:  # the other thread's write, while the first gap is being read
            written.append(True)
            wh.replace_window("gpu_telemetry", window(parts[3], 123.0), parts[3], parts[3] + FIVE_MIN)
        return got

    monkeypatch.setattr(TelemetryStore, "read_window", meanwhile)
    wh.read_window("gpu_telemetry", T0, parts[-1] + FIVE_MIN)
    assert written
    monkeypatch.setattr(TelemetryStore, "read_window", read_store)
    served = wh.read_window("gpu_telemetry", parts[3], parts[3] + FIVE_MIN)
    assert (served["power_w"] == 123.0).all()
    pd.testing.assert_frame_equal(served, Warehouse(warehouse_url, telemetry_dir).read_window(
        "gpu_telemetry", parts[3], parts[3] + FIVE_MIN))


def test_a_cached_read_is_the_callers_own(warehouse_url, frames, telemetry_dir):
    """What a read hands out from the cache is a copy with a RangeIndex, like a database read: a caller changing it
    changes nothing the next read sees (whole window, part of it, some columns)."""
    cache = FrameCache()
    wh = Warehouse(warehouse_url, telemetry_dir, cache=cache)
    gpu = frames["gpu_telemetry"].copy()
    gpu.index = gpu.index + 1000  # a writer's frame need not have a RangeIndex
    wh.replace_window("gpu_telemetry", gpu, T0, T1)
    wh.replace_window("cost_capacity", frames["cost_capacity"].set_axis(range(7, 7 + len(frames["cost_capacity"]))),
                      DAY0, DAY1)
    minute = T0 + pd.Timedelta(minutes=2)
    reads = [("gpu_telemetry", T0, T1, None), ("gpu_telemetry", minute, minute + pd.Timedelta(minutes=1), None),
             ("gpu_telemetry", T0, T1, ["ts", "gpu_uuid", "sm_active"]),
             ("gpu_telemetry", minute, T1, ["ts", "gpu_uuid", "sm_active"]), ("cost_capacity", DAY0, DAY1, None)]
    for name, start, end, columns in reads:
        first = wh.read_window(name, start, end, columns=columns)
        assert len(first) and first.index.equals(pd.RangeIndex(len(first))), (name, start, end, columns)
        before = first.copy()
        first.iloc[:, 1:] = None  # the caller scribbles over what it read
        pd.testing.assert_frame_equal(wh.read_window(name, start, end, columns=columns), before)
    assert set(cache._entries) == {"gpu_telemetry", "cost_capacity"}  # (the reads above were the cache's)


def test_read_window_is_half_open(warehouse_url, frames, telemetry_dir):
    wh = Warehouse(warehouse_url, telemetry_dir)
    gpu = frames["gpu_telemetry"]
    wh.replace_window("gpu_telemetry", gpu, T0, T1)
    minute = T0 + pd.Timedelta(minutes=2)
    got = wh.read_window("gpu_telemetry", minute, minute + pd.Timedelta(minutes=1))
    assert set(got["ts"]) == {minute}
    assert len(got) == (gpu["ts"] == minute).sum()
    assert wh.read_window("gpu_telemetry", T1, T1 + pd.Timedelta(minutes=5)).empty


def test_last_partition_by_is_each_groups_latest_partition_in_the_half_open_window(warehouse_url, telemetry_dir):
    wh = Warehouse(warehouse_url, telemetry_dir)
    five = pd.Timedelta(minutes=5)
    rows = pd.DataFrame({"partition_start": [T0, T0 + five, T0 + 2 * five, T0, T0 + 3 * five],
                         "region": ["a", "a", "a", "b", "b"], "node_id": ["n1", "n1", "n2", "n3", "n3"],
                         "sku": "H100", "gpus_seen": [8, 8, 0, 8, 8], "driver_version": "550", "fatal_gpus": 0})
    wh.replace_window("node_inventory", rows, T0, T0 + 4 * five)
    last = wh.last_partition_by("node_inventory", "region", T0, T0 + 3 * five)
    assert last.to_dict() == {"a": T0 + 2 * five, "b": T0}
    assert wh.last_partition_by("node_inventory", "region", T0, T0 + 3 * five, positive="gpus_seen").to_dict() == {
        "a": T0 + five, "b": T0}
    assert wh.last_partition_by("node_inventory", "region", T0 + 4 * five, T0 + 5 * five).empty


# --- the schema ---------------------------------------------------------------------------
def test_primary_keys_are_the_contracts_grain():
    expected = {
        "gpu_telemetry": ["ts", "gpu_uuid"],
        "node_telemetry": ["ts", "node_id"],
        "network_telemetry": ["ts", "node_id", "link_id"],
        "scheduler_events": ["ts", "event_id"],
        "job_runtime_metrics": ["ts", "job_id"],
        "job_metadata": ["submitted_at", "job_id"],
        "change_events": ["ts", "event_id"],
        "cost_capacity": ["date", "region", "sku"],
        "maintenance_windows": ["window_id"],
        "inference_requests": ["ts", "region", "model_name", "model_version"],
        "inference_latency_buckets": ["ts", "region", "model_name", "model_version", "histogram", "le"],
        "facility_telemetry": ["ts", "region", "rack_id"],
        "kube_pods": ["ts", "namespace", "pod"],
        "kube_nodes": ["ts", "node_id"],
    }
    assert set(expected) == set(CONTRACTS)
    for table, keys in expected.items():
        assert [c.name for c in metadata.tables[table].primary_key.columns] == keys, table
    for table in FIVE_MINUTE_SOURCES:  # the partition column leads, so a window is one key range
        assert expected[table][0] == PARTITION_COLUMN[table]


def test_sql_schema_file_matches_the_module():
    rendered = render_sql()
    assert SCHEMA_SQL.exists(), f"{SCHEMA_SQL} is missing: generate it with `{REGENERATE}` and commit it"
    committed = SCHEMA_SQL.read_text()
    if committed != rendered:
        diff = "".join(list(difflib.unified_diff(committed.splitlines(True), rendered.splitlines(True),
                                                 "sql/schema.sql", "render_sql()"))[:60])
        pytest.fail(f"sql/schema.sql has drifted from gpu_health/storage/schema.py. Regenerate it with\n"
                    f"    {REGENERATE}\nreview the diff and commit it.\n{diff}", pytrace=False)


def test_schema_sql_creates_every_table_on_postgresql(pg_url):
    """The reviewed DDL is valid PostgreSQL and yields the tables the module declares."""
    engine = sa.create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(Path(SCHEMA_SQL).read_text())
        created = set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    declared = {line.split()[2] for line in SCHEMA_SQL.read_text().splitlines() if line.startswith("CREATE TABLE ")}
    assert declared >= (set(CONTRACTS) - COLUMNAR_TABLES) | {"source_rejects"}
    assert not declared & COLUMNAR_TABLES  # minute-grain telemetry lives in the columnar store, never in SQL
    assert created == declared


def test_a_table_created_before_a_nullable_column_existed_gains_it(warehouse_url, telemetry_dir):
    """A warehouse created by an older schema keeps working: a nullable column the schema has since gained is added
    to its table (its old rows hold null there), and rows with it are written and read back."""
    from gpu_health.diagnosis import alerts as A
    from gpu_health.diagnosis.finding import Finding

    old = sa.MetaData()
    table = metadata.tables["alerts"]
    sa.Table("alerts", old, *[c.copy() for c in table.columns if c.name != "margin_at_page"],
             sa.PrimaryKeyConstraint(*[c.name for c in table.primary_key.columns]))
    old.create_all(sa.create_engine(warehouse_url))
    f = Finding("hardware_fault", "hardware", "page", "us-east", "hardware_fault|us-east", nodes=["n1"], margin=2.0)
    snap = A.step(A.empty(), [f], T0, rates={}, changes=pd.DataFrame())
    wh = Warehouse(warehouse_url, telemetry_dir)
    assert wh.replace_window("alerts", snap, T0, T1) == 1
    assert wh.read_window("alerts", T0, T1)["margin_at_page"].tolist() == [2.0]

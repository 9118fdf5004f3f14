"""The columnar telemetry store: layout, round trips, partition replaces, atomic files, export.

The warehouse-level behaviour every table shares (idempotent re-runs, racing runs, round trips on SQLite and
PostgreSQL) is in test_warehouse.py, which runs the telemetry tables through the store too.
"""

import io
import threading
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from gpu_health import catalog
from gpu_health.cli import main
from gpu_health.contracts import CONTRACTS, PARTITION_COLUMN
from gpu_health.contracts.validate import validate_frame
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window, cost_capacity
from gpu_health.storage import telemetry_store
from gpu_health.storage.schema import COLUMNAR_TABLES, arrow_schema, grain
from gpu_health.storage.telemetry_store import TelemetryStore, default_telemetry_dir
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import THERMAL_WEEK

# the minute-grain tables (the other columnar tables' round trips: test_store_layouts.py)
TELEMETRY = sorted(t for t in COLUMNAR_TABLES if catalog.table(t).cadence == "minute")
T0 = pd.Timestamp("2026-11-03T14:00:00Z")
FIVE = pd.Timedelta(minutes=5)
MINUTE = pd.Timedelta(minutes=1)
HOUR = pd.Timedelta(hours=1)


@pytest.fixture(scope="module")
def frames() -> dict[str, pd.DataFrame]:
    """One simulated partition of every columnar table, as its contract holds it, with nulls in the nullable
    numbers (blanked on every 50th row) and a few links down."""
    raw = Window(load_scenario(THERMAL_WEEK), T0, T0 + FIVE).tables()
    # the serving layer's tables are off on the thermal week's cluster: from a scenario that serves
    serving = Window(load_scenario({"seed": 7, "cluster": {"serving": True}}), T0, T0 + FIVE)
    raw.update({t: serving.table(t) for t in ("inference_requests", "inference_latency_buckets")})
    # and the platform layer's, off there too: from a small cluster that exports them
    kube = Window(load_scenario({"seed": 7, "cluster": {"gpus": 96, "platform": True}}), T0, T0 + FIVE)
    raw.update({t: kube.table(t) for t in ("kube_pods", "kube_nodes")})
    # and the facility layer's
    raw["facility_telemetry"] = Window(load_scenario({"seed": 7, "cluster": {"facility": True}}), T0, T0 + FIVE).table(
        "facility_telemetry")
    gpu = raw["gpu_telemetry"].copy()
    for col in ("job_id", "sm_active", "power_w", "throttle_reasons", "ecc_dbe_delta"):
        gpu[col] = gpu[col].astype("object")
        gpu.loc[gpu.index[::50], col] = None
    raw["gpu_telemetry"] = gpu
    net = raw["network_telemetry"].copy()
    net["retransmits"] = net["retransmits"].astype("object")
    net.loc[net.index[::50], "retransmits"] = None
    net.loc[net.index[:8], "link_up"] = False
    raw["network_telemetry"] = net
    out = {}
    for table in TELEMETRY:
        checked = validate_frame(raw[table], table, start=T0, end=T0 + FIVE, origin="simulator")
        assert checked.rejects.empty and len(checked.valid), table
        out[table] = checked.valid
    return out


def shifted(frame: pd.DataFrame, by: pd.Timedelta) -> pd.DataFrame:
    return frame.assign(ts=frame["ts"] + by)


def by_key(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    return frame.sort_values(grain(CONTRACTS[table], PARTITION_COLUMN[table])).reset_index(drop=True)


# --- round trips and layout -----------------------------------------------------------------------
def test_every_telemetry_table_round_trips_values_dtypes_nulls_and_utc(tmp_path, frames):
    store = TelemetryStore(tmp_path / "telemetry")
    for table, frame in frames.items():
        assert store.replace_window(table, frame, T0, T0 + FIVE) == len(frame)
        back = store.read_window(table, T0, T0 + FIVE)
        assert list(back.columns) == list(frame.columns), table
        for col in frame.columns:  # strings too: the same `string` dtype the SQL warehouse hands back
            assert back[col].dtype == frame[col].dtype, f"{table}.{col}: {back[col].dtype} != {frame[col].dtype}"
            assert back[col].isna().sum() == frame[col].isna().sum(), f"{table}.{col}: nulls"
        assert str(back["ts"].dtype) == "datetime64[ns, UTC]"
        pd.testing.assert_frame_equal(by_key(back, table), by_key(frame, table), obj=table)
        # rows come back in key order (as the SQLite warehouse's clustered key gave them)
        pd.testing.assert_frame_equal(back, by_key(back, table), obj=f"{table} order")
        # one file, at the documented place, typed by the catalogue (UTC microseconds)
        path = tmp_path / "telemetry" / table / "date=2026-11-03" / "1400.parquet"
        assert store.partitions(table) == [T0] and path.exists()
        stored = pq.read_schema(path)
        assert stored.names == arrow_schema(table).names
        assert stored.field("ts").type == pa.timestamp("us", tz="UTC")
        assert store.count(table) == len(frame)
    gpu = frames["gpu_telemetry"]
    assert gpu["throttle_reasons"].isna().any() and gpu["sm_active"].isna().any()
    assert (~store.read_window("network_telemetry", T0, T0 + FIVE)["link_up"]).sum() == 8


def test_files_written_before_grad_norm_read_it_as_null_and_keep_it_null_when_rewritten(tmp_path, frames):
    """job_runtime_metrics gained grad_norm after stores were written: their files lack the column. The store's
    reads (one dataset over the window's files, typed by the catalogue) give null for those rows -- not reported,
    never 0 -- beside the values of newer files, and late data rewriting an old hour file keeps its rows null."""
    store = TelemetryStore(tmp_path)
    table = "job_runtime_metrics"
    rt = frames[table]
    assert rt["grad_norm"].notna().any()
    old_schema = pa.schema([f for f in telemetry_store._schema(table) if f.name != "grad_norm"])

    def write_old(path, frame):  # what the store wrote before the column existed
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(telemetry_store.to_arrow(frame, old_schema, table), path)

    # an old 5-minute partition file beside a new one; an old complete hour the hour before
    write_old(store.partition_path(table, T0), rt)
    store.replace_window(table, shifted(rt, FIVE), T0 + FIVE, T0 + 2 * FIVE)
    hour = pd.concat([shifted(rt, i * FIVE - HOUR) for i in range(12)], ignore_index=True)
    write_old(store.hour_path(table, T0 - HOUR), hour)
    assert "grad_norm" not in pq.read_schema(store.partition_path(table, T0)).names

    back = store.read_window(table, T0 - HOUR, T0 + 2 * FIVE)
    assert list(back.columns) == list(rt.columns) and back["grad_norm"].dtype == "float64"
    old = back["ts"] < T0 + FIVE
    assert old.sum() == len(hour) + len(rt) and back.loc[old, "grad_norm"].isna().all()
    new = back[~old].reset_index(drop=True)
    pd.testing.assert_frame_equal(new, by_key(shifted(rt, FIVE), table))
    only = store.read_window(table, T0, T0 + 2 * FIVE, columns=["ts", "job_id", "grad_norm"])
    assert only.loc[only["ts"] < T0 + FIVE, "grad_norm"].isna().all()
    assert only["grad_norm"].notna().sum() == rt["grad_norm"].notna().sum()

    # late data into the old hour: its other rows come back unchanged, grad_norm still null
    late = shifted(rt, -HOUR + 3 * FIVE)
    store.replace_window(table, late, T0 - HOUR + 3 * FIVE, T0 - HOUR + 4 * FIVE)
    again = store.read_window(table, T0 - HOUR, T0)
    assert "grad_norm" in pq.read_schema(store.hour_path(table, T0 - HOUR)).names
    kept = again[(again["ts"] < T0 - HOUR + 3 * FIVE) | (again["ts"] >= T0 - HOUR + 4 * FIVE)]
    assert len(kept) == 11 * len(rt) and kept["grad_norm"].isna().all()
    pd.testing.assert_frame_equal(again[again["ts"].between(T0 - HOUR + 3 * FIVE, T0 - HOUR + 4 * FIVE,
                                                            inclusive="left")].reset_index(drop=True),
                                  by_key(late, table))


def test_reads_select_columns_minutes_and_values_like_the_sql_warehouse(tmp_path, frames):
    store = TelemetryStore(tmp_path)
    gpu = frames["gpu_telemetry"]
    store.replace_window("gpu_telemetry", gpu, T0, T0 + FIVE)
    minute = T0 + 2 * MINUTE
    got = store.read_window("gpu_telemetry", minute, minute + MINUTE, columns=["gpu_uuid", "ts"])
    assert list(got.columns) == ["gpu_uuid", "ts"] and set(got["ts"]) == {minute}
    assert len(got) == (gpu["ts"] == minute).sum()
    east = store.read_window("gpu_telemetry", T0, T0 + FIVE, where={"region": "us-east"})
    assert len(east) == (gpu["region"] == "us-east").sum() > 0
    both = store.read_window("gpu_telemetry", T0, T0 + FIVE, where={"region": ["us-east", "eu-west"]})
    assert len(both) == len(gpu)
    assert store.read_window("gpu_telemetry", T0 + FIVE, T0 + 2 * FIVE).empty  # half open, nothing written there
    everything = store.read_window("gpu_telemetry")
    assert len(everything) == len(gpu)


# --- replaces -------------------------------------------------------------------------------------
def test_replacing_one_partition_leaves_the_others_untouched(tmp_path, frames):
    store = TelemetryStore(tmp_path)
    node = frames["node_telemetry"]
    window = pd.concat([shifted(node, i * FIVE) for i in range(3)], ignore_index=True)
    store.replace_window("node_telemetry", window, T0, T0 + 3 * FIVE)
    paths = [store.partition_path("node_telemetry", T0 + i * FIVE) for i in range(3)]
    before = [(p.stat().st_mtime_ns, p.read_bytes()) for p in paths]

    hotter = shifted(node, FIVE).assign(cpu_util_pct=100.0)
    store.replace_window("node_telemetry", hotter, T0 + FIVE, T0 + 2 * FIVE)
    assert [(p.stat().st_mtime_ns, p.read_bytes()) for i, p in enumerate(paths) if i != 1] == [before[0], before[2]]
    middle = store.read_window("node_telemetry", T0 + FIVE, T0 + 2 * FIVE)
    assert len(middle) == len(node) and (middle["cpu_util_pct"] == 100.0).all()
    assert store.count("node_telemetry") == 3 * len(node)


def test_a_complete_hour_is_one_file_and_late_data_rewrites_only_its_window(tmp_path, frames):
    """Partitions written one by one stay separate files until the 12th completes the hour; then the hour is one
    file in key order, the partition files are gone, and a later write into the hour keeps its other rows exactly."""
    store = TelemetryStore(tmp_path)
    node = frames["node_telemetry"]
    parts = [shifted(node, i * FIVE).assign(cpu_util_pct=float(i)) for i in range(12)]
    for i, part in enumerate(parts[:11]):
        store.replace_window("node_telemetry", part, T0 + i * FIVE, T0 + (i + 1) * FIVE)
    folder = store.hour_path("node_telemetry", T0).parent
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"14{5 * i:02d}.parquet" for i in range(11))
    store.replace_window("node_telemetry", parts[11], T0 + 11 * FIVE, T0 + HOUR)
    assert [p.name for p in folder.iterdir()] == ["14.parquet"]
    assert store.partitions("node_telemetry") == [T0 + i * FIVE for i in range(12)]
    hour = pd.concat(parts, ignore_index=True)
    back = store.read_window("node_telemetry", T0, T0 + HOUR)
    pd.testing.assert_frame_equal(back, by_key(hour, "node_telemetry"))
    assert pq.read_metadata(store.hour_path("node_telemetry", T0)).num_rows == len(hour)

    # late data: minutes 7-13 rewritten (a cut of two partitions); the other 53 minutes are exactly as they were
    late = hour[hour["ts"].between(T0 + 7 * MINUTE, T0 + 13 * MINUTE, inclusive="left")].assign(health="degraded")
    store.replace_window("node_telemetry", late, T0 + 7 * MINUTE, T0 + 13 * MINUTE)
    assert [p.name for p in folder.iterdir()] == ["14.parquet"]
    back = store.read_window("node_telemetry", T0, T0 + HOUR)
    pd.testing.assert_frame_equal(back, by_key(back, "node_telemetry"))  # still in key order
    assert set(back.loc[back["health"] == "degraded", "ts"]) == {T0 + m * MINUTE for m in range(7, 13)}
    assert len(back) == len(hour)
    one = store.read_window("node_telemetry", T0 + 4 * FIVE, T0 + 5 * FIVE)  # one partition out of the hour file
    pd.testing.assert_frame_equal(one, by_key(parts[4], "node_telemetry"))


def test_a_bulk_write_stores_whole_hours_directly_and_the_rest_as_partitions(tmp_path, frames):
    store = TelemetryStore(tmp_path)
    gpu = frames["gpu_telemetry"]
    starts = [T0 + i * FIVE for i in range(27)]  # two whole hours and 15 minutes
    window = pd.concat([shifted(gpu, s - T0) for s in starts], ignore_index=True)
    store.replace_window("gpu_telemetry", window, T0, T0 + 2 * HOUR + 3 * FIVE)
    folder = store.hour_path("gpu_telemetry", T0).parent
    assert sorted(p.name for p in folder.iterdir()) == ["14.parquet", "15.parquet", "1600.parquet", "1605.parquet",
                                                        "1610.parquet"]
    back = store.read_window("gpu_telemetry", T0 + HOUR - FIVE, T0 + 2 * HOUR + FIVE)  # across all three kinds
    pd.testing.assert_frame_equal(back, by_key(window[window["ts"].between(T0 + HOUR - FIVE, T0 + 2 * HOUR + FIVE,
                                                                           inclusive="left")], "gpu_telemetry"))
    assert store.partitions("gpu_telemetry") == starts and store.count("gpu_telemetry") == len(window)
    assert len(store.read_window("gpu_telemetry")) == len(window)


def test_each_hour_file_holds_only_the_text_values_of_its_own_rows(tmp_path, frames):
    """A bulk write converts the window's text once, as dictionaries; each hour's file keeps only the values its
    rows use (a file holding the whole window's job ids would grow with the window: a day of scheduler events went
    from 2.9 to 35 MB so). Two hours whose job ids differ: each file's job_id dictionary is its own hour's ids."""
    store = TelemetryStore(tmp_path)
    gpu = frames["gpu_telemetry"]
    hours = []
    for h in range(2):
        for i in range(12):
            part = shifted(gpu, h * HOUR + i * FIVE)
            hours.append(part.assign(job_id=part["job_id"].astype("string") + f"-h{h}"))
    window = pd.concat(hours, ignore_index=True)
    store.replace_window("gpu_telemetry", window, T0, T0 + 2 * HOUR)
    for h in range(2):
        path = store.hour_path("gpu_telemetry", T0 + h * HOUR)
        stored = pq.read_table(path, columns=["job_id"], read_dictionary=["job_id"]).column("job_id").combine_chunks()
        own = window.loc[window["ts"].between(T0 + h * HOUR, T0 + (h + 1) * HOUR, inclusive="left"), "job_id"]
        assert sorted(stored.dictionary.to_pylist()) == sorted(own.dropna().unique())
    back = store.read_window("gpu_telemetry", T0, T0 + 2 * HOUR)
    pd.testing.assert_frame_equal(back, by_key(window, "gpu_telemetry"))


def test_files_hold_each_entitys_rows_together_and_order_out_is_the_read_order(tmp_path, frames):
    """Whatever order a window is written in: each file holds its rows by the key with time last (each GPU's
    readings of the hour together, in time order: what compresses), hour files and partition files alike, and
    ``order_out`` gives the positions of the written rows in the order read_window returns them."""
    store = TelemetryStore(tmp_path)
    gpu = frames["gpu_telemetry"]
    starts = [T0 + i * FIVE for i in range(14)]  # a whole hour and two partitions
    window = pd.concat([shifted(gpu, s - T0) for s in starts], ignore_index=True).sample(frac=1, random_state=3)
    window = window.reset_index(drop=True)
    order: list = []
    store.replace_window("gpu_telemetry", window, T0, T0 + HOUR + 2 * FIVE, order_out=order)
    key = grain(CONTRACTS["gpu_telemetry"], "ts")  # ["ts", "gpu_uuid"]
    for path in (store.hour_path("gpu_telemetry", T0), store.partition_path("gpu_telemetry", T0 + HOUR + FIVE)):
        stored = pq.read_table(path).to_pandas()
        assert len(stored) and stored[key[1:] + key[:1]].equals(
            stored[key[1:] + key[:1]].sort_values(key[1:] + key[:1]).reset_index(drop=True)), path.name
    back = store.read_window("gpu_telemetry", T0, T0 + HOUR + 2 * FIVE)
    assert len(order) == 1 and sorted(order[0]) == list(range(len(window)))
    pd.testing.assert_frame_equal(window.iloc[order[0]].reset_index(drop=True)[back.columns], back)
    assert back[key].equals(back[key].sort_values(key).reset_index(drop=True))



def test_every_file_carries_the_time_columns_statistics_that_let_a_time_range_skip_it(tmp_path, frames):
    """A file's min / max are written for its time columns (what a reader outside the store -- DuckDB, Spark,
    Trino -- skips an hour's file by) and left out for the rest, which cannot skip a file holding every entity of
    its hour. A range before the stored hour read through pyarrow's dataset with the files' own statistics skips
    every file: no row group is even scanned."""
    store = TelemetryStore(tmp_path)
    for table in ("gpu_telemetry", "job_runtime_metrics"):
        store.replace_window(table, pd.concat([shifted(frames[table], i * FIVE) for i in range(12)]), T0, T0 + HOUR)
        meta = pq.ParquetFile(store.hour_path(table, T0)).metadata
        chunks = {meta.schema.column(i).name: meta.row_group(0).column(i) for i in range(meta.num_columns)}
        timed = {f.name for f in arrow_schema(table, descriptions=False)
                 if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)}
        assert timed and {n for n, c in chunks.items() if c.is_stats_set} == timed, table
        ts = chunks[catalog.table(table).partition_column].statistics
        assert (ts.min, ts.max) == (T0.to_pydatetime(), (T0 + HOUR - MINUTE).to_pydatetime()), table
    import pyarrow.dataset as ds

    (fragment,) = ds.dataset(str(tmp_path / "gpu_telemetry"), format="parquet").get_fragments()
    at = pa.scalar(T0, pa.timestamp("us", tz="UTC"))
    assert len(fragment.subset(ds.field("ts") >= at).row_groups) == 1
    assert fragment.subset(ds.field("ts") < at).row_groups == []

def test_an_empty_partition_gets_a_file_so_nothing_differs_from_never_written(tmp_path, frames):
    store = TelemetryStore(tmp_path)
    table = "job_runtime_metrics"
    store.replace_window(table, frames[table], T0, T0 + FIVE)
    store.replace_window(table, frames[table].iloc[:0], T0, T0 + 2 * FIVE)  # nothing reported in two partitions
    assert store.partitions(table) == [T0, T0 + FIVE]  # both written (empty), the next one never
    for start in (T0, T0 + FIVE):
        path = store.partition_path(table, start)
        assert pq.read_metadata(path).num_rows == 0 and pq.read_schema(path).names == arrow_schema(table).names
    assert not store.partition_path(table, T0 + 2 * FIVE).exists()
    empty = store.read_window(table, T0, T0 + 2 * FIVE)
    assert empty.empty and list(empty.columns) == list(frames[table].columns)
    assert dict(empty.dtypes) == dict(frames[table].dtypes)
    assert store.count(table) == 0
    # a frame without columns (an asset with no rows) is an empty partition too
    store.replace_window(table, pd.DataFrame(), T0 + 2 * FIVE, T0 + 3 * FIVE)
    assert pq.read_metadata(store.partition_path(table, T0 + 2 * FIVE)).num_rows == 0
    # an hour written empty is one small file (no row group), its 12 partitions written
    store.replace_window(table, pd.DataFrame(), T0 + HOUR, T0 + 2 * HOUR)
    assert store.partitions(table)[3:] == [T0 + HOUR + i * FIVE for i in range(12)] and store.count(table) == 0
    meta = pq.read_metadata(store.hour_path(table, T0 + HOUR))
    assert meta.num_row_groups == 0 and meta.schema.to_arrow_schema().names == arrow_schema(table).names


def test_a_window_not_aligned_to_five_minutes_replaces_only_its_minutes(tmp_path, frames):
    store = TelemetryStore(tmp_path)
    node = frames["node_telemetry"]
    ten = pd.concat([node, shifted(node, FIVE)], ignore_index=True)
    store.replace_window("node_telemetry", ten, T0, T0 + 2 * FIVE)
    cut_start, cut_end = T0 + 3 * MINUTE, T0 + 7 * MINUTE  # cuts both partitions
    inside = ten[(ten["ts"] >= cut_start) & (ten["ts"] < cut_end)]
    store.replace_window("node_telemetry", inside.assign(health="degraded"), cut_start, cut_end)
    back = store.read_window("node_telemetry", T0, T0 + 2 * FIVE)
    assert len(back) == len(ten)
    changed = back[back["health"] == "degraded"]["ts"]
    assert set(changed) == {T0 + m * MINUTE for m in range(3, 7)}
    # the minutes outside the cut are the rows written first, exactly
    outside = ~back["ts"].between(cut_start, cut_end, inclusive="left")
    pd.testing.assert_frame_equal(by_key(back[outside], "node_telemetry"),
                                  by_key(ten[~ten["ts"].between(cut_start, cut_end, inclusive="left")], "node_telemetry"))
    # and an empty cut deletes just those minutes, still sorted by key in each file
    store.replace_window("node_telemetry", node.iloc[:0], cut_start, cut_end)
    back = store.read_window("node_telemetry", T0, T0 + 2 * FIVE)
    assert set(back["ts"]) == {T0 + m * MINUTE for m in (0, 1, 2, 7, 8, 9)}
    pd.testing.assert_frame_equal(back, by_key(back, "node_telemetry"))


def test_rows_outside_the_window_and_partial_deletes_are_refused_and_nothing_is_written(tmp_path, frames):
    store = TelemetryStore(tmp_path)
    gpu = frames["gpu_telemetry"]
    with pytest.raises(ValueError, match="outside the window"):
        store.replace_window("gpu_telemetry", gpu, T0 + MINUTE, T0 + FIVE)
    with pytest.raises(ValueError, match="non-nullable"):
        store.replace_window("gpu_telemetry", gpu.assign(ts=gpu["ts"].where(gpu.index != gpu.index[3])), T0, T0 + FIVE)
    with pytest.raises(ValueError, match="where"):
        store.replace_window("gpu_telemetry", gpu, T0, T0 + FIVE, where={"region": "us-east"})
    with pytest.raises(ValueError, match="needs a window"):
        store.replace_window("gpu_telemetry", gpu, None, None)
    with pytest.raises(ValueError, match="not stored columnar"):
        store.replace_window("alerts", gpu, T0, T0 + FIVE)
    assert store.partitions("gpu_telemetry") == []


# --- atomic files and racing writers -------------------------------------------------------------
def test_a_reader_never_sees_half_a_file(tmp_path, frames, monkeypatch):
    """A writer is paused with half of the new file's bytes written: readers meanwhile get the old rows, whole."""
    store = TelemetryStore(tmp_path)
    old = frames["gpu_telemetry"]
    store.replace_window("gpu_telemetry", old, T0, T0 + FIVE)
    half_written, release = threading.Event(), threading.Event()
    real_write = telemetry_store._write_parquet

    def slow_write(table, where, *args, **kw):
        buf = io.BytesIO()
        real_write(table, buf, *args, **kw)
        data = buf.getvalue()
        with open(where, "wb") as fh:
            fh.write(data[: len(data) // 2])
            fh.flush()
            half_written.set()
            assert release.wait(30)
            fh.write(data[len(data) // 2:])

    monkeypatch.setattr(telemetry_store, "_write_parquet", slow_write)
    new = old.assign(power_w=old["power_w"] + 1.0)
    writer = threading.Thread(target=store.replace_window, args=("gpu_telemetry", new, T0, T0 + FIVE))
    writer.start()
    try:
        assert half_written.wait(30)
        during = store.read_window("gpu_telemetry", T0, T0 + FIVE)
        pd.testing.assert_frame_equal(by_key(during, "gpu_telemetry"), by_key(old, "gpu_telemetry"))
        assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{tmp_path}/gpu_telemetry/*/*.parquet')").fetchone()[0] == len(old)
    finally:
        release.set()
        writer.join()
    after = store.read_window("gpu_telemetry", T0, T0 + FIVE)
    pd.testing.assert_frame_equal(by_key(after, "gpu_telemetry"), by_key(new, "gpu_telemetry"))
    assert [p.name for p in store.partition_path("gpu_telemetry", T0).parent.iterdir()] == ["1400.parquet"]


def test_concurrent_readers_see_one_version_whole_while_a_writer_replaces_it(tmp_path, frames):
    store = TelemetryStore(tmp_path)
    node = frames["node_telemetry"]
    versions = [node, node.assign(cpu_util_pct=-1.0).iloc[: len(node) // 2]]  # the second: other values, fewer rows
    store.replace_window("node_telemetry", versions[0], T0, T0 + FIVE)
    expect = [len(v) for v in versions]
    done, seen, errors = threading.Event(), [], []

    def writer():
        for i in range(40):
            store.replace_window("node_telemetry", versions[(i + 1) % 2], T0, T0 + FIVE)
        done.set()

    def reader():
        try:
            while not done.is_set():
                got = store.read_window("node_telemetry", T0, T0 + FIVE)
                seen.append((len(got), sorted(set(got["cpu_util_pct"] == -1.0))))
        except Exception as err:  # noqa: BLE001 -- any read error is the failure this test looks for
            errors.append(err)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert seen and all(s in ((expect[0], [False]), (expect[1], [True])) for s in seen), set(map(str, seen))


def _eleven_of_twelve(store, node):
    """An hour with 11 partitions written (separate files), and the 12th's frame, which completes it."""
    parts = [shifted(node, i * FIVE) for i in range(12)]
    store.replace_window("node_telemetry", pd.concat(parts[:11], ignore_index=True), T0, T0 + 11 * FIVE)
    return parts[11], len(node) * 12


def test_a_reader_during_a_compaction_sees_every_row_once(tmp_path, frames, monkeypatch):
    """The compaction is paused after its hour file is in place and before the partition files are deleted: a
    reader meanwhile takes the hour file alone (not the hour twice)."""
    store = TelemetryStore(tmp_path)
    last, rows = _eleven_of_twelve(store, frames["node_telemetry"])
    paused, release = threading.Event(), threading.Event()
    real_unlink, writer_id = Path.unlink, []

    def slow_unlink(path, missing_ok=False):
        if threading.get_ident() in writer_id and len(path.stem) == 4 and not paused.is_set():
            paused.set()
            assert release.wait(30)
        return real_unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", slow_unlink)

    def write():
        writer_id.append(threading.get_ident())
        store.replace_window("node_telemetry", last, T0 + 11 * FIVE, T0 + HOUR)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert paused.wait(30)
        assert store.hour_path("node_telemetry", T0).exists() and store.partition_path("node_telemetry", T0).exists()
        assert len(store.read_window("node_telemetry", T0, T0 + HOUR)) == rows
        assert len(store.read_window("node_telemetry")) == rows and store.count("node_telemetry") == rows
        assert store.partitions("node_telemetry") == [T0 + i * FIVE for i in range(12)]
    finally:
        release.set()
        writer.join()
    assert len(store.read_window("node_telemetry", T0, T0 + HOUR)) == rows


@pytest.mark.parametrize("stale", ["listing", "opening"])
def test_a_reader_whose_listing_a_compaction_overtook_lists_again(tmp_path, frames, monkeypatch, stale):
    """The hour is compacted right after the reader listed its partition files: before the reader checks that no
    hour file appeared ("listing"), or after that check, so the files vanish before they are opened ("opening").
    Either way the reader lists again and gets every row once."""
    store = TelemetryStore(tmp_path)
    last, rows = _eleven_of_twelve(store, frames["node_telemetry"])
    name = "_list" if stale == "listing" else "_files"
    real, calls = getattr(TelemetryStore, name), []

    def overtaken(self, *args):
        got = real(self, *args)
        if not calls:
            calls.append(got)
            store.replace_window("node_telemetry", last, T0 + 11 * FIVE, T0 + HOUR)  # compacts the hour
        return got

    monkeypatch.setattr(TelemetryStore, name, overtaken)
    back = store.read_window("node_telemetry", T0, T0 + HOUR)
    assert len(calls[0]) == 11 and not calls[0][0].exists()  # the stale listing: 11 partition files, now gone
    assert len(back) == rows
    pd.testing.assert_frame_equal(back, store.read_window("node_telemetry", T0, T0 + HOUR))


def test_racing_writers_of_a_multi_partition_window_leave_one_writers_rows(tmp_path, frames):
    node = frames["node_telemetry"]
    window = pd.concat([shifted(node, i * FIVE) for i in range(3)], ignore_index=True)
    versions = [window.assign(cpu_util_pct=float(v)) for v in (1, 2)]
    for _ in range(3):
        barrier = threading.Barrier(2)

        def write(frame):
            store = TelemetryStore(tmp_path)
            barrier.wait()
            store.replace_window("node_telemetry", frame, T0, T0 + 3 * FIVE)

        threads = [threading.Thread(target=write, args=(v,)) for v in versions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = TelemetryStore(tmp_path).read_window("node_telemetry", T0, T0 + 3 * FIVE)
        assert len(got) == len(window) and got["cpu_util_pct"].nunique() == 1  # one run's window, whole


# --- the warehouse around it ------------------------------------------------------------------------
def test_the_sql_warehouse_creates_no_telemetry_table_and_routes_them_to_the_store(tmp_path, frames, monkeypatch):
    monkeypatch.setenv("GPU_HEALTH_WAREHOUSE_CACHE", "0")
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    wh = Warehouse(url)
    assert wh.telemetry.root == tmp_path / "telemetry"
    for table, frame in frames.items():
        wh.replace_window(table, frame, T0, T0 + FIVE)
        assert wh.count(table) == len(frame)
        assert (tmp_path / "telemetry" / table / "date=2026-11-03" / "1400.parquet").exists()
    tables = set(sa.inspect(wh.engine).get_table_names())
    assert not tables & COLUMNAR_TABLES
    assert {"goodput_states", "alerts", "source_rejects", "change_events", "wasted_spend"} <= tables
    gpu = frames["gpu_telemetry"]
    last = wh.last_partition_by("gpu_telemetry", "region", T0, T0 + FIVE)
    assert last.to_dict() == gpu.groupby(gpu["region"].astype(object))["ts"].max().to_dict()


def test_the_store_sits_beside_its_sqlite_file_and_is_configurable(tmp_path, monkeypatch):
    assert default_telemetry_dir("sqlite:///var/warehouse.db") == Path("var/telemetry")
    assert default_telemetry_dir(f"sqlite:///{tmp_path}/range.db") == tmp_path / "range.telemetry"
    assert default_telemetry_dir("postgresql+psycopg2://u@h:5432/gpu_health") == Path("var/telemetry")
    assert Warehouse(f"sqlite:///{tmp_path}/w.db", tmp_path / "elsewhere").telemetry.root == tmp_path / "elsewhere"
    from gpu_health.defs.resources import default_resources

    monkeypatch.setenv("GPU_HEALTH_TELEMETRY_DIR", str(tmp_path / "env"))
    res = default_resources()
    assert res["warehouse"].get().telemetry.root == tmp_path / "env"
    assert res["warehouse_io_manager"].telemetry_dir == str(tmp_path / "env")


def test_a_store_serves_the_warehouse_that_first_wrote_it_and_refuses_any_other(tmp_path, frames, monkeypatch):
    """Two warehouses given one store would overwrite each other's minute-grain rows and read them as their own:
    the first write records its warehouse (.warehouse), and another warehouse's read or write is refused, naming
    both; the same warehouse under another spelling of its URL is the same owner."""
    gpu = frames["gpu_telemetry"]
    store = tmp_path / "shared"
    first = Warehouse(f"sqlite:///{tmp_path / 'a.db'}", store)
    assert first.read_window("gpu_telemetry").empty and not store.exists()  # a read claims nothing
    first.replace_window("gpu_telemetry", gpu, T0, T0 + FIVE)
    assert (store / ".warehouse").read_text().strip() == "sqlite:../a.db"
    other = Warehouse(f"sqlite:///{tmp_path / 'b.db'}", store)
    for attempt in (lambda: other.replace_window("gpu_telemetry", shifted(gpu, FIVE), T0 + FIVE, T0 + 2 * FIVE),
                    lambda: other.read_window("gpu_telemetry")):
        with pytest.raises(telemetry_store.StoreOwnedElsewhere, match=r"belongs to the warehouse sqlite:\.\./a\.db"):
            attempt()
    assert first.telemetry.partitions("gpu_telemetry") == [T0]  # the other's write left nothing
    monkeypatch.chdir(tmp_path)  # the same file by a relative URL: the same warehouse
    assert len(Warehouse("sqlite:///a.db", "shared").read_window("gpu_telemetry")) == len(gpu)


def test_a_store_from_before_owners_is_claimed_by_its_next_writer(tmp_path, frames):
    gpu = frames["gpu_telemetry"]
    TelemetryStore(tmp_path / "old").replace_window("gpu_telemetry", gpu, T0, T0 + FIVE)  # no owner recorded
    assert not (tmp_path / "old" / ".warehouse").exists()
    wh = Warehouse(f"sqlite:///{tmp_path / 'w.db'}", tmp_path / "old")
    assert len(wh.read_window("gpu_telemetry")) == len(gpu)
    wh.replace_window("gpu_telemetry", shifted(gpu, FIVE), T0 + FIVE, T0 + 2 * FIVE)
    assert (tmp_path / "old" / ".warehouse").read_text().strip() == "sqlite:../w.db"


def test_postgresql_databases_on_the_default_store_are_told_apart(tmp_path, frames):
    """PostgreSQL has no file to sit beside: every database defaults to var/telemetry/, so the owner is what keeps
    a second database (a scratch run beside production) from writing into the first's rows."""
    identity = telemetry_store.warehouse_identity
    prod = identity("postgresql+psycopg2://etl:secret@db.internal:5432/gpu_health", tmp_path)
    assert prod == identity("postgresql://reader@db.internal/gpu_health", tmp_path) == "postgresql://db.internal:5432/gpu_health"
    scratch = identity("postgresql://etl@db.internal:5432/scratch", tmp_path)
    assert scratch != prod and identity("sqlite://", tmp_path) is None
    gpu = frames["gpu_telemetry"]
    TelemetryStore(tmp_path, owner=prod).replace_window("gpu_telemetry", gpu, T0, T0 + FIVE)
    with pytest.raises(telemetry_store.StoreOwnedElsewhere, match="postgresql://db.internal:5432/gpu_health"):
        TelemetryStore(tmp_path, owner=scratch).replace_window("gpu_telemetry", gpu, T0, T0 + FIVE)


def test_duckdb_reads_the_layout_as_hive_partitions(tmp_path, frames):
    store = TelemetryStore(tmp_path)
    gpu = frames["gpu_telemetry"]
    late = T0 + pd.Timedelta(hours=10)  # 00:00 of the next day: a second date= folder
    store.replace_window("gpu_telemetry", gpu, T0, T0 + FIVE)
    store.replace_window("gpu_telemetry", shifted(gpu, late - T0), late, late + FIVE)
    got = duckdb.sql(f"""SELECT CAST(date AS VARCHAR) AS date, count(*) AS n, min(ts) AS first,
                         count(*) FILTER (WHERE throttle_reasons IS NULL) AS nulls
                         FROM read_parquet('{tmp_path}/gpu_telemetry/*/*.parquet', hive_partitioning = true)
                         GROUP BY date ORDER BY date""").df()
    assert got["date"].tolist() == ["2026-11-03", "2026-11-04"]
    assert got["n"].tolist() == [len(gpu), len(gpu)]
    assert got["nulls"].tolist() == [int(gpu["throttle_reasons"].isna().sum())] * 2
    assert pd.Timestamp(got["first"].iloc[0]).tz_convert("UTC") == T0


# --- export ---------------------------------------------------------------------------------------
def test_export_writes_any_table_for_a_range_to_parquet_and_csv(tmp_path, frames, capsys):
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    wh = Warehouse(url)
    node = frames["node_telemetry"]
    wh.replace_window("node_telemetry", pd.concat([node, shifted(node, FIVE)], ignore_index=True), T0, T0 + 2 * FIVE)
    scen = load_scenario(THERMAL_WEEK)
    day0 = T0.normalize()
    for day in (day0, day0 + pd.Timedelta(days=1)):
        wh.replace_window("cost_capacity", cost_capacity(scen, day), day, day + pd.Timedelta(days=1))
    iso = "%Y-%m-%dT%H:%M:%SZ"

    def export(table, start, end, out):
        code = main(["export", table, "--start", start.strftime(iso), "--end", end.strftime(iso), "--out", str(out),
                     "--warehouse", url])
        return code, capsys.readouterr()

    # a columnar table, one partition of the two, as Parquet and as CSV
    code, _ = export("node_telemetry", T0 + FIVE, T0 + 2 * FIVE, tmp_path / "out" / "node.parquet")
    assert code == 0
    back = pd.read_parquet(tmp_path / "out" / "node.parquet")
    assert pq.read_schema(tmp_path / "out" / "node.parquet").names == arrow_schema("node_telemetry").names
    assert len(back) == len(node) and back["ts"].min() == T0 + FIVE
    code, _ = export("node_telemetry", T0, T0 + 2 * FIVE, tmp_path / "node.csv")
    csv = pd.read_csv(tmp_path / "node.csv")
    assert code == 0 and len(csv) == 2 * len(node) and list(csv.columns) == list(node.columns)
    assert pd.to_datetime(csv["ts"], utc=True).min() == T0
    # a SQL table over a range crossing midnight: each day it overlaps once
    code, out = export("cost_capacity", T0, day0 + pd.Timedelta(days=1, hours=1), tmp_path / "cost.csv")
    cost = pd.read_csv(tmp_path / "cost.csv")
    assert code == 0 and len(cost) == 2 * len(cost_capacity(scen, day0)) and cost["date"].nunique() == 2
    assert '"stored": "SQL warehouse"' in out.out
    code, _ = export("cost_capacity", T0, T0 + FIVE, tmp_path / "cost.parquet")
    assert code == 0 and pq.read_schema(tmp_path / "cost.parquet").field("date").type == pa.date32()
    # errors name what is wrong and leave no file
    code, out = export("no_such_table", T0, T0 + FIVE, tmp_path / "x.parquet")
    assert code == 1 and "unknown table" in out.err and not (tmp_path / "x.parquet").exists()
    code, out = export("node_telemetry", T0, T0 + FIVE, tmp_path / "x.json")
    assert code == 1 and ".parquet" in out.err and not list(tmp_path.glob("*x.json*"))


@pytest.mark.parametrize("chunks", [[["b", "a", "c"], ["a", "b", "b", "d"]], [["x"] * 5], [], [["b", None, "a"], ["a"]]])
def test_a_string_key_ranks_as_pyarrows_dense_rank(chunks):
    import pyarrow as pa
    import pyarrow.compute as pc

    from gpu_health.storage.telemetry_store import _dense_rank

    arr = pa.chunked_array(chunks, type=pa.string())
    want = pc.rank(arr, sort_keys="ascending", tiebreaker="dense").to_numpy()
    assert _dense_rank(arr).tolist() == want.tolist()

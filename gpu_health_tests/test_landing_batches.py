"""The landing zone's batched read judges exactly like the file-by-file read.

``LandingSource.read_batches`` reads runs of same-schema files in one pyarrow call and
``validate_files`` prechecks a batch at once; ``passes_contract`` clears a clean frame without
pandera's own pass. Each must leave the same valid rows, rejects, quarantined files, dropped
columns and sentinel counts as reading and judging every file alone with pandera.
"""

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.models import CONTRACTS, DCGM_FP64_SENTINEL
from gpu_health.contracts.validate import FileBatch, passes_contract, validate_files
from gpu_health.landing import partition_path, write_partition
from gpu_health.sim.scenario import default_scenario, load_scenario
from gpu_health.sim.telemetry import Window
from gpu_health.sources.landing import LandingSource

T0 = pd.Timestamp("2026-11-03T14:00:00Z")
FIVE = pd.Timedelta(minutes=5)
N = 8  # partitions
END = T0 + N * FIVE
TABLES = ["gpu_telemetry", "node_telemetry", "scheduler_events", "job_runtime_metrics"]


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    return Window(default_scenario(), T0, END).tables()


def _zone(root, tables) -> None:
    for table in TABLES:
        frame = tables[table]
        for i in range(N):
            p = T0 + i * FIVE
            write_partition(root, table, p, frame[(frame["ts"] >= p) & (frame["ts"] < p + FIVE)])


def _rewrite(root, table, i, change) -> None:
    path = partition_path(root, table, T0 + i * FIVE)
    change(pd.read_parquet(path)).to_parquet(path, index=False)


def _put(frame, row, column, value):
    frame = frame.copy()
    frame[column] = frame[column].astype("object")
    frame.at[row, column] = value
    return frame


def _both(root, table):
    src = LandingSource(root)
    alone = validate_files(src.read_files(table, T0, END) + src.strays(table, T0, END), table, start=T0, end=END)
    parts = src.read_batches(table, T0, END) + src.strays(table, T0, END)
    return alone, validate_files(parts, table, start=T0, end=END), parts


def _assert_same(alone, batched):
    pd.testing.assert_frame_equal(alone.valid, batched.valid, check_exact=True)
    pd.testing.assert_frame_equal(alone.rejects, batched.rejects, check_exact=True)
    assert alone.dropped_columns == batched.dropped_columns
    assert alone.sentinels_nulled == batched.sentinels_nulled


@pytest.mark.parametrize("table", TABLES)
def test_a_clean_window_is_one_batch_and_lands_the_same_rows(tables, tmp_path, table):
    _zone(tmp_path, tables)
    alone, batched, parts = _both(tmp_path, table)
    assert [type(p) for p in parts] == [FileBatch]
    assert len(batched.valid) == len(tables[table]) and batched.rejects.empty
    _assert_same(alone, batched)


def test_damaged_files_cost_the_same_in_a_batch_as_alone(tables, tmp_path):
    _zone(tmp_path, tables)
    g = "gpu_telemetry"
    partition_path(tmp_path, g, T0 + FIVE).write_bytes(b"")  # unreadable: breaks the run
    _rewrite(tmp_path, g, 2, lambda f: f.drop(columns=["power_w"]))  # missing column: another schema
    _rewrite(tmp_path, g, 3, lambda f: _put(f, 4, "gpu_util_pct", 150.0))  # a bad row, the same schema
    # three rows an hour ahead: rejected as rows (a minority of the file: not a misplaced file)
    _rewrite(tmp_path, g, 4, lambda f: f.assign(ts=f["ts"].where(f.index >= 3, f["ts"] + pd.Timedelta(hours=1))))
    _rewrite(tmp_path, g, 5, lambda f: _put(_put(f, 1, "power_w", DCGM_FP64_SENTINEL), 2, "fb_used_mib",
                                            DCGM_FP64_SENTINEL).astype({"power_w": "float64", "fb_used_mib": "float64"}))
    _rewrite(tmp_path, g, 6, lambda f: pd.concat([f, f.iloc[[0, 1]]], ignore_index=True))  # duplicate keys
    _rewrite(tmp_path, g, 7, lambda f: f.assign(ts=f["ts"].dt.tz_convert("Asia/Kolkata")))  # another zone
    alone, batched, parts = _both(tmp_path, g)
    assert any(isinstance(p, FileBatch) and len(p.origins) > 1 for p in parts)
    assert len(batched.files_quarantined) == 2 and len(batched.row_rejects) == 4 + 3
    assert batched.sentinels_nulled == 1
    _assert_same(alone, batched)


def test_extra_columns_and_bad_rows_across_files_are_the_same_in_a_batch(tables, tmp_path):
    _zone(tmp_path, tables)
    n = "node_telemetry"
    for i in range(N):  # every file carries a new field: one schema, one batch
        _rewrite(tmp_path, n, i, lambda f: f.assign(firmware="1.2"))
    _rewrite(tmp_path, n, 3, lambda f: _put(f, 0, "health", "rebooting").astype({"health": "string"}))
    _rewrite(tmp_path, n, 4, lambda f: _put(f, 1, "node_id", "").astype({"node_id": "string"}))
    _rewrite(tmp_path, n, 5, lambda f: _put(f, 2, "kernel_version", "x" * 5000).astype({"kernel_version": "string"}))
    alone, batched, parts = _both(tmp_path, n)
    assert [type(p) for p in parts] == [FileBatch]
    assert len(batched.row_rejects) == 3 and len(batched.dropped_columns["firmware"]) == N
    _assert_same(alone, batched)


def _frames() -> dict[str, pd.DataFrame]:
    win = Window(default_scenario(), T0, T0 + FIVE).tables()
    serving = Window(load_scenario({"seed": 7, "cluster": {"serving": True}}), T0, T0 + FIVE)
    win.update({t: serving.table(t) for t in ("inference_requests", "inference_latency_buckets")})
    return {t: CONTRACTS[t].validate(f.reset_index(drop=True)) for t, f in win.items() if len(f)}


MUTATIONS = [
    ("gpu_telemetry", "gpu_util_pct", 100.5), ("gpu_telemetry", "gpu_index", 16), ("gpu_telemetry", "gpu_uuid", ""),
    ("gpu_telemetry", "gpu_uuid", None), ("gpu_telemetry", "temp_c", -41.0), ("gpu_telemetry", "throttle_reasons", 512),
    ("node_telemetry", "health", "rebooting"), ("node_telemetry", "mem_used_pct", -0.1),
    ("scheduler_events", "event", "paused"), ("job_runtime_metrics", "steps", -1),
    ("inference_requests", "errors", 10 ** 9), ("inference_latency_buckets", "count", -1),
]


def test_passes_contract_agrees_with_pandera():
    """A clean frame is cleared (and pandera agrees, returning the same values); each single broken value is
    not (and pandera rejects it); a duplicate key and a misaligned minute are not either."""
    frames = _frames()
    for table, frame in frames.items():
        schema = CONTRACTS[table].to_schema()
        assert passes_contract(frame, schema), table
        pd.testing.assert_frame_equal(schema.validate(frame.copy(), lazy=True), frame, check_exact=True)
    for table, column, value in MUTATIONS:
        frame = frames[table].copy()
        frame[column] = pd.array([value] + list(frame[column].iloc[1:]), dtype=frame[column].dtype)
        schema = CONTRACTS[table].to_schema()
        assert not passes_contract(frame, schema), (table, column, value)
        with pytest.raises(Exception):
            schema.validate(frame, lazy=True)
    gpu = frames["gpu_telemetry"]
    schema = CONTRACTS["gpu_telemetry"].to_schema()
    assert not passes_contract(pd.concat([gpu, gpu.iloc[[0]]], ignore_index=True), schema)
    shifted = gpu.assign(ts=gpu["ts"].where(gpu.index > 0, gpu["ts"] + pd.Timedelta(seconds=1)))
    assert not passes_contract(shifted, schema)
    # a dtype pandera would coerce is left to pandera
    assert not passes_contract(gpu.astype({"gpu_index": "int32"}), schema)
    # a superset of the distinct values is enough to clear; a failing extra value only sends it to pandera
    text = {"gpu_uuid": np.array(sorted(set(gpu["gpu_uuid"])) + ["GPU-not-in-the-frame"], dtype=object)}
    assert passes_contract(gpu, schema, distinct=text)
    assert not passes_contract(gpu, schema, distinct={"gpu_uuid": np.append(text["gpu_uuid"], "")})

"""The source contracts (gpu_health.contracts) against the simulator's output and bad input.

Each class of bad input is judged the way contracts.md says: a table-level
break raises ContractViolation naming the origin, the column and example
values; a row-level break sends exactly the offending rows to ``rejects`` and
keeps the good rows unchanged.
"""

import json

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.models import (
    CONTRACTS,
    MAX_FREE_TEXT_CHARS,
    MAX_ID_CHARS,
    MAX_NODE_LIST_CHARS,
    DCGM_FP64_SENTINEL,
    DCGM_INT64_SENTINEL,
    FIVE_MINUTE_SOURCES,
    OPTIONAL_DCGM_COLUMNS,
    PARTITION_COLUMN,
    columns,
    empty_frame,
    text_bound,
)
from gpu_health.contracts.validate import REJECT_COLUMNS, ContractViolation, validate_frame
from gpu_health.sim.scenario import default_scenario, load_scenario
from gpu_health.sim.telemetry import Window, cost_capacity, maintenance_windows

T0 = pd.Timestamp("2026-11-03T14:00:00Z")  # a Tuesday afternoon: every pool busy
T1 = T0 + pd.Timedelta(minutes=5)
DAY0 = T0.normalize()
DAY1 = DAY0 + pd.Timedelta(days=1)
ORIGIN = "landing/{source}/2026-11-03/1400.parquet"


@pytest.fixture(scope="module")
def window() -> dict[str, pd.DataFrame]:
    """One 5-minute partition of the default scenario, all seven 5-minute sources."""
    return Window(default_scenario(), T0, T1).tables()


@pytest.fixture(scope="module")
def changes() -> pd.DataFrame:
    """change_events of a partition holding a benign kernel upgrade and a driver deploy."""
    scen = load_scenario({
        "seed": 3, "start": "2026-11-03T00:00:00Z", "end": "2026-11-04T00:00:00Z",
        "incidents": [{"kind": "driver_regression", "start": "2026-11-03T14:02:00Z", "duration": "30m",
                       "scope": {"region": "us-east", "nodes": 3}}],
        "changes": [{"kind": "kernel_upgrade", "ts": "2026-11-03T14:01:30Z", "scope": {"region": "eu-west", "nodes": 4},
                     "from_version": "6.8.0-49-generic", "to_version": "6.8.0-51-generic"}],
    })
    return Window(scen, T0, T1).table("change_events")


@pytest.fixture(scope="module")
def maintenance() -> pd.DataFrame:
    scen = load_scenario({
        "seed": 3, "start": "2026-11-03T00:00:00Z", "end": "2026-11-05T00:00:00Z",
        "incidents": [{"kind": "maintenance", "start": "2026-11-03T16:00:00Z", "duration": "2h",
                       "scope": {"region": "eu-west", "nodes": 3, "reason": "firmware 2.1 rollout"}},
                      {"kind": "maintenance", "start": "2026-11-04T02:00:00Z", "duration": "90m",
                       "scope": {"region": "us-east", "nodes": 2}}],
    })
    return maintenance_windows(scen)


@pytest.fixture(scope="module")
def capacity() -> pd.DataFrame:
    return cost_capacity(default_scenario(), DAY0)


@pytest.fixture(scope="module")
def serving() -> dict[str, pd.DataFrame]:
    """The serving layer's two tables (off on the default profile) from a scenario that turns it on."""
    win = Window(load_scenario({"seed": 7, "cluster": {"serving": True}}), T0, T1)
    return {t: win.table(t) for t in ("inference_requests", "inference_latency_buckets")}


@pytest.fixture(scope="module")
def facility() -> pd.DataFrame:
    """facility_telemetry (off on the default profile) from a scenario that turns the facility layer on."""
    return Window(load_scenario({"seed": 7, "cluster": {"facility": True}}), T0, T1).table("facility_telemetry")


@pytest.fixture(scope="module")
def platform() -> dict[str, pd.DataFrame]:
    """The platform layer's two tables (off on the default profile) from a small cluster that turns it on."""
    win = Window(load_scenario({"seed": 7, "cluster": {"gpus": 96, "platform": True}}), T0, T1)
    return {t: win.table(t) for t in ("kube_pods", "kube_nodes")}


@pytest.fixture(scope="module")
def frames(window, changes, maintenance, capacity, serving, facility, platform) -> dict[str, pd.DataFrame]:
    return {**window, "change_events": changes, "maintenance_windows": maintenance, "cost_capacity": capacity,
            **serving, "facility_telemetry": facility, **platform}


def _bounds(source: str):
    if source == "cost_capacity":
        return DAY0, DAY1
    if source == "maintenance_windows":
        return None, None
    return T0, T1


def check(df: pd.DataFrame, source: str):
    start, end = _bounds(source)
    return validate_frame(df, source, start=start, end=end, origin=ORIGIN.format(source=source))


def sample(frames, source: str, n: int = 30, where=None) -> pd.DataFrame:
    """A small slice of a real frame (rows matching ``where`` first), reindexed 0..n-1."""
    df = frames[source]
    if where is not None:
        hit = where(df)
        df = pd.concat([df[hit], df[~hit]])
    out = df.head(n).reset_index(drop=True).copy()
    assert len(out) >= 1, f"no {source} rows to test with"
    return out


def put(df: pd.DataFrame, row: int, column: str, value) -> pd.DataFrame:
    """Set one cell, widening the column to object so any value fits."""
    df = df.copy()
    df[column] = df[column].astype("object")
    df.at[row, column] = value
    return df


def assert_same_rows(valid: pd.DataFrame, expected: pd.DataFrame):
    """Same rows and values; string columns may come back in the contract's string dtype."""
    assert list(valid.columns) == list(expected.columns)
    strings = {c: valid[c].dtype for c in valid.columns
               if isinstance(valid[c].dtype, pd.StringDtype) and expected[c].dtype == object}
    pd.testing.assert_frame_equal(valid, expected.astype(strings))


def assert_rows_rejected(result, clean: pd.DataFrame, rows: list[int], source: str, column, reason: str):
    """Exactly ``rows`` are rejected (for ``reason`` on ``column``); every other row is kept as it was."""
    rej = result.rejects
    assert list(rej.columns) == REJECT_COLUMNS
    assert sorted(rej["row_index"].unique()) == sorted(rows), rej[["row_index", "column", "reason"]]
    mine = rej[rej["reason"].str.contains(reason, regex=False)]
    assert sorted(mine["row_index"].unique()) == sorted(rows), rej[["row_index", "column", "reason"]]
    if column is not None:
        assert set(mine["column"]) == {column}
    assert (rej["source"] == source).all()
    assert (rej["origin"] == ORIGIN.format(source=source)).all()
    start, _ = _bounds(source)
    if start is not None:
        assert (rej["partition_start"] == start).all()
    for rj in rej["row_json"]:
        assert set(json.loads(rj)) == set(columns(source))
    # the other rows come out exactly as they went in (clean frames are the simulator's, already coerced)
    assert_same_rows(result.valid, clean.drop(index=rows).reset_index(drop=True))


def assert_violation(err: ContractViolation, source: str, column: str, *fragments: str):
    text = str(err)
    assert ORIGIN.format(source=source) in text
    assert source in text
    assert f"'{column}'" in text and err.column == column
    for frag in fragments:
        assert frag in text, text
    assert len(err.examples) <= 5


# --- the simulator's output keeps its contract -------------------------------------------------

@pytest.mark.parametrize("source", FIVE_MINUTE_SOURCES)
def test_simulated_partition_satisfies_contract(frames, source):
    df = frames[source]
    assert len(df) > 0
    assert list(df.columns) == columns(source)
    result = check(df, source)
    assert result.rejects.empty, result.reject_counts
    assert result.sentinels_nulled == 0
    assert_same_rows(result.valid, df)


@pytest.mark.parametrize("source", ["cost_capacity", "maintenance_windows"])
def test_daily_and_calendar_tables_satisfy_contract(frames, source):
    df = frames[source]
    assert len(df) > 0
    result = check(df, source)
    assert result.rejects.empty, result.reject_counts
    assert_same_rows(result.valid, df)


def test_sim_tables_cover_the_default_cluster(frames):
    # one row per GPU / node / link per minute in a quiet partition
    assert len(frames["gpu_telemetry"]) == 1200 * 5
    assert len(frames["node_telemetry"]) == 80 * 5
    assert len(frames["network_telemetry"]) == 80 * 8 * 5
    assert len(frames["cost_capacity"]) == 4
    assert frames["cost_capacity"]["capacity_gpus"].sum() == 1200
    assert set(frames["change_events"]["kind"]) == {"kernel_upgrade", "driver_upgrade"}


@pytest.mark.parametrize("source", list(CONTRACTS))
def test_empty_frame_has_the_contract_columns_and_validates(source):
    df = empty_frame(source)
    assert list(df.columns) == columns(source) == list(CONTRACTS[source].to_schema().columns)
    result = check(df, source)
    assert result.valid.empty and result.rejects.empty
    assert list(result.valid.columns) == columns(source)


# --- table-level breaks ---------------------------------------------------------------------------

@pytest.mark.parametrize("source, column", [
    ("gpu_telemetry", "temp_c"), ("node_telemetry", "health"), ("network_telemetry", "link_id"),
    ("scheduler_events", "event"), ("job_runtime_metrics", "steps"), ("job_metadata", "team"),
    ("cost_capacity", "reserved_gpus"), ("change_events", "kind"), ("maintenance_windows", "end"),
])
def test_missing_column_fails_the_table(frames, source, column):
    df = frames[source].drop(columns=[column])
    with pytest.raises(ContractViolation) as exc:
        check(df, source)
    assert_violation(exc.value, source, column, "missing column")


@pytest.mark.parametrize("source", list(CONTRACTS))
def test_unexpected_column_is_dropped_and_named_and_the_rows_kept(frames, source):
    # schema evolution (an exporter's new field), not corruption
    # (15 rows: one whole latency histogram-minute, +Inf bucket included, for inference_latency_buckets)
    clean = frames[source].head(15).reset_index(drop=True)
    df = clean.copy()
    df["gpu_temp_fahrenheit"] = 187.25
    result = check(df, source)
    assert result.dropped_columns == {"gpu_temp_fahrenheit": [ORIGIN.format(source=source)]}
    assert result.rejects.empty
    assert_same_rows(result.valid, clean)


@pytest.mark.parametrize("source, column", [
    ("gpu_telemetry", "gpu_util_pct"), ("gpu_telemetry", "xid"), ("gpu_telemetry", "throttle_reasons"),
    ("node_telemetry", "cpu_util_pct"), ("network_telemetry", "rx_gbps"), ("network_telemetry", "link_up"),
    ("scheduler_events", "gpus"), ("job_runtime_metrics", "steps"), ("job_metadata", "requested_gpus"),
    ("cost_capacity", "capacity_gpus"),
])
def test_column_of_strings_fails_the_table(frames, source, column):
    df = frames[source].head(20).copy()
    df[column] = [f"bogus-{i}" for i in range(len(df))]
    with pytest.raises(ContractViolation) as exc:
        check(df, source)
    assert_violation(exc.value, source, column, "cannot be coerced", "bogus-0")
    assert exc.value.examples == [f"bogus-{i}" for i in range(min(5, len(df)))]


@pytest.mark.parametrize("source", [s for s in CONTRACTS if PARTITION_COLUMN[s] not in (None, "date")])
def test_naive_timestamps_fail_the_table(frames, source):
    col = PARTITION_COLUMN[source]
    df = frames[source].copy()
    df[col] = df[col].dt.tz_localize(None)
    with pytest.raises(ContractViolation) as exc:
        check(df, source)
    assert_violation(exc.value, source, col, "naive", str(df[col].iloc[0]))


def test_naive_timestamp_strings_fail_the_table(frames):
    df = frames["gpu_telemetry"].head(10).copy()
    df["ts"] = df["ts"].dt.strftime("%Y-%m-%d %H:%M:%S")
    with pytest.raises(ContractViolation) as exc:
        check(df, "gpu_telemetry")
    assert_violation(exc.value, "gpu_telemetry", "ts", "naive", "2026-11-03 14:00:00")


def test_naive_timestamps_in_an_optional_column_fail_the_table(frames):
    df = frames["job_metadata"].copy()
    assert df["sla_deadline"].notna().any()
    df["sla_deadline"] = df["sla_deadline"].dt.tz_localize(None)
    with pytest.raises(ContractViolation) as exc:
        check(df, "job_metadata")
    assert_violation(exc.value, "job_metadata", "sla_deadline", "naive")


def test_aware_timestamps_in_another_zone_are_converted_to_utc(frames):
    df = frames["gpu_telemetry"].head(10).copy()
    df["ts"] = df["ts"].dt.tz_convert("America/New_York")
    result = check(df, "gpu_telemetry")
    assert result.rejects.empty
    assert str(result.valid["ts"].dtype) == "datetime64[ns, UTC]"
    pd.testing.assert_series_equal(result.valid["ts"], frames["gpu_telemetry"]["ts"].head(10))


@pytest.mark.parametrize("source", [s for s in FIVE_MINUTE_SOURCES])
@pytest.mark.parametrize("where", ["before", "at_end"])
def test_timestamp_outside_the_partition_fails_the_table(frames, source, where):
    col = PARTITION_COLUMN[source]
    df = frames[source].head(10).reset_index(drop=True)
    bad = T0 - pd.Timedelta(minutes=1) if where == "before" else T1  # the end is exclusive
    df = put(df, len(df) - 1, col, bad)
    df[col] = pd.to_datetime(df[col], utc=True)
    with pytest.raises(ContractViolation) as exc:
        check(df, source)
    assert_violation(exc.value, source, col, "1 row(s) outside the partition", str(bad))


def test_cost_capacity_row_of_another_day_fails_the_table(frames):
    df = put(frames["cost_capacity"], 1, "date", DAY1.date())
    with pytest.raises(ContractViolation) as exc:
        check(df, "cost_capacity")
    assert_violation(exc.value, "cost_capacity", "date", "outside the partition", "2026-11-04")


def test_violation_lists_at_most_five_examples(frames):
    df = frames["node_telemetry"].copy()
    df["ts"] = df["ts"] + pd.Timedelta(hours=1)
    with pytest.raises(ContractViolation) as exc:
        check(df, "node_telemetry")
    assert exc.value.examples == df["ts"].astype(str).head(5).tolist()
    assert f"{len(df)} row(s) outside" in str(exc.value)


# --- row-level breaks: the bad rows are rejected, the good ones kept ------------------------------

NULL_IN_REQUIRED = [
    ("gpu_telemetry", "gpu_util_pct", np.nan),
    ("gpu_telemetry", "xid", np.nan),
    ("gpu_telemetry", "node_id", None),
    ("gpu_telemetry", "ts", pd.NaT),
    ("node_telemetry", "driver_version", None),
    ("node_telemetry", "health", None),
    ("network_telemetry", "rx_gbps", np.nan),
    ("network_telemetry", "link_up", None),
    ("scheduler_events", "job_id", None),
    ("scheduler_events", "gpus", None),
    ("job_runtime_metrics", "steps", np.nan),
    ("job_runtime_metrics", "checkpoint_time_s", np.nan),
    ("job_metadata", "team", None),
    ("job_metadata", "submitted_at", pd.NaT),
    ("cost_capacity", "capacity_gpus", np.nan),
    ("change_events", "description", None),
    ("maintenance_windows", "reason", None),
]


def test_a_duplicate_key_is_found_by_value_whichever_string_objects_hold_it(frames):
    """A frame handed over in memory has its text factorized by string object first (validate_frame's codes): a
    copy of a key held by another object with the same characters is the same key."""
    clean = sample(frames, "gpu_telemetry", n=12)
    copy = clean.iloc[[1]].copy()
    copy["gpu_uuid"] = pd.array(["".join(list(v)) for v in copy["gpu_uuid"]], dtype=clean["gpu_uuid"].dtype)
    assert copy["gpu_uuid"].iloc[0] is not clean["gpu_uuid"].iloc[1]  # the premise: another object, equal
    df = pd.concat([clean, copy], ignore_index=True)
    result = check(df, "gpu_telemetry")
    assert_rows_rejected(result, df, [len(clean)], "gpu_telemetry", None, "duplicate key (ts, gpu_uuid)")
    assert_same_rows(result.valid, clean)


@pytest.mark.parametrize("source, column, value", NULL_IN_REQUIRED)
def test_null_in_required_field_rejects_the_row(frames, source, column, value):
    clean = sample(frames, source)
    row = 1
    result = check(put(clean, row, column, value), source)
    assert_rows_rejected(result, clean, [row], source, None, f"null in required field {column}")


@pytest.mark.parametrize("column", OPTIONAL_DCGM_COLUMNS + ["job_id"])
def test_null_in_optional_field_is_kept(frames, column):
    clean = sample(frames, "gpu_telemetry")
    result = check(put(clean, 1, column, None), "gpu_telemetry")
    assert result.rejects.empty
    assert len(result.valid) == len(clean)
    assert pd.isna(result.valid.at[1, column])


# Fields some real collectors do not expose at all: power and temperature (a utilisation-only GPU log
# such as Philly's), retransmits and latency (switch-port counters, node-exporter IB counters).
NOT_EXPOSED_BY_SOME_COLLECTORS = [
    ("gpu_telemetry", "power_w"), ("gpu_telemetry", "temp_c"),
    ("network_telemetry", "retransmits"), ("network_telemetry", "latency_us"),
]


@pytest.mark.parametrize("source, column", NOT_EXPOSED_BY_SOME_COLLECTORS)
def test_field_a_collector_does_not_expose_is_null_and_the_row_is_kept(frames, source, column):
    clean = sample(frames, source)
    df = clean.copy()
    df[column] = None  # the whole collector lacks it: every row null
    result = check(df, source)
    assert result.rejects.empty
    assert len(result.valid) == len(clean)
    assert result.valid[column].isna().all()  # null, never a zero reading
    rest = [c for c in clean.columns if c != column]
    assert_same_rows(result.valid[rest], clean[rest])


@pytest.mark.parametrize("source, column", NOT_EXPOSED_BY_SOME_COLLECTORS)
def test_field_a_collector_does_not_expose_keeps_its_range_check(frames, source, column):
    clean = sample(frames, source)
    result = check(put(clean, 3, column, -50), source)  # below every range floor (temp_c: -40 C)
    assert_rows_rejected(result, clean, [3], source, column, f"{column} out of range")


def test_yarn_is_a_scheduler(frames):
    clean = sample(frames, "scheduler_events")
    result = check(put(put(clean, 1, "scheduler", "yarn"), 2, "scheduler", "mesos"), "scheduler_events")
    assert result.rejects["row_index"].unique().tolist() == [2]
    assert result.reject_counts == {"unknown value of scheduler": 1}


NEGATIVE_COUNTERS = [
    ("gpu_telemetry", "xid", -1),
    ("gpu_telemetry", "ecc_sbe_delta", -4),
    ("gpu_telemetry", "power_w", -1.5),
    ("network_telemetry", "retransmits", -7),
    ("network_telemetry", "rx_gbps", -0.1),
    ("node_telemetry", "disk_read_mbps", -3.0),
    ("scheduler_events", "gpus", -2),
    ("job_runtime_metrics", "samples", -128),
    ("job_runtime_metrics", "last_step", -1),
    ("job_runtime_metrics", "grad_norm", -0.25),  # a norm is never negative
    ("job_metadata", "requested_gpus", -8),
    ("cost_capacity", "reserved_gpus", -10),
    ("cost_capacity", "on_demand_gpu_hours", -0.5),
]


@pytest.mark.parametrize("source, column, value", NEGATIVE_COUNTERS)
def test_negative_counter_rejects_the_row(frames, source, column, value):
    clean = sample(frames, source)
    result = check(put(clean, 2, column, value), source)
    assert_rows_rejected(result, clean, [2], source, column, f"{column} out of range")
    assert result.rejects["value"].iloc[0] == str(value)


OUT_OF_RANGE = [
    ("gpu_telemetry", "gpu_util_pct", 100.5),
    ("gpu_telemetry", "sm_active", 1.2),
    ("gpu_telemetry", "tensor_active", 3.0),
    ("gpu_telemetry", "gpu_index", 16),
    ("gpu_telemetry", "throttle_reasons", 0x200),
    ("node_telemetry", "cpu_util_pct", 140.0),
    ("node_telemetry", "mem_used_pct", 101.0),
    ("node_telemetry", "nvme_util_pct", 250.0),
    ("network_telemetry", "packet_loss_pct", 100.01),
]


@pytest.mark.parametrize("source, column, value", OUT_OF_RANGE)
def test_percentage_or_ratio_above_its_range_rejects_the_row(frames, source, column, value):
    clean = sample(frames, source)
    rows = [0, 4]
    df = put(put(clean, 0, column, value), 4, column, value)
    result = check(df, source)
    assert_rows_rejected(result, clean, rows, source, column, f"{column} out of range")


def test_boundary_values_are_accepted(frames):
    clean = sample(frames, "gpu_telemetry")
    df = put(put(clean, 0, "gpu_util_pct", 100.0), 1, "gpu_util_pct", 0.0)
    df = put(put(df, 2, "sm_active", 1.0), 3, "throttle_reasons", 0x1FF)
    result = check(df, "gpu_telemetry")
    assert result.rejects.empty
    assert result.valid.loc[[0, 1], "gpu_util_pct"].tolist() == [100.0, 0.0]
    assert result.valid.at[3, "throttle_reasons"] == 0x1FF


UNKNOWN_ENUMS = [
    ("node_telemetry", "health", "sick", None),
    ("scheduler_events", "event", "exploded", lambda d: d["event"] == "submitted"),
    ("scheduler_events", "scheduler", "pbs", None),
    ("scheduler_events", "exit_state", "exploded", lambda d: d["event"] == "ended"),
    ("job_metadata", "workload_class", "gaming", None),
    ("change_events", "kind", "kernel_downgrade", None),
]


@pytest.mark.parametrize("source, column, value, where", UNKNOWN_ENUMS)
def test_unknown_enum_value_rejects_the_row(frames, source, column, value, where):
    clean = sample(frames, source, where=where)
    row = min(1, len(clean) - 1)
    result = check(put(clean, row, column, value), source)
    assert_rows_rejected(result, clean, [row], source, column, f"unknown value of {column}")
    assert result.rejects["value"].tolist() == [value]


DUPLICATE_KEYS = [
    ("gpu_telemetry", ["ts", "gpu_uuid"], "gpu_util_pct"),
    ("node_telemetry", ["ts", "node_id"], "cpu_util_pct"),
    ("network_telemetry", ["ts", "node_id", "link_id"], "rx_gbps"),
    ("scheduler_events", ["event_id"], "priority"),
    ("job_runtime_metrics", ["ts", "job_id"], "loss"),
    ("job_metadata", ["job_id"], "requested_mem_gb"),
    ("cost_capacity", ["date", "region", "sku"], "on_demand_gpu_hours"),
    ("change_events", ["event_id"], "description"),
    ("maintenance_windows", ["window_id"], "reason"),
]


@pytest.mark.parametrize("source, key, other", DUPLICATE_KEYS)
def test_duplicate_key_keeps_the_first_and_rejects_later_ones(frames, source, key, other):
    clean = sample(frames, source, n=12)
    row = min(1, len(clean) - 1)
    later = []
    for n in (1, 2):  # two later copies of the row, each with some other value changed
        copy = clean.iloc[[row]].copy()
        copy[other] = copy[other].map(lambda v: f"{v} (copy {n})" if isinstance(v, str) else v + n)
        later.append(copy)
    df = pd.concat([clean, *later], ignore_index=True)
    result = check(df, source)
    dup_rows = [len(clean), len(clean) + 1]
    assert_rows_rejected(result, df, dup_rows, source, None, f"duplicate key ({', '.join(key)})")
    # the first occurrence is the one kept, with its own values
    assert_same_rows(result.valid, clean)


UNCOERCIBLE = [
    ("gpu_telemetry", "power_w", ["n/a", "ERR"]),
    ("gpu_telemetry", "xid", ["79?", "none"]),
    ("gpu_telemetry", "throttle_reasons", ["0xZZ", "?"]),
    ("node_telemetry", "disk_read_mbps", ["fast", "--"]),
    ("network_telemetry", "retransmits", [2.5, "many"]),
    ("network_telemetry", "link_up", ["maybe", "up-ish"]),
    ("job_runtime_metrics", "steps", ["NaN-ish", 0.5]),
    ("job_metadata", "requested_mem_gb", ["64GB", "lots"]),
    ("cost_capacity", "on_demand_gpu_hours", ["12h"]),  # 4 rows: one bad value is a bad row, two a bad column
]


@pytest.mark.parametrize("source, column, values", UNCOERCIBLE)
def test_a_few_uncoercible_values_reject_only_their_rows(frames, source, column, values):
    clean = sample(frames, source)
    rows = [1, 3][:len(values)]
    df = clean
    for r, v in zip(rows, values):
        df = put(df, r, column, v)
    result = check(df, source)
    assert_rows_rejected(result, clean, rows, source, column, f"value of {column} cannot be coerced")
    assert sorted(result.rejects["value"]) == sorted(str(v) for v in values)


def test_bool_strings_are_read_as_what_they_say(frames):
    clean = sample(frames, "network_telemetry", n=6)
    df = put(put(put(clean, 1, "link_up", "False"), 2, "link_up", "true"), 3, "link_up", 0)
    result = check(df, "network_telemetry")
    assert result.rejects.empty
    expected = clean["link_up"].tolist()
    expected[1:4] = [False, True, False]
    assert result.valid["link_up"].tolist() == expected


def test_whole_numbers_as_floats_are_accepted_in_integer_columns(frames):
    clean = sample(frames, "network_telemetry")
    df = clean.copy()
    df["retransmits"] = df["retransmits"].astype(float)
    result = check(df, "network_telemetry")
    assert result.rejects.empty
    assert_same_rows(result.valid, clean)


# --- DCGM "not supported" sentinels --------------------------------------------------------------

@pytest.mark.parametrize("column, sentinel", [
    ("sm_active", DCGM_FP64_SENTINEL), ("tensor_active", DCGM_INT64_SENTINEL),
    ("throttle_reasons", DCGM_INT64_SENTINEL + 5), ("ecc_sbe_delta", 0x7FFFFFFFFFFFFFFF), ("ecc_dbe_delta", DCGM_INT64_SENTINEL),
    ("power_w", DCGM_INT64_SENTINEL), ("temp_c", DCGM_FP64_SENTINEL),
])
def test_sentinel_in_optional_field_becomes_null_and_the_row_is_kept(frames, column, sentinel):
    clean = sample(frames, "gpu_telemetry")
    df = put(put(clean, 2, column, sentinel), 5, column, sentinel)
    result = check(df, "gpu_telemetry")
    assert result.rejects.empty
    assert result.sentinels_nulled == 2
    assert len(result.valid) == len(clean)
    assert result.valid[column].isna().tolist() == [i in (2, 5) for i in range(len(clean))]
    # never a zero reading, and the other columns are untouched
    expected = clean.copy()
    expected.loc[[2, 5], column] = None
    assert_same_rows(result.valid, expected)


@pytest.mark.parametrize("column, sentinel", [
    ("gpu_util_pct", DCGM_FP64_SENTINEL), ("fb_used_mib", DCGM_INT64_SENTINEL),
    ("sm_clock_mhz", DCGM_INT64_SENTINEL + 3), ("xid", DCGM_INT64_SENTINEL),
])
def test_sentinel_in_required_field_rejects_the_row(frames, column, sentinel):
    clean = sample(frames, "gpu_telemetry")
    result = check(put(clean, 4, column, sentinel), "gpu_telemetry")
    assert_rows_rejected(result, clean, [4], "gpu_telemetry", column, "sentinel")
    assert result.rejects["check"].tolist() == ["dcgm_sentinel"]
    assert result.sentinels_nulled == 0


def test_sentinel_in_a_native_int64_column(frames):
    clean = sample(frames, "gpu_telemetry")
    df = clean.copy()
    df["xid"] = df["xid"].astype("int64")
    df.loc[3, "xid"] = DCGM_INT64_SENTINEL
    df["ecc_dbe_delta"] = df["ecc_dbe_delta"].astype("Int64")
    df.loc[6, "ecc_dbe_delta"] = DCGM_INT64_SENTINEL + 1
    result = check(df, "gpu_telemetry")
    assert result.rejects["row_index"].tolist() == [3]
    assert result.sentinels_nulled == 1
    assert len(result.valid) == len(clean) - 1
    assert result.valid["ecc_dbe_delta"].isna().sum() == 1


def test_large_but_real_values_are_not_sentinels(frames):
    clean = sample(frames, "gpu_telemetry")
    df = put(clean, 1, "ecc_sbe_delta", 10_000)
    result = check(df, "gpu_telemetry")
    assert result.rejects.empty and result.sentinels_nulled == 0
    assert result.valid.at[1, "ecc_sbe_delta"] == 10_000


# --- named dataframe checks --------------------------------------------------------------------

def test_step_time_with_zero_steps_breaks_a_named_check(frames):
    clean = sample(frames, "job_runtime_metrics", where=lambda d: d["steps"] > 0)
    assert clean.at[2, "step_time_s"] > 0
    result = check(put(clean, 2, "steps", 0), "job_runtime_metrics")
    assert_rows_rejected(result, clean, [2], "job_runtime_metrics", None, "step_time_null_iff_no_steps")
    assert result.rejects["check"].tolist() == ["step_time_null_iff_no_steps"]  # one reject, not one per column


def test_steps_without_step_time_break_the_same_check(frames):
    clean = sample(frames, "job_runtime_metrics", where=lambda d: d["steps"] > 0)
    result = check(put(clean, 0, "step_time_s", np.nan), "job_runtime_metrics")
    assert_rows_rejected(result, clean, [0], "job_runtime_metrics", None, "step_time_null_iff_no_steps")


def test_a_stalled_minute_is_valid(frames):
    clean = sample(frames, "job_runtime_metrics", where=lambda d: d["steps"] > 0)
    df = clean.copy()
    df.loc[1, ["steps", "samples", "step_time_s", "data_loader_time_s", "grad_sync_time_s"]] = [0, 0, np.nan, np.nan, np.nan]
    result = check(df, "job_runtime_metrics")
    assert result.rejects.empty
    assert result.valid.at[1, "steps"] == 0 and pd.isna(result.valid.at[1, "step_time_s"])


def test_exit_state_on_a_non_ended_event_breaks_a_named_check(frames):
    clean = sample(frames, "scheduler_events", where=lambda d: d["event"] == "started")
    result = check(put(clean, 1, "exit_state", "completed"), "scheduler_events")
    assert_rows_rejected(result, clean, [1], "scheduler_events", None, "exit_state_only_on_ended")
    assert len(result.rejects) == 1


def test_ended_event_without_exit_state_breaks_the_same_check(frames):
    clean = sample(frames, "scheduler_events", where=lambda d: d["event"] == "ended")
    result = check(put(clean, 0, "exit_state", None), "scheduler_events")
    assert_rows_rejected(result, clean, [0], "scheduler_events", None, "exit_state_only_on_ended")


def test_minute_grain_timestamp_is_floored_to_its_minute(frames):
    # collectors stamp the scrape instant (dcgm-exporter: 250 ms into the minute): the reading is that minute's
    clean = sample(frames, "node_telemetry")
    df = clean.copy()
    df.loc[3, "ts"] = df.loc[3, "ts"] + pd.Timedelta(seconds=17)
    df.loc[4, "ts"] = df.loc[4, "ts"] + pd.Timedelta(milliseconds=250)
    result = check(df, "node_telemetry")
    assert result.rejects.empty
    pd.testing.assert_series_equal(result.valid["ts"], clean["ts"])
    # the model used alone still holds the rule
    with pytest.raises(Exception):
        CONTRACTS["node_telemetry"].validate(df, lazy=True)


def test_scheduler_events_are_not_minute_aligned(frames):
    df = frames["scheduler_events"]
    assert (df["ts"].dt.second != 0).any()  # and the contract accepts them (see the simulator test above)


def test_maintenance_window_must_end_after_it_starts(frames):
    clean = frames["maintenance_windows"].reset_index(drop=True)
    df = clean.copy()
    df.loc[0, "end"] = df.loc[0, "start"]
    result = check(df, "maintenance_windows")
    assert_rows_rejected(result, clean, [0], "maintenance_windows", None, "end_after_start")


# --- values no collector reads: +-inf, over-long text, NUL ----------------------------

@pytest.mark.parametrize("source, column, value", [
    ("job_runtime_metrics", "step_time_s", np.inf), ("gpu_telemetry", "power_w", np.inf),
    ("gpu_telemetry", "fb_used_mib", np.inf), ("node_telemetry", "disk_read_mbps", np.inf),
    ("network_telemetry", "latency_us", np.inf), ("job_runtime_metrics", "loss", -np.inf),
    ("job_metadata", "requested_mem_gb", np.inf), ("cost_capacity", "on_demand_gpu_hours", np.inf),
    ("gpu_telemetry", "temp_c", -np.inf), ("job_runtime_metrics", "grad_norm", -np.inf),
])
def test_infinite_float_rejects_the_row(frames, source, column, value):
    clean = sample(frames, source, where=(lambda d: d["steps"] > 0) if column == "step_time_s" else None)
    result = check(put(clean, 1, column, value), source)
    assert_rows_rejected(result, clean, [1], source, column, "infinite")
    assert result.rejects["value"].iloc[0] in ("inf", "-inf")


def test_an_overflowed_gradient_norm_is_kept_and_an_unreported_one_is_null(frames):
    # +inf is what a trainer's norm is when a gradient overflowed (the detector's evidence), never a broken reading
    clean = sample(frames, "job_runtime_metrics", where=lambda d: d["grad_norm"].notna())
    assert clean["grad_norm"].notna().any()  # the simulator reports it for a share of the jobs
    df = clean.copy()
    df.loc[[1, 3], "grad_norm"] = [np.inf, np.nan]
    result = check(df, "job_runtime_metrics")
    assert result.rejects.empty and len(result.valid) == len(clean)
    assert np.isposinf(result.valid.at[1, "grad_norm"]) and pd.isna(result.valid.at[3, "grad_norm"])


def test_infinite_float_in_a_float_dtype_column(frames):
    clean = sample(frames, "gpu_telemetry")
    df = clean.copy()
    df.loc[[2, 7], "sm_clock_mhz"] = np.inf  # stays float64: no object widening
    assert df["sm_clock_mhz"].dtype == "float64"
    assert_rows_rejected(check(df, "gpu_telemetry"), clean, [2, 7], "gpu_telemetry", "sm_clock_mhz", "infinite")


@pytest.mark.parametrize("source, column, bound", [
    ("gpu_telemetry", "gpu_uuid", MAX_ID_CHARS), ("gpu_telemetry", "job_id", MAX_ID_CHARS),
    ("change_events", "description", MAX_FREE_TEXT_CHARS), ("scheduler_events", "node_ids", MAX_NODE_LIST_CHARS),
])
def test_text_over_its_bound_rejects_the_row(frames, source, column, bound):
    clean = sample(frames, source)
    assert text_bound(column) == bound
    result = check(put(clean, 0, column, "x" * bound), source)  # at the bound: kept
    assert result.rejects.empty
    result = check(put(clean, 0, column, "x" * (bound + 1)), source)
    assert_rows_rejected(result, clean, [0], source, column, f"over its bound of {bound:,}")
    # the reject keeps a bounded excerpt, not the text it was rejected for
    assert len(result.rejects["value"].iloc[0]) < 1100
    assert len(result.rejects["row_json"].iloc[0]) < 4 * 1100 + 2000


def test_a_50_mb_string_is_a_reject_with_a_bounded_record(frames):
    clean = sample(frames, "node_telemetry")
    huge = "A" * (50 * 1024 * 1024)
    result = check(put(clean, 3, "kernel_version", huge), "node_telemetry")
    assert_rows_rejected(result, clean, [3], "node_telemetry", "kernel_version", "52,428,800 characters")
    assert result.rejects["row_json"].str.len().max() < 10_000


def test_nul_character_in_text_rejects_the_row(frames):
    clean = sample(frames, "job_metadata")
    result = check(put(clean, 4, "team", "fraud\x00ml"), "job_metadata")
    assert_rows_rejected(result, clean, [4], "job_metadata", "team", "NUL character")


def test_text_that_looks_like_sql_null_or_escapes_is_kept(frames):
    clean = sample(frames, "change_events")
    for text in ("\\N", "", "tab\there", "line\nbreak", 'quote " and \\ backslash', "NULL"):
        result = check(put(clean, 0, "description", text), "change_events")
        assert result.rejects.empty, text
        assert result.valid["description"].iloc[0] == text


def test_several_breaks_in_one_frame_are_all_reported(frames):
    clean = sample(frames, "gpu_telemetry", n=40)
    df = put(clean, 1, "gpu_util_pct", 180.0)
    df = put(df, 5, "node_id", None)
    df = put(df, 9, "power_w", "n/a")
    df = put(df, 13, "xid", DCGM_INT64_SENTINEL)
    df = put(df, 17, "ecc_sbe_delta", DCGM_INT64_SENTINEL)  # optional: nulled, kept
    df = pd.concat([df, df.iloc[[20]]], ignore_index=True)
    result = check(df, "gpu_telemetry")
    assert sorted(result.rejects["row_index"].unique()) == [1, 5, 9, 13, 40]
    assert result.sentinels_nulled == 1
    assert len(result.valid) == 40 - 4
    counts = result.reject_counts
    assert counts == {
        "gpu_util_pct out of range (less_than_or_equal_to(100))": 1,
        "null in required field node_id": 1,
        "value of power_w cannot be coerced to float64 (not a number)": 1,
        "DCGM 'not supported' sentinel in required field xid": 1,
        "duplicate key (ts, gpu_uuid)": 1,
    }


# --- files judged one by one: a bad file costs its own partition ----------------------

def _fetched(frame, origin, start, **kw):
    from gpu_health.sources.base import Fetched

    return Fetched(frame, origin, start, start + pd.Timedelta(minutes=5), **kw)


def test_validate_files_quarantines_each_bad_file_whole_and_keeps_the_others(frames):
    from gpu_health.contracts.validate import WHOLE_FILE, validate_files

    good = frames["node_telemetry"]
    shifted = good.assign(ts=good["ts"] + pd.Timedelta(minutes=5))
    t2 = T0 + pd.Timedelta(minutes=10)
    parts = [
        _fetched(good, "n/1400.parquet", T0),
        _fetched(shifted, "n/1405.parquet", T1),  # the next partition's rows, its own file: fine
        _fetched(good.drop(columns=["health"]), "n/1410.parquet", t2),  # missing column
        _fetched(empty_frame("node_telemetry"), "n/1415.parquet", t2 + pd.Timedelta(minutes=5),
                 unreadable="n/1415.parquet: empty file (0 bytes)"),
        _fetched(put(good.assign(ts=good["ts"] + pd.Timedelta(minutes=20)), 0, "health", "rebooting")
                 .assign(firmware="1.2"), "n/1420.parquet", T0 + pd.Timedelta(minutes=20)),  # a bad row, an extra column
        _fetched(good, "n/1425.parquet", T0 + pd.Timedelta(minutes=25)),  # 14:00 rows in the 14:25 file
    ]
    result = validate_files(parts, "node_telemetry", start=T0, end=T0 + pd.Timedelta(minutes=30))
    assert len(result.valid) == 3 * len(good) - 1
    files = result.files_quarantined.set_index("origin")
    assert sorted(files.index) == ["n/1410.parquet", "n/1415.parquet", "n/1425.parquet"]
    assert (files["row_index"] == WHOLE_FILE).all()
    assert files.loc["n/1410.parquet", "check"] == "file:missing_column" and "'health'" in files.loc["n/1410.parquet", "reason"]
    assert files.loc["n/1415.parquet", "check"] == "file:unreadable_file"
    assert files.loc["n/1425.parquet", "check"] == "file:outside_partition"
    assert "belong to partition(s) 2026-11-03 14:00" in files.loc["n/1425.parquet", "reason"]
    assert files.loc["n/1410.parquet", "partition_start"] == t2
    rows = result.row_rejects
    assert list(rows["origin"]) == ["n/1420.parquet"] and list(rows["row_index"]) == [0]
    assert rows["partition_start"].iloc[0] == T0 + pd.Timedelta(minutes=20)  # the file's partition, not the range's
    assert result.dropped_columns == {"firmware": ["n/1420.parquet"]}


def test_landing_files_with_and_without_grad_norm_pass_the_contract(frames, tmp_path):
    # grad_norm came after files were written: a file without it (an older exporter, a trainer that logs no norm)
    # is valid and its rows read null (not reported, never 0); a file with it keeps its values
    from gpu_health.landing import write_partition
    from gpu_health.sources.landing import LandingSource
    from gpu_health.sources.read import read_window

    rt = frames["job_runtime_metrics"]
    assert rt["grad_norm"].notna().any() and rt["grad_norm"].isna().any()
    five = pd.Timedelta(minutes=5)
    later = [rt.assign(ts=rt["ts"] + k * five) for k in range(4)]
    for k, part in enumerate(later):  # two old files (one batch), two new ones (another)
        write_partition(tmp_path, "job_runtime_metrics", T0 + k * five,
                        part.drop(columns=["grad_norm"]) if k < 2 else part)
    v, _ = read_window(LandingSource(tmp_path), "job_runtime_metrics", T0, T0 + 4 * five)
    assert v.rejects.empty and v.files_quarantined.empty and not v.dropped_columns
    assert list(v.valid.columns) == columns("job_runtime_metrics") and v.valid["grad_norm"].dtype == "float64"
    old = v.valid["ts"] < T0 + 2 * five
    assert old.sum() == 2 * len(rt) and v.valid.loc[old, "grad_norm"].isna().all()
    new = v.valid[~old].reset_index(drop=True)
    pd.testing.assert_series_equal(new["grad_norm"], pd.concat(later[2:], ignore_index=True)["grad_norm"])


def test_a_file_of_another_table_is_named_as_such(frames):
    from gpu_health.contracts.validate import validate_files

    result = validate_files([_fetched(frames["gpu_telemetry"], "node_telemetry/2026-11-03/1400.parquet", T0)],
                            "node_telemetry", start=T0, end=T1)
    (reason,) = result.files_quarantined["reason"]
    assert "its columns are gpu_telemetry's: a gpu_telemetry file in the node_telemetry folder" in reason


@pytest.mark.parametrize("damage, says", [
    (lambda p: p.write_bytes(b""), "empty file (0 bytes)"),
    (lambda p: p.write_bytes(p.read_bytes()[:-100]), "truncated Parquet file"),
    (lambda p: pd.read_parquet(p).to_csv(p, index=False), "a CSV or log renamed .parquet"),
])
def test_an_unreadable_landing_file_is_named_with_what_is_wrong(frames, tmp_path, damage, says):
    from gpu_health.sources.landing import read_file

    path = tmp_path / "1400.parquet"
    frames["node_telemetry"].to_parquet(path, index=False)
    damage(path)
    fetched = read_file(path, "node_telemetry", T0, T1)
    assert fetched.frame.empty and fetched.unreadable.startswith(f"{path}: ") and says in fetched.unreadable
    assert "<Buffer>" not in fetched.unreadable


def test_stray_files_in_a_day_folder_are_reported_under_their_partition(frames, tmp_path):
    from gpu_health.landing import write_partition
    from gpu_health.sources.landing import LandingSource

    write_partition(tmp_path, "node_telemetry", T0, frames["node_telemetry"])
    day = tmp_path / "node_telemetry" / "2026-11-03"
    for name in ("1402.parquet", "1400.parquet.bak", "notes.txt", ".1400.parquet.77.tmp", "0900.parquet.old"):
        (day / name).write_bytes(b"x")
    strays = LandingSource(tmp_path).strays("node_telemetry", T0, T1)
    assert sorted(pd.Series([s.origin for s in strays]).str.rsplit("/", n=1).str[-1]) == ["1400.parquet.bak", "1402.parquet"]
    assert all(s.start == T0 and "not a partition file" in s.ignored for s in strays)
    # the day's first partition takes the names without a time; 09:00 is reported by the run covering it
    assert [s.origin.rsplit("/", 1)[-1] for s in LandingSource(tmp_path).strays("node_telemetry", DAY0, DAY0 + pd.Timedelta(minutes=5))] == ["notes.txt"]


def test_a_frame_sources_rejects_are_keyed_by_each_rows_partition_and_its_number_within_it(frames):
    # a source that returns one frame per window (the simulator, Prometheus): a bad row's reject names the 5-minute
    # partition its timestamp falls in and its row number within that partition, as a partition-by-partition run
    # of the same rows would
    from gpu_health.sources.base import Fetched
    from gpu_health.sources.read import read_window

    five = pd.Timedelta(minutes=5)
    gpu = frames["gpu_telemetry"]
    parts = [gpu.assign(ts=gpu["ts"] + k * five) for k in range(3)]
    frame = pd.concat(parts, ignore_index=True)
    bad = len(gpu) * 2 + 3  # the fourth row of the third partition
    frame.loc[bad, "gpu_util_pct"] = 150.0

    class FrameSource:
        name = "frames"

        def read(self, table, start, end):
            return Fetched(frame, "frames")

    v, _ = read_window(FrameSource(), "gpu_telemetry", T0, T0 + 3 * five)
    keys = v.rejects[["partition_start", "row_index"]].drop_duplicates()
    assert keys.values.tolist() == [[T0 + 2 * five, 3]], v.rejects[["partition_start", "row_index", "check"]]
    assert str(v.rejects["partition_start"].dtype) == "datetime64[ns, UTC]" and len(v.valid) == len(frame) - 1

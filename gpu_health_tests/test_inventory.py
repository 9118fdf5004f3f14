"""The node inventory behind "expected" GPUs (gpu_health.steps.telemetry.inventory_segments) over long gaps.

One small SQLite warehouse, module-wide: region ``a`` (nodes a1-a3) and region ``b`` (b1-b2, another SKU),
4 GPUs a node, reporting every minute from a day and two hours before ``T0``. Region ``b``'s GPU collectors
are silent for 30 hours from ``T0`` (an outage longer than the inventory's day), then come back; b1's host
collector sends ten more minutes into the outage (as Philly's hosts did at the edges of its gap). Node
``a3`` stops reporting for good at ``GONE`` while the rest of its region reports (decommissioned). Finance
pays for 12 GPUs in each region.

The sensor runs partition by partition; a backfill runs a range: both must judge every partition against
the same inventory, the one known when the partition closed.
"""

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.models import columns, conform
from gpu_health.metrics import goodput as G
from gpu_health.steps import diagnosis as D
from gpu_health.steps import telemetry as T
from gpu_health.steps.registry import inputs_for
from gpu_health.storage.warehouse import Warehouse

T0 = pd.Timestamp("2026-11-03T00:00:00Z")  # region b falls silent
BACK = T0 + pd.Timedelta(hours=30)         # ... and reports again
GONE = T0 + pd.Timedelta(hours=2)          # a3's last report is the minute before
DATA_FROM, DATA_TO = T0 - pd.Timedelta(hours=26), T0 + pd.Timedelta(hours=32)
FIVE, MIN, DAY = pd.Timedelta(minutes=5), pd.Timedelta(minutes=1), pd.Timedelta(hours=24)


def inventory_as_of(wh, p):
    """The inventory the partition starting at ``p`` is judged against, read as the loss tree's step reads it."""
    return T.inventory_as_of(inputs_for("goodput", wh, p, p + FIVE))
SKUS = {"a": "NVIDIA H100 80GB HBM3", "b": "Tesla V100-SXM3-32GB"}
GPUS_PER_NODE = 4
NODES = {"a1": "a", "a2": "a", "a3": "a", "b1": "b", "b2": "b"}
HOST_TAIL = pd.Timedelta(minutes=10)  # b1's host collector outlives its GPU collector
PAID = {"a": 12, "b": 12}  # region b: 4 GPUs more than it ever reported (node 'unseen')


def reports(node: str, ts: pd.Timestamp, host: bool = False) -> bool:
    if node == "a3":
        return ts < GONE
    if NODES[node] == "b":
        return not (T0 + (HOST_TAIL if host and node == "b1" else pd.Timedelta(0)) <= ts < BACK)
    return True


MINUTES = pd.date_range(DATA_FROM, DATA_TO, freq="1min", inclusive="left")


def gpu_rows() -> pd.DataFrame:
    parts = []
    for node, region in NODES.items():
        ts = MINUTES[[reports(node, m) for m in MINUTES]]
        for i in range(GPUS_PER_NODE):
            parts.append(pd.DataFrame({
                "ts": ts, "region": region, "node_id": node, "gpu_index": i, "gpu_uuid": f"GPU-{node}-{i}", "sku": SKUS[region],
                "job_id": None, "gpu_util_pct": 0.0, "sm_active": 0.0, "tensor_active": 0.0, "fb_used_mib": 0.0,
                "power_w": 60.0, "temp_c": 35.0, "sm_clock_mhz": 1410.0, "throttle_reasons": 0, "ecc_sbe_delta": 0,
                "ecc_dbe_delta": 0, "xid": 0}))
    return conform(pd.concat(parts, ignore_index=True)[columns("gpu_telemetry")], "gpu_telemetry")


def host_rows() -> pd.DataFrame:
    parts = [pd.DataFrame({"ts": MINUTES[[reports(node, m, host=True) for m in MINUTES]], "region": region, "node_id": node,
                           "sku": SKUS[region], "cpu_util_pct": 5.0, "mem_used_pct": 10.0, "disk_read_mbps": 0.0,
                           "disk_write_mbps": 0.0, "nvme_util_pct": 0.0, "driver_version": "550.90.07",
                           "kernel_version": "6.8.0", "health": "ok"})
             for node, region in NODES.items()]
    return conform(pd.concat(parts, ignore_index=True)[columns("node_telemetry")], "node_telemetry")


def capacity_rows() -> pd.DataFrame:
    days = pd.date_range(DATA_FROM.normalize(), DATA_TO.normalize(), freq="1D")
    return conform(pd.DataFrame([
        {"date": d.date(), "region": r, "sku": SKUS[r], "capacity_gpus": k, "reserved_gpus": k, "reserved_gpu_hour_usd": 2.0,
         "on_demand_gpu_hour_usd": 4.0, "on_demand_gpu_hours": 0.0} for d in days for r, k in PAID.items()]), "cost_capacity")


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Warehouse:
    w = Warehouse(f"sqlite:///{tmp_path_factory.mktemp('inventory') / 'wh.db'}")
    gpu, host = gpu_rows(), host_rows()
    w.replace_window("gpu_telemetry", gpu, DATA_FROM, DATA_TO)
    w.replace_window("node_telemetry", host, DATA_FROM, DATA_TO)
    w.replace_window("node_inventory", T.node_inventory({"gpu_telemetry": gpu, "node_telemetry": host}), DATA_FROM, DATA_TO)
    cap = capacity_rows()
    w.replace_window("cost_capacity", cap, DATA_FROM.normalize(), DATA_TO.normalize() + DAY)
    return w


def nodes(inv: pd.DataFrame) -> set[str]:
    return set(inv["node_id"])


def missing_data_firing(alerts: pd.DataFrame, region: str) -> set[pd.Timestamp]:
    """Partitions in which the missing_data alert of ``region`` is firing."""
    if alerts.empty:
        return set()
    a = alerts[(alerts["cause_family"] == "missing_data") & (alerts["region"] == region) & (alerts["status"] == "firing")]
    return set(a["partition_start"])


# --- a silent region stays expected until its collectors come back --------------------------------

@pytest.mark.parametrize("hours", [0, 23.5, 24, 24 + 1 / 12, 29 + 11 / 12])
def test_a_silent_regions_gpus_stay_expected_until_it_reports_again(wh, hours):
    p = T0 + pd.Timedelta(hours=hours)
    inv = inventory_as_of(wh, p)
    assert {"b1", "b2"} <= nodes(inv)
    assert inv.loc[inv["region"] == "b", "gpus"].sum() == 2 * GPUS_PER_NODE


@pytest.mark.parametrize("hours", [0, 23.5, 24, 25, 29 + 11 / 12])
def test_a_region_silent_for_30_hours_stays_flagged_as_missing_data_partition_by_partition(wh, hours):
    """The sensor's way: each partition computed alone, with the trailing day's inventory."""
    p = T0 + pd.Timedelta(hours=hours)
    alerts = D.alerts(inputs_for("alerts", wh, p, p + FIVE))
    assert missing_data_firing(alerts, "b") == {p}
    assert missing_data_firing(alerts, "a") == set()


def test_a_region_silent_for_30_hours_is_flagged_to_the_end_in_a_range_run_and_clears_when_it_reports(wh):
    start, end = BACK - pd.Timedelta(hours=2), BACK + pd.Timedelta(minutes=15)
    alerts = D.alerts(inputs_for("alerts", wh, start, end))
    assert missing_data_firing(alerts, "b") == set(pd.date_range(start, BACK, freq=FIVE, inclusive="left"))
    assert missing_data_firing(alerts, "a") == set()


def test_a_long_silent_regions_paid_gpu_minutes_are_missing_data_not_hardware(wh):
    """A day and more into the outage the loss tree still pays region b (12 GPUs: 8 seen, 4 never) and
    books all of it as missing data; every paid GPU-minute in exactly one state."""
    start, end = T0 + pd.Timedelta(hours=25), T0 + pd.Timedelta(hours=25, minutes=15)
    leaves, _ = T.goodput(inputs_for("goodput", wh, start, end))
    b = leaves[leaves["region"] == "b"].groupby("state")["gpu_minutes"].sum()
    assert b.to_dict() == pytest.approx({"no_data": PAID["b"] * 15.0})
    states = T.rollups(leaves)["goodput_states"]
    check = T.paid_invariant(states, inputs_for("goodput", wh, start, end))
    assert check["passed"], check
    paid = states.groupby("region")["gpu_minutes"].sum()
    assert paid.to_dict() == pytest.approx({r: k * 15.0 for r, k in PAID.items()})


def test_a_silent_region_is_forgotten_after_the_memory(wh, monkeypatch):
    monkeypatch.setattr(T, "SILENT_REGION_MEMORY", pd.Timedelta(hours=26))
    last_report = T0 - FIVE
    assert {"b1", "b2"} <= nodes(inventory_as_of(wh, last_report + pd.Timedelta(hours=26)))
    assert not {"b1", "b2"} & nodes(inventory_as_of(wh, last_report + pd.Timedelta(hours=26) + FIVE))


# --- a single node gone quiet is forgotten after a day -------------------------------------------------

def test_a_decommissioned_node_is_expected_for_a_day_then_not_missing(wh):
    last = GONE - FIVE  # the partition of a3's last report
    assert "a3" in nodes(inventory_as_of(wh, last + DAY))
    assert "a3" not in nodes(inventory_as_of(wh, last + DAY + FIVE))
    # in the loss tree: hardware (expected, not reporting, its region reports) for the day, then nothing
    before, _ = T.goodput(inputs_for("goodput", wh, last + DAY, last + DAY + FIVE))
    after, _ = T.goodput(inputs_for("goodput", wh, last + DAY + FIVE, last + DAY + 2 * FIVE))
    a3_before = before[before["node_id"] == "a3"].groupby("state")["gpu_minutes"].sum()
    assert a3_before.to_dict() == pytest.approx({"hw_unavailable": GPUS_PER_NODE * 5.0})
    assert "a3" not in set(after["node_id"])
    assert after.loc[after["region"] == "a", "state"].isin(["no_data"]).sum() == 0
    # and its region is never flagged as missing data for it
    assert missing_data_firing(D.alerts(inputs_for("alerts", wh, last + DAY + FIVE, last + DAY + 2 * FIVE)), "a") == set()


# --- a range run and partition runs judge each partition alike -----------------------------------------

def test_a_ranges_inventory_is_each_partitions_own(wh):
    """Across b's memory taking over (T0 + 24 h), a3 being forgotten (GONE + 24 h) and b coming back."""
    start, end = T0 + pd.Timedelta(hours=23, minutes=45), GONE + pd.Timedelta(hours=24, minutes=15)
    segments = T.inventory_segments(inputs_for("goodput", wh, start, end))
    assert segments[0][0] == start and segments[-1][1] == end
    assert all(a[1] == b[0] for a, b in zip(segments, segments[1:]))
    assert len(segments) > 1
    for s0, s1, inv in segments:
        for p in pd.date_range(s0, s1, freq=FIVE, inclusive="left"):
            pd.testing.assert_frame_equal(inv, inventory_as_of(wh, p))
    for s0, s1, inv in T.inventory_segments(inputs_for("goodput", wh, BACK - pd.Timedelta(minutes=15), BACK + pd.Timedelta(minutes=15))):
        for p in pd.date_range(s0, s1, freq=FIVE, inclusive="left"):
            pd.testing.assert_frame_equal(inv, inventory_as_of(wh, p))


LEAF_KEY = ["partition_start", *G.LEAF_DIMS, "state"]


@pytest.mark.parametrize("around", [T0 + DAY, GONE + DAY])
def test_the_loss_tree_of_a_range_equals_its_partitions_across_the_inventory_changing(wh, around):
    start, end = around - pd.Timedelta(minutes=15), around + pd.Timedelta(minutes=15)
    ranged, _ = T.goodput(inputs_for("goodput", wh, start, end))
    parts = pd.concat([T.goodput(inputs_for("goodput", wh, p, p + FIVE))[0] for p in pd.date_range(start, end, freq=FIVE, inclusive="left")],
                      ignore_index=True)
    both = ranged.merge(parts, on=LEAF_KEY, how="outer", suffixes=("_range", "_parts"), indicator=True)
    only = both[both["_merge"] != "both"]
    assert only.empty, only[LEAF_KEY + ["gpu_minutes_range", "gpu_minutes_parts"]].to_string()
    np.testing.assert_allclose(both["gpu_minutes_range"], both["gpu_minutes_parts"], rtol=1e-9)


def test_missing_data_of_a_range_equals_its_partitions(wh):
    start, end = T0 + DAY - pd.Timedelta(minutes=20), T0 + DAY + pd.Timedelta(minutes=20)
    ranged = {r: missing_data_firing(D.alerts(inputs_for("alerts", wh, start, end)), r) for r in ("a", "b")}
    alone = {r: set() for r in ("a", "b")}
    for p in pd.date_range(start, end, freq=FIVE, inclusive="left"):
        a = D.alerts(inputs_for("alerts", wh, p, p + FIVE))
        for r in alone:
            alone[r] |= missing_data_firing(a, r)
    assert ranged == alone
    assert ranged["b"] == set(pd.date_range(start, end, freq=FIVE, inclusive="left"))

"""Facility and change-policy detectors on hand-built partitions.

Two racks of two nodes (a: n1, n2; b: n3, n4), one region, one SKU. Each test changes one witness and checks the
verdict: a page needs the facility's sensor AND the GPUs; one of them is a ticket or nothing; absent facility data
is never a page.
"""

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.models import columns, conform, empty_frame
from gpu_health.diagnosis.context import PartitionContext
from gpu_health.diagnosis.detect import detect
from gpu_health.diagnosis.detectors import DETECTORS
from gpu_health.diagnosis.detectors.hardware import detect_thermal
from gpu_health.diagnosis.facility import (
    defer_to_rack,
    detect_change_policy,
    detect_rack_cooling,
    detect_rack_power,
)

T0 = pd.Timestamp("2026-11-03T10:00:00Z")
MIN = pd.Timedelta(minutes=1)
SKU = "NVIDIA H100 80GB HBM3"
RACKS = {"rack-a": ["n1", "n2"], "rack-b": ["n3", "n4"]}
NODES = [n for ns in RACKS.values() for n in ns]


def gpu_rows(temp=None, throttle=None, util=95.0) -> pd.DataFrame:
    """8 busy GPUs a node for 5 minutes; ``temp`` / ``throttle``: node -> value (default 65 C, no bit)."""
    temp, throttle = temp or {}, throttle or {}
    rows = [{"ts": T0 + m * MIN, "region": "r1", "node_id": node, "gpu_index": i, "gpu_uuid": f"GPU-{node}-{i}",
             "sku": SKU, "job_id": "j1", "gpu_util_pct": util, "sm_active": 0.6, "tensor_active": 0.3,
             "fb_used_mib": 1000.0, "power_w": 550.0, "temp_c": temp.get(node, 65.0 + (i % 3)),
             "sm_clock_mhz": 1900.0, "throttle_reasons": throttle.get(node, 0), "ecc_sbe_delta": 0,
             "ecc_dbe_delta": 0, "xid": 0}
            for m in range(5) for node in NODES for i in range(8)]
    frame = pd.DataFrame(rows, columns=columns("gpu_telemetry"))
    frame["throttle_reasons"] = pd.array(frame["throttle_reasons"], dtype="Int64")
    return conform(frame, "gpu_telemetry")


def facility_rows(inlet=None, power=None, budget=50.0, psus=None) -> pd.DataFrame:
    """One row per rack-minute; ``inlet`` / ``power`` / ``psus``: rack -> value (default 22 C, 25 kW, 0)."""
    inlet, power, psus = inlet or {}, power or {}, psus or {}
    rows = [{"ts": T0 + m * MIN, "region": "r1", "rack_id": rack, "node_ids": ",".join(nodes),
             "power_kw": power.get(rack, 25.0), "power_budget_kw": budget, "inlet_temp_c": inlet.get(rack, 22.0),
             "outlet_temp_c": 35.0, "psus_failed": psus.get(rack, 0), "facility_power_kw": 70.0}
            for m in range(5) for rack, nodes in RACKS.items()]
    frame = pd.DataFrame(rows, columns=columns("facility_telemetry"))
    frame["psus_failed"] = pd.array(frame["psus_failed"], dtype="Int64")
    return conform(frame, "facility_telemetry")


def slowdown(minutes: dict) -> pd.DataFrame:
    """Goodput leaves: ``minutes`` (node -> GPU-minutes of slowdown_compute), the rest of each node's 40 productive."""
    rows = [{"region": "r1", "node_id": n, "state": state, "gpu_minutes": v}
            for n in NODES for state, v in (("slowdown_compute", minutes.get(n, 0.0)),
                                            ("productive", 40.0 - minutes.get(n, 0.0))) if v > 0]
    return pd.DataFrame(rows, columns=["region", "node_id", "state", "gpu_minutes"])


def context(gpu=None, facility=None, changes=None, maintenance=None, leaves=None, start=T0) -> PartitionContext:
    if start != T0 and gpu is not None:
        gpu = gpu.assign(ts=gpu["ts"] + (start - T0))
    return PartitionContext(
        start=start, end=start + 5 * MIN, gpu=gpu if gpu is not None else gpu_rows(),
        node=empty_frame("node_telemetry"), network=empty_frame("network_telemetry"),
        runtime=empty_frame("job_runtime_metrics"), sched=empty_frame("scheduler_events"),
        changes=changes if changes is not None else empty_frame("change_events"),
        maintenance=maintenance if maintenance is not None else empty_frame("maintenance_windows"),
        leaves=leaves if leaves is not None else slowdown({}), baselines=pd.DataFrame(),
        meta=empty_frame("job_metadata"),
        inventory=pd.DataFrame({"node_id": NODES, "region": "r1", "sku": SKU, "gpus": 8}),
        region_history=pd.DataFrame(columns=["partition_start", "region", "share_idle_blocked"]),
        facility=facility)


# --- rack cooling --------------------------------------------------------------------------------------------

def test_hot_inlet_and_hot_gpus_on_the_rack_page_naming_the_rack():
    ctx = context(gpu=gpu_rows(temp={"n1": 86.0, "n2": 87.0}, throttle={"n1": 0x40, "n2": 0x20}),
                  facility=facility_rows(inlet={"rack-a": 34.0}))
    (f,) = detect_rack_cooling(ctx)
    assert (f.detector, f.family, f.severity) == ("rack_cooling", "facility", "page")
    assert "rack-a" in f.summary and f.nodes == ["n1", "n2"]


def test_hot_gpus_without_bits_but_warmer_than_their_peers_are_the_second_witness():
    # 10 C over rack b's GPUs of the same SKU and state, below the slowdown temperature: cooling lost, no throttle yet
    ctx = context(gpu=gpu_rows(temp={"n1": 76.0, "n2": 77.0}), facility=facility_rows(inlet={"rack-a": 31.0}))
    (f,) = detect_rack_cooling(ctx)
    assert f.severity == "page"


def test_hot_inlet_alone_is_a_ticket():
    (f,) = detect_rack_cooling(context(facility=facility_rows(inlet={"rack-a": 29.0})))
    assert (f.family, f.severity) == ("facility", "ticket")


def test_one_hot_node_of_two_is_not_several():
    # only n1's GPUs are hot: the rack's inlet and one node -- a ticket (the GPU's own alert is the hardware one)
    ctx = context(gpu=gpu_rows(temp={"n1": 88.0}, throttle={"n1": 0x40}), facility=facility_rows(inlet={"rack-a": 30.0}))
    (f,) = detect_rack_cooling(ctx)
    assert f.severity == "ticket"


def test_inlet_at_the_ashrae_limit_or_for_one_minute_is_nothing():
    assert detect_rack_cooling(context(facility=facility_rows(inlet={"rack-a": 27.0}))) == []
    fac = facility_rows()
    fac.loc[(fac["rack_id"] == "rack-a") & (fac["ts"] == T0), "inlet_temp_c"] = 40.0
    assert detect_rack_cooling(context(facility=fac)) == []


def test_a_null_inlet_or_no_facility_table_is_never_a_page():
    hot_gpus = gpu_rows(temp={"n1": 88.0, "n2": 88.0}, throttle={"n1": 0x40, "n2": 0x40})
    fac = facility_rows(inlet={"rack-a": 35.0})
    fac["inlet_temp_c"] = np.nan
    for facility in (None, empty_frame("facility_telemetry"), fac):
        ctx = context(gpu=hot_gpus, facility=facility)
        assert detect_rack_cooling(ctx) == [] and detect_rack_power(ctx) == []
        # the GPUs' heat stays the hardware detector's
        assert [f.family for f in detect(ctx) if f.detector == "thermal_throttle"] == ["hardware"]


def test_single_hot_gpu_with_a_normal_inlet_stays_a_gpu_alert():
    ctx = context(gpu=gpu_rows(temp={"n3": 88.0}, throttle={"n3": 0x40}), facility=facility_rows())
    found = detect(ctx)
    assert [f.family for f in found] == ["hardware"] and found[0].nodes == ["n3"]


def test_thermal_detector_defers_the_hot_racks_nodes_to_the_rack():
    ctx = context(gpu=gpu_rows(temp={"n1": 88.0, "n2": 88.0, "n3": 88.0}, throttle={"n1": 0x40, "n2": 0x40, "n3": 0x40}),
                  facility=facility_rows(inlet={"rack-a": 34.0}))
    assert sorted(detect_thermal(ctx)[0].nodes) == ["n1", "n2", "n3"]
    (thermal,) = defer_to_rack(detect_thermal)(ctx)
    assert thermal.nodes == ["n3"]  # rack b's inlet is normal: its hot GPU stays a hardware alert
    families = {(f.detector, f.family) for f in detect(ctx)}
    assert families == {("thermal_throttle", "hardware"), ("rack_cooling", "facility")}


# --- GPU-level thermal throttling: a page needs an impact and a cause ------------------------------------------

def one_hot_gpu(node="n3", gpu_index=0) -> pd.DataFrame:
    g = gpu_rows()
    hot = ((g["node_id"] == node) & (g["gpu_index"] == gpu_index)).to_numpy()
    g.loc[hot, "temp_c"], g.loc[hot, "throttle_reasons"] = 87.0, 0x40
    return g


def test_a_single_gpu_throttled_five_minutes_without_slowdown_does_not_page():
    found = detect(context(gpu=one_hot_gpu(), facility=facility_rows()))
    thermal = [f for f in found if f.detector == "thermal_throttle"]
    assert [f.severity for f in found] in ([], ["ticket"]) and all(f.nodes == ["n3"] for f in thermal)


def test_throttling_that_slows_the_jobs_with_a_cause_pages_and_without_a_cause_tickets():
    hot = gpu_rows(temp={"n3": 88.0}, throttle={"n3": 0x40})  # n3 runs 20 C over the same SKU's GPUs elsewhere
    (f,) = detect_thermal(context(gpu=hot, leaves=slowdown({"n3": 12.0})))
    assert (f.family, f.severity, f.nodes) == ("hardware", "page", ["n3"])
    assert "warmer than" in f.evidence and "12 GPU-minutes of compute slowdown" in f.evidence
    # the same heat, but the jobs on it lose nothing: no impact, a ticket
    (f,) = detect_thermal(context(gpu=hot, leaves=slowdown({})))
    assert f.severity == "ticket"
    # every GPU of the region equally hot and slow: no node's cooling stands out (no cause witness), a ticket
    everywhere = gpu_rows(temp={n: 88.0 for n in NODES}, throttle={n: 0x40 for n in NODES})
    (f,) = detect_thermal(context(gpu=everywhere, leaves=slowdown({n: 12.0 for n in NODES})))
    assert f.severity == "ticket"


def throttled_node(clock: float, util: float = 95.0, node="n3") -> pd.DataFrame:
    """``node``'s 8 GPUs at 88 C with the hardware-thermal bit and their SM clock at ``clock`` MHz (the same SKU's
    other busy GPUs stay at 1900 MHz), running kernels at ``util`` %."""
    g = gpu_rows(temp={node: 88.0}, throttle={node: 0x40})
    on = (g["node_id"] == node).to_numpy()
    g.loc[on, "sm_clock_mhz"], g.loc[on, "gpu_util_pct"] = clock, util
    return g


def test_a_busy_job_without_step_metrics_on_a_clock_stepped_down_gpu_pages():
    # the job reports no training metrics, so the loss tree has no step time to slow (its minutes read productive):
    # the device itself shows the loss, the SM clock at 58 % of the same SKU's busy GPUs while it runs kernels
    (f,) = detect_thermal(context(gpu=throttled_node(clock=1100.0), leaves=slowdown({})))
    assert (f.family, f.severity, f.nodes) == ("hardware", "page", ["n3"])
    assert "SM clock" in f.evidence and "warmer than" in f.evidence
    assert f.lost_gpu_minutes > 0


def test_throttling_with_the_clock_at_its_peers_or_on_idle_gpus_tickets():
    # five minutes of the bit at the slowdown temperature, the clock where the SKU's other busy GPUs run and no
    # slowdown in the loss tree: no job slowed, a ticket
    (f,) = detect_thermal(context(gpu=throttled_node(clock=1900.0), leaves=slowdown({})))
    assert f.severity == "ticket" and "no job slowed" in f.summary
    # the clock stepped down on GPUs that run no kernel (an idle notebook): nothing is slowed either
    (f,) = detect_thermal(context(gpu=throttled_node(clock=1100.0, util=0.5), leaves=slowdown({})))
    assert f.severity == "ticket"
    # a collector without the SM clock: no measure of the loss on the device (missing data), a ticket
    unclocked = throttled_node(clock=1100.0)
    unclocked["sm_clock_mhz"] = np.nan
    (f,) = detect_thermal(context(gpu=unclocked, leaves=slowdown({})))
    assert f.severity == "ticket"
    # the clock stepped down on every node of the SKU: no unthrottled GPU to measure it against, no cause of its own
    everywhere = gpu_rows(temp={n: 88.0 for n in NODES}, throttle={n: 0x40 for n in NODES})
    everywhere["sm_clock_mhz"] = 1100.0
    (f,) = detect_thermal(context(gpu=everywhere, leaves=slowdown({})))
    assert f.severity == "ticket"


def test_a_node_throttling_briefly_again_and_again_is_one_ticket():
    from gpu_health.diagnosis import alerts as A

    snap, ids, severities = A.empty(), set(), set()
    for k, throttled in enumerate([True, True, False, True, True, False, True]):
        start = T0 + k * 5 * MIN
        ctx = context(gpu=one_hot_gpu() if throttled else gpu_rows(), start=start)
        snap = A.step(snap, detect(ctx), start, rates={}, changes=empty_frame("change_events"))
        ids |= set(snap["alert_id"])
        severities |= set(snap["severity"])
    assert len(ids) == 1 and severities == {"ticket"}


# --- rack power ------------------------------------------------------------------------------------------------

def test_rack_held_at_budget_with_power_capped_gpus_pages():
    ctx = context(gpu=gpu_rows(throttle={"n1": 0x4, "n2": 0x84}), facility=facility_rows(power={"rack-a": 49.0}))
    (f,) = detect_rack_power(ctx)
    assert (f.detector, f.family, f.severity) == ("rack_power_cap", "facility", "page")
    assert "rack-a" in f.summary


def test_rack_at_budget_without_capped_gpus_or_with_unknown_bits_is_a_ticket():
    (f,) = detect_rack_power(context(facility=facility_rows(power={"rack-a": 49.0})))
    assert f.severity == "ticket"
    g = gpu_rows(throttle={"n1": 0x4, "n2": 0x4})
    g["throttle_reasons"] = pd.array([pd.NA] * len(g), dtype="Int64")
    (f,) = detect_rack_power(context(gpu=g, facility=facility_rows(power={"rack-a": 49.0})))
    assert f.severity == "ticket"


def test_power_capped_gpus_under_the_budget_are_nothing():
    # the GPUs' own power limits (a heavy kernel), the rack far from its budget: not the facility
    assert detect_rack_power(context(gpu=gpu_rows(throttle={"n1": 0x4, "n2": 0x4}), facility=facility_rows())) == []


def test_a_rack_over_its_continuous_load_limit_all_partition_is_a_capacity_ticket():
    (f,) = detect_rack_power(context(facility=facility_rows(power={"rack-a": 42.0})))  # 84 % of 50 kW
    assert (f.detector, f.family, f.severity, f.nodes) == ("rack_power_headroom", "facility", "ticket", ["n1", "n2"])
    assert detect_rack_power(context(facility=facility_rows(power={"rack-a": 39.0}))) == []  # 78 %: within it
    fac = facility_rows(power={"rack-a": 42.0})
    fac.loc[(fac["rack_id"] == "rack-a") & (fac["ts"] == T0), "power_kw"] = 30.0  # one minute under: a peak
    assert detect_rack_power(context(facility=fac)) == []


def test_failed_psus_are_a_ticket():
    (f,) = detect_rack_power(context(facility=facility_rows(psus={"rack-b": 1})))
    assert (f.detector, f.severity, f.nodes) == ("rack_psu", "ticket", ["n3", "n4"])


# --- change policy -----------------------------------------------------------------------------------------------

def changes(rows) -> pd.DataFrame:
    base = {"from_version": None, "to_version": None, "description": "a change", "actor": None, "ticket": None}
    frame = pd.DataFrame([{**base, **r} for r in rows], columns=columns("change_events"))
    return conform(frame, "change_events")


def window(region="r1", node_ids="*") -> pd.DataFrame:
    return conform(pd.DataFrame([{"window_id": "w1", "start": T0 - 30 * MIN, "end": T0 + 30 * MIN, "region": region,
                                  "node_ids": node_ids, "reason": "planned"}], columns=columns("maintenance_windows")),
                   "maintenance_windows")


def test_a_change_without_a_ticket_is_a_software_ticket_naming_it():
    ch = changes([{"event_id": "c1", "ts": T0 + MIN, "kind": "node_taint", "scope": "n1,n2", "actor": "jdoe"}])
    (f,) = detect_change_policy(context(changes=ch))
    assert (f.detector, f.family, f.severity, f.change_event) == ("change_policy", "software", "ticket", "c1")
    assert f.nodes == ["n1", "n2"] and "jdoe" in f.summary and "no change ticket" in f.summary


def test_a_firmware_change_outside_a_window_is_a_ticket_inside_one_is_not():
    ch = changes([{"event_id": "c2", "ts": T0 + MIN, "kind": "bios_update", "scope": "n3", "actor": "ops",
                   "ticket": "CHG-1"}])
    (f,) = detect_change_policy(context(changes=ch))
    assert "outside any maintenance window" in f.summary and "no change ticket" not in f.summary
    assert detect_change_policy(context(changes=ch, maintenance=window())) == []
    assert detect_change_policy(context(changes=ch, maintenance=window(node_ids="n3,n4"))) == []
    assert len(detect_change_policy(context(changes=ch, maintenance=window(node_ids="n1")))) == 1


def test_ticketed_config_changes_and_producers_without_change_fields_raise_nothing():
    ch = changes([{"event_id": "c3", "ts": T0 + MIN, "kind": "scheduler_config", "scope": "r1", "actor": "admin",
                   "ticket": "CHG-2"},
                  # a deploy pipeline that records neither actor nor ticket: missing data, not a violation
                  {"event_id": "c4", "ts": T0 + 2 * MIN, "kind": "driver_upgrade", "scope": "n1"}])
    assert detect_change_policy(context(changes=ch)) == []


def test_change_policy_never_pages_through_detect():
    ch = changes([{"event_id": f"c{i}", "ts": T0 + MIN, "kind": "access_grant", "scope": "*", "actor": "x"}
                  for i in range(5)])
    found = [f for f in detect(context(changes=ch)) if f.detector == "change_policy"]
    assert len(found) == 5 and {f.severity for f in found} == {"ticket"}


def test_the_facility_detectors_are_in_the_detector_list():
    names = {d.name for d in DETECTORS}
    assert {"detect_rack_cooling", "detect_rack_power", "detect_change_policy", "detect_thermal"} <= names


def test_a_node_change_of_a_new_kind_is_evidence_the_alerts_name():
    """A node taint (or BIOS update, access grant...) on a node is read like a deploy: an alert on that node within
    two hours names it in follows_change, with its description."""
    from gpu_health.diagnosis import alerts as A

    ctx = context(gpu=gpu_rows(temp={"n1": 88.0, "n2": 88.0}, throttle={"n1": 0x40, "n2": 0x40}),
                  facility=facility_rows(inlet={"rack-a": 34.0}))
    ch = changes([{"event_id": "taint-1", "ts": T0 - 20 * MIN, "kind": "node_taint", "scope": "n2",
                   "actor": "jdoe", "ticket": "CHG-9", "description": "taint n2 gpu=maintenance:NoSchedule"},
                  {"event_id": "bios-elsewhere", "ts": T0 - 10 * MIN, "kind": "bios_update", "scope": "n4",
                   "actor": "ops", "ticket": "CHG-8", "description": "BIOS 2.1 on n4"}])
    snap = A.step(A.empty(), detect(ctx), T0, rates={}, changes=ch)
    row = snap[snap["detector"] == "rack_cooling"].iloc[0]
    assert row["cause_family"] == "facility" and row["severity"] == "page"
    assert row["follows_change"].startswith("taint-1: taint n2") and "bios-elsewhere" not in row["follows_change"]
    assert row["runbook"].endswith("docs/runbooks.md#facility")

"""Facility KPIs: PUE from energy, headroom against 80 % of the rating, throttled GPUs by rack."""

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.models import conform, empty_frame
from gpu_health.metrics.facility import rack_facility
from gpu_health.metrics.goodput import STATES  # noqa: F401  (registers nothing; keeps import order like kpis)
from gpu_health.metrics.kpis import compute_kpis

T0 = pd.Timestamp("2026-11-03T10:00:00Z")
MIN = pd.Timedelta(minutes=1)
NO_STATES = pd.DataFrame(columns=["partition_start", "region", "sku", "workload_class", "team", "state", "gpu_minutes"])


def facility(rows) -> pd.DataFrame:
    base = {"region": "r1", "node_ids": "n1,n2", "inlet_temp_c": 22.0, "outlet_temp_c": 35.0, "psus_failed": 0,
            "facility_power_kw": None}
    frame = pd.DataFrame([{**base, **r} for r in rows])
    return conform(frame[list(empty_frame("facility_telemetry").columns)], "facility_telemetry")


def gpu(rows) -> pd.DataFrame:
    base = {"region": "r1", "gpu_index": 0, "sku": "H100", "job_id": "j", "gpu_util_pct": 90.0, "sm_active": 0.6,
            "tensor_active": 0.3, "fb_used_mib": 1000.0, "power_w": 500.0, "temp_c": 60.0, "sm_clock_mhz": 1900.0,
            "ecc_sbe_delta": 0, "ecc_dbe_delta": 0, "xid": 0}
    frame = pd.DataFrame([{**base, **r} for r in rows])
    frame["throttle_reasons"] = pd.array(frame["throttle_reasons"], dtype="Int64")
    return conform(frame[list(empty_frame("gpu_telemetry").columns)], "gpu_telemetry")


def kpis(fac, g=None):
    frames = {"facility_telemetry": fac, "gpu_telemetry": g if g is not None else empty_frame("gpu_telemetry")}
    return compute_kpis(frames, NO_STATES, start=T0, end=T0 + 5 * MIN).set_index(["kpi", "region", "sku"])


def test_pue_is_energy_over_energy_not_a_mean_of_instants():
    # minute 1: IT 10 kW, hall 20 kW (ratio 2.0); minute 2: IT 30 kW, hall 36 kW (ratio 1.2).
    # Energy: 56 / 40 = 1.4; the mean of the instants would read 1.6.
    fac = facility([
        {"ts": T0, "rack_id": "a", "power_kw": 4.0, "power_budget_kw": 50.0, "facility_power_kw": 20.0},
        {"ts": T0, "rack_id": "b", "power_kw": 6.0, "power_budget_kw": 50.0, "facility_power_kw": 20.0},
        {"ts": T0 + MIN, "rack_id": "a", "power_kw": 10.0, "power_budget_kw": 50.0, "facility_power_kw": 36.0},
        {"ts": T0 + MIN, "rack_id": "b", "power_kw": 20.0, "power_budget_kw": 50.0, "facility_power_kw": 36.0},
    ])
    row = kpis(fac).loc[("pue", "r1", "*")]
    assert row["status"] == "ok"
    assert row["value"] == pytest.approx(1.4)
    assert row["numerator"] == pytest.approx(56 / 60) and row["denominator"] == pytest.approx(40 / 60)


def test_pue_without_the_hall_meter_is_degraded_and_without_the_table_no_data():
    fac = facility([{"ts": T0 + k * MIN, "rack_id": "a", "power_kw": 4.0, "power_budget_kw": 50.0} for k in range(5)])
    assert kpis(fac).loc[("pue", "r1", "*"), "status"] == "degraded"
    out = kpis(empty_frame("facility_telemetry"))
    for name in ("pue", "rack_power_headroom"):
        rows = out.loc[name]
        assert (rows["status"] == "no_data").all() and rows["value"].isna().all()


def test_headroom_is_against_80_percent_of_the_rating_at_the_peak_minute():
    # rack a: rating 50 kW -> usable 40; peak 45 -> -5 (over the continuous-load limit)
    # rack b: rating 50 -> usable 40; peak 20 -> +20. Region: 15 / 80
    fac = facility([
        {"ts": T0, "rack_id": "a", "power_kw": 30.0, "power_budget_kw": 50.0},
        {"ts": T0 + MIN, "rack_id": "a", "power_kw": 45.0, "power_budget_kw": 50.0},
        {"ts": T0, "rack_id": "b", "power_kw": 20.0, "power_budget_kw": 50.0},
        {"ts": T0 + MIN, "rack_id": "b", "power_kw": 10.0, "power_budget_kw": 50.0},
    ])
    assert kpis(fac).loc[("rack_power_headroom", "r1", "*"), "value"] == pytest.approx(15 / 80)
    per_rack = rack_facility(fac, None, T0, T0 + 5 * MIN).set_index("rack_id")
    assert per_rack.loc["a", "headroom_kw"] == pytest.approx(-5.0)
    assert per_rack.loc["a", "headroom_share"] == pytest.approx(-5 / 40)
    assert per_rack.loc["b", "energy_kwh"] == pytest.approx(30 / 60)
    assert per_rack.loc["a", "minutes"] == 2


def test_throttled_gpus_by_rack_count_each_gpu_once_and_null_without_the_bitmask():
    fac = facility([
        {"ts": T0, "rack_id": "a", "node_ids": "n1", "power_kw": 5.0, "power_budget_kw": 50.0},
        {"ts": T0, "rack_id": "b", "node_ids": "n2", "power_kw": 5.0, "power_budget_kw": 50.0},
    ])
    g = gpu([
        # rack a: g1 power-capped in two minutes (counted once), g2 thermal, g3 clean
        {"ts": T0, "node_id": "n1", "gpu_uuid": "g1", "throttle_reasons": 0x4},
        {"ts": T0 + MIN, "node_id": "n1", "gpu_uuid": "g1", "throttle_reasons": 0x80},
        {"ts": T0, "node_id": "n1", "gpu_uuid": "g2", "gpu_index": 1, "throttle_reasons": 0x40},
        {"ts": T0, "node_id": "n1", "gpu_uuid": "g3", "gpu_index": 2, "throttle_reasons": 0x1},
        # rack b: its exporter has no bitmask: unknown, not zero
        {"ts": T0, "node_id": "n2", "gpu_uuid": "g4", "throttle_reasons": None},
    ])
    per_rack = rack_facility(fac, g, T0, T0 + 5 * MIN).set_index("rack_id")
    assert per_rack.loc["a", "gpus"] == 3
    assert per_rack.loc["a", "gpus_throttled_power"] == 1 and per_rack.loc["a", "gpus_throttled_thermal"] == 1
    assert per_rack.loc["b", "gpus"] == 1 and pd.isna(per_rack.loc["b", "gpus_throttled_power"])
    out = kpis(fac, g)
    # region x sku: 2 of the 4 minutes reporting the bitmask are power-capped, 1 thermal
    assert out.loc[("gpus_throttled.power", "r1", "H100"), "value"].item() == pytest.approx(2 / 4)
    assert out.loc[("gpus_throttled.thermal", "r1", "H100"), "value"].item() == pytest.approx(1 / 4)


def test_simulated_facility_kpis_on_a_quiet_hall():
    from gpu_health.sim.scenario import load_scenario
    from gpu_health.sim.telemetry import Window

    scen = load_scenario({"seed": 4, "cluster": {"gpus": 96, "facility": True}})
    win = Window(scen, T0, T0 + 5 * MIN)
    out = kpis(win.table("facility_telemetry"), win.table("gpu_telemetry"))
    pue = out.loc["pue"]
    assert (pue["status"] == "ok").all() and pue["value"].between(scen.cluster.spec.pue, scen.cluster.spec.pue + 0.05).all()
    head = out.loc["rack_power_headroom"]
    assert (head["value"] > 0).all() and (head["value"] < 1).all()
    assert np.isfinite(out.loc["gpus_throttled.thermal", "value"]).all()

"""IpmiFacilitySource against a real Prometheus (backfilled with promtool): ipmi_exporter series -> facility_telemetry.

The scrapes are written in ipmi_exporter's exposition (metric names and labels of its docs/metrics.md: DCMI power,
temperature sensors by name, generic sensor states by type) for three nodes in two racks, plus a hall meter.
"""

import pandas as pd
import pytest

from gpu_health.contracts.validate import validate_frame
from gpu_health.evaluation.promexport import scrape_to_openmetrics
from gpu_health.sources.ipmi import IpmiFacilitySource, load_racks
from gpu_health.sources.registry import RoutedSource, make_source
from gpu_health_tests.services.prometheus import prometheus_factory  # noqa: F401  (fixture)

T0 = pd.Timestamp("2026-01-05 10:00", tz="UTC")
MIN = pd.Timedelta(minutes=1)
RACKS = pd.DataFrame({"rack_id": ["rack-a", "rack-b"], "region": ["lab", "lab"], "node_ids": ["n1,n2", "n3"],
                      "power_budget_kw": [20.0, 10.0]})


def scrape(minute: int) -> str:
    """One scrape of the three BMCs (n2 is named by its instance only) and the hall meter at ``minute``."""
    psu2 = 2 if minute >= 3 else 0  # n1's second supply goes critical at 10:03
    return "\n".join([
        "# TYPE ipmi_dcmi_power_consumption_current_watts gauge",
        'ipmi_dcmi_power_consumption_current_watts{instance="bmc1:9290",node="n1"} 4000',
        'ipmi_dcmi_power_consumption_current_watts{instance="n2:9290"} 5000',
        f'ipmi_dcmi_power_consumption_current_watts{{instance="bmc3:9290",node="n3"}} {3000 + 100 * minute}',
        "# TYPE ipmi_temperature_celsius gauge",
        'ipmi_temperature_celsius{id="18",instance="bmc1:9290",name="Inlet Temp",node="n1"} 22',
        'ipmi_temperature_celsius{id="19",instance="bmc1:9290",name="Exhaust Temp",node="n1"} 40',
        'ipmi_temperature_celsius{id="1",instance="bmc1:9290",name="CPU1 Temp",node="n1"} 70',
        f'ipmi_temperature_celsius{{id="18",instance="n2:9290",name="Inlet Temp"}} {24 + minute}',
        'ipmi_temperature_celsius{id="1",instance="bmc3:9290",name="CPU1 Temp",node="n3"} 65',
        "# TYPE ipmi_sensor_state gauge",
        'ipmi_sensor_state{id="70",instance="bmc1:9290",name="PS1 Status",node="n1",type="Power Supply"} 0',
        f'ipmi_sensor_state{{id="71",instance="bmc1:9290",name="PS2 Status",node="n1",type="Power Supply"}} {psu2}',
        'ipmi_sensor_state{id="139",instance="bmc1:9290",name="Power Cable",node="n1",type="Cable/Interconnect"} 2',
        "# TYPE facility_power_watts gauge",
        'facility_power_watts{region="lab"} 16800',
    ]) + "\n"


@pytest.fixture
def ipmi_prometheus(prometheus_factory, tmp_path):  # noqa: F811
    om = scrape_to_openmetrics([scrape(i) for i in range(6)], [T0 + i * MIN for i in range(6)], tmp_path / "ipmi.om")
    return prometheus_factory(om)


def test_ipmi_series_roll_up_to_racks(ipmi_prometheus):
    src = IpmiFacilitySource(ipmi_prometheus, RACKS, hall_metric="facility_power_watts")
    fetched = src.read("facility_telemetry", T0 + MIN, T0 + 6 * MIN)
    f = fetched.frame
    v = validate_frame(f, "facility_telemetry", start=T0 + MIN, end=T0 + 6 * MIN, origin="test")
    assert v.rejects.empty and len(v.valid) == 10  # 2 racks x 5 minutes
    a = f[f["rack_id"] == "rack-a"].set_index("ts")
    b = f[f["rack_id"] == "rack-b"].set_index("ts")
    assert (a["power_kw"] == 9.0).all() and (a["power_budget_kw"] == 20.0).all()
    assert list(b["power_kw"]) == [3.1, 3.2, 3.3, 3.4, 3.5]
    # the hottest inlet of the rack (n2's, named by instance only); CPU temperatures are not inlets
    assert list(a["inlet_temp_c"]) == [25.0, 26.0, 27.0, 28.0, 29.0]
    assert (a["outlet_temp_c"] == 40.0).all()
    # rack b exports no inlet, no outlet and no PSU sensor: null, never 0
    assert b["inlet_temp_c"].isna().all() and b["outlet_temp_c"].isna().all() and b["psus_failed"].isna().all()
    # only Power Supply sensors in critical state count (the critical cable sensor is not a PSU)
    assert list(a["psus_failed"]) == [0, 0, 1, 1, 1]
    assert (f["facility_power_kw"] == 16.8).all() and (a["node_ids"] == "n1,n2").all()


def test_without_hall_meter_or_bmc_series_the_rows_are_null_or_absent(ipmi_prometheus):
    f = IpmiFacilitySource(ipmi_prometheus, RACKS).read("facility_telemetry", T0 + MIN, T0 + 3 * MIN).frame
    assert f["facility_power_kw"].isna().all() and len(f) == 4
    later = IpmiFacilitySource(ipmi_prometheus, RACKS).read("facility_telemetry", T0 + 20 * MIN, T0 + 25 * MIN).frame
    assert later.empty and list(later.columns) == list(f.columns)


def test_it_routes_beside_other_sources_and_checks_its_inventory(tmp_path):
    src = make_source("ipmi", "http://127.0.0.1:1", RACKS)
    assert src.tables() == frozenset({"facility_telemetry"})
    assert RoutedSource(src).for_table("facility_telemetry") is src
    bad = tmp_path / "racks.csv"
    RACKS.assign(power_budget_kw=[20.0, 0.0]).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="power_budget_kw"):
        load_racks(bad)
    good = tmp_path / "racks.yaml"
    good.write_text("- {rack_id: r1, region: lab, node_ids: [n1, n2], power_budget_kw: 17.3}\n")
    assert load_racks(good).loc[0, "node_ids"] == "n1,n2"


def test_the_source_resource_routes_facility_to_ipmi_when_a_rack_inventory_is_configured(tmp_path):
    from gpu_health.defs.resources import TelemetrySourceResource

    racks = tmp_path / "racks.csv"
    RACKS.to_csv(racks, index=False)
    routed = TelemetrySourceResource(kind="prometheus", prometheus_url="http://127.0.0.1:1", prometheus_region="lab",
                                     ipmi_racks=str(racks), landing_dir=str(tmp_path)).get()
    assert routed.for_table("facility_telemetry").name == "ipmi"
    assert routed.for_table("gpu_telemetry").name == "prometheus"
    plain = TelemetrySourceResource(kind="prometheus", prometheus_url="http://127.0.0.1:1", landing_dir=str(tmp_path)).get()
    assert plain.for_table("facility_telemetry").name == "landing"  # no inventory: the landing zone (optional)

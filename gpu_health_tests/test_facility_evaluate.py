"""End to end: `gpu-health evaluate` on a short facility scenario -- the simulator's rack cooling
failure and power cap page under the facility family within 15 minutes, the unticketed change is a ticket, and
nothing else pages."""

import json

import yaml

from gpu_health.cli import main


def test_facility_incidents_page_as_facility_and_the_unticketed_change_tickets(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "facility.yaml").write_text(yaml.safe_dump({
        "seed": 4, "start": "2026-11-03T10:00:00Z", "end": "2026-11-03T12:45:00Z",
        "cluster": {"gpus": 300, "facility": True},
        "incidents": [
            {"kind": "rack_cooling_failure", "start": "2026-11-03T12:07:00Z", "duration": "30m", "severity": "high",
             "scope": {"rack": "use-v100-r02"}},
            {"kind": "power_cap_hit", "start": "2026-11-03T12:07:00Z", "duration": "30m", "severity": "high",
             "scope": {"rack": "euw-v100-r02"}},
            {"kind": "unticketed_change", "start": "2026-11-03T12:02:00Z", "duration": "20m", "severity": "low",
             "scope": {"region": "eu-west", "nodes": 1, "change_kind": "bios_update", "actor": "jdoe"}}]}))
    out = tmp_path / "report.json"
    assert main(["evaluate", "--scenarios", str(suite), "--out", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    (scen,) = report["scenarios"]
    by_kind = {i["kind"]: i for i in scen["incidents"]}
    for kind in ("rack_cooling_failure", "power_cap_hit"):
        inc = by_kind[kind]
        assert inc["detected"] and inc["page_family"] == "facility" and inc["ttd_min"] <= 15, inc
    assert by_kind["unticketed_change"]["ticketed"], by_kind["unticketed_change"]
    assert scen["false_pages"] == 0, scen["false_page_alerts"]
    assert set(scen["pages_by_detector"]) == {"rack_cooling", "rack_power_cap"}, scen["pages_by_detector"]

"""The evaluation harness: scoring definitions on hand-built alerts, and a reduced suite end to end."""

import json

import pandas as pd
import pytest
import yaml

from gpu_health.cli import main
from gpu_health.evaluation.scorer import score

T0 = pd.Timestamp("2026-11-03T12:07:00Z")


def _labels(*incidents) -> pd.DataFrame:
    rows = []
    for i, (kind, family, severity, start, minutes, scope) in enumerate(incidents):
        rows.append({"incident_id": f"inc-{i}", "kind": kind, "family": family, "severity": severity, "start": start,
                     "end": start + pd.Timedelta(minutes=minutes), "scope": json.dumps(scope)})
    return pd.DataFrame(rows)


def _alerts(*alerts) -> pd.DataFrame:
    rows = []
    for alert_id, opened, severity, family, region, nodes in alerts:
        rows.append({"partition_start": opened - pd.Timedelta(minutes=5), "alert_id": alert_id,
                     "detector": f"{family}_detector", "opened_at": opened,
                     "paged_at": opened if severity == "page" else pd.NaT, "severity": severity, "cause_family": family,
                     "region": region, "scope": json.dumps({"region": region, "nodes": nodes}), "summary": alert_id})
    return pd.DataFrame(rows)


def test_detection_ttd_family_and_false_pages():
    labels = _labels(("thermal_throttle", "hardware", "high", T0, 60, {"region": "us-east", "node_ids": ["n1", "n2"]}),
                     ("io_bottleneck", "data_io", "high", T0 + pd.Timedelta(hours=3), 60, {"region": "eu-west", "node_ids": ["n9"]}))
    alerts = _alerts(("a1", T0 + pd.Timedelta(minutes=8), "page", "hardware", "us-east", ["n2"]),
                     ("a2", T0 + pd.Timedelta(hours=3, minutes=13), "page", "network", "eu-west", ["n9"]),
                     ("a3", T0 + pd.Timedelta(hours=6), "page", "gaming", "us-east", ["n5"]))
    r = score(alerts, labels, pd.DataFrame(columns=["start", "end", "node_ids"]), pd.Timedelta(days=7))
    assert r["detection_rate"] == 1.0
    assert r["ttd_p50_min"] == pytest.approx(10.5) and r["ttd_max_min"] == pytest.approx(13.0)
    assert r["top1_accuracy"] == 0.5  # the io incident was paged as network
    assert r["false_pages"] == 1 and r["false_page_alerts"][0]["alert_id"] == "a3"
    assert r["false_pages_per_week"] == pytest.approx(1.0)
    assert (r["pages"], r["matched_pages"]) == (3, 2)
    assert r["false_pages_by_detector"] == {"gaming_detector": 1}


def test_overall_splits_precision_and_false_pages_by_profile_and_detector():
    from gpu_health.evaluation.scorer import overall

    def result(profile, pages, matched, false_by):
        return {"profile": profile, "incidents": [], "pages": pages, "matched_pages": matched,
                "false_pages": sum(false_by.values()), "false_pages_by_detector": false_by,
                "maintenance_pages": 0, "simulated_days": 7.0}

    o = overall([result("default", 10, 10, {}), result("messy", 4, 2, {"busy_no_progress": 2}),
                 result("messy", 1, 0, {"hardware_fault": 1})])
    assert o["page_precision"] == pytest.approx(12 / 15)
    assert o["false_pages_by_detector"] == {"busy_no_progress": 2, "hardware_fault": 1}
    assert o["by_profile"]["default"]["page_precision"] == 1.0
    messy = o["by_profile"]["messy"]
    assert messy["page_precision"] == pytest.approx(2 / 5) and messy["false_pages_per_week"] == pytest.approx(1.5)
    assert messy["false_pages_per_week_by_detector"] == {"busy_no_progress": 1.0, "hardware_fault": 0.5}


def test_a_page_after_the_grace_or_elsewhere_does_not_detect():
    labels = _labels(("gpu_ecc_fault", "hardware", "high", T0, 30, {"region": "us-east", "node_ids": ["n1"]}))
    late = _alerts(("late", T0 + pd.Timedelta(minutes=46), "page", "hardware", "us-east", ["n1"]))
    other = _alerts(("other", T0 + pd.Timedelta(minutes=5), "page", "hardware", "eu-west", ["n7"]))
    for alerts in (late, other):
        r = score(alerts, labels, None, pd.Timedelta(days=1))
        assert r["detection_rate"] == 0.0 and r["false_pages"] == 1


def test_tickets_count_for_low_severity_and_maintenance_pages_are_counted():
    labels = _labels(("collector_outage", "missing_data", "low", T0, 20, {"region": "us-east"}),
                     ("maintenance", "planned", "low", T0 + pd.Timedelta(hours=2), 60, {"region": "eu-west", "node_ids": ["m1"]}))
    windows = pd.DataFrame({"start": [T0 + pd.Timedelta(hours=2)], "end": [T0 + pd.Timedelta(hours=3)], "node_ids": ["m1,m2"]})
    alerts = _alerts(("t1", T0 + pd.Timedelta(minutes=5), "ticket", "missing_data", "us-east", []),
                     ("p1", T0 + pd.Timedelta(hours=2, minutes=10), "page", "hardware", "eu-west", ["m1"]))
    r = score(alerts, labels, windows, pd.Timedelta(days=1))
    assert r["ticket_rate"] == 1.0  # the outage (the only low-severity, non-planned incident) got its ticket
    assert r["maintenance_pages"] == 1
    # a page on planned work or on a silent collector matches no incident anyone should be paged for: false
    assert r["false_pages"] == 1 and r["false_page_alerts"][0]["alert_id"] == "p1"
    outage = _alerts(("p2", T0 + pd.Timedelta(minutes=5), "page", "missing_data", "us-east", []))
    assert score(outage, labels, windows, pd.Timedelta(days=1))["false_pages"] == 1


def test_no_alerts_at_all():
    labels = _labels(("thermal_throttle", "hardware", "high", T0, 60, {"region": "us-east", "node_ids": ["n1"]}))
    r = score(_alerts().reindex(columns=["partition_start", "alert_id", "opened_at", "paged_at", "severity",
                                         "cause_family", "region", "scope", "summary"]), labels, None, pd.Timedelta(days=1))
    assert r["detection_rate"] == 0.0 and r["false_pages"] == 0


def test_reduced_suite_end_to_end(tmp_path, capsys):
    """`gpu-health evaluate` on a short scenario: a thermal event and dummy load after two hours of history."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "short.yaml").write_text(yaml.safe_dump({
        "seed": 3, "start": "2026-11-03T10:00:00Z", "end": "2026-11-03T12:45:00Z",
        "incidents": [
            {"kind": "thermal_throttle", "start": "2026-11-03T12:07:00Z", "duration": "30m", "severity": "high",
             "scope": {"region": "us-east", "nodes": 2}, "magnitude": 0.38},
            {"kind": "dummy_workload", "start": "2026-11-03T12:13:00Z", "duration": "30m", "severity": "high",
             "scope": {"region": "eu-west", "team": "credit-risk"}, "magnitude": 0.5}]}))
    out = tmp_path / "report.json"
    assert main(["evaluate", "--scenarios", str(suite), "--out", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    for key in ("detection_rate", "ttd_p50_min", "ttd_p95_min", "ttd_max_min", "top1_accuracy",
                "false_pages_per_week", "maintenance_pages"):
        assert key in report["overall"]
    assert report["overall"]["errors"] == []
    assert report["overall"]["detection_rate"] == 1.0, report["scenarios"][0]["incidents"]
    assert report["overall"]["top1_accuracy"] == 1.0
    assert report["overall"]["ttd_max_min"] <= 15
    assert report["overall"]["by_detector"]["thermal_throttle"]["detected_right_family"] == 1
    out = capsys.readouterr().out
    assert "| short |" in out and "| thermal_throttle | 1 | 0 |" in out


def test_a_page_is_scored_on_the_scope_it_paged_with():
    """An alert opened as a ticket on one node and paged later on another (one alert per region) detects the
    incident on the node it paged for."""
    labels = _labels(("gpu_ecc_fault", "hardware", "high", T0, 60, {"region": "us-east", "node_ids": ["n2"]}))
    ticket = _alerts(("a1", T0 - pd.Timedelta(minutes=15), "ticket", "hardware", "us-east", ["n1"]))
    page = _alerts(("a1", T0 + pd.Timedelta(minutes=3), "page", "hardware", "us-east", ["n1", "n2"]))
    page["opened_at"] = ticket["opened_at"].iloc[0]
    r = score(pd.concat([ticket, page], ignore_index=True), labels, None, pd.Timedelta(days=1))
    assert r["detection_rate"] == 1.0 and r["false_pages"] == 0


def _failing_run(start, end, **kwargs):
    """A pipeline runner that fails at once, and records which scenario it was asked to run."""
    _failing_run.calls.append(kwargs["scenario"])
    raise RuntimeError("pipeline down")


_failing_run.calls = []


def test_each_scenario_is_kept_as_it_finishes_and_resume_runs_only_the_rest(tmp_path):
    """A suite killed half way keeps the scenarios it finished (OUT.d/NAME.json); --resume runs only the others,
    and an error is never reused."""
    from gpu_health.evaluation.harness import evaluate

    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("a_week", "b_week"):
        (suite / f"{name}.yaml").write_text(yaml.safe_dump(
            {"seed": 1, "start": "2026-11-03T10:00:00Z", "end": "2026-11-03T11:00:00Z", "incidents": []}))
    out = tmp_path / "report.json"
    _failing_run.calls.clear()
    first = evaluate(str(suite), str(out), run=_failing_run)
    assert first["overall"]["errors"] == ["a_week", "b_week"]
    kept = json.loads((tmp_path / "report.json.d" / "a_week.json").read_text())
    assert kept["error"].startswith("RuntimeError: pipeline down")

    # a week finished by an earlier run: its result is reused, the errored one runs again
    finished = {k: v for k, v in kept.items() if k != "error"} | {"seconds": 300.0}
    (tmp_path / "report.json.d" / "a_week.json").write_text(json.dumps(finished))
    _failing_run.calls.clear()
    again = evaluate(str(suite), str(out), run=_failing_run, resume=True)
    assert [c.rsplit("/", 1)[-1] for c in _failing_run.calls] == ["b_week.yaml"]
    assert again["overall"]["errors"] == ["b_week"]
    assert [r["scenario"] for r in again["scenarios"]] == ["a_week", "b_week"]
    assert again["scenarios"][0]["seconds"] == 300.0

    # without --resume everything runs again
    _failing_run.calls.clear()
    evaluate(str(suite), str(out), run=_failing_run)
    assert len(_failing_run.calls) == 2


@pytest.mark.parametrize("cluster, profile", [(None, "default"), ("messy", "messy"),
                                              ({"gpus": 120, "serving": True}, "default"),
                                              ({"profile": "messy", "serving": True}, "messy")])
def test_a_scenarios_profile_is_the_one_the_simulator_runs(tmp_path, cluster, profile):
    from gpu_health.evaluation.harness import scenario_profile
    from gpu_health.sim.cluster import PROFILES
    from gpu_health.sim.scenario import load_scenario

    raw = {"seed": 1, "start": "2026-11-03T10:00:00Z", "end": "2026-11-03T11:00:00Z"}
    if cluster is not None:
        raw["cluster"] = cluster
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert scenario_profile(path) == profile
    # the simulator's cluster: the profile's regions (the messy profile has other ones)
    assert load_scenario(str(path)).cluster.spec.regions == PROFILES[profile].regions


def test_per_detector_pages_false_pages_first_detections_and_misses():
    """Each detector's precision budget: its pages, matched and false pages, the incidents it paged first (right or
    wrong family), and the high-severity incidents of the families it emits that no page detected."""
    from gpu_health.evaluation.scorer import detector_tables, overall

    labels = _labels(("thermal_throttle", "hardware", "high", T0, 60, {"region": "us-east", "node_ids": ["n1"]}),
                     ("io_bottleneck", "data_io", "high", T0 + pd.Timedelta(hours=3), 60,
                      {"region": "eu-west", "node_ids": ["n9"]}),
                     ("driver_regression", "software", "high", T0 + pd.Timedelta(hours=5), 60,
                      {"region": "us-east", "node_ids": ["n3"]}),
                     ("maintenance", "planned", "low", T0 + pd.Timedelta(hours=8), 60,
                      {"region": "us-east", "node_ids": ["n7"]}))
    alerts = _alerts(("a1", T0 + pd.Timedelta(minutes=8), "page", "hardware", "us-east", ["n1"]),
                     ("a2", T0 + pd.Timedelta(hours=2), "page", "hardware", "eu-west", ["n4"]),
                     ("a3", T0 + pd.Timedelta(hours=3, minutes=6), "page", "network", "eu-west", ["n9"]),
                     ("a4", T0 + pd.Timedelta(hours=3, minutes=9), "page", "data_io", "eu-west", ["n9"]),
                     ("a5", T0 + pd.Timedelta(hours=8, minutes=5), "page", "scheduling", "us-east", ["n7"]),
                     ("t1", T0 + pd.Timedelta(hours=5, minutes=5), "ticket", "software", "us-east", ["n3"]))
    alerts["detector"] = alerts["cause_family"].map({"hardware": "hardware_fault", "network": "network_slowdown",
                                                     "data_io": "data_io_slowdown", "scheduling": "scheduling_blocked",
                                                     "software": "deploy_regression"})
    r = score(alerts, labels, None, pd.Timedelta(days=7))
    assert r["incidents"][0]["page_detector"] == "hardware_fault"
    assert r["incidents"][1]["page_detector"] == "network_slowdown"  # it paged first, with the wrong family
    d = r["by_detector"]
    hw = d["hardware_fault"]
    assert (hw["pages"], hw["matched_pages"], hw["false_pages"]) == (2, 1, 1)
    assert hw["precision"] == 0.5 and hw["false_pages_per_week"] == pytest.approx(1.0)
    assert (hw["detected_right_family"], hw["detected_wrong_family"], hw["misses"]) == (1, 0, 0)
    net = d["network_slowdown"]
    assert (net["pages"], net["false_pages"], net["detected_right_family"], net["detected_wrong_family"]) == (1, 0, 0, 1)
    io = d["data_io_slowdown"]  # a matched page, second after the network one: no first detection, no miss
    assert (io["pages"], io["matched_pages"], io["detected_right_family"], io["misses"]) == (1, 1, 0, 0)
    # a page on planned work is false
    assert d["scheduling_blocked"]["false_pages"] == 1 and d["scheduling_blocked"]["precision"] == 0.0
    # the driver regression only got a ticket: a miss of every detector that emits the software family
    dep = d["deploy_regression"]
    assert (dep["pages"], dep["precision"], dep["misses"], dep["missed_kinds"]) == (0, None, 1, {"driver_regression": 1})
    assert d["training_stall"]["misses"] == 1
    assert "thermal_throttle" not in d  # no page, nothing of its family missed: nothing to report
    # the existing keys stay
    assert r["false_pages_by_detector"] == {"hardware_fault": 1, "scheduling_blocked": 1}

    o = overall([{**r, "profile": "messy"}, {**r, "profile": "messy"}])
    for rows in (o["by_detector"], o["by_profile"]["messy"]["by_detector"]):
        assert (rows["hardware_fault"]["pages"], rows["hardware_fault"]["false_pages"]) == (4, 2)
        assert rows["hardware_fault"]["false_pages_per_week"] == pytest.approx(1.0)  # two weeks
        assert rows["deploy_regression"]["misses"] == 2 and rows["network_slowdown"]["detected_wrong_family"] == 2
    text = detector_tables({"overall": o})
    assert "| detector | pages | false | false/week | precision | detected | misses |" in text
    assert "| hardware_fault | 4 | 2 | 1.00 | 0.50 | 2 / 0 | 0 |" in text
    assert "| deploy_regression | 0 | 0 | 0.00 | - | 0 / 0 | 2 |" in text


def test_threshold_margin_is_the_smallest_margin_of_the_pages_that_detected_with_the_right_family():
    """threshold_margin: the highest factor a detector's bar could be raised by with every incident it detected
    (first page, right family) still paged -- the smallest margin_at_page of those pages. A false page, a page second
    to another, or a first page of the wrong family does not count; a margin not stated (None) is not a margin."""
    from gpu_health.evaluation.scorer import detector_tables, overall

    hours = lambda h, m=0: T0 + pd.Timedelta(hours=h, minutes=m)  # noqa: E731
    labels = _labels(("thermal_throttle", "hardware", "high", T0, 60, {"region": "us-east", "node_ids": ["n1"]}),
                     ("gpu_fell_off_bus", "hardware", "high", hours(2), 60, {"region": "us-east", "node_ids": ["n2"]}),
                     ("io_bottleneck", "data_io", "high", hours(4), 60, {"region": "eu-west", "node_ids": ["n9"]}),
                     ("driver_regression", "software", "high", hours(6), 60, {"region": "us-east", "node_ids": ["n3"]}))
    alerts = _alerts(("a1", hours(0, 8), "page", "hardware", "us-east", ["n1"]),
                     ("a2", hours(2, 6), "page", "hardware", "us-east", ["n2"]),
                     ("a3", hours(1, 30), "page", "hardware", "eu-west", ["n4"]),  # false page
                     ("a4", hours(4, 6), "page", "network", "eu-west", ["n9"]),  # first, wrong family
                     ("a5", hours(4, 9), "page", "data_io", "eu-west", ["n9"]),  # second
                     ("a6", hours(6, 5), "page", "software", "us-east", ["n3"]))
    alerts["detector"] = alerts["cause_family"].map({"hardware": "hardware_fault", "network": "network_slowdown",
                                                     "data_io": "data_io_slowdown", "software": "deploy_regression"})
    alerts["margin_at_page"] = alerts["alert_id"].map({"a1": 3.0, "a2": 1.5, "a3": 1.01, "a4": 1.1, "a5": 1.05})
    r = score(alerts, labels, None, pd.Timedelta(days=7))
    d = r["by_detector"]
    assert d["hardware_fault"]["threshold_margin"] == 1.5
    assert d["network_slowdown"]["threshold_margin"] is None  # its one first page named the wrong family
    assert d["data_io_slowdown"]["threshold_margin"] is None  # paged second: its bar did not decide detection
    assert d["deploy_regression"]["threshold_margin"] is None  # detected, margin not stated
    assert [i["page_margin"] for i in r["incidents"]] == [3.0, 1.5, 1.1, None]

    other = score(alerts.assign(margin_at_page=alerts["margin_at_page"] * 0.9), labels, None, pd.Timedelta(days=7))
    o = overall([{**r, "profile": "default"}, {**other, "profile": "messy"}])
    assert o["by_detector"]["hardware_fault"]["threshold_margin"] == pytest.approx(1.35)
    assert o["by_profile"]["default"]["by_detector"]["hardware_fault"]["threshold_margin"] == 1.5
    text = detector_tables({"overall": o})
    assert "| detector | pages | false | false/week | precision | detected | misses | margin |" in text
    assert "| hardware_fault | 6 | 2 | 1.00 | 0.67 | 4 / 0 | 0 | 1.35 |" in text
    assert "| deploy_regression | 2 | 0 | 0.00 | 1.00 | 2 / 0 | 0 | - |" in text

    # alerts of a store without the column (a static rule, an older table): no margin, nothing breaks
    bare = score(alerts.drop(columns="margin_at_page"), labels, None, pd.Timedelta(days=7))
    assert bare["by_detector"]["hardware_fault"]["threshold_margin"] is None

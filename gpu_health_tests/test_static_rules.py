"""The seeds' static Prometheus rules, replayed by a real Prometheus on simulated telemetry and scored.

A 2-hour scenario on a small cluster (``gpus: 100``: per region one
interactive, one batch and two distributed nodes) with a thermal throttle, a
training stall and a GPU ECC fault goes through :func:`evaluate_static_rules`
once per module (simulate -> OpenMetrics -> promtool -> prometheus on loopback
-> query_range replay -> score). The replay's ``for`` logic is also checked on
hand-written series. Prometheus and promtool must be installed (the tests fail,
never skip, without them).
"""

import json

import pandas as pd
import pytest
import yaml

from gpu_health.evaluation.scorer import _metrics, overall, table
from gpu_health.sim.labels import labels_frame
from gpu_health.sim.scenario import load_scenario
from gpu_health.evaluation.static_rules import (
    RULE_FAMILY, RULES_PATH, AlertRule, alerts_frame, check_rules, evaluate_static_rules, load_rules,
    main_static, parse_prom_duration, render, replay_rule,
)
from gpu_health_tests.services.prometheus import require_binary

START = pd.Timestamp("2026-11-03T10:00:00Z")
THERMAL_AT = pd.Timestamp("2026-11-03T10:20:00Z")
STALL_AT = pd.Timestamp("2026-11-03T10:30:00Z")
ECC_AT = pd.Timestamp("2026-11-03T11:00:00Z")
MIN = pd.Timedelta(minutes=1)

SCENARIO = {
    "seed": 5,
    "start": START.isoformat(),
    "end": (START + pd.Timedelta(hours=2)).isoformat(),
    "cluster": {"gpus": 100},
    "incidents": [
        {"kind": "thermal_throttle", "start": THERMAL_AT.isoformat(), "duration": "60m", "severity": "high",
         "scope": {"node_ids": ["use-v100-003"]}},  # a distributed node (one 16-GPU job)
        {"kind": "training_stall", "start": STALL_AT.isoformat(), "duration": "60m", "severity": "high",
         "scope": {"region": "eu-west"}},
        {"kind": "gpu_ecc_fault", "start": ECC_AT.isoformat(), "duration": "30m", "severity": "high",
         "scope": {"node_ids": ["use-v100-002"]}},
    ],
}


@pytest.fixture(scope="module")
def scenario_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("static-rules") / "short.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


@pytest.fixture(scope="module")
def static_run(scenario_path, tmp_path_factory):
    """One full replay of the short scenario: (result dict, alert rows, scenario, labels by kind)."""
    require_binary("prometheus")
    require_binary("promtool")
    result = evaluate_static_rules(scenario_path, tmp_path_factory.mktemp("static-work"), return_alerts=True)
    assert "error" not in result, result.get("error")
    alerts = result.pop("alerts")
    scen = load_scenario(scenario_path)
    labels = labels_frame(scen).set_index("kind")
    return result, alerts, scen, labels


def _scope(row) -> dict:
    return json.loads(row["scope"])


def _incident(result, kind) -> dict:
    return next(i for i in result["incidents"] if i["kind"] == kind)


# --- the rule file ----------------------------------------------------------------------------
def test_promtool_check_rules_passes():
    require_binary("promtool")
    out = check_rules(RULES_PATH)
    assert "SUCCESS: 5 rules found" in out


def test_rule_file_has_the_seed_rules_paging_with_a_family_each():
    rules = {r.name: r for r in load_rules(RULES_PATH)}
    assert set(rules) == set(RULE_FAMILY)
    assert all(r.labels.get("severity") == "page" for r in rules.values())
    assert rules["LowGPUUtilization"].expr == "DCGM_FI_DEV_GPU_UTIL < 30"
    assert rules["LowGPUUtilization"].for_s == 15 * 60
    assert "DCGM_FI_DEV_GPU_TEMP > 83" in rules["GPUHighTemperature"].expr
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in rules["GPUDoubleBitECCError"].expr
    assert "DCGM_FI_DEV_XID_ERRORS" in rules["GPUXidError"].expr
    assert rules["TrainingJobStalled"].expr == "(time() - training_last_step_timestamp_seconds) > 600"
    assert RULE_FAMILY["GPUHighTemperature"] == RULE_FAMILY["GPUDoubleBitECCError"] == RULE_FAMILY["GPUXidError"] == "hardware"
    assert RULE_FAMILY["TrainingJobStalled"] == "software"


def test_prometheus_durations_and_templates():
    assert parse_prom_duration("15m") == 900
    assert parse_prom_duration("1h30m") == 5400
    assert parse_prom_duration("0s") == parse_prom_duration(None) == parse_prom_duration("0") == 0
    with pytest.raises(ValueError):
        parse_prom_duration("15 minutes")
    assert render("Xid {{ $value }} on {{ $labels.Hostname }} GPU {{$labels.gpu}}", {"Hostname": "n1", "gpu": "3"}, 48.0) == "Xid 48 on n1 GPU 3"


# --- the replay's `for` logic, on hand-written series -----------------------------------------------
def _openmetrics(path, series: dict[str, list[float]], t0: int) -> None:
    lines = ["# TYPE x gauge"]
    samples = sorted((t0 + 60 * i, labels, v) for labels, values in series.items() for i, v in enumerate(values))
    lines += [f'x{{s="{labels}"}} {v} {t}' for t, labels, v in samples]
    path.write_text("\n".join(lines) + "\n# EOF\n")


def test_replay_applies_for_like_the_rule_manager(tmp_path, prometheus_factory):
    t0 = int(START.timestamp())
    series = {
        "gap": [1.0] * 14 + [0.0] * 2 + [1.0] * 25 + [0.0] * 19,  # 14 min (too short), then 25 min
        "always": [1.0] * 60,                                      # still firing at the end
        "never": [0.0] * 60,
    }
    om = tmp_path / "x.om"
    _openmetrics(om, series, t0)
    url = prometheus_factory(om)
    rule = AlertRule("T", "x > 0", 15 * 60, {"severity": "page"}, {"summary": "x on {{ $labels.s }}"})
    end = t0 + 60 * 60
    eps = replay_rule(url, rule, t0, end)
    got = {(e.labels["s"], e.active_at - t0, e.fired_at - t0, None if e.resolved_at is None else e.resolved_at - t0) for e in eps}
    assert got == {("gap", 16 * 60, 31 * 60, 41 * 60), ("always", 0, 15 * 60, None)}
    # query windows that cut the runs give the same alerts
    assert {(e.labels["s"], e.active_at, e.fired_at, e.resolved_at) for e in replay_rule(url, rule, t0, end, window_s=7 * 60)} == \
        {(e.labels["s"], e.active_at, e.fired_at, e.resolved_at) for e in eps}
    # for: 0 fires at the first evaluation; each return after a miss is a new alert
    now = replay_rule(url, AlertRule("T0", "x > 0", 0), t0, end)
    assert sorted((e.labels["s"], e.fired_at - t0) for e in now) == [("always", 0), ("gap", 0), ("gap", 16 * 60)]
    rows = alerts_frame(eps, [rule])
    assert rows["paged_at"].tolist() == rows["opened_at"].tolist()
    assert set(rows["status"]) == {"firing", "resolved"}
    assert (rows["partition_start"] == rows["opened_at"].dt.floor("5min")).all()
    assert sorted(rows["summary"]) == ["x on always", "x on gap"]


# --- the seeds' rules on the simulated scenario -----------------------------------------------------
def test_temperature_rule_fires_on_the_throttled_nodes_after_its_for(static_run):
    result, alerts, scen, labels = static_run
    inc = json.loads(labels.loc["thermal_throttle", "scope"])
    hot = alerts[alerts["rule"] == "GPUHighTemperature"]
    assert len(hot)
    assert {n for s in hot["scope"].map(json.loads) for n in s["nodes"]} == set(inc["node_ids"])
    # every GPU of the node pages (one alert per series) once the temperature held for the rule's 5m
    gpus = scen.cluster.gpus
    uuids = set(gpus.loc[gpus["node_id"].isin(inc["node_ids"]), "gpu_uuid"])
    first = hot.assign(uuid=[_scope(r)["labels"]["UUID"] for _, r in hot.iterrows()]).groupby("uuid")["opened_at"].min()
    assert set(first.index) == uuids
    assert (first == THERMAL_AT + 5 * MIN).all()
    assert (hot["opened_at"] - hot["active_at"] == 5 * MIN).all()
    assert set(hot["cause_family"]) == {"hardware"} and set(hot["region"]) == {"us-east"}
    found = _incident(result, "thermal_throttle")
    assert found["detected"] and found["ttd_min"] == 5.0 and found["page_family"] == "hardware"


def test_stall_rule_fires_for_the_hung_jobs(static_run):
    result, alerts, scen, labels = static_run
    inc = json.loads(labels.loc["training_stall", "scope"])
    stalled = alerts[alerts["rule"] == "TrainingJobStalled"]
    jobs = {_scope(r)["labels"]["job_id"] for _, r in stalled.iterrows()}
    assert jobs == set(inc["job_ids"])
    # no step for > 600 s, then for: 5m
    assert (stalled["opened_at"] >= STALL_AT + 15 * MIN).all()
    assert (stalled["opened_at"] <= STALL_AT + 17 * MIN).all()
    # the job's nodes and region (as pod labels would give), not cluster-wide
    assert {n for s in stalled["scope"].map(json.loads) for n in s["nodes"]} <= set(inc["node_ids"])
    assert set(stalled["region"]) == {"eu-west"}
    found = _incident(result, "training_stall")
    assert found["detected"] and found["page_family"] == "software"
    assert 15.0 <= found["ttd_min"] <= 17.0


def test_ecc_fault_pages_through_dbe_and_xid(static_run):
    result, alerts, scen, labels = static_run
    inc = json.loads(labels.loc["gpu_ecc_fault", "scope"])
    for rule in ("GPUDoubleBitECCError", "GPUXidError"):
        rows = alerts[alerts["rule"] == rule]
        assert len(rows), rule
        assert {_scope(r)["labels"]["UUID"] for _, r in rows.iterrows()} == set(inc["gpu_uuids"])
        assert rows["opened_at"].min() == ECC_AT  # for: 0m
    xid = alerts[alerts["rule"] == "GPUXidError"]
    assert xid["summary"].str.startswith("Xid 48 ").all()
    assert _incident(result, "gpu_ecc_fault")["ttd_min"] == 0.0


def test_low_util_rule_pages_idle_notebooks_as_false_pages(static_run):
    result, alerts, scen, labels = static_run
    nodes = scen.cluster.nodes
    interactive = set(nodes.loc[nodes["pool"] == "interactive", "node_id"])
    low = alerts[alerts["rule"] == "LowGPUUtilization"]
    assert (low["opened_at"] - low["active_at"] == 15 * MIN).all()  # for: 15m
    matched = {a for i in result["incidents"] for a in i["alerts"]}
    false_low = low[~low["alert_id"].isin(matched)]
    on_notebooks = false_low[[bool(set(_scope(r)["nodes"]) & interactive) for _, r in false_low.iterrows()]]
    # an idle notebook: a pod on an interactive GPU, below 30 % for 15 minutes, matching no incident
    assert any("pod" in _scope(r)["labels"] for _, r in on_notebooks.iterrows())
    assert set(low["cause_family"]) == {RULE_FAMILY["LowGPUUtilization"]}
    assert result["false_pages"] >= len(false_low) > 0
    assert result["false_pages_per_week"] > 0


def test_scoring_has_the_pipeline_evaluation_keys(static_run, scenario_path):
    result, alerts, scen, labels = static_run
    span = scen.end - scen.start
    expected = {"scenario", "seconds", "incidents", "false_pages", *_metrics(pd.DataFrame(), 0, 0, span)}
    assert expected <= set(result)
    assert result["scenario"] == scenario_path.stem
    assert result["high_incidents"] == 3 and result["detection_rate"] == 1.0
    assert result["simulated_days"] == round(span / pd.Timedelta(days=1), 3)
    assert {"incident_id", "kind", "family", "severity", "detected", "ttd_min", "page_family", "ticketed", "alerts"} <= set(result["incidents"][0])
    assert sum(result["alerts_by_rule"].values()) == len(alerts)
    assert result["timings"]["samples"] > 0 and result["timings"]["seconds_per_simulated_day"] > 0
    report = {"overall": overall([result]), "scenarios": [result]}
    assert report["overall"]["scenarios"] == 1
    assert "| short |" in table(report)


def test_cli_writes_the_evaluate_report(scenario_path, tmp_path, capsys):
    out = tmp_path / "static.json"
    code = main_static(["--scenarios", str(scenario_path.parent), "--pattern", scenario_path.name, "--out", str(out),
                        "--workdir", str(tmp_path / "work"), "--quiet"])
    assert code == 0
    report = json.loads(out.read_text())
    assert set(report) == {"overall", "scenarios"}
    assert report["overall"]["errors"] == [] and report["overall"]["scenarios"] == 1
    assert report["scenarios"][0]["detection_rate"] == 1.0
    assert "| **overall** |" in capsys.readouterr().out


def test_a_stall_across_midnight_still_pages(tmp_path):
    """The export works a day at a time; the last progress time carries into the next day."""
    require_binary("prometheus")
    stall_at = pd.Timestamp("2026-11-03T23:55:00Z")
    scen = {"seed": 5, "start": "2026-11-03T23:00:00Z", "end": "2026-11-04T01:00:00Z", "cluster": {"gpus": 100},
            "incidents": [{"kind": "training_stall", "start": stall_at.isoformat(), "duration": "60m", "severity": "high",
                           "scope": {"region": "eu-west"}}]}
    path = tmp_path / "midnight.yaml"
    path.write_text(yaml.safe_dump(scen))
    result = evaluate_static_rules(path, tmp_path / "work", return_alerts=True)
    assert "error" not in result, result.get("error")
    alerts = result["alerts"]
    stalled = alerts[alerts["rule"] == "TrainingJobStalled"]
    jobs = json.loads(labels_frame(load_scenario(path)).loc[0, "scope"])["job_ids"]
    assert {_scope(r)["labels"]["job_id"] for _, r in stalled.iterrows()} == set(jobs)
    assert (stalled["opened_at"] >= stall_at + 15 * MIN).all()  # after midnight: > 600 s without a step, then 5m
    assert result["incidents"][0]["detected"]

"""CI detection guard: a rolling driver regression on the messy profile pages as software, a lone GPU as hardware.

A driver upgrade reaches a quarter of the nodes in four drained waves (gpu_health.sim.rollout); from each wave's
return half the jobs starting on its nodes fail within minutes, their GPUs showing Xids 13 / 31 / 119 and their
reasons naming the GPU ("Xid 13", NCCL "unhandled cuda error", "unspecified launch failure"). Many nodes of one
change failing the same way at once is software: the page names the change, within 15 minutes of the first wave.
In the same run, earlier, one GPU of one node falls off the bus (Xid 79): one GPU failing alone is hardware.

The run is `gpu-health run --direct --scenario` into a fresh SQLite warehouse (the steps the alerts need, as
`gpu-health evaluate` runs them), on the ``messy`` profile at a fifth of its size, with a maintenance window in
the middle of the rollout; the alerts are scored with gpu_health.evaluation.scorer.score against the scenario's
labels as the harness scores them. It runs with two seeds: which nodes each wave holds (one region or two, which
pools) is the seed's draw, and the page must not depend on it.
"""

import json

import pandas as pd
import pytest

from gpu_health_tests.conftest import run_scenario
from gpu_health.evaluation.scorer import score
from gpu_health.sim.labels import labels_frame
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import maintenance_windows
from gpu_health.storage.warehouse import Warehouse

FIRST_WAVE = pd.Timestamp("2026-11-03T09:37:00Z")
NEW_DRIVER = "560.35.03"
ROLLOUT = {
    "seed": None,  # the fixture's parameter
    "start": "2026-11-03T06:00:00Z",
    "end": "2026-11-03T12:30:00Z",
    "cluster": {"profile": "messy", "gpus": 240},
    "incidents": [
        {"kind": "gpu_fell_off_bus", "start": "2026-11-03T07:37:00Z", "duration": "60m", "severity": "high",
         "scope": {"nodes": 1}},
        {"kind": "driver_regression", "start": FIRST_WAVE.isoformat(), "duration": "2h", "severity": "high",
         "magnitude": 0.5, "scope": {"fraction": 0.25}, "to_version": NEW_DRIVER,
         "rollout": {"waves": 4, "every": "20m", "drain": "8m", "fail_within": "5m", "failure_xids": [13, 31, 119],
                     "requeue": 0.4}},
        {"kind": "maintenance", "start": "2026-11-03T09:00:00Z", "duration": "3h", "severity": "low",
         "scope": {"region": "ap-southeast", "nodes": 2, "reason": "rack power work"}},
    ],
}
GPU_REASONS = ("Xid ", "unhandled cuda error", "unspecified launch failure")
# seed -> why the detectors do not yet page its rollout as the test asks (strict: a fix shows as XPASS)
NOT_YET: dict[int, str] = {}


@pytest.fixture(scope="module", params=[15, 16], ids=lambda seed: f"seed{seed}")
def rollout(request, tmp_path_factory):
    path, url = run_scenario(tmp_path_factory.mktemp("driver_rollout_messy"), "driver_rollout_messy.yaml",
                             {**ROLLOUT, "seed": request.param}, ["alerts"])
    scen = load_scenario(path)
    w = Warehouse(url)
    alerts = w.read_window("alerts")
    result = score(alerts, labels_frame(scen), maintenance_windows(scen), scen.end - scen.start)
    return w, alerts, {i["kind"]: i for i in result["incidents"]}, result, request.param


def test_the_rollout_fails_jobs_with_gpu_xids_in_waves(rollout):
    """The case is the hard one: the failing jobs' reasons name the GPU, the waves drain their nodes."""
    w = rollout[0]
    end = FIRST_WAVE + pd.Timedelta(hours=2)
    events = w.read_window("scheduler_events", FIRST_WAVE, end)
    failed = events[events["exit_state"] == "failed"]
    assert failed["reason"].fillna("").str.contains("|".join(GPU_REASONS)).sum() >= 10
    changes = w.read_window("change_events", FIRST_WAVE, end)
    assert (changes["to_version"] == NEW_DRIVER).sum() == 4  # four waves
    gpu = w.read_window("gpu_telemetry", FIRST_WAVE, end)
    assert gpu["xid"].isin([13, 31, 119]).any()


def test_a_rolling_driver_regression_pages_as_software_within_15_minutes_naming_the_change(rollout, request):
    w, alerts, incidents, _, seed = rollout
    if seed in NOT_YET:
        request.applymarker(pytest.mark.xfail(strict=True, reason=NOT_YET[seed]))
    inc = incidents["driver_regression"]
    assert inc["detected"] and inc["page_family"] == "software", inc
    assert inc["ttd_min"] <= 15, inc
    waves = w.read_window("change_events", FIRST_WAVE, FIRST_WAVE + pd.Timedelta(hours=2))
    wave_ids = set(waves.loc[waves["to_version"] == NEW_DRIVER, "event_id"])
    pages = alerts[(alerts["severity"] == "page") & (alerts["cause_family"] == "software")
                   & (alerts["paged_at"] <= FIRST_WAVE + pd.Timedelta(minutes=15))]
    named = [t for t in (pages["summary"] + " " + pages["description"].fillna("") + " "
                         + pages["follows_change"].fillna("")) if NEW_DRIVER in t and any(e in t for e in wave_ids)]
    assert named, pages["summary"].tolist()


def test_the_rollout_pages_nothing_falsely(rollout):
    result = rollout[3]
    assert result["false_pages"] == 0, result["false_page_alerts"]
    assert result["maintenance_pages"] == 0


def test_a_single_gpu_off_the_bus_in_the_same_run_pages_as_hardware(rollout):
    _, alerts, incidents, _, _ = rollout
    inc = incidents["gpu_fell_off_bus"]
    assert inc["detected"] and inc["page_family"] == "hardware", inc
    paged = alerts[alerts["alert_id"].isin(inc["alerts"]) & (alerts["severity"] == "page")]
    first = paged.sort_values("partition_start").iloc[0]
    assert len(json.loads(first["scope"]).get("nodes", [])) == 1, first["summary"]  # the one node, not a cohort

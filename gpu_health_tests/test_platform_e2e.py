"""End to end on a small cluster: the simulator writes the platform tables to the landing zone in the
contract's layout, the pipeline reads them back, and each platform incident opens its alert with its family within
15 minutes of its start; nothing pages before the incidents, and the landing zone holds one file per partition."""

import pandas as pd
import pytest

from gpu_health.steps.direct import run_range
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import simulate

START, END = pd.Timestamp("2026-11-03T09:00:00Z"), pd.Timestamp("2026-11-03T11:00:00Z")
ONSET = pd.Timestamp("2026-11-03T10:00:00Z")
GRACE = pd.Timedelta(minutes=15)
INCIDENTS = [
    {"kind": "cpu_fallback", "scope": {"region": "us-east", "nodes": 2, "pool": "batch"}},
    {"kind": "pods_pending_taint", "scope": {"region": "eu-west"}},
    {"kind": "crash_loop", "scope": {"region": "us-east", "nodes": 2}},
    {"kind": "device_plugin_missing", "scope": {"region": "eu-west", "nodes": 1}},
    {"kind": "diverging_run", "severity": "low", "scope": {"region": "us-east", "nodes": 2, "pool": "distributed"}},
]
EXPECTED = {"cpu_fallback": ("software", "page"), "pods_pending_gpu": ("scheduling", "page"),
            "crash_loop": ("software", "page"), "device_plugin_missing": ("software", "page"),
            "training_divergence": ("software", "ticket")}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("platform")
    zone = simulate(folder, {
        "seed": 5, "start": START.isoformat(), "end": END.isoformat(), "cluster": {"gpus": 96, "platform": True},
        "incidents": [{"start": ONSET.isoformat(), "duration": "60m", "severity": "high", **i} for i in INCIDENTS]})
    from gpu_health.sources.registry import make_source

    wh = Warehouse(f"sqlite:///{folder / 'w.db'}")
    run_range(wh, make_source("landing", str(zone)), START, END)
    return wh, zone


def test_landing_zone_layout(run):
    _, zone = run
    for table in ("kube_pods", "kube_nodes"):
        files = sorted((zone / table / "2026-11-03").glob("*.parquet"))
        assert [f.stem for f in files] == [f"{t:%H%M}" for t in pd.date_range(START, END, freq="5min", inclusive="left")]


def test_each_platform_incident_alerts_with_its_family_in_time(run):
    wh, _ = run
    alerts = wh.read_window("alerts", START, END)
    first = alerts.sort_values("partition_start").groupby("alert_id").agg(
        detector=("detector", "first"), family=("cause_family", "first"), opened=("opened_at", "min"),
        paged=("paged_at", "min"), severity=("severity", "last"))
    for detector, (family, severity) in EXPECTED.items():
        mine = first[first["detector"] == detector]
        assert len(mine), f"{detector} never opened"
        assert (mine["family"] == family).all(), detector
        assert mine["opened"].min() <= ONSET + GRACE, (detector, mine["opened"].min())
        if severity == "page":
            assert mine["paged"].min() <= ONSET + GRACE, (detector, mine["paged"].min())
        else:
            assert mine["paged"].isna().all(), detector
    # nothing pages before the incidents, and no other detector pages at all
    pages = first[first["paged"].notna()]
    assert (pages["paged"] > ONSET).all()
    assert set(pages["detector"]) <= set(EXPECTED)
    # the stored kube tables are the simulated ones, read back through the columnar store
    pods = wh.read_window("kube_pods", ONSET, ONSET + pd.Timedelta(minutes=5))
    assert (pods["reason"] == "CrashLoopBackOff").any() and (pods["reason"] == "Unschedulable").any()

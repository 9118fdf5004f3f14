"""CI precision guard: a quiet WEEK of the second cluster profile pages nothing.

A day (test_quiet_messy.py) holds no Monday after a weekend, no second maintenance window, no week of cron
retrains and no detector with a week of its own history behind it; a week holds all of them. The week runs
through the pipeline as `gpu-health evaluate` runs it (`gpu-health run --direct --scenario`, the bulk path, into a
fresh SQLite warehouse, the steps the alerts need), on the ``messy`` profile at a fifth of its size (26 nodes: same
regions, SKUs, node names, teams, queues, cron retrains and collector quirks), with

* two maintenance windows on Monday (morning and evening, in two regions);
* a benign rolling driver upgrade over a quarter of the nodes on Wednesday (four batches, each drained six
  minutes while its driver installs);
* the profile's nightly and hourly cron retrains, uninstrumented work, missing collector fields and silent nodes.

None of it is an incident: every page is a false page. The test checks first that the week really holds these
behaviours (so it cannot pass on a tidy or short week), then that no alert ever reached severity ``page``.
"""

import pandas as pd
import pytest

from gpu_health_tests.conftest import MESSY_FIFTH, benign_rollout, run_scenario
from gpu_health.storage.warehouse import Warehouse

WEEK_START = pd.Timestamp("2026-11-02T00:00:00Z")   # a Monday
ROLLOUT = pd.Timestamp("2026-11-04T09:00:00Z")
QUIET_WEEK = {
    "seed": 13,
    "start": WEEK_START.isoformat(),
    "end": (WEEK_START + pd.Timedelta(days=7)).isoformat(),
    "cluster": MESSY_FIFTH,
    "incidents": [
        {"kind": "maintenance", "start": "2026-11-02T07:00:00Z", "duration": "3h", "severity": "low",
         "scope": {"region": "us-central", "nodes": 2, "reason": "BIOS and BMC firmware"}},
        {"kind": "maintenance", "start": "2026-11-02T18:30:00Z", "duration": "2h", "severity": "low",
         "scope": {"region": "ap-southeast", "nodes": 3, "reason": "rack power work"}},
    ],
    "changes": [benign_rollout(ROLLOUT)],
}
# the steps the alerts read, as `gpu-health evaluate` computes them (the KPIs, drill-down and finance do not feed
# any detector)
TARGETS = ["alerts"]


@pytest.fixture(scope="module")
def quiet_week(tmp_path_factory):
    _, url = run_scenario(tmp_path_factory.mktemp("quiet_messy_week"), "quiet_week_messy.yaml", QUIET_WEEK, TARGETS)
    return Warehouse(url)


def test_the_quiet_week_holds_what_real_clusters_hold(quiet_week):
    """Not a tidy week: seven days of cron retrains, two maintenance windows, the rollout's drains, uninstrumented
    work and missing collector fields all reached the warehouse."""
    end = WEEK_START + pd.Timedelta(days=7)
    meta = quiet_week.read_window("job_metadata", WEEK_START, end)
    days = meta["submitted_at"].dt.floor("D")
    assert days.nunique() == 7
    # the nightly retrain at 02:00: every day, its team's batch submissions in that hour stand far above the day's
    retrain = meta[(meta["team"] == "ads-ctr") & (meta["workload_class"] == "batch")]
    hourly = retrain.groupby([retrain["submitted_at"].dt.floor("D"), retrain["submitted_at"].dt.hour]).size()
    for day, per_hour in hourly.groupby(level=0):
        per_hour = per_hour.droplevel(0)
        assert per_hour.get(2, 0) > 2 * per_hour.median(), day
    windows = quiet_week.read_window("maintenance_windows")
    assert len(windows) == 2
    changes = quiet_week.read_window("change_events", WEEK_START, end)
    assert (changes["kind"] == "driver_upgrade").sum() == 4
    nodes = quiet_week.read_window("node_telemetry", ROLLOUT, ROLLOUT + pd.Timedelta(hours=2))
    assert (nodes["health"] == "drained").any()
    assert {"550.90.07", "550.127.08"} <= set(nodes["driver_version"])
    gpu = quiet_week.read_window("gpu_telemetry", ROLLOUT, ROLLOUT + pd.Timedelta(hours=2))
    runtime = quiet_week.read_window("job_runtime_metrics", ROLLOUT, ROLLOUT + pd.Timedelta(hours=2))
    busy = gpu[gpu["job_id"].notna() & (gpu["gpu_util_pct"] > 50)]
    assert len(set(busy["job_id"]) - set(runtime["job_id"])) > 20    # busy GPUs whose jobs report no steps
    assert meta["framework_version"].str.startswith(("xgboost", "lightgbm")).any()
    for col in ("sm_active", "tensor_active", "ecc_sbe_delta", "throttle_reasons", "power_w"):
        assert gpu[col].isna().any() and gpu[col].notna().any(), col


def test_a_quiet_week_of_the_messy_profile_pages_nothing(quiet_week):
    alerts = quiet_week.read_window("alerts")
    assert len(alerts)  # the detectors ran the whole week (tickets on the drains, the windows, the gaps)
    pages = alerts[alerts["severity"] == "page"]
    if len(pages):
        first = pages.sort_values("partition_start").groupby("alert_id").first()
        lines = [f"{det}: {len(g)} alert(s), e.g. {g['paged_at'].iloc[0]} {g['summary'].iloc[0]!r}"
                 for det, g in first.groupby("detector")]
        pytest.fail(f"{first.shape[0]} false page(s) on a quiet week:\n" + "\n".join(lines))

"""CI precision guard: a quiet day of the second cluster profile pages nothing.

The day runs through the pipeline exactly as `gpu-health evaluate` runs it (`gpu-health run --direct
--scenario`: the bulk path, which writes what the Dagster path writes -- test_direct_path -- into a fresh SQLite
warehouse, every step). The cluster is the ``messy`` profile
at a fifth of its size -- same regions, SKUs, node names, teams, queues, cron retrains and collector quirks --
so the day holds what real clusters hold and our default simulator never did:

* work that reports no step metrics (notebooks, xgboost / LightGBM jobs, uninstrumented batch jobs, jobs in
  set-up) while genuinely computing, and frameworks that report steps without their components;
* collectors that do not export SM / tensor activity, ECC, throttle reasons or power on some nodes, old
  drivers, weak GPUs' benign single-bit ECC bursts, leftover framebuffer on idle GPUs, lost GPU-minutes and
  nodes silent for a few minutes while reporting ok;
* a benign rolling driver upgrade over a quarter of the nodes (four batches, each drained six minutes while its
  driver installs) and a maintenance window.

None of it is an incident: a page here is a false page. The test checks first that the day really holds these
behaviours (so it cannot pass on an empty or tidy day), then that no alert ever reached severity ``page``.
"""

import pandas as pd
import pytest

from gpu_health_tests.conftest import MESSY_FIFTH, benign_rollout, run_scenario
from gpu_health.storage.warehouse import Warehouse

DAY = pd.Timestamp("2026-11-04T00:00:00Z")   # a Wednesday: business hours in both regions, cron retrains
ROLLOUT = pd.Timestamp("2026-11-04T09:00:00Z")
QUIET_DAY = {
    "seed": 13,
    "start": DAY.isoformat(),
    "end": (DAY + pd.Timedelta(days=1)).isoformat(),
    "cluster": MESSY_FIFTH,
    "incidents": [
        {"kind": "maintenance", "start": "2026-11-04T03:00:00Z", "duration": "2h", "severity": "low",
         "scope": {"region": "ap-southeast", "nodes": 2, "reason": "BIOS and BMC firmware"}},
    ],
    "changes": [benign_rollout(ROLLOUT)],
}


@pytest.fixture(scope="module")
def quiet_day(tmp_path_factory):
    _, url = run_scenario(tmp_path_factory.mktemp("quiet_messy"), "quiet_day_messy.yaml", QUIET_DAY)
    return Warehouse(url)


def test_the_quiet_day_holds_what_real_clusters_hold(quiet_day):
    """Not a tidy day: uninstrumented work, missing fields, the rollout's drains all reached the warehouse."""
    gpu = quiet_day.read_window("gpu_telemetry", DAY + pd.Timedelta(hours=9), DAY + pd.Timedelta(hours=11))
    runtime = quiet_day.read_window("job_runtime_metrics", DAY + pd.Timedelta(hours=9), DAY + pd.Timedelta(hours=11))
    meta = quiet_day.read_window("job_metadata", DAY, DAY + pd.Timedelta(days=1))
    changes = quiet_day.read_window("change_events", DAY, DAY + pd.Timedelta(days=1))
    nodes = quiet_day.read_window("node_telemetry", ROLLOUT, ROLLOUT + pd.Timedelta(hours=2))
    busy = gpu[gpu["job_id"].notna() & (gpu["gpu_util_pct"] > 50)]
    silent_jobs = set(busy["job_id"]) - set(runtime["job_id"])
    assert len(silent_jobs) > 20                                      # busy GPUs whose jobs report no steps
    assert meta["framework_version"].str.startswith(("xgboost", "lightgbm")).any()
    for col in ("sm_active", "tensor_active", "ecc_sbe_delta", "throttle_reasons", "power_w"):
        assert gpu[col].isna().any() and gpu[col].notna().any(), col
    assert runtime.loc[runtime["steps"] > 0, "data_loader_time_s"].isna().any()
    assert (changes["kind"] == "driver_upgrade").sum() == 4
    assert (nodes["health"] == "drained").any()
    assert {"550.90.07", "535.54.03", "550.127.08"} <= set(nodes["driver_version"])


def test_a_quiet_day_of_the_messy_profile_pages_nothing(quiet_day):
    alerts = quiet_day.read_window("alerts")
    pages = alerts[alerts["severity"] == "page"]
    if len(pages):
        first = pages.sort_values("partition_start").groupby("alert_id").first()
        lines = [f"{det}: {len(g)} alert(s), e.g. {g['summary'].iloc[0]!r}" for det, g in first.groupby("detector")]
        pytest.fail(f"{first.shape[0]} false page(s) on a quiet day:\n" + "\n".join(lines))

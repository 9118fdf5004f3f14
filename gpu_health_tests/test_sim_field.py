"""The ``field`` profile: a third cluster, written from the public traces' scheduler and collector behaviour.

Each test checks one behaviour the profile's comments ground in a trace (evening pile-ups, jobs that fail in
their first minutes, scrape-instant timestamps, renamed hosts), against the profile's own knobs, and that the
landing path's contracts take what the profile's collectors deliver.
"""

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.validate import validate_frame
from gpu_health.sim.cluster import PROFILES, ClusterSpec
from gpu_health.sim.collector import renames
from gpu_health.sim.jobs import EXIT_STATES, POOLS, build_plan, demand, to_s
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window

DAY = {"start": "2026-11-04T00:00:00Z", "end": "2026-11-05T00:00:00Z"}   # a Wednesday
FIELD = PROFILES["field"]


def field_scenario(seed=5, **extra):
    return load_scenario({"seed": seed, **DAY, "cluster": "field", **extra})


@pytest.fixture(scope="module")
def day_plan():
    scen = field_scenario()
    return scen, build_plan(scen, to_s(scen.start), to_s(scen.end))


def test_field_is_a_third_cluster():
    c = field_scenario().cluster
    others = [ClusterSpec.from_config(p) for p in ("default", "messy")]
    assert set(FIELD.regions).isdisjoint({r for o in others for r in o.regions})
    assert sorted({t.gpus for t in FIELD.node_types}) == [4, 8]       # 4- and 8-GPU nodes
    assert set(c.nodes["gpus"]) == {4, 8} and len(c.gpus) == FIELD.total_gpus
    names = {t.name for t in FIELD.teams}
    assert names.isdisjoint({t.name for o in others for t in o.teams})
    assert c.nodes["node_id"].is_unique


def test_jobs_queue_in_the_profiles_partitions(day_plan):
    _, plan = day_plan
    queues = set(plan["queue"])
    assert queues == {f"{r}/{q}" for r in FIELD.regions for _, q in FIELD.queue_names}


def test_every_evening_the_batch_queue_stays_saturated_for_hours(day_plan):
    scen, plan = day_plan
    spec = scen.cluster.spec
    for region, first in spec.evening_queue_utc:
        hours = (np.arange(24) - first) % 24 < spec.evening_hours
        t = to_s(scen.start) + np.arange(24) * 3600 + 1800
        d = demand("batch", np.full(24, region), t, spec)
        assert (d[hours] > POOLS["batch"].saturates_above).all() and (d[~hours] <= POOLS["batch"].saturates_above).all()
        batch = plan[(plan["pool"] == "batch") & (plan["region"] == region) & (plan["attempt"] == 0)]
        into = ((batch["start_s"] % 86_400) // 3600 - first) % 24
        wait = batch["start_s"] - batch["submit_s"]
        evening, rest = wait[into < spec.evening_hours], wait[into >= spec.evening_hours]
        # jobs queue behind busy lanes through the evening, while the rest of the day dispatches at once
        assert evening.quantile(0.75) > 10 * max(rest.quantile(0.75), 1), (evening.describe(), rest.describe())


def test_a_share_of_failed_jobs_dies_in_its_first_minutes(day_plan):
    scen, plan = day_plan
    spec = scen.cluster.spec
    batch = plan[(plan["pool"] == "batch") & (plan["attempt"] == 0)]
    share = batch["exit_state"].value_counts(normalize=True)
    weights = dict(spec.exit_weights)["batch"]
    assert abs(share["failed"] - weights[EXIT_STATES.index("failed")]) < 0.03
    failed = batch[batch["exit_state"] == "failed"]
    early = (failed["end_s"] - failed["start_s"]) <= spec.early_fail_within_s
    assert abs(early.mean() - spec.early_fail_share) < 0.1, early.mean()
    # and they carry a reason, as any failed job does
    assert failed["reason"].notna().all()


def test_collectors_stamp_the_scrape_instant_and_the_contracts_take_it():
    scen = field_scenario()
    t = pd.Timestamp("2026-11-04T10:00:00Z")
    w = Window(scen, t, t + pd.Timedelta(minutes=5))
    for table in ("gpu_telemetry", "node_telemetry", "network_telemetry", "job_runtime_metrics"):
        got, aligned = w.table(table), w.aligned(table)
        assert len(got) == len(aligned) and len(got)
        assert (got["ts"].dt.floor("min") == aligned["ts"]).all()       # each row stays in its minute
        assert (got["ts"] != aligned["ts"]).mean() > 0.9                 # but is stamped when it was scraped
        result = validate_frame(got, table, start=t, end=t + pd.Timedelta(minutes=5))
        assert result.rejects.empty and len(result.valid) == len(got)
        assert (result.valid["ts"].dt.second == 0).all()
    g = w.table("gpu_telemetry")
    # a node is scraped at its own second of every minute (within the jitter)
    spread = g.assign(s=g["ts"].dt.second).groupby("node_id", observed=True)["s"].agg(lambda s: s.max() - s.min())
    assert (spread <= 1).all()
    assert g.assign(s=g["ts"].dt.second).groupby("node_id", observed=True)["s"].first().nunique() > 20


def test_the_other_profiles_keep_minute_starts():
    for profile in ("default", "messy"):
        scen = load_scenario({"seed": 5, **DAY, "cluster": {"profile": profile, "gpus": 200}})
        t = pd.Timestamp("2026-11-04T10:00:00Z")
        g = Window(scen, t, t + pd.Timedelta(minutes=2)).table("gpu_telemetry")
        assert (g["ts"].dt.second == 0).all() and renames(scen).empty


def test_a_renamed_node_reports_under_its_new_name_from_part_way_on():
    scen = field_scenario(incidents=[{"kind": "thermal_throttle", "start": "2026-11-04T11:00:00Z", "duration": "1h",
                                      "scope": {"region": "us-west", "nodes": 2}}])
    r = renames(scen)
    assert len(r) == FIELD.renamed_nodes
    assert set(r["node_id"]).isdisjoint(scen.incidents[0].node_ids)   # the ground truth's nodes keep their names
    assert not set(r["new_name"]) & set(scen.cluster.nodes["node_id"])
    old, new, from_s = r.iloc[0]
    at = pd.Timestamp(scen.start) + pd.Timedelta(seconds=from_s - to_s(scen.start))
    assert scen.start < at < scen.end
    w = Window(scen, at - pd.Timedelta(minutes=10), at + pd.Timedelta(minutes=10))
    g = w.table("gpu_telemetry")
    before, after = g[g["ts"] < at], g[g["ts"] >= at]
    assert (before["node_id"] == old).any() and not (before["node_id"] == new).any()
    assert (after["node_id"] == new).any() and not (after["node_id"] == old).any()
    # the same GPUs, under the new host name
    assert set(before.loc[before["node_id"] == old, "gpu_uuid"]) == set(after.loc[after["node_id"] == new, "gpu_uuid"])
    n = w.table("node_telemetry")
    assert (n.loc[n["ts"] >= at, "node_id"] == new).any() and not (n.loc[n["ts"] >= at, "node_id"] == old).any()
    ev = w.table("scheduler_events")
    lists = ev.loc[ev["node_ids"].notna() & (ev["ts"] >= at), "node_ids"].astype(str)
    assert not lists.str.split(",").map(lambda ns: old in ns).any()


def test_the_field_scenarios_load_at_the_profiles_full_size():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "scenarios"
    paths = sorted(root.glob("smoke_field/*.yaml")) + sorted(root.glob("suite/*_field.yaml")) + \
        sorted(root.glob("serving/*_field.yaml"))
    assert len(paths) >= 11
    for path in paths:
        scen = load_scenario(path)
        assert scen.cluster.spec.regions == FIELD.regions and len(scen.cluster.gpus) == FIELD.total_gpus, path
        assert renames(scen)["node_id"].isin(scen.cluster.nodes["node_id"]).all()
    rollout = load_scenario(root / "smoke_field" / "15_driver_rollout.yaml")
    waves, maint = rollout.incidents[0].waves(), rollout.incidents[1]
    # the maintenance window opens while a wave drains
    drain = pd.Timedelta(seconds=rollout.incidents[0].rollout.drain_s)
    assert any(ts < maint.start < ts + drain for ts, _ in waves)


def test_the_field_knobs_are_yaml_fields_on_any_profile():
    spec = ClusterSpec.from_config({"profile": "default", "gpus": 200, "queue_names": {"batch": "gpumedium"},
                                    "exit_weights": {"batch": [0.5, 0.3, 0.1, 0.05, 0.05]},
                                    "evening_queue_utc": {"us-east": 22}, "evening_demand": 3.0,
                                    "scrape_offset_s": 30, "renamed_nodes": 1, "early_fail_share": 0.5})
    assert dict(spec.queue_names) == {"batch": "gpumedium"} and dict(spec.exit_weights)["batch"][1] == 0.3
    assert dict(spec.evening_queue_utc) == {"us-east": 22}
    scen = load_scenario({"seed": 5, **DAY, "cluster": {"profile": "default", "gpus": 200, "renamed_nodes": 1,
                                                        "queue_names": {"batch": "gpumedium"}}})
    assert len(renames(scen)) == 1
    plan = build_plan(scen, to_s(scen.start) + 36_000, to_s(scen.start) + 39_600)
    assert set(plan.loc[plan["pool"] == "batch", "queue"]) == {"us-east/gpumedium", "eu-west/gpumedium"}

"""The cluster simulator (gpu_health.sim): determinism, partition independence,
cluster and workload facts, and the signature each incident kind leaves in the
sources (never a flag column).

Incident tests share one 2-hour window per kind (09:30-11:30 UTC on Tuesday
2026-11-03, the incident 10:00-11:00), built once per module.
"""

import json

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.models import FIVE_MINUTE_SOURCES, PARTITION_COLUMN, columns
from gpu_health.contracts.validate import validate_frame
from gpu_health.sim.cluster import H100, V100, ClusterSpec
from gpu_health.sim.labels import labels_frame
from gpu_health.sim.scenario import KINDS, default_scenario, load_scenario
from gpu_health.sim.jobs import POOLS, from_s, to_s
from gpu_health.sim.telemetry import Window, cost_capacity, maintenance_windows

WEEK = {"start": "2026-11-02T00:00:00Z", "end": "2026-11-09T00:00:00Z"}  # Monday to Monday
SEED = 7
S = pd.Timestamp("2026-11-03T10:00:00Z")  # incident start (a Tuesday)
E = S + pd.Timedelta(hours=1)             # incident end
W0, W1 = S - pd.Timedelta(minutes=30), E + pd.Timedelta(minutes=30)
MIN = pd.Timedelta(minutes=1)


def scenario(*incidents, seed=SEED, **extra):
    return load_scenario({"seed": seed, **WEEK, "incidents": list(incidents), **extra})


def incident(kind, scope, **extra):
    return {"kind": kind, "start": S.isoformat(), "end": E.isoformat(), "scope": scope, **extra}


def during(df, col="ts"):
    return (df[col] >= S) & (df[col] < E)


def before(df, col="ts"):
    return df[col] < S


def cut(df: pd.DataFrame, table: str, start, end) -> pd.DataFrame:
    col = PARTITION_COLUMN[table]
    return df[(df[col] >= start) & (df[col] < end)].reset_index(drop=True)


def queue_waits(w: Window) -> pd.DataFrame:
    """started.ts - submitted.ts per job with both events in the window, with its placement."""
    ev = w.table("scheduler_events")
    st = ev[ev["event"] == "started"].set_index("job_id")
    sb = ev[ev["event"] == "submitted"].set_index("job_id")["ts"]
    out = st[["ts", "node_ids", "gpus"]].join(sb.rename("submitted"), how="inner")
    out["wait_s"] = (out["ts"] - out["submitted"]).dt.total_seconds()
    out["region"] = np.where(out["node_ids"].str.startswith("use-"), "us-east", "eu-west")
    md = w.table("job_metadata").set_index("job_id")["workload_class"]
    out["workload_class"] = md.reindex(out.index)
    return out


class Runs:
    """Memoized incident windows: one scenario + 2-hour window per (kind, scope)."""

    SPECS = {
        "gpu_ecc_fault": ({"region": "us-east", "nodes": 2}, {}),
        "gpu_fell_off_bus": ({"region": "us-east", "nodes": 2}, {}),
        "thermal_throttle": ({"region": "us-east", "nodes": 2}, {"magnitude": 0.38}),
        "driver_regression": ({"region": "us-east", "nodes": 8}, {}),
        "framework_regression": ({"team": "fraud-offline"}, {}),
        "priority_change": ({"region": "us-east"}, {}),
        "fragmentation": ({"region": "us-east"}, {}),
        "io_bottleneck": ({"region": "us-east", "nodes": 3}, {}),
        "network_degradation": ({"region": "us-east", "nodes": 2}, {}),
        "dummy_workload": ({"region": "us-east", "nodes": 4, "team": "credit-risk"}, {}),
        "training_stall": ({"region": "eu-west", "nodes": 6}, {}),
        "maintenance": ({"region": "us-east", "nodes": 2}, {}),
        "collector_outage": ({"region": "eu-west"}, {}),
    }

    def __init__(self):
        self._cache = {}

    def __call__(self, kind):
        if kind not in self._cache:
            if kind is None:
                scen = scenario()
                self._cache[kind] = (scen, None, Window(scen, W0, W1))
            else:
                scope, extra = self.SPECS[kind]
                scen = scenario(incident(kind, scope, **extra))
                self._cache[kind] = (scen, scen.incidents[0], Window(scen, W0, W1))
        return self._cache[kind]


@pytest.fixture(scope="module")
def runs():
    return Runs()


def test_every_kind_has_an_incident_test():
    assert set(Runs.SPECS) == set(KINDS)


# --- determinism and partition independence ------------------------------------------------

PI_START = pd.Timestamp("2026-11-03T14:00:00Z")


def pi_scenario():
    """Speed, software and scheduling incidents that start and end inside one hour."""
    return scenario(
        {"kind": "thermal_throttle", "start": "2026-11-03T14:07:00Z", "end": "2026-11-03T14:22:00Z",
         "scope": {"region": "us-east", "nodes": 2}},
        {"kind": "driver_regression", "start": "2026-11-03T14:12:00Z", "duration": "28m",
         "scope": {"region": "eu-west", "nodes": 6}},
        {"kind": "training_stall", "start": "2026-11-03T14:31:00Z", "duration": "20m",
         "scope": {"region": "eu-west", "nodes": 6}},
        {"kind": "dummy_workload", "start": "2026-11-03T14:15:00Z", "duration": "25m",
         "scope": {"region": "us-east", "nodes": 4}},
    )


@pytest.fixture(scope="module")
def hour():
    """The whole hour 14:00-15:00 generated in one go."""
    return Window(pi_scenario(), PI_START, PI_START + pd.Timedelta(hours=1)).tables()


# 5-minute partitions: the first, during the incidents, right after the thermal one ended, the last
PI_SLOTS = [0, 10, 25, 55]


@pytest.fixture(scope="module")
def alone():
    """Each 5-minute slot generated alone, each from a freshly loaded scenario."""
    out = {}
    for m in PI_SLOTS:
        t = PI_START + pd.Timedelta(minutes=m)
        out[m] = Window(pi_scenario(), t, t + pd.Timedelta(minutes=5)).tables()
    return out


@pytest.mark.parametrize("table", FIVE_MINUTE_SOURCES)
def test_same_seed_and_window_give_identical_frames(alone, table):
    t = PI_START + pd.Timedelta(minutes=10)
    again = Window(pi_scenario(), t, t + pd.Timedelta(minutes=5)).table(table)
    assert len(again) > 0
    pd.testing.assert_frame_equal(again, alone[10][table])


def test_another_seed_gives_other_data(alone):
    t = PI_START + pd.Timedelta(minutes=10)
    other = Window(scenario(*[_spec(i) for i in pi_scenario().incidents], seed=SEED + 1), t, t + pd.Timedelta(minutes=5)).tables()
    mine = alone[10]
    # same cluster, same grain ...
    assert len(other["gpu_telemetry"]) == len(mine["gpu_telemetry"])
    assert other["gpu_telemetry"]["gpu_uuid"].tolist() == mine["gpu_telemetry"]["gpu_uuid"].tolist()
    # ... other values and other jobs
    assert (other["gpu_telemetry"]["power_w"] != mine["gpu_telemetry"]["power_w"]).mean() > 0.5
    assert set(other["job_metadata"]["job_id"]) != set(mine["job_metadata"]["job_id"])
    assert not other["scheduler_events"]["ts"].equals(mine["scheduler_events"]["ts"])


def _spec(inc):
    return {"kind": inc.kind, "start": inc.start.isoformat(), "end": inc.end.isoformat(), "scope": inc.scope}


@pytest.mark.parametrize("minute", PI_SLOTS)
@pytest.mark.parametrize("table", FIVE_MINUTE_SOURCES)
def test_partition_alone_equals_the_same_minutes_of_an_hour(hour, alone, minute, table):
    t = PI_START + pd.Timedelta(minutes=minute)
    pd.testing.assert_frame_equal(alone[minute][table], cut(hour[table], table, t, t + pd.Timedelta(minutes=5)))


def test_partition_slots_are_not_trivially_empty(alone):
    for table in FIVE_MINUTE_SOURCES:
        assert sum(len(alone[m][table]) for m in PI_SLOTS) > 0, table
    assert len(alone[10]["change_events"]) == 1  # the driver deploy at 14:12


def test_generating_other_windows_first_changes_nothing(alone):
    scen = pi_scenario()
    t = PI_START + pd.Timedelta(minutes=25)
    first_labels = labels_frame(scen)
    # other windows of the same scenario object: before, across the incidents, a day later
    Window(scen, PI_START - pd.Timedelta(hours=3), PI_START - pd.Timedelta(hours=2)).tables()
    Window(scen, PI_START + pd.Timedelta(minutes=5), PI_START + pd.Timedelta(minutes=20)).tables()
    Window(scen, PI_START + pd.Timedelta(days=1), PI_START + pd.Timedelta(days=1, minutes=5)).tables()
    again = Window(scen, t, t + pd.Timedelta(minutes=5)).tables()
    for table in FIVE_MINUTE_SOURCES:
        pd.testing.assert_frame_equal(again[table], alone[25][table])
    pd.testing.assert_frame_equal(labels_frame(scen), first_labels)


# --- cluster and workload facts ------------------------------------------------------------

def test_default_cluster_size():
    c = default_scenario().cluster
    assert len(c.gpus) == 1200 == c.spec.total_gpus
    assert len(c.nodes) == 80
    assert sorted(c.nodes["region"].unique()) == ["eu-west", "us-east"]
    assert sorted(c.nodes["sku"].unique()) == sorted([H100.sku, V100.sku])
    per_node = c.gpus.groupby("node_id").size()
    skus = c.nodes.set_index("node_id")["sku"]
    assert set(per_node[skus[skus == H100.sku].index]) == {8}
    assert set(per_node[skus[skus == V100.sku].index]) == {16}
    assert c.gpus["gpu_uuid"].is_unique and c.nodes["node_id"].is_unique
    assert c.inventory()["capacity_gpus"].sum() == 1200


def test_a_partition_reports_every_gpu_node_and_link(alone):
    p = alone[0]
    assert p["gpu_telemetry"]["gpu_uuid"].nunique() == 1200
    assert p["gpu_telemetry"].groupby("ts").size().eq(1200).all()
    assert p["node_telemetry"]["node_id"].nunique() == 80
    assert p["gpu_telemetry"]["region"].nunique() == 2 and p["gpu_telemetry"]["sku"].nunique() == 2
    assert p["network_telemetry"].groupby("ts").size().eq(80 * 8).all()


def test_cluster_scales_to_a_hundred_thousand_gpus():
    big = load_scenario({"seed": 1, **WEEK, "cluster": {"gpus": 100_000}}).cluster
    assert abs(len(big.gpus) - 100_000) / 100_000 < 0.01
    assert big.spec.total_gpus == len(big.gpus)
    assert len(big.nodes) > 6000 and sorted(big.nodes["region"].unique()) == ["eu-west", "us-east"]
    assert big.gpus["gpu_uuid"].is_unique
    # the demand scales with it
    assert big.spec.jobs_per_day_target == pytest.approx(35_000 * len(big.gpus) / 1200, rel=0.01)


def test_cost_capacity_matches_the_inventory():
    scen = default_scenario()
    cc = cost_capacity(scen, pd.Timestamp("2026-11-03T00:00:00Z"))
    inv = scen.cluster.inventory().set_index(["region", "sku"])["capacity_gpus"]
    assert cc.set_index(["region", "sku"])["capacity_gpus"].sort_index().tolist() == inv.sort_index().tolist()
    assert (cc["reserved_gpus"] <= cc["capacity_gpus"]).all()
    assert validate_frame(cc, "cost_capacity").rejects.empty


@pytest.fixture(scope="module")
def tuesday():
    """One whole weekday (the plan and the scheduler's tables only: no per-minute grid)."""
    w = Window(default_scenario(), pd.Timestamp("2026-11-03T00:00:00Z"), pd.Timestamp("2026-11-04T00:00:00Z"))
    return w.table("job_metadata"), w.table("scheduler_events")


def test_about_35k_jobs_a_weekday(tuesday):
    md, _ = tuesday
    assert 35_000 * 0.85 <= len(md) <= 35_000 * 1.15
    assert md["job_id"].is_unique
    assert set(md["workload_class"]) == {"interactive", "batch", "distributed"}


def test_failure_rates_are_realistic(tuesday):
    md, ev = tuesday
    ended = ev[ev["event"] == "ended"]
    assert ended["exit_state"].notna().all()
    share = ended["exit_state"].value_counts(normalize=True)
    assert 0.02 <= share["failed"] <= 0.12
    assert share["completed"] >= 0.7
    assert share.get("node_fail", 0) <= 0.02
    assert 0 < share["timeout"] <= 0.05
    pools = ended.join(md.set_index("job_id")["workload_class"], on="job_id")
    failed = pools.groupby("workload_class")["exit_state"].apply(lambda s: (s == "failed").mean())
    assert failed["interactive"] < failed["batch"]  # notebooks mostly get cancelled, not crash
    assert (ended.loc[ended["exit_state"] == "failed", "reason"].notna()).all()


def _wave_hours(day: str):
    w = Window(default_scenario(), pd.Timestamp(f"{day}T01:00:00Z"), pd.Timestamp(f"{day}T09:00:00Z"))
    md = w.table("job_metadata")
    waits = queue_waits(w)
    return (md["workload_class"] == "batch").sum(), waits.loc[waits["workload_class"] == "batch", "wait_s"].mean()


def test_monday_and_thursday_retrain_waves():
    tue_jobs, tue_wait = _wave_hours("2026-11-03")
    for day in ("2026-11-02", "2026-11-05"):  # Monday, Thursday
        jobs, wait = _wave_hours(day)
        assert jobs > 1.04 * tue_jobs, day
        assert wait > 2.5 * tue_wait, day


# --- incidents: each leaves its signature in the sources ----------------------------------------

def test_gpu_ecc_fault(runs):
    scen, inc, w = runs("gpu_ecc_fault")
    g, n, ev = w.table("gpu_telemetry"), w.table("node_telemetry"), w.table("scheduler_events")
    assert len(inc.gpu_uuids) == 2
    # Xid 48 + a double-bit error on the labelled GPU at onset, nowhere else
    xid48 = g[g["xid"] == 48]
    assert sorted(xid48["gpu_uuid"]) == sorted(inc.gpu_uuids)
    assert (xid48["ts"] == S).all() and (xid48["ecc_dbe_delta"] > 0).all()
    assert g.loc[~g["gpu_uuid"].isin(inc.gpu_uuids), "ecc_dbe_delta"].eq(0).all()
    # the job holding the GPU ends failed with the Xid, within two minutes
    holders = g[g["gpu_uuid"].isin(inc.gpu_uuids) & (g["ts"] == S)]["job_id"].dropna()
    assert len(holders) >= 1
    ended = ev[(ev["event"] == "ended") & ev["job_id"].isin(holders)]
    assert sorted(ended["job_id"]) == sorted(holders)
    assert (ended["exit_state"] == "failed").all() and ended["reason"].str.contains("Xid 48").all()
    assert ((ended["ts"] >= S) & (ended["ts"] <= S + 2 * MIN)).all()
    # the node is drained after the fault, ok before; it takes no new jobs meanwhile
    on = n[n["node_id"].isin(inc.node_ids)]
    assert (on.loc[before(on), "health"] == "ok").all()
    assert (on.loc[(on["ts"] > S) & (on["ts"] < E), "health"] == "drained").all()
    assert (n.loc[~n["node_id"].isin(inc.node_ids), "health"] == "ok").all()
    started = ev[(ev["event"] == "started") & during(ev)]
    assert not started["node_ids"].str.split(",").map(lambda ns: bool(set(ns) & set(inc.node_ids))).any()


def test_gpu_fell_off_bus(runs):
    scen, inc, w = runs("gpu_fell_off_bus")
    g, ev = w.table("gpu_telemetry"), w.table("scheduler_events")
    for uuid, node in zip(inc.gpu_uuids, inc.node_ids):
        mine = g[g["gpu_uuid"] == uuid]
        assert mine.loc[mine["ts"] == S, "xid"].tolist() == [79]
        assert not ((mine["ts"] > S) & (mine["ts"] < E)).any(), "a GPU off the bus has no rows"
        assert before(mine).sum() == 30 and (mine["ts"] >= E).sum() == 30
        others = g[(g["node_id"] == node) & (g["gpu_uuid"] != uuid) & (g["ts"] > S) & (g["ts"] < E)]
        n_gpus = (scen.cluster.gpus["node_id"] == node).sum()
        assert len(others) == (n_gpus - 1) * 59  # the rest of the node keeps reporting
    assert set(g.loc[g["xid"] == 79, "gpu_uuid"]) == set(inc.gpu_uuids)
    holders = g[g["gpu_uuid"].isin(inc.gpu_uuids) & (g["ts"] == S)]["job_id"].dropna()
    ended = ev[(ev["event"] == "ended") & ev["job_id"].isin(holders)]
    assert len(ended) == len(holders) >= 1
    assert (ended["exit_state"] == "failed").all() and ended["reason"].str.contains("Xid 79").all()


def test_thermal_throttle(runs):
    scen, inc, w = runs("thermal_throttle")
    g, n, m = w.table("gpu_telemetry"), w.table("node_telemetry"), w.table("job_runtime_metrics")
    on = g["node_id"].isin(inc.node_ids)
    hot = g[on & during(g)]
    assert set(hot["sku"]) == {H100.sku, V100.sku}  # the scope drew one node of each
    assert (hot["temp_c"] > 83).all()
    assert ((hot["throttle_reasons"] & 0x60) == 0x60).all()
    busy = hot[hot["job_id"].notna()]
    h100 = busy.loc[busy["sku"] == H100.sku, "sm_clock_mhz"]
    v100 = busy.loc[busy["sku"] == V100.sku, "sm_clock_mhz"]
    assert len(h100) and len(v100)
    assert h100.between(1150, 1300).all()  # ~1200 MHz, from 1980
    assert v100.max() < h100.min()
    cool = g[~(on & during(g))]
    assert (cool["temp_c"] <= 83).all() and ((cool["throttle_reasons"] & 0x60) == 0).all()
    assert cool.loc[cool["job_id"].notna() & (cool["gpu_util_pct"] > 1) & (cool["sku"] == H100.sku), "sm_clock_mhz"].min() > 1900
    nn = n[n["node_id"].isin(inc.node_ids)]
    assert (nn.loc[during(nn), "health"] == "degraded").all() and (nn.loc[before(nn), "health"] == "ok").all()
    # jobs on the hot nodes before and during: step time up by ~the magnitude
    jobs = set(busy["job_id"]) & set(g.loc[on & before(g), "job_id"].dropna())
    mm = m[m["job_id"].isin(jobs) & m["step_time_s"].notna()]
    ratio = mm[during(mm)].groupby("job_id")["step_time_s"].median() / mm[before(mm)].groupby("job_id")["step_time_s"].median()
    ratio = ratio.dropna()
    assert len(ratio) >= 3
    assert ratio.median() == pytest.approx(1 + inc.magnitude, abs=0.05)


def test_driver_regression(runs):
    scen, inc, w = runs("driver_regression")
    n, ev, g, ch = (w.table(t) for t in ("node_telemetry", "scheduler_events", "gpu_telemetry", "change_events"))
    cohort = set(inc.node_ids)
    deploy = ch[ch["ts"] == S]
    assert deploy[["kind", "from_version", "to_version"]].values.tolist() == [["driver_upgrade", "550.127.08", inc.to_version]]
    assert set(deploy["scope"].iloc[0].split(",")) == cohort
    on = n["node_id"].isin(cohort)
    assert (n.loc[on & during(n), "driver_version"] == inc.to_version).all()
    assert (n.loc[on & ~during(n), "driver_version"] == "550.127.08").all()
    assert (n.loc[~on, "driver_version"] == "550.127.08").all()
    ended = ev[(ev["event"] == "ended") & during(ev)].copy()
    ended["cohort"] = ended["node_ids"].str.split(",").map(lambda ns: bool(set(ns) & cohort))
    fail = ended.groupby("cohort")["exit_state"].apply(lambda s: (s == "failed").mean())
    assert ended["cohort"].sum() >= 30
    assert fail[True] > 0.3 and fail[True] > 3 * fail[False]
    reasons = ended.loc[ended["cohort"] & (ended["exit_state"] == "failed"), "reason"]
    assert reasons.str.contains("Xid 13|Xid 31|Xid 119").mean() > 0.5
    xids = set(g.loc[g["node_id"].isin(cohort) & during(g), "xid"]) - {0}
    assert {13, 31, 119} <= xids
    # before the deploy the cohort fails like everyone else
    pre = ev[(ev["event"] == "ended") & before(ev)]
    pre_cohort = pre["node_ids"].str.split(",").map(lambda ns: bool(set(ns) & cohort))
    assert (pre.loc[pre_cohort, "exit_state"] == "failed").mean() < 0.2


def test_framework_regression(runs):
    scen, inc, w = runs("framework_regression")
    md, m, ev, g, ch = (w.table(t) for t in ("job_metadata", "job_runtime_metrics", "scheduler_events", "gpu_telemetry", "change_events"))
    assert ch.loc[ch["ts"] == S, ["kind", "to_version"]].values.tolist() == [["framework_release", inc.to_version]]
    started = ev[ev["event"] == "started"].set_index("job_id")["ts"]
    md = md.join(started.rename("started"), on="job_id")
    new = md["framework_version"] == inc.to_version
    team_training = (md["team"] == "fraud-offline") & (md["workload_class"] != "interactive")
    # the team's training jobs placed after the release run it; nobody else's, and none before
    assert new[team_training & during(md, "started")].all()
    assert not new[~team_training].any()
    assert not new[md["started"] < S].any()
    # their step time is (1 + m) x the baseline of their signature (model, sku, GPUs)
    sku = g.dropna(subset=["job_id"]).groupby("job_id")["sku"].first()
    steps = m[m["step_time_s"].notna()].groupby("job_id")["step_time_s"].median()
    jobs = md.set_index("job_id").join(sku.rename("sku")).join(steps.rename("step")).dropna(subset=["sku", "step"])
    jobs["new"] = jobs["framework_version"] == inc.to_version
    sig = jobs.groupby(["model_type", "sku", "requested_gpus", "new"])["step"].agg(["median", "size"]).unstack("new")
    sig = sig[(sig[("size", True)] >= 3) & (sig[("size", False)] >= 3)]
    ratio = sig[("median", True)] / sig[("median", False)]
    assert len(ratio) >= 3
    assert ratio.median() == pytest.approx(1 + inc.magnitude, abs=0.05)
    assert ratio.between(1 + inc.magnitude - 0.12, 1 + inc.magnitude + 0.12).all()


def _allocated_share(w: Window, node_ids) -> float:
    g = w.table("gpu_telemetry")
    sel = g[g["node_id"].isin(node_ids) & during(g)]
    return sel["job_id"].notna().mean()


def test_priority_change(runs):
    scen, inc, w = runs("priority_change")
    _, _, base = runs(None)  # same seed, no incident
    ch = w.table("change_events")
    assert ch[["ts", "kind", "scope"]].values.tolist() == [[S, "scheduler_config", "us-east"], [E, "scheduler_config", "us-east"]]
    assert ch[["from_version", "to_version"]].isna().all().all()
    scope = set(inc.node_ids)
    assert scope == set(scen.cluster.nodes.query("region == 'us-east' and pool == 'batch'")["node_id"])
    assert _allocated_share(w, scope) < _allocated_share(base, scope) - 0.1
    qw, qb = queue_waits(w), queue_waits(base)
    sel = lambda q: q[(q["region"] == "us-east") & (q["workload_class"] == "batch") & during(q)]["wait_s"]  # noqa: E731
    assert sel(qw).mean() > 1.5 * sel(qb).mean()
    # nothing changes in the other region
    gw, gb = w.table("gpu_telemetry"), base.table("gpu_telemetry")
    pd.testing.assert_frame_equal(gw[gw["region"] == "eu-west"], gb[gb["region"] == "eu-west"])


def _pieces(w: Window, nodes: set) -> pd.DataFrame:
    """Per (node, minute) of ``nodes``: free GPUs (no job) and the node's GPUs, from the GPU telemetry."""
    g = w.table("gpu_telemetry")
    g = g[g["node_id"].isin(nodes)]
    return g.assign(free=g["job_id"].isna()).groupby(["node_id", "ts"]).agg(free=("free", "sum"), size=("free", "size"))


def test_fragmentation(runs):
    """A scheduler spreading single-GPU jobs onto the free GPUs of multi-GPU slots: free GPUs in pieces (no node
    whole) while multi-GPU requests that fit no node's free GPUs -- but the free GPUs summed -- wait."""
    scen, inc, w = runs("fragmentation")
    _, _, base = runs(None)
    assert w.table("change_events").empty  # emergent: no config change to blame
    lanes = scen.cluster.lanes
    multi = lanes[(lanes["region"] == "us-east") & (lanes["gpus"] >= 2) & lanes["pool"].isin(["batch", "distributed"])]
    multi_nodes = {nid for ns in multi["node_ids"] for nid in ns}
    # single-GPU jobs run on the GPUs of multi-GPU slots (never so without the incident), only in its scope
    g, md = w.table("gpu_telemetry"), w.table("job_metadata")
    ev = w.table("scheduler_events")
    size = pd.concat([md.set_index("job_id")["requested_gpus"], ev.drop_duplicates("job_id").set_index("job_id")["gpus"]])
    size = size[~size.index.duplicated()]
    lane_of = scen.cluster.gpus.set_index("gpu_uuid")["lane"]
    on_multi = g["gpu_uuid"].map(lane_of).isin(multi["lane"]) & g["job_id"].notna()
    small = on_multi & (g["job_id"].map(size) == 1)
    assert small[during(g)].sum() > 0
    assert not small[~during(g) & (g["ts"] < S + 5 * MIN)].any()
    bg = base.table("gpu_telemetry")
    assert not (bg["gpu_uuid"].map(lane_of).isin(multi["lane"]) & bg["job_id"].map(size).eq(1)).any()
    # the nodes they landed on keep free GPUs in pieces: busy and free GPUs on one node, no node whole
    spread = set(g.loc[small, "node_id"])
    p = _pieces(w, spread)
    p = p[(p.index.get_level_values("ts") >= S + 15 * MIN) & (p.index.get_level_values("ts") < E)]
    assert (p["free"] < p["size"]).all()
    assert ((p["free"] > 0) & (p["free"] < p["size"])).mean() > 0.5
    # ... in pieces smaller than the smallest multi-GPU request of the node's pool (the spread jobs are its queue's):
    # while spread jobs run on a node, the GPUs of its hit slots left free for 3 minutes in a row (past a dispatch
    # cycle's refill) do not add up to a request that fits (a spread scheduler fills the node with the most free
    # GPUs first)
    on_m = g["gpu_uuid"].map(lane_of).isin(multi["lane"]) & g["node_id"].isin(spread) & during(g)
    hit = g[on_m].assign(free=g["job_id"].isna(), small=small[on_m]).sort_values(["gpu_uuid", "ts"])
    idle_run = hit.groupby("gpu_uuid")["free"].transform(lambda x: x.astype(int).groupby((~x).cumsum()).cumsum())
    cells = hit.assign(free=idle_run >= 3).groupby(["node_id", "ts"]).agg(free=("free", "sum"), small=("small", "any"))
    cells = cells[cells["small"]]
    pool_of = multi.explode("node_ids").drop_duplicates("node_ids").set_index("node_ids")["pool"]
    smallest = cells.index.get_level_values("node_id").map(pool_of).map(multi.groupby("pool")["gpus"].min())
    assert len(cells) and (cells["free"].to_numpy() < smallest.to_numpy()).mean() > 0.95
    # the spread jobs are short and none starts after the incident: the held slots clear soon after its end
    assert not small[g["ts"] >= E + pd.Timedelta(seconds=POOLS["batch"].dur_median_s + 60)].any()
    assert small[(g["ts"] >= E)].any()  # (the window shows the drain)
    # multi-GPU requests wait longer (held ones start once the spread jobs leave, after the incident); single-GPU
    # jobs of the plan do not wait for it
    qw, qb = queue_waits(w), queue_waits(base)
    sel = lambda q, big: q[(q["region"] == "us-east") & ((q["gpus"] >= 2) == big) & (q["ts"] >= S)]["wait_s"]  # noqa: E731
    assert sel(qw, True).mean() > 1.5 * sel(qb, True).mean()
    both = sel(qb, False).index.intersection(sel(qw, False).index)
    assert len(both) and (sel(qw, False)[both] == sel(qb, False)[both]).all()
    # minutes where a multi-GPU request that waited AGED (3 min) fits no node's free GPUs of the region's multi-GPU
    # nodes while their free GPUs summed would hold it: the evidence a fragmentation detector reads
    fr = _pieces(w, multi_nodes)["free"].unstack("node_id").fillna(0)
    sub = ev[(ev["event"] == "submitted") & ev["queue"].str.startswith("us-east")].set_index("job_id")["ts"]
    st = ev[ev["event"] == "started"].set_index("job_id")["ts"]
    req = md.set_index("job_id")["requested_gpus"]
    wait = pd.DataFrame({"sub": sub, "start": st.reindex(sub.index), "gpus": req.reindex(sub.index)})
    wait = wait[wait["gpus"] >= 2]
    stranded = 0
    for ts in fr.index[(fr.index >= S) & (fr.index < E)]:
        held = wait[(wait["sub"] <= ts - 3 * MIN) & ~(wait["start"] <= ts)]["gpus"]
        stranded += bool(((held > fr.loc[ts].max()) & (held <= fr.loc[ts].sum())).any())
    assert stranded >= 10


def test_io_bottleneck(runs):
    scen, inc, w = runs("io_bottleneck")
    n, g, m = w.table("node_telemetry"), w.table("gpu_telemetry"), w.table("job_runtime_metrics")
    on = n["node_id"].isin(inc.node_ids)
    hit = n[on & during(n)]
    assert len(hit) == len(inc.node_ids) * 60
    assert hit["disk_read_mbps"].min() > 1.5 * n.loc[~(on & during(n)), "disk_read_mbps"].max()  # storage saturated
    assert (hit["nvme_util_pct"] > 95).all()
    assert (n.loc[~(on & during(n)), "nvme_util_pct"] < 95).all()
    gon = g["node_id"].isin(inc.node_ids) & g["job_id"].notna()
    jobs = set(g.loc[gon & during(g), "job_id"]) & set(g.loc[gon & before(g), "job_id"])
    mm = m[m["job_id"].isin(jobs) & m["steps"].gt(0)]
    loader = mm[during(mm)].groupby("job_id")["data_loader_time_s"].median() / mm[before(mm)].groupby("job_id")["data_loader_time_s"].median()
    assert len(loader.dropna()) >= 3 and (loader.dropna() > 5).all()
    training = g[gon & g["job_id"].isin(mm["job_id"])]
    assert training.loc[during(training), "gpu_util_pct"].median() < training.loc[before(training), "gpu_util_pct"].median() - 15


def test_io_bottleneck_of_remote_storage_leaves_the_local_disks_quiet():
    """``storage: remote``: the same loader wait and idle GPUs, no local NVMe saturated (a shared filesystem)."""
    scen = scenario(incident("io_bottleneck", {"region": "us-east", "nodes": 3, "storage": "remote"}))
    inc, w = scen.incidents[0], Window(scen, W0, W1)
    n, g, m = w.table("node_telemetry"), w.table("gpu_telemetry"), w.table("job_runtime_metrics")
    assert (n["nvme_util_pct"] < 95).all()
    gon = g["node_id"].isin(inc.node_ids) & g["job_id"].notna()
    jobs = set(g.loc[gon & during(g), "job_id"]) & set(g.loc[gon & before(g), "job_id"])
    mm = m[m["job_id"].isin(jobs) & m["steps"].gt(0)]
    loader = mm[during(mm)].groupby("job_id")["data_loader_time_s"].median() / mm[before(mm)].groupby("job_id")["data_loader_time_s"].median()
    assert len(loader.dropna()) >= 3 and (loader.dropna() > 5).all()


def test_network_degradation(runs):
    scen, inc, w = runs("network_degradation")
    net, g, m = w.table("network_telemetry"), w.table("gpu_telemetry"), w.table("job_runtime_metrics")
    on = net["node_id"].isin(inc.node_ids) & during(net)
    assert net.loc[on, "packet_loss_pct"].min() > 100 * net.loc[~on, "packet_loss_pct"].max()
    assert net.loc[on, "retransmits"].median() > 100 and net.loc[~on, "retransmits"].max() <= 10
    assert net.loc[on, "latency_us"].median() > 3 * net.loc[~on, "latency_us"].median()
    # multi-node jobs on those nodes spend longer in gradient sync than outside the incident
    spans = g.dropna(subset=["job_id"]).groupby("job_id")["node_id"].agg(lambda s: set(s))
    multi = [j for j, ns in spans.items() if len(ns) > 1 and ns & set(inc.node_ids)]
    mm = m[m["job_id"].isin(multi) & m["steps"].gt(0)]
    inside = mm[during(mm)].groupby("job_id")["grad_sync_time_s"].median()
    outside = mm[~during(mm)].groupby("job_id")["grad_sync_time_s"].median()
    ratio = (inside / outside).dropna()
    assert len(ratio) >= 1 and (ratio > 2).all()


def _dummy_profile(w: Window) -> pd.Index:
    """Jobs that hold GPUs at ~100 % utilization without any tensor work, every minute."""
    g = w.table("gpu_telemetry").dropna(subset=["job_id"])
    prof = g.groupby("job_id").agg(util=("gpu_util_pct", "min"), tensor=("tensor_active", "max"), n=("ts", "size"))
    return prof[(prof["util"] >= 98) & (prof["tensor"] <= 0.01) & (prof["n"] >= 10)].index


def test_dummy_workload(runs):
    scen, inc, w = runs("dummy_workload")
    _, _, base = runs(None)
    g, md, m = w.table("gpu_telemetry"), w.table("job_metadata"), w.table("job_runtime_metrics")
    dummies = _dummy_profile(w)
    assert len(dummies) >= 3
    assert (md.set_index("job_id").loc[dummies, "team"] == "credit-risk").all()
    assert set(g.loc[g["job_id"].isin(dummies), "node_id"]) <= set(inc.node_ids)
    assert not m["job_id"].isin(dummies).any()  # no training metrics at all
    assert len(_dummy_profile(base)) == 0
    label = json.loads(labels_frame(scen)["scope"].iloc[0])
    assert sorted(label["job_ids"]) == sorted(dummies) and label["team"] == "credit-risk"


def test_training_stall(runs):
    scen, inc, w = runs("training_stall")
    g, m, ev = w.table("gpu_telemetry"), w.table("job_runtime_metrics"), w.table("scheduler_events")
    hung = json.loads(labels_frame(scen)["scope"].iloc[0])["job_ids"]
    assert len(hung) >= 2
    for job in hung:
        mm = m[m["job_id"] == job]
        stuck = mm[during(mm)]
        assert len(stuck) == 60 and (stuck["steps"] == 0).all() and stuck["step_time_s"].isna().all()
        assert (mm.loc[before(mm), "steps"] > 0).all()
        gg = g[g["job_id"] == job]
        per_minute = gg[during(gg)].groupby("ts").size()
        assert len(per_minute) == 60 and per_minute.nunique() == 1 and per_minute.iloc[0] >= 16  # GPUs stay allocated
        assert gg.loc[during(gg), "gpu_util_pct"].min() >= 98
        end = ev[(ev["job_id"] == job) & (ev["event"] == "ended")]
        assert end[["ts", "exit_state"]].values.tolist() == [[E, "failed"]]
    # nobody else stalls
    zero = m[during(m)].groupby("job_id")["steps"].apply(lambda s: (s == 0).sum())
    assert set(zero[zero >= 5].index) == set(hung)


def test_maintenance(runs):
    scen, inc, w = runs("maintenance")
    n, g, ev = w.table("node_telemetry"), w.table("gpu_telemetry"), w.table("scheduler_events")
    nn = n[n["node_id"].isin(inc.node_ids)]
    assert (nn.loc[during(nn), "health"] == "drained").all() and len(nn[during(nn)]) == 2 * 60
    assert (nn.loc[~during(nn), "health"] == "ok").all()
    gg = g[g["node_id"].isin(inc.node_ids)]
    assert gg.loc[during(gg), "job_id"].isna().all()
    assert gg.loc[~during(gg), "job_id"].notna().any()
    cal = maintenance_windows(scen)
    assert len(cal) == 1
    row = cal.iloc[0]
    assert (row["start"], row["end"], row["region"]) == (S, E, "us-east")
    assert set(row["node_ids"].split(",")) == set(inc.node_ids)
    cut_short = ev[(ev["event"] == "ended") & (ev["ts"] == S) & ev["reason"].str.contains("maintenance", na=False)]
    assert len(cut_short) >= 1 and (cut_short["exit_state"] == "cancelled").all()


def test_collector_outage(runs):
    scen, inc, w = runs("collector_outage")
    for table, per_minute in (("gpu_telemetry", 600), ("node_telemetry", 40), ("network_telemetry", 320)):
        df = w.table(table)
        count = df.groupby(["region", during(df)]).size()
        assert ("eu-west", True) not in count.index, table  # silent: no rows at all
        assert count[("eu-west", False)] == per_minute * 60
        assert count[("us-east", True)] == per_minute * 60  # the other region reports in full
        assert count[("us-east", False)] == per_minute * 60


# --- ground truth and scenario files ------------------------------------------------------------

def test_labels_carry_resolved_targets():
    scen = scenario(
        incident("gpu_ecc_fault", {"region": "us-east", "nodes": 2}),
        incident("framework_regression", {"team": "fraud-offline"}, to_version="torch-2.15.0"),
        incident("training_stall", {"region": "eu-west", "nodes": 6}),
        incident("driver_regression", {"node_ids": ["euw-v100-001", "euw-v100-002"]}),
    )
    labels = labels_frame(scen)
    assert list(labels.columns) == ["incident_id", "kind", "family", "severity", "start", "end", "scope"]
    assert labels["kind"].tolist() == ["gpu_ecc_fault", "framework_regression", "training_stall", "driver_regression"]
    assert labels["family"].tolist() == [KINDS[k].family for k in labels["kind"]]
    assert labels["incident_id"].is_unique
    assert (labels["start"] == S).all() and (labels["end"] == E).all()
    scopes = [json.loads(s) for s in labels["scope"]]
    nodes = set(scen.cluster.nodes["node_id"])
    gpus = scen.cluster.gpus.set_index("gpu_uuid")["node_id"]
    for sc in scopes:
        assert sc["node_ids"] and set(sc["node_ids"]) <= nodes
    ecc, fw, stall, drv = scopes
    assert ecc["spec"] == {"region": "us-east", "nodes": 2} and ecc["region"] == "us-east"
    assert len(ecc["gpu_uuids"]) == 2 and set(gpus[ecc["gpu_uuids"]]) == set(ecc["node_ids"])
    assert fw["framework_version"] == "torch-2.15.0" and fw["team"] == "fraud-offline"
    assert stall["job_ids"] and all(j.startswith("j") for j in stall["job_ids"])
    assert drv["node_ids"] == ["euw-v100-001", "euw-v100-002"] and drv["region"] == "eu-west"
    # an explicit mapping overrides
    over = labels_frame(scen, {"inc-003-training_stall": ("j-x",)})
    assert json.loads(over["scope"].iloc[2])["job_ids"] == ["j-x"]


@pytest.mark.parametrize("raw, message", [
    ({"incidents": [{"kind": "gpu_on_fire", "start": "2026-11-03T10:00:00Z"}]}, "unknown kind 'gpu_on_fire'"),
    ({"incidents": [{"kind": "thermal_throttle", "start": "2026-11-03T10:00:00"}]}, "has no timezone"),
    ({"start": "2026-11-02T00:00:00"}, "start: '2026-11-02T00:00:00' has no timezone"),
    ({"incidents": [{"kind": "thermal_throttle", "start": "2026-11-03T10:00:00Z", "duration": "ninety minutes"}]},
     "duration 'ninety minutes': expected e.g. 45s, 90m, 2h, 1d"),
    ({"incidents": [{"kind": "thermal_throttle", "start": "2026-11-03T10:00:00Z", "severity": "medium"}]}, "severity must be high or low"),
    ({"incidents": [{"kind": "maintenance", "start": "2026-11-03T10:00:00Z", "scope": {"region": "mars-1"}}]}, "unknown region 'mars-1'"),
    ({"incidents": [{"kind": "maintenance", "start": "2026-11-03T10:00:00Z", "scope": {"node_ids": ["nope-1"]}}]}, "unknown node_ids ['nope-1']"),
    ({"cluster": {"gpu_count": 5}}, "cluster: unknown field(s) ['gpu_count']"),
    ({"incident": []}, "unknown key(s) ['incident']"),
    ({"changes": [{"kind": "bios_flash", "ts": "2026-11-03T10:00:00Z"}]}, "unknown kind 'bios_flash'"),
])
def test_scenario_errors_are_clear(raw, message):
    with pytest.raises(ValueError) as exc:
        load_scenario({"seed": 1, **raw})
    assert message in str(exc.value)


def test_unknown_kind_error_lists_the_known_kinds():
    with pytest.raises(ValueError) as exc:
        load_scenario({"incidents": [{"kind": "gpu_on_fire", "start": "2026-11-03T10:00:00Z"}]})
    assert "incident 0" in str(exc.value)
    for kind in KINDS:
        assert kind in str(exc.value)


def test_scenario_yaml_file(tmp_path):
    path = tmp_path / "week.yaml"
    path.write_text(
        "seed: 3\nstart: 2026-11-02T00:00:00Z\nend: 2026-11-09T00:00:00Z\ncluster: default\n"
        "incidents:\n  - kind: thermal_throttle\n    start: 2026-11-03T14:10:00Z\n    duration: 90m\n"
        "    scope: {region: us-east, nodes: 2}\n"
    )
    scen = load_scenario(path)
    assert scen.name == "week" and scen.seed == 3
    inc = scen.incidents[0]
    assert inc.end - inc.start == pd.Timedelta(minutes=90)
    assert inc.magnitude == KINDS["thermal_throttle"].magnitude and len(inc.node_ids) == 2


@pytest.mark.parametrize("fields, nulls, present", [
    ({"profiling_fields": False}, ["sm_active", "tensor_active"], ["ecc_sbe_delta", "throttle_reasons"]),
    ({"ecc_fields": False}, ["ecc_sbe_delta", "ecc_dbe_delta"], ["sm_active", "tensor_active"]),
])
def test_fields_switched_off_are_null_never_zero(fields, nulls, present):
    scen = load_scenario({"seed": SEED, **WEEK, "cluster": fields})
    t = pd.Timestamp("2026-11-03T14:00:00Z")
    g = Window(scen, t, t + pd.Timedelta(minutes=5)).table("gpu_telemetry")
    assert len(g) == 1200 * 5
    for col in nulls:
        assert g[col].isna().all(), col
    for col in present:
        assert g[col].notna().all(), col
    result = validate_frame(g, "gpu_telemetry", start=t, end=t + pd.Timedelta(minutes=5))
    assert result.rejects.empty and len(result.valid) == len(g)
    assert list(g.columns) == columns("gpu_telemetry")


# --- the messy profile: real clusters' quirks as cluster knobs -------------------------------

M_DAY = pd.Timestamp("2026-11-04T00:00:00Z")        # a Wednesday
M_ROLL = pd.Timestamp("2026-11-04T09:00:00Z")       # the rolling upgrade's first batch
M0, M1 = pd.Timestamp("2026-11-04T08:30:00Z"), pd.Timestamp("2026-11-04T11:30:00Z")
ROLLING = {"kind": "driver_upgrade", "ts": M_ROLL.isoformat(), "from_version": "550.90.07", "to_version": "550.127.08",
           "scope": {"fraction": 0.25, "batches": 4, "every": "30m", "drain": "6m"}, "description": "rolling driver upgrade"}
# the messy profile at a quarter of its size; weak GPUs and exporter gaps made frequent enough to see in 3 hours
MESSY_SMALL = {"profile": "messy", "gpus": 480, "weak_gpu_share": 0.1, "weak_gpu_bursts_per_day": 24, "node_gaps_per_day": 4}


def messy_scenario(seed=SEED, cluster=None):
    return load_scenario({"seed": seed, **WEEK, "cluster": cluster or MESSY_SMALL, "changes": [ROLLING]})


@pytest.fixture(scope="module")
def messy():
    scen = messy_scenario()
    w = Window(scen, M0, M1)
    return scen, w, w.tables()


def test_messy_profile_is_another_cluster():
    c = load_scenario({**WEEK, "cluster": "messy"}).cluster
    d = default_scenario().cluster
    assert set(c.nodes["region"]) == {"us-central", "ap-southeast"}
    assert set(c.nodes["region"]).isdisjoint(d.nodes["region"])
    assert c.nodes["sku"].nunique() == 3 and set(c.nodes["gpus"]) == {8, 16}
    assert len(c.gpus) == 992 and not set(c.nodes["node_id"]) & set(d.nodes["node_id"])
    assert c.nodes["node_id"].str.match(r"^gpu-(h100|a100|v100)-(usc|apse)\d{2}-\d{2}$").all()
    assert c.spec.jobs_per_day_target != d.spec.jobs_per_day_target
    # a field of the mapping overrides the profile's; an unknown profile is named with the known ones
    assert ClusterSpec.from_config({"profile": "messy", "no_ecc_share": 0.0}).no_ecc_share == 0.0
    assert ClusterSpec.from_config("default") == ClusterSpec()
    with pytest.raises(ValueError, match="unknown profile 'tidy'.*default.*messy"):
        ClusterSpec.from_config("tidy")
    with pytest.raises(ValueError, match="cron team 'nobody'"):
        ClusterSpec.from_config({"profile": "messy", "cron": [{"team": "nobody", "every_h": 24, "at_min": 0,
                                                                "for_min": 30, "boost": 2.0}]})


@pytest.mark.parametrize("table", FIVE_MINUTE_SOURCES)
def test_messy_partitions_are_deterministic_and_independent(messy, table):
    """A 5-minute slot generated alone, in a fresh scenario, equals the same minutes of the 3-hour window --
    including the lost rows, exporter gaps, set-up phases and the rollout's drain (slot 09:30 = batch 2)."""
    _, _, tables = messy
    for t in (pd.Timestamp("2026-11-04T09:30:00Z"), pd.Timestamp("2026-11-04T10:55:00Z")):
        alone = Window(messy_scenario(), t, t + pd.Timedelta(minutes=5)).table(table)
        pd.testing.assert_frame_equal(alone, cut(tables[table], table, t, t + pd.Timedelta(minutes=5)))


def test_messy_same_seed_same_rows_other_seed_other_rows(messy):
    t = pd.Timestamp("2026-11-04T10:00:00Z")
    a = Window(messy_scenario(), t, t + pd.Timedelta(minutes=5)).table("gpu_telemetry")
    b = Window(messy_scenario(), t, t + pd.Timedelta(minutes=5)).table("gpu_telemetry")
    pd.testing.assert_frame_equal(a, b)
    c = Window(messy_scenario(seed=SEED + 1), t, t + pd.Timedelta(minutes=5)).table("gpu_telemetry")
    assert set(c["job_id"].dropna()) != set(a["job_id"].dropna())


def test_uninstrumented_jobs_compute_like_real_work_and_report_no_steps(messy):
    scen, w, tables = messy
    g = tables["gpu_telemetry"]
    plan = w.plan.set_index("job_id")
    rep = set(tables["job_runtime_metrics"]["job_id"])
    g = g[g["job_id"].notna()].join(plan[["pool", "reports_metrics", "tree", "start_s", "setup_s", "dummy"]], on="job_id")
    work = g[(g["pool"] != "interactive") & ~g["dummy"].astype(bool)
             & (g["ts"].to_numpy() >= from_s((g["start_s"] + g["setup_s"] + 60).to_numpy()))]
    silent = work[~work["reports_metrics"].astype(bool)]
    # a third of batch jobs, all tree models: no step metrics at all
    assert not set(silent["job_id"]) & rep
    batch = plan[(plan["pool"] == "batch") & ~plan["tree"].astype(bool)]
    assert 0.25 < (~batch["reports_metrics"].astype(bool)).mean() < 0.45
    assert plan.loc[plan["tree"].astype(bool), "reports_metrics"].eq(False).all()
    # ... yet they compute: high utilization, busy SMs, power far above idle (the device says real work)
    idle_w = np.where(silent["sku"].str.contains("H100"), 70, np.where(silent["sku"].str.contains("A100"), 60, 45))
    assert silent["gpu_util_pct"].median() > 70
    assert silent["sm_active"].dropna().median() > 0.35
    assert (silent["power_w"].dropna() > 2 * idle_w[silent["power_w"].notna().to_numpy()]).mean() > 0.95
    # deep-learning jobs drive the tensor pipe; tree models do not (FP32 histogram kernels)
    trees = silent[silent["tree"].astype(bool)]
    dl = silent[~silent["tree"].astype(bool)]
    assert len(trees) > 1000 and len(dl) > 1000
    assert trees["tensor_active"].dropna().max() <= 0.011 and dl["tensor_active"].dropna().median() > 0.2
    assert trees["sm_active"].dropna().min() >= 0.35
    md = tables["job_metadata"].set_index("job_id")
    assert set(md.loc[md.index.isin(plan.index[plan["tree"].astype(bool)]), "framework_version"]) <= {"xgboost-2.1.1", "lightgbm-4.5.0"}


def test_set_up_minutes_before_the_first_step(messy):
    scen, w, tables = messy
    r = tables["job_runtime_metrics"]
    plan = w.plan.set_index("job_id")
    first = r.groupby("job_id")["ts"].min()
    started_here = plan.loc[first.index]
    inside = (started_here["start_s"] >= to_s(M0)).to_numpy()
    setup = started_here["setup_s"].to_numpy()[inside]
    first_s = np.array([to_s(x) for x in first[inside]])
    # no step row before set-up ends; set-up lasts minutes (median ~3.3, Zhejiang Lab's LLaMA-2 job)
    assert inside.sum() > 100
    assert (first_s + 30 >= started_here["start_s"].to_numpy()[inside] + setup).all()
    setup = pd.Series(setup)
    assert 120 < setup.median() < 320 and setup.min() >= 30
    # the GPUs wait through set-up: low utilization with short bursts, no tensor work
    g = tables["gpu_telemetry"].join(plan[["pool", "start_s", "setup_s", "dummy"]], on="job_id")
    t_s = (g["ts"] - from_s(0)).dt.total_seconds()
    in_setup = g["job_id"].notna() & (g["pool"] != "interactive") & ~g["dummy"].eq(True) \
        & (t_s + 30 < g["start_s"] + g["setup_s"])
    s = g[in_setup]
    assert len(s) > 200
    assert s["gpu_util_pct"].median() < 10 and s["tensor_active"].dropna().max() == 0.0


def test_some_frameworks_report_steps_without_their_components(messy):
    r = messy[2]["job_runtime_metrics"]
    stepping = r[r["steps"] > 0]
    per_job = stepping.groupby("job_id")["data_loader_time_s"].apply(lambda s: s.isna().all())
    assert 0.3 < per_job.mean() < 0.7         # component_metrics_share 0.5: per job, all or nothing
    assert stepping["step_time_s"].notna().all()
    assert (stepping["data_loader_time_s"].isna() == stepping["grad_sync_time_s"].isna()).all()


def test_collectors_miss_fields_on_some_nodes_null_never_zero(messy):
    scen, _, tables = messy
    g = tables["gpu_telemetry"]
    by_node = g.groupby("node_id")
    for col in ("sm_active", "tensor_active", "ecc_sbe_delta", "throttle_reasons", "power_w", "temp_c"):
        frac = by_node[col].apply(lambda s: s.isna().mean())
        # a node exports a field always or never
        assert frac.isin([0.0, 1.0]).all(), col
    share = lambda col: by_node[col].apply(lambda s: s.isna().all()).mean()  # noqa: E731
    assert 0.35 < share("sm_active") < 0.7        # dcgm-exporter's default counters: no SM_ACTIVE
    assert 0.02 < share("tensor_active") < 0.25
    assert 0.3 < share("ecc_sbe_delta") < 0.7 and 0.25 < share("throttle_reasons") < 0.6
    assert 0.0 < share("power_w") < 0.15
    assert (g["power_w"].isna() == g["temp_c"].isna()).all()
    assert (g["ecc_sbe_delta"].isna() == g["ecc_dbe_delta"].isna()).all()
    # tensor missing implies SM missing (no profiling at all); present values are real readings
    assert not (g["tensor_active"].isna() & g["sm_active"].notna()).any()
    result = validate_frame(g, "gpu_telemetry", start=M0, end=M1)
    assert result.rejects.empty and len(result.valid) == len(g)


def test_a_share_of_nodes_runs_an_old_driver(messy):
    scen, _, tables = messy
    n = tables["node_telemetry"]
    before = n[n["ts"] < M_ROLL].groupby("node_id")["driver_version"].first()
    assert set(before) == {"550.90.07", "535.54.03"}
    assert 0.1 < (before == "535.54.03").mean() < 0.3


def test_weak_gpus_throw_benign_single_bit_bursts(messy):
    scen, _, tables = messy
    g = tables["gpu_telemetry"]
    weak = set(scen.cluster.gpus.loc[scen.cluster.gpus["weak"], "gpu_uuid"])
    bursts = g[g["ecc_sbe_delta"].fillna(0) >= 5]
    assert len(bursts) >= 3
    assert set(bursts["gpu_uuid"]) <= weak
    # benign: no double-bit error, no Xid, the GPU keeps its job
    assert (bursts["ecc_dbe_delta"] == 0).all() and (bursts["xid"] == 0).all()


def test_idle_gpus_hold_leftover_framebuffer(messy):
    g = messy[2]["gpu_telemetry"]
    idle = g[g["job_id"].isna()]
    left = idle["fb_used_mib"] >= 300
    assert 0.15 < left.mean() < 0.45
    assert (idle.loc[left, "gpu_util_pct"] == 0).all() and (idle.loc[left, "power_w"].dropna() < 100).all()
    # the default profile's idle GPUs hold a few hundred MiB at most
    d = Window(default_scenario(), M0, M0 + pd.Timedelta(minutes=10)).table("gpu_telemetry")
    assert d.loc[d["job_id"].isna(), "fb_used_mib"].max() < 260


def test_exporters_lose_rows_and_nodes_go_briefly_silent_reporting_ok(messy):
    scen, w, tables = messy
    g, n = tables["gpu_telemetry"], tables["node_telemetry"]
    drained = {x for c in scen.changes for x in c.node_ids}
    per_min = g.groupby(["node_id", "ts"]).size()
    gpus_of = scen.cluster.nodes.set_index("node_id")["gpus"]
    full = pd.MultiIndex.from_product([scen.cluster.nodes["node_id"], pd.date_range(M0, M1, freq="min", inclusive="left")])
    have = per_min.reindex(full, fill_value=0)
    expected = gpus_of.reindex(have.index.get_level_values(0)).to_numpy()
    missing = expected - have.to_numpy()
    # single GPU-minutes lost at random (~0.1 %)
    partial = (missing > 0) & (missing < expected)
    assert 0 < partial.sum() < 0.01 * len(have)
    # whole nodes silent for 2-6 minutes, outside any drain: the node row says ok, no Xid anywhere
    silent = pd.Series((missing == expected), index=have.index)
    silent = silent[silent & ~silent.index.get_level_values(0).isin(drained)]
    assert len(silent) >= 2
    for node, ts in silent.index[:20]:
        row = n[(n["node_id"] == node) & (n["ts"] == ts)]
        assert len(row) == 1 and row["health"].iloc[0] == "ok"
        near = g[(g["node_id"] == node) & (g["ts"] >= ts - 2 * MIN) & (g["ts"] <= ts + 2 * MIN)]
        assert (near["xid"] == 0).all()
    # each gap lasts 2-6 minutes (a node may have two in the window)
    per_node = silent.groupby(level=0).size()
    assert per_node.max() <= 2 * 6 and per_node.min() >= 2


def test_teams_queues_fair_share_and_cron_retrains():
    scen = load_scenario({"seed": SEED, **WEEK, "cluster": {"profile": "messy", "gpus": 480}})
    w = Window(scen, pd.Timestamp("2026-11-04T00:00:00Z"), pd.Timestamp("2026-11-04T06:00:00Z"))
    md, ev = w.table("job_metadata"), w.table("scheduler_events")
    assert md["team"].nunique() == 8
    st = ev[ev["event"] == "started"].merge(md[["job_id", "team", "workload_class"]], on="job_id")
    batch = st[st["workload_class"] == "batch"]
    # per-team queues (virtual clusters), one notebook queue per region
    assert (batch["queue"] == batch["node_ids"].map(lambda ns: scen.cluster.nodes.set_index("node_id").loc[ns.split(",")[0], "region"])
            + "/" + batch["team"]).all()
    # fair share: a team over its quota is ranked below one under it, consistently
    # (one priority per team and pool, +40 for SLA jobs)
    levels = st[st["workload_class"] != "interactive"].groupby(["team", "workload_class"])["priority"].agg(
        lambda s: sorted(set(s)))
    assert all(len(v) <= 2 and (len(v) == 1 or v[1] - v[0] == 40) for v in levels)
    assert st.loc[st["workload_class"] == "batch", "priority"].nunique() > 4
    adj = scen.cluster.spec.teams
    from gpu_health.sim.jobs import team_table
    ratio = team_table(scen.cluster.spec)[5]
    over, under = max(ratio, key=ratio.get), min(ratio, key=ratio.get)
    base = lambda t: batch.loc[batch["team"] == t, "priority"].min()  # noqa: E731
    assert base(over) < base(under) and len(adj) == 8
    # the nightly retrain (ads-ctr, 02:00-03:00 UTC): more batch starts, most of them the cron team's
    hour = batch["ts"].dt.hour
    # (the pool saturates: capacity, not demand, bounds the starts; the rest waits in the queue)
    assert (hour == 2).sum() > 1.1 * (hour == 5).sum()
    assert (batch.loc[hour == 2, "team"] == "ads-ctr").mean() > 0.5
    assert (batch.loc[hour == 5, "team"] == "ads-ctr").mean() < 0.4


def test_rolling_driver_upgrade_drains_each_batch_briefly_and_jobs_carry_on(messy):
    scen, w, tables = messy
    batches = [c for c in scen.changes if c.kind == "driver_upgrade"]
    assert len(batches) == 4 and [c.ts for c in batches] == [M_ROLL + pd.Timedelta(minutes=30 * i) for i in range(4)]
    nodes = [set(c.node_ids) for c in batches]
    assert all(not (a & b) for i, a in enumerate(nodes) for b in nodes[i + 1:])
    assert abs(sum(map(len, nodes)) - 0.25 * len(scen.cluster.nodes)) <= 1
    ce = tables["change_events"]
    assert len(ce) == 4 and (ce["kind"] == "driver_upgrade").all() and ce["description"].str.contains("batch").all()
    g, n, ev = tables["gpu_telemetry"], tables["node_telemetry"], tables["scheduler_events"]
    for c in batches:
        mine = n[n["node_id"].isin(c.node_ids)]
        drain = (mine["ts"] >= c.ts) & (mine["ts"] < c.ts + pd.Timedelta(minutes=6))
        assert (mine.loc[drain, "health"] == "drained").all() and (mine.loc[~drain, "health"] == "ok").all()
        # GPUs unavailable while the driver installs: no rows (and no Xid), back afterwards
        gm = g[g["node_id"].isin(c.node_ids)]
        mid = (gm["ts"] >= c.ts + MIN) & (gm["ts"] < c.ts + 5 * MIN)
        assert not mid.any()
        assert (gm["ts"] >= c.ts + 5 * MIN).any()
        assert (gm.loc[(gm["ts"] >= c.ts - 2 * MIN) & (gm["ts"] < c.ts + 8 * MIN), "xid"] == 0).all()
        after = mine[mine["ts"] >= c.ts + 5 * MIN]
        assert (after["driver_version"] == "550.127.08").all()
        assert (mine.loc[mine["ts"] < c.ts, "driver_version"] != "550.127.08").all()
    # running jobs there were cancelled at the drain; jobs start there again after it
    ended = ev[(ev["event"] == "ended") & (ev["reason"] == "node drained for driver upgrade")]
    assert len(ended) > 0 and (ended["exit_state"] == "cancelled").all()
    started = ev[ev["event"] == "started"]
    first = batches[0]
    again = started[(started["ts"] >= first.ts + 6 * MIN) & started["node_ids"].fillna("").map(lambda s: bool(set(s.split(",")) & set(first.node_ids)))]
    during = started[(started["ts"] >= first.ts) & (started["ts"] < first.ts + 6 * MIN)
                     & started["node_ids"].fillna("").map(lambda s: bool(set(s.split(",")) & set(first.node_ids)))]
    assert len(again) > 0 and len(during) == 0
    # no job fails beyond the usual: the upgrade is benign
    failed = ev[(ev["event"] == "ended") & (ev["exit_state"] == "failed")]
    assert not failed["reason"].fillna("").str.contains("Xid 79|GSP|fallen off").any()


def test_messy_knobs_default_off():
    """Every messiness knob's default is off: the default profile has no uninstrumented training job, no null
    field, no lost row, one driver and one queue per pool."""
    spec = ClusterSpec()
    assert spec.uninstrumented == () and spec.setup_median_s == 0 and spec.component_metrics_share == 1.0
    assert spec.no_profiling_share == spec.no_sm_active_share == spec.no_ecc_share == 0.0
    assert spec.no_throttle_share == spec.no_power_temp_share == spec.old_driver_share == 0.0
    assert spec.weak_gpu_share == spec.idle_fb_leftover_share == spec.row_loss_rate == spec.node_gaps_per_day == 0.0
    assert spec.teams == () and spec.cron == () and not spec.fair_share and not spec.queue_per_team
    t = pd.Timestamp("2026-11-03T14:00:00Z")
    w = Window(default_scenario(), t, t + pd.Timedelta(minutes=10))
    g = w.table("gpu_telemetry")
    assert len(g) == 1200 * 10 and g[["sm_active", "ecc_sbe_delta", "throttle_reasons", "power_w"]].notna().all().all()
    assert w.plan.loc[w.plan["pool"] != "interactive", "reports_metrics"].all()
    assert w.table("node_telemetry")["driver_version"].nunique() == 1


def test_every_knob_is_a_yaml_field_of_the_cluster_mapping(tmp_path):
    """The knobs are plain YAML: teams as a mapping, cron as a list, shares as numbers, on any profile."""
    path = tmp_path / "custom.yaml"
    path.write_text(
        "seed: 3\nstart: 2026-11-02T00:00:00Z\nend: 2026-11-09T00:00:00Z\n"
        "cluster:\n  gpus: 120\n  node_name: 'n{n:04d}-{short}.{region}'\n"
        "  teams:\n    alpha: {weights: [1, 1, 1], models: [embedding, xgb-risk], quota: 0.7}\n"
        "    beta: {weights: [1, 2, 1], models: [llm-finetune], sla: true}\n"
        "  fair_share: true\n  queue_per_team: true\n"
        "  cron: [{team: beta, every_h: 1, at_min: 0, for_min: 20, boost: 2.0}]\n"
        "  uninstrumented: {batch: 0.5}\n  no_ecc_share: 1.0\n  row_loss_rate: 0.01\n")
    scen = load_scenario(path)
    assert scen.cluster.nodes["node_id"].str.match(r"^n\d{4}-(h100|v100)\.(us-east|eu-west)$").all()
    w = Window(scen, pd.Timestamp("2026-11-03T14:00:00Z"), pd.Timestamp("2026-11-03T15:00:00Z"))
    md, g, ev = w.table("job_metadata"), w.table("gpu_telemetry"), w.table("scheduler_events")
    assert set(md["team"]) == {"alpha", "beta"}
    assert g["ecc_sbe_delta"].isna().all() and 0.98 * len(scen.cluster.gpus) * 60 < len(g) < len(scen.cluster.gpus) * 60
    assert set(ev["queue"].dropna()) <= {f"{r}/{q}" for r in ("us-east", "eu-west") for q in ("alpha", "beta", "notebooks")}
    assert set(md.loc[md["model_type"] == "xgb-risk", "framework_version"]) == {"xgboost-2.1.1"}


# --- the gradient norm: a share of the jobs, its own draws -------------------------------------------------

def test_a_share_of_jobs_report_a_slowly_decaying_noisy_gradient_norm(runs):
    _, _, w = runs(None)
    m = w.table("job_runtime_metrics")
    stepping = m[m["steps"] > 0]
    reports = stepping.groupby("job_id")["grad_norm"].agg(lambda s: s.notna().all())
    never = stepping.groupby("job_id")["grad_norm"].agg(lambda s: s.isna().all())
    assert (reports | never).all()  # a job logs it in every minute with a step, or never
    assert 0.3 <= reports.mean() <= 0.5 and len(reports) > 100  # ClusterSpec.grad_norm_share = 0.4
    assert m.loc[m["steps"] == 0, "grad_norm"].isna().all()  # no step, no norm
    g = stepping["grad_norm"].dropna()
    assert (g > 0).all() and np.isfinite(g).all() and g.min() < 0.3 < 1.5 < g.max()  # each job its own level
    # jobs that trained through most of the window: young ones (their step count grew 3x) show the decay
    long = stepping[stepping["job_id"].isin(reports[reports].index)].groupby("job_id").filter(lambda d: len(d) >= 100)
    young = long.groupby("job_id").filter(lambda d: d["last_step"].iloc[-1] + 400 >= 3 * (d["last_step"].iloc[0] + 400))
    assert long["job_id"].nunique() >= 5 and young["job_id"].nunique() >= 2
    for job, d in long.groupby("job_id"):
        lg = np.log(d["grad_norm"].to_numpy())
        assert 0.05 < np.median(np.abs(np.diff(lg))) < 0.5  # scatters minute to minute
        if job in set(young["job_id"]):
            assert np.median(lg[-30:]) < np.median(lg[:30])  # and decays as training proceeds


def test_the_gradient_norm_leaves_every_other_column_as_it_was():
    # its draws are its own stream: no grad norm reported at all, the other columns are unchanged to the bit
    with_norm = Window(scenario(), PI_START, PI_START + pd.Timedelta(minutes=10)).table("job_runtime_metrics")
    without = Window(scenario(cluster={"grad_norm_share": 0.0}), PI_START,
                     PI_START + pd.Timedelta(minutes=10)).table("job_runtime_metrics")
    assert with_norm["grad_norm"].notna().any() and without["grad_norm"].isna().all()
    pd.testing.assert_frame_equal(with_norm.drop(columns="grad_norm"), without.drop(columns="grad_norm"))


def test_a_diverging_run_explodes_the_gradient_norm_ahead_of_its_loss():
    from gpu_health.sim.platform import fallback_jobs

    raw = {"seed": 25, "start": "2026-11-03T09:00:00Z", "end": "2026-11-03T12:00:00Z",
           "cluster": {"gpus": 96, "grad_norm_share": 1.0}}
    onset = pd.Timestamp("2026-11-03T11:00:00Z")
    inc = {"kind": "diverging_run", "start": onset.isoformat(), "duration": "60m", "severity": "low",
           "scope": {"region": "us-east", "nodes": 2, "pool": "distributed"}}
    scen = load_scenario({**raw, "incidents": [inc]})
    w = Window(scen, onset - pd.Timedelta(minutes=30), onset + pd.Timedelta(minutes=30))
    calm = Window(load_scenario(raw), w.start, w.end).table("job_runtime_metrics")
    m = w.table("job_runtime_metrics")
    targets = set(w.plan["job_id"].to_numpy()[fallback_jobs(scen, w.plan, scen.incidents[0])])
    assert targets
    at = onset + pd.Timedelta(minutes=15)
    for job in targets:
        mine, base = m[m["job_id"] == job].set_index("ts"), calm[calm["job_id"] == job].set_index("ts")
        grad, loss = mine["grad_norm"] / base["grad_norm"], mine["loss"] / base["loss"]
        assert (grad[grad.index < onset] == 1).all()
        assert grad[at] > 3 and loss[at] < 1.25  # the norm runs ahead of the loss
    others = ~m["job_id"].isin(targets)
    pd.testing.assert_frame_equal(m[others].reset_index(drop=True),
                                  calm[~calm["job_id"].isin(targets)].reset_index(drop=True))

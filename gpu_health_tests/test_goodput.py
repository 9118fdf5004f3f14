"""The goodput loss tree (gpu_health.metrics.goodput) on simulated incidents of every kind.

Each incident kind gets one simulated window, shared by the module (``sim``): the hour
10:00-11:00 UTC of Tuesday 2026-11-03 with the incident from 10:07 to 10:47 (it starts
and ends inside a 5-minute partition), one hour of history before it (the step-time
baseline, the node inventory, scheduler events) and the job metadata of the 4 days
before (the lookup the pipeline passes for long-running jobs). The inputs of
``compute_states`` are built the way ``pipeline.goodput`` builds them. Expectations come
from the simulator's own rows and labels (which GPUs were throttled, which jobs were
dummies or hung), compared with the same seed without the incident.

The last test runs ``pipeline.goodput`` on a SQLite warehouse: a 1-hour range equals
its 12 partitions computed one at a time.
"""

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from gpu_health.metrics import goodput as G
from gpu_health.metrics.baselines import step_baseline, workload_step_stats
from gpu_health.sim.labels import labels_frame
from gpu_health.sim.scenario import KINDS, load_scenario
from gpu_health.sim.telemetry import THERMAL_BITS, Window, cost_capacity, maintenance_windows
from gpu_health.steps import telemetry as T
from gpu_health.steps.registry import inputs_for
from gpu_health.storage.warehouse import Warehouse

S = pd.Timestamp("2026-11-03T10:00:00Z")
E = S + pd.Timedelta(hours=1)
I0, I1 = S + pd.Timedelta(minutes=7), S + pd.Timedelta(minutes=47)  # the incident
HISTORY = pd.Timedelta(hours=1)
FIVE = pd.Timedelta(minutes=5)
MIN = pd.Timedelta(minutes=1)
PARTITIONS = pd.date_range(S, E, freq="5min", inclusive="left")
INCIDENT_MINUTES = (I1 - I0) / MIN

# kind -> (scope, extra fields); magnitudes spelled out where a test uses them
SPECS = {
    "gpu_ecc_fault": ({"region": "us-east", "nodes": 1}, {}),
    "gpu_fell_off_bus": ({"region": "eu-west", "nodes": 1}, {}),
    "thermal_throttle": ({"region": "us-east", "nodes": 2}, {"magnitude": 0.38}),
    "driver_regression": ({"region": "us-east", "nodes": 8}, {}),
    "framework_regression": ({"team": "fraud-offline"}, {"magnitude": 0.25}),
    "priority_change": ({"region": "us-east"}, {}),
    "fragmentation": ({"region": "us-east"}, {}),
    "io_bottleneck": ({"region": "us-east", "nodes": 3}, {"magnitude": 0.5}),
    "network_degradation": ({"region": "us-east", "nodes": 2}, {"magnitude": 0.4}),
    "dummy_workload": ({"region": "us-east", "team": "credit-risk"}, {"magnitude": 0.5}),
    "training_stall": ({"region": "eu-west", "nodes": 6}, {}),
    "maintenance": ({"region": "us-east", "nodes": 2}, {}),
    "collector_outage": ({"region": "eu-west"}, {}),
}


def scenario(*incidents) -> object:
    return load_scenario({"seed": 7, "start": "2026-11-02T00:00:00Z", "end": "2026-11-04T00:00:00Z",
                          "incidents": list(incidents)})


def incident(kind, start=I0, end=I1) -> dict:
    scope, extra = SPECS[kind]
    return {"kind": kind, "start": start.isoformat(), "end": end.isoformat(), "scope": scope, **extra}


def inventory_of(frames: dict) -> pd.DataFrame:
    """What pipeline.inventory_as_of reads back (no region silent): nodes seen with the most GPUs each reported."""
    inv = T.node_inventory(frames)
    return (inv.groupby("node_id").agg(region=("region", "last"), sku=("sku", "last"), gpus=("gpus_seen", "max"))
            .reset_index().astype({"node_id": object, "region": object, "sku": object}))


@dataclass
class Run:
    scen: object
    hist: dict        # source frames of the hour before the window
    frames: dict      # source frames of the window
    meta: pd.DataFrame
    capacity: pd.DataFrame
    leaves: pd.DataFrame
    failures: pd.DataFrame

    @property
    def inc(self):
        return self.scen.incidents[0]

    def label(self) -> dict:
        return json.loads(labels_frame(self.scen)["scope"].iloc[0])

    def total(self, state=None, **dims) -> float:
        lv = self.leaves if state is None else self.leaves[self.leaves["state"].isin([state] if isinstance(state, str) else state)]
        for col, v in dims.items():
            lv = lv[lv[col].isin(v if isinstance(v, list | tuple | set) else [v])]
        return float(lv["gpu_minutes"].sum())


class Sim:
    """Memoized windows: incident kind (None = no incident) -> Run."""

    def __init__(self):
        self._cache = {}
        self._before = None

    def _history(self):
        """Incidents start inside the window, so what comes before it is the same in every scenario
        (the simulator is partition-independent): the hour of history, the metadata and the baseline."""
        if self._before is None:
            quiet = scenario()
            hist = Window(quiet, S - HISTORY, S).tables()
            old_meta = Window(quiet, S - T.META_LOOKBACK, S - HISTORY).table("job_metadata")
            meta = pd.concat([old_meta, hist["job_metadata"]], ignore_index=True)
            baseline = step_baseline(workload_step_stats(hist, meta=meta, maintenance=None), None)
            self._before = hist, meta, baseline
        return self._before

    def __call__(self, kind=None) -> Run:
        if kind not in self._cache:
            scen = scenario(incident(kind)) if kind else scenario()
            frames = Window(scen, S, E).tables()
            self._cache[kind] = self.states(scen, frames, cost_capacity(scen, S))
        return self._cache[kind]

    def states(self, scen, frames: dict, capacity: pd.DataFrame) -> Run:
        """The loss tree of ``frames`` (the window) of ``scen``, paid for as ``capacity`` says."""
        hist, old_meta, baseline = self._history()
        tables = {k: pd.concat([hist[k], frames[k]], ignore_index=True) for k in frames}
        meta = pd.concat([old_meta, frames["job_metadata"]], ignore_index=True)
        leaves, failures = G.compute_states(
            frames, start=S, end=E, capacity=capacity, inventory=inventory_of(tables), maintenance=maintenance_windows(scen),
            meta=meta, sched_history=tables["scheduler_events"], baseline=baseline)
        return Run(scen, hist, frames, meta, capacity, leaves, failures)


@pytest.fixture(scope="module")
def sim():
    return Sim()


def test_every_incident_kind_has_a_window():
    assert set(SPECS) == set(KINDS)


# --- 1. every paid GPU-minute in exactly one state ------------------------------------------------

@pytest.mark.parametrize("kind", [None, *SPECS])
def test_states_sum_to_paid_gpu_minutes_per_partition_region_and_sku(sim, kind):
    run = sim(kind)
    lv = run.leaves
    assert set(lv["state"]) <= set(G.STATES)
    assert (lv["gpu_minutes"] >= 0).all()
    assert lv[["partition_start", *G.LEAF_DIMS, "state"]].notna().all().all()
    got = lv.groupby(["partition_start", "region", "sku"])["gpu_minutes"].sum()
    paid = run.capacity.set_index(["region", "sku"])["capacity_gpus"].astype(float) * 5
    expected = pd.Series({(p, r, s): v for p in PARTITIONS for (r, s), v in paid.items()})
    expected.index.names = got.index.names
    pd.testing.assert_series_equal(got.sort_index(), expected.sort_index(), check_names=False, rtol=1e-9, atol=1e-6)
    # the shares of the north star add up to 1
    ratio = G.goodput_ratio(lv, ["region"])
    np.testing.assert_allclose(ratio[[f"share_{s}" for s in G.STATES]].sum(axis=1), 1.0, rtol=1e-9)
    assert ((ratio["goodput"] >= 0) & (ratio["goodput"] <= 1)).all()


# --- 2. the right state grows by about the injected magnitude ---------------------------------------

def _job_minutes_progressing(frames: dict, gpu_rows: pd.DataFrame) -> pd.DataFrame:
    """All GPU rows of the (minute, job)s in ``gpu_rows`` (a synchronous job runs at its slowest GPU's
    pace), with the job's runtime row of that minute, where the job completed steps."""
    g, rt = frames["gpu_telemetry"], frames["job_runtime_metrics"]
    keys = gpu_rows.loc[gpu_rows["job_id"].notna(), ["ts", "job_id"]].drop_duplicates()
    rows = g.merge(keys, on=["ts", "job_id"]).merge(rt[["ts", "job_id", "steps", "checkpoint_time_s"]], on=["ts", "job_id"])
    return rows[rows["steps"] > 0]


def _expected_slowdown(rows: pd.DataFrame, magnitude: float) -> float:
    """Step time x (1 + m): the share m / (1 + m) of each progressing GPU-minute is lost (the
    checkpoint share of the minute excepted, which the tree books as slowdown_checkpoint)."""
    return float((magnitude / (1 + magnitude) * (1 - rows["checkpoint_time_s"].fillna(0) / 60)).sum())


SLOWDOWN_TOLERANCE = 0.12  # per-job speed jitter (+-4 %) around the signature's median baseline


def _check_slowdown(sim, kind, state, rows):
    run, quiet = sim(kind), sim()
    expected = _expected_slowdown(rows, run.inc.magnitude)
    nodes = sorted(set(rows["node_id"]))
    assert expected > 50, f"{kind}: too few affected GPU-minutes to measure ({expected:.0f})"
    grown = run.total(state, node_id=nodes) - quiet.total(state, node_id=nodes)
    assert grown == pytest.approx(expected, rel=SLOWDOWN_TOLERANCE), (kind, state, grown, expected)
    for other in set(G.SLOWDOWN_STATES) - {state, "slowdown_checkpoint"}:
        moved = run.total(other, node_id=nodes) - quiet.total(other, node_id=nodes)
        assert abs(moved) < 0.05 * expected, (kind, other, moved)
    # nodes whose jobs were not hit run as without the incident
    elsewhere = sorted(set(run.leaves["node_id"]) - set(nodes))
    assert run.total(state, node_id=elsewhere) == pytest.approx(quiet.total(state, node_id=elsewhere), abs=1.0)


def test_thermal_throttle_moves_the_lost_share_of_throttled_jobs_into_slowdown_compute(sim):
    run = sim("thermal_throttle")
    g = run.frames["gpu_telemetry"]
    throttled = g[(g["throttle_reasons"].fillna(0).astype("int64") & THERMAL_BITS) > 0]
    assert set(throttled["node_id"]) == set(run.label()["node_ids"])
    rows = _job_minutes_progressing(run.frames, throttled)
    _check_slowdown(sim, "thermal_throttle", "slowdown_compute", rows)


def test_io_bottleneck_moves_loader_wait_into_slowdown_data_io(sim):
    run = sim("io_bottleneck")
    g = run.frames["gpu_telemetry"]
    hit = g[g["node_id"].isin(run.label()["node_ids"]) & (g["ts"] >= I0) & (g["ts"] < I1)]
    _check_slowdown(sim, "io_bottleneck", "slowdown_data_io", _job_minutes_progressing(run.frames, hit))


def test_network_degradation_moves_gradient_sync_of_multi_node_jobs_into_slowdown_network(sim):
    run = sim("network_degradation")
    g = run.frames["gpu_telemetry"]
    nodes_per_job = g[g["job_id"].notna()].groupby("job_id")["node_id"].nunique()
    multi = nodes_per_job[nodes_per_job > 1].index
    hit = g[g["node_id"].isin(run.label()["node_ids"]) & (g["ts"] >= I0) & (g["ts"] < I1)]
    _check_slowdown(sim, "network_degradation", "slowdown_network",
                    _job_minutes_progressing(run.frames, hit[hit["job_id"].isin(multi)]))


def test_framework_regression_slows_the_jobs_on_the_new_version(sim):
    run = sim("framework_regression")
    new = run.inc.to_version
    jobs = set(run.meta.loc[run.meta["framework_version"] == new, "job_id"])
    g = run.frames["gpu_telemetry"]
    rows = _job_minutes_progressing(run.frames, g[g["job_id"].isin(jobs)])
    expected = _expected_slowdown(rows, run.inc.magnitude)
    assert expected > 50
    got = run.total("slowdown_compute", framework_version=new)
    assert got == pytest.approx(expected, rel=SLOWDOWN_TOLERANCE)
    # everybody else runs as fast as without the incident
    old = run.total("slowdown_compute") - got
    assert old == pytest.approx(sim().total("slowdown_compute"), rel=0.10)


def test_dummy_workload_lands_in_allocated_unproductive_for_its_team(sim):
    run, quiet = sim("dummy_workload"), sim()
    team, dummies = run.inc.team, run.label()["job_ids"]
    assert dummies
    g = run.frames["gpu_telemetry"]
    dummy_minutes = float(g["job_id"].isin(dummies).sum())
    assert dummy_minutes > 500
    grown = run.total("allocated_unproductive", team=team) - quiet.total("allocated_unproductive", team=team)
    assert grown == pytest.approx(dummy_minutes, rel=0.01)
    others = run.total("allocated_unproductive") - run.total("allocated_unproductive", team=team)
    assert others == pytest.approx(quiet.total("allocated_unproductive") - quiet.total("allocated_unproductive", team=team), abs=5)


def test_dummy_workload_raises_raw_utilization_but_not_goodput(sim):
    run, quiet = sim("dummy_workload"), sim()
    region = run.inc.region

    def util(r):
        g = r.frames["gpu_telemetry"]
        return g.loc[(g["region"] == region) & (g["ts"] >= I0) & (g["ts"] < I1), "gpu_util_pct"].mean()

    def goodput(r, **dims):
        return r.total("productive", **dims) / r.total(**dims)

    assert util(run) > util(quiet) + 1.0  # a utilization dashboard sees more work
    assert goodput(run, region=region) < goodput(quiet, region=region)
    assert goodput(run) <= goodput(quiet)


def test_training_stall_is_allocated_without_progress_then_failure_loss_at_the_end(sim):
    run, quiet = sim("training_stall"), sim()
    hung = run.label()["job_ids"]
    g = run.frames["gpu_telemetry"]
    hung_rows = g[g["job_id"].isin(hung)]
    nodes = sorted(set(hung_rows["node_id"]))
    own = I1.floor("5min")  # the failures' own partition
    during = hung_rows[(hung_rows["ts"] >= I0) & (hung_rows["ts"] < own)]
    before = [p for p in PARTITIONS if I0.floor("5min") <= p < own]
    no_progress = ["allocated_idle", "allocated_unproductive"]  # SM activity ~0 at ~99 % util: allocated_idle
    grown = (run.total(no_progress, node_id=nodes, partition_start=before)
             - quiet.total(no_progress, node_id=nodes, partition_start=before))
    assert grown == pytest.approx(len(during), rel=0.02)
    # the failures: one per hung job at the stall's end, with the work since its last checkpoint
    f = run.failures.set_index("job_id")
    assert set(hung) <= set(f.index)
    rt = pd.concat([run.hist["job_runtime_metrics"], run.frames["job_runtime_metrics"]])
    for job in hung:
        assert f.at[job, "failed_at"] == I1 and "NCCL" in f.at[job, "reason"]
        ck = rt[(rt["job_id"] == job) & (rt["checkpoint_time_s"] > 0) & (rt["ts"] < I0)]["ts"].max()
        worked = (I0 - (ck + MIN)) / MIN  # progress since the last checkpoint before the hang
        lost = f.at[job, "lost_gpu_minutes"] / f.at[job, "gpus"] - 1  # the failure minute itself counted once
        assert lost == pytest.approx(worked, abs=2), job
    # the 5-minute series books failure_loss only in the failure's own partition (settlement moves the rest)
    fl = run.leaves[(run.leaves["state"] == "failure_loss") & run.leaves["node_id"].isin(nodes)]
    assert set(fl["partition_start"]) == {own}
    held = hung_rows[(hung_rows["ts"] >= own)]
    assert 0 < fl["gpu_minutes"].sum() <= len(held)
    assert quiet.total("failure_loss", node_id=nodes) == 0


def test_maintenance_is_the_drained_nodes_gpus_for_the_window(sim):
    run, quiet = sim("maintenance"), sim()
    nodes = run.label()["node_ids"]
    gpus = run.scen.cluster.nodes.set_index("node_id").loc[nodes, "gpus"].sum()
    assert run.total("maintenance") == pytest.approx(gpus * INCIDENT_MINUTES, abs=1e-6)
    assert run.total("maintenance", node_id=nodes) == run.total("maintenance")
    assert run.total("hw_unavailable") == 0 and quiet.total("maintenance") == 0


def test_gpu_ecc_fault_makes_its_node_hw_unavailable(sim):
    run, quiet = sim("gpu_ecc_fault"), sim()
    (node,) = run.label()["node_ids"]
    g = run.frames["gpu_telemetry"]
    on_node = g[(g["node_id"] == node) & (g["ts"] >= I0) & (g["ts"] < I1)]
    hw = run.total("hw_unavailable", node_id=node)
    assert run.total("hw_unavailable") == hw  # nowhere else
    # the faulted GPU is lost for the whole incident; the drained node's free GPUs are unavailable too
    assert hw >= INCIDENT_MINUTES
    free = float(on_node["job_id"].isna().sum())
    gpus_on_node = on_node["gpu_uuid"].nunique()
    assert abs(hw - free) <= gpus_on_node  # the onset minute: the node is not drained yet
    hw_parts = set(run.leaves.loc[run.leaves["state"] == "hw_unavailable", "partition_start"])
    assert hw_parts == {p for p in PARTITIONS if p + FIVE > I0 and p < I1}
    assert run.failures["reason"].astype(str).str.contains("Xid 48").any()
    assert quiet.total("hw_unavailable") == 0


def test_gpu_fell_off_bus_is_hw_unavailable_on_its_node_not_no_data(sim):
    run = sim("gpu_fell_off_bus")
    (node,) = run.label()["node_ids"]
    lost_gpus = len(run.label()["gpu_uuids"])
    assert run.total("hw_unavailable", node_id=node) == pytest.approx(lost_gpus * INCIDENT_MINUTES, abs=1e-6)
    assert run.total("hw_unavailable") == run.total("hw_unavailable", node_id=node)
    assert run.total("no_data") == 0


def test_collector_outage_is_no_data_never_hw_unavailable(sim):
    run, quiet = sim("collector_outage"), sim()
    region = run.inc.region
    gpus = run.scen.cluster.gpus
    region_gpus = int((gpus["region"] == region).sum())
    assert run.total("no_data") == pytest.approx(region_gpus * INCIDENT_MINUTES, abs=1e-6)
    assert run.total("no_data", region=region) == run.total("no_data")
    assert run.total("hw_unavailable") == quiet.total("hw_unavailable") == 0


def test_unseen_capacity_is_no_data_while_its_region_is_silent_and_hardware_otherwise(sim):
    """Finance pays for more GPUs than the inventory has seen (node 'unseen'): in the minutes the region's
    collector is silent they are missing data like the rest of the region, never hardware; in the
    minutes it reports they are hw_unavailable. The other region's unseen GPUs stay hardware throughout."""
    outage = sim("collector_outage")
    region, other = outage.inc.region, "us-east"
    extra = 24  # unseen GPUs per (region, SKU)
    run = sim.states(outage.scen, outage.frames, outage.capacity.assign(capacity_gpus=outage.capacity["capacity_gpus"] + extra))
    minutes = (E - S) / MIN
    skus = run.capacity.loc[run.capacity["region"] == region, "sku"].nunique()
    assert run.total("no_data", node_id="unseen", region=region) == pytest.approx(extra * skus * INCIDENT_MINUTES, abs=1e-6)
    assert run.total("hw_unavailable", node_id="unseen", region=region) == pytest.approx(
        extra * skus * (minutes - INCIDENT_MINUTES), abs=1e-6)
    # minute by minute: the partition the outage starts in (10:05-10:10, silent from 10:07) splits 2 / 3
    first = run.leaves[(run.leaves["partition_start"] == I0.floor("5min")) & (run.leaves["node_id"] == "unseen")
                       & (run.leaves["region"] == region)].groupby("state")["gpu_minutes"].sum()
    assert first.to_dict() == pytest.approx({"hw_unavailable": extra * skus * 2.0, "no_data": extra * skus * 3.0})
    assert run.total("no_data", region=other) == 0
    assert run.total("hw_unavailable", node_id="unseen", region=other) == pytest.approx(extra * skus * minutes, abs=1e-6)
    # still every paid GPU-minute in exactly one state
    got = run.leaves.groupby(["partition_start", "region", "sku"])["gpu_minutes"].sum()
    paid = run.capacity.set_index(["region", "sku"])["capacity_gpus"].astype(float) * 5
    np.testing.assert_allclose(got.to_numpy(), [paid[(r, s)] for _, r, s in got.index], rtol=1e-9)
    assert len(got) == len(PARTITIONS) * len(paid)


@pytest.mark.parametrize("kind", ["priority_change", "fragmentation"])
def test_scheduling_incidents_raise_idle_blocked(sim, kind):
    run, quiet = sim(kind), sim()
    inside = [p for p in PARTITIONS if p + FIVE > I0 and p < I1]
    blocked, blocked_quiet = run.total("idle_blocked", partition_start=inside), quiet.total("idle_blocked", partition_start=inside)
    assert blocked > 1.3 * blocked_quiet, (blocked, blocked_quiet)


def test_driver_regression_failures_land_in_failure_loss_on_the_upgraded_cohort(sim):
    run, quiet = sim("driver_regression"), sim()
    nodes = run.label()["node_ids"]
    assert run.total("failure_loss", node_id=nodes) > quiet.total("failure_loss", node_id=nodes) + 50
    new = run.label()["driver_version"]
    assert run.total("failure_loss", driver_version=new) > 0
    reasons = run.failures.loc[run.failures["failed_at"] >= I0, "reason"].astype(str)
    assert reasons.str.contains("Xid 13|Xid 31|Xid 119|NCCL error").sum() >= 5


# --- 6. a range run equals partition runs ----------------------------------------------------------

def fill_warehouse(url: str, scen, start, end, history=HISTORY) -> Warehouse:
    """What pipeline.goodput reads: sources of [start - history, end) (scheduler events and job metadata
    over the pipeline's lookbacks), cost, maintenance, node inventory, workload step stats, and the
    baselines of [start, end)."""
    wh = Warehouse(url)
    h0 = start - history
    tables = Window(scen, h0, end).tables()
    running = set(tables["gpu_telemetry"]["job_id"].dropna()) | set(tables["scheduler_events"]["job_id"])
    old = Window(scen, start - T.META_LOOKBACK, h0).table("job_metadata")
    # of the metadata before the history only the jobs still running matter (writing 4 days costs seconds)
    tables["job_metadata"] = pd.concat([old[old["job_id"].isin(running)], tables["job_metadata"]], ignore_index=True)
    # scheduler events over the pipeline's lookback (pending demand, queues, job starts) and an hour more
    sched_from = start - T.SCHED_LOOKBACK - pd.Timedelta(hours=1)
    older = Window(scen, sched_from, h0).table("scheduler_events")
    tables["scheduler_events"] = pd.concat([older, tables["scheduler_events"]], ignore_index=True)
    for name, frame in tables.items():
        wh.replace_window(name, frame, start - T.META_LOOKBACK, end)
    day = start.normalize()
    wh.replace_window("cost_capacity", cost_capacity(scen, day), day, day + pd.Timedelta(days=1))
    wh.replace_window("maintenance_windows", maintenance_windows(scen), None, None)
    wh.replace_window("node_inventory", T.node_inventory(tables), h0, end)
    wh.replace_window("workload_step_stats", T.step_stats(inputs_for("workload_step_stats", wh, h0, end), frames=tables), h0, end)
    wh.replace_window("step_time_baselines", T.step_baselines(inputs_for("step_time_baselines", wh, start, end)), start, end)
    return wh


def _at(minutes) -> pd.Timestamp:
    return S + pd.Timedelta(minutes=minutes)


@pytest.fixture(scope="module")
def range_and_partitions(tmp_path_factory):
    """Incidents that start, end and fail jobs inside partitions, computed over the hour and one partition at a time."""
    scen = scenario(
        {"kind": "thermal_throttle", "start": _at(7).isoformat(), "end": _at(47).isoformat(), "scope": {"region": "us-east", "nodes": 2}},
        {"kind": "driver_regression", "start": _at(3).isoformat(), "end": _at(33).isoformat(), "scope": {"region": "us-east", "nodes": 8}},
        {"kind": "training_stall", "start": _at(12).isoformat(), "end": _at(38).isoformat(), "scope": {"region": "eu-west", "nodes": 6}},
        {"kind": "maintenance", "start": _at(21).isoformat(), "end": _at(52).isoformat(), "scope": {"region": "eu-west", "nodes": 2}},
        {"kind": "gpu_fell_off_bus", "start": _at(17).isoformat(), "end": _at(57).isoformat(), "scope": {"region": "us-east", "nodes": 1}},
    )
    wh = fill_warehouse(f"sqlite:///{tmp_path_factory.mktemp('goodput') / 'wh.db'}", scen, S, E)
    ranged = T.goodput(inputs_for("goodput", wh, S, E))
    parts = [T.goodput(inputs_for("goodput", wh, p, p + FIVE)) for p in PARTITIONS]
    return ranged, parts


LEAF_KEY = ["partition_start", *G.LEAF_DIMS, "state"]


def test_a_range_equals_its_partitions_computed_one_at_a_time(range_and_partitions):
    (leaves, failures), parts = range_and_partitions
    by_parts = pd.concat([p[0] for p in parts], ignore_index=True)
    both = leaves.merge(by_parts, on=LEAF_KEY, how="outer", suffixes=("_range", "_parts"), indicator=True)
    only = both[both["_merge"] != "both"]
    assert only.empty, only[LEAF_KEY + ["gpu_minutes_range", "gpu_minutes_parts"]].head(20).to_string()
    np.testing.assert_allclose(both["gpu_minutes_range"], both["gpu_minutes_parts"], rtol=1e-9, atol=1e-9)
    # the hour had something of every kind the scenario injected
    states = set(leaves["state"])
    assert {"failure_loss", "maintenance", "hw_unavailable", "slowdown_compute", "allocated_idle"} <= states


def test_job_failures_of_a_range_equal_its_partitions(range_and_partitions):
    (_, failures), parts = range_and_partitions
    by_parts = pd.concat([p[1] for p in parts], ignore_index=True)
    assert len(failures) > 20
    cols = sorted(failures.columns)
    a = failures[cols].sort_values("job_id").reset_index(drop=True)
    b = by_parts[cols].sort_values("job_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, check_dtype=False)
    assert (a[["region", "sku", "team", "workload_class"]] != "unknown").all().all()


def test_a_queue_maps_to_the_region_of_at_least_95_percent_of_its_placements():
    # q1: 19 of 20 placements in us-east (95 %); q2: 18 of 20 (90 %: shared); q3: one unknown node, rest us-west
    queue = pd.Series(["q1"] * 20 + ["q2"] * 20 + ["q3"] * 3 + [None])
    nodes = pd.Series(["e1"] * 19 + ["w1"] + ["e2"] * 18 + ["w1"] * 2 + ["zz", "w2", "w2"] + ["e1"])
    node_region = {"e1": "us-east", "e2": "us-east", "w1": "us-west", "w2": "us-west"}
    assert G._queue_regions_of(queue, nodes, node_region) == {"q1": "us-east", "q3": "us-west"}
    # the same answer as the crosstab definition of the share
    share = pd.crosstab(queue.astype(object), nodes.map(node_region).astype(object), normalize="index")
    best = share.idxmax(axis=1)
    assert G._queue_regions_of(queue, nodes, node_region) == {q: r for q, r in best.items() if share.loc[q, r] >= 0.95}
    assert G._queue_regions_of(pd.Series(["q1"]), pd.Series(["zz"]), node_region) == {}


def test_a_rows_job_is_known_as_its_partitions_own_run_knows_it():
    """Queue and metadata of a job as a partition's live run reads them: events and metadata of the look-back
    before the partition's start or in it; never later ones (which a day's run also holds), never older ones."""
    t0 = pd.Timestamp("2026-11-03T10:00:00Z")
    minute = pd.Timedelta(minutes=1)
    look = G.JOB_ATTRIBUTE_LOOKBACK
    events = pd.DataFrame({
        "ts": [t0 + 7 * minute, t0 + 8 * minute, t0 - look - 10 * minute, t0 + 2 * minute],
        "job_id": ["b", "b", "old", "old"], "event": ["submitted", "started", "submitted", "started"],
        "queue": ["qb", "qb2", "q_first", "q_later"]})
    meta = pd.DataFrame({"job_id": ["b", "old"], "submitted_at": [t0 + 7 * minute, t0 - look - 10 * minute],
                         "team": ["tb", "to"], "workload_class": ["batch", "batch"], "model_type": ["m", "m"],
                         "framework_version": ["1", "1"]})
    job_uni = pd.Index(["b", "old"], dtype=object)
    lookup = G.job_lookup(meta, None).reindex(job_uni)
    # rows: b in the 10:00 partition (before its events) and in 10:05; 'old' in 10:00
    t_idx, jj = np.array([1, 6, 1]), np.array([0, 0, 1])
    submitted = G.submitted_ns(meta)
    row_attr, attr_uni, meta_known = G._row_attributes(t0, t_idx, jj, job_uni, lookup, submitted, events)
    cols = ["team", "workload_class", "model_type", "framework_version", "queue"]
    named = [dict(zip(cols, attr_uni[c - 1])) for c in row_attr]
    # b: submitted at minute 7 -- unknown to the 10:00 partition, known (its first event's queue) to 10:05
    assert named[0]["queue"] == "unknown" and named[0]["team"] == "unknown" and not meta_known[0]
    assert named[1]["queue"] == "qb" and named[1]["team"] == "tb" and meta_known[1]
    # old: submitted before the look-back: its metadata unknown, its queue that of its first event in the span
    assert named[2]["team"] == "unknown" and not meta_known[2]
    assert named[2]["queue"] == "q_later"
    # without the events after the 10:05 partition (its live run's read): the same answer
    seen = events[events["ts"] < t0 + 10 * minute]
    again_attr, again_uni, _ = G._row_attributes(t0, t_idx, jj, job_uni, lookup, submitted, seen)
    assert [attr_uni[c - 1] for c in row_attr] == [again_uni[c - 1] for c in again_attr]


def test_a_job_reports_in_a_partition_when_it_wrote_a_row_in_the_hour_before_the_partition_ends():
    """A busy minute without a runtime row is a reporting job's (productive) only when the job wrote a row in
    REPORTING_MEMORY before the partition's end: never because it reports later in a longer window."""
    t0 = pd.Timestamp("2026-11-03T10:00:00Z")
    minute = pd.Timedelta(minutes=1)
    job_uni = pd.Index(["a", "b", "c"], dtype=object)
    runtime = pd.DataFrame({"ts": [t0 + 3 * minute, t0 + 12 * minute], "job_id": ["a", "b"]})
    history = pd.DataFrame({"ts": [t0 - G.REPORTING_MEMORY - minute, t0 - 2 * minute], "job_id": ["c", "c"]})
    # a at minutes 0 and 6: reports from its first partition on (its row at minute 3), and in the next;
    # b at minute 2: its first row is in a later partition; c at 1: a row 2 minutes before the window
    t_idx, jj = np.array([0, 6, 2, 1]), np.array([0, 0, 1, 2])
    got = G._reports_at_partition_end(t0, t_idx, jj, runtime, history, job_uni, 15)
    assert got.tolist() == [True, True, False, True]
    # c's row of 2 minutes before gone: its older row is out of the memory at the 10:00 partition's end
    got = G._reports_at_partition_end(t0, t_idx, jj, runtime, history.iloc[:1], job_uni, 15)
    assert got.tolist() == [True, True, False, False]


def test_a_job_waiting_longer_than_a_partitions_look_back_is_no_demand_of_it():
    """A partition's own run reads the scheduler events of SCHED_LOOKBACK before its start: a job submitted
    earlier and still waiting is not in them, so it is no demand of that partition in any run, however long."""
    t0 = pd.Timestamp("2026-11-03T10:00:00Z")
    sub = t0 - G.SCHED_LOOKBACK + pd.Timedelta(minutes=2)  # seen by the 10:00 run, not by the 10:05 one
    sched = pd.DataFrame({"ts": [sub, t0 - pd.Timedelta(hours=1)], "job_id": ["old", "new"],
                          "event": ["submitted", "submitted"], "gpus": [8, 2], "queue": ["q", "q"]})
    pending = G.pending_gpus(sched, pd.date_range(t0, periods=10, freq="1min"))[None]
    assert pending.tolist() == [10.0] * 5 + [2.0] * 5


@pytest.mark.parametrize("universe", [["n1", "n2", None], ["n1", "n2"], [], [np.nan, "n3"]])
def test_codes_are_the_positions_get_indexer_gives(universe):
    """goodput._codes looks up each distinct value once: the same positions as the universe's get_indexer on every
    row, missing values (None, NaN, NA) included, whether the universe holds a missing value or not."""
    from gpu_health.metrics.goodput import _codes

    rng = np.random.default_rng(11)
    values = np.array(["n1", "n2", "n3", None, np.nan], dtype=object)[rng.integers(0, 5, 500)]
    index = pd.Index(universe, dtype=object)
    for column in (values, pd.Series(values).astype("string"), values[:0]):
        want = index.get_indexer(pd.Index(np.asarray(column, dtype=object)))
        np.testing.assert_array_equal(_codes(column, index), want)


# --- paid GPU-minutes come from Finance's capacity, never from the rows that arrive ------------------

PHANTOM = S + pd.Timedelta(minutes=20)  # the partition whose GPU file carries the phantom rows


def with_phantoms(frames: dict, copies: int = 9, at: pd.Timestamp = PHANTOM) -> dict:
    """``frames`` with one partition's GPU rows copied ``copies`` times under new GPU UUIDs and node names
    (a GPU file with 10x the rows: a collector or uploader replaying its buffer under fresh identities)."""
    gpu = frames["gpu_telemetry"]
    part = gpu[(gpu["ts"] >= at) & (gpu["ts"] < at + FIVE)]
    copied = [part.assign(node_id=part["node_id"].astype(str) + f"-copy{k}",
                          gpu_uuid=part["gpu_uuid"].astype(str) + f"-copy{k}") for k in range(copies)]
    out = dict(frames)
    out["gpu_telemetry"] = pd.concat([gpu, *copied], ignore_index=True).astype(gpu.dtypes.to_dict())
    return out


def test_phantom_gpu_rows_are_not_paid_beyond_finances_capacity(sim):
    """A partition's GPU file with 10x the rows (copies under new UUIDs and nodes): the GPUs seen exceed what
    Finance installed tenfold, and the inventory keeps the phantom nodes for a day. Paid stays Finance's capacity
    in that partition (and every other one); the states keep their shares, so goodput holds."""
    quiet = sim()
    run = sim.states(quiet.scen, with_phantoms(quiet.frames), quiet.capacity)
    got = run.leaves.groupby(["partition_start", "region", "sku"])["gpu_minutes"].sum()
    paid = run.capacity.set_index(["region", "sku"])["capacity_gpus"].astype(float) * 5
    np.testing.assert_allclose(got.to_numpy(), [paid[(r, s)] for _, r, s in got.index], rtol=1e-9)
    assert len(got) == len(PARTITIONS) * len(paid)
    before = G.goodput_ratio(quiet.leaves).set_index("partition_start")["goodput"]
    after = G.goodput_ratio(run.leaves).set_index("partition_start")["goodput"]
    # the copies are of real GPUs: the phantom partition's goodput is the quiet one's, the rest untouched
    assert after[PHANTOM] == pytest.approx(before[PHANTOM], rel=0.05)
    pd.testing.assert_series_equal(after.drop(PHANTOM), before.drop(PHANTOM))

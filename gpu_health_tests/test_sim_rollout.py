"""A driver upgrade rolled out in drained waves (gpu_health.sim.rollout): what each wave leaves in the sources,
the jobs it breaks, the requeues, the ground truth, and that a scenario without the option is simulated as before.

One window (08:45-11:45 UTC, Tuesday 2026-11-03) of the messy profile at a quarter of its size; the rollout's
first wave drains at 09:07, five waves 20 minutes apart, the rollback at 11:07.
"""

import json

import pandas as pd
import pytest

from gpu_health.contracts.models import FIVE_MINUTE_SOURCES, PARTITION_COLUMN
from gpu_health.contracts.validate import validate_frame
from gpu_health.sim.labels import labels_frame
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window

WEEK = {"start": "2026-11-02T00:00:00Z", "end": "2026-11-09T00:00:00Z"}
CLUSTER = {"profile": "messy", "gpus": 480}
S = pd.Timestamp("2026-11-03T09:07:00Z")
E = S + pd.Timedelta(hours=2)
W0, W1 = pd.Timestamp("2026-11-03T08:45:00Z"), pd.Timestamp("2026-11-03T11:45:00Z")
MIN = pd.Timedelta(minutes=1)
DRAIN = pd.Timedelta(minutes=8)
FAIL_WITHIN = pd.Timedelta(minutes=5)
XIDS = {13, 31, 119}
ROLLOUT = {"waves": 5, "every": "20m", "drain": "8m", "fail_within": "5m", "failure_xids": sorted(XIDS), "requeue": 0.4}
DRIVER_REASON = r"^Xid (?:13|31|119)|unhandled cuda error|unspecified launch failure|exit code 1"


def incident(**extra):
    return {"kind": "driver_regression", "start": S.isoformat(), "end": E.isoformat(), "magnitude": 0.5,
            "scope": {"fraction": 0.25}, "to_version": "560.35.03", **extra}


def scenario(*incidents):
    return load_scenario({"seed": 11, **WEEK, "cluster": CLUSTER, "incidents": list(incidents)})


@pytest.fixture(scope="module")
def rollout():
    scen = scenario(incident(rollout=ROLLOUT))
    return scen, Window(scen, W0, W1).tables()


def _on(node_ids: pd.Series, nodes) -> pd.Series:
    nodes = set(nodes)
    return node_ids.fillna("").str.split(",").map(lambda ns: bool(nodes & set(ns)))


def test_each_wave_is_drained_upgraded_and_returned(rollout):
    scen, t = rollout
    inc = scen.incidents[0]
    waves = inc.waves()
    assert len(waves) == 5 and [ts for ts, _ in waves] == [S + k * 20 * MIN for k in range(5)]
    nodes = [set(part) for _, part in waves]
    assert all(not (a & b) for i, a in enumerate(nodes) for b in nodes[i + 1:])
    assert set().union(*nodes) == set(inc.node_ids)
    assert abs(len(inc.node_ids) - 0.25 * len(scen.cluster.nodes)) <= 1
    ce = t["change_events"]
    assert ce["event_id"].tolist() == [f"inc-001-driver_regression-deploy-w{k}" for k in range(1, 6)] + \
        ["inc-001-driver_regression-rollback"]
    assert (ce["kind"] == "driver_upgrade").all() and ce["ts"].tolist() == [ts for ts, _ in waves] + [E]
    n, g, ev = t["node_telemetry"], t["gpu_telemetry"], t["scheduler_events"]
    started = ev[ev["event"] == "started"]
    for ts, part in waves:
        mine = n[n["node_id"].isin(part)]
        drain = (mine["ts"] >= ts) & (mine["ts"] < ts + DRAIN)
        assert (mine.loc[drain, "health"] == "drained").all()
        assert (mine.loc[(mine["ts"] >= ts + DRAIN) & (mine["ts"] < E), "driver_version"] == "560.35.03").all()
        assert (mine.loc[mine["ts"] < ts, "driver_version"] != "560.35.03").all()
        assert (mine.loc[mine["ts"] >= E, "driver_version"] != "560.35.03").all()  # rolled back
        # no job starts on a node while it drains; the GPUs are unavailable while the driver installs
        assert not (_on(started["node_ids"], part) & (started["ts"] >= ts) & (started["ts"] < ts + DRAIN)).any()
        assert not (g["node_id"].isin(part) & (g["ts"] >= ts + MIN) & (g["ts"] < ts + DRAIN - MIN)).any()
        # and jobs start there again once it returns
        assert (_on(started["node_ids"], part) & (started["ts"] >= ts + DRAIN)).any()
    # the Slurm jobs running at a drain are requeued, not ended, and run again (same job_id) after it
    drained = ev[(ev["event"] == "requeued") & (ev["reason"] == "node drained for driver upgrade")]
    assert len(drained) > 0 and drained["exit_state"].isna().all()
    again = started[started["event_id"].str.endswith("#1") & started["job_id"].isin(drained["job_id"])]
    assert len(again) > 0.8 * len(drained)
    first = pd.Series(dict(zip(drained["job_id"], drained["ts"])))
    assert (again["ts"].to_numpy() >= first[again["job_id"]].to_numpy() + DRAIN).all()


def _runs(ev: pd.DataFrame, nodes) -> pd.DataFrame:
    """One row per run (a job's start and the end or requeue that closes it) started on ``nodes``."""
    ev = ev.assign(run=ev["event_id"].str.extract(r"(#\d+)$")[0].fillna(""))
    st = ev[ev["event"] == "started"].set_index(["job_id", "run"])
    end = ev[ev["event"].isin(["ended", "requeued"])].set_index(["job_id", "run"])
    runs = st[["ts", "node_ids"]].join(end[["ts", "event", "exit_state", "reason"]], rsuffix="_end", how="inner")
    return runs[_on(runs["node_ids"], nodes)]


def test_half_of_the_jobs_starting_on_upgraded_nodes_fail_within_minutes_with_their_xid(rollout):
    scen, t = rollout
    inc = scen.incidents[0]
    ev, g = t["scheduler_events"], t["gpu_telemetry"]
    returned = {n: ts + DRAIN for ts, part in inc.waves() for n in part}
    runs = _runs(ev, inc.node_ids)
    back = runs["node_ids"].str.split(",").map(lambda ns: min(returned.get(x, E) for x in ns))
    exposed = runs[(runs["ts"] >= back) & (runs["ts"] < E)]
    died = exposed["reason"].fillna("").str.contains(DRIVER_REASON) & (exposed["ts_end"] - exposed["ts"] <= FAIL_WITHIN)
    assert len(exposed) >= 60
    assert died.mean() == pytest.approx(inc.magnitude, abs=0.12)
    # a driver failure is a failed run or a requeued one: some of them run again
    assert set(exposed.loc[died, "exit_state"].dropna()) == {"failed"}
    assert (exposed.loc[died, "event"] == "requeued").mean() > 0.1
    # the GPUs of a run the driver killed raise a failure Xid in the minute it dies
    xid = g[g["xid"] > 0].assign(minute=lambda d: d["ts"].dt.floor("min"))
    for (_, run) in exposed[died].head(30).iterrows():
        hit = xid[xid["node_id"].isin(run["node_ids"].split(",")) & (xid["minute"] == run["ts_end"].floor("min"))]
        assert len(hit) > 0 and set(hit["xid"]) <= XIDS
    # elsewhere, and before the waves, jobs fail as they always do
    other = _runs(ev, set(scen.cluster.nodes["node_id"]) - set(inc.node_ids))
    assert (other["reason"].fillna("").str.contains(DRIVER_REASON)).mean() < 0.05
    assert (other["exit_state"] == "failed").mean() < 0.15
    before = _runs(ev[ev["ts"] < S], inc.node_ids)
    assert not before["reason"].fillna("").str.contains("unhandled cuda error|unspecified launch failure").any()


def test_the_rollout_tables_keep_their_contracts_and_one_row_per_job(rollout):
    _, t = rollout
    for table in ("scheduler_events", "gpu_telemetry", "job_metadata", "change_events"):
        result = validate_frame(t[table], table)
        assert result.rejects.empty, (table, result.rejects.head())
    ev = t["scheduler_events"]
    assert ev["event_id"].is_unique and (ev.loc[ev["event"] == "submitted", "job_id"].value_counts() == 1).all()
    assert t["job_metadata"]["job_id"].is_unique


def test_labels_one_software_incident_from_the_first_wave_to_the_rollback(rollout):
    scen, _ = rollout
    lab = labels_frame(scen)
    assert lab[["kind", "family", "start", "end"]].values.tolist() == [["driver_regression", "software", S, E]]
    scope = json.loads(lab["scope"].iloc[0])
    assert sorted(scope["node_ids"]) == sorted(scen.incidents[0].node_ids)
    assert scope["driver_version"] == "560.35.03"


@pytest.mark.parametrize("table", FIVE_MINUTE_SOURCES)
def test_a_partition_alone_equals_the_same_minutes_of_the_rollout_window(rollout, table):
    """Requeues and failures are pure functions of the job: a 5-minute slot generated alone in a fresh scenario
    (a wave's drain and return, the late failures and reruns, after the rollback) equals the window's minutes."""
    _, t = rollout
    col = PARTITION_COLUMN[table]
    for start in ("2026-11-03T09:15:00Z", "2026-11-03T10:50:00Z", "2026-11-03T11:10:00Z"):
        lo = pd.Timestamp(start)
        alone = Window(scenario(incident(rollout=ROLLOUT)), lo, lo + 5 * MIN).table(table)
        whole = t[table]
        pd.testing.assert_frame_equal(alone, whole[(whole[col] >= lo) & (whole[col] < lo + 5 * MIN)].reset_index(drop=True))


def test_without_the_option_the_simulation_is_unchanged():
    """The rollout option changes nothing outside its own span, and a driver_regression without it (every
    existing scenario) is simulated exactly as one written with ``rollout: null``."""
    lo = pd.Timestamp("2026-11-03T08:00:00Z")
    quiet = Window(scenario(), lo, lo + 30 * MIN).tables()
    ahead = Window(scenario(incident(rollout=ROLLOUT)), lo, lo + 30 * MIN).tables()
    for table in FIVE_MINUTE_SOURCES:
        pd.testing.assert_frame_equal(ahead[table], quiet[table])
    plain = Window(scenario(incident()), S, S + 20 * MIN).tables()
    null = Window(scenario(incident(rollout=None)), S, S + 20 * MIN).tables()
    for table in FIVE_MINUTE_SOURCES:
        pd.testing.assert_frame_equal(plain[table], null[table])
    assert not plain["scheduler_events"]["event"].isin(["requeued"]).any()
    assert not plain["scheduler_events"]["event_id"].str.contains("#").any()


@pytest.mark.parametrize("rollout, message", [
    ({"waves": 3, "drain": "1m"}, "drain '1m' is under 2 minutes"),
    ({"wave": 3}, r"unknown rollout key\(s\) \['wave'\]"),
    ({"requeue": 2}, "0 <= requeue <= 1"),
    ("waves", "rollout must be a mapping"),
])
def test_rollout_errors_are_clear(rollout, message):
    with pytest.raises(ValueError, match=message):
        scenario(incident(rollout=rollout))

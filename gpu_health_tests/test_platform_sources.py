"""The platform layer's source tables: kube_pods / kube_nodes contracts, simulator rows, optional.

A cluster without Kubernetes data must run exactly as before: the knob off gives zero rows, an absent landing file is
zero rows (never a wait); the knob on gives valid rows derived from the simulated jobs, and each platform incident
leaves its mark where a real one would.
"""

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.models import OPTIONAL_SOURCES, PLATFORM_SOURCES, empty_frame
from gpu_health.contracts.validate import validate_frame
from gpu_health.landing import write_partition
from gpu_health.sim.platform import BACKOFF_CAP_S, GPU_TAINT, fallback_jobs, restarts_after
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window
from gpu_health.sources.landing import LandingSource
from gpu_health.sources.read import read_window

T0 = pd.Timestamp("2026-11-03T10:00:00Z")
T1 = T0 + pd.Timedelta(minutes=10)
UTC = "datetime64[ns, UTC]"


def _validate(frame, table, start=T0, end=T1):
    return validate_frame(frame, table, start=start, end=end, origin="test")


def ksm_pods() -> pd.DataFrame:
    """Rows as an adapter builds them from kube-state-metrics v2 series and the event stream of one minute:
    ``kube_pod_status_phase{phase=...} == 1``, ``kube_pod_info{node=...}``,
    ``kube_pod_container_status_waiting_reason{reason="CrashLoopBackOff"}``,
    ``kube_pod_status_unschedulable``, ``kube_pod_container_resource_requests{resource="nvidia_com_gpu"}``,
    ``kube_pod_container_status_restarts_total``, and the scheduler's FailedScheduling event message."""
    ts = pd.Timestamp("2026-11-03T10:01:00Z")
    return pd.DataFrame({
        "ts": [ts] * 4, "region": ["us-east"] * 4,
        "namespace": ["fraud-ml", "fraud-ml", "research", "kube-system"],
        "pod": ["train-xgb-7d9f-0", "train-llm-0", "notebook-5c7b", "nvidia-device-plugin-daemonset-x2k8q"],
        "node_id": [None, "use-h100-003", "use-h100-004", "use-h100-004"],
        "phase": ["Pending", "Running", "Running", "Running"],
        "reason": ["Unschedulable", "CrashLoopBackOff", None, None],
        "message": ["0/80 nodes are available: 80 node(s) had untolerated taint {nvidia.com/gpu: }. preemption: "
                    "0/80 nodes are available: 80 Preemption is not helpful for scheduling.",
                    "Back-off restarting failed container trainer in pod train-llm-0_fraud-ml", None, None],
        "gpu_request": [8, 8, 0, 0], "restarts": [0, 5, 0, 1],
        "job_id": ["train-xgb-7d9f", "train-llm", None, None],
        "container_image": ["registry.internal/fraud/xgb:1.2", "registry.internal/fraud/llm:0.9",
                            "jupyter/scipy-notebook:2024-05-20", "nvcr.io/nvidia/k8s-device-plugin:v0.15.0"],
    })


def ksm_nodes() -> pd.DataFrame:
    """``kube_node_status_capacity`` / ``_allocatable{resource="nvidia_com_gpu"}``, ``kube_node_spec_taint``,
    ``kube_node_status_condition{condition="Ready",status="true"}``, ``kube_node_spec_unschedulable``."""
    ts = pd.Timestamp("2026-11-03T10:01:00Z")
    return pd.DataFrame({
        "ts": [ts] * 3, "region": ["us-east"] * 3, "node_id": ["use-h100-003", "use-h100-004", "use-cpu-001"],
        "gpu_capacity": [8, 8, 0], "gpu_allocatable": [8, 0, 0],
        "taints": ["nvidia.com/gpu=present:NoSchedule", "nvidia.com/gpu=present:NoSchedule", None],
        "ready": [True, True, True], "unschedulable": [False, False, False],
    })


def test_kube_state_metrics_shaped_rows_meet_the_contracts():
    for frame, table in ((ksm_pods(), "kube_pods"), (ksm_nodes(), "kube_nodes")):
        v = _validate(frame, table)
        assert len(v.rejects) == 0, v.rejects.to_string()
        assert len(v.valid) == len(frame)
    assert set(PLATFORM_SOURCES) <= set(OPTIONAL_SOURCES)


def test_broken_kube_rows_are_rejected_by_name():
    pods = ksm_pods()
    pods.loc[1, "node_id"] = None          # a Running pod bound to no node
    pods.loc[2, "phase"] = "Evicted"       # a reason, not a phase
    pods.loc[3, "restarts"] = -1
    v = _validate(pods, "kube_pods")
    assert set(v.rejects["row_index"]) == {1, 2, 3}
    assert "running_pod_is_placed" in set(v.rejects["check"])
    nodes = ksm_nodes()
    nodes.loc[0, "gpu_allocatable"] = 9    # more allocatable than installed
    v = _validate(nodes, "kube_nodes")
    assert set(v.rejects["row_index"]) == {0} and "allocatable_within_capacity" in set(v.rejects["check"])


def test_platform_off_by_default():
    for cluster in ("default", "messy"):
        scen = load_scenario({"seed": 7, "cluster": cluster})
        assert not set(PLATFORM_SOURCES) & set(Window(scen, T0, T0 + pd.Timedelta(minutes=5)).tables())
        win = Window(scen, T0, T0 + pd.Timedelta(minutes=5))
        for table in PLATFORM_SOURCES:
            assert win.table(table).empty, (cluster, table)


@pytest.fixture(scope="module")
def incident_window():
    scen = load_scenario({
        "seed": 5, "start": "2026-11-03T09:00:00Z", "end": "2026-11-03T12:00:00Z",
        "cluster": {"gpus": 96, "platform": True},
        "incidents": [
            {"kind": "cpu_fallback", "start": "2026-11-03T10:00:00Z", "duration": "60m",
             "scope": {"region": "us-east", "nodes": 2, "pool": "batch"}},
            {"kind": "pods_pending_taint", "start": "2026-11-03T10:00:00Z", "duration": "60m", "scope": {"region": "eu-west"}},
            {"kind": "crash_loop", "start": "2026-11-03T10:00:00Z", "duration": "60m", "scope": {"region": "us-east", "nodes": 2}},
            {"kind": "device_plugin_missing", "start": "2026-11-03T10:00:00Z", "duration": "60m",
             "scope": {"region": "eu-west", "nodes": 1}},
        ]})
    return Window(scen, T0 - pd.Timedelta(minutes=5), T1)


def test_simulated_kube_rows_meet_their_contracts_and_follow_the_jobs(incident_window):
    win = incident_window
    pods, nodes = win.table("kube_pods"), win.table("kube_nodes")
    for frame, table in ((pods, "kube_pods"), (nodes, "kube_nodes")):
        v = _validate(frame, table, win.start, win.end)
        assert len(frame) and len(v.rejects) == 0, v.rejects.head().to_string()
    # every node every minute, tainted for GPUs
    assert len(nodes) == len(win.scen.cluster.nodes) * 15 and nodes["taints"].str.startswith(GPU_TAINT).all()
    # a running pod of a job sits on a node of the job's GPUs in the same minute (gpu_telemetry's mapping)
    gpu = win.table("gpu_telemetry")
    running = pods[(pods["phase"] == "Running") & pods["job_id"].str.startswith("j")]
    placed = gpu[["ts", "node_id", "job_id"]].drop_duplicates().astype({"node_id": object, "job_id": object})
    joined = running.astype({"node_id": object, "job_id": object}).merge(placed, on=["ts", "node_id", "job_id"], how="left", indicator=True)
    assert (joined["_merge"] == "both").mean() > 0.99
    # the requests of a job's pods add up to its GPUs outside the fallback
    healthy = running[running["ts"] < T0]
    per_job = healthy.groupby("job_id")["gpu_request"].sum()
    held = gpu[gpu["ts"] < T0].groupby(["ts", "job_id"])["gpu_uuid"].nunique().groupby("job_id").max()
    assert (per_job.index.isin(held.index)).all()
    assert (per_job.groupby(level=0).first() > 0).all()


def test_cpu_fallback_marks_pods_gpus_and_steps(incident_window):
    win = incident_window
    inc = win.scen.incidents[0]
    jobs = set(win.plan["job_id"].to_numpy()[fallback_jobs(win.scen, win.plan, inc)])
    assert jobs
    pods = win.table("kube_pods")
    during = pods[pods["job_id"].isin(jobs) & (pods["ts"] >= T0) & (pods["phase"] == "Running")]
    assert len(during) and (during["gpu_request"] == 0).all()
    before = pods[pods["job_id"].isin(jobs) & (pods["ts"] < T0) & (pods["phase"] == "Running")]
    assert (before["gpu_request"] > 0).all()
    gpu = win.table("gpu_telemetry")
    g = gpu[gpu["job_id"].isin(jobs) & (gpu["ts"] >= T0)]
    assert len(g) and (g["gpu_util_pct"] == 0).all()
    rt = win.table("job_runtime_metrics")
    r0 = rt[rt["job_id"].isin(jobs) & (rt["ts"] < T0) & (rt["steps"] > 0)]
    r1 = rt[rt["job_id"].isin(jobs) & (rt["ts"] >= T0) & (rt["steps"] > 0)]
    if len(r0) and len(r1):
        assert r1["step_time_s"].median() > 50 * r0["step_time_s"].median()


def test_taint_pending_crash_loop_and_missing_plugin(incident_window):
    win = incident_window
    pods, nodes = win.table("kube_pods"), win.table("kube_nodes")
    pending = pods[pods["reason"] == "Unschedulable"]
    assert pending["pod"].nunique() == 6 and (pending["ts"] >= T0).all() and pending["node_id"].isna().all()
    assert pending["message"].str.contains("untolerated taint {nvidia.com/gpu").all()
    # ordinary queueing never reads Unschedulable
    queued = pods[(pods["phase"] == "Pending") & ~pods["pod"].isin(pending["pod"])]
    assert (queued["reason"] == "SchedulingGated").all()
    loop = pods[pods["reason"] == "CrashLoopBackOff"].sort_values("ts")
    assert loop["pod"].nunique() == 4
    first10 = loop[loop["ts"] < T0 + pd.Timedelta(minutes=10)].groupby("pod")["restarts"].agg(["min", "max"])
    assert ((first10["max"] - first10["min"]) >= 3).all()
    assert (loop.groupby("pod")["restarts"].diff().dropna() >= 0).all()
    dead = nodes[nodes["gpu_allocatable"] == 0]
    assert set(dead["node_id"]) == set(win.scen.incidents[3].node_ids) and (dead["ts"] >= T0).all()


def test_back_off_restarts():
    # 10 s, 20 s, 40 s, ... capped at 5 minutes: restarts at 10, 30, 70, 150, 310, 610, 910 s
    assert list(restarts_after(np.array([0, 10, 29, 30, 600, 610, 909, 910]))) == [0, 1, 1, 2, 5, 6, 6, 7]
    late = restarts_after(np.array([3600, 3600 + BACKOFF_CAP_S]))
    assert late[1] - late[0] == 1


def test_absent_kube_landing_files_are_zero_rows(tmp_path):
    src = LandingSource(tmp_path)
    for table in PLATFORM_SOURCES:
        v, gaps = read_window(src, table, T0, T1)
        assert len(v.valid) == 0 and len(v.rejects) == 0 and gaps.empty
        assert list(v.valid.columns) == list(empty_frame(table).columns)
    write_partition(tmp_path, "kube_nodes", T0, ksm_nodes().assign(ts=T0))
    v, _ = read_window(src, "kube_nodes", T0, T1)
    assert len(v.valid) == 3


def test_messy_routine_refusals_are_the_schedulers_own_verdict_and_never_page():
    """The messy profile's everyday refusals (a batch of pods at once that drains, a whole-node pod) read
    "Insufficient" on every node only in minutes no node has the pod's request free, and page nothing."""
    from gpu_health.diagnosis.context import PartitionContext
    from gpu_health.diagnosis.platform import detect_pods_pending_gpu

    scen = load_scenario({"seed": 5, "start": "2026-11-03T09:00:00Z", "end": "2026-11-03T13:00:00Z",
                          "cluster": {"profile": "messy", "platform": True}})
    win = Window(scen, pd.Timestamp("2026-11-03T11:00:00Z"), pd.Timestamp("2026-11-03T11:50:00Z"))
    pods, nodes = win.table("kube_pods"), win.table("kube_nodes")
    refused = pods[(pods["reason"] == "Unschedulable") & pods["message"].str.contains("Insufficient nvidia.com/gpu")]
    per_minute = refused.groupby("ts").size()
    assert per_minute.max() >= 200 and per_minute.iloc[-1] < per_minute.max()  # a batch at once, then it drains
    batch = set(refused["pod"])
    assert pods[pods["pod"].isin(batch) & (pods["phase"] == "Running")]["pod"].nunique() > 100  # placed as it drains
    used = pods[pods["phase"] == "Running"].astype({"node_id": object}).groupby(["ts", "node_id"])["gpu_request"].sum()
    n = nodes.astype({"node_id": object})
    free = n.set_index(["ts", "node_id"])["gpu_allocatable"] - used.reindex(pd.MultiIndex.from_frame(n[["ts", "node_id"]])).fillna(0).to_numpy()
    free = free.rename("free").reset_index().merge(n[["ts", "node_id", "region"]], on=["ts", "node_id"])
    all_gpus = refused[refused["message"].str.match(r"0/(\d+) nodes are available: \1 Insufficient")]
    for (ts, region, need), _ in all_gpus.groupby(["ts", "region", "gpu_request"]):
        assert not (free[(free["ts"] == ts) & (free["region"] == region)]["free"] >= need).any()
    empty = pd.DataFrame()
    for k in range(10):
        start = win.start + k * pd.Timedelta(minutes=5)
        ctx = PartitionContext(
            start=start, end=start + pd.Timedelta(minutes=5), gpu=win.table("gpu_telemetry"), node=empty, network=empty,
            runtime=empty, sched=empty, changes=empty, maintenance=empty, leaves=empty, baselines=empty, meta=empty,
            inventory=scen.cluster.nodes, region_history=empty, kube_pods=pods[pods["ts"] < start + pd.Timedelta(minutes=5)],
            kube_nodes=nodes[(nodes["ts"] >= start) & (nodes["ts"] < start + pd.Timedelta(minutes=5))])
        assert "page" not in {f.severity for f in detect_pods_pending_gpu(ctx)}

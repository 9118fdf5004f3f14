"""The platform detectors on small hand-built frames: each pages on its two witnesses, tickets on one,
stays silent on ordinary queueing, and an absent kube table is silence, never a page."""

import pandas as pd
import pytest

from gpu_health.contracts import conform, empty_frame
from gpu_health.diagnosis.context import PartitionContext
from gpu_health.diagnosis.detectors import DETECTORS
from gpu_health.diagnosis.platform import (
    CPU_SLOWDOWN_FACTOR,
    PENDING_PAGE_PODS,
    detect_cpu_fallback,
    detect_crash_loop,
    detect_device_plugin_missing,
    detect_platform,
    detect_pods_pending_gpu,
)

START = pd.Timestamp("2026-11-03T12:00:00Z")
FIVE = pd.Timedelta(minutes=5)
MIN = pd.Timedelta(minutes=1)
TAINT_MSG = "0/4 nodes are available: 4 node(s) had untolerated taint {nvidia.com/gpu: present}."
GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"
INVENTORY = pd.DataFrame({"node_id": ["n1", "n2"], "region": ["us-east"] * 2, "sku": ["H100"] * 2, "gpus": [8, 8]})


def pod_rows(pod, minutes, *, job="j1", node="n1", phase="Running", reason=None, message=None, gpu_request=8,
             restarts=0, namespace="team-a", region="us-east"):
    rows = []
    for k, m in enumerate(minutes):
        rows.append({"ts": START + m * MIN, "region": region, "namespace": namespace, "pod": pod,
                     "node_id": node if phase == "Running" else None, "phase": phase, "reason": reason,
                     "message": message, "gpu_request": gpu_request,
                     "restarts": restarts[k] if isinstance(restarts, list) else restarts, "job_id": job,
                     "container_image": "registry/x:1"})
    return rows


def pods(*groups) -> pd.DataFrame:
    return conform(pd.DataFrame([r for g in groups for r in g]), "kube_pods")


def nodes(allocatable=(8, 8), ready=(True, True), minutes=range(5), taint=GPU_TAINT) -> pd.DataFrame:
    rows = [{"ts": START + m * MIN, "region": "us-east", "node_id": n, "gpu_capacity": 8, "gpu_allocatable": a,
             "taints": taint, "ready": r, "unschedulable": False}
            for m in minutes for n, a, r in zip(("n1", "n2"), allocatable, ready)]
    return conform(pd.DataFrame(rows), "kube_nodes")


def gpu_rows(job="j1", node="n1", util=0.0, minutes=range(5)) -> pd.DataFrame:
    return pd.DataFrame([{"ts": START + m * MIN, "region": "us-east", "node_id": node, "gpu_uuid": f"{node}-g{g}",
                          "sku": "H100", "job_id": job, "gpu_util_pct": util} for m in minutes for g in range(8)])


def context(kube_pods=None, kube_nodes=None, gpu=None, runtime=None, baselines=None, meta=None, open_keys=()):
    empty = pd.DataFrame()
    return PartitionContext(
        start=START, end=START + FIVE, gpu=gpu if gpu is not None else pd.DataFrame(columns=["ts", "node_id", "job_id", "gpu_uuid", "sku", "gpu_util_pct"]),
        node=empty, network=empty, runtime=runtime if runtime is not None else empty, sched=empty, changes=empty,
        maintenance=empty, leaves=pd.DataFrame(columns=["state", "node_id", "gpu_minutes"]),
        baselines=baselines if baselines is not None else empty, meta=meta if meta is not None else empty,
        inventory=INVENTORY, region_history=empty, kube_pods=kube_pods, kube_nodes=kube_nodes,
        open_keys=frozenset(open_keys))


# --- cpu_fallback ---
def test_cpu_fallback_pages_on_pods_without_gpus_and_idle_gpus():
    ctx = context(pods(pod_rows("j1-0", range(5), gpu_request=0)), nodes(), gpu=gpu_rows(util=0.0))
    [f] = detect_cpu_fallback(ctx)
    assert (f.detector, f.family, f.severity, f.nodes) == ("cpu_fallback", "software", "page", ["n1"])
    assert "run no kernel" in f.evidence and "team:ml-platform" in f.evidence


def test_cpu_fallback_pages_on_step_time_against_the_signature_baseline():
    rt = pd.DataFrame({"ts": [START + m * MIN for m in range(5)], "job_id": "j1", "step_time_s": 0.5 * 100})
    base = pd.DataFrame({"model_type": ["llm"], "sku": ["H100"], "gpus": [8], "step_time_s": [0.5]})
    meta = pd.DataFrame({"job_id": ["j1"], "model_type": ["llm"]})
    # the GPUs still show kernels (e.g. another process on them): the trainer's step time is the second witness
    ctx = context(pods(pod_rows("j1-0", range(5), gpu_request=0)), nodes(), gpu=gpu_rows(util=60.0),
                  runtime=rt, baselines=base, meta=meta)
    [f] = detect_cpu_fallback(ctx)
    assert f.severity == "page" and f"{CPU_SLOWDOWN_FACTOR:g}x" in f.evidence
    # a slow GPU (3x its baseline) is not the CPU: one witness, a ticket
    ctx = context(pods(pod_rows("j1-0", range(5), gpu_request=0)), nodes(), gpu=gpu_rows(util=60.0),
                  runtime=rt.assign(step_time_s=1.5), baselines=base, meta=meta)
    assert [f.severity for f in detect_cpu_fallback(ctx)] == ["ticket"]


def test_cpu_helpers_of_a_gpu_job_and_cpu_jobs_are_no_fallback():
    # an MPIJob launcher requests no GPU while its worker does: the job has GPUs
    launcher = pod_rows("j1-launcher", range(5), gpu_request=0, node="n2")
    worker = pod_rows("j1-0", range(5), gpu_request=8)
    assert detect_cpu_fallback(context(pods(launcher, worker), nodes(), gpu=gpu_rows(util=90.0))) == []
    # a CPU-only job (no GPU mapped to it, none requested) on a GPU node is not a GPU job
    cpu_job = pod_rows("etl-0", range(5), job="etl", gpu_request=0)
    assert detect_cpu_fallback(context(pods(cpu_job), nodes(), gpu=gpu_rows(job="other", util=90.0))) == []


# --- pods_pending_gpu ---
def _pending(n, minutes=range(-2, 5), message=TAINT_MSG, gpu_request=8):
    return [pod_rows(f"p{k}", minutes, job="new", phase="Pending", reason="Unschedulable", message=message,
                     gpu_request=gpu_request) for k in range(n)]


def test_pods_pending_on_the_gpu_taint_page_with_the_nodes_witness():
    [f] = detect_pods_pending_gpu(context(pods(*_pending(PENDING_PAGE_PODS)), nodes()))
    assert (f.detector, f.family, f.severity) == ("pods_pending_gpu", "scheduling", "page")
    # fewer pods, or no kube_nodes to confirm the taint: a ticket
    assert [f.severity for f in detect_pods_pending_gpu(context(pods(*_pending(PENDING_PAGE_PODS - 1)), nodes()))] == ["ticket"]
    assert [f.severity for f in detect_pods_pending_gpu(context(pods(*_pending(PENDING_PAGE_PODS)), None))] == ["ticket"]
    # under PLATFORM_MINUTES of pending: nothing yet
    assert detect_pods_pending_gpu(context(pods(*_pending(PENDING_PAGE_PODS, minutes=range(3, 5))), nodes())) == []


def test_ordinary_queueing_is_no_finding():
    full = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    busy = [pod_rows(f"w{k}", range(-2, 5), job=f"busy{k}", node=f"n{k + 1}", gpu_request=8) for k in range(2)]
    gated = [pod_rows(f"q{k}", range(-2, 5), job="queued", phase="Pending", reason="SchedulingGated",
                      message="waiting for admission by queue us-east/batch") for k in range(4)]
    ctx = context(pods(*_pending(4, message=full), *busy, *gated), nodes())
    assert detect_pods_pending_gpu(ctx) == []
    # the same refusal of pods that one Ready node's 8 free GPUs could take, for longer than the scheduler's
    # retry cycle: the scheduler refuses capacity that exists
    ctx = context(pods(*_pending(PENDING_PAGE_PODS, message=full, gpu_request=2), busy[0]), nodes())
    [f] = detect_pods_pending_gpu(ctx)
    assert f.severity == "page" and "8 GPUs free" in f.evidence


FULL = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def test_a_pod_no_single_node_can_take_is_no_page():
    # 4 GPUs free on each node (8 in the cluster), a pod asking for 8: no node can take it -- queueing, not a fault
    half = [pod_rows(f"w{k}", range(-2, 5), job=f"busy{k}", node=f"n{k + 1}", gpu_request=4) for k in range(2)]
    found = detect_pods_pending_gpu(context(pods(*_pending(PENDING_PAGE_PODS, message=FULL), *half), nodes()))
    assert "page" not in {f.severity for f in found}


def test_a_mass_refusal_the_free_gpus_cannot_serve_is_a_capacity_ticket():
    # 4 pods of 8 GPUs against one node's 8 free: each fits alone, together they are capacity
    busy = pod_rows("w0", range(-2, 5), job="busy0", node="n1", gpu_request=8)
    [f] = detect_pods_pending_gpu(context(pods(*_pending(4, message=FULL), busy), nodes()))
    assert f.severity == "ticket" and "capacity" in f.evidence


def test_free_gpus_in_pieces_no_node_can_give_every_pod_are_a_capacity_ticket():
    # 6 GPUs free on each node (12 in all) and three pods of 4: the sum would take them, but a node takes one pod
    # (6 - 4 leaves 2): the third fits nowhere -- routine refusal, the scheduler is right
    part = [pod_rows(f"w{k}", range(-2, 5), job=f"busy{k}", node=f"n{k + 1}", gpu_request=2) for k in range(2)]
    [f] = detect_pods_pending_gpu(context(pods(*_pending(3, message=FULL, gpu_request=4), *part), nodes()))
    assert f.severity == "ticket" and "capacity" in f.evidence
    # a batch submission of many one-GPU pods refused at once against 8 free GPUs: capacity, never a page
    busy = pod_rows("w0", range(-2, 5), job="busy0", node="n1", gpu_request=8)
    [f] = detect_pods_pending_gpu(context(pods(*_pending(256, message=FULL, gpu_request=1), busy), nodes()))
    assert f.severity == "ticket" and "capacity" in f.evidence


def test_a_refusal_within_the_schedulers_retry_cycle_or_with_other_constraints_is_no_page():
    busy = pod_rows("w0", range(-2, 5), job="busy0", node="n1", gpu_request=8)
    # refused for 4 minutes: within the scheduler's retry of unschedulable pods (churn)
    short = _pending(PENDING_PAGE_PODS, minutes=range(1, 5), message=FULL, gpu_request=2)
    assert detect_pods_pending_gpu(context(pods(*short, busy), nodes())) == []
    # n2 freed only at the partition's last minute (its pod ended then): the scheduler has not yet retried
    ending = pod_rows("w1", range(-2, 4), job="busy1", node="n2", gpu_request=8)
    late = _pending(PENDING_PAGE_PODS, message=FULL, gpu_request=2)
    assert detect_pods_pending_gpu(context(pods(*late, busy, ending), nodes())) == []
    # the free node is excluded by another of the pods' constraints (the scheduler says so): not the scheduler's fault
    other = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector."
    found = detect_pods_pending_gpu(context(pods(*_pending(PENDING_PAGE_PODS, message=other, gpu_request=2), busy),
                                            nodes()))
    assert "page" not in {f.severity for f in found}


def test_a_crash_looping_pod_holding_gpus_is_its_jobs_software_fault_not_scheduling():
    restarts = [0, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5, 5, 5, 5, 6]
    loop = [pod_rows(f"j1-{k}", range(-10, 5), reason="CrashLoopBackOff", restarts=restarts, node=f"n{k + 1}")
            for k in range(2)]
    pending = _pending(PENDING_PAGE_PODS, message=FULL, gpu_request=8)
    found = detect_platform(context(pods(*loop, *pending), nodes()))
    assert [(f.detector, f.family) for f in found] == [("crash_loop", "software")]


# --- crash_loop ---
def test_crash_loop_pages_for_a_jobs_gpu_pods_and_tickets_for_one():
    restarts = [0, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5, 5, 5, 5, 6]   # the kubelet's back-off over 15 minutes
    loop = [pod_rows(f"j1-{k}", range(-10, 5), reason="CrashLoopBackOff", restarts=restarts) for k in range(2)]
    [f] = detect_crash_loop(context(pods(*loop), nodes()))
    assert (f.detector, f.family, f.severity) == ("crash_loop", "software", "page")
    [f] = detect_crash_loop(context(pods(loop[0]), nodes()))
    assert f.severity == "ticket"
    # a settled loop (2 restarts in 10 minutes at the 5-minute cap) keeps an open alert, opens none
    settled = [pod_rows(f"j1-{k}", range(-10, 5), reason="CrashLoopBackOff", restarts=[9] * 5 + [10] * 5 + [11] * 5)
               for k in range(2)]
    assert detect_crash_loop(context(pods(*settled), nodes())) == []
    assert [f.severity for f in detect_crash_loop(context(pods(*settled), nodes(), open_keys={"crash_loop|us-east"}))] == ["page"]
    # a pod created 3 minutes ago, already at 3 restarts (10, 30, 70 s): counted from 0, it loops
    young = [pod_rows(f"j2-{k}", range(2, 5), job="j2", reason="CrashLoopBackOff", restarts=[2, 3, 3]) for k in range(2)]
    assert [f.severity for f in detect_crash_loop(context(pods(*young), nodes()))] == ["page"]
    # the same counter seen since the look-back's start is an old pod: only its rise counts
    old = [pod_rows(f"j2-{k}", range(-10, 5), job="j2", reason="CrashLoopBackOff", restarts=[2] * 12 + [3] * 3)
           for k in range(2)]
    assert detect_crash_loop(context(pods(*old), nodes())) == []
    # restarts without CrashLoopBackOff now (the container runs again): no loop
    recovered = pod_rows("j1-0", range(-10, 5), reason=None, restarts=restarts)
    assert detect_crash_loop(context(pods(recovered), nodes())) == []


# --- device_plugin_missing ---
def test_device_plugin_missing_pages_with_dcgm_seeing_the_gpus():
    [f] = detect_device_plugin_missing(context(None, nodes(allocatable=(0, 8)), gpu=gpu_rows(node="n1", util=0.0)))
    assert (f.detector, f.family, f.severity, f.nodes) == ("device_plugin_missing", "software", "page", ["n1"])
    assert "team:infra" in f.evidence
    # no DCGM rows for the node: the GPUs may be gone (hardware's to judge): a ticket
    [f] = detect_device_plugin_missing(context(None, nodes(allocatable=(0, 8))))
    assert f.severity == "ticket"
    # a NotReady node withholds its GPUs for another reason
    assert detect_device_plugin_missing(context(None, nodes(allocatable=(0, 8), ready=(False, True)))) == []


# --- missing data ---
@pytest.mark.parametrize("kube_pods, kube_nodes", [(None, None), (empty_frame("kube_pods"), empty_frame("kube_nodes"))])
def test_absent_kube_tables_are_silence_never_a_page(kube_pods, kube_nodes):
    ctx = context(kube_pods, kube_nodes, gpu=gpu_rows(util=0.0))
    assert detect_platform(ctx) == []
    wired = [d for d in DETECTORS if d.name == "detect_platform"]
    assert len(wired) == 1 and wired[0](ctx) == []

"""The simulated Kubernetes platform layer: ``kube_pods`` and ``kube_nodes`` from the job plan.

On only where a scenario says ``cluster: {platform: true}`` (``ClusterSpec.platform``), so both profiles' rows are
unchanged. What kube-state-metrics would say about the simulated jobs:

* every job of the plan is one pod per node of its lane (namespace = its team, pod ``<job_id>-<worker>``), with
  ``gpu_request`` = the job's GPUs on that node. From submission to start the pod waits for admission by its queue
  (``Pending`` / ``SchedulingGated``, no node: the way Kueue-style queues hold pods, so ordinary queueing never
  reads ``Unschedulable``); from start to end it is ``Running`` on its node. A pod has a row in the minutes whose
  middle it exists in (the convention of the other tables);
* every node is one ``kube_nodes`` row a minute: capacity = allocatable = its GPUs, the GPU operator's taint
  ``nvidia.com/gpu=present:NoSchedule`` (plus ``node.kubernetes.io/unschedulable:NoSchedule`` while cordoned),
  Ready, and cordoned (``unschedulable``) while node_telemetry says it is drained.

The platform incidents (``PLATFORM_INCIDENT_KINDS`` in :mod:`gpu_health.sim.scenario`) leave what real ones leave:

* ``cpu_fallback``: the training jobs on the scope's nodes (``fraction`` of them) run with ``gpu_request`` 0 --
  their containers see no GPU and train on the CPU, ``magnitude`` times slower (the seeds: ~100x): steps fewer and
  slower in job_runtime_metrics, and the GPUs the scheduler still maps to the job compute nothing (no kernel, SM
  and tensor idle, idle power) in gpu_telemetry;
* ``pods_pending_taint``: ``magnitude`` pods of a new job without the GPU taint's toleration, ``Pending`` /
  ``Unschedulable`` with the scheduler's ``untolerated taint {nvidia.com/gpu: present}`` message for the
  incident's span;
* ``crash_loop``: ``magnitude`` pods of a new job on the scope's nodes whose container exits at start: restarts
  at the kubelet's back-off (10 s doubling, capped at 5 minutes), reason ``CrashLoopBackOff``;
* ``device_plugin_missing``: the scope's nodes advertise ``gpu_allocatable`` 0 while Ready (the device plugin
  pod is gone; the GPUs are still there).

Synthetic pods (pending, crash-looping) belong to no job of the plan: the other tables do not see them.

Where the profile sets ``routine_refusals`` (the messy one), the scheduler also refuses pods for ``Insufficient
nvidia.com/gpu`` the way it does every day, never an incident: every REFUSAL_EVERY_S per region a batch of
BATCH_PODS one-GPU pods submitted at once that drains over BATCH_DRAIN_S (each runs BATCH_RUN_S once placed),
and a pod asking for a whole node's GPUs that waits OVERSIZED_S (its owner then deletes it). The scheduler's message is the kube-scheduler's per-node
verdict of that minute: a node with a GPU free that the pod still did not get is excluded by another of the pod's
constraints (its node selector), never reported "Insufficient" beside free GPUs.
"""

import numpy as np
import pandas as pd

from gpu_health.contracts import columns, conform, empty_frame
from gpu_health.sim import hashing as H
from gpu_health.sim.jobs import from_s, to_s
from gpu_health.sim.scenario import ORIGIN

GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"
CORDON_TAINT = "node.kubernetes.io/unschedulable:NoSchedule"
TAINT_MESSAGE = "0/{n} nodes are available: {n} node(s) had untolerated taint {{nvidia.com/gpu: present}}. " \
                "preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling."
S_FALLBACK = 601
# the kubelet's crash-loop back-off: 10 s after the first exit, doubling, capped at 5 minutes (Kubernetes docs,
# "Container restarts"); the container is taken to exit at once
BACKOFF_FIRST_S, BACKOFF_CAP_S = 10, 300
TRAINING_POOLS = ("batch", "distributed")
# routine refusals (messy profile): a batch of 256 pods at once is the size of a large array job or a Spark /
# Ray submission; a whole-node pod waits for a node to empty while every node has some GPUs free
REFUSAL_EVERY_S, BATCH_PODS, BATCH_DRAIN_S, BATCH_RUN_S, OVERSIZED_S = 7200, 256, 900, 600, 2700
S_REFUSAL = 611
# diverging_run: how much faster the gradient norm grows than the loss, on log scale (see _diverge)
GRAD_LEAD = 8.0


def _incidents(scen, lo: int, hi: int, *kinds):
    for n, inc in enumerate(scen.incidents):
        if inc.kind in kinds and to_s(inc.start) < hi and to_s(inc.end) > lo:
            yield n, inc


def fallback_jobs(scen, plan: pd.DataFrame, inc) -> np.ndarray:
    """Plan rows of the training jobs a ``cpu_fallback`` (or ``diverging_run``) incident hits: on its nodes, in its pool (batch and
    distributed by default), running at some point of its span, ``fraction`` of them (keyed by the job alone, so
    every window picks the same)."""
    if plan.empty:
        return np.zeros(0, dtype=np.int64)
    lanes = scen.cluster.lanes
    nodes = set(inc.node_ids)
    on_nodes = np.array([bool(nodes & set(ns)) for ns in lanes["node_ids"]])[plan["lane"].to_numpy()]
    pools = (inc.pool,) if inc.pool else TRAINING_POOLS
    sel = (on_nodes & plan["pool"].isin(pools).to_numpy() & ~plan["dummy"].to_numpy()
           & (plan["start_s"].to_numpy() < to_s(inc.end)) & (plan["end_s"].to_numpy() > to_s(inc.start)))
    pick = H.uniform(scen.seed, S_FALLBACK, plan["lane"].to_numpy(), plan["epoch"].to_numpy(), plan["k"].to_numpy()) < inc.fraction
    return np.flatnonzero(sel & pick)


def _fallback_spans(win) -> list[tuple[set, int, int, float]]:
    """(job ids, from second, to second, slowdown factor) per cpu_fallback incident overlapping the window."""
    out = []
    for _, inc in _incidents(win.scen, to_s(win.start), to_s(win.end), "cpu_fallback"):
        rows = fallback_jobs(win.scen, win.plan, inc)
        out.append((set(win.plan["job_id"].to_numpy()[rows]), to_s(inc.start), to_s(inc.end), max(float(inc.magnitude), 1.0)))
    return out


def _diverge(win, frame: pd.DataFrame) -> pd.DataFrame:
    """``diverging_run``: the loss of the scope's jobs grows from the incident's start, ``1 + magnitude`` times over
    each hour (exponential: an optimiser past its stable learning rate), reported as the last value of each minute;
    the gradient norm of those that report one grows GRAD_LEAD times as fast (on log scale), so it is up 2x while
    the loss is up 9 % (at magnitude 1): past its stable learning rate the optimiser overshoots along the sharpest
    direction, where the gradient grows with every step before the loss it feeds."""
    for _, inc in _incidents(win.scen, to_s(win.start), to_s(win.end), "diverging_run"):
        jobs = set(win.plan["job_id"].to_numpy()[fallback_jobs(win.scen, win.plan, inc)])
        t = to_s_series(frame["ts"]) + 60
        on = frame["job_id"].isin(jobs).to_numpy() & (t > to_s(inc.start)) & (t - 60 < to_s(inc.end))
        hit = on & frame["loss"].notna().to_numpy()
        if hit.any():
            frame = frame.copy()
            grow = np.exp(np.log1p(max(float(inc.magnitude), 0.0)) * (t[hit] - to_s(inc.start)) / 3600.0)
            frame.loc[hit, "loss"] = np.round(frame.loc[hit, "loss"].to_numpy(dtype=float) * grow, 4)
        hit = on & frame["grad_norm"].notna().to_numpy()
        if hit.any():
            frame = frame.copy()
            grow = np.exp(GRAD_LEAD * np.log1p(max(float(inc.magnitude), 0.0)) * (t[hit] - to_s(inc.start)) / 3600.0)
            frame.loc[hit, "grad_norm"] = np.round(frame.loc[hit, "grad_norm"].to_numpy(dtype=float) * grow, 5)
    return frame


def apply_to_table(win, name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The platform (and application) incidents' marks on the GPU and runtime tables (cpu_fallback, diverging_run);
    the frame unchanged otherwise."""
    if name not in ("gpu_telemetry", "job_runtime_metrics") or frame.empty:
        return frame
    if name == "job_runtime_metrics":
        frame = _diverge(win, frame)
    spans = _fallback_spans(win)
    if not spans:
        return frame
    frame = frame.copy()
    t = to_s_series(frame["ts"])
    for jobs, lo, hi, factor in spans:
        hit = frame["job_id"].isin(jobs).to_numpy() & (t >= lo) & (t < hi)
        if not hit.any():
            continue
        if name == "gpu_telemetry":
            types = {x.sku: x for x in win.scen.cluster.spec.node_types}
            idle_w = frame.loc[hit, "sku"].map(lambda s: types[s].idle_w if s in types else 0.0).astype(float)
            frame.loc[hit, "gpu_util_pct"] = 0.0
            for col in ("sm_active", "tensor_active"):
                frame.loc[hit & frame[col].notna().to_numpy(), col] = 0.0
            has_power = hit & frame["power_w"].notna().to_numpy()
            frame.loc[has_power, "power_w"] = idle_w[has_power[hit]].to_numpy()
            frame.loc[hit, "fb_used_mib"] = 3.0  # no CUDA context: the driver's own few MiB
        else:
            steps = frame.loc[hit, "steps"].to_numpy()
            slow = np.where(steps > 0, np.maximum(1, steps // int(factor)), 0)
            per = np.where(steps > 0, frame.loc[hit, "samples"].to_numpy() // np.maximum(steps, 1), 0)
            frame.loc[hit, "steps"] = slow
            frame.loc[hit, "samples"] = slow * per
            frame.loc[hit, "step_time_s"] = frame.loc[hit, "step_time_s"] * factor
    return frame


def to_s_series(ts: pd.Series) -> np.ndarray:
    """Seconds since the simulator's origin of a timestamp column (the inverse of ``from_s``)."""
    return ((pd.DatetimeIndex(ts) - ORIGIN) // pd.Timedelta(seconds=1)).to_numpy(dtype=np.int64)


# --- kube_nodes ---------------------------------------------------------------------------------------------------
def kube_nodes(win) -> pd.DataFrame:
    """One row per node per minute of the window (see the module docstring)."""
    scen, m_s = win.scen, win.m_s
    nodes = scen.cluster.nodes
    N, M = len(nodes), len(m_s)
    if not N or not M or not scen.cluster.spec.platform:
        return empty_frame("kube_nodes")
    ni = np.repeat(np.arange(N), M)
    t = np.tile(m_s, N)
    cap = nodes["gpus"].to_numpy()[ni].astype(np.int64)
    alloc = cap.copy()
    for _, inc in _incidents(scen, to_s(win.start), to_s(win.end), "device_plugin_missing"):
        hit = win._node_mask(ni, inc.node_ids) & (t >= to_s(inc.start)) & (t < to_s(inc.end))
        alloc = np.where(hit, 0, alloc)
    ts = from_s(t)
    node_id = nodes["node_id"].to_numpy()[ni]
    drained = np.zeros(N * M, bool)
    nt = win.aligned("node_telemetry")
    if len(nt):
        key = pd.MultiIndex.from_arrays([nt["ts"], nt["node_id"].astype(object)])
        dr = pd.Series((nt["health"] == "drained").to_numpy(), index=key)
        drained = dr.reindex(pd.MultiIndex.from_arrays([pd.DatetimeIndex(ts), node_id])).fillna(False).to_numpy(bool)
    df = pd.DataFrame({
        "ts": ts, "region": nodes["region"].to_numpy()[ni], "node_id": node_id,
        "gpu_capacity": cap, "gpu_allocatable": alloc,
        "taints": np.where(drained, f"{GPU_TAINT},{CORDON_TAINT}", GPU_TAINT),
        "ready": np.ones(N * M, bool), "unschedulable": drained,
    })
    return conform(df[columns("kube_nodes")], "kube_nodes")


# --- kube_pods ----------------------------------------------------------------------------------------------------
def _expand(first_s: np.ndarray, last_s: np.ndarray, m_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner index, minute second) for every minute of ``m_s`` whose middle lies in ``[first_s, last_s)``."""
    if not len(m_s) or not len(first_s):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    m0 = int(m_s[0])
    a = np.clip(np.ceil((first_s - 30 - m0) / 60).astype(np.int64), 0, len(m_s))
    b = np.clip(np.ceil((last_s - 30 - m0) / 60).astype(np.int64), 0, len(m_s))
    n = np.maximum(b - a, 0)
    owner = np.repeat(np.arange(len(first_s)), n)
    offs = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
    return owner, m_s[a[owner] + offs]


def kube_pods(win) -> pd.DataFrame:
    """Every pod of the plan's jobs and of the platform incidents, one row per pod per minute."""
    scen, plan, m_s = win.scen, win.plan, win.m_s
    if not scen.cluster.spec.platform:
        return empty_frame("kube_pods")
    parts = [_plan_pods(win)] if not plan.empty else []
    parts += _incident_pods(win)
    if scen.cluster.spec.routine_refusals:
        parts += _routine_refusals(win, parts[0] if not plan.empty else empty_frame("kube_pods"))
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_frame("kube_pods")
    df = pd.concat(parts, ignore_index=True).sort_values(["ts", "namespace", "pod"], kind="stable")
    del scen, m_s
    return conform(df[columns("kube_pods")].reset_index(drop=True), "kube_pods")


def _plan_pods(win) -> pd.DataFrame:
    scen, plan, m_s = win.scen, win.plan, win.m_s
    lanes = scen.cluster.lanes
    lane_nodes = lanes["node_ids"].to_numpy()
    width = lanes["node_ids"].map(len).to_numpy()
    # one pod per node of the job's lane
    j = np.repeat(np.arange(len(plan)), width[plan["lane"].to_numpy()])
    worker = np.arange(len(j)) - np.repeat(np.cumsum(width[plan["lane"].to_numpy()]) - width[plan["lane"].to_numpy()],
                                           width[plan["lane"].to_numpy()])
    owner, t = _expand(plan["submit_s"].to_numpy()[j], plan["end_s"].to_numpy()[j], m_s)
    if not len(owner):
        return empty_frame("kube_pods")
    jj, w = j[owner], worker[owner]
    lane = plan["lane"].to_numpy()[jj]
    mat = np.full((len(lane_nodes), int(width.max())), None, dtype=object)
    for i, ns in enumerate(lane_nodes):
        mat[i, :len(ns)] = ns
    node = mat[lane, w]
    running = t + 30 >= plan["start_s"].to_numpy()[jj]
    per_node = (plan["gpus"].to_numpy()[jj] // width[lane]).astype(np.int64)
    job_id = plan["job_id"].to_numpy()[jj]
    for jobs, lo, hi, _ in _fallback_spans(win):
        per_node = np.where(pd.Series(job_id).isin(jobs).to_numpy() & (t >= lo) & (t < hi), 0, per_node)
    team = plan["team"].to_numpy()[jj]
    queue = plan["queue"].to_numpy()[jj]
    image = ("registry.internal/" + plan["team"] + "/" + plan["model_type"] + ":" + plan["framework_version"]).to_numpy()[jj]
    return pd.DataFrame({
        "ts": from_s(t), "region": plan["region"].to_numpy()[jj], "namespace": team,
        "pod": pd.Series(job_id).str.cat(pd.Series(w).astype(str), sep="-").to_numpy(),
        "node_id": np.where(running, node, None), "phase": np.where(running, "Running", "Pending"),
        "reason": np.where(running, None, "SchedulingGated"),
        "message": np.where(running, None, pd.Series(queue).radd("waiting for admission by queue ").to_numpy()),
        "gpu_request": per_node, "restarts": np.zeros(len(t), dtype=np.int64), "job_id": job_id,
        "container_image": image,
    })


def restarts_after(seconds: np.ndarray) -> np.ndarray:
    """Restarts of a container that exits at once, ``seconds`` after its first start (the kubelet's back-off)."""
    times, gap, at = [], BACKOFF_FIRST_S, 0
    horizon = int(np.max(seconds)) if len(seconds) else 0
    while at <= horizon:
        at += gap
        times.append(at)
        gap = min(gap * 2, BACKOFF_CAP_S)
    return np.searchsorted(np.array(times), seconds, side="right").astype(np.int64)


def _incident_pods(win) -> list[pd.DataFrame]:
    scen, m_s = win.scen, win.m_s
    nodes = scen.cluster.nodes
    out = []
    for _, inc in _incidents(scen, to_s(win.start), to_s(win.end), "pods_pending_taint", "crash_loop"):
        n_pods = max(1, int(round(inc.magnitude)))
        owner, t = _expand(np.full(n_pods, to_s(inc.start)), np.full(n_pods, to_s(inc.end)), m_s)
        if not len(owner):
            continue
        region = inc.region or nodes["region"].iloc[0]
        team = inc.team or "ml-training"
        job = f"{inc.incident_id}-job"
        cand = list(inc.node_ids) or nodes.loc[nodes["region"] == region, "node_id"].tolist()
        gpus = int(nodes.loc[nodes["node_id"].isin(cand), "gpus"].min()) if cand else 8
        if inc.kind == "pods_pending_taint":
            n_region = int((nodes["region"] == region).sum())
            frame = pd.DataFrame({"node_id": None, "phase": "Pending", "reason": "Unschedulable",
                                  "message": TAINT_MESSAGE.format(n=n_region), "gpu_request": gpus,
                                  "restarts": 0}, index=np.arange(len(t)))
        else:
            frame = pd.DataFrame({"node_id": np.array(cand, dtype=object)[owner % len(cand)], "phase": "Running",
                                  "reason": "CrashLoopBackOff",
                                  "message": "Back-off restarting failed container trainer",
                                  "gpu_request": 1, "restarts": restarts_after(t + 30 - to_s(inc.start))})
        frame["ts"] = from_s(t)
        frame["region"] = region
        frame["namespace"] = team
        frame["pod"] = [f"{job}-{k}" for k in owner]
        frame["job_id"] = job
        frame["container_image"] = f"registry.internal/{team}/trainer:broken"
        out.append(frame)
    return out


def _refusal_message(n_nodes: int, fit: int) -> str:
    """The kube-scheduler's verdict on a pod no node took: ``fit`` nodes had the GPUs and failed another of its
    constraints (its node selector), the others lacked GPUs."""
    if fit <= 0:
        return f"0/{n_nodes} nodes are available: {n_nodes} Insufficient {GPU_RESOURCE}."
    return (f"0/{n_nodes} nodes are available: {n_nodes - fit} Insufficient {GPU_RESOURCE}, "
            f"{fit} node(s) didn't match Pod's node affinity/selector.")



def _routine_refusals(win, plan_pods: pd.DataFrame) -> list[pd.DataFrame]:
    """The messy profile's everyday Insufficient-GPU refusals (the module docstring): per region and
    REFUSAL_EVERY_S slot, a batch of one-GPU pods that drains and an oversized pod, each at a hashed offset."""
    scen, m_s = win.scen, win.m_s
    nodes = scen.cluster.nodes
    if not len(m_s):
        return []
    lo, hi = int(m_s[0]), int(m_s[-1]) + 60
    running = plan_pods[plan_pods["phase"] == "Running"] if len(plan_pods) else plan_pods
    used = running.groupby(["ts", "node_id"])["gpu_request"].sum() if len(running) else pd.Series(dtype=float)
    out = []
    for r, region in enumerate(sorted(set(nodes["region"]))):
        mine = nodes[nodes["region"] == region]
        names, gpus = mine["node_id"].to_numpy(dtype=object), mine["gpus"].to_numpy()
        for q in range((lo - BATCH_DRAIN_S - BATCH_RUN_S) // REFUSAL_EVERY_S, hi // REFUSAL_EVERY_S + 1):
            at = q * REFUSAL_EVERY_S + int(H.uniform(scen.seed, S_REFUSAL, r, q) * (REFUSAL_EVERY_S - OVERSIZED_S))
            k = np.arange(BATCH_PODS)
            placed = at + 60 + (k * BATCH_DRAIN_S) // BATCH_PODS  # the batch drains in submission order
            owner, t = _expand(np.full(BATCH_PODS, at), placed + BATCH_RUN_S, m_s)
            if len(owner):
                run = t + 30 >= placed[owner]
                out.append(pd.DataFrame({
                    "ts": from_s(t), "region": region, "namespace": "batch-array", "pod": [f"arr-{r}-{q}-{x}" for x in owner],
                    "node_id": np.where(run, names[owner % len(names)], None), "phase": np.where(run, "Running", "Pending"),
                    "reason": np.where(run, None, "Unschedulable"), "message": None, "gpu_request": 1,
                    "restarts": 0, "job_id": f"arr-{r}-{q}", "container_image": "registry.internal/batch-array/etl:1"}))
            owner, t = _expand(np.array([at]), np.array([at + OVERSIZED_S]), m_s)
            if len(owner):
                out.append(pd.DataFrame({
                    "ts": from_s(t), "region": region, "namespace": "research", "pod": f"big-{r}-{q}", "node_id": None,
                    "phase": "Pending", "reason": "Unschedulable", "message": None,
                    "gpu_request": int(gpus.max()), "restarts": 0, "job_id": f"big-{r}-{q}",
                    "container_image": "registry.internal/research/trainer:1"}))
    if not out:
        return []
    df = pd.concat(out, ignore_index=True)
    # each refused pod's verdict per minute: how many of the region's nodes had its request free (the plan's pods
    # and the batch's own placed pods taken off)
    batch_run = df[(df["phase"] == "Running")].groupby(["ts", "node_id"])["gpu_request"].sum()
    taken = used.add(batch_run, fill_value=0) if len(used) else batch_run
    cap = pd.Series(nodes["gpus"].to_numpy(), index=nodes["node_id"].to_numpy(dtype=object))
    pend = (df["phase"] == "Pending") & df["message"].isna()
    for (ts, region, need), idx in df[pend].groupby(["ts", "region", "gpu_request"]).groups.items():
        mine = nodes.loc[nodes["region"] == region, "node_id"].to_numpy(dtype=object)
        busy = taken.reindex(pd.MultiIndex.from_arrays([[ts] * len(mine), mine])).fillna(0).to_numpy()
        fit = int((cap.reindex(mine).to_numpy() - busy >= need).sum())
        df.loc[idx, "message"] = _refusal_message(len(mine), fit)
    return [df]

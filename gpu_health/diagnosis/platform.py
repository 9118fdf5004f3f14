"""Detectors of the Kubernetes platform layer: what kube-state-metrics shows and the GPUs confirm.

Pure pandas, the rules of :mod:`gpu_health.diagnosis.detectors`: a page rests on two independent witnesses; an absent
``kube_pods`` / ``kube_nodes`` table (a Slurm cluster, kube-state-metrics not scraped) is missing data, and every
detector here is then silent -- it never pages on what it cannot see.

======================  ===========  ==============  =========================================================
detector                family       owner           pages on (witness 1 + witness 2) / tickets on
======================  ===========  ==============  =========================================================
cpu_fallback            software     ml-platform     every pod of a GPU job Running on a GPU node without an
                                                     ``nvidia.com/gpu`` request (Kubernetes) + the GPUs mapped
                                                     to the job run no kernel (DCGM) or its steps run >= 10x its
                                                     signature's baseline (the trainer); ticket on the pods alone
pods_pending_gpu        scheduling   ml-platform     pods Unschedulable on the untolerated ``nvidia.com/gpu``
                                                     taint for 3+ minutes (the scheduler's message) + the
                                                     region's GPU nodes carry that taint (the nodes' spec), 3+
                                                     pods; ``Insufficient nvidia.com/gpu`` only past the
                                                     scheduler's 5-min retry while a Ready, schedulable node
                                                     has the pod's request free all partition (else queueing:
                                                     nothing), every node refused for GPUs alone and the free
                                                     GPUs able to place them all, each pod on one node (else
                                                     a capacity ticket);
                                                     ticket under 3 pods
crash_loop              software     ml-platform     pods in CrashLoopBackOff whose restart counter rose by 3+
                                                     in 10 minutes (from 0 for a pod created in them; 1+ once
                                                     the alert is open: the kubelet's back-off caps at 5
                                                     minutes), 2+ pods of a job holding GPUs;
                                                     ticket for a single pod or pods holding none
device_plugin_missing   software     infra           a Ready, schedulable node advertising 0 allocatable of its
                                                     GPU capacity for 3+ minutes (Kubernetes) + DCGM still
                                                     reports its GPUs (the hardware is there); ticket without
                                                     DCGM rows for the node
======================  ===========  ==============  =========================================================
"""

import re

import numpy as np
import pandas as pd

from gpu_health.constants import KERNEL_ACTIVE_UTIL_PCT, MINUTE
from gpu_health.diagnosis.finding import Finding, margin_of
from gpu_health.metrics.goodput import BLOCKED_WAIT

FAMILY = {"cpu_fallback": "software", "pods_pending_gpu": "scheduling", "crash_loop": "software",
          "device_plugin_missing": "software"}
# who acts first: the ML platform team owns pod specs, images and job templates; the infra team the node's
# GPU stack (driver, container toolkit, device plugin DaemonSet)
OWNER = {"cpu_fallback": "team:ml-platform", "pods_pending_gpu": "team:ml-platform", "crash_loop": "team:ml-platform",
         "device_plugin_missing": "team:infra"}
GPU_RESOURCE = "nvidia.com/gpu"
# a pod's spec is immutable: a Running pod without a GPU request is not a transient of one scrape. Three minutes
# of a partition (the stall and scheduling bar: many scrape and scheduling cycles) rule out a row straddling a
# pod's replacement
PLATFORM_MINUTES = int(BLOCKED_WAIT / MINUTE)
# a GPU trainer on the CPU: a GPU outruns a server CPU by one to two orders of magnitude on dense training (the
# seeds: ~100x); nothing that still runs on the GPU (thermal throttling at ~1.5-2x, a slow data loader, a degraded
# link) comes near 10x its own signature's baseline, so 10x tells the CPU from a slow GPU
CPU_SLOWDOWN_FACTOR = 10.0
# several pods: one or two pods without a toleration are one user's spec (their ticket); three are a job's
# workers or several jobs -- a template or an admission webhook lost the toleration
PENDING_PAGE_PODS = 3
# the kubelet's back-off doubles from 10 s to a 5-minute cap: a container that exits at start restarts at 10, 30,
# 70, 150, 310 s -- 5 times in its first 10 minutes, then every ~5 minutes (2 per 10). Three in 10 minutes is the
# back-off's own onset (a one-off OOM kill or node drain restarts once), and an open loop stays open on 1+
RESTART_WINDOW = pd.Timedelta(minutes=10)
RESTART_LOOP = 3
RESTART_KEEP = 1
# a job's workers all looping is the job broken (a page when they hold GPUs); one pod is its owner's ticket
CRASH_PAGE_PODS = 2
# The kube-scheduler retries every unschedulable pod at the latest after podMaxInUnschedulablePodsDuration (5 min
# by default; a freed node usually triggers the retry at once): a pod refused for ``Insufficient nvidia.com/gpu``
# for longer than that, while a node could take it, was retried against that node and refused again -- shorter is
# the churn of pods ending and starting between two scheduling cycles
PENDING_CHURN = pd.Timedelta(minutes=5)  # not the partition: the kube-scheduler default above
TAINT_MESSAGE = re.compile(r"untolerated taint[^:]*\{\s*" + re.escape(GPU_RESOURCE), re.IGNORECASE)
INSUFFICIENT_MESSAGE = re.compile(r"Insufficient " + re.escape(GPU_RESOURCE), re.IGNORECASE)
# the scheduler's verdict per node: "0/N nodes are available: K Insufficient nvidia.com/gpu[, M <another reason>]"
NODES_AVAILABLE = re.compile(r"0/(\d+) nodes are available:")
NODES_INSUFFICIENT = re.compile(r"(\d+) Insufficient " + re.escape(GPU_RESOURCE), re.IGNORECASE)


def _evidence(detector: str, text: str) -> str:
    return f"{text}. Owner: {OWNER[detector]}; runbook docs/runbooks.md#{FAMILY[detector]} ({detector})"


def _present(frame: pd.DataFrame | None) -> bool:
    return frame is not None and len(frame) > 0


def _in_partition(frame: pd.DataFrame, ctx) -> pd.DataFrame:
    return frame[(frame["ts"] >= ctx.start) & (frame["ts"] < ctx.end)]


def _obj(frame: pd.DataFrame, cols) -> pd.DataFrame:
    return frame.astype({c: object for c in cols})


# --- cpu_fallback -------------------------------------------------------------------------------------------------
def _gpu_jobs(ctx) -> set:
    """Jobs known to be GPU jobs: the GPU exporter maps GPUs to them, or their metadata requested GPUs."""
    jobs = set(ctx.gpu["job_id"].dropna().astype(object)) if len(ctx.gpu) else set()
    meta = ctx.meta
    if meta is not None and len(meta) and "requested_gpus" in meta:
        jobs |= set(meta.loc[meta["requested_gpus"] > 0, "job_id"].astype(object))
    return jobs


def _slow_vs_baseline(ctx, jobs) -> dict:
    """job -> its median step time in the partition over its signature's baseline (model_type x SKU x GPUs);
    absent when the job reports no steps or its signature has no baseline."""
    rt, base = ctx.runtime, ctx.baselines
    if rt is None or rt.empty or base is None or base.empty or ctx.meta is None or ctx.meta.empty:
        return {}
    rt = _in_partition(rt, ctx)
    rt = rt[rt["job_id"].isin(jobs) & rt["step_time_s"].notna()]
    if rt.empty:
        return {}
    step = rt.groupby(rt["job_id"].astype(object))["step_time_s"].median()
    g = ctx.gpu[ctx.gpu["job_id"].isin(step.index)]
    sku = g.groupby(g["job_id"].astype(object))["sku"].first()
    n_gpus = g.groupby(g["job_id"].astype(object))["gpu_uuid"].nunique()
    model = ctx.meta.drop_duplicates("job_id").set_index(ctx.meta.drop_duplicates("job_id")["job_id"].astype(object))["model_type"]
    b = base.assign(model_type=base["model_type"].astype(object), sku=base["sku"].astype(object))
    b = b.drop_duplicates(["model_type", "sku", "gpus"]).set_index(["model_type", "sku", "gpus"])["step_time_s"]
    out = {}
    for job, s in step.items():
        key = (model.get(job), sku.get(job), int(n_gpus.get(job, 0)))
        if key in b.index:
            out[job] = float(s) / float(b.loc[key])
    return out


def detect_cpu_fallback(ctx) -> list[Finding]:
    """GPU jobs whose pods run without a GPU: the seeds' most dangerous silent failure.

    A job falls back when, for PLATFORM_MINUTES or more of the partition, every pod of it that runs does so on a
    GPU node with ``gpu_request`` 0 -- no container can see a GPU -- while the job is known as a GPU job (the GPU
    exporter maps GPUs to it, or its metadata requested GPUs). Every pod of the job, because a job's CPU-only
    helpers (an MPIJob launcher, a data-prep sidecar) request none while its workers do. The second witness is
    independent of Kubernetes: the GPUs mapped to the job run no kernel (DCGM utilization under KERNEL_ACTIVE_UTIL_PCT),
    or its steps take CPU_SLOWDOWN_FACTOR times its signature's baseline (the trainer's own metrics). Page with
    both; a ticket on the pods alone (the job's GPUs unreported and no step metrics: it may be fine).
    """
    pods, nodes = ctx.kube_pods, ctx.kube_nodes
    if not _present(pods):
        return []
    p = _in_partition(pods, ctx)
    p = p[(p["phase"] == "Running") & p["job_id"].notna()]
    if p.empty:
        return []
    gpu_nodes = set(ctx.inventory["node_id"].astype(object)) if ctx.inventory is not None and len(ctx.inventory) else set()
    if _present(nodes):
        gpu_nodes |= set(nodes.loc[nodes["gpu_capacity"] > 0, "node_id"].astype(object))
    p = _obj(p, ["job_id", "node_id", "namespace"])
    p = p[p["node_id"].isin(gpu_nodes)]
    per_minute = p.groupby(["job_id", "ts"])["gpu_request"].sum()
    no_gpu_minutes = (per_minute == 0).groupby(level="job_id").sum()
    cand = set(no_gpu_minutes[no_gpu_minutes >= PLATFORM_MINUTES].index) & _gpu_jobs(ctx)
    if not cand:
        return []
    g = ctx.gpu[ctx.gpu["job_id"].isin(cand)]
    util = g.groupby(g["job_id"].astype(object))["gpu_util_pct"].median() if len(g) else pd.Series(dtype=float)
    held = g.groupby(g["job_id"].astype(object)).size() if len(g) else pd.Series(dtype=float)
    slow = _slow_vs_baseline(ctx, cand)
    out = []
    for region, grp in p[p["job_id"].isin(cand)].groupby("region"):
        jobs = sorted(set(grp["job_id"]))
        idle = [j for j in jobs if j in util.index and util[j] < KERNEL_ACTIVE_UTIL_PCT]
        slowed = [j for j in jobs if slow.get(j, 0.0) >= CPU_SLOWDOWN_FACTOR]
        confirmed = sorted(set(idle) | set(slowed))
        severity = "page" if confirmed else "ticket"
        # one job pages: its minutes without a GPU over their bar and its better second witness (GPUs under the
        # kernel bar: bar / util, unbounded at util 0, so the minutes decide; steps slower: slowdown / factor)
        witness = {j: max(((np.inf if util[j] == 0 else KERNEL_ACTIVE_UTIL_PCT / util[j]) if j in idle else 0.0),
                          slow.get(j, 0.0) / CPU_SLOWDOWN_FACTOR) for j in confirmed}
        margin = max((m for j in confirmed
                      if (m := margin_of((no_gpu_minutes[j], PLATFORM_MINUTES), (witness[j], 1.0))) is not None),
                     default=None)
        seconds = []
        if idle:
            seconds.append(f"the GPUs DCGM maps to {len(idle)} of them run no kernel (median util "
                           f"{util[idle].median():.1f} % < {KERNEL_ACTIVE_UTIL_PCT:g} %)")
        if slowed:
            seconds.append(f"{len(slowed)} step {min(slow[j] for j in slowed):.0f}x or more slower than their "
                           f"signature's baseline (>= {CPU_SLOWDOWN_FACTOR:g}x: the CPU, not a slow GPU)")
        basis = "; ".join(seconds) if seconds else "no second witness: the jobs' GPUs are not reported and they report no steps"
        out.append(Finding(
            "cpu_fallback", FAMILY["cpu_fallback"], severity, region, f"cpu_fallback|{region}",
            nodes=sorted(set(grp["node_id"])), team=",".join(sorted(set(grp["namespace"]))),
            lost_gpu_minutes=float(held.reindex(jobs).fillna(0).sum()), margin=margin,
            summary=f"{len(jobs)} GPU job(s) in {region} run on the CPU: their pods request no {GPU_RESOURCE}",
            evidence=_evidence("cpu_fallback",
                               f"every running pod of jobs {', '.join(jobs[:5])} sits on a GPU node with gpu_request 0 "
                               f"for {PLATFORM_MINUTES}+ minutes; {basis}")))
    return out


# --- pods_pending_gpu ---------------------------------------------------------------------------------------------
def _pending_runs(pods: pd.DataFrame, ctx, pattern: re.Pattern) -> pd.DataFrame:
    """Per pod Unschedulable with a message matching ``pattern`` at its last row in the partition: the minutes of
    its trailing run of such rows (over the whole look-back) and its GPU request."""
    pods = _obj(pods, ["namespace", "pod", "region"])
    hit = (pods["phase"] == "Pending") & (pods["reason"] == "Unschedulable") & \
        pods["message"].fillna("").astype(str).str.contains(pattern)
    pods = pods.assign(hit=hit.to_numpy())
    last = pods.sort_values("ts").groupby(["namespace", "pod"]).tail(1)
    last = last[last["hit"] & (last["ts"] >= ctx.start) & (last["ts"] < ctx.end)]
    if last.empty:
        return last.assign(minutes=pd.Series(dtype=int))
    mine = pods.merge(last[["namespace", "pod"]], on=["namespace", "pod"])
    broke = mine[~mine["hit"]].groupby(["namespace", "pod"])["ts"].max().rename("after").reset_index()
    mine = mine.merge(broke, on=["namespace", "pod"], how="left")
    run = mine[mine["hit"] & (mine["after"].isna() | (mine["ts"] > mine["after"]))]
    minutes = run.groupby(["namespace", "pod"]).size().rename("minutes")
    return last.merge(minutes.reset_index(), on=["namespace", "pod"])


def _free_gpus(ctx, region: str) -> tuple[pd.Series, bool]:
    """Free allocatable GPUs per Ready, schedulable node of ``region`` (allocatable less the running pods' requests)
    at their fewest over the partition's minutes -- a node NotReady, cordoned or unreported in a minute has none
    then -- and whether the region's GPU nodes carry the nvidia.com/gpu taint (the partition's last minute)."""
    nodes = ctx.kube_nodes
    none = pd.Series(dtype=float)
    if not _present(nodes):
        return none, False
    n = _obj(_in_partition(nodes, ctx), ["node_id", "region"])
    n = n[n["region"] == region]
    if n.empty:
        return none, False
    last = n[n["ts"] == n["ts"].max()]
    tainted = bool(last.loc[last["gpu_capacity"] > 0, "taints"].fillna("").astype(str).str.contains(GPU_RESOURCE, regex=False).any())
    p = ctx.kube_pods
    p = _obj(p[p["ts"].isin(set(n["ts"])) & (p["phase"] == "Running")], ["node_id"])
    used = p.groupby(["ts", "node_id"])["gpu_request"].sum()
    ok = n[n["ready"] & ~n["unschedulable"]]
    free = ok["gpu_allocatable"].to_numpy() - used.reindex(pd.MultiIndex.from_frame(ok[["ts", "node_id"]])).fillna(0).to_numpy()
    grid = pd.Series(free, index=pd.MultiIndex.from_frame(ok[["node_id", "ts"]])).unstack("ts")
    grid = grid.reindex(columns=sorted(set(n["ts"]))).fillna(0)
    return grid.min(axis=1).clip(lower=0), tainted


def _only_gpus_refused(message) -> bool:
    """The scheduler refused every node for GPUs alone ("0/N nodes are available: N Insufficient nvidia.com/gpu"):
    no other constraint of the pod (affinity, selector, taint, CPU, memory) excluded a node. An unparsable message
    tells nothing and is not read as GPUs alone."""
    text = "" if pd.isna(message) else str(message)
    total, gpus = NODES_AVAILABLE.search(text), NODES_INSUFFICIENT.search(text)
    return bool(total and gpus and int(gpus.group(1)) == int(total.group(1)))


def _all_fit(requests, free: pd.Series) -> bool:
    """Whether every pod's GPU request fits on some node's free GPUs at once, as the scheduler places pods: each
    pod whole on one node (first fit, largest request first). Free GPUs summed over nodes are not capacity: a pod
    of 4 does not fit two nodes with 2 free each."""
    room = sorted((float(x) for x in free.to_numpy()), reverse=True)
    for need in sorted((float(r) for r in requests), reverse=True):
        at = next((k for k, have in enumerate(room) if have >= need), None)
        if at is None:
            return False
        room[at] -= need
    return True


def detect_pods_pending_gpu(ctx) -> list[Finding]:
    """GPU pods the scheduler refuses for a reason other than a full cluster.

    * ``untolerated taint {nvidia.com/gpu...}``: the pods lack the GPU taint's toleration, so no GPU node will ever
      take them -- never ordinary queueing. Witness 1 the scheduler's message on each pod, for PLATFORM_MINUTES or
      more in a row; witness 2 the nodes' own spec: the region's GPU nodes carry the nvidia.com/gpu taint. Page
      from PENDING_PAGE_PODS pods with both; a ticket under that, or when kube_nodes is absent.
    * ``Insufficient nvidia.com/gpu``: ordinary queueing while no node can take a pod by its own request (nothing).
      Judged for pods refused longer than PENDING_CHURN while a Ready, schedulable node had at least the pod's
      request free in every minute of the partition (allocatable less the running pods' requests). Page from
      PENDING_PAGE_PODS such pods when the scheduler names GPUs as every node's only shortfall and the free GPUs
      could take them all, each pod whole on one node (the scheduler refuses capacity that exists); a ticket when
      the pods need more than the nodes' free GPUs can place (capacity, e.g. a batch submitted at once, or free
      GPUs in pieces) or other constraints of theirs exclude nodes.
    Pods held by a queue (``SchedulingGated``) are queueing by definition and never read here.
    """
    pods = ctx.kube_pods
    if not _present(pods):
        return []
    out = []
    taint = _pending_runs(pods, ctx, TAINT_MESSAGE)
    taint = taint[taint["minutes"] >= PLATFORM_MINUTES]
    short = _pending_runs(pods, ctx, INSUFFICIENT_MESSAGE)
    short = short[short["minutes"] > PENDING_CHURN / MINUTE]
    for region in sorted(set(taint["region"]) | set(short["region"])):
        free, tainted = _free_gpus(ctx, region)
        most = int(free.max()) if len(free) else 0
        t = taint[taint["region"] == region]
        s = short[(short["region"] == region) & (short["gpu_request"] <= most)] if most > 0 else short.iloc[0:0]
        rows = pd.concat([t, s])
        if rows.empty:
            continue
        only_gpus = s["message"].map(_only_gpus_refused).astype(bool) if len(s) else s["message"].astype(bool)
        need, have = int(s["gpu_request"].sum()), int(free.sum())
        capacity = len(s) > 0 and not _all_fit(s["gpu_request"], free)
        witnessed = (len(t) and tainted) or (len(s) and only_gpus.all() and not capacity)
        severity = "page" if witnessed and len(rows) >= PENDING_PAGE_PODS else "ticket"
        margin = margin_of((len(rows), PENDING_PAGE_PODS)) if severity == "page" else None  # the pods over the bar
        what = []
        if len(t):
            what.append(f"{len(t)} pod(s) lack the toleration of the GPU taint ({GPU_RESOURCE}) "
                        + ("which the region's GPU nodes carry" if tainted else "(kube_nodes absent: the taint is unconfirmed)"))
        if len(s):
            what.append(f"{len(s)} pod(s) refused for Insufficient {GPU_RESOURCE} for over "
                        f"{int(PENDING_CHURN / MINUTE)} minutes while a Ready node has {most} GPUs free all partition"
                        + (f" (capacity: they request {need} GPUs, the free nodes hold {have}, not placeable pod by "
                           "pod)" if capacity else "")
                        + ("" if only_gpus.all() else
                           f" ({int((~only_gpus).sum())} of them excluded from nodes by other constraints of theirs)"))
        out.append(Finding(
            "pods_pending_gpu", FAMILY["pods_pending_gpu"], severity, region, f"pods_pending_gpu|{region}",
            team=",".join(sorted(set(rows["namespace"]))), margin=margin,
            summary=f"{len(rows)} GPU pod(s) in {region} unschedulable for a reason other than a full cluster",
            evidence=_evidence("pods_pending_gpu",
                               f"{'; '.join(what)}; Unschedulable for {int(rows['minutes'].max())}+ minutes "
                               f"(pods {', '.join(sorted(set(rows['pod'].astype(str)))[:5])}); message: "
                               f"{str(rows['message'].iloc[0])[:200]}"),
            value=float(len(rows))))
    return out


# --- crash_loop ---------------------------------------------------------------------------------------------------
def detect_crash_loop(ctx) -> list[Finding]:
    """Pods in a restart loop: CrashLoopBackOff at their last row in the partition and their restart counter up by
    RESTART_LOOP or more over the RESTART_WINDOW ending there (RESTART_KEEP once the region's alert is open); a pod
    created inside the window (its first row there, after the look-back's start) counts from 0.
    Page when CRASH_PAGE_PODS or more looping pods of one job hold GPUs (a job broken, its GPUs unused); a ticket
    otherwise (a single pod, or pods holding no GPU)."""
    pods = ctx.kube_pods
    if not _present(pods):
        return []
    p = _obj(pods[pods["ts"] < ctx.end], ["namespace", "pod", "region", "job_id", "node_id"])
    last = p.sort_values("ts").groupby(["namespace", "pod"]).tail(1)
    last = last[(last["reason"] == "CrashLoopBackOff") & (last["ts"] >= ctx.start)]
    if last.empty:
        return []
    window = p.merge(last[["namespace", "pod", "ts"]].rename(columns={"ts": "at"}), on=["namespace", "pod"])
    born = window.groupby(["namespace", "pod"])["ts"].min()
    window = window[window["ts"] >= window["at"] - RESTART_WINDOW]
    span = window.groupby(["namespace", "pod"]).agg(lo=("restarts", "min"), hi=("restarts", "max"), first=("ts", "min"),
                                                     at=("at", "first"))
    # a pod whose first row lies inside the window was created there, with 0 restarts (Kubernetes counts from 0):
    # its rise is from 0, not from its first sample (a crash loop has restarted twice by its first scrape)
    new = (born.reindex(span.index) > span["at"] - RESTART_WINDOW) & (born.reindex(span.index) > ctx.start - RESTART_WINDOW)
    rise = (span["hi"] - span["lo"].where(~new, 0)).astype(int).rename("rise")
    last = last.merge(rise.reset_index(), on=["namespace", "pod"])
    out = []
    for region, grp in last.groupby("region"):
        bar = RESTART_KEEP if f"crash_loop|{region}" in ctx.open_keys else RESTART_LOOP
        loop = grp[grp["rise"] >= bar]
        if loop.empty:
            continue
        gpu_pods = loop[loop["gpu_request"] > 0]
        per_job = gpu_pods.groupby(gpu_pods["job_id"].fillna(gpu_pods["pod"])).size()
        severity = "page" if len(per_job) and per_job.max() >= CRASH_PAGE_PODS else "ticket"
        out.append(Finding(
            "crash_loop", FAMILY["crash_loop"], severity, region, f"crash_loop|{region}",
            nodes=sorted(set(loop["node_id"].dropna())), team=",".join(sorted(set(loop["namespace"]))),
            lost_gpu_minutes=float(gpu_pods["gpu_request"].sum() * 5),
            # the looping GPU pods of the worst job over the bar
            margin=margin_of((per_job.max(), CRASH_PAGE_PODS)) if severity == "page" else None,
            summary=f"{len(loop)} pod(s) in a restart loop in {region}",
            evidence=_evidence("crash_loop",
                               f"CrashLoopBackOff with the restart counter up {int(loop['rise'].min())}-"
                               f"{int(loop['rise'].max())} in the last {int(RESTART_WINDOW / MINUTE)} minutes (bar {bar}); "
                               f"{int(gpu_pods['gpu_request'].sum())} GPUs requested by the looping pods; pods "
                               f"{', '.join(sorted(set(loop['pod']))[:5])}; image {loop['container_image'].iloc[0]}; "
                               f"read the previous container's log (kubectl logs --previous)"),
            value=float(loop["rise"].max())))
    return out


# --- device_plugin_missing ----------------------------------------------------------------------------------------
def detect_device_plugin_missing(ctx) -> list[Finding]:
    """GPU nodes whose GPUs Kubernetes cannot hand out: ``gpu_allocatable`` 0 of a ``gpu_capacity`` above 0 for
    PLATFORM_MINUTES or more of the partition while the node is Ready and schedulable (a cordoned or NotReady node
    withholds its GPUs on purpose or for another reason). The second witness is DCGM: the node's GPUs still report
    (the hardware and driver are there; the device plugin is not advertising them). Without DCGM rows for the
    node it is a ticket -- the GPUs may be gone, which is the hardware detector's to judge."""
    nodes = ctx.kube_nodes
    if not _present(nodes):
        return []
    n = _obj(_in_partition(nodes, ctx), ["node_id", "region"])
    dead = n[(n["gpu_capacity"] > 0) & (n["gpu_allocatable"] == 0) & n["ready"] & ~n["unschedulable"]]
    minutes = dead.groupby("node_id").size()
    hit = set(minutes[minutes >= PLATFORM_MINUTES].index)
    if not hit:
        return []
    seen = set(ctx.gpu["node_id"].astype(object)) if len(ctx.gpu) else set()
    out = []
    for region, grp in dead[dead["node_id"].isin(hit)].groupby("region"):
        ids = sorted(set(grp["node_id"]))
        confirmed = [x for x in ids if x in seen]
        cap = grp.groupby("node_id")["gpu_capacity"].max()
        out.append(Finding(
            "device_plugin_missing", FAMILY["device_plugin_missing"], "page" if confirmed else "ticket", region,
            f"device_plugin_missing|{region}", nodes=ids, lost_gpu_minutes=float(grp["gpu_capacity"].sum()),
            # one confirmed node pages: the longest one's minutes without allocatable GPUs over the bar
            margin=margin_of((minutes.reindex(confirmed).max(), PLATFORM_MINUTES)) if confirmed else None,
            summary=f"{len(ids)} Ready node(s) in {region} advertise no allocatable GPU: device plugin missing",
            evidence=_evidence("device_plugin_missing",
                               f"gpu_allocatable 0 of capacity {int(cap.max())} on {', '.join(ids[:5])} for "
                               f"{int(minutes.reindex(ids).min())}+ minutes while Ready and schedulable; "
                               + (f"DCGM still reports the GPUs of {len(confirmed)} of them" if confirmed
                                  else "no DCGM rows for them: the GPUs' presence is unconfirmed")
                               + "; check the nvidia-device-plugin DaemonSet pod on the node")))
    return out


PLATFORM_DETECTORS = [detect_cpu_fallback, detect_pods_pending_gpu, detect_crash_loop, detect_device_plugin_missing]


def detect_platform(ctx) -> list[Finding]:
    """All platform findings of one partition (nothing when the cluster exports no Kubernetes tables)."""
    if not _present(getattr(ctx, "kube_pods", None)) and not _present(getattr(ctx, "kube_nodes", None)):
        return []
    return [f for det in PLATFORM_DETECTORS for f in det(ctx)]

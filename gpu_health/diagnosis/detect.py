"""Detectors: per 5-minute partition, findings with a cause family and their evidence.

Pure pandas. Each detector reads direct evidence a real incident leaves in the
sources and the loss tree, so that it can fire in the partition where an
incident starts (a page within 15 minutes of a deploy needs that).

The rule every detector keeps: **a page rests on direct evidence from at least two
independent witnesses; the absence of an optional signal is missing data.** A field a
collector does not export, a job that reports no training metrics, rows a contract
rejected, a collector gone silent: each degrades a judgement (a ticket at most, or
nothing), never pages. docs/runbooks.md lists each detector's page condition.

==================  ===========  =====================================================================
detector            family       pages on (the two witnesses) / tickets on
==================  ===========  =====================================================================
hardware_fault      hardware     two independent channels on one node: a GPU-fault Xid, the DBE
                                 counter, the GPU's rows gone, the node drained / down outside a
                                 window, a job killed by the GPU or node (Xid 79 + rows gone; Xid 48
                                 + DBE) -- not while a driver / kernel / firmware change rolls over
                                 the node (a ticket naming it) unless the ECC counter reports a DBE;
                                 >10 % of a region's nodes at once: one systemic alert naming what
                                 they share. Ticket: one channel, or GPUs still gone after a fault.
thermal_throttle    hardware     thermal clock-event bits AND temperature >= 83 C on busy GPUs (a GPU
                                 whose collector exposes no temperature or bits is not judged)
deploy_regression   software     a change event's cohort worse than the rest in the same minutes:
                                 job failure rate (Fisher exact test + rate-ratio floor) or step time
                                 over baseline (Mann-Whitney cohort judge + effect floor)
training_stall      software     a job that trained before reports 0 steps (no checkpoint) for 3+
                                 minutes AND its GPUs compute nothing (SM/tensor idle, no kernel or
                                 power near idle); ticket when the device cannot confirm
data_io_slowdown    data_io      loader wait above its baseline (slowdown_data_io) AND storage
                                 saturated on those nodes; ticket without the storage witness
network_slowdown    network      gradient-sync time above its baseline AND IB loss or retransmits on
                                 the jobs' links; ticket without the link witness
scheduling_blocked  scheduling   idle GPUs while jobs that could use them (same queue's nodes) have
                                 waited over 3 minutes, above the region's seasonal share
busy_no_progress    gaming       dummy load on the device: busy GPUs with SM and tensor activity idle
                                 AND power near idle (jobs reporting no training metrics); ticket
                                 when the collector exports only one of the two
missing_data        missing_data a region's collectors silent, nodes' GPU rows missing with no fault,
                                 rows rejected by a contract (never a page: not a GPU incident)
==================  ===========  =====================================================================

Thresholds come from definitions (DCGM's Xid catalogue and clock-event bits, the
device-level definitions of gpu_health.metrics.device), physics (the 83 C slowdown
temperature) or the cluster's own history (step-time baselines, the same hour of the
week, the SKU's working power in the same minutes); each constant says why it holds on
any cluster. Planned maintenance never pages: nodes inside a window are excluded.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import fisher_exact

from gpu_health.diagnosis.cohort import REGRESSION, judge_cohorts
from gpu_health.metrics.device import BUSY_UTIL_PCT, device_idle, low_power, reference_power
from gpu_health.metrics.goodput import BLOCKED_WAIT, BUSY_UTIL_PCT as ACTIVE_UTIL_PCT, maintenance_mask, placements, queue_nodes, queue_regions, queue_table
from gpu_health.sources.dcgm_fields import XID_GPU_FAULT

FIVE = pd.Timedelta(minutes=5)
# DCGM clock-event reasons: 0x20 sw thermal slowdown, 0x40 hw thermal slowdown (the contract's bit map)
THERMAL_BITS = 0x20 | 0x40
# NVIDIA's slowdown temperature for datacenter GPUs (nvidia-smi -q "GPU Slowdown Temp" is 83-90 C on A100 /
# H100 / V100): at or above it the clock-event bit is the GPU protecting itself, not a transient
THERMAL_TEMP_C = 83.0
# a throttled GPU for a whole partition (or several for part of it): one minute's bit is a transient DCGM
# reports on any busy GPU
MIN_THERMAL_GPU_MINUTES = 5
# one missing minute is one lost scrape; two in a partition is a gap worth a look
MIN_MISSING_MINUTES = 2
# a component's excess over the workload's own healthy baseline on 10 % of a node's allocated (multi-node, for
# network) GPU-minutes: the same effect-size floor as the step-time cohort judge (STEP_EFFECT_FLOOR)
NODE_SLOW_SHARE = 0.10
NODE_SLOW_MIN_GPU_MINUTES = 5  # one GPU's whole partition
# InfiniBand is lossless by design (credit-based flow control) and RoCE runs lossless with PFC: sustained loss
# of 0.1 % of packets, or 100 retransmits on a link in a minute, is a link fault, not traffic
LINK_RETRANSMITS = 100
LINK_LOSS_PCT = 0.1
LINK_FAULT_MINUTES = 3  # a link failing three minutes of a partition is a fault, not a burst
AGED_WAIT = BLOCKED_WAIT  # a job waiting this long while GPUs it could use idle is blocked (as the fragmentation KPI)
# ... beside a GPU idle this long: three minutes is many scheduling cycles (Slurm's backfill runs every 30 s,
# the Kubernetes scheduler places within seconds), so a GPU idle that long beside a job that fits is not dispatch
AGED_IDLE_MINUTES = int(BLOCKED_WAIT / pd.Timedelta(minutes=1))
# impact floors, shares of the region's paid GPU-minutes idle beside jobs that could use them: a page needs 2 %
# (12 GPUs of a 600-GPU region, tens of dollars an hour), a ticket 1.25 %. Whether it is unusual is not theirs
# to say: the seasonal gate compares with the region's own history at this hour (SCHED_SEASONAL_MARGIN)
SCHED_PAGE_SHARE = 0.02
SCHED_TICKET_SHARE = 0.0125
SCHED_PAGE_SHARE_AFTER_CHANGE = 0.015  # lower bar within DEPLOY_LOOKBACK of a scheduler_config change
SCHED_MIN_JOBS = 4                     # jobs held back: one long-waiting large job is normal, a pile-up is not
# known seasonality never pages: the region's idle_blocked share must stand one percentage point above its own
# usual share at this hour (same hour of the week, or of the previous days at cold start)
SCHED_SEASONAL_MARGIN = 0.01
WEEKLY = "same hour last week"  # the seasonal baseline once a week of history exists
# cold start (under a week of history, no scheduler change in flight): the page bar is this many times the
# impact floor -- the seasonality a week of history would show (a weekday retrain wave leaves 1-3 % of a
# region's GPUs blocked beside queued work on the profiles measured) must not page before it can be known
SCHED_COLD_START_FACTOR = 2.0
NO_HISTORY = "no history yet"  # the seasonal baseline before any partition of the region was recorded
# dummy load pages when a team holds a whole 8-GPU node's worth for the whole partition (8 x 5 GPU-minutes):
# the smallest unit a DGX scheduler hands to a distributed job, and at ~$2-4 per GPU-hour the point where the
# waste is worth waking someone; less is a ticket for the team
NO_PROGRESS_PAGE_GPU_MINUTES = 40
# a trainer completes steps every few seconds (the brief's workloads: well under a minute a step); three
# whole minutes in a row without one, outside a checkpoint, is not a slow step but no progress
STALL_MINUTES = 3
# a stall pages once it holds 20 GPU-minutes in the partition (a 4-GPU job for the whole partition);
# a one- or two-GPU job's hang is its owner's ticket
STALL_PAGE_GPU_MINUTES = 20
# a node's GPU-minutes missing without a fault to explain them are a missing_data ticket from one GPU's
# whole partition (5) up: single lost rows are the exporter's noise
MISSING_NODE_GPU_MINUTES = 5
# a change's cohort fails: at least 3 failures (fewer cannot reach p < 1e-3 against any realistic base rate),
# three times the rate of the rest in the same minutes, Fisher exact p < 1e-3 spent over the looks (Bonferroni)
FAILURE_RATE_RATIO = 3.0
FAILURE_P = 1e-3
MIN_COHORT_FAILURES = 3
# a change is judged for 6 hours (a rolling upgrade of a region completes within hours) on its last 30 minutes
DEPLOY_LOOKBACK = pd.Timedelta(hours=6)
DEPLOY_WINDOW = pd.Timedelta(minutes=30)
STEP_EFFECT_FLOOR = 0.10  # a step-time regression worth a page is 10 % slower than the old version's cohort

RUNBOOKS = {
    "hardware": "Cordon and drain the node(s); run DCGM diagnostics (dcgmi diag -r 3); reseat or RMA the GPU for "
                "Xid 48/79/94/95; check cooling and fans for thermal events. Runbook: docs/runbooks.md#hardware",
    "software": "Roll back the deploy named in the alert (driver / framework / kernel) for the affected cohort; "
                "collect NCCL_DEBUG=INFO logs and py-spy dumps of hung ranks. Runbook: docs/runbooks.md#software",
    "scheduling": "Revert the latest scheduler configuration change; check priorities, quotas, backfill and "
                  "fragmentation (free GPUs vs the smallest pending job). Runbook: docs/runbooks.md#scheduling",
    "data_io": "Check the shared filesystem / object store throughput and the dataset's hot partitions; raise data "
               "loader workers or stage data to local NVMe. Runbook: docs/runbooks.md#data_io",
    "network": "Check the IB / RoCE links with errors (ibdiagnet, port counters), reseat or replace cables, "
               "drain the nodes from multi-node jobs. Runbook: docs/runbooks.md#network",
    "gaming": "Contact the team: GPUs held at high utilization without training progress; reclaim the GPUs "
              "and review the quota. Runbook: docs/runbooks.md#gaming",
    "missing_data": "Check the collectors (dcgm-exporter, node-exporter, the landing-zone uploader) of the region; "
                    "GPU incidents cannot be judged until data flows. Runbook: docs/runbooks.md#missing_data",
}


@dataclass
class Finding:
    detector: str
    family: str
    severity: str  # page | ticket
    region: str
    key: str  # stable scope key: one incident = one alert
    nodes: list[str] = field(default_factory=list)
    team: str | None = None
    cohort: str | None = None
    change_event: str | None = None
    lost_gpu_minutes: float = 0.0
    summary: str = ""
    evidence: str = ""
    baseline: float | None = None
    value: float | None = None


@dataclass
class PartitionContext:
    """Everything the detectors read for one partition [start, end)."""

    start: pd.Timestamp
    end: pd.Timestamp
    gpu: pd.DataFrame
    node: pd.DataFrame
    network: pd.DataFrame
    runtime: pd.DataFrame           # the partition and the 5 minutes before it (stall runs)
    sched: pd.DataFrame             # scheduler events of the last hours up to end
    changes: pd.DataFrame           # change events up to end (last DEPLOY_LOOKBACK)
    maintenance: pd.DataFrame
    leaves: pd.DataFrame            # goodput_leaves of the partition
    baselines: pd.DataFrame         # step_time_baselines of the partition
    meta: pd.DataFrame              # job metadata lookup (job_id -> team, workload_class, model_type, framework_version)
    inventory: pd.DataFrame         # node_id, region, sku, gpus
    region_history: pd.DataFrame    # cluster_goodput rows (partition_start, region, share_idle_blocked) before start
    open_baselines: dict = field(default_factory=dict)  # alert key -> baseline captured when it opened
    jobs: pd.DataFrame | None = None  # job_table() of the scheduler events as known at `end` (computed once per range)
    rejects: pd.DataFrame | None = None  # source_rejects rows of the partition (source, origin, reason)
    source_gaps: pd.DataFrame | None = None  # source_gaps rows of the partition (source, missing_family, reason)
    open_keys: frozenset = frozenset()  # keys of the alerts open after the partition before
    placements: pd.DataFrame | None = None  # placements() of `sched` (sliced from one computed per range)
    slo_events: pd.DataFrame | None = None  # slo_error_budgets rows of the burn-rate lookback up to the partition
    kube_pods: pd.DataFrame | None = None   # kube_pods rows of the restart look-back up to the partition's end (None = absent)
    kube_nodes: pd.DataFrame | None = None  # kube_nodes rows of the partition (None = absent)
    loss_history: pd.DataFrame | None = None  # job_runtime_metrics (loss, checkpoints) of the convergence look-back


def _in_maintenance(ctx: PartitionContext, nodes: pd.Series, regions: pd.Series) -> np.ndarray:
    ts = pd.Series(ctx.start + pd.Timedelta(minutes=2, seconds=30), index=nodes.index)
    return maintenance_mask(ts, regions, nodes, ctx.maintenance)


def _state(ctx: PartitionContext, state: str, by: list[str]) -> pd.Series:
    lv = ctx.leaves
    return lv[lv["state"] == state].groupby(by, observed=True)["gpu_minutes"].sum() if len(lv) else pd.Series(dtype=float)


# Evidence channels a hardware verdict can rest on. Each comes from a different collector or subsystem, so
# two of them agreeing is two independent witnesses: the driver's Xid log (dcgm-exporter's XID field), the
# ECC counters, the GPU exporter's rows, the node's own agent (health), the scheduler's job outcomes.
HW_XID, HW_DBE, HW_GONE, HW_NODE_STATE, HW_JOB_FAILED, HW_PERSISTED = (
    "fatal Xid", "double-bit ECC", "GPU rows gone", "node drained/down", "job failed on it", "unavailable earlier")
HW_DIRECT = {HW_XID, HW_DBE, HW_GONE, HW_NODE_STATE, HW_JOB_FAILED}
# witnesses of a fault, as opposed to witnesses of unavailability (rows gone, a node drained): an admin's drain
# and the exporter stopping with it are one cause, so a page needs at least one fault witness among its two
HW_FAULT = {HW_XID, HW_DBE, HW_JOB_FAILED}
# A node-level fault pages on at least this many independent channels (the rule: a page names two
# independent pieces of evidence; e.g. Xid 79 and the GPU's rows gone, Xid 48 and the DBE counter).
HW_PAGE_SIGNALS = 2
# Many nodes at once is one systemic incident, not a fault per node (NVSentinel stops cordoning at 50 % of
# nodes; a pager should be stricter): above this share of a region's nodes within one partition the
# hardware finding becomes one alert naming what the nodes share.
SYSTEMIC_NODE_SHARE = 0.10
SYSTEMIC_MIN_NODES = 3
# Changes that reinstall or reboot the GPU stack: while one is rolling over a node its GPUs go missing,
# its node drains and its jobs fail, and none of that is a hardware fault.
ROLLOUT_KINDS = ("driver_upgrade", "kernel_upgrade", "firmware_update", "bios_update")
# The free-text reasons a scheduler gives for a job killed by its GPU or node (Slurm NODE_FAIL, the Xid
# text the driver logs); application Xids (13, 31, 43, 45) are the job's own and do not count.
_FAULT_REASON = r"(?i)ecc|fallen off the bus|node fail|nvlink|row remap"
_XID_IN_REASON = r"(?i)\bxid\s*:?\s*(\d+)"


def _rollout_nodes(ctx: PartitionContext) -> dict[str, str]:
    """node -> the change in flight on it: a driver / kernel / firmware change whose scope covers the node
    within DEPLOY_LOOKBACK before the partition's end, or a node whose driver or kernel version changes
    inside the partition (a rollout the change calendar did not announce)."""
    out: dict[str, str] = {}
    ch = ctx.changes
    if ch is not None and len(ch):
        recent = ch[ch["kind"].isin(ROLLOUT_KINDS) & (ch["ts"] >= ctx.end - DEPLOY_LOOKBACK) & (ch["ts"] < ctx.end)]
        for ev in recent.sort_values("ts").itertuples(index=False):
            label = f"{ev.event_id} ({ev.kind} {ev.from_version} -> {ev.to_version} at {ev.ts:%H:%M})"
            for n in _scope_nodes(ev.scope, ctx.inventory):
                out[n] = label
    node = ctx.node
    if len(node):
        versions = node.groupby("node_id", observed=True)[["driver_version", "kernel_version"]].nunique()
        for n in versions.index[(versions > 1).any(axis=1)]:
            out.setdefault(str(n), "driver or kernel version changing on the node")
    return out


def _failed_on_fault(ctx: PartitionContext) -> dict[str, list[str]]:
    """node -> reasons of jobs placed on it that ended in the partition killed by their GPU or node."""
    s = ctx.sched
    if s is None or s.empty:
        return {}
    ended = s[(s["event"] == "ended") & (s["ts"] >= ctx.start) & (s["ts"] < ctx.end) & s["node_ids"].notna()]
    if ended.empty:
        return {}
    reason = ended["reason"].fillna("").astype(str)
    code = pd.to_numeric(reason.str.extract(_XID_IN_REASON)[0], errors="coerce")
    fault = (ended["exit_state"] == "node_fail") | reason.str.contains(_FAULT_REASON) | code.isin(XID_GPU_FAULT)
    out: dict[str, list[str]] = {}
    for nodes, why in zip(ended.loc[fault, "node_ids"].astype(str), reason[fault]):
        for n in nodes.split(","):
            out.setdefault(n, []).append(why or "node_fail")
    return out


def hardware_evidence(ctx: PartitionContext) -> pd.DataFrame:
    """One row per node with hardware evidence in the partition (outside maintenance): which independent
    channels saw it (``signals``), the GPUs involved, the change in flight on it, GPU-minutes lost."""
    gpu, node, inv = ctx.gpu, ctx.node, ctx.inventory
    cols = ["region", "node_id", "signals", "detail", "rollout", "lost"]
    signals: dict[str, set] = {}
    detail: dict[str, list[str]] = {}

    def add(n, sig, text):
        signals.setdefault(n, set()).add(sig)
        detail.setdefault(n, []).append(text)

    g = gpu[~_in_maintenance(ctx, gpu["node_id"], gpu["region"])] if len(gpu) else gpu
    for n, grp in g[g["xid"].isin(XID_GPU_FAULT)].groupby("node_id", observed=True):
        add(str(n), HW_XID, ", ".join(f"Xid {int(x)}" for x in sorted(set(grp["xid"]))) + f" on {grp['gpu_uuid'].nunique()} GPU(s)")
    dbe = g[g["ecc_dbe_delta"].fillna(0) > 0]
    for n, grp in dbe.groupby("node_id", observed=True):
        add(str(n), HW_DBE, f"{int(grp['ecc_dbe_delta'].sum())} double-bit ECC error(s)")
    # GPUs the inventory expects that did not report in at least MIN_MISSING_MINUTES minutes, on nodes whose
    # region reports (a silent region is missing data, judged by missing_data)
    if len(inv):
        expected = inv.set_index("node_id")["gpus"].astype(float)
        per_min = gpu.groupby(["node_id", "ts"], observed=True)["gpu_uuid"].nunique().unstack("ts", fill_value=0) if len(gpu) else pd.DataFrame()
        minutes = pd.date_range(ctx.start, ctx.end, freq="1min", inclusive="left")
        per_min = per_min.reindex(index=expected.index, columns=minutes, fill_value=0)
        short = per_min.rsub(expected, axis=0).clip(lower=0)
        short_minutes = (short > 0).sum(axis=1)
        maint = _in_maintenance(ctx, pd.Series(expected.index), inv.set_index("node_id")["region"].reindex(expected.index).reset_index(drop=True))
        for n, k, m in zip(expected.index, short_minutes, maint):
            if k >= MIN_MISSING_MINUTES and not m:
                add(str(n), HW_GONE, f"{int(short.loc[n].max())} GPU(s) not reporting for {int(k)} min")
    if len(node):
        state = node[~_in_maintenance(ctx, node["node_id"], node["region"])]
        state = state[state["health"].isin(["drained", "down"])]
        for n, grp in state.groupby("node_id", observed=True):
            add(str(n), HW_NODE_STATE, f"node {grp['health'].iloc[-1]} outside maintenance")
    for n, reasons in _failed_on_fault(ctx).items():
        if n in signals or n in set(inv["node_id"]):
            add(n, HW_JOB_FAILED, f"{len(reasons)} job(s) failed: {reasons[0]}")
    hw = _state(ctx, "hw_unavailable", ["node_id"])
    for n, v in hw.items():  # the loss tree's verdict: unavailable, corroborated by a fault or a persisting gap
        if n != "unseen" and v >= MIN_MISSING_MINUTES and HW_XID not in signals.get(n, set()):
            add(str(n), HW_PERSISTED, f"{v:.0f} GPU-minutes unavailable since an earlier fault or for 15+ minutes")
    if not signals:
        return pd.DataFrame(columns=cols)
    # rows gone alone is an exporter gap (missing data), and a job killed on a node alone is the scheduler's word
    # for one job (Slurm's NODE_FAIL follows network blips too): each corroborates, neither opens a finding
    keep = [n for n, s in signals.items() if s - {HW_GONE, HW_JOB_FAILED}]
    region_of = dict(zip(inv["node_id"], inv["region"]))
    region_of.update(dict(zip(gpu["node_id"].astype(object), gpu["region"].astype(object))) if len(gpu) else {})
    rollout = _rollout_nodes(ctx)
    return pd.DataFrame({
        "region": [region_of.get(n, "*") for n in keep], "node_id": keep, "signals": [signals[n] for n in keep],
        "detail": ["; ".join(detail[n]) for n in keep], "rollout": [rollout.get(n) for n in keep],
        "lost": [float(hw.get(n, 0.0)) for n in keep],
    }, columns=cols)


def _hardware_severity(signals: set, rollout: str | None) -> str:
    """Page on HW_PAGE_SIGNALS independent direct channels, one of them a fault witness (HW_FAULT: a node
    drained with its GPU rows gone is unavailable, not known broken); a node a driver/kernel/firmware change is rolling
    over is the rollout's (a ticket naming it) unless its ECC counters report double-bit errors, which no
    software change produces."""
    direct = signals & HW_DIRECT
    if len(direct) < HW_PAGE_SIGNALS or not direct & HW_FAULT:
        return "ticket"
    if rollout and HW_DBE not in direct:
        return "ticket"
    return "page"


def _shared(ev: pd.DataFrame, ctx: PartitionContext) -> str:
    """What the nodes of a systemic hardware finding have in common."""
    parts = []
    rollouts = ev["rollout"].dropna()
    if len(rollouts):
        top = rollouts.value_counts()
        parts.append(f"{top.iloc[0]} of them are in the change {top.index[0]}")
    node = ctx.node[ctx.node["node_id"].isin(ev["node_id"])] if len(ctx.node) else ctx.node
    if len(node):
        drv = node.groupby("node_id", observed=True)["driver_version"].last().value_counts()
        parts.append(f"driver {drv.index[0]} on {drv.iloc[0]}")
    skus = ctx.inventory[ctx.inventory["node_id"].isin(ev["node_id"])]["sku"].value_counts()
    if len(skus):
        parts.append(f"SKU {skus.index[0]} on {skus.iloc[0]}")
    return "; ".join(parts) or "the region"


def detect_hardware(ctx: PartitionContext) -> list[Finding]:
    """Node-level GPU faults, each verdict on independent evidence (``hardware_evidence``).

    Page: at least HW_PAGE_SIGNALS independent channels on one node -- a fatal Xid (XID_GPU_FAULT) and its
    GPU's rows gone (Xid 79), a fatal Xid and the double-bit ECC counter (Xid 48), a node drained or down
    outside maintenance and a job killed by it, ... -- and no driver/kernel/firmware change rolling over the
    node (then: a ticket naming the change; the deploy detector judges the change by its cohort).
    Ticket: one channel (a fatal Xid whose GPU stays and whose job survives, a node drained with no fault
    seen), or GPUs still unavailable after an earlier fault. GPU rows missing with nothing else is missing
    data (the missing_data detector), never hardware: exporters drop rows, files get rejected.
    Systemic: when more than SYSTEMIC_NODE_SHARE of a region's nodes (and at least SYSTEMIC_MIN_NODES) have
    hardware evidence in one partition, the region gets one alert that names what they share; it pages only
    on direct evidence on nodes no change is rolling over.
    """
    ev = hardware_evidence(ctx)
    out = []
    for region, grp in ev.groupby("region"):
        sev = [_hardware_severity(s, r) for s, r in zip(grp["signals"], grp["rollout"])]
        grp = grp.assign(severity=sev)
        nodes = sorted(grp["node_id"])
        region_nodes = int((ctx.inventory["region"] == region).sum()) or len(nodes)
        lost = float(grp["lost"].sum())
        systemic = len(nodes) >= SYSTEMIC_MIN_NODES and len(nodes) > SYSTEMIC_NODE_SHARE * region_nodes
        paging = grp[grp["severity"] == "page"]
        rollouts = sorted(set(grp["rollout"].dropna()))
        if systemic:
            summary = (f"{len(nodes)} of {region_nodes} nodes in {region} show GPU faults at once: one systemic "
                       f"incident ({_shared(grp, ctx)})")
        elif len(paging):
            summary = f"GPU hardware fault in {region} on {', '.join(sorted(paging['node_id']))}"
        elif rollouts:
            summary = f"GPUs unavailable in {region} on {len(nodes)} node(s) during {rollouts[0]}"
        elif all(HW_PERSISTED in s for s in grp["signals"]):
            summary = f"GPUs still unavailable in {region} on {', '.join(nodes)} (after a fault, or for 15+ minutes)"
        else:
            summary = f"Possible GPU hardware fault in {region} on {', '.join(nodes)} (one witness so far)"
        evidence = "; ".join(
            f"{r.node_id}: {r.detail}" + (f" [change in flight: {r.rollout}]" if r.rollout else "")
            for r in grp.sort_values(["severity", "node_id"], ascending=[False, True]).head(12).itertuples())
        evidence += f"; {lost:.0f} GPU-minutes unavailable"
        out.append(Finding("hardware_fault", "hardware", "page" if len(paging) else "ticket", region,
                           f"hardware_fault|{region}", nodes=nodes, lost_gpu_minutes=lost,
                           change_event=None, summary=summary, evidence=evidence))
    return out


def detect_thermal(ctx: PartitionContext) -> list[Finding]:
    g = ctx.gpu
    hot = g[((g["throttle_reasons"].fillna(0).astype("int64") & THERMAL_BITS) > 0) & (g["temp_c"] >= THERMAL_TEMP_C)]
    hot = hot[~_in_maintenance(ctx, hot["node_id"], hot["region"])]
    out = []
    for region, grp in hot.groupby("region"):
        per_node = grp.groupby("node_id").size()
        per_node = per_node[per_node >= MIN_THERMAL_GPU_MINUTES]
        if per_node.empty:
            continue
        nodes = sorted(per_node.index)
        sub = grp[grp["node_id"].isin(nodes)]
        busy = sub["job_id"].notna().any()
        slow = _state(ctx, "slowdown_compute", ["region", "node_id"])
        lost = float(sum(v for (r, n), v in slow.items() if r == region and n in nodes))
        out.append(Finding("thermal_throttle", "hardware", "page" if busy else "ticket", region, f"thermal_throttle|{region}",
                           nodes=nodes, lost_gpu_minutes=lost,
                           summary=f"Thermal throttling in {region} on {', '.join(nodes)}",
                           evidence=f"{int(per_node.sum())} GPU-minutes with thermal clock-event bits at up to "
                                    f"{sub['temp_c'].max():.0f} C, SM clock median {sub['sm_clock_mhz'].median():.0f} MHz; "
                                    f"{lost:.0f} GPU-minutes of compute slowdown"))
    return out


def _scope_nodes(scope: str, inventory: pd.DataFrame) -> set[str]:
    if scope in (None, "", "*"):
        return set(inventory["node_id"])
    if scope in set(inventory["region"]):
        return set(inventory.loc[inventory["region"] == scope, "node_id"])
    return {s.strip() for s in str(scope).split(",") if s.strip()}


def detect_deploys(ctx: PartitionContext) -> list[Finding]:
    ch = ctx.changes
    out = []
    if ch is None or ch.empty:
        return out
    recent = _rollout_groups(ch[(ch["ts"] >= ctx.end - DEPLOY_LOOKBACK) & (ch["ts"] < ctx.end)], ctx.inventory)
    for ev in recent.itertuples(index=False):
        since = max(ev.ts, ctx.end - DEPLOY_WINDOW)
        # a change is judged again every partition for DEPLOY_LOOKBACK: spend the false-alarm rate over those
        # looks (Bonferroni), so a benign deploy does not page by chance hours later; a real regression shows
        # in the first looks, where the bar is highest
        alpha = FAILURE_P / max(1, int(np.ceil((ctx.end - ev.ts) / FIVE)))
        if ev.kind in ("driver_upgrade", "kernel_upgrade", "firmware_update"):
            f = _node_cohort_failures(ctx, ev, since, alpha)
        elif ev.kind == "framework_release" and pd.notna(ev.to_version):
            f = _framework_cohort(ctx, ev, since, alpha)
        else:
            continue
        if f is not None:
            out.append(f)
    return out


NODE_CHANGE_KINDS = ("driver_upgrade", "kernel_upgrade", "firmware_update")
_VERSION_COLUMN = {"driver_upgrade": "driver_version", "kernel_upgrade": "kernel_version"}


def _rollout_groups(recent: pd.DataFrame, inventory: pd.DataFrame) -> pd.DataFrame:
    """Change events, with the node changes of one rollout merged: events of one kind moving to one version
    (a rolling upgrade announced node by node or batch by batch) are one change, first event's id and time,
    scope the union of their nodes. A rollout judged batch by batch would leave each batch too few jobs to
    test, and the regression would never page."""
    if recent.empty:
        return recent
    node_kind = recent["kind"].isin(NODE_CHANGE_KINDS) & recent["to_version"].notna()
    out = [recent[~node_kind]]
    for _, grp in recent[node_kind].sort_values("ts").groupby(["kind", "to_version"], sort=False):
        first = grp.iloc[[0]].copy()
        nodes = set().union(*(_scope_nodes(s, inventory) for s in grp["scope"]))
        first["scope"] = ",".join(sorted(nodes)) if len(grp) > 1 else first["scope"]
        out.append(first)
    return pd.concat([o for o in out if len(o)], ignore_index=True) if any(len(o) for o in out) else recent.iloc[0:0]


def _node_cohort(ctx: PartitionContext, ev) -> set[str]:
    """The nodes on the change's new version: its scope, and every node whose own telemetry reports the new
    version (the node is the witness of what it runs, whatever the change calendar's scope spelling)."""
    cohort = _scope_nodes(ev.scope, ctx.inventory)
    col = _VERSION_COLUMN.get(ev.kind)
    if col and len(ctx.node) and pd.notna(ev.to_version):
        cohort |= set(ctx.node.loc[ctx.node[col].astype(object) == ev.to_version, "node_id"].astype(object))
    return cohort


def _node_cohort_failures(ctx: PartitionContext, ev, since, alpha: float = FAILURE_P) -> Finding | None:
    # a later change of the same kind to another version on these nodes supersedes this one (e.g. the rollback)
    cohort = _node_cohort(ctx, ev)
    ch = ctx.changes
    later = ch[(ch["ts"] > ev.ts) & (ch["ts"] < ctx.end) & (ch["kind"] == ev.kind) & (ch["to_version"] != ev.to_version)]
    if any(_scope_nodes(s, ctx.inventory) & cohort for s in later["scope"]):
        return None
    ended = ctx.sched[(ctx.sched["event"] == "ended") & (ctx.sched["ts"] >= since) & (ctx.sched["ts"] < ctx.end)]
    if ended.empty:
        return None
    on = ended["node_ids"].fillna("").map(lambda s: bool(cohort & set(s.split(","))))
    failed = ended["exit_state"].isin(["failed", "node_fail"])
    a, b = int((on & failed).sum()), int((on & ~failed).sum())
    c, d = int((~on & failed).sum()), int((~on & ~failed).sum())
    if a < MIN_COHORT_FAILURES:
        return None
    rate_new = a / max(a + b, 1)
    rate_old = (c + 0.5) / max(c + d + 1, 1)
    p = fisher_exact([[a, b], [c, d]], alternative="greater")[1]
    if p >= alpha or rate_new < FAILURE_RATE_RATIO * rate_old:
        return None
    nodes_hit = sorted(cohort & set(",".join(ended.loc[on & failed, "node_ids"].fillna("")).split(",")))
    reasons = ended.loc[on & failed, "reason"].fillna("").value_counts().head(3)
    region = _region_of(nodes_hit or sorted(cohort), ctx.inventory)
    lost = float(ctx.leaves[(ctx.leaves["state"] == "failure_loss") & ctx.leaves["node_id"].isin(cohort)]["gpu_minutes"].sum()) if len(ctx.leaves) else 0.0
    first_fail = ended.loc[on & failed, "ts"].min()
    onset = (first_fail - ev.ts) / pd.Timedelta(minutes=1)
    return Finding("deploy_regression", "software", "page", region, f"deploy_regression|{ev.event_id}",
                   nodes=sorted(cohort), cohort=f"{ev.kind} {ev.from_version} -> {ev.to_version}", change_event=ev.event_id,
                   lost_gpu_minutes=lost,
                   summary=f"Job failures after {ev.kind} {ev.from_version} -> {ev.to_version} on {len(cohort)} node(s) in {region}",
                   evidence=f"cohort failure rate {rate_new:.0%} ({a}/{a + b} jobs) vs {c / max(c + d, 1):.1%} elsewhere since "
                            f"{since:%H:%M}, Fisher p={p:.1g}; first failure {onset:.0f} min after the change; top reasons: "
                            + "; ".join(f"{k} ({v})" for k, v in reasons.items()))


def _framework_cohort(ctx: PartitionContext, ev, since, alpha: float = FAILURE_P) -> Finding | None:
    rt = ctx.runtime[(ctx.runtime["ts"] >= since) & (ctx.runtime["ts"] < ctx.end) & (ctx.runtime["steps"] > 0)]
    if rt.empty or ctx.meta is None or ctx.meta.empty:
        return None
    m = ctx.meta
    rows = rt.merge(m[["job_id", "framework_version", "model_type"]], on="job_id", how="inner")
    place = ctx.gpu[ctx.gpu["job_id"].notna()].groupby(["ts", "job_id"]).agg(sku=("sku", "first"), gpus=("sku", "size"), region=("region", "first")).reset_index()
    rows = rows.merge(place, on=["ts", "job_id"], how="inner")
    b = ctx.baselines
    if b is None or b.empty:
        return None
    b = b.astype({"model_type": object, "sku": object})[["model_type", "sku", "gpus", "step_time_s"]].rename(columns={"step_time_s": "base"})
    rows = rows.astype({"model_type": object, "sku": object}).merge(b, on=["model_type", "sku", "gpus"], how="inner")
    if rows.empty:
        return None
    rows["ratio"] = rows["step_time_s"] / rows["base"]
    new = rows[rows["framework_version"] == ev.to_version]
    old = rows[rows["framework_version"] != ev.to_version]
    if len(new) < 8 or len(old) < 8:
        return None
    v = judge_cohorts(new, old, metric="ratio", time_col="ts", higher_is_worse=True, effect_floor=STEP_EFFECT_FLOOR,
                      alpha=alpha, start=since)
    if v.verdict != REGRESSION:
        return None
    region = new["region"].mode().iloc[0] if new["region"].nunique() == 1 else "*"
    lost = float(ctx.leaves[(ctx.leaves["state"] == "slowdown_compute") & (ctx.leaves["framework_version"] == ev.to_version)]["gpu_minutes"].sum())
    teams = sorted(m.loc[m["framework_version"] == ev.to_version, "team"].dropna().unique())
    return Finding("deploy_regression", "software", "page", region, f"deploy_regression|{ev.event_id}",
                   team=",".join(teams) if teams else None, cohort=f"framework {ev.to_version}", change_event=ev.event_id,
                   lost_gpu_minutes=lost,
                   summary=f"Step time regression on {ev.to_version} ({new['job_id'].nunique()} jobs)",
                   evidence=v.describe())


def _region_of(nodes, inventory: pd.DataFrame) -> str:
    regions = set(inventory.loc[inventory["node_id"].isin(nodes), "region"])
    return regions.pop() if len(regions) == 1 else "*"


# the loss-tree states of minutes whose jobs report step progress (where a slowdown can be measured)
MEASURED_STATES = ["productive", "slowdown_data_io", "slowdown_network", "slowdown_checkpoint", "slowdown_compute"]
ALLOC_STATES = ["allocated_idle", "allocated_unproductive", "failure_loss", "slowdown_data_io", "slowdown_network",
                "slowdown_checkpoint", "slowdown_compute", "productive"]


def _slow_nodes(lv: pd.DataFrame, state: str, denominator: pd.Series) -> pd.DataFrame:
    """Nodes where ``state`` holds at least NODE_SLOW_SHARE of the denominator GPU-minutes."""
    slow = lv[lv["state"] == state].groupby(["region", "node_id"])["gpu_minutes"].sum()
    frame = pd.DataFrame({"slow": slow, "den": denominator.reindex(slow.index).fillna(0.0)})
    frame = frame[(frame["slow"] >= NODE_SLOW_MIN_GPU_MINUTES) & (frame["slow"] >= NODE_SLOW_SHARE * frame["den"])]
    return frame.reset_index()


def _saturated_storage(ctx: PartitionContext) -> pd.MultiIndex:
    """(region, node) pairs whose local storage was saturated (NVMe >= 95 % busy) in 3+ minutes of the partition."""
    node = ctx.node
    if node is None or node.empty:
        return pd.MultiIndex.from_tuples([], names=["region", "node_id"])
    hot = node[node["nvme_util_pct"] >= 95].groupby(["region", "node_id"], observed=True)["ts"].nunique()
    return hot[hot >= LINK_FAULT_MINUTES].index


def detect_slowdowns(ctx: PartitionContext) -> list[Finding]:
    """Loader wait (data_io) and gradient sync (network) above their baselines, judged per node:
    storage or fabric trouble hits a set of nodes, which a region-wide share would dilute."""
    out = []
    lv = ctx.leaves
    if lv.empty:
        return _faulty_links(ctx, set())
    # the share is of the minutes where a slowdown can be measured (jobs reporting step progress): minutes of
    # uninstrumented jobs cannot show a slowdown and must not dilute one
    measured = lv[lv["state"].isin(MEASURED_STATES)]
    per_node = measured.groupby(["region", "node_id"])["gpu_minutes"].sum()
    multi = measured[measured["workload_class"] == "distributed"].groupby(["region", "node_id"])["gpu_minutes"].sum()
    io_nodes = _slow_nodes(lv, "slowdown_data_io", per_node)
    # storage saturated on several nodes at once (a shared filesystem, a hot dataset) is judged over those nodes
    # together: few of their jobs may report loader time, each node's share alone would be too thin to see
    hot_nodes = _saturated_storage(ctx)
    if len(hot_nodes):
        slow_io = lv[lv["state"] == "slowdown_data_io"].groupby(["region", "node_id"])["gpu_minutes"].sum()
        pooled = pd.DataFrame({"slow": slow_io.reindex(hot_nodes).fillna(0.0), "den": per_node.reindex(hot_nodes).fillna(0.0)})
        pooled = pooled[pooled["slow"] > 0].reset_index()
        for region, grp in pooled.groupby("region"):
            slow, den = grp["slow"].sum(), grp["den"].sum()
            if slow >= NODE_SLOW_MIN_GPU_MINUTES and slow >= NODE_SLOW_SHARE * den:
                io_nodes = pd.concat([io_nodes[io_nodes["region"] != region], grp], ignore_index=True)
    # an open data-loader alert stays open while its storage witness lasts (the loader share of a few
    # instrumented jobs comes and goes around its bar; the incident does not)
    for region in sorted({r for r, _ in hot_nodes} - set(io_nodes["region"])):
        if f"data_io_slowdown|{region}" in ctx.open_keys:
            nodes = sorted(n for r, n in hot_nodes if r == region)
            out.append(Finding("data_io_slowdown", "data_io", "ticket", region, f"data_io_slowdown|{region}", nodes=nodes,
                               summary=f"Storage still saturated in {region} on {len(nodes)} node(s)",
                               evidence=f"NVMe >= 95 % busy on {', '.join(nodes[:8])}; loader wait this partition under "
                                        "the bar (few jobs report it)"))
    for region, grp in io_nodes.groupby("region"):
        nodes = sorted(grp["node_id"])
        sat = ctx.node[(ctx.node["region"] == region) & ctx.node["node_id"].isin(nodes)]
        hot = sat[sat["nvme_util_pct"] >= 95]
        total = float(grp["slow"].sum())
        out.append(Finding("data_io_slowdown", "data_io", "page" if len(hot) else "ticket", region,
                           f"data_io_slowdown|{region}", nodes=nodes, lost_gpu_minutes=total,
                           value=float(total / max(grp["den"].sum(), 1e-9)),
                           summary=f"Data-loader slowdown in {region} on {len(nodes)} node(s)",
                           evidence=f"{total:.0f} GPU-minutes ({total / max(grp['den'].sum(), 1e-9):.0%} of those nodes' "
                                    f"measured training time) lost to loader wait above baseline; storage saturated on "
                                    f"{hot['node_id'].nunique()} node(s) (NVMe >= 95 %, read "
                                    f"{sat['disk_read_mbps'].median() if len(sat) else float('nan'):.0f} MB/s median)"))
    net_nodes = _slow_nodes(lv, "slowdown_network", multi)
    for region, grp in net_nodes.groupby("region"):
        nodes = sorted(grp["node_id"])
        links = ctx.network[(ctx.network["region"] == region) & ctx.network["node_id"].isin(nodes)]
        bad = links[(links["retransmits"].fillna(0) >= LINK_RETRANSMITS) | (links["packet_loss_pct"].fillna(0) >= LINK_LOSS_PCT)]
        # switch-port and node-exporter IB counters have no retransmits: absence is not "0 retransmits"
        retransmits = ("no link telemetry" if links.empty
                       else f"{int(links['retransmits'].fillna(0).sum())} retransmits" if links["retransmits"].notna().any()
                       else "retransmits not exported")
        total = float(grp["slow"].sum())
        bad_nodes = sorted(set(bad["node_id"])) or nodes
        out.append(Finding("network_slowdown", "network", "page" if len(bad) else "ticket", region,
                           f"network_slowdown|{region}", nodes=bad_nodes, lost_gpu_minutes=total,
                           value=float(total / max(grp["den"].sum(), 1e-9)),
                           summary=f"Collective-communication slowdown in {region} on {len(bad_nodes)} node(s)",
                           evidence=f"{total:.0f} GPU-minutes ({total / max(grp['den'].sum(), 1e-9):.0%} of multi-node jobs' "
                                    f"time there) lost to gradient sync above baseline; {bad['link_id'].nunique() if len(bad) else 0} "
                                    f"link(s) with loss up to {links['packet_loss_pct'].max() if len(links) else 0:.2f} % and "
                                    f"{retransmits}"))
    out += _faulty_links(ctx, {n for f in out if f.family == "network" for n in f.nodes})
    return out


def _faulty_links(ctx: PartitionContext, judged: set) -> list[Finding]:
    """Links failing on the port counters while a job uses the node, where no job reports gradient-sync time
    (uninstrumented or unknown jobs: the slowdown cannot be measured, the fault can).

    Page: on one link, packet loss >= LINK_LOSS_PCT AND retransmits >= LINK_RETRANSMITS in the same minute (two
    counters: the link layer's losses and the transport's retries) for LINK_FAULT_MINUTES minutes, on a node
    whose GPUs hold a job. One counter only (e.g. retransmits not exported): a ticket."""
    net = ctx.network
    if net is None or net.empty:
        return []
    net = net[~net["node_id"].isin(judged)]
    loss = net["packet_loss_pct"].fillna(0) >= LINK_LOSS_PCT
    retr = net["retransmits"].fillna(0) >= LINK_RETRANSMITS
    bad = net[loss | retr].assign(both=(loss & retr)[loss | retr])
    if bad.empty:
        return []
    busy_nodes = set(ctx.gpu.loc[ctx.gpu["job_id"].notna(), "node_id"].astype(object)) if len(ctx.gpu) else set()
    per_link = bad.groupby(["region", "node_id", "link_id"], observed=True).agg(
        minutes=("ts", "nunique"), both=("both", "sum"), loss=("packet_loss_pct", "max"), retr=("retransmits", "sum"))
    per_link = per_link[per_link["minutes"] >= LINK_FAULT_MINUTES].reset_index()
    per_link = per_link[per_link["node_id"].isin(busy_nodes)]
    out = []
    for region, grp in per_link.groupby("region"):
        paging = grp[grp["both"] >= LINK_FAULT_MINUTES]
        rows = paging if len(paging) else grp
        nodes = sorted(set(rows["node_id"]))
        out.append(Finding("network_slowdown", "network", "page" if len(paging) else "ticket", region,
                           f"network_slowdown|{region}", nodes=nodes,
                           summary=f"InfiniBand / RoCE link faults in {region} on {len(nodes)} node(s) running jobs",
                           evidence=f"{len(rows)} link(s) failing for {int(rows['minutes'].max())}+ minutes: packet loss up "
                                    f"to {rows['loss'].max():.2f} % and {int(rows['retr'].fillna(0).sum())} retransmits "
                                    + ("(both counters)" if len(paging) else "(one counter: the other is not exported or "
                                       "below its bar)") + "; the jobs there report no gradient-sync time, so the slowdown "
                                    "itself cannot be measured"))
    return out


def job_table(sched: pd.DataFrame, inventory: pd.DataFrame) -> pd.DataFrame:
    """One row per submitted job: submit time, GPUs, queue, the region its queue runs in, when it left the queue."""
    cols = ["sub", "gpus", "queue", "left", "region"]
    if sched is None or sched.empty:
        return pd.DataFrame(columns=cols)
    sub = queue_table(sched)
    qmap = queue_regions(sched, dict(zip(inventory["node_id"], inventory["region"])))
    sub["region"] = sub["queue"].astype(object).map(qmap)
    return sub[cols]


def jobs_as_of(jobs: pd.DataFrame, end: pd.Timestamp) -> pd.DataFrame:
    """The job table as it was known at ``end`` (later submissions and starts unseen)."""
    j = jobs[jobs["sub"] < end].copy()
    j.loc[j["left"] >= end, "left"] = pd.NaT
    return j


def aged_blocked(ctx: PartitionContext) -> pd.DataFrame:
    """Per region: GPU-minutes idle while jobs that could use them have waited over AGED_WAIT.

    Short waits are normal (and make the loss tree's idle_blocked noisy at 5-minute grain); a healthy
    scheduler does not keep a job waiting for minutes while GPUs it could run on sit idle. A job can
    run on the nodes its queue places on (learned from the placements of the last hours, like a
    Slurm partition's node list) that have as many GPUs free as the queue's smallest waiting request
    (whole free nodes for a request larger than a node); idle GPUs of another pool do not block it.
    Free GPUs of the queue's nodes that no node has enough of, but that together could host the smallest
    waiting job, are fragmentation (``fragmented_gpu_minutes``, included in the blocked total): packing,
    not demand, keeps them idle. A queue with no placement yet is matched against its whole region. A GPU
    freed a moment ago is being placed again: it counts from its second idle minute in a row.
    """
    minutes = pd.date_range(ctx.start, ctx.end, freq="1min", inclusive="left")
    inv = ctx.inventory
    cols = ["region", "blocked_gpu_minutes", "paid_gpu_minutes", "aged_jobs", "wait_p95_min", "fragmented_gpu_minutes"]
    if ctx.sched is None or ctx.sched.empty or inv.empty:
        return pd.DataFrame(columns=cols)
    sub = ctx.jobs if ctx.jobs is not None else job_table(ctx.sched, inv)
    reach = queue_nodes(ctx.placements if ctx.placements is not None else placements(ctx.sched))
    g = ctx.gpu
    idle = g[g["job_id"].isna() & ~g["xid"].isin(XID_GPU_FAULT)]
    idle = idle[~_in_maintenance(ctx, idle["node_id"], idle["region"])]
    paid = inv.groupby("region")["gpus"].sum() * len(minutes)
    rows = []
    mid = (minutes + pd.Timedelta(seconds=30)).values
    never = pd.Timestamp.max.tz_localize("UTC")

    # a GPU freed a moment ago is being placed again (dispatch takes scheduling cycles; in a saturated pool
    # every job that ends leaves such a gap): a GPU counts as free once it has been idle for AGED_IDLE_MINUTES
    # minutes in a row -- as long as a job may wait before it counts as held back, the same bar on both sides
    # (the partition's first minutes have no minutes before them here and count as sampled)
    minute = ((idle["ts"] - ctx.start) // pd.Timedelta(minutes=1)).to_numpy(dtype=np.int64)
    gpu_minute = idle.groupby(["node_id", "gpu_index"], sort=False, observed=True).ngroup().to_numpy() * (len(minutes) + 1) + minute
    settled = np.ones(len(minute), dtype=bool)
    for k in range(1, AGED_IDLE_MINUTES):
        settled &= (minute < k) | np.isin(gpu_minute - k, gpu_minute)
    idle = idle[settled]
    # idle GPUs per node and minute, with the node's size
    free = idle.groupby(["region", "node_id", "ts"], observed=True).size().rename("free").reset_index()
    free["minute"] = ((free["ts"] - ctx.start) // pd.Timedelta(minutes=1)).astype(int)
    free["size"] = free["node_id"].map(dict(zip(inv["node_id"], inv["gpus"]))).fillna(0).to_numpy(dtype=float)

    for region in paid.index:
        jobs = sub[sub["region"] == region]
        free_r = free[free["region"] == region]
        idle_m = np.bincount(free_r["minute"], weights=free_r["free"], minlength=len(minutes)).astype(float)
        blocked_m = np.zeros(len(minutes))
        frag_m = np.zeros(len(minutes))
        aged_ids: set = set()
        for queue, qjobs in jobs.groupby("queue", observed=True):
            aged = ((qjobs["sub"].values[:, None] <= (mid - AGED_WAIT.to_timedelta64())[None, :])
                    & (qjobs["left"].fillna(never).values[:, None] > mid[None, :]))  # jobs x minutes
            if not aged.any():
                continue
            gpus = qjobs["gpus"].to_numpy(dtype=float)[:, None]
            demand = (aged * gpus).sum(axis=0)
            smallest = np.where(aged, gpus, np.inf).min(axis=0)  # the smallest waiting request, per minute
            nodes = reach.get(queue)
            f = free_r[free_r["node_id"].isin(nodes)] if nodes else free_r
            r = smallest[f["minute"].to_numpy()]
            size, fr = f["size"].to_numpy(), f["free"].to_numpy(dtype=float)
            # a node can host the smallest waiting job when it has that many GPUs free (a request larger than
            # a node needs whole free nodes); scattered single GPUs do not block a 4-GPU job (that is
            # fragmentation, its own KPI)
            fits = np.where(r <= size, fr >= r, fr >= size)
            usable = np.bincount(f["minute"].to_numpy(), weights=fr * fits, minlength=len(minutes))
            blocked_m += np.minimum(usable, demand)
            # fragmentation: no node can host the smallest waiting job, but the queue's free GPUs together could
            # (the fragmentation KPI's definition): idle capacity the scheduler's packing leaves unusable
            free_all = np.bincount(f["minute"].to_numpy(), weights=fr, minlength=len(minutes))
            scattered = (usable < smallest) & (free_all >= smallest) & np.isfinite(smallest)
            frag_m += np.where(scattered, np.minimum(free_all - usable, np.maximum(demand - usable, 0)), 0.0)
            aged_ids |= set(qjobs.index[aged.any(axis=1)])
        blocked_m = np.minimum(blocked_m, idle_m)  # queues sharing nodes cannot both use one idle GPU
        frag = float(np.minimum(frag_m, idle_m - blocked_m).sum())
        blocked = float(blocked_m.sum()) + frag
        started = jobs[(jobs["left"] >= ctx.start) & (jobs["left"] < ctx.end)]
        waits = (started["left"] - started["sub"]).dt.total_seconds() / 60
        rows.append((region, blocked, float(paid[region]), len(aged_ids), float(waits.quantile(0.95)) if len(waits) else np.nan, frag))
    return pd.DataFrame(rows, columns=cols)


def detect_scheduling(ctx: PartitionContext) -> list[Finding]:
    out = []
    ab = aged_blocked(ctx)
    lv = ctx.leaves
    blocked_leaf = lv[lv["state"] == "idle_blocked"].groupby("region")["gpu_minutes"].sum() if len(lv) else pd.Series(dtype=float)
    for r in ab.itertuples(index=False):
        share = r.blocked_gpu_minutes / r.paid_gpu_minutes if r.paid_gpu_minutes else 0.0
        key = f"scheduling_blocked|{r.region}"
        cfg = ctx.changes[(ctx.changes["kind"] == "scheduler_config") & (ctx.changes["ts"] >= ctx.end - DEPLOY_LOOKBACK)
                          & (ctx.changes["ts"] < ctx.end) & ctx.changes["scope"].isin([r.region, "*"])] if len(ctx.changes) else ctx.changes
        page_bar, jobs = (SCHED_PAGE_SHARE_AFTER_CHANGE, SCHED_MIN_JOBS - 1) if len(cfg) else (SCHED_PAGE_SHARE, SCHED_MIN_JOBS)
        ticket_bar = min(SCHED_TICKET_SHARE, page_bar)
        is_open = key in ctx.open_baselines
        piled_up = r.aged_jobs >= jobs
        # an open alert stays open above half the ticket bar (no flapping); the lifecycle keeps a page a page
        keeps_open = is_open and share >= ticket_bar / 2 and r.aged_jobs >= max(1, jobs // 2)
        if not (piled_up and share >= ticket_bar) and not keeps_open:
            continue
        base, base_from = _history_baseline(ctx.region_history, r.region, ctx.start)
        idle_blocked = blocked_leaf.get(r.region, 0.0) / r.paid_gpu_minutes if r.paid_gpu_minutes else 0.0
        unseasonal = idle_blocked >= base + SCHED_SEASONAL_MARGIN
        if base_from != WEEKLY and not len(cfg):
            # before a week of history the weekly pattern (retrain waves, cron) is not known yet: a page needs
            # twice the impact floor
            page_bar = SCHED_COLD_START_FACTOR * page_bar
        planned = _maintenance_in_region(ctx, r.region)
        severity = "page" if piled_up and share >= page_bar and unseasonal and not planned else "ticket"
        base_text = base_from if base_from == NO_HISTORY else f"{base_from} {base:.1%}"
        cfg_text = f"; follows scheduler change {cfg.iloc[-1]['event_id']} at {cfg.iloc[-1]['ts']:%H:%M}" if len(cfg) else ""
        out.append(Finding("scheduling_blocked", "scheduling", severity, r.region, key,
                           lost_gpu_minutes=float(r.blocked_gpu_minutes), baseline=0.0, value=share,
                           change_event=cfg.iloc[-1]["event_id"] if len(cfg) else None,
                           summary=f"GPUs idle while jobs wait in {r.region}",
                           evidence=f"{r.blocked_gpu_minutes:.0f} GPU-minutes ({share:.1%} of paid"
                                    + (f"; {r.fragmented_gpu_minutes:.0f} of them scattered too thinly for the smallest "
                                       "waiting job" if r.fragmented_gpu_minutes >= 1 else "")
                                    + f") idle while {r.aged_jobs} "
                                    f"job(s) of the region's queues waited over {AGED_WAIT.seconds // 60} min; queue wait p95 "
                                    f"{r.wait_p95_min:.1f} min; idle_blocked {idle_blocked:.1%} ({base_text}"
                                    f"{'' if unseasonal else ': seasonal, not paged'})"
                                    + (f"; {planned}: planned capacity, not paged" if planned else "")
                                    + cfg_text))
    return out


def _maintenance_in_region(ctx: PartitionContext, region: str) -> str | None:
    """The planned window draining part of the region in this partition: planned capacity makes jobs wait, and
    maintenance never pages -- neither does the queue it causes while it lasts. Not after it: a scheduling fault
    right after a window (the suite's Friday incidents start three minutes after one) must still page, so the
    backlog a window leaves is judged like any other pile-up once the window is over."""
    w = ctx.maintenance
    if w is None or w.empty:
        return None
    hit = w[(w["start"] < ctx.end) & (w["end"] > ctx.start) & w["region"].astype(object).isin([region, "*"])]
    if hit.empty:
        return None
    first = hit.sort_values("start").iloc[0]
    return f"maintenance window {first['window_id']} ({first['start']:%H:%M}-{first['end']:%H:%M})"


def _history_baseline(hist: pd.DataFrame, region: str, start: pd.Timestamp) -> tuple[float, str]:
    """The region's usual idle_blocked share at this hour, and where it comes from.

    The same hour of the week (+-30 min, 7 days back) once a week of history exists; before that (cold
    start) the median of the same hour on the previous days, and with under two such days the median of the
    trailing two hours. Partitions a scheduling page held are left out by the caller (incidents do not teach
    the baseline).
    """
    if hist is None or hist.empty:
        return 0.0, NO_HISTORY
    h = hist[(hist["region"] == region) & hist["share_idle_blocked"].notna()]
    tod = (h["partition_start"] - h["partition_start"].dt.normalize())
    target = start - start.normalize()
    same_hour = h[((tod - target).abs() <= pd.Timedelta(minutes=30)) & (h["partition_start"] < start - pd.Timedelta(hours=12))]
    last_week = same_hour[same_hour["partition_start"] <= start - pd.Timedelta(days=6, hours=12)]["share_idle_blocked"]
    if len(last_week) >= 6:
        return float(last_week.median()), WEEKLY
    days = same_hour.groupby((same_hour["partition_start"] - target + pd.Timedelta(hours=12)).dt.normalize())["share_idle_blocked"].median()
    if len(days) >= 2:
        return float(days.median()), f"same hour, median of the last {len(days)} days"
    trailing = h[(h["partition_start"] >= start - pd.Timedelta(hours=2)) & (h["partition_start"] < start)]["share_idle_blocked"]
    return (float(trailing.median()), "trailing two hours") if len(trailing) else (0.0, NO_HISTORY)


def detect_no_progress(ctx: PartitionContext) -> list[Finding]:
    """Dummy load (the brief's gaming case), judged on the device, never on missing step metrics.

    A GPU-minute is dummy load when a job holds the GPU busy (gpu_util_pct >= BUSY_UTIL_PCT) while the
    device says it computes nothing: SM and tensor activity idle (gpu_health.metrics.device.device_idle)
    AND power under half the SKU's working reference (device.low_power). Those are two independent
    witnesses (the profiling counters and the power sensor) of the same fact; a job that reports no training
    metrics is ordinary (notebooks, GBDT, uninstrumented batch work, set-up) and is only context here.

    Page: a team's jobs that report no training metrics hold at least NO_PROGRESS_PAGE_GPU_MINUTES such
    GPU-minutes in the partition (batch, distributed or unknown class: a notebook is a person at a keyboard,
    a ticket at most). Ticket: the same GPU-minutes on notebooks; or busy GPUs with one witness only because
    the collector does not export the other (profiling fields are off by default in dcgm-exporter; some
    collectors have no power): the guardrail cannot judge, it says so. Jobs that report training metrics are
    the stall detector's.
    """
    g = ctx.gpu[ctx.gpu["job_id"].notna()]
    out = []
    if g.empty:
        return out
    reporting = set(ctx.runtime["job_id"].astype(object))
    ref = reference_power(g.assign(sku=g["sku"].astype(object)), ["sku"])
    g = g[(g["gpu_util_pct"] >= BUSY_UTIL_PCT) & ~g["job_id"].astype(object).isin(reporting)]
    if g.empty:
        return out
    idle, dev_known = device_idle(g["sm_active"].to_numpy(dtype=float, na_value=np.nan),
                                  g["tensor_active"].to_numpy(dtype=float, na_value=np.nan))
    low, pow_known = low_power(g.assign(sku=g["sku"].astype(object)), ref, ["sku"])
    meta = ctx.meta[ctx.meta["job_id"].isin(g["job_id"].unique())] if len(ctx.meta) else ctx.meta
    meta = meta.drop_duplicates("job_id").set_index("job_id") if len(meta) else pd.DataFrame(columns=["team", "workload_class"])
    jobs = g["job_id"].astype(object)
    g = g.assign(team=jobs.map(meta["team"]).astype(object).fillna("unknown").to_numpy(),
                 cls=jobs.map(meta["workload_class"]).astype(object).fillna("unknown").to_numpy(),
                 both=dev_known & idle & pow_known & low,
                 one=(dev_known & idle & ~pow_known) | (~dev_known & pow_known & low))
    for team, grp in g.groupby("team"):
        dummy = grp[grp["both"]]
        paging = dummy[dummy["cls"] != "interactive"]
        if len(paging) >= NO_PROGRESS_PAGE_GPU_MINUTES:
            severity, rows, why = "page", paging, "SM and tensor activity idle and power near idle at high utilization"
        elif len(dummy) >= NO_PROGRESS_PAGE_GPU_MINUTES:
            severity, rows, why = "ticket", dummy, "notebooks at high utilization with the device idle"
        elif grp["one"].sum() >= NO_PROGRESS_PAGE_GPU_MINUTES:
            rows = grp[grp["one"]]
            severity = "ticket"
            why = ("device activity idle; power not exported" if rows["power_w"].isna().all()
                   else "power near idle; profiling fields (SM / tensor activity) not exported: cannot judge")
        else:
            continue
        region = rows["region"].mode().iloc[0] if rows["region"].nunique() == 1 else "*"
        sm, ten = rows["sm_active"].astype(float), rows["tensor_active"].astype(float)
        out.append(Finding("busy_no_progress", "gaming", severity, region, f"busy_no_progress|{team}", team=team,
                           nodes=sorted(set(rows["node_id"])), lost_gpu_minutes=float(len(rows)),
                           summary=f"Team {team}: GPUs busy with no real work (dummy load)" if severity == "page"
                           else f"Team {team}: busy GPUs that may not be working",
                           evidence=f"{len(rows)} GPU-minutes on {rows['gpu_uuid'].nunique()} GPUs from "
                                    f"{rows['job_id'].nunique()} job(s) reporting no training metrics: {why}; util median "
                                    f"{rows['gpu_util_pct'].median():.0f} %, SM activity "
                                    + (f"median {sm.median():.2f}" if sm.notna().any() else "not exported")
                                    + ", tensor activity " + (f"median {ten.median():.2f}" if ten.notna().any() else "not exported")
                                    + (f", power median {rows['power_w'].median():.0f} W" if rows["power_w"].notna().any()
                                       else ", power not exported")))
    return out


def detect_stalls(ctx: PartitionContext) -> list[Finding]:
    """Training jobs that stopped progressing while they hold their GPUs.

    A stall: a job that trained before (its cumulative step counter is above 0) reports STALL_MINUTES or
    more minutes in a row with no step and no checkpoint, the last of them in the partition. A job still in
    set-up (no step yet) is not stalled. The second witness is the device: the job's GPUs do no compute in
    those minutes (SM/tensor idle, or no kernel at all, or power near idle) -- a hung collective spins one
    kernel at ~100 % utilization on a few SMs, a dead input pipeline leaves the GPU at 0 %. Zero steps on a
    GPU that computes at full power is an evaluation or validation pass: no finding.
    Page when the stalled jobs hold at least STALL_PAGE_GPU_MINUTES with the device confirming; a ticket when
    the collector exports neither profiling fields nor power (one witness).
    """
    rt = ctx.runtime
    out = []
    if rt.empty:
        return out
    zero = (rt["steps"] == 0) & (rt["checkpoint_time_s"].fillna(0) == 0)
    # per job: minutes reported after its last progressing minute (a trailing run of zero-step minutes)
    last_ts = rt.groupby("job_id")["ts"].max()
    trained = rt.groupby("job_id")["last_step"].max() > 0
    last_progress = rt[~zero].groupby("job_id")["ts"].max()
    trailing = rt[zero & (rt["ts"] > rt["job_id"].map(last_progress).fillna(pd.Timestamp.min.tz_localize("UTC")))]
    run = trailing.groupby("job_id").size()
    run = run[(run >= STALL_MINUTES) & (last_ts.reindex(run.index) >= ctx.start) & trained.reindex(run.index).fillna(False)]
    if run.empty:
        return out
    since = trailing[trailing["job_id"].isin(run.index)].groupby("job_id")["ts"].min()
    g = ctx.gpu[ctx.gpu["job_id"].isin(run.index)]
    g = g[g["ts"] >= g["job_id"].map(since)]
    if g.empty:
        return out
    ref = reference_power(ctx.gpu.assign(sku=ctx.gpu["sku"].astype(object)), ["sku"])
    idle, dev_known = device_idle(g["sm_active"].to_numpy(dtype=float, na_value=np.nan),
                                  g["tensor_active"].to_numpy(dtype=float, na_value=np.nan))
    low, pow_known = low_power(g.assign(sku=g["sku"].astype(object)), ref, ["sku"])
    no_kernel = g["gpu_util_pct"].to_numpy(dtype=float) < ACTIVE_UTIL_PCT
    confirms = (dev_known & idle) | (pow_known & low) | no_kernel
    judged = dev_known | pow_known | no_kernel
    g = g.assign(confirms=confirms, judged=judged)
    for region, grp in g.groupby("region"):
        confirmed = grp[grp["confirms"]]
        unknown = grp[~grp["judged"]]
        if len(confirmed):
            rows, basis = confirmed, "the GPUs compute nothing (SM/tensor idle, no kernel or power near idle)"
            severity = "page" if len(confirmed) >= STALL_PAGE_GPU_MINUTES else "ticket"
        elif len(unknown):
            rows, basis, severity = unknown, "profiling fields and power not exported: the device cannot confirm", "ticket"
        else:
            continue  # the GPUs compute at full power: evaluation or validation, not a stall
        js = sorted(set(rows["job_id"]))
        out.append(Finding("training_stall", "software", severity, region, f"training_stall|{region}",
                           nodes=sorted(set(rows["node_id"])), lost_gpu_minutes=float(len(rows)),
                           summary=f"{len(js)} training job(s) hung in {region}",
                           evidence=f"no steps for {int(run.reindex(js).max())}+ minutes after training while holding "
                                    f"{rows['gpu_uuid'].nunique()} GPUs at median {rows['gpu_util_pct'].median():.0f} % "
                                    f"util; {basis} (jobs {', '.join(js[:5])})"))
    return out


def detect_missing_data(ctx: PartitionContext) -> list[Finding]:
    """Missing data, never an incident of the cluster: a ticket at most.

    * a region's collectors silent (under half of its expected GPUs report in MIN_MISSING_MINUTES minutes);
    * GPU-minutes the loss tree put in ``no_data`` on nodes of a reporting region: GPUs or whole nodes
      missing with no fault to explain them (an exporter gap, a rejected file), at least
      MISSING_NODE_GPU_MINUTES on a node;
    * rows a contract rejected (``source_rejects``) for the partition, with the file and the count;
    * sources written empty because their producer was silent past its grace (``source_gaps``: an absent
      exporter or Slurm dump), naming the silent metric family.
    """
    inv = ctx.inventory
    out = []
    minutes = pd.date_range(ctx.start, ctx.end, freq="1min", inclusive="left")
    silent_regions = set()
    if len(inv):
        exp = inv.groupby("region")["gpus"].sum()
        rep = ctx.gpu.groupby(["region", "ts"]).size().unstack("ts", fill_value=0) if len(ctx.gpu) else pd.DataFrame()
        for region, expected in exp.items():
            row = rep.loc[region].reindex(minutes, fill_value=0) if region in rep.index else pd.Series(0, index=minutes)
            silent = int((row < 0.5 * expected).sum())
            if silent >= MIN_MISSING_MINUTES:
                silent_regions.add(region)
                out.append(Finding("missing_data", "missing_data", "ticket", region, f"missing_data|{region}",
                                   summary=f"Telemetry missing for {region}",
                                   evidence=f"{silent} of {len(minutes)} minutes with under half of the region's {int(expected)} "
                                            f"GPUs reporting: missing data, not a GPU incident"))
    gaps = _state(ctx, "no_data", ["region", "node_id"])
    if len(gaps):
        gaps = gaps[(gaps >= MISSING_NODE_GPU_MINUTES) & (gaps.index.get_level_values("node_id") != "unseen")]
        for region, grp in gaps.groupby(level="region"):
            if region in silent_regions:
                continue
            nodes = sorted(grp.index.get_level_values("node_id"))
            out.append(Finding("missing_data", "missing_data", "ticket", region, f"missing_data|{region}|nodes", nodes=nodes,
                               summary=f"Telemetry gaps on {len(nodes)} node(s) in {region}",
                               evidence=f"{grp.sum():.0f} GPU-minutes not reported on {', '.join(nodes[:8])}"
                                        f"{' ...' if len(nodes) > 8 else ''} with no fatal Xid, ECC error or unhealthy node "
                                        "state to explain them: missing data (exporter gap or rejected rows), not a GPU fault"))
    rej = ctx.rejects
    if rej is not None and len(rej):
        per_file = rej.groupby(["source", "origin"]).size().sort_values(ascending=False)
        text = "; ".join(f"{src}: {n} row(s) rejected from {origin}" for (src, origin), n in per_file.head(5).items())
        reasons = rej["reason"].astype(str).value_counts().head(3)
        out.append(Finding("missing_data", "missing_data", "ticket", "*", "missing_data|rejects",
                           summary=f"{len(rej)} source row(s) quarantined by their contract",
                           evidence=text + "; top reasons: " + "; ".join(f"{r} ({k})" for r, k in reasons.items())
                                    + ". The rows are in source_rejects; the GPU-minutes they cover are no_data"))
    gaps = ctx.source_gaps
    if gaps is not None and len(gaps):
        out.append(Finding("missing_data", "missing_data", "ticket", "*", "missing_data|sources",
                           summary=f"{gaps['source'].nunique()} source(s) silent: {', '.join(sorted(gaps['source'].unique()))}",
                           evidence="; ".join(f"{r.source}: no {r.missing_family} ({r.reason})" for r in gaps.itertuples())
                                    + ". Written empty so the rest is computed: judgements that need these sources "
                                      "cannot be made for the partition"))
    return out


# --- serving SLOs (issue #17) ----------------------------------------------------------------------------------
# The burn-rate windows, factors, minimum-traffic guard and absence rule are gpu_health.metrics.slo's (BURN_WINDOWS,
# MIN_BAD_EVENTS, ABSENT_LOOKBACK): the SRE workbook's multi-window, multi-burn-rate alerts with Sloth's windows.
SLO_FAMILY = "software"          # a model release, an error spike, a capacity shortfall: the serving stack's software
SLO_ABSENT_FAMILY = "missing_data"  # an SLI's series gone: its exporter or scrape, never a serving incident


def _window_text(td: pd.Timedelta) -> str:
    minutes = int(td / pd.Timedelta(minutes=1))
    return f"{minutes // 1440} d" if minutes % 1440 == 0 else f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"


def detect_slo_burn(ctx: PartitionContext) -> list[Finding]:
    """Serving SLOs burning their error budget (page / ticket by window pair) or whose SLI is absent (ticket).

    Burns are judged by :func:`gpu_health.metrics.slo.evaluate_burns` on the slo_error_budgets rows; the two
    witnesses of a page are the long and the short window over the factor, each with at least
    ``MIN_BAD_EVENTS`` bad events. A threshold inside a histogram bucket is said to be interpolated."""
    if ctx.slo_events is None or ctx.slo_events.empty:
        return []
    from gpu_health.metrics.slo import MIN_BAD_EVENTS, evaluate_burns
    from gpu_health.metrics.slo_catalog import BY_NAME

    out = []
    for _, r in evaluate_burns(ctx.slo_events, ctx.start).iterrows():
        slo = BY_NAME[r["slo"]]
        # one alert per model and region: an error spike burns availability and error-rate at once, one incident
        key = f"slo_burn|{r['region']}|{r['model_name']}"
        if r["kind"] == "absent":
            out.append(Finding(
                detector="slo_burn", family=SLO_ABSENT_FAMILY, severity="ticket", region=r["region"], key=key,
                summary=f"{r['model_name']} in {r['region']}: the SLI of SLO {slo.name} ({slo.title}) is absent",
                evidence=f"The series behind {slo.name} reported within the last {_window_text(r['long_window'])} and "
                         f"report nothing in this partition: the SLO cannot be judged. Check the model's exporter and "
                         f"its scrape (and whether the model was retired on purpose)."))
            continue
        budget_left = r["error_budget_remaining"]
        left = f"; error budget remaining over {slo.window}: {budget_left:.0%}" if pd.notna(budget_left) else ""
        interp = (f" The threshold {slo.threshold_s:g} s is no bucket bound of the histogram: the bad events are "
                  f"interpolated linearly within the bucket (Prometheus' rule), an estimate, not a count."
                  if r["interpolated"] else "")
        out.append(Finding(
            detector="slo_burn", family=SLO_FAMILY, severity=r["severity"], region=r["region"], key=key,
            summary=f"{r['model_name']} in {r['region']} burns the error budget of {slo.name} ({slo.title}) at "
                    f"{r['long_burn']:.1f}x over {_window_text(r['long_window'])}",
            evidence=f"Burn rate {r['long_burn']:.1f}x over {_window_text(r['long_window'])} and {r['short_burn']:.1f}x "
                     f"over {_window_text(r['short_window'])} (alert above {r['factor']:g}x in both, each window with "
                     f"at least {MIN_BAD_EVENTS} bad events): {r['bad_events']:.0f} bad of {r['total_events']:.0f} "
                     f"events against an objective of {slo.objective:.3%}{left}.{interp} Look first at the "
                     f"model's versions in serving_slis (a new version serving since the burn started is the suspect: "
                     f"roll it back), then its replicas and queue depth",
            baseline=float(r["factor"]), value=float(r["long_burn"])))
    # the alert of a model merges its findings and reads the first: pages, then the fastest burn, absences last
    return sorted(out, key=lambda f: (f.severity != "page", f.value is None, -(f.value or 0.0)))


def detect_platform(ctx: PartitionContext) -> list[Finding]:
    """The Kubernetes platform layer's detectors (gpu_health.diagnosis.platform, which imports this module)."""
    from gpu_health.diagnosis.platform import detect_platform as platform_findings
    return platform_findings(ctx)


def detect_convergence(ctx: PartitionContext) -> list[Finding]:
    """Training convergence from the trainer's loss and checkpoints (gpu_health.diagnosis.convergence)."""
    from gpu_health.diagnosis.convergence import detect_convergence as convergence_findings
    return convergence_findings(ctx)


DETECTORS = [detect_hardware, detect_thermal, detect_deploys, detect_slowdowns, detect_scheduling, detect_no_progress,
             detect_stalls, detect_missing_data, detect_slo_burn, detect_platform,
             detect_convergence]


def detect(ctx: PartitionContext) -> list[Finding]:
    """All findings of one partition. A region whose collectors are silent raises only missing_data (a few
    nodes' gaps, rejected rows or a silent source mute nothing: the region's other evidence still stands)."""
    findings = [f for det in DETECTORS for f in det(ctx)]
    silent = {f.region for f in findings if f.key == f"missing_data|{f.region}"}
    return [f for f in findings if f.detector == "missing_data" or f.region not in silent or f.detector == "deploy_regression"]

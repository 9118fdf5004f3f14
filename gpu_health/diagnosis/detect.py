"""Detectors: per 5-minute partition, findings with a cause family and their evidence.

Pure pandas. Each detector reads direct evidence a real incident leaves in the
sources and the loss tree, so that it can fire in the partition where an
incident starts (a page within 15 minutes of a deploy needs that):

==================  ===========  =====================================================================
detector            family       fires on
==================  ===========  =====================================================================
hardware_fault      hardware     fatal Xid (48/63/64/74/79/92/94/95) or a double-bit ECC error; GPUs
                                 (or whole nodes) missing while their region reports; a node drained
                                 outside any maintenance window while GPUs sit unavailable
thermal_throttle    hardware     GPUs with thermal clock-event bits and temperature >= 83 C (a GPU whose
                                 collector exposes no temperature is not judged)
deploy_regression   software     a change event's cohort (nodes on the new driver / kernel / firmware,
                                 jobs on the new framework) worse than the rest in the same minutes:
                                 job failure rate (Fisher exact test + rate-ratio floor) or step time
                                 over baseline (Mann-Whitney cohort judge + effect floor)
training_stall      software     jobs reporting 0 steps (and no checkpoint) for 3+ minutes while they
                                 hold their GPUs
data_io_slowdown    data_io      loader wait above its baseline (slowdown_data_io) with storage saturated
network_slowdown    network      gradient-sync time above its baseline (slowdown_network) with IB loss
                                 or retransmits on the jobs' links
scheduling_blocked  scheduling   idle GPUs while jobs that could use them (same queue's nodes) have
                                 waited over 3 minutes
busy_no_progress    gaming       a team's GPUs busy with no training progress reported at all
missing_data        missing_data a region's collectors silent (never a page: not a GPU incident)
==================  ===========  =====================================================================

Baselines: ``scheduling_blocked`` compares a region's idle_blocked share with
the same hour of the week (partitions a scheduling page held excluded); before a
week of history, with the median of the same hour on the previous days, or of the
trailing two hours; the detectors on the slowdown states inherit
their baseline from the step-time baselines the loss tree already used (so
their floor is near zero in healthy operation). Absolute floors (GPU-minutes,
shares) are documented constants below, set from healthy operation.
Planned maintenance never pages: nodes inside a window are excluded.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import fisher_exact

from gpu_health.diagnosis.cohort import REGRESSION, judge_cohorts
from gpu_health.metrics.goodput import BLOCKED_WAIT, FATAL_XIDS, maintenance_mask, placements, queue_nodes, queue_regions, queue_table

FIVE = pd.Timedelta(minutes=5)
THERMAL_BITS = 0x20 | 0x40
THERMAL_TEMP_C = 83.0
MIN_THERMAL_GPU_MINUTES = 5
MIN_MISSING_MINUTES = 2
NODE_SLOW_SHARE = 0.10         # a component's slowdown / the node's allocated (multi-node, for network) GPU-minutes
NODE_SLOW_MIN_GPU_MINUTES = 5
LINK_RETRANSMITS = 100         # per link-minute
LINK_LOSS_PCT = 0.1
AGED_WAIT = BLOCKED_WAIT  # a job waiting this long while GPUs it could use idle is blocked (as the fragmentation KPI)
# blocked GPU-minutes / the region's paid GPU-minutes. Healthy operation (the quiet week's two retrain waves,
# where saturated pools make jobs wait): at most 1.5 % per partition; outside the waves 0
SCHED_PAGE_SHARE = 0.02
SCHED_TICKET_SHARE = 0.0125
SCHED_PAGE_SHARE_AFTER_CHANGE = 0.015  # lower bar within DEPLOY_LOOKBACK of a scheduler_config change
SCHED_MIN_JOBS = 4                     # jobs held back: one long-waiting large job is normal, a pile-up is not
# known seasonality never pages: the region's idle_blocked share must also stand this far above its usual share
# at this hour (retrain waves keep 9-11 % of GPUs idle_blocked while saturated pools drain)
SCHED_SEASONAL_MARGIN = 0.01
NO_HISTORY = "no history yet"  # the seasonal baseline before any partition of the region was recorded
NO_PROGRESS_PAGE_GPU_MINUTES = 40   # a team's busy-without-progress GPU-minutes in 5 minutes (8 GPUs)
STALL_MINUTES = 3
FAILURE_RATE_RATIO = 3.0
FAILURE_P = 1e-3
MIN_COHORT_FAILURES = 3
DEPLOY_LOOKBACK = pd.Timedelta(hours=6)
DEPLOY_WINDOW = pd.Timedelta(minutes=30)
STEP_EFFECT_FLOOR = 0.10

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
    placements: pd.DataFrame | None = None  # placements() of `sched` (sliced from one computed per range)


def _in_maintenance(ctx: PartitionContext, nodes: pd.Series, regions: pd.Series) -> np.ndarray:
    ts = pd.Series(ctx.start + pd.Timedelta(minutes=2, seconds=30), index=nodes.index)
    return maintenance_mask(ts, regions, nodes, ctx.maintenance)


def _state(ctx: PartitionContext, state: str, by: list[str]) -> pd.Series:
    lv = ctx.leaves
    return lv[lv["state"] == state].groupby(by, observed=True)["gpu_minutes"].sum() if len(lv) else pd.Series(dtype=float)


def detect_hardware(ctx: PartitionContext) -> list[Finding]:
    """GPU-minutes the loss tree put in hw_unavailable (maintenance and silent collectors already
    excluded there): fatal Xid / DBE, GPUs or nodes missing while their region reports, nodes
    down or drained outside a window. Evidence comes from the raw rows."""
    hw = _state(ctx, "hw_unavailable", ["region", "node_id"])
    hw = hw[(hw >= MIN_MISSING_MINUTES) & (hw.index.get_level_values("node_id") != "unseen")] if len(hw) else hw
    gpu, node = ctx.gpu, ctx.node
    fatal = gpu[gpu["xid"].isin(FATAL_XIDS) | (gpu["ecc_dbe_delta"].fillna(0) > 0)]
    fatal = fatal[~_in_maintenance(ctx, fatal["node_id"], fatal["region"])]
    regions = {r for r, _ in hw.index} | set(fatal["region"])
    out = []
    for region in sorted(regions):
        hw_r = hw[[r == region for r, _ in hw.index]] if len(hw) else hw
        f = fatal[fatal["region"] == region]
        nodes = sorted({n for _, n in hw_r.index} | set(f["node_id"]))
        parts = []
        if len(f):
            codes = ", ".join(f"Xid {int(x)}" for x in sorted(set(f["xid"])) if x) or "double-bit ECC"
            parts.append(f"{codes} on {f['gpu_uuid'].nunique()} GPU(s) ({', '.join(sorted(set(f['node_id'])))})")
        reporting = gpu[gpu["node_id"].isin(nodes)].groupby("node_id")["gpu_uuid"].nunique()
        expected = ctx.inventory.set_index("node_id")["gpus"].reindex(nodes).fillna(0)
        short = {n: int(expected[n] - reporting.get(n, 0)) for n in nodes if expected[n] - reporting.get(n, 0) > 0}
        if short:
            parts.append("not reporting: " + ", ".join(f"{n} ({k} GPU{'s' if k > 1 else ''})" for n, k in short.items()))
        health = node[node["node_id"].isin(nodes)].groupby("node_id")["health"].last()
        bad = health[health.isin(["drained", "down"])]
        if len(bad):
            parts.append("outside maintenance: " + ", ".join(f"{n} {h}" for n, h in bad.items()))
        lost = float(hw_r.sum())
        parts.append(f"{lost:.0f} GPU-minutes unavailable")
        out.append(Finding("hardware_fault", "hardware", "page", region, f"hardware_fault|{region}", nodes=nodes,
                           lost_gpu_minutes=lost, summary=f"GPU hardware fault in {region} on {', '.join(nodes)}",
                           evidence="; ".join(parts)))
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
    recent = ch[(ch["ts"] >= ctx.end - DEPLOY_LOOKBACK) & (ch["ts"] < ctx.end)]
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


def _node_cohort_failures(ctx: PartitionContext, ev, since, alpha: float = FAILURE_P) -> Finding | None:
    # a later change on the same scope supersedes this one (e.g. the rollback)
    later = ctx.changes[(ctx.changes["ts"] > ev.ts) & (ctx.changes["scope"] == ev.scope) & (ctx.changes["kind"] == ev.kind)]
    if len(later) and later["ts"].min() < ctx.end:
        return None
    cohort = _scope_nodes(ev.scope, ctx.inventory)
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


ALLOC_STATES = ["allocated_idle", "allocated_unproductive", "failure_loss", "slowdown_data_io", "slowdown_network",
                "slowdown_checkpoint", "slowdown_compute", "productive"]


def _slow_nodes(lv: pd.DataFrame, state: str, denominator: pd.Series) -> pd.DataFrame:
    """Nodes where ``state`` holds at least NODE_SLOW_SHARE of the denominator GPU-minutes."""
    slow = lv[lv["state"] == state].groupby(["region", "node_id"])["gpu_minutes"].sum()
    frame = pd.DataFrame({"slow": slow, "den": denominator.reindex(slow.index).fillna(0.0)})
    frame = frame[(frame["slow"] >= NODE_SLOW_MIN_GPU_MINUTES) & (frame["slow"] >= NODE_SLOW_SHARE * frame["den"])]
    return frame.reset_index()


def detect_slowdowns(ctx: PartitionContext) -> list[Finding]:
    """Loader wait (data_io) and gradient sync (network) above their baselines, judged per node:
    storage or fabric trouble hits a set of nodes, which a region-wide share would dilute."""
    out = []
    lv = ctx.leaves
    if lv.empty:
        return out
    alloc = lv[lv["state"].isin(ALLOC_STATES)]
    per_node = alloc.groupby(["region", "node_id"])["gpu_minutes"].sum()
    multi = alloc[alloc["workload_class"] == "distributed"].groupby(["region", "node_id"])["gpu_minutes"].sum()
    io_nodes = _slow_nodes(lv, "slowdown_data_io", per_node)
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
                                    f"allocated time) lost to loader wait above baseline; storage saturated on "
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
    (whole free nodes for a request larger than a node); idle GPUs of another pool, or scattered
    ones, do not block it. A queue with no placement yet is matched against its whole region. A GPU freed
    a moment ago is being placed again: it counts from its second idle minute in a row.
    """
    minutes = pd.date_range(ctx.start, ctx.end, freq="1min", inclusive="left")
    inv = ctx.inventory
    cols = ["region", "blocked_gpu_minutes", "paid_gpu_minutes", "aged_jobs", "wait_p95_min"]
    if ctx.sched is None or ctx.sched.empty or inv.empty:
        return pd.DataFrame(columns=cols)
    sub = ctx.jobs if ctx.jobs is not None else job_table(ctx.sched, inv)
    reach = queue_nodes(ctx.placements if ctx.placements is not None else placements(ctx.sched))
    g = ctx.gpu
    idle = g[g["job_id"].isna() & ~g["xid"].isin(FATAL_XIDS)]
    idle = idle[~_in_maintenance(ctx, idle["node_id"], idle["region"])]
    paid = inv.groupby("region")["gpus"].sum() * len(minutes)
    rows = []
    mid = (minutes + pd.Timedelta(seconds=30)).values
    never = pd.Timestamp.max.tz_localize("UTC")

    # a GPU freed a moment ago is being placed again (dispatch takes a scheduling cycle; in a saturated pool
    # every job that ends leaves such a gap): a GPU counts as free from its second idle minute in a row (the
    # partition's first minute has no minute before it here and counts as sampled)
    minute = ((idle["ts"] - ctx.start) // pd.Timedelta(minutes=1)).to_numpy(dtype=np.int64)
    gpu_minute = idle.groupby(["node_id", "gpu_index"], sort=False, observed=True).ngroup().to_numpy() * (len(minutes) + 1) + minute
    settled = (minute == 0) | np.isin(gpu_minute - 1, gpu_minute)
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
            aged_ids |= set(qjobs.index[aged.any(axis=1)])
        blocked = float(np.minimum(blocked_m, idle_m).sum())  # queues sharing nodes cannot both use one idle GPU
        started = jobs[(jobs["left"] >= ctx.start) & (jobs["left"] < ctx.end)]
        waits = (started["left"] - started["sub"]).dt.total_seconds() / 60
        rows.append((region, blocked, float(paid[region]), len(aged_ids), float(waits.quantile(0.95)) if len(waits) else np.nan))
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
        severity = "page" if piled_up and share >= page_bar and unseasonal else "ticket"
        base_text = base_from if base_from == NO_HISTORY else f"{base_from} {base:.1%}"
        cfg_text = f"; follows scheduler change {cfg.iloc[-1]['event_id']} at {cfg.iloc[-1]['ts']:%H:%M}" if len(cfg) else ""
        out.append(Finding("scheduling_blocked", "scheduling", severity, r.region, key,
                           lost_gpu_minutes=float(r.blocked_gpu_minutes), baseline=0.0, value=share,
                           change_event=cfg.iloc[-1]["event_id"] if len(cfg) else None,
                           summary=f"GPUs idle while jobs wait in {r.region}",
                           evidence=f"{r.blocked_gpu_minutes:.0f} GPU-minutes ({share:.1%} of paid) idle while {r.aged_jobs} "
                                    f"job(s) of the region's queues waited over {AGED_WAIT.seconds // 60} min; queue wait p95 "
                                    f"{r.wait_p95_min:.1f} min; idle_blocked {idle_blocked:.1%} ({base_text}"
                                    f"{'' if unseasonal else ': seasonal, not paged'})"
                                    + cfg_text))
    return out


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
        return float(last_week.median()), "same hour last week"
    days = same_hour.groupby((same_hour["partition_start"] - target + pd.Timedelta(hours=12)).dt.normalize())["share_idle_blocked"].median()
    if len(days) >= 2:
        return float(days.median()), f"same hour, median of the last {len(days)} days"
    trailing = h[(h["partition_start"] >= start - pd.Timedelta(hours=2)) & (h["partition_start"] < start)]["share_idle_blocked"]
    return (float(trailing.median()), "trailing two hours") if len(trailing) else (0.0, NO_HISTORY)


def detect_no_progress(ctx: PartitionContext) -> list[Finding]:
    g = ctx.gpu[ctx.gpu["job_id"].notna()]
    out = []
    if g.empty:
        return out
    reporting = set(ctx.runtime["job_id"].astype(object))
    meta = ctx.meta[ctx.meta["job_id"].isin(g["job_id"].unique())] if len(ctx.meta) else ctx.meta
    meta = meta.drop_duplicates("job_id").set_index("job_id") if len(meta) else pd.DataFrame(columns=["team", "workload_class"])
    cls = g["job_id"].astype(object).map(meta["workload_class"]).astype(object).fillna("unknown")
    # only jobs known to be training jobs are judged: a notebook reports no steps by nature, and a job
    # whose metadata never arrived cannot be told from one
    busy = (g["gpu_util_pct"] >= 50) & ~g["job_id"].astype(object).isin(reporting) & cls.isin(["batch", "distributed"])
    sus = g[busy].assign(team=g.loc[busy, "job_id"].astype(object).map(meta["team"]).astype(object).fillna("unknown"))
    for team, grp in sus.groupby("team"):
        n = len(grp)
        if n < NO_PROGRESS_PAGE_GPU_MINUTES:
            continue
        tensor = grp["tensor_active"].astype(float)
        low_tensor = tensor.notna().any() and tensor.median() < 0.05
        region = grp["region"].mode().iloc[0] if grp["region"].nunique() == 1 else "*"
        out.append(Finding("busy_no_progress", "gaming", "page", region, f"busy_no_progress|{team}", team=team,
                           nodes=sorted(set(grp["node_id"])), lost_gpu_minutes=float(n),
                           summary=f"Team {team}: GPUs busy with no training progress",
                           evidence=f"{n} GPU-minutes at median {grp['gpu_util_pct'].median():.0f} % util from "
                                    f"{grp['job_id'].nunique()} job(s) reporting no training metrics; tensor activity "
                                    + (f"median {tensor.median():.2f}" if tensor.notna().any() else "not exported (degraded)")
                                    + (f", power median {grp['power_w'].median():.0f} W" if grp["power_w"].notna().any()
                                       else ", power not exported")
                                    + ("; consistent with dummy load" if low_tensor else "")))
    return out


def detect_stalls(ctx: PartitionContext) -> list[Finding]:
    rt = ctx.runtime
    out = []
    if rt.empty:
        return out
    zero = (rt["steps"] == 0) & (rt["checkpoint_time_s"].fillna(0) == 0)
    # per job: minutes reported after its last progressing minute (a trailing run of zero-step minutes)
    last_ts = rt.groupby("job_id")["ts"].max()
    last_progress = rt[~zero].groupby("job_id")["ts"].max()
    trailing = rt[zero & (rt["ts"] > rt["job_id"].map(last_progress).fillna(pd.Timestamp.min.tz_localize("UTC")))]
    run = trailing.groupby("job_id").size()
    run = run[(run >= STALL_MINUTES) & (last_ts.reindex(run.index) >= ctx.start)]
    if run.empty:
        return out
    g = ctx.gpu[ctx.gpu["job_id"].isin(run.index)]
    for region, grp in g.groupby("region"):
        nodes = sorted(set(grp["node_id"]))
        js = sorted(set(grp["job_id"]))
        lost = float(len(grp))
        out.append(Finding("training_stall", "software", "page" if lost >= 20 else "ticket", region, f"training_stall|{region}",
                           nodes=nodes, lost_gpu_minutes=lost,
                           summary=f"{len(js)} training job(s) hung in {region}",
                           evidence=f"no steps for {int(run.reindex(js).max())}+ minutes while holding "
                                    f"{grp['gpu_uuid'].nunique()} GPUs at median {grp['gpu_util_pct'].median():.0f} % util "
                                    f"(jobs {', '.join(js[:5])})"))
    return out


def detect_missing_data(ctx: PartitionContext) -> list[Finding]:
    inv = ctx.inventory
    out = []
    if inv.empty:
        return out
    exp = inv.groupby("region")["gpus"].sum()
    rep = ctx.gpu.groupby(["region", "ts"]).size().unstack("ts", fill_value=0) if len(ctx.gpu) else pd.DataFrame()
    minutes = pd.date_range(ctx.start, ctx.end, freq="1min", inclusive="left")
    for region, expected in exp.items():
        row = rep.loc[region].reindex(minutes, fill_value=0) if region in rep.index else pd.Series(0, index=minutes)
        silent = int((row < 0.5 * expected).sum())
        if silent >= MIN_MISSING_MINUTES:
            out.append(Finding("missing_data", "missing_data", "ticket", region, f"missing_data|{region}",
                               summary=f"Telemetry missing for {region}",
                               evidence=f"{silent} of {len(minutes)} minutes with under half of the region's {int(expected)} "
                                        f"GPUs reporting: missing data, not a GPU incident"))
    return out


DETECTORS = [detect_hardware, detect_thermal, detect_deploys, detect_slowdowns, detect_scheduling, detect_no_progress,
             detect_stalls, detect_missing_data]


def detect(ctx: PartitionContext) -> list[Finding]:
    """All findings of one partition. A region whose collector is silent raises only missing_data."""
    findings = [f for det in DETECTORS for f in det(ctx)]
    silent = {f.region for f in findings if f.detector == "missing_data"}
    return [f for f in findings if f.detector == "missing_data" or f.region not in silent or f.detector == "deploy_regression"]

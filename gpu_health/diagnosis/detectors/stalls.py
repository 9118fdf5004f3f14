"""Stalls: training jobs that stopped progressing while they hold their GPUs (``training_stall``, software: the
runbook is gpu_health.diagnosis.detectors.software's).

==================  ===========  =====================================================================
detector            family       pages on (the two witnesses) / tickets on
==================  ===========  =====================================================================
training_stall      software     a job that trained before reports 0 steps (no checkpoint) for 3+
                                 minutes AND its GPUs compute nothing (SM/tensor idle, no kernel or
                                 power near idle); ticket when the device cannot confirm; jobs without
                                 training metrics that computed, then spin idle join its scope
==================  ===========  =====================================================================
"""


import numpy as np
import pandas as pd

from gpu_health.codes import factorize
from gpu_health.constants import KERNEL_ACTIVE_UTIL_PCT, REPORTED_BUSY_UTIL_PCT, CauseFamily
from gpu_health.diagnosis.context import PartitionContext, _gpu_slim, jobs_that_computed
from gpu_health.diagnosis.finding import Detector, Finding, margin_of
from gpu_health.metrics.device import device_idle, low_power, reference_power


# a trainer completes steps every few seconds (the brief's workloads: well under a minute a step); three
# whole minutes in a row without one, outside a checkpoint, is not a slow step but no progress
STALL_MINUTES = 3
# a stall pages once it holds 20 GPU-minutes in the partition (a 4-GPU job for the whole partition);
# a one- or two-GPU job's hang is its owner's ticket
STALL_PAGE_GPU_MINUTES = 20


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

    A job that reports no training metrics has no step counter: it is hung when its own GPU rows show it
    computed (context.jobs_that_computed) and its GPUs now spin busy with both device witnesses idle (SM/tensor
    activity and power), as a hung collective leaves them (_hung_without_metrics). Such jobs join their region's
    stall (its scope: the nodes to act on); alone, with STALL_PAGE_GPU_MINUTES of them, they are a ticket: no
    progress signal of their own says they stopped.
    """
    out = []
    g, run = _stalled_reporting(ctx)
    silent = _hung_without_metrics(ctx, set(g.loc[g["confirms"], "region"]))
    regions = sorted(set(g["region"]) | set(silent["region"]))
    for region in regions:
        grp, quiet = g[g["region"] == region], silent[silent["region"] == region]
        confirmed = grp[grp["confirms"]]
        unknown = grp[~grp["judged"]]
        if len(confirmed):
            rows, basis = confirmed, "the GPUs compute nothing (SM/tensor idle, no kernel or power near idle)"
            severity = "page" if len(confirmed) >= STALL_PAGE_GPU_MINUTES else "ticket"
        elif len(unknown):
            rows, basis, severity = unknown, "profiling fields and power not exported: the device cannot confirm", "ticket"
        elif len(quiet) >= STALL_PAGE_GPU_MINUTES:
            rows, basis, severity = grp.iloc[0:0], "", "ticket"
        else:
            continue  # the GPUs compute at full power (evaluation or validation), or too little to raise alone
        js = sorted(set(rows["job_id"]))
        stuck = int(run.reindex(js).max()) if js else 0
        # the page's margin: the confirmed stalled GPU-minutes over their floor, the longest stall over its own
        margin = (margin_of((len(confirmed), STALL_PAGE_GPU_MINUTES), (run.reindex(js).max(), STALL_MINUTES))
                  if severity == "page" else None)
        evidence = [f"no steps for {stuck}+ minutes after training while holding {rows['gpu_uuid'].nunique()} GPUs "
                    f"at median {rows['gpu_util_pct'].median():.0f} % util; {basis} (jobs {', '.join(js[:5])})"] if js else []
        quiet_jobs = sorted(set(quiet["job_id"]))
        if quiet_jobs:
            evidence.append(f"{len(quiet_jobs)} job(s) reporting no training metrics that computed before now hold "
                            f"{quiet['gpu_uuid'].nunique()} GPUs busy at median {quiet['gpu_util_pct'].median():.0f} % "
                            f"util with SM/tensor activity and power near idle (jobs {', '.join(quiet_jobs[:5])})")
        n_jobs = len(js) + len(quiet_jobs)
        out.append(Finding("training_stall", "software", severity, region, f"training_stall|{region}",
                           nodes=sorted(set(rows["node_id"]) | set(quiet["node_id"])),
                           lost_gpu_minutes=float(len(rows) + len(quiet)), margin=margin,
                           summary=f"{n_jobs} training job(s) hung in {region}", evidence="; ".join(evidence)))
    return out


_STALL_COLUMNS = ["region", "node_id", "gpu_uuid", "job_id", "gpu_util_pct", "confirms", "judged"]


def _stalled_reporting(ctx: PartitionContext) -> tuple[pd.DataFrame, pd.Series]:
    """The GPU rows of the stalled jobs that report training metrics since their stall began (with ``confirms``:
    the device confirms, ``judged``: the device could tell) and each such job's trailing zero-step minutes."""
    rt = ctx.runtime
    none = pd.DataFrame(columns=_STALL_COLUMNS), pd.Series(dtype=float)
    if rt.empty:
        return none
    # a stall is STALL_MINUTES zero-step minutes of one job at least: without a job that has as many, none
    maybe = ((rt["steps"].to_numpy(dtype=float, na_value=0.0) == 0)
             & (rt["checkpoint_time_s"].to_numpy(dtype=float, na_value=0.0) == 0))
    if maybe.sum() < STALL_MINUTES:
        return none
    codes = factorize(rt["job_id"].to_numpy(dtype=object)[maybe])[0]
    if not (codes >= 0).any() or np.bincount(codes[codes >= 0]).max() < STALL_MINUTES:
        return none
    zero = (rt["steps"] == 0) & (rt["checkpoint_time_s"].fillna(0) == 0)
    # per job: minutes reported after its last progressing minute (a trailing run of zero-step minutes)
    last_ts = rt.groupby("job_id")["ts"].max()
    trained = rt.groupby("job_id")["last_step"].max() > 0
    last_progress = rt[~zero].groupby("job_id")["ts"].max()
    trailing = rt[zero & (rt["ts"] > rt["job_id"].map(last_progress).fillna(pd.Timestamp.min.tz_localize("UTC")))]
    run = trailing.groupby("job_id").size()
    run = run[(run >= STALL_MINUTES) & (last_ts.reindex(run.index) >= ctx.start) & trained.reindex(run.index).fillna(False)]
    if run.empty:
        return none
    since = trailing[trailing["job_id"].isin(run.index)].groupby("job_id")["ts"].min()
    g = ctx.gpu[ctx.gpu["job_id"].isin(run.index)]
    g = g[g["ts"] >= g["job_id"].map(since)]
    if g.empty:
        return none
    ref = reference_power(_gpu_slim(ctx), ["sku"])
    idle, dev_known = device_idle(g["sm_active"].to_numpy(dtype=float, na_value=np.nan),
                                  g["tensor_active"].to_numpy(dtype=float, na_value=np.nan))
    low, pow_known = low_power(g.assign(sku=g["sku"].astype(object)), ref, ["sku"])
    no_kernel = g["gpu_util_pct"].to_numpy(dtype=float) < KERNEL_ACTIVE_UTIL_PCT
    confirms = (dev_known & idle) | (pow_known & low) | no_kernel
    judged = dev_known | pow_known | no_kernel
    g = g.assign(confirms=confirms, judged=judged, job_id=g["job_id"].astype(object), region=g["region"].astype(object))
    return g[_STALL_COLUMNS], run


def _hung_without_metrics(ctx: PartitionContext, stalled_regions: set) -> pd.DataFrame:
    """The GPU rows of jobs that report no training metrics and went still: every GPU of the job busy
    (REPORTED_BUSY_UTIL_PCT) with both device witnesses idle (SM/tensor activity and power near idle) for the
    last STALL_MINUTES or more of its minutes in the partition (a trailing run, as a stall's zero-step minutes:
    a minute's dip of a working job is not one), of the jobs among them that computed before
    (context.jobs_that_computed: a dummy load never did). Their history is read for a region with a stall of
    reporting jobs (``stalled_regions``), or holding STALL_PAGE_GPU_MINUTES of such rows (what raises alone)."""
    cols = ["region", "node_id", "gpu_uuid", "job_id", "gpu_util_pct"]
    none = pd.DataFrame(columns=cols)
    g = _gpu_slim(ctx)
    if g.empty:
        return none
    reporting = set(ctx.runtime["job_id"].unique())
    g = g[g["job_id"].notna().to_numpy(dtype=bool) & ~g["job_id"].isin(reporting).to_numpy(dtype=bool)]
    if len(g) < STALL_MINUTES:
        return none
    idle, dev_known = device_idle(g["sm_active"].to_numpy(dtype=float, na_value=np.nan),
                                  g["tensor_active"].to_numpy(dtype=float, na_value=np.nan))
    low, pow_known = low_power(g, reference_power(_gpu_slim(ctx), ["sku"]), ["sku"])
    still = ((g["gpu_util_pct"].to_numpy(dtype=float, na_value=np.nan) >= REPORTED_BUSY_UTIL_PCT)
             & dev_known & idle & pow_known & low)
    if still.sum() < STALL_MINUTES:
        return none
    g = g.assign(job_id=g["job_id"].astype(object), region=g["region"].astype(object))
    # per job: its minutes after the last minute in which any of its GPUs was not still
    last_moved = g[~still].groupby("job_id")["ts"].max()
    after = g["ts"] > g["job_id"].map(last_moved).fillna(pd.Timestamp.min.tz_localize("UTC"))
    trail = g[still & after.to_numpy(dtype=bool)]
    minutes = trail.groupby("job_id")["ts"].nunique()
    trail = trail[trail["job_id"].isin(minutes.index[minutes >= STALL_MINUTES])]
    per_region = trail.groupby("region").size()
    asked = set(per_region.index[per_region >= STALL_PAGE_GPU_MINUTES]) | set(stalled_regions)
    trail = trail[trail["region"].isin(asked)]
    if trail.empty:
        return none
    return trail.loc[trail["job_id"].isin(jobs_that_computed(ctx, set(trail["job_id"]))), cols]


RUNBOOKS: dict[str, str] = {}  # software's (gpu_health.diagnosis.detectors.software)
DETECTORS = [
    Detector(detect_stalls, emits=(("training_stall", CauseFamily.SOFTWARE.value),),
             needs=("runtime", "gpu", "job_gpu_history")),
]

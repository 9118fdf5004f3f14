"""Stalls: training jobs that stopped progressing while they hold their GPUs (``training_stall``, software: the
runbook is gpu_health.diagnosis.detectors.software's).

==================  ===========  =====================================================================
detector            family       pages on (the two witnesses) / tickets on
==================  ===========  =====================================================================
training_stall      software     a job that trained before reports 0 steps (no checkpoint) for 3+
                                 minutes AND its GPUs compute nothing (SM/tensor idle, no kernel or
                                 power near idle); ticket when the device cannot confirm
==================  ===========  =====================================================================
"""


import numpy as np
import pandas as pd

from gpu_health.codes import factorize
from gpu_health.constants import KERNEL_ACTIVE_UTIL_PCT, CauseFamily
from gpu_health.diagnosis.context import PartitionContext, _gpu_slim
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
    """
    rt = ctx.runtime
    out = []
    if rt.empty:
        return out
    # a stall is STALL_MINUTES zero-step minutes of one job at least: without a job that has as many, none
    maybe = ((rt["steps"].to_numpy(dtype=float, na_value=0.0) == 0)
             & (rt["checkpoint_time_s"].to_numpy(dtype=float, na_value=0.0) == 0))
    if maybe.sum() < STALL_MINUTES:
        return out
    codes = factorize(rt["job_id"].to_numpy(dtype=object)[maybe])[0]
    if not (codes >= 0).any() or np.bincount(codes[codes >= 0]).max() < STALL_MINUTES:
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
    ref = reference_power(_gpu_slim(ctx), ["sku"])
    idle, dev_known = device_idle(g["sm_active"].to_numpy(dtype=float, na_value=np.nan),
                                  g["tensor_active"].to_numpy(dtype=float, na_value=np.nan))
    low, pow_known = low_power(g.assign(sku=g["sku"].astype(object)), ref, ["sku"])
    no_kernel = g["gpu_util_pct"].to_numpy(dtype=float) < KERNEL_ACTIVE_UTIL_PCT
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
        # the page's margin: the confirmed stalled GPU-minutes over their floor, the longest stall over its own
        margin = (margin_of((len(confirmed), STALL_PAGE_GPU_MINUTES), (run.reindex(js).max(), STALL_MINUTES))
                  if severity == "page" else None)
        out.append(Finding("training_stall", "software", severity, region, f"training_stall|{region}",
                           nodes=sorted(set(rows["node_id"])), lost_gpu_minutes=float(len(rows)), margin=margin,
                           summary=f"{len(js)} training job(s) hung in {region}",
                           evidence=f"no steps for {int(run.reindex(js).max())}+ minutes after training while holding "
                                    f"{rows['gpu_uuid'].nunique()} GPUs at median {rows['gpu_util_pct'].median():.0f} % "
                                    f"util; {basis} (jobs {', '.join(js[:5])})"))
    return out


RUNBOOKS: dict[str, str] = {}  # software's (gpu_health.diagnosis.detectors.software)
DETECTORS = [
    Detector(detect_stalls, emits=(("training_stall", CauseFamily.SOFTWARE.value),), needs=("runtime", "gpu")),
]

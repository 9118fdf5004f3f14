"""Gaming: dummy load, judged on the device (``busy_no_progress``).

==================  ===========  =====================================================================
detector            family       pages on (the two witnesses) / tickets on
==================  ===========  =====================================================================
busy_no_progress    gaming       dummy load on the device: busy GPUs with SM and tensor activity idle
                                 AND power near idle (jobs reporting no training metrics); ticket
                                 when the collector exports only one of the two; never a job that
                                 computed before and stopped (a hang: the stall's, software)
==================  ===========  =====================================================================
"""


import numpy as np
import pandas as pd

from gpu_health.codes import factorize
from gpu_health.constants import REPORTED_BUSY_UTIL_PCT, CauseFamily
from gpu_health.diagnosis.context import PartitionContext, _gpu_codes, _gpu_slim, jobs_that_computed
from gpu_health.diagnosis.finding import Detector, Finding, margin_of
from gpu_health.metrics.device import device_idle, low_power, reference_power


# how far back a job's own GPU rows are read for whether it ever computed (a dummy load never did; a hung job did,
# until it hung): a hang is ended by its collective's watchdog (PyTorch's NCCL timeout: 10-30 minutes by default)
# or by its owner within hours; a job held busy with nothing done for longer than this since it last computed is
# GPUs held for nothing, which the gaming runbook (reclaim them, talk to the team) is right for, whatever began it
COMPUTE_HISTORY = pd.Timedelta(hours=6)
# dummy load pages when a team holds a whole 8-GPU node's worth for the whole partition (8 x 5 GPU-minutes):
# the smallest unit a DGX scheduler hands to a distributed job, and at ~$2-4 per GPU-hour the point where the
# waste is worth waking someone; less is a ticket for the team
NO_PROGRESS_PAGE_GPU_MINUTES = 40


def detect_no_progress(ctx: PartitionContext) -> list[Finding]:
    """Dummy load (the brief's gaming case), judged on the device, never on missing step metrics.

    A GPU-minute is dummy load when a job holds the GPU busy (gpu_util_pct >= REPORTED_BUSY_UTIL_PCT) while the
    device says it computes nothing: SM and tensor activity idle (gpu_health.metrics.device.device_idle)
    AND power under half the SKU's working reference (device.low_power). Those are two independent
    witnesses (the profiling counters and the power sensor) of the same fact; a job that reports no training
    metrics is ordinary (notebooks, GBDT, uninstrumented batch work, set-up) and is only context here.

    Page: a team's jobs that report no training metrics hold at least NO_PROGRESS_PAGE_GPU_MINUTES such
    GPU-minutes in the partition (batch, distributed or unknown class: a notebook is a person at a keyboard,
    a ticket at most). Ticket: the same GPU-minutes on notebooks; or busy GPUs with one witness only because
    the collector does not export the other (profiling fields are off by default in dcgm-exporter; some
    collectors have no power): the guardrail cannot judge, it says so. Jobs that report training metrics are
    the stall detector's; so is a job whose own GPU rows show it computed (COMPUTE_HISTORY before, or earlier in
    the partition) and then stopped while it holds its GPUs busy: a hung collective spins them at ~100 %
    utilization with the device idle, as a dummy load does, but a dummy load never computed (jobs_that_computed).
    """
    out = []
    if ctx.gpu.empty:
        return out
    has_job = _gpu_codes(ctx, "job_id")[0] >= 0
    if not has_job.any():
        return out
    gpu = ctx.gpu
    reporting = set(ctx.runtime["job_id"].unique())  # (the distinct ids: iterating every row boxes each value)
    job_code, job_uni = _gpu_codes(ctx, "job_id")
    reports = np.array([j in reporting for j in job_uni] + [False], dtype=bool)
    busy = has_job & (gpu["gpu_util_pct"].to_numpy(dtype=float, na_value=np.nan) >= REPORTED_BUSY_UTIL_PCT) & ~reports[job_code]
    if not busy.any():
        return out
    # every finding needs NO_PROGRESS_PAGE_GPU_MINUTES busy GPU-minutes whose device is idle or not reported
    # (the power witness alone counts only where the profiling fields are missing)
    dev_idle, dev_seen = device_idle(gpu["sm_active"].to_numpy(dtype=float, na_value=np.nan)[busy],
                                     gpu["tensor_active"].to_numpy(dtype=float, na_value=np.nan)[busy])
    if int((dev_idle | ~dev_seen).sum()) < NO_PROGRESS_PAGE_GPU_MINUTES:
        return out
    slim = _gpu_slim(ctx)
    g = slim[has_job]
    ref = reference_power(g, ["sku"])
    g = slim[busy]
    idle, dev_known = device_idle(g["sm_active"].to_numpy(dtype=float, na_value=np.nan),
                                  g["tensor_active"].to_numpy(dtype=float, na_value=np.nan))
    low, pow_known = low_power(g, ref, ["sku"])
    if ctx.prepared is not None and ctx.prepared.meta is ctx.meta:
        code, uniq = factorize(g["job_id"])
        team = np.array([ctx.prepared.team_of(j, "team") for j in uniq] + ["unknown"], dtype=object)[code]
        cls = np.array([ctx.prepared.team_of(j, "workload_class") for j in uniq] + ["unknown"], dtype=object)[code]
    else:
        meta = ctx.meta[ctx.meta["job_id"].isin(g["job_id"].unique())] if len(ctx.meta) else ctx.meta
        meta = meta.drop_duplicates("job_id").set_index("job_id") if len(meta) else pd.DataFrame(columns=["team", "workload_class"])
        jobs = g["job_id"].astype(object)
        team = jobs.map(meta["team"]).astype(object).fillna("unknown").to_numpy()
        cls = jobs.map(meta["workload_class"]).astype(object).fillna("unknown").to_numpy()
    both = dev_known & idle & pow_known & low
    one = (dev_known & idle & ~pow_known) | (~dev_known & pow_known & low)
    # only a team with NO_PROGRESS_PAGE_GPU_MINUTES of one kind of evidence can raise a finding: count first
    teams, which = np.unique(team, return_inverse=True)
    counts = [np.bincount(which, weights=w.astype(float), minlength=len(teams))
              for w in (both & (cls != "interactive"), both, one)]
    candidates = set(teams[np.maximum.reduce(counts) >= NO_PROGRESS_PAGE_GPU_MINUTES])
    if not candidates:
        return out
    g = g.assign(team=team, cls=cls, both=both, one=one)
    g = g[np.isin(team, list(candidates))]
    g = g[~g["job_id"].isin(jobs_that_computed(ctx, set(g["job_id"].astype(object))))]
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
                           # the page's margin: its dummy GPU-minutes (both witnesses) over their floor
                           margin=margin_of((len(rows), NO_PROGRESS_PAGE_GPU_MINUTES)) if severity == "page" else None,
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


RUNBOOKS = {
    CauseFamily.GAMING.value:
        "Contact the team: GPUs held at high utilization without training progress; reclaim the GPUs "
        "and review the quota. Runbook: docs/runbooks.md#gaming",
}
DETECTORS = [
    Detector(detect_no_progress, emits=(("busy_no_progress", CauseFamily.GAMING.value),),
             needs=("gpu", "runtime", "meta", "job_gpu_history")),
]

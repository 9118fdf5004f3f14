"""Failed jobs: the work they threw away, and their job_failures rows."""

import numpy as np
import pandas as pd

from gpu_health.codes import factorize
from gpu_health.constants import MINUTE, PARTITION_FREQ
from gpu_health.metrics.goodput.queues import first_node
from gpu_health.metrics.goodput.states import FAILURE_LOOKBACK, LOSS_EXITS


def _failures(sched: pd.DataFrame, runtime: pd.DataFrame, g: pd.DataFrame, start, end,
              history: pd.DataFrame | None = None) -> pd.DataFrame:
    """Jobs that failed in the window and the work they threw away.

    Lost work = steps since the last durable checkpoint (``last_step -
    last_checkpoint_step`` of the job's last runtime row) at its median step time
    over the :data:`FAILURE_LOOKBACK` before the failure; a job with no training
    metrics loses everything since it started (its 'started' event in ``history``).
    Only the job's own rows in that span are used, so the answer does not depend on
    the window (given the lookback).
    """
    cols = ["job_id", "failed_at", "exit_state", "reason", "lost_from", "gpus", "lost_gpu_minutes", "lost_in_window"]
    if sched is None or sched.empty:
        return pd.DataFrame(columns=cols)
    ended = sched[(sched["event"] == "ended") & sched["exit_state"].isin(LOSS_EXITS)
                  & (sched["ts"] >= start) & (sched["ts"] < end)]
    if ended.empty:
        return pd.DataFrame(columns=cols)
    ended = ended.drop_duplicates("job_id", keep="last").set_index("job_id")
    failed_at = ended["ts"].dt.floor("1min")
    events = history if history is not None and len(history) else sched
    # (only the ended jobs' events are grouped: the look-back holds every job's)
    started = events[(events["event"] == "started").to_numpy() & events["job_id"].isin(ended.index).to_numpy()]
    starts = started.groupby("job_id")["ts"].max().reindex(ended.index)
    rt = runtime[runtime["job_id"].isin(ended.index)]
    rt = rt[rt["ts"] >= rt["job_id"].map(failed_at - FAILURE_LOOKBACK)]
    last = (rt.sort_values("ts").groupby("job_id")
            .agg(last_step=("last_step", "last"), ck=("last_checkpoint_step", "last"), step=("step_time_s", "median")))
    last = last.reindex(ended.index)
    since_ck = (last["last_step"] - last["ck"].astype(float).fillna(0)).clip(lower=0)
    lost_min = since_ck * last["step"] / 60.0
    lost_from = failed_at - pd.to_timedelta(lost_min.fillna(0).round(), unit="min")
    no_metrics = last["last_step"].isna()
    lost_from = lost_from.where(~no_metrics, starts.dt.floor("1min"))
    lost_from = lost_from.fillna(failed_at)
    gpus = ended["gpus"].astype(float)
    total_min = ((failed_at - lost_from) / MINUTE).clip(lower=0) + 1
    own_partition = failed_at.dt.floor(PARTITION_FREQ)
    in_win = ((failed_at - np.maximum(lost_from, own_partition)) / MINUTE).clip(lower=0) + 1
    out = pd.DataFrame({
        "failed_at": failed_at, "exit_state": ended["exit_state"], "reason": ended["reason"],
        "lost_from": pd.to_datetime(lost_from, utc=True), "gpus": gpus,
        "lost_gpu_minutes": total_min * gpus, "lost_in_window": in_win * gpus,  # in the failure's own partition
    })
    return out.rename_axis("job_id").reset_index()


def enrich_failures(failures: pd.DataFrame, gpu: pd.DataFrame, meta: pd.DataFrame, sched: pd.DataFrame,
                    inventory: pd.DataFrame | None = None) -> pd.DataFrame:
    """The ``job_failures`` rows: :func:`compute_states`' failures with their partition, and the job's region
    and SKU (its last GPU row in ``gpu``; else the first node of its 'ended' event in ``sched``, placed by
    ``inventory``), team and workload class (``meta``); ``'unknown'`` where nothing says.

    Only the failed jobs' GPU rows are sorted and grouped (the rest of the window's rows cannot place them).
    """
    if failures.empty:
        return failures.assign(partition_start=pd.Series(dtype="datetime64[ns, UTC]"), region=[], sku=[], team=[], workload_class=[])
    # the GPU rows of failed jobs, judged per distinct job (the codes' -1, no job, indexes the appended False)
    codes, jobs = factorize(gpu["job_id"])
    failed = np.append(pd.Index(np.asarray(jobs, dtype=object)).isin(failures["job_id"]), False)
    mine = gpu[failed[codes]]
    place = mine.sort_values("ts").groupby("job_id").agg(region=("region", "last"), sku=("sku", "last"))
    if inventory is not None and len(inventory):
        # a job that failed early in a partition may have no GPU rows in it: its 'ended' event names its nodes
        ended = sched[(sched["event"] == "ended") & sched["job_id"].isin(failures["job_id"]) & sched["node_ids"].notna()]
        first = first_node(ended.drop_duplicates("job_id", keep="last").set_index("job_id")["node_ids"])
        inv = inventory.drop_duplicates("node_id").set_index("node_id")
        by_event = pd.DataFrame({"region": first.map(inv["region"]), "sku": first.map(inv["sku"])})
        place = place.combine_first(by_event.dropna(how="all")) if len(place) else by_event
    m = meta.drop_duplicates("job_id").set_index("job_id") if len(meta) else pd.DataFrame(columns=["team", "workload_class"])
    f = failures.copy()
    f["partition_start"] = f["failed_at"].dt.floor(PARTITION_FREQ)
    for col, src in (("region", place), ("sku", place), ("team", m), ("workload_class", m)):
        f[col] = f["job_id"].map(src[col]).astype(object).fillna("unknown") if col in src else "unknown"
    f["reason"] = f["reason"].astype(object)
    return f

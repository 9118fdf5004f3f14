"""A driver upgrade rolled out as operators roll one out, and the jobs it breaks (a ``driver_regression`` with
``rollout``; gpu_health.sim.scenario says how it is written).

The upgrade reaches its nodes in waves. A wave's nodes are drained: no job starts there, and the Slurm jobs still
running are requeued (``scontrol requeue``) and run again once the wave returns with the new driver; notebooks
(Kubernetes pods) are evicted. From then on until the rollback, a job starting on an upgraded node fails with
probability ``magnitude`` within its first minutes: the driver faults the GPU (an Xid on the job's GPUs for a
minute or two, the driver's Xid log read by the exporter) and the scheduler reports whatever the job's last line
said -- the Xid, NCCL's "unhandled cuda error", CUDA's "unspecified launch failure", or only a non-zero exit. A share
of the failed Slurm jobs is requeued and runs once more: started on an upgraded node before the rollback, it may fail
again, and then it stays failed.

A job that runs more than once keeps its ``job_id`` (contracts.md: job_metadata); its later runs are further rows of
the plan with ``attempt`` > 0, which submit nothing and describe nothing again. Every draw is keyed by the job's
(lane, epoch, k, attempt), so a window's plan does not depend on the windows generated before it.
"""

import numpy as np
import pandas as pd

from gpu_health.sim import hashing as H
from gpu_health.sim.clock import to_s
from gpu_health.sim.scenario import Incident, Scenario

# field salts (distinct from the job plan's 1..20 and the telemetry's 101..)
F_RFAIL, F_RWHEN, F_RXID, F_RTEXT, F_RQ, F_RAGAIN = range(60, 66)
XID_TEXT = {13: "Graphics Engine Exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
            45: "Preemptive cleanup, due to previous errors", 119: "GSP RPC timeout", 120: "GSP error"}
# what the scheduler's reason says for a job the driver killed: the job's last line names the GPU fault, or the
# library that hit it, or nothing but the exit (Slurm's NonZeroExitCode, a pod's terminated reason "Error")
REASON_WEIGHTS = [0.35, 0.25, 0.25, 0.15]
NCCL_TEXT = "NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
LAUNCH_TEXT = "CUDA error: unspecified launch failure"
EXIT_TEXT = {"slurm": "NonZeroExitCode (exit code 1)", "kubernetes": "Error (exit code 1)"}
REQUEUE_DELAY_S = (60, 180)  # a requeued job pends for its scheduler's next pass before it starts again


def lanes_on(scen: Scenario, node_ids) -> np.ndarray:
    """The lanes (job slots) that place work on any of ``node_ids``."""
    node_ids = set(node_ids)
    lanes = scen.cluster.lanes
    return lanes.loc[[bool(node_ids & set(ns)) for ns in lanes["node_ids"]], "lane"].to_numpy()


def _keys(plan: pd.DataFrame, rows: np.ndarray):
    return tuple(plan[c].to_numpy()[rows] for c in ("lane", "epoch", "k", "attempt"))


def _again(seed: int, plan: pd.DataFrame, rows: np.ndarray, again_s: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """The next run of each job of ``rows`` (pending again from ``again_s``): it holds its lane until the job's
    planned end, with the job's planned ending. Returns the runs and which of ``rows`` have one: a job whose
    planned end comes before it could start again is not requeued (it stays cancelled / failed)."""
    lo, hi = REQUEUE_DELAY_S
    nxt = plan.iloc[rows].copy()
    nxt["attempt"] = nxt["attempt"] + 1
    delay = lo + H.uniform(seed, F_RAGAIN, *_keys(nxt, np.arange(len(nxt)))) * (hi - lo)
    nxt["start_s"] = (again_s + delay).astype(np.int64)
    nxt["setup_s"] = np.minimum(nxt["setup_s"].to_numpy(), (nxt["end_s"] - nxt["start_s"]).clip(0).to_numpy() // 2)
    nxt["requeued"] = False
    kept = (nxt["end_s"] > nxt["start_s"] + 60).to_numpy()
    return nxt[kept], kept


def requeue_drained(scen: Scenario, plan: pd.DataFrame, rows: np.ndarray, s: int, e: int, kind: str) -> pd.DataFrame:
    """A drain that requeues: the Slurm jobs of ``rows`` (running at ``s``) stop there and run again after the
    drain ends at ``e``; the notebooks are evicted (cancelled). Returns their next runs."""
    pool = plan["pool"].to_numpy()[rows]
    slurm = rows[pool != "interactive"]
    nxt, kept = _again(scen.seed, plan, slurm, np.full(len(slurm), e))  # copied before the runs are cut
    plan.loc[plan.index[rows], ["end_s", "exit_state", "reason"]] = [s, "cancelled", f"node drained for {kind.replace('_', ' ')}"]
    plan.loc[plan.index[slurm[kept]], "requeued"] = True
    return nxt


def upgraded_since(scen: Scenario, inc: Incident) -> dict[int, int]:
    """lane -> second from which the lane runs on the new driver (its first node's wave returned)."""
    out: dict[int, int] = {}
    for ts, part in inc.waves():
        back = to_s(ts) + inc.rollout.drain_s
        for lane in lanes_on(scen, part):
            out[int(lane)] = min(out.get(int(lane), back), back)
    return out


def apply_rollout(scen: Scenario, plan: pd.DataFrame, n: int, inc: Incident) -> pd.DataFrame:
    """Fail the jobs that start on an upgraded node before the rollback; requeue a share of them (once)."""
    since = upgraded_since(scen, inc)
    if not since or plan.empty:
        return plan
    plan = plan.reset_index(drop=True)
    again = _fail(scen, plan, n, inc, since, requeue=True).reset_index(drop=True)
    _fail(scen, again, n, inc, since, requeue=False)  # a requeued run that fails again stays failed
    return pd.concat([plan, again], ignore_index=True)


def _fail(scen: Scenario, plan: pd.DataFrame, n: int, inc: Incident, since: dict[int, int], requeue: bool) -> pd.DataFrame:
    """Mark the failures among ``plan``'s jobs (in place); return the runs of the failed jobs that are requeued."""
    seed, r = scen.seed, inc.rollout
    lane = plan["lane"].to_numpy()
    back = np.array([since.get(int(x), -1) for x in lane], dtype=np.int64)
    start, end = plan["start_s"].to_numpy(), plan["end_s"].to_numpy()
    exposed = (back >= 0) & (start >= back) & (start < to_s(inc.end)) & ~plan["dummy"].to_numpy(bool)
    rows = np.flatnonzero(exposed)
    if not len(rows):
        return plan.iloc[:0]
    keys = _keys(plan, rows)
    t_fail = start[rows] + 30 + (H.uniform(seed, F_RWHEN, n, *keys) * (r.fail_within_s - 30)).astype(np.int64)
    fails = (H.uniform(seed, F_RFAIL, n, *keys) < inc.magnitude) & (t_fail < end[rows])
    rows, t_fail, keys = rows[fails], t_fail[fails], tuple(k[fails] for k in keys)
    if not len(rows):
        return plan.iloc[:0]
    xid = np.array(r.failure_xids)[(H.uniform(seed, F_RXID, n, *keys) * len(r.failure_xids)).astype(int)]
    text = H.choice(seed, REASON_WEIGHTS, F_RTEXT, n, *keys)
    pool = plan["pool"].to_numpy()[rows]
    reasons = [f"Xid {x}: {XID_TEXT.get(int(x), 'GPU fault')}" if c == 0 else NCCL_TEXT if c == 1 else LAUNCH_TEXT if c == 2
               else EXIT_TEXT["kubernetes" if p == "interactive" else "slurm"] for x, c, p in zip(xid, text, pool)]
    again = requeue & (pool != "interactive") & (H.uniform(seed, F_RQ, n, *keys) < r.requeue)
    nxt, kept = _again(seed, plan, rows[again], t_fail[again])  # copied before the failed run is cut
    again[np.flatnonzero(again)[~kept]] = False
    idx = plan.index[rows]
    plan.loc[idx, "end_s"] = t_fail
    plan.loc[idx, "exit_state"] = "failed"
    plan.loc[idx, "reason"] = np.array(reasons, dtype=object)
    plan.loc[idx, "xid_on_end"] = xid
    plan.loc[idx, "xid_all"] = True
    plan.loc[idx, "requeued"] = again
    return nxt

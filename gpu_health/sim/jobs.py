"""The job plan: which job holds which lane when, as a pure function of the scenario.

Each lane runs an alternating sequence *gap, job, gap, job ...* inside fixed
epochs (1 day for interactive and batch lanes, 7 days for distributed lanes),
with a per-lane phase so epoch edges are staggered across the cluster. A job
never outlives its epoch (the last one is cut at the edge), so the plan of any
window needs only the epochs that overlap it: no partition depends on the ones
before it. Every draw comes from :mod:`gpu_health.sim.hashing`, keyed by
(seed, lane, epoch, job, field).

Demand follows the time of week: interactive work peaks in each region's
business hours; batch retraining surges on Monday and Thursday mornings
(weekday retrain waves), which shortens gaps and lengthens queue waits.
On a cluster with ``teams`` / ``cron`` / ``fair_share`` (the messy profile), the
team table, scheduled retrains and fair-share waits come from the ClusterSpec;
``uninstrumented`` and tree models mark jobs that report no step metrics,
``setup_median_s`` gives each training job minutes of set-up before its first step.
Incidents that change *scheduling* (maintenance drains, faults that block a
node, scheduler changes, dummy jobs, hangs) are applied here; incidents that
change *speed* are applied per minute in :mod:`gpu_health.sim.telemetry`.
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpu_health.sim import hashing as H
from gpu_health.sim.cluster import TEAMS
from gpu_health.sim.clock import ORIGIN, from_s, to_s  # noqa: F401  (to_s, from_s: re-exported)
from gpu_health.sim.rollout import apply_rollout, requeue_drained
from gpu_health.sim.rollout import lanes_on as _lanes_on
from gpu_health.sim.scenario import Scenario
from gpu_health.sim.spread import spread_holds

MIN = 60
DAY = 86_400


@dataclass(frozen=True)
class PoolModel:
    epoch_s: int
    dur_median_s: float
    dur_sigma: float
    dur_min_s: float
    dur_max_s: float
    gap_mean_s: float
    wait_mean_s: float
    wait_max_s: float
    exit_weights: tuple  # completed, failed, cancelled, timeout, node_fail
    reports_metrics: bool
    checkpoint_every_s: int
    checkpoint_s: float
    # relative demand above which the pool's queue stays non-empty (demand exceeds capacity)
    saturates_above: float = float("inf")


POOLS = {
    "interactive": PoolModel(DAY, 9 * MIN, 0.8, 2 * MIN, 8 * 3600, 4.5 * MIN, 20, 1800,
                             (0.80, 0.04, 0.15, 0.01, 0.0), False, 0, 0.0),  # notebooks: never saturated
    "batch": PoolModel(DAY, 17 * MIN, 0.9, 3 * MIN, 12 * 3600, 4 * MIN, 90, 4 * 3600,
                       (0.885, 0.07, 0.025, 0.015, 0.005), True, 15 * MIN, 8.0, saturates_above=2.0),
    "distributed": PoolModel(7 * DAY, 10 * 3600, 0.9, 3600, 3.5 * DAY, 20 * MIN, 600, 6 * 3600,
                             (0.80, 0.10, 0.05, 0.03, 0.02), True, 30 * MIN, 45.0, saturates_above=1.25),
}
POOL_NAMES = list(POOLS)
EXIT_STATES = ["completed", "failed", "cancelled", "timeout", "node_fail"]
FAILURE_REASONS = ["CUDA out of memory", "Python exception: RuntimeError", "NCCL timeout",
                   "Xid 13: Graphics Engine Exception", "data loader worker killed (OOM)"]
FAILURE_REASON_WEIGHTS = [0.35, 0.35, 0.1, 0.05, 0.15]
REASON_XID = {3: 13}
DRIVER_FAILURES = ["Xid 13: Graphics Engine Exception", "Xid 31: GPU memory page fault",
                   "Xid 119: GSP RPC timeout", "NCCL error: unhandled cuda error"]
DRIVER_XIDS = [13, 31, 119, 0]

TEAM_WEIGHTS = {
    "interactive": [0.15, 0.1, 0.2, 0.1, 0.15, 0.3],
    "batch": [0.2, 0.3, 0.2, 0.1, 0.15, 0.05],
    "distributed": [0.15, 0.3, 0.05, 0.15, 0.1, 0.25],
}
TEAM_MODELS = {
    "fraud-realtime": ["fraud-transformer", "fraud-gbdt"],
    "fraud-offline": ["fraud-gbdt", "fraud-transformer"],
    "credit-risk": ["credit-xgb", "tabular-mlp"],
    "aml-graph": ["gnn-aml"],
    "personalization": ["embedding", "two-tower"],
    "ml-research": ["llm-finetune", "embedding"],
}
MODELS = sorted({m for ms in TEAM_MODELS.values() for m in ms})
# seconds per step on one H100, share of it waiting on input / in collectives, samples per GPU-step
MODEL_STEP = {
    "credit-xgb": (0.05, 0.08, 4096), "embedding": (0.20, 0.06, 1024), "fraud-gbdt": (0.08, 0.10, 8192),
    "fraud-transformer": (0.35, 0.05, 256), "gnn-aml": (0.50, 0.07, 512), "llm-finetune": (1.20, 0.02, 8),
    "tabular-mlp": (0.04, 0.09, 4096), "two-tower": (0.15, 0.06, 2048),
    # the messy profile's models
    "bert-rerank": (0.25, 0.05, 512), "dlrm-ctr": (0.10, 0.12, 8192), "llm-sft": (1.50, 0.02, 4),
    "vit-train": (0.40, 0.10, 256), "resnet-batch": (0.18, 0.15, 512), "tft-forecast": (0.12, 0.08, 1024),
    "xgb-ranker": (0.05, 0.0, 0), "xgb-risk": (0.05, 0.0, 0), "lgbm-ctr": (0.05, 0.0, 0), "lgbm-forecast": (0.05, 0.0, 0),
}
# Gradient-boosted trees (xgboost gpu_hist, LightGBM's CUDA tree learner) have no training step a framework
# hook could report, and run FP32 histogram kernels: the SMs are busy, the tensor (HMMA) pipe is not.
TREE_MODELS = {"xgb-ranker": "xgboost-2.1.1", "xgb-risk": "xgboost-2.1.1", "lgbm-ctr": "lightgbm-4.5.0",
               "lgbm-forecast": "lightgbm-4.5.0"}
FRAMEWORKS = ["torch-2.13.0", "torch-2.12.1", "jax-0.10.2"]
TEAM_FRAMEWORK = {"fraud-realtime": 0, "fraud-offline": 0, "credit-risk": 1, "aml-graph": 2, "personalization": 0, "ml-research": 0}
QUEUES = {"interactive": "notebooks", "batch": "batch", "distributed": "train-large"}
PRIORITY = {"interactive": 100, "batch": 50, "distributed": 70}
SCHEDULER = {"interactive": "kubernetes", "batch": "slurm", "distributed": "slurm"}
SLA_TEAMS = {"fraud-offline", "fraud-realtime"}
BUSINESS_HOURS_UTC = {"us-east": (13, 23), "eu-west": (7, 17)}

# field salts for hashing
F_PHASE, F_GAP, F_DUR, F_WAIT, F_TEAM, F_MODEL, F_EXIT, F_REASON, F_SPEED, F_SLA, F_FRAC, F_DRV, F_DRVR, F_DUMMY, F_STALL, \
    F_DISPATCH, F_CRON, F_UNINSTR, F_SETUP, F_COMP = range(1, 21)
F_EARLY = 200  # and 201: the field profile's early failures (apart from every other draw)
# a work-conserving scheduler starts a job that arrives into free capacity within seconds (mean)
DISPATCH_MEAN_S = 25.0


def demand(pool: str, region: np.ndarray, t_s: np.ndarray, spec=None) -> np.ndarray:
    """Relative demand at time t (seconds since ORIGIN, a Monday 00:00 UTC).

    ``spec`` (a ClusterSpec) supplies each region's business hours and the cron retrains that add batch demand.
    """
    dow = (t_s // DAY) % 7
    hour = (t_s % DAY) / 3600.0
    if pool == "interactive":
        hours = dict(spec.business_hours_utc) if spec is not None and spec.business_hours_utc else {}
        if hours:
            region = np.asarray(region)
            lo = np.zeros(np.shape(region))
            for r in np.unique(region):
                lo = np.where(region == r, hours.get(r, BUSINESS_HOURS_UTC.get(r, (13,))[0]), lo)
        else:
            lo = np.where(region == "eu-west", 7, 13)
        hi = lo + 10
        # business hours that cross midnight UTC (Asia) wrap: the local working day is one span
        busy = (dow < 5) & (((hour >= lo) & (hour < hi)) | (hour < hi - 24))
        return np.where(busy, 1.6, 0.55)
    if pool == "batch":
        wave = ((dow == 0) | (dow == 3)) & (hour >= 1) & (hour < 9)
        base = np.where(wave, 3.0, np.where(dow < 5, 1.0, 0.8))
        if spec is not None and spec.cron:
            base = base * cron_boost(spec, t_s)
        return base * evening_boost(spec, region, hour)
    wave = ((dow == 0) | (dow == 3)) & (hour >= 0) & (hour < 6)
    return np.where(wave, 1.5, 1.0) * evening_boost(spec, region, hour)


def evening(spec, region, hour: np.ndarray) -> np.ndarray | bool:
    """Whether ``hour`` (UTC, per row of ``region``) lies in the region's evening pile-up: every day from the
    region's ``evening_queue_utc`` hour for ``evening_hours`` (wrapping past midnight UTC). False without one."""
    if spec is None or not spec.evening_queue_utc:
        return False
    region = np.broadcast_to(np.asarray(region), np.shape(hour))
    out = np.zeros(np.shape(hour), dtype=bool)
    for r, first in spec.evening_queue_utc:
        out |= (region == r) & ((np.asarray(hour) - first) % 24 < spec.evening_hours)
    return out


def evening_boost(spec, region, hour: np.ndarray) -> np.ndarray | float:
    """Batch and distributed demand factor of the region's evening pile-up (1 outside it, or without one)."""
    if spec is None or not spec.evening_queue_utc:
        return 1.0
    return np.where(evening(spec, region, hour), spec.evening_demand, 1.0)


def exit_weights(spec, pool: str) -> tuple:
    """The pool's exit-state weights (EXIT_STATES order): the cluster's own where it sets them, else POOLS'."""
    return dict(spec.exit_weights).get(pool, POOLS[pool].exit_weights) if spec is not None else POOLS[pool].exit_weights


def early_failures(scen, pool: str, lane, epoch, k) -> np.ndarray:
    """Seconds after its start that a job failing in its first minutes dies (0 = it does not): a share
    ``early_fail_share`` of the pool's failed jobs (the same exit draw :func:`_team_exit_wait` makes)."""
    spec = scen.cluster.spec
    if spec.early_fail_share <= 0 or pool == "interactive":
        return np.zeros(np.shape(lane), dtype=np.int64)
    failed = H.choice(scen.seed, exit_weights(spec, pool), F_EXIT, lane, epoch, k) == EXIT_STATES.index("failed")
    early = failed & (H.uniform(scen.seed, F_EARLY, lane, epoch, k) < spec.early_fail_share)
    within = 10 + H.uniform(scen.seed, F_EARLY + 1, lane, epoch, k) * (spec.early_fail_within_s - 10)
    return np.where(early, within, 0).astype(np.int64)


def cron_boost(spec, t_s: np.ndarray) -> np.ndarray:
    """Batch demand multiplier of the cron retrains due at ``t_s`` (1 outside every cron window)."""
    out = np.ones(np.shape(t_s))
    for c in spec.cron:
        period = c.every_h * 3600
        off = (np.asarray(t_s) % period) - c.at_min * MIN
        out = np.where((off >= 0) & (off < c.for_min * MIN), out * c.boost, out)
    return out


def _cron_team(spec, t_s: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The cron team that submitted a batch job starting at ``t_s`` (-1 = ordinary work): inside a cron window
    the surplus ``(boost - 1) / boost`` of the jobs is the cron's."""
    out = np.full(np.shape(t_s), -1)
    names = [t.name for t in spec.teams] if spec.teams else TEAMS
    for c in spec.cron:
        period = c.every_h * 3600
        off = (np.asarray(t_s) % period) - c.at_min * MIN
        hit = (off >= 0) & (off < c.for_min * MIN) & (u < (c.boost - 1) / c.boost) & (out < 0)
        out = np.where(hit, names.index(c.team), out)
    return out


def retrain_wave(t_s: np.ndarray) -> np.ndarray:
    dow = (t_s // DAY) % 7
    hour = (t_s % DAY) / 3600.0
    return ((dow == 0) | (dow == 3)) & (hour >= 1) & (hour < 9)


def growth(scen, pool: str, region: np.ndarray, t_s: np.ndarray) -> np.ndarray:
    """Demand multiplier of the scenario's ``demand_growth`` incidents at ``t_s``: (1 + magnitude) per week since
    the incident's start, compounding, held at the level reached by its end (1 outside every scope)."""
    out = np.ones(np.shape(t_s))
    for inc in (scen.incidents if scen is not None else ()):
        if inc.kind != "demand_growth" or (inc.pool and inc.pool != pool):
            continue
        lo, hi = to_s(inc.start), to_s(inc.end)
        weeks = (np.clip(np.asarray(t_s, dtype=float), lo, hi) - lo) / (7 * DAY)
        hit = np.ones(np.shape(t_s), dtype=bool) if inc.region is None else (np.asarray(region) == inc.region)
        out = np.where(hit, out * (1.0 + inc.magnitude) ** weeks, out)
    return out


def _saturated_for(pool: str, region: np.ndarray, t_s: np.ndarray, horizon_s: float, step_s: int = 300, spec=None,
                   scen=None) -> np.ndarray:
    """Seconds (to ``step_s``, up to ``horizon_s``) the pool has been saturated before ``t_s``: a queue builds
    only while demand exceeds capacity, so no job has waited longer than that."""
    t_s = np.asarray(t_s, dtype=np.int64)
    since = np.zeros(len(t_s))
    still = np.ones(len(t_s), dtype=bool)
    for back in range(step_s, int(horizon_s) + step_s, step_s):
        still &= demand(pool, region, t_s - back, spec) * growth(scen, pool, region, t_s - back) > POOLS[pool].saturates_above
        since = np.where(still, back, since)
        if not still.any():
            break
    return since


def _lane_epochs(seed, lanes: np.ndarray, model: PoolModel, lo_s: int, hi_s: int):
    phase = (H.uniform(seed, F_PHASE, lanes) * model.epoch_s // MIN * MIN).astype(np.int64)
    e_lo = (lo_s - phase) // model.epoch_s
    e_hi = (hi_s - phase) // model.epoch_s
    n_ep = int((e_hi - e_lo).max()) + 1 if len(lanes) else 0
    return phase, e_lo, n_ep


def build_plan(scen: Scenario, lo_s: int, hi_s: int) -> pd.DataFrame:
    """Every job (one row per job) whose life may touch [lo_s, hi_s), incidents applied."""
    seed = scen.seed
    spec = scen.cluster.spec
    lanes_df = scen.cluster.lanes
    frames = []
    # incidents that change scheduling reach back to their start
    for inc in scen.incidents:
        if to_s(inc.start) < hi_s and to_s(inc.end) > lo_s:
            lo_s = min(lo_s, to_s(inc.start) - 3600)
    for ch in scen.changes:
        if ch.drain_s and to_s(ch.ts) < hi_s and to_s(ch.ts) + ch.drain_s > lo_s:
            lo_s = min(lo_s, to_s(ch.ts) - 3600)
    for pool, model in POOLS.items():
        sel = lanes_df[lanes_df["pool"] == pool]
        if sel.empty:
            continue
        lanes = sel["lane"].to_numpy()
        regions = sel["region"].to_numpy()
        lo = lo_s - model.wait_max_s
        hi = hi_s + model.wait_max_s
        phase, e_lo, n_ep = _lane_epochs(seed, lanes, model, lo - model.epoch_s, hi)
        mean_cycle = model.dur_median_s * np.exp(model.dur_sigma ** 2 / 2) + model.gap_mean_s / 3.0
        k = int(np.ceil(model.epoch_s / mean_cycle * 2.2)) + 8
        L, E, K = np.meshgrid(np.arange(len(lanes)), np.arange(n_ep), np.arange(k), indexing="ij")
        lane = lanes[L]
        epoch = e_lo[L] + E
        ep_start = epoch * model.epoch_s + phase[L]
        dur = np.clip(H.lognormal(seed, model.dur_median_s, model.dur_sigma, F_DUR, lane, epoch, K), model.dur_min_s, model.dur_max_s)
        # a job that fails in its first minutes frees its lane then, and the next job follows it as after any other
        early = early_failures(scen, pool, lane, epoch, K)
        dur = np.where(early > 0, early, dur)
        gap0 = H.exponential(seed, F_GAP, lane, epoch, K) * model.gap_mean_s
        gap_mult = _gap_multiplier(scen, pool, sel, L)
        # pass 1 at base demand, pass 2 with demand at the approximate start time
        approx = ep_start + np.cumsum(gap0 + dur, axis=2) - dur
        d = demand(pool, regions[L], approx, spec) * growth(scen, pool, regions[L], approx)
        # a scheduling incident stretches the gaps that begin after it starts (never one already under way)
        mult = gap_mult(approx - gap0 / d)
        gap = gap0 / d * mult
        # demand above capacity (retrain waves) keeps the pool's queue non-empty: when a lane
        # frees then, the next job was already waiting and starts at once -- a work-conserving scheduler
        # leaves no idle GPU behind a waiting job. A job held back by a scheduling incident keeps its
        # stretched gap.
        dispatch = H.exponential(seed, F_DISPATCH, lane, epoch, K) * DISPATCH_MEAN_S
        free_gap = gap
        for _ in range(3):  # when the lane frees moves as earlier gaps shrink: settle it
            freed = ep_start + np.cumsum(gap + dur, axis=2) - dur - gap
            queued = (demand(pool, regions[L], freed, spec) * growth(scen, pool, regions[L], freed)
                      > model.saturates_above) & (mult == 1.0)
            gap = np.where(queued, np.minimum(free_gap, dispatch), free_gap)
        # fragmentation: single-GPU jobs spread onto the lane's free GPUs hold its next job (spread.py)
        gap, held, spills = spread_holds(scen, pool, sel, L, ep_start, gap, dur, POOLS["batch"], DISPATCH_MEAN_S)
        cyc = np.cumsum(gap + dur, axis=2)
        end = ep_start + cyc
        start = end - dur
        ep_end = ep_start + model.epoch_s
        keep = start < ep_end
        end = np.minimum(end, ep_end)
        start = (start // MIN * MIN).astype(np.int64)   # jobs start on whole minutes + jitter below
        start = start + (H.uniform(seed, 99, lane, epoch, K) * 50).astype(np.int64)
        end = np.maximum(end.astype(np.int64), start + 60)
        keep &= (end > lo) & (start < hi)
        f = pd.DataFrame({
            "lane": lane[keep], "epoch": epoch[keep], "k": K[keep],
            "start_s": start[keep], "end_s": end[keep], "gap_s": gap[keep], "queued": queued[keep],
            "dispatch_s": dispatch[keep],
        })
        f["pool"] = pool
        frames.append(f)
        if held is not None:  # the gap a job waited through as planned, and how long the spread jobs held it
            f["gap_s"] = (gap - held)[keep]
            f["held_s"] = held[keep]
            frames.extend(x[(x["end_s"] > lo) & (x["start_s"] < hi)] for x in spills)
    plan = pd.concat(frames, ignore_index=True)
    plan = _attributes(scen, plan)
    plan = _apply_incidents(scen, plan)
    return plan[plan["submit_s"] < hi_s].reset_index(drop=True)


def _scheduling_hit(inc, pool: str, region: np.ndarray, gpus: np.ndarray) -> np.ndarray | None:
    """Lanes (by region / size) a scheduling incident slows down, or None if it spares the pool."""
    if inc.kind == "priority_change" and pool == "batch":
        return region == inc.region if inc.region else np.ones(len(region), bool)
    return None  # (fragmentation holds multi-GPU jobs by the single-GPU jobs spread onto their lanes: spread.py)


def incident_job_ids(scen: Scenario, n: int) -> tuple[str, ...]:
    """The jobs incident ``n`` targets (hung jobs, dummy jobs), from the plan over the incident.

    A pure function of the scenario: which windows were generated before does not matter.
    """
    inc = scen.incidents[n]
    plan = build_plan(scen, to_s(inc.start), max(to_s(inc.end), to_s(inc.start) + MIN))
    return tuple(sorted(plan.loc[plan["incident"] == n, "job_id"]))


def _gap_multiplier(scen: Scenario, pool: str, sel: pd.DataFrame, L: np.ndarray):
    """Scheduling incidents stretch placement gaps on the lanes they hit."""
    effects = []
    for inc in scen.incidents:
        hit = _scheduling_hit(inc, pool, sel["region"].to_numpy(), sel["gpus"].to_numpy())
        if hit is None:
            continue
        effects.append((hit[L], to_s(inc.start), to_s(inc.end), inc.magnitude))

    def mult(t):
        m = np.ones_like(t, dtype=float)
        for hit, s, e, mag in effects:
            m = np.where(hit & (t >= s) & (t < e), m * mag, m)
        return m
    return mult


def team_table(spec) -> tuple[list[str], dict, dict, dict, set, dict | None]:
    """(team names, pool -> weights, team -> models, team -> framework, SLA teams, team -> fair-share ratio).

    The fair-share ratio is a team's share of the batch + distributed jobs over its quota (None without fair
    share): a scheduler's fair-share factor ranks a team by its recent usage against its share.
    """
    if not spec.teams:
        return (TEAMS, TEAM_WEIGHTS, TEAM_MODELS, {t: FRAMEWORKS[TEAM_FRAMEWORK[t]] for t in TEAMS}, SLA_TEAMS, None)
    teams = spec.teams
    names = [t.name for t in teams]
    weights = {p: [t.weights[i] for t in teams] for i, p in enumerate(POOL_NAMES)}
    ratio = None
    if spec.fair_share:
        used = np.array([t.weights[1] + t.weights[2] for t in teams])
        quota = np.array([t.quota if t.quota is not None else u for t, u in zip(teams, used)])
        ratio = dict(zip(names, (used / used.sum()) / (quota / quota.sum())))
    return (names, weights, {t.name: list(t.models) for t in teams}, {t.name: t.framework for t in teams},
            {t.name for t in teams if t.sla}, ratio)


def _team_exit_wait(scen: Scenario, plan: pd.DataFrame, team_names, team_weights, fs_ratio) -> tuple[np.ndarray, ...]:
    """Per job of ``plan``, pool by pool: its team (index into ``team_names``), its exit state (index into
    EXIT_STATES) and its queue wait in seconds (behind a busy lane, fair share, held back by a scheduling
    incident; capped at the pool's longest wait)."""
    seed, spec = scen.seed, scen.cluster.spec
    lane, epoch, k = plan["lane"].to_numpy(), plan["epoch"].to_numpy(), plan["k"].to_numpy()
    pool = plan["pool"].to_numpy()
    team = np.zeros(len(plan), dtype=np.int64)
    exit_idx = np.zeros(len(plan), dtype=np.int64)
    wait = np.zeros(len(plan))
    for p, model in POOLS.items():
        m = pool == p
        team[m] = H.choice(seed, team_weights[p], F_TEAM, lane[m], epoch[m], k[m])
        if p == "batch" and spec.cron:
            cron = _cron_team(spec, plan["start_s"].to_numpy()[m], H.uniform(seed, F_CRON, lane[m], epoch[m], k[m]))
            team[m] = np.where(cron >= 0, cron, team[m])
        exit_idx[m] = H.choice(seed, exit_weights(spec, p), F_EXIT, lane[m], epoch[m], k[m])
        w = H.exponential(seed, F_WAIT, lane[m], epoch[m], k[m]) * model.wait_mean_s
        start_s = plan["start_s"].to_numpy()[m]
        if p != "interactive":
            w = w * np.where(retrain_wave(start_s), 4.0, 1.0)
            if spec.evening_queue_utc:  # behind the evening pile-up a job waits longer, as far as the queue goes back
                w = w * np.where(evening(spec, plan["region"].to_numpy()[m], (start_s % DAY) / 3600.0),
                                 spec.evening_wait_factor, 1.0)
        # queued behind a busy lane: the wait lies before the lane freed (plus the dispatch gap); arrived into
        # free capacity: it waits for dispatch only, inside its lane's idle gap
        gap_s = plan["gap_s"].to_numpy()[m]
        queued = plan["queued"].to_numpy()[m]
        # when a pool saturates, its idle lanes fill first (within about one idle gap at base demand): only
        # then do arriving jobs queue behind busy lanes
        busy = np.zeros(len(w))
        busy[queued] = np.minimum(w[queued], np.maximum(_saturated_for(
            p, plan["region"].to_numpy()[m][queued], (start_s - gap_s)[queued], model.wait_max_s, spec=spec, scen=scen) - model.gap_mean_s, 0.0))
        if fs_ratio is not None and p != "interactive":
            # fair share: behind a busy pool, a team over its quota waits longer and one under it less
            # (a work-conserving scheduler still starts an arriving job into free capacity at once)
            ratio = np.array([fs_ratio[team_names[i]] for i in team[m]])
            busy = busy * np.clip(ratio, 0.5, 2.0)
        w = np.where(queued, gap_s + busy, np.minimum(plan["dispatch_s"].to_numpy()[m], gap_s))
        if "held_s" in plan:  # submitted as planned, then held while single-GPU jobs spread onto its lane (spread.py)
            held = plan["held_s"].fillna(0.0).to_numpy()[m]
            w = np.where(held > 0, w + held, w)
        # scheduling incidents: a job the scheduler holds back pends through the whole idle gap before it
        # (submitted when its lane freed, or earlier), so GPUs sit idle while jobs wait
        for inc in scen.incidents:
            hit = _scheduling_hit(inc, p, plan["region"].to_numpy()[m], plan["gpus"].to_numpy()[m])
            if hit is not None:
                during = hit & (start_s >= to_s(inc.start)) & (start_s < to_s(inc.end))
                # waiting since its lane freed, but not since before the change that holds it back
                held = start_s - np.maximum(start_s - gap_s, to_s(inc.start))
                longer = np.maximum(w * inc.magnitude, np.maximum(held, w))
                # the extra wait lies after the change: before it, a job waits as it always did
                longer = np.minimum(longer, (start_s - to_s(inc.start)) + w)
                w = np.where(during, longer, w)
        wait[m] = np.minimum(w, model.wait_max_s)  # capped: a window's plan reaches back wait_max_s
    return team, exit_idx, wait


def _attributes(scen: Scenario, plan: pd.DataFrame) -> pd.DataFrame:
    seed = scen.seed
    spec = scen.cluster.spec
    team_names, team_weights, team_models, team_fw, sla_teams, fs_ratio = team_table(spec)
    lanes = scen.cluster.lanes.set_index("lane")
    lane, epoch, k = plan["lane"].to_numpy(), plan["epoch"].to_numpy(), plan["k"].to_numpy()
    pool = plan["pool"].to_numpy()
    plan["region"] = lanes["region"].to_numpy()[lane]
    plan["type_idx"] = lanes["type_idx"].to_numpy()[lane]
    plan["gpus"] = lanes["gpus"].to_numpy()[lane]
    plan["multi_node"] = lanes["multi_node"].to_numpy()[lane]
    team, exit_idx, wait = _team_exit_wait(scen, plan, team_names, team_weights, fs_ratio)
    plan["team"] = np.array(team_names, dtype=object)[team]
    mu = H.uniform(seed, F_MODEL, lane, epoch, k)
    plan["model_type"] = [team_models[t][int(u * len(team_models[t]))] for t, u in zip(plan["team"], mu)]
    plan["exit_state"] = np.array(EXIT_STATES, dtype=object)[exit_idx]
    reason_idx = H.choice(seed, FAILURE_REASON_WEIGHTS, F_REASON, lane, epoch, k)
    reasons = np.array(FAILURE_REASONS, dtype=object)[reason_idx]
    plan["reason"] = np.where(plan["exit_state"] == "failed", reasons,
                              np.where(plan["exit_state"] == "timeout", "time limit reached",
                                       np.where(plan["exit_state"] == "node_fail", "node failure", None)))
    plan["xid_on_end"] = np.where((plan["exit_state"] == "failed") & (reason_idx == 3), 13, 0)
    plan["submit_s"] = plan["start_s"] - wait.astype(np.int64)
    plan["job_id"] = [f"j{l:05d}-{e % 100000:05d}-{kk:03d}" for l, e, kk in zip(lane, epoch, k)]
    plan["framework_version"] = [TREE_MODELS.get(mt) or team_fw[t] for t, mt in zip(plan["team"], plan["model_type"])]
    plan["speed_jitter"] = 1.0 + 0.04 * H.normal(seed, F_SPEED, lane, epoch, k).clip(-2.5, 2.5)
    plan["slow_framework"] = 0.0
    plan["dummy"] = False
    plan["stall_from_s"] = np.int64(-1)
    plan["incident"] = np.int64(-1)  # index of the incident whose target the job is (hung / dummy jobs)
    # a job that runs again after a requeue: its later runs (attempt > 0) are further rows with its job_id; a run
    # that was requeued ends in a ``requeued`` event; a run the driver killed raises its Xid on all its GPUs
    plan["attempt"] = np.int64(0)
    plan["requeued"] = False
    plan["xid_all"] = False
    plan["tree"] = plan["model_type"].isin(list(TREE_MODELS)).to_numpy()
    reports = np.array([POOLS[p].reports_metrics for p in pool], dtype=bool) & ~plan["tree"].to_numpy()
    if spec.uninstrumented:
        share = dict(spec.uninstrumented)
        cut = np.array([share.get(p, 0.0) for p in pool])
        reports &= H.uniform(seed, F_UNINSTR, lane, epoch, k) >= cut
    plan["reports_metrics"] = reports
    dur = plan["end_s"] - plan["start_s"]
    if spec.setup_median_s > 0:
        # set-up (image pull, data staging, compilation) before the first step: lognormal, at most half the job
        setup = np.clip(H.lognormal(seed, spec.setup_median_s, 0.7, F_SETUP, lane, epoch, k), 30, 1800)
        plan["setup_s"] = np.where(pool != "interactive", np.minimum(setup, dur.to_numpy() / 2), 0).astype(np.int64)
    else:
        plan["setup_s"] = np.int64(0)
    plan["components"] = (H.uniform(seed, F_COMP, lane, epoch, k) < spec.component_metrics_share
                          if spec.component_metrics_share < 1.0 else True)
    queues = {**QUEUES, **dict(spec.queue_names)}
    if spec.queue_per_team:
        plan["queue"] = [f"{r}/{queues[p]}" if p == "interactive" else f"{r}/{t}"
                         for r, p, t in zip(plan["region"], pool, plan["team"])]
    else:
        plan["queue"] = [f"{r}/{queues[p]}" for r, p in zip(plan["region"], pool)]
    # fair share lowers the priority of a team over its quota (and raises it under it)
    plan["priority_adj"] = (np.round(-10 * (np.array([fs_ratio[t] for t in plan["team"]]) - 1)).clip(-20, 20).astype(np.int64)
                            if fs_ratio is not None else np.int64(0))
    sla = np.isin(plan["team"], list(sla_teams)) & (pool != "interactive") & (H.uniform(seed, F_SLA, lane, epoch, k) < 0.5)
    plan["sla_deadline_s"] = np.where(sla, plan["submit_s"] + (dur * 1.6).astype(np.int64) + 1800, -1)
    return plan


def _lanes_of_gpus(scen: Scenario, gpu_uuids) -> np.ndarray:
    g = scen.cluster.gpus
    return g.loc[g["gpu_uuid"].isin(gpu_uuids), "lane"].unique()


def _running_at(plan: pd.DataFrame, lanes: np.ndarray, t: int) -> pd.Series:
    return plan["lane"].isin(lanes) & (plan["start_s"] <= t) & (plan["end_s"] > t)


def _dummy_workload(scen: Scenario, plan: pd.DataFrame, n: int, inc, s: int, e: int, starts_in: pd.Series,
                    extra: list) -> np.ndarray:
    """Incident ``n``, a dummy workload: on the batch lanes it targets, a job that looks busy and does nothing runs
    from when the lane frees until the incident ends (its rows appended to ``extra``); returns the jobs it displaces
    (those that would have started on those lanes during it)."""
    seed = scen.seed
    lanes_df = scen.cluster.lanes
    pool_lanes = lanes_df[(lanes_df["pool"] == "batch")]
    if inc.node_ids:
        pool_lanes = pool_lanes[[bool(set(ns) & set(inc.node_ids)) for ns in pool_lanes["node_ids"]]]
    u = H.uniform(seed, F_DUMMY, n, pool_lanes["lane"].to_numpy())
    target = pool_lanes["lane"].to_numpy()[u < inc.magnitude]
    on = plan["lane"].isin(target)
    starting_there = (on & starts_in).to_numpy()
    running = on & (plan["start_s"] < s) & (plan["end_s"] > s)
    busy_until = plan[running].groupby("lane")["end_s"].max()
    team = inc.team or ("ml-research" if not scen.cluster.spec.teams else scen.cluster.spec.teams[-1].name)
    for lane in target:
        st = int(max(s, busy_until.get(lane, s))) + 30
        if st >= e:
            continue
        row = plan[plan["lane"] == lane].iloc[0].copy() if (plan["lane"] == lane).any() else None
        if row is None:
            continue
        row["k"], row["epoch"] = 900 + n, int(s // DAY)
        row["job_id"] = f"d{lane:05d}-{n:02d}-{s // 300 % 100000:05d}"
        row["start_s"], row["end_s"], row["submit_s"] = st, e, st - 20
        row["team"], row["model_type"], row["dummy"] = team, "fraud-transformer", True
        row["exit_state"], row["reason"], row["xid_on_end"] = "cancelled", "cancelled by user", 0
        row["reports_metrics"], row["sla_deadline_s"], row["slow_framework"] = False, -1, 0.0
        row["framework_version"] = FRAMEWORKS[0]
        row["setup_s"], row["tree"], row["components"] = 0, False, True
        if scen.cluster.spec.queue_per_team:
            row["queue"] = f"{row['region']}/{team}"
        row["stall_from_s"], row["incident"] = -1, n
        extra.append(row)
    return starting_there


def _drain_for_changes(scen: Scenario, plan: pd.DataFrame, drop: np.ndarray) -> list[pd.DataFrame]:
    """A rolling driver upgrade drains each batch's nodes while the driver installs: jobs starting then wait
    for other nodes (marked in ``drop``), a job running there is cancelled (and requeued: the returned reruns),
    as a maintenance drain does."""
    reruns = []
    for ch in scen.changes:
        if not ch.drain_s:
            continue
        s, e = to_s(ch.ts), to_s(ch.ts) + ch.drain_s
        lanes = _lanes_on(scen, ch.node_ids)
        on = plan["lane"].isin(lanes)
        drop |= (on & (plan["start_s"] >= s) & (plan["start_s"] < e)).to_numpy()
        cut = _running_at(plan, lanes, s) & ~pd.Series(drop)
        if ch.requeue:  # the Slurm jobs there run again once the drain ends
            reruns.append(requeue_drained(scen, plan, np.flatnonzero(cut.to_numpy()), s, e, ch.kind))
            continue
        plan.loc[cut, ["end_s", "exit_state", "reason"]] = [s, "cancelled", f"node drained for {ch.kind.replace('_', ' ')}"]
    return reruns


def _apply_incidents(scen: Scenario, plan: pd.DataFrame) -> pd.DataFrame:
    seed = scen.seed
    drop = np.zeros(len(plan), dtype=bool)
    extra = []
    for n, inc in enumerate(scen.incidents):
        s, e = to_s(inc.start), to_s(inc.end)
        starts_in = (plan["start_s"] >= s) & (plan["start_s"] < e)
        if inc.kind == "maintenance":
            lanes = _lanes_on(scen, inc.node_ids)
            on = plan["lane"].isin(lanes)
            drop |= (on & starts_in).to_numpy()
            cut = _running_at(plan, lanes, s) & ~pd.Series(drop)
            plan.loc[cut, ["end_s", "exit_state", "reason"]] = [s, "cancelled", "node drained for maintenance"]
        elif inc.kind in ("gpu_ecc_fault", "gpu_fell_off_bus"):
            bad_lanes = _lanes_of_gpus(scen, inc.gpu_uuids)
            hit = _running_at(plan, bad_lanes, s)
            xid = 48 if inc.kind == "gpu_ecc_fault" else 79
            text = "Xid 48: double-bit ECC error" if xid == 48 else "Xid 79: GPU has fallen off the bus"
            # the Xid is raised on the faulted GPU itself (telemetry.py), not on the lane's first GPU
            plan.loc[hit, ["end_s", "exit_state", "reason", "xid_on_end"]] = [s + 60, "failed", text, 0]
            blocked = _lanes_on(scen, inc.node_ids) if inc.kind == "gpu_ecc_fault" else bad_lanes
            drop |= (plan["lane"].isin(blocked) & starts_in).to_numpy()
        elif inc.kind == "driver_regression" and inc.rollout is None:  # a rollout: after the drains, below
            lanes = _lanes_on(scen, inc.node_ids)
            on = plan["lane"].isin(lanes) & (plan["start_s"] < e) & (plan["end_s"] > s) & ~pd.Series(drop)
            idx = np.flatnonzero(on.to_numpy())
            if len(idx):
                lane, epoch, k = (plan[c].to_numpy()[idx] for c in ("lane", "epoch", "k"))
                fails = H.uniform(seed, F_DRV, n, lane, epoch, k) < inc.magnitude
                t_fail = np.maximum(plan["start_s"].to_numpy()[idx], s) + (60 + H.exponential(seed, F_DRV + 50, n, lane, epoch, k) * 240).astype(np.int64)
                fails &= t_fail < plan["end_s"].to_numpy()[idx]
                which = H.choice(seed, [0.3, 0.3, 0.2, 0.2], F_DRVR, n, lane, epoch, k)
                rows = idx[fails]
                plan.loc[plan.index[rows], "end_s"] = t_fail[fails]
                plan.loc[plan.index[rows], "exit_state"] = "failed"
                plan.loc[plan.index[rows], "reason"] = np.array(DRIVER_FAILURES, dtype=object)[which[fails]]
                plan.loc[plan.index[rows], "xid_on_end"] = np.array(DRIVER_XIDS)[which[fails]]
        elif inc.kind == "framework_regression":
            cand = starts_in & (plan["pool"] != "interactive")
            if inc.team:
                cand &= plan["team"] == inc.team
            u = H.uniform(seed, F_FRAC, n, plan["lane"].to_numpy(), plan["epoch"].to_numpy(), plan["k"].to_numpy())
            cand &= u < inc.fraction
            plan.loc[cand, "framework_version"] = inc.to_version
            plan.loc[cand, "slow_framework"] = inc.magnitude
        elif inc.kind == "dummy_workload":
            drop |= _dummy_workload(scen, plan, n, inc, s, e, starts_in, extra)
        elif inc.kind == "training_stall":
            lanes = _lanes_on(scen, inc.node_ids)
            lanes = scen.cluster.lanes.loc[scen.cluster.lanes["lane"].isin(lanes) & (scen.cluster.lanes["pool"] == "distributed"), "lane"].to_numpy()
            hit = _running_at(plan, lanes, s) & ~pd.Series(drop)
            idx = np.flatnonzero(hit.to_numpy())
            if len(idx) and inc.fraction < 1.0:
                u = H.uniform(seed, F_STALL, n, plan["lane"].to_numpy()[idx])
                idx = idx[u < inc.fraction]
            rows = plan.index[idx]
            plan.loc[rows, "stall_from_s"] = s
            plan.loc[rows, "incident"] = n
            plan.loc[rows, "end_s"] = e
            plan.loc[rows, ["exit_state", "reason"]] = ["failed", "NCCL watchdog timeout: collective operation hung"]
            stalled_lanes = plan.loc[rows, "lane"].unique()
            drop |= (plan["lane"].isin(stalled_lanes) & starts_in).to_numpy()
    reruns = _drain_for_changes(scen, plan, drop)
    plan = plan[~drop]
    if extra:
        plan = pd.concat([plan, pd.DataFrame(extra)], ignore_index=True)
    if reruns:
        plan = pd.concat([plan, *reruns], ignore_index=True)
    for n, inc in enumerate(scen.incidents):
        if inc.kind == "driver_regression" and inc.rollout is not None:
            plan = apply_rollout(scen, plan, n, inc)
    # a job cut short by an earlier incident may now end before it starts its successor: fine;
    # a job whose start was pushed past its end is removed
    plan = plan[plan["end_s"] > plan["start_s"]]
    return plan.sort_values(["lane", "start_s"]).reset_index(drop=True)

"""Training convergence from the trainer's own metrics (issue #17, application layer): diverging loss and failed
checkpoints, judged per job against the job's own earlier minutes. Pure pandas.

======================  ========  ==================================================================================
detector                family    tickets on (never a page: one witness, the trainer's own log)
======================  ========  ==================================================================================
training_divergence     software  the median loss of a job's last DIVERGE_MINUTES stands DIVERGE_Z robust standard
                                  errors above the median of the DIVERGE_MINUTES before them, the noise measured on
                                  the job's own earlier minutes (REFERENCE_MINUTES of history at least)
training_divergence     software  (flat) the loss of a job that completed steps in each of its last DIVERGE_MINUTES is
                                  the same value in all of them, while its earlier minutes scattered: a minibatch
                                  loss moves with every new batch, so a frozen one means no new data reaches the loss
                                  (a learning rate of 0, frozen weights and a cached batch, a logger stuck on a value)
checkpoint_failure      software  a job spent time checkpointing in CHECKPOINT_ATTEMPTS separate minutes while its
                                  newest durable checkpoint step (``last_checkpoint_step``) never advanced
======================  ========  ==================================================================================

Both rest on one witness, the trainer's log, so they ticket; a page would need a second, independent one (a
gradient-norm series or the storage's write errors, which no contract column carries yet). A job that reports no
loss or no durable checkpoint step is not judged (absence is missing data).

Why these bars hold on any job: a training loss decreases in expectation (that is what the optimiser does), so the
later of two adjacent windows sits at or below the earlier one, and only noise can lift it. The noise is the job's
own: the minute-to-minute scatter of its loss (the median absolute first difference over the reference, scaled to a
standard deviation: MAD x 1.4826 / sqrt(2)), so a noisy small-batch job and a smooth large-batch job are held to
their own scatter, never a constant tuned to a simulator. The median of n points has a standard error of ~1.2533
sigma / sqrt(n); the difference of two such medians sqrt(2) times that. DIVERGE_Z = 6 standard errors is a one-sided
p ~ 1e-9 per look under Gaussian noise: with 288 looks a day over 1,000 jobs, ~3e-4 false tickets a day.
"""

import numpy as np
import pandas as pd

from gpu_health.diagnosis.finding import Finding

MINUTE = pd.Timedelta(minutes=1)
# two adjacent 10-minute windows: ten points make the median robust to a single spike (an evaluation batch logged
# as the training loss), and the divergence shows inside the 15-minute detection budget
DIVERGE_MINUTES = 10
# the job's own scatter needs history: 20 minutes of reported loss before the two windows (19 first differences)
REFERENCE_MINUTES = 20
DIVERGE_Z = 6.0
MEDIAN_SE = 1.2533  # the standard error of a median of n Gaussian points is 1.2533 sigma / sqrt(n)
MAD_TO_SIGMA = 1.4826  # a Gaussian's standard deviation is 1.4826 x its median absolute deviation
# and the rise must matter: 5 % of the loss level, so a job whose loss is flat to four digits (a scatter near 0)
# is not ticketed on a rounding step
DIVERGE_MIN_RISE = 0.05
# the look-back the alerts step reads: the two windows and the reference, and two checkpoint intervals of the
# slowest checkpointing pool (30 minutes for distributed jobs; 60 minutes is common on real long runs)
CONVERGENCE_LOOKBACK = pd.Timedelta(hours=2)
# two attempts without the durable step advancing: one may still be uploading (asynchronous checkpointing
# publishes the step minutes later); the second attempt finds the first never landed
CHECKPOINT_ATTEMPTS = 2


def _loss_frame(history: pd.DataFrame, ctx) -> pd.DataFrame:
    h = history[(history["ts"] < ctx.end) & history["loss"].notna()]
    return h.assign(job_id=h["job_id"].astype(object)).sort_values(["job_id", "ts"])


def divergence(history: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """Per job with a loss reported in ``[start, end)``: the two windows' medians, the job's noise (sigma), the z of
    the rise and whether it diverges or is frozen flat (columns job_id, before, recent, sigma, z, rise, steps,
    diverging, frozen)."""
    h = history[(history["ts"] < end) & history["loss"].notna()]
    h = h.assign(job_id=h["job_id"].astype(object), loss=h["loss"].astype(float)).sort_values(["job_id", "ts"])
    live = set(h.loc[h["ts"] >= start, "job_id"])
    rows = []
    for job, g in h[h["job_id"].isin(live)].groupby("job_id", sort=False):
        loss = g["loss"].to_numpy()
        if len(loss) < 2 * DIVERGE_MINUTES + REFERENCE_MINUTES:
            continue
        recent, before = loss[-DIVERGE_MINUTES:], loss[-2 * DIVERGE_MINUTES:-DIVERGE_MINUTES]
        ref = loss[:-2 * DIVERGE_MINUTES]
        sigma = MAD_TO_SIGMA * np.median(np.abs(np.diff(ref))) / np.sqrt(2)
        se = np.sqrt(2) * MEDIAN_SE * sigma / np.sqrt(DIVERGE_MINUTES)
        rise = float(np.median(recent) - np.median(before))
        z = rise / se if se > 0 else (np.inf if rise > 0 else 0.0)
        level = abs(float(np.median(before))) or 1.0
        stepping = bool((g["steps"].to_numpy()[-DIVERGE_MINUTES:] > 0).all()) if "steps" in g else False
        rows.append({"job_id": job, "before": float(np.median(before)), "recent": float(np.median(recent)),
                     "sigma": float(sigma), "z": float(z), "rise": rise,
                     "steps": int(g["steps"].to_numpy()[-DIVERGE_MINUTES:].sum()) if "steps" in g else 0,
                     "diverging": bool(z >= DIVERGE_Z and rise >= DIVERGE_MIN_RISE * level),
                     "frozen": bool(stepping and sigma > 0 and np.ptp(recent) == 0)})
    return pd.DataFrame(rows, columns=["job_id", "before", "recent", "sigma", "z", "rise", "steps", "diverging", "frozen"])


def checkpoint_failures(history: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """Per job: its checkpointing minutes since its durable step last advanced, and the durable step (columns
    job_id, attempts, durable_step, since). A job whose durable step is never reported is not judged."""
    h = history[history["ts"] < end]
    h = h.assign(job_id=h["job_id"].astype(object)).sort_values(["job_id", "ts"])
    live = set(h.loc[(h["ts"] >= start) & h["last_checkpoint_step"].notna(), "job_id"])
    rows = []
    for job, g in h[h["job_id"].isin(live)].groupby("job_id", sort=False):
        durable = g["last_checkpoint_step"].astype("Float64").ffill()
        # the durable step advances when it rises, or first appears (the job's first checkpoint landed)
        prev = durable.shift(1)
        advanced = (durable.notna() & (prev.isna() | (durable > prev))).fillna(False).to_numpy(bool)
        advanced[0] = False  # the first row's value was durable before the look-back
        after = g[advanced]["ts"].max() if advanced.any() else g["ts"].min() - MINUTE
        attempts = g[(g["ts"] > after) & (g["checkpoint_time_s"].fillna(0) > 0)]
        # separate attempts: checkpointing minutes not adjacent to each other
        n = int((attempts["ts"].diff() != MINUTE).sum()) if len(attempts) else 0
        rows.append({"job_id": job, "attempts": n, "durable_step": durable.iloc[-1], "since": after})
    return pd.DataFrame(rows, columns=["job_id", "attempts", "durable_step", "since"])


def _region_of(ctx, jobs) -> dict:
    """job -> (region, nodes) from the GPUs the exporter maps to it in the partition."""
    g = ctx.gpu
    if g is None or not len(g) or not jobs:
        return {}
    g = g[g["job_id"].isin(jobs)]
    return {job: (str(grp["region"].iloc[0]), sorted(set(grp["node_id"].astype(str))))
            for job, grp in g.groupby(g["job_id"].astype(object))}


def detect_convergence(ctx) -> list[Finding]:
    """Tickets for diverging jobs and failed checkpoints (see the module docstring); nothing without history."""
    history = getattr(ctx, "loss_history", None)
    if history is None or history.empty:
        return []
    out = []
    div = divergence(history, ctx.start, ctx.end)
    bad = div[div["diverging"] | div["frozen"]] if len(div) else div
    ck = checkpoint_failures(history, ctx.start, ctx.end)
    failed = ck[ck["attempts"] >= CHECKPOINT_ATTEMPTS] if len(ck) else ck
    where = _region_of(ctx, set(bad["job_id"]) | set(failed["job_id"]))
    for det, frame in (("training_divergence", bad), ("checkpoint_failure", failed)):
        by_region: dict = {}
        for r in frame.to_dict("records"):
            region, nodes = where.get(r["job_id"], ("*", []))
            by_region.setdefault(region, []).append((r, nodes))
        for region, items in by_region.items():
            jobs = sorted(r["job_id"] for r, _ in items)
            nodes = sorted({n for _, ns in items for n in ns})
            if det == "training_divergence":
                rising = [r for r, _ in items if r["diverging"]]
                frozen = sorted(r["job_id"] for r, _ in items if r["frozen"] and not r["diverging"])
                parts = []
                if rising:
                    worst = max(rising, key=lambda r: r["z"])
                    parts.append(f"median loss of the last {DIVERGE_MINUTES} minutes ({worst['steps']} steps) "
                                 f"{worst['recent']:.4g} against {worst['before']:.4g} in the {DIVERGE_MINUTES} before: "
                                 f"{worst['z']:.0f} standard errors of the job's own scatter (bar {DIVERGE_Z:g}) on "
                                 f"{', '.join(sorted(r['job_id'] for r in rising)[:5])}; check the learning-rate "
                                 f"schedule and the latest data shard, resume from the last checkpoint before the rise")
                if frozen:
                    parts.append(f"loss frozen at one value through {DIVERGE_MINUTES} minutes of steps on "
                                 f"{', '.join(frozen[:5])}: no new data reaches the loss (learning rate 0, frozen "
                                 f"weights, a cached batch or a stuck logger)")
                summary = f"{len(jobs)} training job(s) in {region} not converging: loss " + \
                    ("rising" if rising else "frozen at one value")
                evidence = "; ".join(parts)
                worst = max(items, key=lambda x: x[0]["z"])[0]
                value = float(worst["z"])
            else:
                summary = f"{len(jobs)} training job(s) in {region} fail to write checkpoints"
                evidence = (f"{max(r['attempts'] for r, _ in items)} checkpoint attempts without the durable "
                            f"checkpoint step advancing (jobs {', '.join(jobs[:5])}): a crash now loses the work "
                            f"since; check the checkpoint store's quota, credentials and write errors")
                value = float(max(r["attempts"] for r, _ in items))
            out.append(Finding(det, "software", "ticket", region, f"{det}|{region}", nodes=nodes,
                               summary=summary, evidence=evidence + ". Runbook: docs/runbooks.md#software",
                               value=value))
    return out

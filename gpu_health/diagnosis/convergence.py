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


def _sorted_jobs(h: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """``h`` sorted by job and time, and each job's first and one-past-last row."""
    h = h.assign(job_id=h["job_id"].astype(object)).sort_values(["job_id", "ts"]).reset_index(drop=True)
    job = h["job_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, job[1:] != job[:-1]]) if len(h) else np.array([], dtype=np.int64)
    return h, starts, np.r_[starts[1:], len(h)].astype(np.int64)


def divergence(history: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """Per job with a loss reported in ``[start, end)``: the two windows' medians, the job's noise (sigma), the z of
    the rise and whether it diverges or is frozen flat (columns job_id, before, recent, sigma, z, rise, steps,
    diverging, frozen)."""
    cols = ["job_id", "before", "recent", "sigma", "z", "rise", "steps", "diverging", "frozen"]
    h = history[(history["ts"] < end) & history["loss"].notna()]
    h, starts, stops = _sorted_jobs(h.assign(loss=h["loss"].astype(float)))
    if not len(h):
        return pd.DataFrame(columns=cols)
    loss_all = h["loss"].to_numpy(dtype=float)
    steps_all = h["steps"].to_numpy() if "steps" in h else None
    job = h["job_id"].to_numpy()
    start64 = np.datetime64(pd.Timestamp(start).tz_convert("UTC").tz_localize(None), "ns")
    ts64 = h["ts"].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy("datetime64[ns]")
    rows = []
    for i0, i1 in zip(starts, stops):
        if i1 - i0 < 2 * DIVERGE_MINUTES + REFERENCE_MINUTES or ts64[i1 - 1] < start64:
            continue  # too short, or no loss in the window (rows are sorted by time: the last is the newest)
        loss = loss_all[i0:i1]
        recent, before = loss[-DIVERGE_MINUTES:], loss[-2 * DIVERGE_MINUTES:-DIVERGE_MINUTES]
        ref = loss[:-2 * DIVERGE_MINUTES]
        sigma = MAD_TO_SIGMA * np.median(np.abs(np.diff(ref))) / np.sqrt(2)
        se = np.sqrt(2) * MEDIAN_SE * sigma / np.sqrt(DIVERGE_MINUTES)
        rise = float(np.median(recent) - np.median(before))
        z = rise / se if se > 0 else (np.inf if rise > 0 else 0.0)
        level = abs(float(np.median(before))) or 1.0
        last_steps = steps_all[i1 - DIVERGE_MINUTES:i1] if steps_all is not None else None
        stepping = bool((last_steps > 0).all()) if last_steps is not None else False
        rows.append({"job_id": job[i0], "before": float(np.median(before)), "recent": float(np.median(recent)),
                     "sigma": float(sigma), "z": float(z), "rise": rise,
                     "steps": int(last_steps.sum()) if last_steps is not None else 0,
                     "diverging": bool(z >= DIVERGE_Z and rise >= DIVERGE_MIN_RISE * level),
                     "frozen": bool(stepping and sigma > 0 and np.ptp(recent) == 0)})
    return pd.DataFrame(rows, columns=cols)


def checkpoint_failures(history: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """Per job: its checkpointing minutes since its durable step last advanced, and the durable step (columns
    job_id, attempts, durable_step, since). A job whose durable step is never reported is not judged.

    A job's durable step advances where it rises or first appears (its first checkpoint landed), never on the
    job's first row of the look-back (that value was durable before it); its attempts are its checkpointing
    minutes after the last advance (after its first row when none), counted as runs of adjacent minutes."""
    cols = ["job_id", "attempts", "durable_step", "since"]
    h = history[history["ts"] < end]
    live = set(h.loc[(h["ts"] >= start) & h["last_checkpoint_step"].notna(), "job_id"].astype(object))
    h, starts, stops = _sorted_jobs(h[h["job_id"].astype(object).isin(live)])
    if not len(h):
        return pd.DataFrame(columns=cols)
    key = np.repeat(np.arange(len(starts)), stops - starts)
    durable = h["last_checkpoint_step"].astype("Float64").groupby(key).ffill()
    prev = durable.groupby(key).shift(1)
    advanced = (durable.notna() & (prev.isna() | (durable > prev))).fillna(False).to_numpy(bool)
    advanced[starts] = False
    ts = h["ts"]
    last_adv = ts.where(advanced).groupby(key).max()
    after = last_adv.fillna(ts.groupby(key).min() - MINUTE)
    after_row = after.to_numpy()[key]
    attempt = (ts.to_numpy() > after_row) & (h["checkpoint_time_s"].fillna(0).to_numpy(dtype=float) > 0)
    at_key, at_ts = key[attempt], ts[attempt]
    separate = at_ts.groupby(at_key).diff() != MINUTE  # (a job's first attempt: NaT, counted)
    n = separate.groupby(at_key).sum().reindex(range(len(starts)), fill_value=0)
    return pd.DataFrame({"job_id": h["job_id"].to_numpy()[starts], "attempts": n.to_numpy(dtype=int),
                         "durable_step": durable.to_numpy()[stops - 1], "since": after.reset_index(drop=True)}, columns=cols)


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

"""Training convergence (the application layer): diverging loss against the job's own scatter and failed
checkpoints, on small frames; and the simulator's diverging_run leaves a loss the rule catches."""

import dataclasses

import numpy as np
import pytest
import pandas as pd

from gpu_health.diagnosis.convergence import (
    DIVERGE_MINUTES,
    GRAD_NONFINITE_MINUTES,
    REFERENCE_MINUTES,
    checkpoint_failures,
    detect_convergence,
    divergence,
    gradient_norm,
)
from gpu_health.diagnosis.context import PartitionContext
from gpu_health.sim.platform import fallback_jobs
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window

END = pd.Timestamp("2026-11-03T12:00:00Z")
START = END - pd.Timedelta(minutes=5)
MIN = pd.Timedelta(minutes=1)


def loss_history(loss, job="j1", checkpoint_minutes=(), durable=None, grad=None) -> pd.DataFrame:
    n = len(loss)
    ts = [END - (n - k) * MIN for k in range(n)]
    out = pd.DataFrame({"ts": ts, "job_id": job, "steps": 100, "loss": loss,
                        "checkpoint_time_s": [8.0 if k in checkpoint_minutes else 0.0 for k in range(n)],
                        "last_checkpoint_step": pd.array(durable if durable is not None else [pd.NA] * n, dtype="Int64")})
    return out if grad is None else out.assign(grad_norm=grad)


def healthy_grad(n=90, seed=1, level=1.0, scatter=0.15, spikes=0.01):
    """A gradient norm as trainers log it: the job's own level, decaying slowly with the steps, multiplicative
    minute-to-minute scatter and now and then a spike (a hard batch)."""
    rng = np.random.default_rng(1000 + seed)
    c = np.arange(n) * 100.0
    spike = np.where(rng.random(n) < spikes, rng.uniform(1.5, 4.0, n), 1.0)
    return level * (1 + c / 400.0) ** -0.25 * np.exp(scatter * rng.standard_normal(n)) * spike


def healthy(n=90, seed=1, scatter=0.01):
    rng = np.random.default_rng(seed)
    c = np.arange(n) * 100.0
    return 2.2 * (1 + c / 400.0) ** -0.35 + scatter * rng.standard_normal(n)


def context(history, gpu=None):
    empty = pd.DataFrame()
    gpu = gpu if gpu is not None else pd.DataFrame({"job_id": ["j1"], "region": ["us-east"], "node_id": ["n1"]})
    return PartitionContext(start=START, end=END, gpu=gpu, node=empty, network=empty, runtime=empty, sched=empty,
                            changes=empty, maintenance=empty, leaves=empty, baselines=empty, meta=empty,
                            inventory=empty, region_history=empty, loss_history=history)


def test_a_decreasing_noisy_loss_never_diverges():
    # 200 jobs with their own scatter (0.1 % to 10 % of the level): none ticketed
    for seed in range(200):
        scatter = 10 ** np.random.default_rng(seed).uniform(-3, -1)
        d = divergence(loss_history(healthy(seed=seed, scatter=scatter)), START, END)
        assert not (d["diverging"] | d["frozen"]).any(), (seed, d.to_dict("records"))


def test_a_rising_loss_diverges_and_tickets():
    loss = healthy(scatter=0.005)
    loss[-15:] *= np.exp(np.log(2) * np.arange(1, 16) / 60)  # doubling per hour, for the last 15 minutes
    d = divergence(loss_history(loss), START, END)
    assert d["diverging"].tolist() == [True]
    [f] = detect_convergence(context(loss_history(loss)))
    assert (f.detector, f.family, f.severity, f.region, f.nodes) == ("training_divergence", "software", "ticket", "us-east", ["n1"])


def test_a_healthy_decaying_noisy_gradient_norm_never_tickets():
    # 200 jobs, each its own level (0.01 to 100), scatter (3 % to 40 %) and spikes: none ticketed
    for seed in range(200):
        rng = np.random.default_rng(seed)
        grad = healthy_grad(seed=seed, level=10 ** rng.uniform(-2, 2), scatter=rng.uniform(0.03, 0.4))
        h = loss_history(healthy(seed=seed), grad=grad)
        assert not gradient_norm(h, START, END)["exploding"].any(), seed
        assert detect_convergence(context(h)) == [], seed


def test_an_exploding_gradient_norm_tickets_on_its_own():
    grad = healthy_grad()
    grad[-12:] *= np.exp(np.log(16) * np.arange(1, 13) / 12)  # 16x over the last 12 minutes
    h = loss_history(healthy(scatter=0.005), grad=grad)  # the loss not (yet) rising
    assert not divergence(h, START, END)["diverging"].any()
    g = gradient_norm(h, START, END)
    assert g["exploding"].tolist() == [True] and not g["g_nonfinite"].any() and g["g_ratio"].iloc[0] >= 2
    [f] = detect_convergence(context(h))
    assert (f.detector, f.family, f.severity, f.region, f.nodes) == ("training_divergence", "software", "ticket", "us-east", ["n1"])
    assert "gradient norm exploding" in f.summary and "loss" not in f.summary
    assert "gradient_norm" in f.evidence and "the loss not (yet) rising" in f.evidence


def test_a_gradient_norm_overflowing_minute_after_minute_tickets_and_one_overflow_does_not():
    grad = healthy_grad(n=12)  # too young for the level rule: overflow needs no history
    grad[-GRAD_NONFINITE_MINUTES:] = np.inf
    [f] = detect_convergence(context(loss_history(healthy(n=12), grad=grad)))
    assert f.severity == "ticket" and "non-finite" in f.evidence and f.value is None
    # mixed precision overflows now and then by design (the loss scaler skips the step): one minute is no verdict
    once = healthy_grad()
    once[-2] = np.inf
    h = loss_history(healthy(), grad=once)
    assert not gradient_norm(h, START, END)["exploding"].any() and detect_convergence(context(h)) == []


def test_a_job_without_grad_norm_is_judged_exactly_as_before():
    rising = healthy(scatter=0.005)
    rising[-15:] *= np.exp(np.log(2) * np.arange(1, 16) / 60)
    frozen = healthy(scatter=0.005)
    frozen[-DIVERGE_MINUTES:] = frozen[-DIVERGE_MINUTES - 1]
    for loss in (healthy(), rising, frozen):
        without = loss_history(loss)  # a frame without the column (an older store, a direct caller)
        unreported = loss_history(loss, grad=np.full(len(loss), np.nan))  # the column, null: not reported
        assert gradient_norm(without, START, END).empty and gradient_norm(unreported, START, END).empty
        assert detect_convergence(context(unreported)) == detect_convergence(context(without))
        pd.testing.assert_frame_equal(divergence(unreported, START, END), divergence(without, START, END))


def test_a_rising_loss_with_an_exploding_gradient_norm_is_one_ticket_naming_both():
    # the decision (convergence's docstring): both come from the trainer's own log, so they stay a ticket
    loss = healthy(scatter=0.005)
    loss[-15:] *= np.exp(np.log(2) * np.arange(1, 16) / 60)
    grad = healthy_grad()
    grad[-15:] *= np.exp(np.log(16) * np.arange(1, 16) / 15)  # 16x over the 15 minutes
    [f] = detect_convergence(context(loss_history(loss, grad=grad)))
    assert (f.detector, f.severity) == ("training_divergence", "ticket")
    assert f.summary == "1 training job(s) in us-east not converging: loss rising and gradient norm exploding"
    assert "median loss of the last" in f.evidence and "with the loss rising on j1" in f.evidence


def test_too_little_history_is_not_judged():
    loss = healthy(n=2 * DIVERGE_MINUTES + REFERENCE_MINUTES - 1)
    loss[-DIVERGE_MINUTES:] += 1.0
    assert divergence(loss_history(loss), START, END).empty
    assert detect_convergence(context(None)) == []


def test_checkpoint_attempts_without_the_durable_step_advancing_ticket():
    n = 60
    # healthy: each attempt lands (the durable step advances in the attempt's minute or the next)
    durable = [100] * 10 + [1100] * 20 + [2100] * 30
    ok = loss_history(healthy(n=n), checkpoint_minutes=(9, 29), durable=durable)
    assert (checkpoint_failures(ok, START, END)["attempts"] == 0).all()
    assert detect_convergence(context(ok)) == []
    # two attempts after the last landing, none landed
    stuck = loss_history(healthy(n=n), checkpoint_minutes=(9, 29, 49), durable=[100] * 10 + [1100] * 50)
    assert checkpoint_failures(stuck, START, END)["attempts"].tolist() == [2]
    [f] = detect_convergence(context(stuck))
    assert (f.detector, f.family, f.severity) == ("checkpoint_failure", "software", "ticket")
    # a job that never reports its durable step is not judged
    unknown = loss_history(healthy(n=n), checkpoint_minutes=(9, 29, 49))
    assert checkpoint_failures(unknown, START, END).empty


def _diverging_run(t1: pd.Timestamp, **cluster) -> tuple[Window, set]:
    """The two hours up to ``t1`` of a small cluster whose distributed jobs on two us-east nodes diverge from 11:07,
    and those jobs' ids."""
    scen = load_scenario({"seed": 25, "start": "2026-11-03T09:00:00Z", "end": "2026-11-03T12:00:00Z",
                          "cluster": {"gpus": 96, **cluster},
                          "incidents": [{"kind": "diverging_run", "start": "2026-11-03T11:07:00Z", "duration": "60m",
                                         "severity": "low", "scope": {"region": "us-east", "nodes": 2, "pool": "distributed"}}]})
    win = Window(scen, t1 - pd.Timedelta(hours=2), t1)
    return win, set(win.plan["job_id"].to_numpy()[fallback_jobs(scen, win.plan, scen.incidents[0])])


def test_simulated_diverging_run_is_caught_and_its_neighbours_are_not():
    t1 = pd.Timestamp("2026-11-03T11:20:00Z")
    win, targets = _diverging_run(t1)
    d = divergence(win.table("job_runtime_metrics"), t1 - pd.Timedelta(minutes=5), t1)
    assert targets and set(d.loc[d["diverging"], "job_id"]) == targets & set(d["job_id"])
    assert len(d) > len(targets)  # the healthy jobs were judged too


def test_simulated_diverging_run_explodes_the_gradient_norm_of_the_jobs_that_report_it():
    t1 = pd.Timestamp("2026-11-03T11:25:00Z")
    win, targets = _diverging_run(t1, grad_norm_share=1.0)
    g = gradient_norm(win.table("job_runtime_metrics"), t1 - pd.Timedelta(minutes=5), t1)
    assert targets and set(g.loc[g["exploding"], "job_id"]) == targets & set(g["job_id"])
    assert g["g_sigma"].notna().sum() > len(targets)  # the healthy jobs were judged too


def test_a_loss_frozen_at_one_value_while_stepping_tickets():
    loss = healthy(scatter=0.005)
    loss[-DIVERGE_MINUTES:] = loss[-DIVERGE_MINUTES - 1]  # learning rate 0: every step logs the same loss
    d = divergence(loss_history(loss), START, END)
    assert d["frozen"].tolist() == [True] and d["diverging"].tolist() == [False]
    [f] = detect_convergence(context(loss_history(loss)))
    assert f.detector == "training_divergence" and f.severity == "ticket" and "frozen" in f.summary
    # the same flat loss in minutes without steps (a hang, checkpointing) is the stall detector's, not this one
    idle = loss_history(loss)
    idle.loc[idle.index[-3:], "steps"] = 0
    assert not divergence(idle, START, END)["frozen"].any()

# --- the vectorized detectors equal the per-job definition ------------------------------------------------------------
# The per-job loops the detectors were first written as: the definition, kept here as the oracle.
from gpu_health.diagnosis.convergence import (  # noqa: E402
    CHECKPOINT_ATTEMPTS, DIVERGE_MIN_RISE, DIVERGE_MINUTES, DIVERGE_Z, MAD_TO_SIGMA, MEDIAN_SE, MINUTE,
    REFERENCE_MINUTES)


def _reference_divergence(history: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
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


def _reference_checkpoint_failures(history: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
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


def _random_history(rng, t0):
    rows = []
    for j in range(rng.integers(1, 40)):
        n = rng.integers(5, 121)
        first = rng.integers(0, 60)
        ts = t0 + pd.to_timedelta(np.sort(rng.choice(np.arange(first, first + 200), n, replace=False)), unit="min")
        loss = np.abs(rng.normal(1, 0.1, n)) * (1 + (rng.random() < 0.3) * np.linspace(0, 2, n))
        if rng.random() < 0.2 and n > 11:
            loss[-10:] = loss[-11]  # frozen
        loss[rng.random(n) < 0.05] = np.nan
        ck = np.where(rng.random(n) < 0.1, rng.random(n) * 5, 0.0)
        step = np.where(rng.random(n) < 0.1, np.nan, np.floor(np.arange(n) / rng.integers(5, 40)) * 100)
        if rng.random() < 0.2:
            step[:] = np.nan  # a job that reports no durable step
        rows.append(pd.DataFrame({"ts": ts, "job_id": f"j{j:03d}", "loss": loss, "steps": rng.integers(0, 3, n),
                                  "checkpoint_time_s": ck, "last_checkpoint_step": pd.array(step, dtype="Float64")}))
    h = pd.concat(rows, ignore_index=True).sample(frac=1, random_state=int(rng.integers(1 << 30)))
    return h.assign(job_id=h["job_id"].astype("string"))


@pytest.mark.parametrize("seed", range(20))
def test_the_vectorized_detectors_equal_the_per_job_definition(seed):
    from gpu_health.diagnosis import convergence as C

    rng = np.random.default_rng(seed)
    t0 = pd.Timestamp("2026-11-03T10:00Z")
    h = _random_history(rng, t0)
    start, end = t0 + pd.Timedelta(minutes=150), t0 + pd.Timedelta(minutes=155)
    for fast, ref in ((C.divergence, _reference_divergence), (C.checkpoint_failures, _reference_checkpoint_failures)):
        a, b = ref(h, start, end).reset_index(drop=True), fast(h, start, end).reset_index(drop=True)
        pd.testing.assert_frame_equal(a.astype(str), b.astype(str), obj=fast.__name__)


def _reference_gradient_norm(history: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """Per job with a grad_norm reported in ``[start, end)``, job by job: the median and MAD of the log norms of its
    reported minutes before the last DIVERGE_MINUTES, the median of those minutes, the z and ratio of the rise, and
    whether the last GRAD_NONFINITE_MINUTES all overflowed."""
    from gpu_health.diagnosis.convergence import GRAD_MIN_RATIO

    h = history[(history["ts"] < end) & history["grad_norm"].notna()]
    h = h.assign(job_id=h["job_id"].astype(object)).sort_values(["job_id", "ts"], kind="stable")
    live = set(h.loc[h["ts"] >= start, "job_id"])
    rows = []
    for job, g in h[h["job_id"].isin(live)].groupby("job_id", sort=True):
        logs = np.log(np.maximum(g["grad_norm"].to_numpy(float), np.finfo(float).tiny))
        n = len(logs)
        nonfinite = bool(n >= GRAD_NONFINITE_MINUTES and np.isinf(logs[-GRAD_NONFINITE_MINUTES:]).all())
        usual = recent = sigma = np.nan
        if n >= 2 * DIVERGE_MINUTES + REFERENCE_MINUTES:
            ref = logs[:-DIVERGE_MINUTES]
            usual, recent = np.median(ref), np.median(logs[-DIVERGE_MINUTES:])
            with np.errstate(invalid="ignore"):
                sigma = MAD_TO_SIGMA * np.median(np.abs(ref - usual))
        with np.errstate(invalid="ignore"):
            rise = recent - usual
            se = MEDIAN_SE * sigma * np.sqrt(1 / DIVERGE_MINUTES + 1 / max(n - DIVERGE_MINUTES, 1))
            z = rise / se if se > 0 else (np.inf if rise > 0 else (np.nan if np.isnan(rise) else 0.0))
            rising = bool(z >= DIVERGE_Z and rise >= np.log(GRAD_MIN_RATIO))
        rows.append({"job_id": job, "g_usual": np.exp(usual), "g_recent": np.exp(recent), "g_sigma": sigma,
                     "g_z": 0.0 if np.isnan(z) else z, "g_ratio": np.exp(rise), "g_nonfinite": nonfinite,
                     "exploding": rising or nonfinite, "g_steps": int(g["steps"].to_numpy()[-DIVERGE_MINUTES:].sum())})
    return pd.DataFrame(rows, columns=["job_id", "g_usual", "g_recent", "g_sigma", "g_z", "g_ratio", "g_nonfinite",
                                       "exploding", "g_steps"])


def _with_grad(h: pd.DataFrame, rng) -> pd.DataFrame:
    """``h`` with a grad_norm: some jobs report none, some explode, some overflow, some skip minutes."""
    grad = np.full(len(h), np.nan)
    for job in h["job_id"].unique():
        rows = np.flatnonzero((h["job_id"] == job).to_numpy())
        rows = rows[np.argsort(h["ts"].to_numpy()[rows], kind="stable")]
        if rng.random() < 0.3:
            continue  # reports no gradient norm
        g = 10 ** rng.uniform(-2, 2) * np.exp(rng.uniform(0.02, 0.4) * rng.standard_normal(len(rows)))
        if rng.random() < 0.3:
            g *= np.exp(np.linspace(0, rng.uniform(0, 5), len(rows)) ** 2)  # explodes (or not quite)
        g[rng.random(len(rows)) < 0.05] = np.inf
        if rng.random() < 0.15:
            g[-rng.integers(1, 5):] = np.inf
        g[rng.random(len(rows)) < 0.05] = np.nan
        if rng.random() < 0.05:
            g[:] = 0.0  # frozen weights
        grad[rows] = g
    return h.assign(grad_norm=grad)


@pytest.mark.parametrize("seed", range(20))
def test_the_vectorized_gradient_rule_equals_the_per_job_definition(seed):
    from gpu_health.diagnosis import convergence as C

    rng = np.random.default_rng(seed)
    t0 = pd.Timestamp("2026-11-03T10:00Z")
    h = _with_grad(_random_history(rng, t0), np.random.default_rng(500 + seed))
    for minutes in (60, 155, 200):
        end = t0 + pd.Timedelta(minutes=minutes)
        a = _reference_gradient_norm(h, end - pd.Timedelta(minutes=5), end)
        b = C.gradient_norm(h, end - pd.Timedelta(minutes=5), end).reset_index(drop=True)
        pd.testing.assert_frame_equal(a.astype(str), b.astype(str), obj=f"gradient_norm at {minutes}")
        # and through a prepared range: the same verdicts as the partition's own frame
        own = h[(h["ts"] >= end - C.CONVERGENCE_LOOKBACK) & (h["ts"] < end)]
        pd.testing.assert_frame_equal(C.gradient_norm(own, end - pd.Timedelta(minutes=5), end),
                                      C._gradient_norm(C.loss_arrays(h).window(end - C.CONVERGENCE_LOOKBACK, end),
                                                       end - pd.Timedelta(minutes=5)))


@pytest.mark.parametrize("seed", range(10))
def test_a_prepared_range_judges_each_partition_on_its_own_window(seed):
    # the alerts step converts a range's look-back once (loss_arrays) and slices each partition's window from it:
    # the same verdicts as the partition's own frame, rows before the look-back and after the end ignored
    from types import SimpleNamespace

    from gpu_health.diagnosis import convergence as C

    rng = np.random.default_rng(100 + seed)
    t0 = pd.Timestamp("2026-11-03T10:00Z")
    h = _random_history(rng, t0)
    arrays = C.loss_arrays(h)
    for minutes in (60, 125, 155, 200):
        end = t0 + pd.Timedelta(minutes=minutes)
        start = end - pd.Timedelta(minutes=5)
        own = h[(h["ts"] >= end - C.CONVERGENCE_LOOKBACK) & (h["ts"] < end)]
        window = arrays.window(end - C.CONVERGENCE_LOOKBACK, end)
        pd.testing.assert_frame_equal(C.divergence(own, start, end), C._divergence(window, start))
        pd.testing.assert_frame_equal(C.checkpoint_failures(own, start, end), C._checkpoint_failures(window, start))
        gpu = pd.DataFrame({"job_id": sorted(set(h["job_id"].astype(object))), "region": "us-east", "node_id": "n1"})
        ctx = dataclasses.replace(context(own, gpu=gpu), start=start, end=end)
        assert detect_convergence(dataclasses.replace(ctx, prepared=SimpleNamespace(loss=arrays))) == detect_convergence(ctx)


@pytest.mark.parametrize("seed", range(8))
def test_a_window_read_through_the_range_grouped_by_job_equals_its_own_rows_grouped(seed):
    # a window of a range's arrays finds each job's rows as one run of the range's rows grouped by job (built once);
    # the same window as arrays of its own (no range behind it) sorts its own rows: every column equal, every window
    # (partitions cut at every 5 minutes, windows starting before the history and ending after it, a window of a window)
    from gpu_health.diagnosis import convergence as C

    rng = np.random.default_rng(700 + seed)
    t0 = pd.Timestamp("2026-11-03T10:00Z")
    h = _with_grad(_random_history(rng, t0), np.random.default_rng(900 + seed))
    arrays = C.loss_arrays(h)
    judged = 0
    for minutes in range(-10, 280, 5):
        end = t0 + pd.Timedelta(minutes=minutes)
        start = end - pd.Timedelta(minutes=5)
        window = arrays.window(end - C.CONVERGENCE_LOOKBACK, end)
        if minutes % 20 == 0:  # a window cut from a wider one reads the same rows
            window = arrays.window(end - 2 * C.CONVERGENCE_LOOKBACK, end + pd.Timedelta(minutes=30)).window(
                end - C.CONVERGENCE_LOOKBACK, end)
        alone = dataclasses.replace(window, base=None, grouped={})
        for values in (C._divergence_values, C._gradient_values, C._checkpoint_values):
            got, want = values(window, start), values(alone, start)
            assert (got is None) == (want is None), (values.__name__, minutes)
            if want is not None:
                judged += 1
                assert got.keys() == want.keys()
                for col in want:
                    np.testing.assert_array_equal(np.asarray(got[col]), np.asarray(want[col]), err_msg=col)
    assert judged > 20  # (the windows judge jobs: the comparison is not vacuous)


def test_a_diverging_job_is_found_through_the_prepared_range():
    from types import SimpleNamespace

    from gpu_health.diagnosis import convergence as C

    loss = healthy(n=200, scatter=0.005)
    loss[-15:] *= np.exp(np.log(2) * np.arange(1, 16) / 60)
    later = loss_history(np.r_[loss, np.full(30, 50.0)])  # 30 more minutes after END: not the partition's
    later["ts"] = later["ts"] + pd.Timedelta(minutes=30)
    own = later[(later["ts"] >= END - C.CONVERGENCE_LOOKBACK) & (later["ts"] < END)]
    ctx = dataclasses.replace(context(own), prepared=SimpleNamespace(loss=C.loss_arrays(later)))
    [f] = detect_convergence(ctx)
    assert (f.detector, f.region) == ("training_divergence", "us-east")


def test_segment_medians_are_numpys_median_bit_for_bit():
    from gpu_health.diagnosis.convergence import _medians

    rng = np.random.default_rng(7)
    values = rng.standard_normal(5000) * 10 ** rng.uniform(-6, 3, 5000)
    values[rng.random(5000) < 0.002] = np.nan
    values[rng.random(5000) < 0.002] = np.inf
    first = rng.integers(0, 4800, 400)
    count = rng.integers(1, 150, 400).clip(max=5000 - first)
    got = _medians(values, first, count)
    want = np.array([np.median(values[f:f + n]) for f, n in zip(first, count)])
    assert np.array_equal(got, want, equal_nan=True)
    assert np.isnan(want).any() and (count % 2 == 0).any() and (count % 2 == 1).any()

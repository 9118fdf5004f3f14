"""Training convergence (issue #17, application layer): diverging loss against the job's own scatter and failed
checkpoints, on small frames; and the simulator's diverging_run leaves a loss the rule catches."""

import numpy as np
import pandas as pd

from gpu_health.diagnosis.convergence import (
    DIVERGE_MINUTES,
    REFERENCE_MINUTES,
    checkpoint_failures,
    detect_convergence,
    divergence,
)
from gpu_health.diagnosis.detect import PartitionContext
from gpu_health.sim.platform import fallback_jobs
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window

END = pd.Timestamp("2026-11-03T12:00:00Z")
START = END - pd.Timedelta(minutes=5)
MIN = pd.Timedelta(minutes=1)


def loss_history(loss, job="j1", checkpoint_minutes=(), durable=None) -> pd.DataFrame:
    n = len(loss)
    ts = [END - (n - k) * MIN for k in range(n)]
    return pd.DataFrame({"ts": ts, "job_id": job, "steps": 100, "loss": loss,
                         "checkpoint_time_s": [8.0 if k in checkpoint_minutes else 0.0 for k in range(n)],
                         "last_checkpoint_step": pd.array(durable if durable is not None else [pd.NA] * n, dtype="Int64")})


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


def test_simulated_diverging_run_is_caught_and_its_neighbours_are_not():
    scen = load_scenario({"seed": 25, "start": "2026-11-03T09:00:00Z", "end": "2026-11-03T12:00:00Z",
                          "cluster": {"gpus": 96},
                          "incidents": [{"kind": "diverging_run", "start": "2026-11-03T11:07:00Z", "duration": "60m",
                                         "severity": "low", "scope": {"region": "us-east", "nodes": 2, "pool": "distributed"}}]})
    t1 = pd.Timestamp("2026-11-03T11:20:00Z")
    win = Window(scen, t1 - pd.Timedelta(hours=2), t1)
    targets = set(win.plan["job_id"].to_numpy()[fallback_jobs(scen, win.plan, scen.incidents[0])])
    d = divergence(win.table("job_runtime_metrics"), t1 - pd.Timedelta(minutes=5), t1)
    assert targets and set(d.loc[d["diverging"], "job_id"]) == targets & set(d["job_id"])
    assert len(d) > len(targets)  # the healthy jobs were judged too


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

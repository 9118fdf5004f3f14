"""A framework release is judged from its first job, not its announcement: the looks at it spend the false-alarm rate
only once a job on it has started (before, no look could page)."""

import dataclasses

import numpy as np
import pandas as pd

from gpu_health.contracts.models import columns, conform
from gpu_health.diagnosis.detectors.software import detect_deploys
from gpu_health_tests import test_detect_evidence as EV

NODES = tuple(f"n{i}" for i in range(1, 13))
NEW_JOBS = [f"job-{n}" for n in NODES[:3]]


def release_context(announced: pd.Timestamp, first_start: pd.Timestamp):
    """Three jobs on torch-2.14.0 (started from ``first_start`` on) step about 18 % slower than nine on the old
    version in the same five minutes, with the noise of shared hardware: evidence between the first look's
    false-alarm rate (half the rate: its second look) and a thirteenth of it (an hour of looks)."""
    rng = np.random.default_rng(11)
    rt = conform(pd.DataFrame([
        {"ts": EV.T0 + m * EV.MIN, "job_id": f"job-{n}", "steps": 10, "samples": 640, "last_step": 1000 + m,
         "step_time_s": (1.18 if f"job-{n}" in NEW_JOBS else 1.0) + rng.uniform(0, 0.5),
         "data_loader_time_s": 0.0, "grad_sync_time_s": 0.0, "checkpoint_time_s": 0.0, "loss": 1.0,
         "last_checkpoint_step": 900} for m in range(5) for n in NODES],
        columns=columns("job_runtime_metrics")), "job_runtime_metrics")
    meta = pd.DataFrame({"job_id": [f"job-{n}" for n in NODES], "team": "t1", "workload_class": "distributed",
                         "model_type": "llm",
                         "framework_version": ["torch-2.14.0" if f"job-{n}" in NEW_JOBS else "torch-2.13.0" for n in NODES]})
    starts = [(f"job-{n}", first_start + i * EV.MIN if f"job-{n}" in NEW_JOBS else EV.T0 - 3 * 60 * EV.MIN)
              for i, n in enumerate(NODES)]
    sched = pd.DataFrame([{"event_id": f"s-{j}", "ts": ts, "job_id": j, "event": "started", "scheduler": "slurm",
                           "node_ids": j.removeprefix("job-"), "exit_state": None, "reason": None} for j, ts in starts])
    sched = conform(sched.sort_values("ts", kind="stable").reset_index(drop=True), "scheduler_events")
    changes = pd.DataFrame([{"event_id": "chg-fw", "ts": announced, "kind": "framework_release", "scope": "t1",
                             "from_version": "torch-2.13.0", "to_version": "torch-2.14.0", "description": "torch"}])
    baselines = pd.DataFrame({"model_type": ["llm"], "sku": [EV.SKU], "gpus": [8], "step_time_s": [1.0]})
    ctx = EV.context(EV.gpu_rows(nodes=NODES), runtime=rt, meta_frame=meta, changes=changes, sched=sched, nodes=NODES)
    return dataclasses.replace(ctx, baselines=baselines)


def test_a_release_adopted_an_hour_after_its_announcement_pages_at_its_first_jobs():
    # announced an hour before the partition, its first job 3 minutes before it: the first look that could judge
    # it is the partition before, so this look spends half the rate, not a thirteenth
    ctx = release_context(EV.T0 - 60 * EV.MIN, EV.T0 - 3 * EV.MIN)
    (f,) = detect_deploys(ctx)
    assert (f.family, f.severity, f.cohort, f.change_event) == ("software", "page", "framework torch-2.14.0", "chg-fw")
    assert f.margin is not None and f.margin > 1


def test_the_same_evidence_an_hour_after_its_first_jobs_does_not_page():
    # jobs on it ran since the announcement: the hour of looks since has spent the rate
    assert detect_deploys(release_context(EV.T0 - 60 * EV.MIN, EV.T0 - 58 * EV.MIN)) == []


def test_the_same_evidence_right_after_the_announcement_pages():
    assert len(detect_deploys(release_context(EV.T0 - 3 * EV.MIN, EV.T0 - 3 * EV.MIN))) == 1

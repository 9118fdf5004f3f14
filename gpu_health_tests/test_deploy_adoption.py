"""A framework release is judged from its first jobs: the looks at it spend the false-alarm rate only once a job on
it has started (before, no look could page), and its cohort is judged once two of its jobs report, however few
minutes each (one job slower than the rest is that job's)."""

import dataclasses

import numpy as np
import pandas as pd

from gpu_health.contracts.models import columns, conform
from gpu_health.diagnosis.detectors.software import detect_deploys
from gpu_health_tests import test_detect_evidence as EV

NODES = tuple(f"n{i}" for i in range(1, 13))


def release_context(announced: pd.Timestamp, first_start: pd.Timestamp, *, new_jobs: int = 3, minutes=range(5),
                    new_minutes=None, slower: float = 0.18, noise: float = 0.5):
    """``new_jobs`` jobs on torch-2.14.0 (started from ``first_start`` on, reporting in ``new_minutes``) step
    ``slower`` than the others, on the old version, in the same ``minutes``, with the noise of shared hardware
    (uniform, ``noise`` of the old step time wide)."""
    new = {f"job-{n}" for n in NODES[:new_jobs]}
    new_minutes = minutes if new_minutes is None else new_minutes
    rng = np.random.default_rng(11)
    rt = conform(pd.DataFrame([
        {"ts": EV.T0 + m * EV.MIN, "job_id": f"job-{n}", "steps": 10, "samples": 640, "last_step": 1000 + m,
         "step_time_s": (1.0 + slower if f"job-{n}" in new else 1.0) + rng.uniform(0, noise),
         "data_loader_time_s": 0.0, "grad_sync_time_s": 0.0, "checkpoint_time_s": 0.0, "loss": 1.0,
         "last_checkpoint_step": 900} for m in minutes for n in NODES if f"job-{n}" not in new or m in new_minutes],
        columns=columns("job_runtime_metrics")), "job_runtime_metrics")
    # (and one more job on the release, submitted with the first and still waiting in the queue: it has run nothing)
    meta = pd.DataFrame({"job_id": [f"job-{n}" for n in NODES] + ["job-queued"], "team": "t1",
                         "workload_class": "distributed", "model_type": "llm",
                         "framework_version": ["torch-2.14.0" if f"job-{n}" in new else "torch-2.13.0" for n in NODES]
                         + ["torch-2.14.0"]})
    starts = [(f"job-{n}", first_start + i * EV.MIN if f"job-{n}" in new else EV.T0 - 3 * 60 * EV.MIN)
              for i, n in enumerate(NODES)]
    sched = pd.DataFrame([{"event_id": f"s-{j}", "ts": ts, "job_id": j, "event": "started", "scheduler": "slurm",
                           "node_ids": j.removeprefix("job-"), "exit_state": None, "reason": None} for j, ts in starts]
                         + [{"event_id": "q", "ts": first_start, "job_id": "job-queued", "event": "submitted",
                             "scheduler": "slurm", "node_ids": None, "exit_state": None, "reason": None}])
    sched = conform(sched.sort_values("ts", kind="stable").reset_index(drop=True), "scheduler_events")
    changes = pd.DataFrame([{"event_id": "chg-fw", "ts": announced, "kind": "framework_release", "scope": "t1",
                             "from_version": "torch-2.13.0", "to_version": "torch-2.14.0", "description": "torch"}])
    baselines = pd.DataFrame({"model_type": ["llm"], "sku": [EV.SKU], "gpus": [8], "step_time_s": [1.0]})
    ctx = EV.context(EV.gpu_rows(nodes=NODES, minutes=minutes), runtime=rt, meta_frame=meta, changes=changes,
                     sched=sched, nodes=NODES)
    return dataclasses.replace(ctx, baselines=baselines)


# three jobs about 18 % slower, within the noise of shared hardware: evidence between the rate of a release's
# second look (half the rate) and of its thirteenth (an hour of looks)
BORDERLINE = {"new_jobs": 3, "slower": 0.18, "noise": 0.5}


def test_a_release_adopted_an_hour_after_its_announcement_pages_at_its_first_jobs():
    # announced an hour before the partition, its first job 3 minutes before it: the first look that could judge
    # it is the partition before, so this look spends half the rate, not a thirteenth
    (f,) = detect_deploys(release_context(EV.T0 - 60 * EV.MIN, EV.T0 - 3 * EV.MIN, **BORDERLINE))
    assert (f.family, f.severity, f.cohort, f.change_event) == ("software", "page", "framework torch-2.14.0", "chg-fw")
    assert f.margin is not None and f.margin > 1


def test_the_same_evidence_an_hour_after_its_first_jobs_does_not_page():
    # jobs on it ran since the announcement: the hour of looks since has spent the rate
    assert detect_deploys(release_context(EV.T0 - 60 * EV.MIN, EV.T0 - 58 * EV.MIN, **BORDERLINE)) == []


def test_the_same_evidence_right_after_the_announcement_pages():
    assert len(detect_deploys(release_context(EV.T0 - 3 * EV.MIN, EV.T0 - 3 * EV.MIN, **BORDERLINE))) == 1


def test_two_jobs_of_a_release_page_on_their_first_minutes():
    # two jobs on the release, 30 % slower, three minutes each: six minutes of steps, all slower than every other
    # job's -- the rank test's own power decides, not a count of minutes
    ctx = release_context(EV.T0 - 3 * EV.MIN, EV.T0 - 3 * EV.MIN, new_jobs=2, new_minutes=range(2, 5), slower=0.3,
                          noise=0.05)
    (f,) = detect_deploys(ctx)
    assert (f.severity, f.cohort) == ("page", "framework torch-2.14.0")


def test_one_slow_job_on_a_release_does_not_page_it():
    # one job on the release, 30 % slower for ten minutes: that job's (its data, its node), not the release's
    ctx = release_context(EV.T0 - 10 * EV.MIN, EV.T0 - 10 * EV.MIN, new_jobs=1, minutes=range(-5, 5), slower=0.3,
                          noise=0.05)
    assert detect_deploys(ctx) == []

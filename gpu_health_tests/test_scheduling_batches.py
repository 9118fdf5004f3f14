"""The scheduling detector's evidence of a demoted queue: jobs submitted together are one observation."""

import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.diagnosis.detectors.scheduling import detect_scheduling
from gpu_health_tests.test_detect_scheduling import START, context


def test_a_batch_submitted_together_is_one_observation_of_a_demoted_queue():
    """Jobs one script submits in the same minute wait together: one batch held back after a change is one
    observation, not a whole queue demoted (counted per job, Fisher's p over-claims on it)."""
    from gpu_health_tests.test_detect_scheduling import FIVE, SINGLE, B2_IDLE, _started_jobs

    change_at = START - pd.Timedelta(minutes=30)
    changes = pd.DataFrame([("c1", change_at, "scheduler_config", "r1")], columns=["event_id", "ts", "kind", "scope"])
    parts = pd.date_range(START - pd.Timedelta(days=3), START, freq=PARTITION, inclusive="left")
    hist = pd.DataFrame({"partition_start": parts, "region": "r1", "share_idle_blocked": 0.0})
    hist.loc[hist["partition_start"] >= change_at - pd.Timedelta(hours=1), "share_idle_blocked"] = 40 / (4 * 8 * 5)
    before = pd.date_range(change_at - pd.Timedelta(minutes=58), change_at, freq="2min", inclusive="left")
    after = pd.date_range(change_at + pd.Timedelta(minutes=2), START + FIVE, freq="2min", inclusive="left")
    short, long = pd.Timedelta(minutes=2), pd.Timedelta(minutes=20)

    def judged(batch_submitted_together: bool):
        ctx = context(B2_IDLE, SINGLE, changes=changes)
        ctx.region_history = hist
        # the batch queue's jobs since the change wait long: all of them submitted in one minute (an array), or
        # each on its own (a demotion that holds every decision of the queue)
        subs = [change_at + pd.Timedelta(minutes=1, seconds=i) if batch_submitted_together else t - long
                for i, t in enumerate(after)]
        rows = (_started_jobs("r1/batch", 1, "b1", before, short, "bb")
                + _started_jobs("r1/notebooks", 1, "i1", before, short, "nb")
                + _started_jobs("r1/notebooks", 1, "i1", after, short, "na"))
        for i, (s, t) in enumerate(zip(subs, after)):
            rows += [(f"e-ba{i}s", s, f"ba{i}", "submitted", "r1/batch", 1, None),
                     (f"e-ba{i}r", t, f"ba{i}", "started", "r1/batch", 1, "b1")]
        ctx.sched = pd.concat([ctx.sched, pd.DataFrame(rows, columns=ctx.sched.columns)], ignore_index=True)
        return [(f.severity, f.change_event) for f in detect_scheduling(ctx)]

    assert judged(False) == [("page", "c1")]
    assert judged(True) == [("ticket", "c1")]

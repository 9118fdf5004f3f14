"""The scheduling detector's seasonal gate: a pile-up pages on a rise over the region's usual share that its own
history shows rarely (a false-alarm budget), and by one node at least -- never on a fixed margin over a sample."""

import numpy as np
import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.diagnosis.detectors.scheduling import (SCHED_NOISE_PAGES_PER_WEEK, _noise_margin,
                                                       detect_scheduling)
from gpu_health_tests.test_detect_scheduling import START, WAITING, context

TWO_IDLE = {"i1": 8, "i2": 8}  # both batch nodes idle: 16 GPUs beside eight 2-GPU requests
FILLER = 12  # 16 nodes of 8 GPUs: one node is 1/16 of the region, the pile-up two nodes (1/8)
ONE_NODE = 1 / 16
PILE_UP = 2 / 16


def _history(share_of) -> pd.DataFrame:
    """Three days of the region's idle_blocked share before START; ``share_of(i, ts)`` per partition."""
    parts = pd.date_range(START - pd.Timedelta(days=3), START, freq=PARTITION, inclusive="left")
    return pd.DataFrame({"partition_start": parts, "region": "r1",
                         "share_idle_blocked": [float(share_of(i, t)) for i, t in enumerate(parts)]})


def _judged(history: pd.DataFrame) -> str:
    ctx = context(TWO_IDLE, WAITING, filler=FILLER)  # multi-GPU requests only: a cause in evidence (the shape)
    ctx.region_history = history
    (found,) = detect_scheduling(ctx)
    return found.severity


def test_a_rise_the_regions_history_shows_routinely_is_its_noise_not_a_page():
    # a quiet region: the same two-node pile-up with its cause in evidence pages
    assert _judged(_history(lambda i, t: 0.0)) == "page"
    # a region whose idle_blocked jumps by more than the pile-up one partition in ten, at every hour: a rise of
    # two nodes is what it does many times a day, whatever a fixed margin over its median would say
    assert _judged(_history(lambda i, t: PILE_UP * 1.6 if i % 10 == 0 else 0.0)) == "ticket"


def test_a_rise_of_less_than_one_node_is_the_grain_of_placement():
    # a flat history (no noise to measure): the floor is one node of the region
    assert _judged(_history(lambda i, t: PILE_UP - ONE_NODE * 0.5)) == "ticket"
    assert _judged(_history(lambda i, t: PILE_UP - ONE_NODE * 1.5)) == "page"


def test_the_noise_margin_spends_at_most_its_budget_on_the_regions_own_history():
    rng = np.random.default_rng(7)
    weeks = 3
    parts = pd.date_range(START - pd.Timedelta(days=7 * weeks), START, freq=PARTITION, inclusive="left")
    hour = (parts.hour.to_numpy() >= 18) & (parts.hour.to_numpy() < 23)  # an evening wave every day
    share = np.clip(0.02 + 0.05 * hour + rng.gamma(1.5, 0.002, len(parts)), 0, 1)
    hist = pd.DataFrame({"partition_start": parts, "region": "r1", "share_idle_blocked": share})
    margin = _noise_margin(hist, "r1", floor=0.0)
    # the margin is measured against the same hour of the day: the evening wave itself is not noise
    assert margin < 0.05
    # ... and the history's own partitions rise above their same-hour median by more than it at most the
    # budget's times a week (the rank of the quantile, rounded up)
    tod = parts - parts.normalize()
    usual = np.array([np.median(share[np.abs((tod - t) / pd.Timedelta(minutes=1)) <= 30]) for t in tod])
    assert (share - usual > margin).sum() <= np.ceil(SCHED_NOISE_PAGES_PER_WEEK * weeks) + 1
    # a floor above the noise stands; a history of one day measures no day-to-day deviation: the floor alone
    assert _noise_margin(hist, "r1", floor=0.2) == 0.2
    assert _noise_margin(hist[hist["partition_start"] >= START - pd.Timedelta(hours=20)], "r1", 0.03) == 0.03


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

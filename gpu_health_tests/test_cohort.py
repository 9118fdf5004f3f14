"""Deploy cohort judge: plain function tests on small node-minute / job-minute frames."""

import numpy as np
import pandas as pd
import pytest

from gpu_health.diagnosis.cohort import (
    INSUFFICIENT,
    PASS,
    REGRESSION,
    CohortVerdict,
    judge_change_event,
    judge_cohorts,
)

CHANGE = pd.Timestamp("2025-03-03 14:00", tz="UTC")


def node_minutes(
    *,
    n_new: int = 2,
    n_old: int = 30,
    minutes: int = 15,
    factor: float = 1.0,
    onset: int = 0,
    noise: float = 0.05,
    season: float = 0.0,
    before: int = 10,
    seed: int = 0,
) -> pd.DataFrame:
    """Step time per node-minute around a driver upgrade of the first ``n_new`` nodes.

    ``season``: both cohorts' step time rises linearly by this share over the
    window (a load wave); ``factor`` multiplies the new cohort from ``onset``.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for minute in range(-before, minutes):
        level = 1.2 * (1 + season * max(minute, 0) / minutes)
        for i in range(n_new + n_old):
            on_new = i < n_new
            step = level * (1 + rng.normal(0, noise))
            if on_new and minute >= onset:
                step *= factor
            rows.append(
                {
                    "ts": CHANGE + pd.Timedelta(minutes=minute),
                    "node_id": f"n{i:02d}",
                    "driver_version": "550.1" if on_new and minute >= 0 else "535.2",
                    "step_time_s": step,
                }
            )
    return pd.DataFrame(rows)


def job_minutes(*, rate_new: float, rate_old: float, jobs_new: int = 20, jobs_old: int = 60,
                minutes: int = 15, seed: int = 1) -> pd.DataFrame:
    """A failure indicator (1 = the job failed in that minute) per job-minute."""
    rng = np.random.default_rng(seed)
    rows = []
    for minute in range(minutes):
        for j in range(jobs_new + jobs_old):
            on_new = j < jobs_new
            rows.append(
                {
                    "ts": CHANGE + pd.Timedelta(minutes=minute),
                    "job_id": f"j{j}",
                    "framework_version": "2.4" if on_new else "2.3",
                    "failed": int(rng.uniform() < (rate_new if on_new else rate_old)),
                    "goodput_share": float(np.clip(rng.normal(0.9, 0.03), 0, 1)),
                }
            )
    return pd.DataFrame(rows)


def split(rows: pd.DataFrame, col: str, new_value: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    after = rows[rows["ts"] >= CHANGE]
    return after[after[col] == new_value], after[after[col] != new_value]


# ------------------------------------------------------------------ the brief's cases


def test_38_percent_step_time_regression_on_two_nodes_in_the_first_10_minutes():
    rows = node_minutes(n_new=2, factor=1.38)

    verdicts = judge_change_event(
        rows, CHANGE, "driver_version", "550.1", {"step_time_s": True}, window_minutes=10
    )

    (verdict,) = verdicts
    assert verdict.verdict == REGRESSION
    assert verdict.n_new == 20  # 2 nodes x 10 minutes, nothing before the change
    assert verdict.minutes == 10
    assert verdict.effect == pytest.approx(0.38, abs=0.06)
    assert verdict.cliffs_delta > 0.9
    assert verdict.p_value < 1e-6
    assert verdict.onset_minutes == 0


def test_regression_is_already_visible_after_5_minutes():
    rows = node_minutes(n_new=2, factor=1.38, seed=4)

    (verdict,) = judge_change_event(
        rows, CHANGE, "driver_version", "550.1", {"step_time_s": True}, window_minutes=5
    )

    assert verdict.verdict == REGRESSION
    assert verdict.n_new == 10


def test_one_percent_shift_is_significant_but_passes_the_effect_floor():
    rows = node_minutes(n_new=20, factor=1.01, noise=0.01)
    new, old = split(rows, "driver_version", "550.1")

    verdict = judge_cohorts(new, old, metric="step_time_s")

    assert verdict.p_value < 0.01  # a real shift ...
    assert verdict.effect == pytest.approx(0.01, abs=0.005)
    assert verdict.verdict == PASS  # ... too small to be a regression
    assert "effect floor" in verdict.reason


def test_no_difference_passes():
    rows = node_minutes(n_new=4, factor=1.0, seed=2)
    new, old = split(rows, "driver_version", "550.1")

    verdict = judge_cohorts(new, old, metric="step_time_s")

    assert verdict.verdict == PASS
    assert abs(verdict.effect) < 0.03


def test_identical_cohorts_pass():
    rows = node_minutes(n_new=5, noise=0.0)
    new, old = split(rows, "driver_version", "550.1")

    verdict = judge_cohorts(new, old, metric="step_time_s")

    assert verdict.verdict == PASS
    assert verdict.p_value == 1.0
    assert verdict.cliffs_delta == 0.0


def test_seasonality_shared_by_both_cohorts_cancels():
    rows = node_minutes(n_new=4, factor=1.0, season=0.5, seed=3)  # both rise 50% together
    new, old = split(rows, "driver_version", "550.1")

    verdict = judge_cohorts(new, old, metric="step_time_s")

    assert verdict.verdict == PASS
    assert abs(verdict.effect) < 0.03


def test_progressive_rollout_into_a_load_wave_is_not_a_regression():
    """New nodes join late, when everyone is slower: pooled values would differ, aligned ones do not."""
    rows = node_minutes(n_new=10, factor=1.0, season=0.6, seed=5)
    rows = rows[rows["ts"] >= CHANGE]
    minute = ((rows["ts"] - CHANGE) / pd.Timedelta(minutes=1)).astype(int)
    node = rows["node_id"].str[1:].astype(int)
    rows = rows[(node >= 10) | (minute >= 5 + node)]  # node i upgraded at minute 5 + i
    new, old = split(rows, "driver_version", "550.1")
    pooled_shift = new["step_time_s"].median() / old["step_time_s"].median() - 1
    assert pooled_shift > 0.1  # a naive pooled comparison would call this a regression

    verdict = judge_cohorts(new, old, metric="step_time_s")

    assert verdict.verdict == PASS
    assert abs(verdict.effect) < 0.03


def test_failure_rate_regression_on_a_binary_indicator_is_flagged():
    rows = job_minutes(rate_new=0.25, rate_old=0.03)

    (verdict,) = judge_change_event(
        rows, CHANGE, "framework_version", "2.4", {"failed": True}
    )

    assert verdict.verdict == REGRESSION
    assert verdict.median_new == verdict.median_old == 0  # medians are blind here ...
    assert verdict.mean_new > 0.15 and verdict.mean_old < 0.06  # ... rates are not
    assert verdict.cliffs_delta == pytest.approx(verdict.mean_new - verdict.mean_old, abs=0.02)
    assert verdict.effect > 2


def test_equal_failure_rates_pass():
    rows = job_minutes(rate_new=0.05, rate_old=0.05, seed=2)

    (verdict,) = judge_change_event(rows, CHANGE, "framework_version", "2.4", {"failed": True})

    assert verdict.verdict == PASS


def test_lower_is_worse_metric_is_judged_in_its_own_direction():
    rows = job_minutes(rate_new=0.03, rate_old=0.03)
    rows.loc[rows["framework_version"] == "2.4", "goodput_share"] -= 0.15
    new, old = split(rows, "framework_version", "2.4")

    worse = judge_cohorts(new, old, metric="goodput_share", higher_is_worse=False)
    better = judge_cohorts(old, new, metric="goodput_share", higher_is_worse=False)

    assert worse.verdict == REGRESSION
    assert worse.effect < -0.1 and worse.worse_effect > 0.1
    assert better.verdict == PASS  # an improvement is never a regression


# ---------------------------------------------------------------------- onset


def test_onset_is_the_minute_from_which_the_new_cohort_stays_worse():
    rows = node_minutes(n_new=3, factor=1.4, onset=6, seed=6)

    (verdict,) = judge_change_event(rows, CHANGE, "driver_version", "550.1", {"step_time_s": True})

    assert verdict.verdict == REGRESSION
    assert verdict.onset_minutes == 6
    assert "worse from minute 6" in verdict.describe()


def test_onset_counts_from_the_change_even_when_data_starts_later():
    rows = node_minutes(n_new=3, factor=1.4, seed=7)
    rows = rows[rows["ts"] >= CHANGE + pd.Timedelta(minutes=2)]

    (verdict,) = judge_change_event(rows, CHANGE, "driver_version", "550.1", {"step_time_s": True})

    assert verdict.onset_minutes == 2


# ----------------------------------------------------------- data sufficiency, inputs


def test_too_few_samples_is_insufficient_data():
    rows = node_minutes(n_new=1, factor=1.5)

    (verdict,) = judge_change_event(
        rows, CHANGE, "driver_version", "550.1", {"step_time_s": True}, window_minutes=5
    )

    assert verdict.verdict == INSUFFICIENT
    assert verdict.n_new == 5
    assert np.isnan(verdict.p_value)
    assert "INSUFFICIENT DATA" in verdict.describe()


def test_cohorts_without_common_minutes_are_insufficient_data():
    rows = node_minutes(n_new=4, factor=1.5)
    new, old = split(rows, "driver_version", "550.1")
    old = old.assign(ts=old["ts"] + pd.Timedelta(hours=1))

    verdict = judge_cohorts(new, old, metric="step_time_s")

    assert verdict.verdict == INSUFFICIENT
    assert verdict.minutes == 0


def test_missing_metric_values_are_dropped():
    rows = node_minutes(n_new=2, factor=1.38)
    rows.loc[rows.index[::7], "step_time_s"] = np.nan
    new, old = split(rows, "driver_version", "550.1")

    verdict = judge_cohorts(new, old, metric="step_time_s")

    assert verdict.verdict == REGRESSION
    assert verdict.n_new == new["step_time_s"].notna().sum()


def test_numeric_minutes_work_like_timestamps():
    rows = node_minutes(n_new=2, factor=1.38)
    rows["minute"] = (rows["ts"] - CHANGE) / pd.Timedelta(minutes=1)

    (verdict,) = judge_change_event(
        rows, 0, "driver_version", "550.1", {"step_time_s": True}, time_col="minute", window_minutes=10
    )

    assert verdict.verdict == REGRESSION
    assert verdict.n_new == 20
    assert verdict.onset_minutes == 0


def test_naive_change_time_is_read_in_the_rows_time_zone():
    rows = node_minutes(n_new=2, factor=1.38)

    (verdict,) = judge_change_event(
        rows, "2025-03-03 14:00", "driver_version", "550.1", {"step_time_s": True}, window_minutes=10
    )

    assert verdict.n_new == 20


def test_missing_columns_are_reported():
    rows = node_minutes()
    new, old = split(rows, "driver_version", "550.1")
    with pytest.raises(KeyError, match="lacks"):
        judge_cohorts(new, old, metric="gpu_util_pct")
    with pytest.raises(KeyError):
        judge_change_event(rows, CHANGE, "sku", "h100", {"step_time_s": True})


# ------------------------------------------------------------------ change events


def test_change_event_returns_the_worst_verdict_first():
    steps = node_minutes(n_new=2, factor=1.0, seed=8)
    steps["failed"] = 0
    steps.loc[(steps["driver_version"] == "550.1"), "failed"] = (
        np.random.default_rng(9).uniform(size=(steps["driver_version"] == "550.1").sum()) < 0.6
    ).astype(int)
    steps["goodput_share"] = 0.9

    verdicts = judge_change_event(
        steps, CHANGE, "driver_version", "550.1",
        {"step_time_s": True, "goodput_share": False, "failed": True},
    )

    assert [v.metric for v in verdicts][0] == "failed"
    assert [v.verdict for v in verdicts] == [REGRESSION, PASS, PASS]


def test_rows_before_the_change_and_after_the_window_are_ignored():
    rows = node_minutes(n_new=2, factor=1.38, minutes=30)
    # before the change the future cohort ran the old driver; after the window it breaks badly
    late = rows["ts"] >= CHANGE + pd.Timedelta(minutes=15)
    rows.loc[late, "step_time_s"] *= 10

    (verdict,) = judge_change_event(rows, CHANGE, "driver_version", "550.1", {"step_time_s": True})

    assert verdict.minutes == 15
    assert verdict.effect == pytest.approx(0.38, abs=0.06)


def test_old_value_restricts_the_control_cohort():
    rows = node_minutes(n_new=2, factor=1.38)
    rows.loc[rows["node_id"].isin(["n02", "n03", "n04"]), "driver_version"] = "545.0"

    (verdict,) = judge_change_event(
        rows, CHANGE, "driver_version", "550.1", {"step_time_s": True}, old_value="545.0"
    )

    assert verdict.n_old == 3 * 15


def test_per_metric_effect_floor():
    rows = node_minutes(n_new=20, factor=1.03, noise=0.01)

    (loose,) = judge_change_event(rows, CHANGE, "driver_version", "550.1", {"step_time_s": True})
    (strict,) = judge_change_event(
        rows, CHANGE, "driver_version", "550.1", {"step_time_s": True},
        effect_floors={"step_time_s": 0.02},
    )

    assert loose.verdict == PASS
    assert strict.verdict == REGRESSION


def test_describe_of_a_regression():
    verdict = CohortVerdict(
        metric="step_time_s", verdict=REGRESSION, higher_is_worse=True, p_value=1e-9, effect=0.38,
        cliffs_delta=0.97, n_new=20, n_old=300, median_new=1.66, median_old=1.2, mean_new=1.67,
        mean_old=1.21, minutes=10, onset_minutes=0.0, reason="worse by 38% (floor 5%), p < 0.01",
    )
    text = verdict.describe()
    assert text.startswith("step_time_s: REGRESSION -- new cohort +38.0% vs old")
    assert "20 vs 300 samples over 10 minutes" in text
    assert "worse from minute 0" in text
    assert verdict.common_language_effect == pytest.approx(0.985)

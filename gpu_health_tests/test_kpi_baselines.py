"""expected_values / state_share_values: plain function tests on hand-built frames with exact expectations."""

import numpy as np
import pandas as pd
import pytest

from gpu_health.metrics.goodput import STATES
from gpu_health.metrics.kpi_baselines import KpiBaselines, expected_values, state_share_values

FRI = pd.Timestamp("2026-11-06T12:00:00Z")  # a Friday: k = 1..4 days back are Thu..Mon, 5-6 the weekend, 7 a Friday
SUN = pd.Timestamp("2026-11-08T12:00:00Z")
MON = pd.Timestamp("2026-11-09T09:00:00Z")
DAY = pd.Timedelta(days=1)
MIN = pd.Timedelta(minutes=1)
NO_STATES = pd.DataFrame(columns=["partition_start", "region", "sku", "workload_class", "team", "state", "gpu_minutes"])


def kpis(points, *, kpi="allocation_rate", region="us-east", sku="H100", workload_class="*", team="*", status="ok"):
    """kpi_values rows of one series x slice from {partition_start: value}."""
    ts = list(points)
    return pd.DataFrame({
        "partition_start": pd.to_datetime(ts, utc=True), "kpi": kpi, "region": region, "sku": sku,
        "workload_class": workload_class, "team": team, "value": [float(points[t]) for t in ts],
        "numerator": np.nan, "denominator": np.nan, "unit": "ratio", "status": status,
    })


def trailing(p, values):
    """{p - 5 min: values[0], p - 10 min: values[1], ...}."""
    return {p - (i + 1) * 5 * MIN: v for i, v in enumerate(values)}


def baseline(history, p, *, states=NO_STATES, **kw) -> pd.Series:
    out = expected_values(history, states, pd.DatetimeIndex([p]), **kw)
    KpiBaselines.validate(out, lazy=True)
    row = out[(out["series"] == "allocation_rate") & (out["partition_start"] == p)]
    assert len(row) == 1
    return row.iloc[0]


# ------------------------------------------------------------------ rule selection and arithmetic


def test_cold_start_uses_the_trailing_two_hours_with_exact_median_mad_and_quantiles():
    history = kpis(trailing(FRI, [1, 2, 3, 4, 5, 6]) | {FRI - 2 * pd.Timedelta(hours=1) - 5 * MIN: 1000})

    row = baseline(history, FRI)

    assert row["method"] == "trailing"
    assert row["n_samples"] == 6  # the 1000 is 2 h 5 min back: outside [p - 2 h, p)
    assert row["expected"] == 3.5
    assert row["mad"] == 1.5  # |x - 3.5| = 2.5 1.5 .5 .5 1.5 2.5
    assert row["q10"] == pytest.approx(1.5)  # linear: 1 + 0.1 * 5 * (2 - 1)
    assert row["q90"] == pytest.approx(5.5)


def test_too_little_history_gives_no_baseline():
    row = baseline(kpis(trailing(FRI, [1, 2])), FRI)

    assert row["method"] == "none"
    assert row["n_samples"] == 0
    assert np.isnan(row["expected"]) and np.isnan(row["mad"]) and np.isnan(row["q10"]) and np.isnan(row["q90"])


def test_the_partition_and_later_rows_are_never_samples():
    row = baseline(kpis(trailing(FRI, [1, 2, 3]) | {FRI: 50, FRI + 5 * MIN: 60}), FRI)

    assert row["method"] == "trailing"
    assert row["expected"] == 2


def test_hour_of_day_on_three_weekdays_beats_trailing():
    points = {
        FRI - DAY: 10,  # Thursday
        FRI - 2 * DAY + 25 * MIN: 20,  # Wednesday, inside +-30 min
        FRI - 3 * DAY - 30 * MIN: 30,  # Tuesday, on the edge of +-30 min
        FRI - DAY + 35 * MIN: 999,  # outside +-30 min
        FRI - 5 * DAY: 1000,  # Sunday: other day type
        FRI - 6 * DAY: 1000,  # Saturday
    } | trailing(FRI, [500] * 24)

    row = baseline(kpis(points), FRI)

    assert row["method"] == "hour_of_day"
    assert row["n_samples"] == 3
    assert row["expected"] == 20
    assert row["mad"] == 10  # |10-20|, 0, |30-20|
    assert row["q10"] == pytest.approx(12.0)  # 10 + 0.2 * 10
    assert row["q90"] == pytest.approx(28.0)


def test_hour_of_day_needs_three_days_not_three_samples():
    points = {FRI - DAY - 5 * MIN: 10, FRI - DAY: 11, FRI - DAY + 5 * MIN: 12, FRI - 2 * DAY: 20} | trailing(FRI, [7, 7, 7])

    row = baseline(kpis(points), FRI)

    assert row["method"] == "trailing"
    assert row["expected"] == 7


def test_weekdays_and_weekends_are_kept_apart():
    # Monday: Sunday and Saturday (k = 1, 2) are the other day type
    monday = {MON - DAY: 1000, MON - 2 * DAY: 1000, MON - 3 * DAY: 1, MON - 4 * DAY: 2, MON - 5 * DAY: 3, MON - 6 * DAY: 4}
    row = baseline(kpis(monday), MON)
    assert (row["method"], row["n_samples"], row["expected"]) == ("hour_of_day", 4, 2.5)

    # Sunday: the last 7 days hold two weekend days (Saturday, last Sunday), the weekdays do not count
    sunday = {SUN - k * DAY: 100 for k in range(1, 8)} | trailing(SUN, [5, 6, 7])
    row = baseline(kpis(sunday), SUN)
    assert (row["method"], row["n_samples"], row["expected"]) == ("trailing", 3, 6)


def test_two_weeks_of_history_compare_the_same_hour_of_the_week():
    week = pd.Timedelta(days=7)
    points = {FRI - week: 7, FRI - week + 30 * MIN: 8, FRI - 2 * week - 10 * MIN: 14}
    points |= {FRI - k * DAY: 100 for k in (1, 2, 3, 4)} | trailing(FRI, [500] * 24)

    row = baseline(kpis(points), FRI)

    assert row["method"] == "hour_of_week"
    assert row["n_samples"] == 3  # the daily and trailing samples are not mixed in
    assert row["expected"] == 8
    assert row["mad"] == 1


def test_one_week_alone_is_not_two_weeks_of_history():
    points = {FRI - pd.Timedelta(days=7): 7} | {FRI - k * DAY: 100 + k for k in (1, 2, 3)}

    row = baseline(kpis(points), FRI)

    assert row["method"] == "hour_of_day"
    assert row["n_samples"] == 4  # the week-old Friday is day k = 7 of the daily rule: 101 102 103 7
    assert row["expected"] == 101.5


# ------------------------------------------------------------------ what never teaches the baseline


def test_excluded_partitions_are_never_samples():
    history = kpis(trailing(FRI, [1, 2, 3, 40, 50]))

    row = baseline(history, FRI, exclude={FRI - 20 * MIN, FRI - 25 * MIN})

    assert row["n_samples"] == 3
    assert row["expected"] == 2


def test_excluded_days_can_push_a_partition_to_a_weaker_rule():
    points = {FRI - k * DAY: 10 * k for k in (1, 2, 3)} | trailing(FRI, [5, 5, 5])

    assert baseline(kpis(points), FRI)["method"] == "hour_of_day"
    row = baseline(kpis(points), FRI, exclude={FRI - 2 * DAY})
    assert (row["method"], row["expected"]) == ("trailing", 5)


def test_maintenance_excludes_its_region_only():
    other = kpis(trailing(FRI, [1, 2, 3, 40, 50]), region="eu-west")
    history = pd.concat([kpis(trailing(FRI, [1, 2, 3, 40, 50])), other], ignore_index=True)
    window = pd.DataFrame({"window_id": ["mw-1"], "start": [FRI - 25 * MIN + 30 * pd.Timedelta(seconds=1)],
                           "end": [FRI - 15 * MIN], "region": ["us-east"], "node_ids": ["n01,n02"], "reason": ["bios"]})

    out = expected_values(history, NO_STATES, pd.DatetimeIndex([FRI]), maintenance=window)

    by_region = out.set_index("region")
    # the window overlaps the partitions starting 25 (from its 30th second) and 20 minutes before
    assert (by_region.loc["us-east", "n_samples"], by_region.loc["us-east", "expected"]) == (3, 2)
    assert (by_region.loc["eu-west", "n_samples"], by_region.loc["eu-west", "expected"]) == (5, 3)


def test_rows_that_are_not_ok_are_no_samples_but_their_series_gets_a_row():
    history = pd.concat([kpis(trailing(FRI, [1, 2, 3]), kpi="sla_attainment", status="no_data"),
                         kpis(trailing(FRI, [1, 2, 3]))], ignore_index=True)
    history.loc[history["status"] == "no_data", "value"] = np.nan

    out = expected_values(history, NO_STATES, pd.DatetimeIndex([FRI]))

    sla = out[out["series"] == "sla_attainment"].iloc[0]
    assert (sla["method"], sla["n_samples"]) == ("none", 0)


# ------------------------------------------------------------------ loss-state shares


def states_frame(partition, rows):
    return pd.DataFrame([{"partition_start": partition, "region": r, "sku": s, "workload_class": w, "team": t,
                          "state": state, "gpu_minutes": m} for r, s, w, t, state, m in rows])


def test_state_shares_per_slice_and_totals():
    p = pd.Timestamp("2026-11-06T10:00:00Z")
    frame = states_frame(p, [
        ("us-east", "H100", "batch", "fraud", "productive", 4.0),
        ("us-east", "H100", "batch", "risk", "productive", 2.0),
        ("us-east", "H100", "batch", "fraud", "slowdown_compute", 2.0),
        ("us-east", "H100", "none", "none", "idle_no_demand", 8.0),
        ("eu-west", "V100", "batch", "risk", "productive", 4.0),
    ])

    shares = state_share_values(frame).set_index(["series", "region", "sku", "workload_class", "team"])["value"]

    assert shares[("share_productive", "us-east", "H100", "batch", "*")] == 0.75
    assert shares[("share_slowdown_compute", "us-east", "H100", "batch", "*")] == 0.25
    assert shares[("share_idle_no_demand", "us-east", "H100", "batch", "*")] == 0.0  # every state of the slice
    assert shares[("share_productive", "us-east", "H100", "*", "*")] == 6 / 16
    assert shares[("share_idle_no_demand", "us-east", "*", "*", "*")] == 0.5
    assert shares[("share_productive", "*", "*", "*", "*")] == 10 / 20
    # every slice's shares sum to 1 over the states
    totals = shares.groupby(level=["region", "sku", "workload_class", "team"]).sum()
    assert np.allclose(totals, 1.0)
    assert len(totals) == 3 + 2 + 2 + 1  # class slices, region x sku, region, cluster
    assert shares.index.get_level_values("series").nunique() == len(STATES)


def test_state_share_baselines_come_with_the_kpi_baselines():
    history = pd.concat([states_frame(FRI - (i + 1) * 5 * MIN, [
        ("us-east", "H100", "batch", "fraud", "productive", 10.0 - i),
        ("us-east", "H100", "batch", "fraud", "failure_loss", float(i)),
    ]) for i in range(4)], ignore_index=True)

    out = expected_values(kpis(trailing(FRI, [1, 2, 3])), history, pd.DatetimeIndex([FRI]))
    KpiBaselines.validate(out, lazy=True)

    goodput = out[(out["series"] == "share_productive") & (out["workload_class"] == "batch")].iloc[0]
    assert (goodput["method"], goodput["n_samples"]) == ("trailing", 4)
    assert goodput["expected"] == pytest.approx(0.85)  # median of 1.0 .9 .8 .7
    assert goodput["team"] == "*"
    assert set(out["series"]) == {"allocation_rate", *(f"share_{s}" for s in STATES)}


# ------------------------------------------------------------------ shape and the reference


def test_one_row_per_partition_series_and_slice():
    parts = pd.date_range(FRI, periods=3, freq="5min")
    history = pd.concat([kpis(trailing(FRI, [1, 2, 3])), kpis(trailing(FRI, [4, 5, 6]), team="fraud")], ignore_index=True)

    out = expected_values(history, NO_STATES, parts)

    assert len(out) == 3 * 2
    assert not out.duplicated(["partition_start", "series", "region", "sku", "workload_class", "team"]).any()
    # later partitions of the range use the earlier ones as trailing history when the frame holds them
    assert out["expected"].tolist() == [2, 5, 2, 5, 2, 5]


def test_empty_inputs_give_an_empty_valid_frame():
    out = expected_values(kpis({})[:0], NO_STATES, pd.DatetimeIndex([FRI]))
    assert out.empty
    KpiBaselines.validate(out)


def reference(history: pd.DataFrame, p: pd.Timestamp, exclude=()) -> tuple[str, list[float]]:
    """The module docstring's rules, written out literally for one partition and one series."""
    h = history[(history["status"] == "ok") & history["value"].notna() & (history["partition_start"] < p)]
    h = h[~h["partition_start"].isin(list(exclude))]
    ts, v = h["partition_start"], h["value"]

    def near(center):
        return (ts >= center - 30 * MIN) & (ts <= center + 30 * MIN)

    week = pd.Timedelta(days=7)
    if near(p - week).any() and near(p - 2 * week).any():
        return "hour_of_week", v[near(p - week) | near(p - 2 * week)].tolist()
    weekend = p.dayofweek >= 5
    days = [k for k in range(1, 8) if ((p - k * DAY).dayofweek >= 5) == weekend and near(p - k * DAY).any()]
    if len(days) >= 3:
        mask = np.zeros(len(h), bool)
        for k in days:
            mask |= near(p - k * DAY).to_numpy()
        return "hour_of_day", v[mask].tolist()
    trail = (ts >= p - pd.Timedelta(hours=2)) & (ts < p)
    if trail.sum() >= 3:
        return "trailing", v[trail].tolist()
    return "none", []


def reported(history: pd.DataFrame, p: pd.Timestamp) -> bool:
    """The series has a row (a sample or not) in one of p's candidate slots: p reports it."""
    ts = history.loc[history["partition_start"] < p, "partition_start"]
    weekend = p.dayofweek >= 5
    centers = [p - pd.Timedelta(days=7), p - pd.Timedelta(days=14)]
    centers += [p - k * DAY for k in range(1, 8) if ((p - k * DAY).dayofweek >= 5) == weekend]
    near = any(((ts >= c - 30 * MIN) & (ts <= c + 30 * MIN)).any() for c in centers)
    return near or ((ts >= p - pd.Timedelta(hours=2)) & (ts < p)).any()


def test_matches_a_literal_reading_of_the_rules_on_random_history():
    rng = np.random.default_rng(5)
    start = pd.Timestamp("2026-11-16T00:00:00Z")  # a Monday; the range runs through the day
    frames = []
    # series whose history begins 15 days, 6 days and 3 hours before the range, and 2 hours into it; with gaps
    for name, back in (("a", pd.Timedelta(days=15)), ("b", pd.Timedelta(days=6)), ("c", pd.Timedelta(hours=3)),
                       ("d", -pd.Timedelta(hours=2))):
        ts = pd.date_range(start - back, start + DAY, freq="5min", inclusive="left")
        keep = rng.random(len(ts)) > 0.3
        frame = kpis(dict(zip(ts[keep], rng.normal(10, 3, keep.sum()).round(2))), team=name)
        frame.loc[rng.random(len(frame)) < 0.05, "status"] = "degraded"
        frames.append(frame)
    history = pd.concat(frames, ignore_index=True)
    parts = pd.date_range(start, periods=288, freq="5min")
    exclude = set(pd.date_range(start - DAY + pd.Timedelta(hours=6), periods=30, freq="5min"))

    out = expected_values(history, NO_STATES, parts, exclude=exclude).set_index(["team", "partition_start"])

    seen = set()
    for team in ("a", "b", "c", "d"):
        for p in [*parts[::7], *parts[24:28]]:  # (d's first rows: reported with too few samples)
            method, values = reference(history[history["team"] == team], p, exclude)
            if not reported(history[history["team"] == team], p):  # nothing to judge p by: no row
                assert (team, p) not in out.index and method == "none", (team, p)
                seen.add("unreported")
                continue
            row = out.loc[(team, p)]
            seen.add(method)
            assert row["method"] == method, (team, p)
            assert row["n_samples"] == len(values)
            if values:
                med = np.median(values)
                assert row["expected"] == pytest.approx(med)
                assert row["mad"] == pytest.approx(np.median(np.abs(np.array(values) - med)))
                assert row["q10"] == pytest.approx(np.quantile(values, 0.1))
                assert row["q90"] == pytest.approx(np.quantile(values, 0.9))
    assert seen == {"hour_of_week", "hour_of_day", "trailing", "none", "unreported"}

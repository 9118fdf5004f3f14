"""The serving layer's source tables: contracts, the simulator's rows, optional sources.

A cluster without serving must run exactly as before, so the tests pin both sides: the knob off gives zero rows
(the default profile unchanged), an absent landing file is zero rows, never a wait; the knob on gives valid,
cumulative Prometheus histograms whose ``+Inf`` bucket equals the minute's requests.
"""

import math

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.models import (
    OPTIONAL_SOURCES,
    bucket_monotone,
    empty_frame,
    inf_bucket_matches_requests,
)
from gpu_health.contracts.validate import validate_frame
from gpu_health.landing import write_partition
from gpu_health.sim.scenario import default_scenario, load_scenario
from gpu_health.sim.serving import TTFT_BUCKETS, cumulative_counts
from gpu_health.sim.telemetry import Window
from gpu_health.sources.landing import LandingSource
from gpu_health.sources.read import read_window

T0 = pd.Timestamp("2026-11-03T14:00:00Z")
T1 = T0 + pd.Timedelta(minutes=10)


@pytest.fixture(scope="module")
def serving_window():
    scen = load_scenario({"seed": 7, "start": "2026-11-02T00:00:00Z", "end": "2026-11-05T00:00:00Z",
                          "cluster": {"serving": True}})
    return Window(scen, T0, T1)


def _validate(frame, table):
    return validate_frame(frame, table, start=T0, end=T1, origin="test")


def test_serving_off_by_default_and_on_messy():
    for cluster in ("default", "messy"):
        win = Window(load_scenario({"seed": 7, "cluster": cluster}), T0, T0 + pd.Timedelta(minutes=5))
        for table in OPTIONAL_SOURCES:
            assert win.table(table).empty, (cluster, table)


def test_simulated_serving_rows_meet_their_contracts(serving_window):
    req = serving_window.table("inference_requests")
    buckets = serving_window.table("inference_latency_buckets")
    assert len(req) > 0 and len(buckets) > 0
    for frame, table in ((req, "inference_requests"), (buckets, "inference_latency_buckets")):
        v = _validate(frame, table)
        assert len(v.rejects) == 0, v.rejects.head().to_string()
        assert len(v.valid) == len(frame)
    # the +Inf bucket of the latency histogram is the minute's requests, exactly
    assert inf_bucket_matches_requests(buckets, req).empty
    assert set(buckets["histogram"]) == {"latency", "ttft"}
    assert buckets.loc[buckets["histogram"] == "ttft", "model_name"].nunique() == 1  # the generative model only
    assert (req["errors"] <= req["requests"]).all()
    assert req["replicas"].min() >= 1 and (req["gpus"] >= req["replicas"]).all()


def test_the_seeds_ttft_objective_falls_between_buckets():
    # 0.3 s lies strictly between two bounds: a quantile there is interpolated (the SLO flag tests rely on it)
    assert 0.3 not in TTFT_BUCKETS and any(b < 0.3 for b in TTFT_BUCKETS) and any(0.3 < b < math.inf for b in TTFT_BUCKETS)


def test_rows_are_independent_of_the_window_that_generated_them():
    scen = load_scenario({"seed": 7, "cluster": {"serving": True}})
    wide = Window(scen, T0, T1).table("inference_latency_buckets")
    narrow = Window(scen, T0 + pd.Timedelta(minutes=5), T1).table("inference_latency_buckets")
    pd.testing.assert_frame_equal(wide[wide["ts"] >= T0 + pd.Timedelta(minutes=5)].reset_index(drop=True), narrow)


def test_a_version_rollout_serves_both_versions_for_a_while():
    scen = load_scenario({"seed": 7, "start": "2026-11-02T00:00:00Z", "cluster": {"serving": True}})
    # fraud-scorer deploys every 3 days at 10:00 UTC from the scenario's first day: 11-02, 11-05, ...
    win = Window(scen, pd.Timestamp("2026-11-05T09:55:00Z"), pd.Timestamp("2026-11-05T10:45:00Z"))
    fraud = win.table("inference_requests").query("model_name == 'fraud-scorer' and region == 'us-east'")
    per_minute = fraud.groupby("ts")["model_version"].nunique()
    assert per_minute.max() == 2 and per_minute.iloc[0] == 1 and per_minute.iloc[-1] == 1
    assert fraud.iloc[0]["model_version"] != fraud.iloc[-1]["model_version"]


def test_cumulative_counts_are_monotone_and_end_at_n():
    n = np.array([0, 1, 17, 10_000])
    c = cumulative_counts(n, np.full(4, 0.05), np.full(4, 0.5), (0.01, 0.05, 0.1, 1.0, math.inf), np.full(4, 0.999))
    assert (np.diff(c, axis=1) >= 0).all() and (c[:, -1] == n).all()


def test_contract_allows_plus_inf_in_le_only(serving_window):
    buckets = serving_window.table("inference_latency_buckets").head(30).copy()
    buckets["le"] = buckets["le"].astype("float64")
    buckets.loc[3, "le"] = -math.inf
    v = _validate(buckets, "inference_latency_buckets")
    assert set(v.rejects["row_index"]) == {3}
    req = serving_window.table("inference_requests").head(5).copy()
    req.loc[1, "latency_sum_s"] = math.inf
    v = _validate(req, "inference_requests")
    assert set(v.rejects["row_index"]) == {1} and (v.rejects["check"] == "finite").all()


def test_a_bucket_below_a_smaller_le_is_rejected(serving_window):
    buckets = serving_window.table("inference_latency_buckets").head(15).copy()  # one latency histogram-minute
    assert bucket_monotone(buckets).all()
    buckets.loc[5, "count"] = buckets.loc[4, "count"] - 1
    assert list(np.flatnonzero(~bucket_monotone(buckets))) == [5]
    v = _validate(buckets, "inference_latency_buckets")
    assert "count_non_decreasing_in_le" in set(v.rejects["check"])


def test_a_histogram_without_its_inf_bucket_is_rejected(serving_window):
    buckets = serving_window.table("inference_latency_buckets").head(15).copy()
    v = _validate(buckets.iloc[:-1], "inference_latency_buckets")
    assert "inf_bucket_present" in set(v.rejects["check"])


def test_inf_bucket_against_requests_names_the_disagreeing_minute(serving_window):
    req = serving_window.table("inference_requests").copy()
    buckets = serving_window.table("inference_latency_buckets")
    req.loc[0, "requests"] += 1
    bad = inf_bucket_matches_requests(buckets, req)
    assert len(bad) == 1 and bad.loc[0, "model_name"] == req.loc[0, "model_name"]


def test_absent_serving_landing_files_are_zero_rows(tmp_path):
    src = LandingSource(tmp_path)
    v, gaps = read_window(src, "inference_requests", T0, T1)
    assert len(v.valid) == 0 and len(v.rejects) == 0 and gaps.empty
    # a landed file is read like any other
    scen = load_scenario({"seed": 7, "cluster": {"serving": True}})
    frame = Window(scen, T0, T0 + pd.Timedelta(minutes=5)).table("inference_requests")
    write_partition(tmp_path, "inference_requests", T0, frame)
    v, _ = read_window(src, "inference_requests", T0, T1)
    assert len(v.valid) == len(frame)


def test_a_source_without_serving_tables_serves_zero_rows():
    class NoServing:
        name = "exporter"

        def tables(self):
            return frozenset({"gpu_telemetry"})

        def read(self, table, start, end):  # pragma: no cover - must not be called
            raise AssertionError(table)

    v, gaps = read_window(NoServing(), "inference_latency_buckets", T0, T1)
    assert len(v.valid) == 0 and list(v.valid.columns) == list(empty_frame("inference_latency_buckets").columns)
    assert gaps.empty

"""serving_slis: quantiles from bucket counters exactly as Prometheus' histogram_quantile computes them.

The rules are unit-tested one by one (linear interpolation within the bucket, the lowest bucket from 0, the +Inf
bucket, NaN without +Inf or observations, monotonicity), then the pipeline's p99 is compared with a real Prometheus's
``histogram_quantile(0.99, sum by (le) (increase(..._bucket[5m])))`` over the same simulated series.
"""

import math

import numpy as np
import pandas as pd
import pytest
import requests as http

from gpu_health.metrics.serving import count_at_or_below, histogram_quantile, serving_slis, threshold_on_bucket_bound
from gpu_health.evaluation.promexport import SERVING_HISTOGRAMS, write_serving_openmetrics
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window
from gpu_health_tests.services.prometheus import prometheus_factory  # noqa: F401  (fixture)

INF = math.inf
T0 = pd.Timestamp("2026-11-03T14:00:00Z")
LE = [0.1, 0.5, 1.0, INF]


def test_linear_interpolation_within_the_bucket():
    # 100 observations: 10 <= 0.1, 50 <= 0.5, 90 <= 1.0; the median's rank 50 is the top of (0.1, 0.5]
    assert histogram_quantile(0.5, LE, [10, 50, 90, 100]) == pytest.approx(0.5)
    # rank 70 lies 20/40 of the way through (0.5, 1.0]
    assert histogram_quantile(0.7, LE, [10, 50, 90, 100]) == pytest.approx(0.75)


def test_the_lowest_bucket_starts_at_zero():
    assert histogram_quantile(0.05, LE, [10, 50, 90, 100]) == pytest.approx(0.05)


def test_a_rank_in_the_inf_bucket_returns_the_highest_finite_bound():
    assert histogram_quantile(0.99, LE, [10, 50, 90, 100]) == 1.0


def test_undefined_without_inf_bucket_or_observations():
    assert math.isnan(histogram_quantile(0.5, [0.1, 0.5], [1, 2]))
    assert math.isnan(histogram_quantile(0.5, LE, [0, 0, 0, 0]))
    assert math.isnan(histogram_quantile(0.5, [INF], [5]))
    assert histogram_quantile(-0.1, LE, [1, 2, 3, 4]) == -INF and histogram_quantile(1.5, LE, [1, 2, 3, 4]) == INF


def test_buckets_are_sorted_and_made_monotone():
    assert histogram_quantile(0.7, [INF, 1.0, 0.1, 0.5], [100, 90, 10, 50]) == pytest.approx(0.75)
    # a racing scrape left 0.5 below 0.1: the running maximum is taken
    assert histogram_quantile(0.1, LE, [10, 8, 90, 100]) == pytest.approx(0.1)


def test_count_at_a_threshold_is_measured_on_a_bound_and_interpolated_between():
    assert count_at_or_below(0.5, LE, [10, 50, 90, 100]) == (50.0, False)
    count, interpolated = count_at_or_below(0.3, LE, [10, 50, 90, 100])
    assert interpolated and count == pytest.approx(30.0)
    assert count_at_or_below(5.0, LE, [10, 50, 90, 100]) == (90.0, True)  # past the last finite bound
    assert threshold_on_bucket_bound(0.5, LE) and not threshold_on_bucket_bound(0.3, LE)


@pytest.fixture(scope="module")
def serving():
    win = Window(load_scenario({"seed": 7, "cluster": {"serving": True}}), T0, T0 + pd.Timedelta(minutes=15))
    return win.table("inference_requests"), win.table("inference_latency_buckets")


def test_one_row_per_deployment_and_partition(serving):
    req, buckets = serving
    slis = serving_slis(req, buckets)
    assert len(slis) == len(req.assign(p=req["ts"].dt.floor("5min")).drop_duplicates(["p", "region", "model_name", "model_version"]))
    assert (slis["p50_s"] <= slis["p95_s"]).all() and (slis["p95_s"] <= slis["p99_s"]).all()
    one = slis.iloc[0]
    part = req[(req["ts"].dt.floor("5min") == one["partition_start"]) & (req["model_name"] == one["model_name"])
               & (req["region"] == one["region"]) & (req["model_version"] == one["model_version"])]
    assert one["requests"] == part["requests"].sum() and one["errors"] == part["errors"].sum()
    assert one["error_rate"] == pytest.approx(part["errors"].sum() / part["requests"].sum())
    gen = slis[slis["ttft_p99_s"].notna()]
    assert set(gen["model_name"]) == {"support-assistant"}


def test_p99_equals_prometheus_histogram_quantile(serving, tmp_path, prometheus_factory):  # noqa: F811
    req, buckets = serving
    url = prometheus_factory(write_serving_openmetrics(buckets, tmp_path / "serving.om", requests=req))
    slis = serving_slis(req, buckets)
    compared = 0
    for histogram, column in (("latency", "p99_s"), ("ttft", "ttft_p99_s")):
        family = SERVING_HISTOGRAMS[histogram]
        for _, row in slis[slis[column].notna()].iterrows():
            end = row["partition_start"] + pd.Timedelta(minutes=5)
            sel = ",".join(f'{k}="{row[k]}"' for k in ("region", "model_name", "model_version"))
            query = f"histogram_quantile(0.99, sum by (le) (increase({family}_bucket{{{sel}}}[5m])))"
            got = http.get(f"{url}/api/v1/query", params={"query": query, "time": end.timestamp()}, timeout=10).json()
            assert got["status"] == "success", got
            result = got["data"]["result"]
            assert len(result) == 1, (query, result)
            assert float(result[0]["value"][1]) == pytest.approx(row[column], rel=1e-12, abs=1e-12), query
            compared += 1
    assert compared >= 12  # both regions' deployments in three partitions, plus the TTFT histograms


# --- the assets, in-process on a temporary SQLite warehouse ---------------------------------------------------
SERVING_ASSETS = ["inference_requests", "inference_latency_buckets", "serving_slis"]


def _materialize(url: str, scenario: str):
    import dagster as dg

    from gpu_health.defs.build import build_definitions
    from gpu_health.defs.resources import TelemetrySourceResource, WarehouseIOManager, WarehouseResource
    from gpu_health.settings import Settings

    res = {"warehouse": WarehouseResource(url=url), "warehouse_io_manager": WarehouseIOManager(url=url),
           "source": TelemetrySourceResource(kind="simulator", scenario=scenario)}
    defs = build_definitions(Settings(), res)
    return dg.materialize(list(defs.assets), selection=[dg.AssetKey(a) for a in SERVING_ASSETS],
                          partition_key=T0.strftime("%Y-%m-%d-%H:%M"), resources=res,
                          run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})


def test_serving_slis_asset_stores_the_partitions_slis(sqlite_url, tmp_path, serving):
    from gpu_health.storage.warehouse import Warehouse

    path = tmp_path / "serving.yaml"
    path.write_text("seed: 7\nstart: 2026-11-02T00:00:00Z\nend: 2026-11-09T00:00:00Z\ncluster: {serving: true}\n")
    result = _materialize(sqlite_url, str(path))
    assert result.success
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks["latency_count_matches_requests"].passed
    stored = Warehouse(sqlite_url).read_window("serving_slis", T0, T0 + pd.Timedelta(minutes=5))
    req, buckets = serving
    first = req["ts"] < T0 + pd.Timedelta(minutes=5)
    expected = serving_slis(req[first], buckets[buckets["ts"] < T0 + pd.Timedelta(minutes=5)])
    assert len(stored) == len(expected) > 0
    pd.testing.assert_series_equal(stored["p99_s"].reset_index(drop=True), expected["p99_s"], check_names=False,
                                   check_dtype=False)


def test_a_cluster_without_serving_gets_empty_serving_tables(sqlite_url, tmp_path):
    from gpu_health.storage.warehouse import Warehouse

    path = tmp_path / "plain.yaml"
    path.write_text("seed: 7\nstart: 2026-11-02T00:00:00Z\nend: 2026-11-09T00:00:00Z\ncluster: {gpus: 120}\n")
    result = _materialize(sqlite_url, str(path))
    assert result.success
    wh = Warehouse(sqlite_url)
    for table in SERVING_ASSETS:
        assert wh.read_window(table, T0, T0 + pd.Timedelta(minutes=5)).empty, table

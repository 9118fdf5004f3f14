"""inference_requests / inference_latency_buckets from a model server's histograms in a real Prometheus.

Fifteen simulated minutes of serving traffic are exposed as a ``prometheus_client`` service exports them -- per
deployment (region, model_name, model_version) the latency and TTFT histograms (``_bucket{le}``, ``_count`` split by
``status``, ``_sum``), a queue-depth and a replicas gauge -- scraped once a minute and backfilled with promtool; one
server restarts at minute 8 (every counter starts again from 0). The adapter must give back the simulated tables.
"""

import math

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts.validate import validate_frame
from gpu_health.metrics.serving import serving_slis
from gpu_health.evaluation.promexport import SERVING_HISTOGRAMS, scrape_to_openmetrics
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window
from gpu_health.sources.prometheus import PrometheusSource
from gpu_health.sources.serving_metrics import parse_families
from gpu_health_tests.services.prometheus import prometheus_factory  # noqa: F401  (fixture)

T0 = pd.Timestamp("2026-11-03T14:00:00Z")
MIN = pd.Timedelta(minutes=1)
N = 15
KEY = ["region", "model_name", "model_version"]
RESTART = 8  # the minute one deployment's server restarts


@pytest.fixture(scope="module")
def simulated():
    win = Window(load_scenario({"seed": 7, "cluster": {"serving": True}}), T0, T0 + N * MIN)
    return win.table("inference_requests"), win.table("inference_latency_buckets")


def _le(le: float) -> str:
    return "+Inf" if math.isinf(le) else repr(float(le))


def scrapes(req: pd.DataFrame, buckets: pd.DataFrame, families: dict) -> list[str]:
    """The server's /metrics at the end of each minute (and a zero scrape the minute before the first): counters
    cumulative since the server started; the restarted deployment counts from 0 again at RESTART."""
    restarted = tuple(req.sort_values(KEY).iloc[0][KEY])
    texts = []
    for i in range(-1, N):
        lines = {"lat": [], "ttft": [], "q": [], "r": []}
        for key, g in req.groupby(KEY):
            since = RESTART if key == restarted and i >= RESTART else 0
            done = g[(g["ts"] >= T0 + since * MIN) & (g["ts"] <= T0 + i * MIN)]
            lab = ",".join(f'{k}="{v}"' for k, v in zip(KEY, key))
            ok, err = int(done["requests"].sum() - done["errors"].sum()), int(done["errors"].sum())
            lat = families["latency"]
            lines["lat"] += [f'{lat}_count{{{lab},status="ok"}} {ok}', f'{lat}_count{{{lab},status="error"}} {err}',
                             f'{lat}_sum{{{lab}}} {float(done["latency_sum_s"].sum())!r}']
            for histogram, out in (("latency", "lat"), ("ttft", "ttft")):
                b = buckets[(buckets["histogram"] == histogram) & (buckets["ts"] >= T0 + since * MIN)
                            & (buckets["ts"] <= T0 + i * MIN)]
                b = b[(b["region"] == key[0]) & (b["model_name"] == key[1]) & (b["model_version"] == key[2])]
                les = sorted(buckets[(buckets["histogram"] == histogram) & (buckets["model_name"] == key[1])]["le"].unique())
                counts = b.groupby("le")["count"].sum()
                lines[out] += [f'{families[histogram]}_bucket{{{lab},le="{_le(le)}"}} {int(counts.get(le, 0))}' for le in les]
            now = g[g["ts"] == T0 + max(i, 0) * MIN]
            if len(now) and i >= 0:
                lines["q"].append(f'{families["queue_depth"]}{{{lab}}} {float(now["queue_depth"].iloc[0])!r}')
                lines["r"].append(f'{families["replicas"]}{{{lab}}} {int(now["replicas"].iloc[0])}')
        text = [f'# TYPE {families["latency"]} histogram', *lines["lat"], f'# TYPE {families["ttft"]} histogram',
                *lines["ttft"], f'# TYPE {families["queue_depth"]} gauge', *lines["q"],
                f'# TYPE {families["replicas"]} gauge', *lines["r"]]
        texts.append("\n".join(text) + "\n")
    return texts


@pytest.fixture
def served(simulated, prometheus_factory, tmp_path_factory):  # noqa: F811
    req, buckets = simulated
    families = parse_families(None)
    times = [T0 + i * MIN + pd.Timedelta(seconds=59) for i in range(-1, N)]  # a scrape near each minute's end
    om = scrape_to_openmetrics(scrapes(req, buckets, families), times, tmp_path_factory.mktemp("om") / "serving.om")
    return prometheus_factory(om)


def _read(url: str, table: str, **kw) -> pd.DataFrame:
    source = PrometheusSource(url, serving=True, **kw)
    assert {"inference_requests", "inference_latency_buckets"} <= source.tables()
    frame = source.read(table, T0, T0 + N * MIN).frame
    v = validate_frame(frame, table, start=T0, end=T0 + N * MIN, origin="test")
    assert len(v.rejects) == 0, v.rejects.to_string()
    return frame


def test_requests_errors_and_gauges_come_back_as_simulated(simulated, served):
    req, _ = simulated
    got = _read(served, "inference_requests").set_index(["ts", *KEY]).sort_index()
    want = req.set_index(["ts", *KEY]).sort_index()
    assert got.index.equals(want.index)  # every deployment's every minute, the restart included
    assert (got["requests"].to_numpy() == want["requests"].to_numpy()).all()
    assert (got["errors"].to_numpy() == want["errors"].to_numpy()).all() and want["errors"].sum() > 0
    np.testing.assert_allclose(got["latency_sum_s"], want["latency_sum_s"], rtol=1e-9)
    np.testing.assert_allclose(got["queue_depth"], want["queue_depth"].astype(float), rtol=1e-12)
    assert (got["replicas"].astype(int).to_numpy() == want["replicas"].astype(int).to_numpy()).all()
    assert got["gpus"].isna().all()  # no GPUs gauge exported: unknown, not 0


def test_bucket_counts_and_their_quantiles_come_back_as_simulated(simulated, served):
    req, buckets = simulated
    got = _read(served, "inference_latency_buckets")
    cols = ["ts", *KEY, "histogram", "le"]
    merged = buckets.merge(got, on=cols, how="outer", suffixes=("_sim", "_prom"), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"].head()
    assert (merged["count_sim"] == merged["count_prom"]).all()
    assert set(got["histogram"]) == set(SERVING_HISTOGRAMS)
    # the same SLIs (p50 / p95 / p99, TTFT p99) from the adapter's tables as from the simulator's
    a = serving_slis(_read(served, "inference_requests"), got).set_index(["partition_start", *KEY]).sort_index()
    b = serving_slis(req, buckets).set_index(["partition_start", *KEY]).sort_index()
    pd.testing.assert_frame_equal(a, b, check_dtype=False)


def test_without_the_flag_or_without_a_model_server_there_is_no_serving_data(served, prometheus_factory, tmp_path):  # noqa: F811
    assert not {"inference_requests", "inference_latency_buckets"} & PrometheusSource(served, region="lab").tables()
    om = scrape_to_openmetrics(['# TYPE up gauge\nup{job="dcgm"} 1\n'] * 3, [T0 + i * MIN for i in range(3)],
                               tmp_path / "up.om")
    source = PrometheusSource(prometheus_factory(om), region="lab", serving=True)
    assert source.read("inference_requests", T0 + MIN, T0 + 3 * MIN).frame.empty
    assert source.read("inference_latency_buckets", T0 + MIN, T0 + 3 * MIN).frame.empty


def test_a_servers_own_family_names_are_configured():
    fam = parse_families("latency=vllm:e2e_request_latency_seconds, ttft=vllm:time_to_first_token_seconds")
    assert fam["latency"] == "vllm:e2e_request_latency_seconds" and fam["queue_depth"] == "inference_queue_depth"
    with pytest.raises(ValueError, match="not one of"):
        parse_families("p99=whatever")

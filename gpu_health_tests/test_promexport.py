"""promexport -> promtool -> Prometheus -> PrometheusSource gives the contract frames back."""

import numpy as np
import pandas as pd
import pytest
import requests

from gpu_health.contracts import columns
from gpu_health.contracts.models import GpuTelemetry, NetworkTelemetry, NodeTelemetry
from gpu_health.evaluation.promexport import backfill, escape_label_value, write_openmetrics, write_openmetrics_chunks
from gpu_health.sources import dcgm_fields as F
from gpu_health.sources.prometheus import PrometheusSource
from gpu_health_tests.services.prometheus import prometheus_factory  # noqa: F401  (fixture)

T0 = pd.Timestamp("2026-02-02 08:00", tz="UTC")
MIN = pd.Timedelta(minutes=1)
N = 6
TS = [T0 + i * MIN for i in range(N)]
# node-b's region needs PromQL and OpenMetrics escaping on the way through.
REGION_A, REGION_B = "us-east", 'eu-"west"\\2'
NAN = np.nan


def gpu_frame() -> pd.DataFrame:
    rows = []
    specs = [
        # node, region, index, uuid, sku, jobs per minute
        ("node-a", REGION_A, 0, "GPU-a0", "NVIDIA H100 80GB HBM3", ["job-1"] * 3 + ["job-2"] * 3),
        ("node-a", REGION_A, 1, "GPU-a1", "NVIDIA H100 80GB HBM3", [None] * N),
        ("node-b", REGION_B, 0, "GPU-b0", "NVIDIA A100-SXM4-80GB", ["4242"] * N),
        ("node-b", REGION_B, 1, "GPU-b1", "NVIDIA A100-SXM4-80GB", [None] * N),
    ]
    for node, region, idx, uuid, sku, jobs in specs:
        a = node == "node-a"
        for i, ts in enumerate(TS):
            rows.append(
                dict(
                    ts=ts, region=region, node_id=node, gpu_index=idx, gpu_uuid=uuid, sku=sku, job_id=jobs[i],
                    gpu_util_pct=10.0 * i + idx + 0.5, sm_active=(0.1 * i if a else NAN),
                    tensor_active=(0.05 * i + 0.01 if a else NAN), fb_used_mib=1000.0 * i + 17,
                    power_w=300.25 + i, temp_c=40.0 + i + idx, sm_clock_mhz=1980.0 - i,
                    throttle_reasons=(0x4 if (a and i == 2) else 0) if a else pd.NA,
                    ecc_sbe_delta=([0, 2, 0, 1, 0, 3][i] if uuid == "GPU-a0" else 0) if a else pd.NA,
                    ecc_dbe_delta=(1 if (uuid == "GPU-a1" and i == 4) else 0) if a else pd.NA,
                    xid={("GPU-a0", 1): 13, ("GPU-a0", 4): 13, ("GPU-b0", 2): 79}.get((uuid, i), 0),
                )
            )
    return GpuTelemetry.validate(pd.DataFrame(rows))


def node_frame() -> pd.DataFrame:
    rows = []
    for node, region, sku, kernel in (
        ("node-a", REGION_A, "NVIDIA H100 80GB HBM3", "6.8.0-45-generic"),
        ("node-b", REGION_B, "NVIDIA A100-SXM4-80GB", "5.15.0-1071-nvidia"),
    ):
        for i, ts in enumerate(TS):
            degraded = (node == "node-a" and i == 4) or (node == "node-b" and i == 2)  # DBE / Xid 79
            rows.append(
                dict(
                    ts=ts, region=region, node_id=node, sku=sku, cpu_util_pct=12.5 + 7 * i, mem_used_pct=33.3 + i,
                    disk_read_mbps=250.0 + i, disk_write_mbps=80.5, nvme_util_pct=40.0 + i,
                    driver_version="550.54.15" if node == "node-a" else "535.183.01", kernel_version=kernel,
                    health="degraded" if degraded else "ok",
                )
            )
    return NodeTelemetry.validate(pd.DataFrame(rows))


def network_frame() -> pd.DataFrame:
    rows = []
    for node, region, link in (("node-a", REGION_A, "mlx5_0"), ("node-a", REGION_A, "mlx5_1"), ("node-b", REGION_B, "mlx5_0:2")):
        for i, ts in enumerate(TS):
            up = not (link == "mlx5_1" and i == 5)
            rows.append(
                dict(
                    ts=ts, region=region, node_id=node, link_id=link, rx_gbps=(150.0 + i if up else 0.0),
                    tx_gbps=(140.5 if up else 0.0), packet_loss_pct=([0.05, 0.04, 0.03, 0.01, 0.02, 0.0][i] if up else 0.0),
                    retransmits=[0, 5, 1, 2, 0, 0][i], latency_us=1.5 + 0.1 * i, link_up=up,
                )
            )
    return NetworkTelemetry.validate(pd.DataFrame(rows))


def job_frame() -> pd.DataFrame:
    steps = [5, 5, 0, 0, 7, 0]
    return pd.DataFrame({"ts": TS, "job_id": ["job-1"] * N, "steps": steps})


# Driver reload / reboot on node-a at minute 3. Test values are chosen so that each
# counter's new value is below its old one: otherwise a reset is indistinguishable
# from an ordinary increase (inherent to counters).
RESETS = [("GPU-a0", T0 + 3 * MIN), ("node-a", T0 + 3 * MIN)]


@pytest.fixture
def round_trip(prometheus_factory, tmp_path):  # noqa: F811
    gpu, node, net = gpu_frame(), node_frame(), network_frame()
    a, b = gpu["node_id"] == "node-a", gpu["node_id"] == "node-b"
    na, nb = node["node_id"] == "node-a", node["node_id"] == "node-b"
    # node-a: canonical dcgm-exporter labels; node-b: the lower-case / HPC-job variants,
    # with unsupported fields written as DCGM blank sentinels.
    fa = write_openmetrics(tmp_path / "a.om", gpu=gpu[a], node=node[na], network=net[net.node_id == "node-a"],
                           jobs=job_frame(), counter_resets=RESETS)
    fb = write_openmetrics(tmp_path / "b.om", gpu=gpu[b], node=node[nb], network=net[net.node_id == "node-b"], nulls="sentinel",
                           gpu_labels={"node_id": "hostname", "gpu_uuid": "uuid", "sku": "model_name", "job_id": "hpc_job"})
    url = prometheus_factory([fa.paths[0], fb.paths[0]])
    return url, gpu, node, net, tmp_path


def _sorted(df, keys):
    """Rows in key order; nulls of text columns as None (the reader's and the contract's differ)."""
    df = df.sort_values(keys).reset_index(drop=True)
    for col in df.columns[df.dtypes == object]:
        df[col] = df[col].astype(object).where(df[col].notna(), None)
    return df


def test_round_trip_gpu(round_trip):
    url, gpu, *_ , tmp = round_trip
    text_b = (tmp / "b.om").read_text()
    assert 'hostname="node-b"' in text_b and 'hpc_job="4242"' in text_b and str(F.DCGM_INT64_SENTINEL) in text_b
    got = PrometheusSource(url).read("gpu_telemetry", T0, T0 + N * MIN).frame
    GpuTelemetry.validate(got, lazy=True)
    assert list(got.columns) == columns("gpu_telemetry")
    keys = ["ts", "gpu_uuid"]
    pd.testing.assert_frame_equal(_sorted(got, keys), _sorted(gpu, keys), check_dtype=False, rtol=1e-9)
    a0 = got[got.gpu_uuid == "GPU-a0"].set_index("ts")
    assert list(a0["ecc_sbe_delta"]) == [0, 2, 0, 1, 0, 3]  # across the reset at minute 3
    assert list(a0["xid"]) == [0, 13, 0, 0, 13, 0]  # a repeat of the same code is seen too


def test_round_trip_node_and_network(round_trip):
    url, _, node, net, _ = round_trip
    source = PrometheusSource(url)
    got_node = source.read("node_telemetry", T0, T0 + N * MIN).frame
    NodeTelemetry.validate(got_node, lazy=True)
    keys = ["ts", "node_id"]
    pd.testing.assert_frame_equal(_sorted(got_node, keys), _sorted(node, keys), check_dtype=False, rtol=1e-9)
    got_net = source.read("network_telemetry", T0, T0 + N * MIN).frame
    NetworkTelemetry.validate(got_net, lazy=True)
    keys = ["ts", "node_id", "link_id"]
    pd.testing.assert_frame_equal(_sorted(got_net, keys), _sorted(net, keys), check_dtype=False, rtol=1e-9, atol=1e-9)


def test_partial_window_and_region_selector(round_trip):
    url, gpu, *_ = round_trip
    source = PrometheusSource(url, selector={"region": REGION_B})
    got = source.read("gpu_telemetry", T0 + 2 * MIN, T0 + 4 * MIN).frame
    want = gpu[(gpu.region == REGION_B) & gpu.ts.between(T0 + 2 * MIN, T0 + 3 * MIN)]
    keys = ["ts", "gpu_uuid"]
    pd.testing.assert_frame_equal(_sorted(got, keys), _sorted(want, keys), check_dtype=False)
    assert got.set_index(["ts", "gpu_uuid"]).loc[(T0 + 2 * MIN, "GPU-b0"), "xid"] == 79


def test_training_last_step_timestamp(round_trip):
    url, *_ = round_trip
    resp = requests.get(f"{url}/api/v1/query", params={"query": f'{F.TRAINING_LAST_STEP}{{job_id="job-1"}}', "time": (T0 + 5 * MIN).timestamp()})
    value = float(resp.json()["data"]["result"][0]["value"][1])
    assert value == (T0 + 4 * MIN).timestamp()  # last minute with steps > 0


def test_openmetrics_layout(tmp_path):
    summary = write_openmetrics(tmp_path / "x.om", gpu=gpu_frame(), node=node_frame(), network=network_frame(), jobs=job_frame())
    text = (tmp_path / "x.om").read_text()
    assert text.endswith("# EOF\n")
    names = [line.split("{", 1)[0] for line in text.splitlines() if not line.startswith("#")]
    seen, families = set(), []
    for name in names:  # each family contiguous
        if not families or families[-1] != name:
            assert name not in seen, f"{name} is interleaved"
            families.append(name)
            seen.add(name)
    series: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, ts_text = line.rsplit(" ", 1)
        key, ts = head.rsplit(" ", 1)[0], int(ts_text)
        assert series.get(key, -1) < ts, f"{key} not in time order"
        series[key] = ts
    assert summary.samples[F.XID_GAUGE] == len(gpu_frame())
    assert f"# TYPE {F.NODE_CPU_SECONDS[:-6]} counter" in text


def test_chunked_files_backfill_the_same(tmp_path, prometheus_factory):  # noqa: F811
    gpu = gpu_frame()
    summary = write_openmetrics_chunks(tmp_path / "chunks", gpu=gpu, chunk="2min")
    assert len(summary.paths) > 2 and all(p.read_text().endswith("# EOF\n") for p in summary.paths)
    url = prometheus_factory(tmp_path / "chunks")  # a directory of chunk files
    got = PrometheusSource(url).read("gpu_telemetry", T0, T0 + N * MIN).frame
    keys = ["ts", "gpu_uuid"]
    want = gpu.copy()
    # node-b's unsupported fields were omitted (nulls="omit"): still null.
    pd.testing.assert_frame_equal(_sorted(got, keys), _sorted(want, keys), check_dtype=False, rtol=1e-9)


def test_label_escaping_and_validation():
    assert escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    with pytest.raises(ValueError, match="not a label"):
        write_openmetrics("/dev/null", gpu=gpu_frame(), gpu_labels={"node_id": "host"})


def test_backfill_reports_promtool_errors(tmp_path):
    bad = tmp_path / "bad.om"
    bad.write_text("this is not openmetrics\n")
    with pytest.raises(RuntimeError, match="promtool"):
        backfill(bad, tmp_path / "data")

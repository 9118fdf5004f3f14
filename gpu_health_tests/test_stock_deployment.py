"""A stock deployment end to end: dcgm-exporter as it labels series, no node-exporter, Slurm dumps.

The issue's user: a real Prometheus (backfilled with promtool) holding ten
minutes of dcgm-exporter series for two nodes, labelled exactly as the
exporter labels them (``gpu``, ``UUID``, ``device``, ``modelName``,
``Hostname``, ``DCGM_FI_DRIVER_VERSION``, ``hpc_job`` from its HPC job
mapping; no ``region``), one profiling field absent
(``DCGM_FI_PROF_SM_ACTIVE``: not in the default counters), DCGM's "not
supported" sentinel on one field (``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` on a node
without ECC), an Xid; no node-exporter at all; the scheduler tables from a
``sacct`` dump, the rest from a landing zone. Only documented configuration
is used: ``gpu-health run`` flags.

Expected rows are computed here from the same generator that writes the
scrape text (not from the pipeline's own writer), so every GPU-minute is
checked value by value.
"""

import json
import os

import numpy as np
import pandas as pd
import pytest

from gpu_health.contracts import empty_frame
from gpu_health.landing import write_partition
from gpu_health.evaluation.promexport import scrape_to_openmetrics
from gpu_health.sources import dcgm_fields as F
from gpu_health.evaluation.promexport import backfill
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.services.prometheus import PrometheusServer, require_binary
from gpu_health_tests.test_deploy_kit import dashboard_exprs

T0 = pd.Timestamp("2026-03-02T10:00:00Z")
MIN = pd.Timedelta(minutes=1)
MINUTES = 10
SKU = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15"
NODES = {"dgx-a01": ["GPU-0b8a5a3c-61d1-4f1e-9d2a-1c0f7e2a9a01", "GPU-0b8a5a3c-61d1-4f1e-9d2a-1c0f7e2a9a02"],
         "dgx-a02": ["GPU-7d21e9f4-2c3b-4a5e-8f60-3b9d0c1e2b01", "GPU-7d21e9f4-2c3b-4a5e-8f60-3b9d0c1e2b02"]}
NO_ECC_NODE = "dgx-a02"  # DCGM answers "not supported" (int64 blank) for its ECC counters
JOB, JOB_FROM = "4242", 2  # Slurm job on dgx-a01's two GPUs from minute 2 on (dcgm-exporter hpc_job label)
XID_GPU, XID_MINUTE, XID_CODE = ("dgx-a01", 1), 6, 13
INT64_BLANK = F.dcgm_blank_value("int")


def _values(node: str, g: int, k: int) -> dict:
    """The fields of one GPU in minute ``k`` (k = -1 is the minute before the window)."""
    n = list(NODES).index(node)
    busy = node == "dgx-a01" and k >= JOB_FROM
    sbe_total = (k + 1) * (g + 1) + n  # a cumulative counter: increase (g + 1) per minute
    return {
        "DCGM_FI_DEV_GPU_UTIL": float(90 + (k + g) % 7 if busy else 0),
        "DCGM_FI_DEV_FB_USED": float(61234 + 10 * k if busy else 1),
        "DCGM_FI_DEV_SM_CLOCK": float(1980 if busy else 345),
        "DCGM_FI_DEV_GPU_TEMP": float(41 + n + g + (k % 3)),
        "DCGM_FI_DEV_POWER_USAGE": round(612.125 + 3.5 * k + g if busy else 71.25 + g, 3),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(0.41 + 0.01 * g if busy else 0.0, 6),
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": float(0 if busy else 1),  # 0x1 = gpu_idle
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": float(sbe_total),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": None if node == NO_ECC_NODE else 0.0,
        "DCGM_FI_DEV_XID_ERRORS": float(XID_CODE if (node, g) == XID_GPU and k >= XID_MINUTE else 0),
    }


KINDS = {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "counter", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "counter"}


def scrape(k: int) -> str:
    """dcgm-exporter's /metrics text of both nodes in minute ``k`` (one exporter per node, same format)."""
    lines = []
    for metric in _values("dgx-a01", 0, 0):
        lines.append(f"# HELP {metric} {metric}.")
        lines.append(f"# TYPE {metric} {KINDS.get(metric, 'gauge')}")
        for node, uuids in NODES.items():
            for g, uuid in enumerate(uuids):
                v = _values(node, g, k)[metric]
                text = INT64_BLANK if v is None else (str(int(v)) if float(v).is_integer() else f"{v:.6f}")
                job = f',hpc_job="{JOB}"' if node == "dgx-a01" and k >= JOB_FROM else ""
                lines.append(f'{metric}{{gpu="{g}",UUID="{uuid}",device="nvidia{g}",modelName="{SKU}",'
                             f'Hostname="{node}",DCGM_FI_DRIVER_VERSION="{DRIVER}"{job}}} {text}')
    return "\n".join(lines) + "\n"


def expected_gpu_rows() -> pd.DataFrame:
    rows = []
    for k in range(MINUTES):
        for node, uuids in NODES.items():
            for g, uuid in enumerate(uuids):
                v, prev = _values(node, g, k), _values(node, g, k - 1)
                dbe = None if v["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] is None else 0
                rows.append({
                    "ts": T0 + k * MIN, "region": "lab", "node_id": node, "gpu_index": g, "gpu_uuid": uuid, "sku": SKU,
                    "job_id": JOB if node == "dgx-a01" and k >= JOB_FROM else None,
                    "gpu_util_pct": v["DCGM_FI_DEV_GPU_UTIL"], "sm_active": np.nan,
                    "tensor_active": v["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"], "fb_used_mib": v["DCGM_FI_DEV_FB_USED"],
                    "power_w": v["DCGM_FI_DEV_POWER_USAGE"], "temp_c": v["DCGM_FI_DEV_GPU_TEMP"],
                    "sm_clock_mhz": v["DCGM_FI_DEV_SM_CLOCK"],
                    "throttle_reasons": int(v["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]),
                    "ecc_sbe_delta": int(v["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] - prev["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"]),
                    "ecc_dbe_delta": dbe, "xid": XID_CODE if (node, g) == XID_GPU and k == XID_MINUTE else 0,
                })
    return pd.DataFrame(rows)


def sacct_dump() -> str:
    """``sacct --parsable2`` of the job on dgx-a01 and one still pending (cluster clock in UTC)."""
    t = lambda delta: (T0 + delta).strftime("%Y-%m-%dT%H:%M:%S")  # noqa: E731
    header = "JobID|JobName|User|Account|Partition|NodeList|NNodes|NCPUs|State|Submit|Start|End|ReqMem|ReqTRES|AllocTRES"
    return "\n".join([
        header,
        f"{JOB}|train|alice|vision|gpu|dgx-a01|1|32|RUNNING|{t(pd.Timedelta(seconds=30))}|{t(pd.Timedelta(seconds=90))}|"
        f"Unknown|64G|cpu=32,gres/gpu=2,mem=64G,node=1|cpu=32,gres/gpu=2,mem=64G,node=1",
        f"4243|sweep|bob|nlp|gpu|None assigned|1|8|PENDING|{t(pd.Timedelta(minutes=3))}|Unknown|Unknown|32G|"
        f"cpu=8,gres/gpu=4,mem=32G,node=1|",
    ]) + "\n"


def squeue_json() -> str:
    """``squeue --json`` (Slurm OpenAPI v0.0.37 shape) holding a job submitted in the second partition."""
    return json.dumps({"jobs": [{
        "job_id": 4244, "name": "eval", "user_name": "carol", "account": "nlp", "partition": "gpu",
        "job_state": "PENDING", "state_reason": "Resources", "submit_time": int((T0 + 7 * MIN).timestamp()),
        "start_time": 0, "node_count": 1, "cpus": 8, "tres_req_str": "cpu=8,mem=32G,node=1,billing=8,gres/gpu=8",
        "nodes": "", "priority": 100}]})


def landing_zone(root, day_gpus: int = 4):
    """The tables neither Prometheus nor Slurm holds: runtime metrics, changes, capacity, calendar."""
    for table in ("job_runtime_metrics", "change_events"):
        for p in range(MINUTES // 5):
            write_partition(root, table, T0 + 5 * p * MIN, empty_frame(table))
    cost = pd.DataFrame({"date": [T0.date()], "region": ["lab"], "sku": [SKU], "capacity_gpus": [day_gpus],
                         "reserved_gpus": [day_gpus], "reserved_gpu_hour_usd": [2.5], "on_demand_gpu_hour_usd": [6.0],
                         "on_demand_gpu_hours": [0.0]})
    write_partition(root, "cost_capacity", T0.normalize(), cost.astype(empty_frame("cost_capacity").dtypes.to_dict()))
    write_partition(root, "maintenance_windows", None, empty_frame("maintenance_windows"))


def _stock_openmetrics(path):
    # scrapes 15 s into each minute, from the minute before the window (counters need it)
    times = [T0 + k * MIN + pd.Timedelta(seconds=15) for k in range(-1, MINUTES)]
    return scrape_to_openmetrics([scrape(k) for k in range(-1, MINUTES)], times, path)


@pytest.fixture
def stock_prometheus(prometheus_factory, tmp_path):
    return prometheus_factory(_stock_openmetrics(tmp_path / "stock.om"))


def _run(capsys, *argv):
    from gpu_health.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr() if capsys is not None else ("", "")
    return code, out, err


@pytest.fixture(scope="module")
def stock_run(tmp_path_factory):
    """The issue's run, once for the module: ``(warehouse URL, summary)``."""
    import contextlib
    import io

    from gpu_health.cli import main

    tmp = tmp_path_factory.mktemp("stock")
    require_binary("promtool")
    backfill(_stock_openmetrics(tmp / "stock.om"), tmp / "data", parallel=2)
    server = PrometheusServer(tmp / "data", tmp)
    prom = server.start()
    try:
        landing, slurm, url = tmp / "landing", tmp / "slurm", f"sqlite:///{tmp / 'wh.db'}"
        landing_zone(landing)
        slurm.mkdir()
        (slurm / "sacct_now.txt").write_text(sacct_dump())
        (slurm / "squeue_now.json").write_text(squeue_json())
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["run", "--start", "2026-03-02T10:00:00Z", "--end", "2026-03-02T10:10:00Z",
                         "--source", "prometheus", "--prometheus-url", prom, "--prometheus-region", "lab",
                         "--slurm-dir", str(slurm), "--landing", str(landing), "--warehouse", url, "--quiet"])
        assert code == 0, err.getvalue()
        yield url, json.loads(out.getvalue())
    finally:
        server.stop()


def test_stock_dcgm_exporter_without_node_exporter_lands_every_gpu_minute(stock_run):
    url, summary = stock_run
    assert summary["source"] == "prometheus" and summary["partitions"] == 2
    wh = Warehouse(url)

    got = wh.read_window("gpu_telemetry").sort_values(["ts", "node_id", "gpu_index"]).reset_index(drop=True)
    want = expected_gpu_rows().sort_values(["ts", "node_id", "gpu_index"]).reset_index(drop=True)
    assert len(got) == len(want) == MINUTES * 4  # every GPU-minute, none invented
    for col in want.columns:
        g, w = got[col], want[col]
        if col in ("ts",):
            assert (pd.to_datetime(g, utc=True) == w).all(), col
        elif w.dtype == object or col in ("job_id",):
            assert [None if pd.isna(x) else str(x) for x in g] == [None if pd.isna(x) else str(x) for x in w], col
        else:
            np.testing.assert_allclose(pd.to_numeric(g, errors="coerce").astype(float),
                                       pd.to_numeric(w, errors="coerce").astype(float), rtol=0, atol=1e-9, err_msg=col)
    assert got.loc[got["node_id"] == NO_ECC_NODE, "ecc_dbe_delta"].isna().all()  # the sentinel is a null
    assert wh.count("source_rejects") == 0

    # No node-exporter: node and link tables are empty and every partition is recorded as missing data,
    # naming the silent metric family; nothing blocked.
    assert wh.count("node_telemetry") == 0 and wh.count("network_telemetry") == 0
    gaps = wh.read_window("source_gaps")
    assert sorted(zip(gaps["source"], gaps["missing_family"], pd.to_datetime(gaps["partition_start"], utc=True))) == sorted(
        (t, fam, T0 + 5 * p * MIN) for t, fam in (("node_telemetry", F.NODE_CPU_SECONDS), ("network_telemetry", F.IB_RX_BYTES))
        for p in range(2))

    # The scheduler tables came from the sacct and squeue --json dumps (complete: written after the window).
    ev = wh.read_window("scheduler_events")
    assert sorted(zip(ev["job_id"], ev["event"])) == [("4242", "started"), ("4242", "submitted"), ("4243", "submitted"),
                                                      ("4244", "submitted")]
    md = wh.read_window("job_metadata").set_index("job_id")
    assert set(md.index) == {"4242", "4243", "4244"}
    assert (md.loc["4244", "team"], md.loc["4244", "requested_gpus"]) == ("nlp", 8)

    # The loss tree and the KPIs are computed from GPU telemetry alone.
    states = wh.read_window("goodput_states")
    per_partition = states.groupby(pd.to_datetime(states["partition_start"], utc=True))["gpu_minutes"].sum()
    assert per_partition.to_dict() == {T0: 20.0, T0 + 5 * MIN: 20.0}  # 4 paid GPUs x 5 minutes, each in one state
    assert states.loc[states["state"] == "no_data", "gpu_minutes"].sum() == 0  # every GPU reported
    cg = wh.read_window("cluster_goodput")
    assert set(cg["region"]) == {"lab", "*"} and len(cg) == 4
    assert wh.count("kpi_values") > 0


def test_absent_slurm_dumps_degrade_the_scheduler_tables(stock_prometheus, tmp_path, capsys):
    """No sacct / squeue dump at all: scheduler tables missing data, the rest computed."""
    landing, slurm, url = tmp_path / "landing", tmp_path / "slurm", f"sqlite:///{tmp_path / 'wh.db'}"
    landing_zone(landing)
    slurm.mkdir()
    env = {"GPU_HEALTH_PROMETHEUS_REGION": "lab", "GPU_HEALTH_SLURM_DIR": str(slurm)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the documented environment variables instead of flags
    try:
        code, out, err = _run(
            capsys, "run", "--start", "2026-03-02T10:00:00Z", "--end", "2026-03-02T10:05:00Z",
            "--source", "prometheus", "--prometheus-url", stock_prometheus, "--landing", str(landing),
            "--warehouse", url, "--quiet")
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert code == 0, err
    wh = Warehouse(url)
    gaps = wh.read_window("source_gaps")
    assert set(gaps["source"]) == {"node_telemetry", "network_telemetry", "scheduler_events", "job_metadata"}
    assert gaps.loc[gaps["source"] == "job_metadata", "missing_family"].str.startswith("slurm dumps").all()
    assert wh.count("gpu_telemetry") == 5 * 4 and wh.count("goodput_states") > 0 and wh.count("kpi_values") > 0


def _query(prom: str, expr: str) -> list:
    import requests

    body = requests.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def _wait_for(prom: str, expr: str, timeout_s: float = 30.0) -> list:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = _query(prom, expr)
        if result:
            return result
        time.sleep(0.25)
    raise AssertionError(f"{expr} returned nothing within {timeout_s}s")


def test_kpis_scraped_back_by_a_real_prometheus(stock_run, scraping_prometheus):
    """serve-metrics over the run's warehouse; a real Prometheus scrapes it and answers PromQL."""
    from gpu_health.kpi_export import DIMENSIONS, cluster_rollup, kpi_metric_name, serve

    url, _ = stock_run
    server, _thread = serve(url, 0, "127.0.0.1")
    try:
        prom = scraping_prometheus([f"127.0.0.1:{server.server_port}"])
        north_star = _wait_for(prom, 'gpu_health_cluster_goodput_ratio{region="*"}')
        wh = Warehouse(url)
        cg = wh.read_window("cluster_goodput")
        cg["partition_start"] = pd.to_datetime(cg["partition_start"], utc=True)
        last = cg.loc[(cg["partition_start"] == T0 + 5 * MIN) & (cg["region"] == "*")]
        assert len(last) == 1 and len(north_star) == 1
        assert float(north_star[0]["value"][1]) == pytest.approx(float(last["goodput"].iloc[0]), abs=1e-12)
        assert north_star[0]["metric"]["job"] == "gpu_health"
        stamp = _query(prom, "gpu_health_partition_start_timestamp_seconds")
        assert float(stamp[0]["value"][1]) == (T0 + 5 * MIN).timestamp()
        # the loss tree adds up to 1 per region; every ok KPI series of the partition is there, with the
        # cluster-wide sample of each ratio series (its value: test_kpi_export.py)
        shares = _query(prom, "sum by (region) (gpu_health_loss_tree_share_ratio)")
        assert {r["metric"]["region"]: round(float(r["value"][1]), 9) for r in shares} == {"lab": 1.0, "*": 1.0}
        kv = wh.read_window("kpi_values", T0 + 5 * MIN, T0 + 10 * MIN)
        ok = pd.concat([kv.loc[kv["status"].astype(str) == "ok"], cluster_rollup(kv)], ignore_index=True)
        exposed = _query(prom, '{__name__=~"gpu_health_kpi_.+"}')
        got = {(r["metric"]["__name__"], *(r["metric"][d] for d in DIMENSIONS)): float(r["value"][1]) for r in exposed}
        want = {}
        for row in ok.itertuples(index=False):
            name, factor = kpi_metric_name(str(row.kpi), str(row.unit))
            want[(name, *(str(getattr(row, d)) for d in DIMENSIONS))] = float(row.value) * factor
        assert len(want) > 0 and got.keys() == want.keys()
        for key, value in want.items():
            assert got[key] == pytest.approx(value, abs=1e-12), key
        gaps = _query(prom, "gpu_health_source_gaps")
        assert {r["metric"]["source"] for r in gaps} == {"node_telemetry", "network_telemetry"}
        # the Grafana dashboard's expressions over this data: all evaluate; the panels this run has data
        # for (no alert opened, no job ended in ten minutes) are not empty
        answered = {}
        for title, expr in dashboard_exprs():
            answered.setdefault(title, []).append(bool(_query(prom, expr)))
        for title in ("Cluster goodput (provisional, latest partition)", "Goodput by region", "Partition age",
                      "Loss tree: share of paid GPU-minutes by state", "Losses now (latest partition)",
                      "Hardware fault rates", "Gaming guardrails and fragmentation", "Wasted dollars by cause (latest settled day)",
                      "Wasted dollars (latest settled day)", "USD per hour under open alerts", "Missing data (silent exporters)"):
            assert any(answered[title]), title
        assert answered["Allocation rate"][0], "the pipeline's allocation KPI"
    finally:
        server.shutdown()


def node_exporter_scrape(k: int) -> str:
    """node-exporter's /metrics of both nodes in minute ``k``: only ``instance`` names the host (bare metal)."""
    lines = ["# TYPE node_cpu_seconds_total counter", "# TYPE node_memory_MemAvailable_bytes gauge",
             "# TYPE node_memory_MemTotal_bytes gauge", "# TYPE node_disk_read_bytes_total counter",
             "# TYPE node_disk_written_bytes_total counter", "# TYPE node_disk_io_time_seconds_total counter",
             "# TYPE node_uname_info gauge"]
    for n, node in enumerate(NODES):
        inst = f'instance="{node}:9100",job="node"'
        busy_s = 60 * (k + 1) * (0.25 + 0.25 * n)  # node n busy (25 + 25 n) % of one CPU's time
        lines += [f'node_cpu_seconds_total{{cpu="0",mode="idle",{inst}}} {60 * (k + 1) - busy_s}',
                  f'node_cpu_seconds_total{{cpu="0",mode="user",{inst}}} {busy_s}',
                  f'node_memory_MemAvailable_bytes{{{inst}}} {3 * 2**38}', f'node_memory_MemTotal_bytes{{{inst}}} {2**40}',
                  f'node_disk_read_bytes_total{{device="nvme0n1",{inst}}} {60e6 * (k + 1)}',
                  f'node_disk_written_bytes_total{{device="nvme0n1",{inst}}} {30e6 * (k + 1)}',
                  f'node_disk_io_time_seconds_total{{device="nvme0n1",{inst}}} {6 * (k + 1)}',
                  f'node_uname_info{{nodename="{node}",release="6.8.0-51-generic",sysname="Linux",{inst}}} 1']
    return "\n".join(lines) + "\n"


def test_stock_node_exporter_joins_the_gpus_by_host_name(prometheus_factory, tmp_path):
    """Bare metal: node-exporter's instance host:9100 and dcgm-exporter's Hostname name the same node."""
    from gpu_health.sources.prometheus import PrometheusSource

    times = [T0 + k * MIN + pd.Timedelta(seconds=15) for k in range(-1, 5)]
    om = scrape_to_openmetrics([scrape(k) + node_exporter_scrape(k) for k in range(-1, 5)], times, tmp_path / "n.om")
    src = PrometheusSource(prometheus_factory(om), region="lab")
    nodes = src.read("node_telemetry", T0, T0 + 5 * MIN)
    df = nodes.frame.sort_values(["ts", "node_id"])
    assert len(df) == 10 and set(df["node_id"]) == set(NODES) and nodes.silent_family == F.NODE_CPU_SECONDS
    by_node = df.groupby("node_id")
    assert by_node["cpu_util_pct"].apply(lambda s: set(s.round(9))).to_dict() == {"dgx-a01": {25.0}, "dgx-a02": {50.0}}
    assert set(df["mem_used_pct"].round(9)) == {25.0} and set(df["disk_read_mbps"].round(9)) == {1.0}
    assert set(df["nvme_util_pct"].round(9)) == {10.0} and set(df["kernel_version"]) == {"6.8.0-51-generic"}
    assert set(df["sku"]) == {SKU} and set(df["driver_version"]) == {DRIVER} and set(df["health"]) == {"ok"}
    # no InfiniBand collector: links are absent (missing data), nodes are not held back by it
    links = src.read("network_telemetry", T0, T0 + 5 * MIN)
    assert links.frame.empty and "exporter absent" in links.origin


# --- the Grafana kit over a Prometheus run from the kit's own scrape config -----------------------------------------

NEWER_EXPORTER = {"dgx-a01": "dgx-b01", "dgx-a02": "dgx-b02", "GPU-0b8a5a3c": "GPU-1c9b6b4d", "GPU-7d21e9f4": "GPU-8e32fa05"}


def newer_exporter_scrape(k: int) -> str:
    """A dcgm-exporter of 3.3 or later on two other hosts: the clock-event field under its new name."""
    text = scrape(k).replace("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
    for old, new in NEWER_EXPORTER.items():
        text = text.replace(old, new)
    return text


def _static_exporter(text: str):
    """An HTTP server on loopback answering ``text`` on /metrics, as an exporter does; ``(server, host:port)``."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = text.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_port}"


def panel_warehouse(url: str, regions: list[str]) -> None:
    """One partition with a row behind every panel: the loss tree of each region and the cluster, every catalog
    series on its catalog slices in each region, an open alert and a priced loss per region, a source gap."""
    from gpu_health.contracts.kpi_catalog import CATALOG
    from gpu_health.metrics.goodput import STATES

    wh = Warehouse(url)
    wh.create_all()
    start, end = T0, T0 + 5 * MIN
    cg = []
    for region in [*regions, "*"]:
        row = {"partition_start": start, "region": region, "paid_gpu_minutes": 100.0, "productive_gpu_minutes": 60.0,
               "goodput": 0.6, **{f"share_{s}": 0.0 for s in STATES}}
        row.update(share_productive=0.6, share_idle_no_demand=0.3, share_failure_loss=0.1)
        cg.append(row)
    wh.replace_window("cluster_goodput", pd.DataFrame(cg), start, end)
    values = {"region": regions, "sku": [SKU], "workload_class": ["batch"], "team": ["vision"]}
    kv = []
    for kpi in CATALOG:
        for series in kpi.series():
            quantile = kpi.unit_of(series) == "s"
            for region in (regions if "region" in kpi.dimensions else ["*"]):
                dims = {d: (values[d][0] if d in kpi.dimensions else "*") for d in ("sku", "workload_class", "team")}
                kv.append({"partition_start": start, "kpi": series, "region": region, **dims,
                           "value": 120.0 if quantile else 0.25, "numerator": np.nan if quantile else 1.0,
                           "denominator": 4.0, "unit": kpi.unit_of(series), "status": "ok"})
    wh.replace_window("kpi_values", pd.DataFrame(kv), start, end)
    alerts = [{"partition_start": start, "alert_id": f"a-{region}", "key": f"k-{region}", "detector": "xid_fatal",
               "status": "firing", "severity": "page", "cause_family": "hardware", "region": region,
               "scope": "node dgx-a01", "summary": "s", "description": "d", "usd_per_hour": 12.5, "runbook": "r",
               "opened_at": start, "first_partition_start": start, "paged_at": start, "updated_at": start,
               "resolved_at": None, "follows_change": None, "clear_count": 0, "baseline_at_open": np.nan,
               "lost_gpu_minutes": 5.0, "margin_at_page": 1.5} for region in regions]
    wh.replace_window("alerts", pd.DataFrame(alerts), start, end)
    day = (T0 - pd.Timedelta(days=1)).normalize()
    wasted = [{"date": day.date(), "region": region, "sku": SKU, "state": state, "cause_family": family, "team": "vision",
               "gpu_hours": 10.0, "blended_gpu_hour_usd": 2.5, "usd": 25.0}
              for region in regions for state, family in (("failure_loss", "hardware"), ("productive", "productive"))]
    wh.replace_window("wasted_spend", pd.DataFrame(wasted), day, day + pd.Timedelta(days=1))
    gaps = pd.DataFrame([{"source": "node_telemetry", "partition_start": start, "partition_end": end,
                          "missing_family": F.NODE_CPU_SECONDS, "origin": "prometheus", "reason": "exporter absent"}])
    wh.replace_window("source_gaps", gaps, start, end)


def _kit_config(workdir, targets: dict[str, list[tuple[str, dict]]]) -> str:
    """deploy/prometheus/prometheus.yml as shipped, scraping ``targets`` (job -> [(host:port, extra labels)]) every
    second instead of its placeholders, its rules beside it."""
    import yaml

    from gpu_health_tests.test_deploy_kit import PROMETHEUS_YML, RULES

    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    for job in config["scrape_configs"]:
        shipped = job.get("static_configs", [{}])[0].get("labels", {})
        job.pop("scrape_interval", None)
        job["static_configs"] = [{"targets": [addr], "labels": {**shipped, **extra}}
                                 for addr, extra in targets.get(job["job_name"], [])]
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
    (workdir / "recording_rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    return yaml.safe_dump(config, sort_keys=False)


def _options(prom: str, var: dict, selection: dict) -> list[str]:
    """The values Grafana offers for a query variable: its label_values() query, rendered, then its regex filter."""
    import re

    import requests

    from gpu_health_tests.test_deploy_kit import render

    query = render(var["definition"], selection)
    m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query.strip())
    assert m, query
    body = requests.get(f"{prom}/api/v1/label/{m.group(2)}/values", params={"match[]": m.group(1)}, timeout=10).json()
    assert body["status"] == "success", (query, body)
    pattern = var.get("regex", "").strip("/")
    return sorted(v for v in body["data"] if not pattern or re.search(pattern, v))


def _unanswered(prom: str, selection: dict, *, need_data: bool = True) -> list[str]:
    """Panels with a query Prometheus refuses or (``need_data``) with no data at all, for ``selection``."""
    import requests

    from gpu_health_tests.test_deploy_kit import dashboard_exprs

    answered, problems = {}, []
    for title, expr in dashboard_exprs(selection=selection):
        body = requests.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10).json()
        if body["status"] != "success":
            problems.append(f"{title}: {expr} -> {body.get('error')}")
            continue
        answered[title] = answered.get(title, False) or bool(body["data"]["result"])
    return problems + [f"{title}: no data for {selection}" for title, ok in answered.items() if need_data and not ok]


def test_every_panel_answers_for_every_variable_value(tmp_path):
    """The shipped scrape config, rules and dashboard over dcgm-exporter scrapes and serve-metrics: for "All", each
    value and all values of each variable, every panel's query parses and returns data."""
    import time

    import yaml

    from gpu_health.kpi_export import serve
    from gpu_health_tests.test_deploy_kit import ALL, DASHBOARD, PROMETHEUS_YML

    shipped = yaml.safe_load(PROMETHEUS_YML.read_text())
    home = next(j for j in shipped["scrape_configs"] if j["job_name"] == "dcgm-exporter")["static_configs"][0]["labels"]
    # a second region whose name has a regex metacharacter: Grafana's regex format escapes it with a backslash
    regions = sorted({home["region"], "us-west.2"})
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    panel_warehouse(url, regions)
    older, older_addr = _static_exporter(scrape(MINUTES - 1))
    newer, newer_addr = _static_exporter(newer_exporter_scrape(MINUTES - 1))
    metrics, _thread = serve(url, 0, "127.0.0.1")
    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    config = _kit_config(workdir, {"dcgm-exporter": [(older_addr, {}), (newer_addr, {"region": "us-west.2"})],
                                   "gpu_health": [(f"127.0.0.1:{metrics.server_port}", {})]})
    server = PrometheusServer(workdir / "data", workdir, config=config)
    prom = server.start()
    try:
        variables = {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
        everything = {name: (ALL if var["type"] != "datasource" else "prometheus-under-test")
                      for name, var in variables.items()}
        deadline = time.monotonic() + 90  # the first scrapes and rule evaluations, on a busy machine

        def answered(selection: dict) -> list:
            """The panels without an answer for ``selection``, once every series had its scrapes and evaluations:
            each selection is asked until the deadline (a region's first rule evaluation may come after All's)."""
            while (missing := _unanswered(prom, selection)) and time.monotonic() < deadline:
                time.sleep(0.5)
            return missing

        problems = answered(everything)

        def choices(name: str, selection: dict) -> list:
            options = _options(prom, variables[name], selection)
            assert options, f"{name} offers no value under {selection}"
            return [[o] for o in options] + ([options] if len(options) > 1 else [])

        assert choices("region", everything) == [[r] for r in regions] + [regions]
        for region in choices("region", everything):
            problems += answered({**everything, "region": region})
        hosts = choices("host", everything)
        assert {h[0] for h in hosts if len(h) == 1} == set(NODES) | {NEWER_EXPORTER[n] for n in NODES}
        for host in hosts:
            for gpu in [ALL, *choices("gpu", {**everything, "host": host})]:
                problems += answered({**everything, "host": host, "gpu": gpu})
        # any value a variable could ever offer parses, every regex metacharacter Grafana escapes included
        hostile = ["a.b*c+d?e^f$g(h)i|j[k]l{m}n/o\\p", 'q"r\'s']
        for name in ("region", "host", "gpu"):
            problems += _unanswered(prom, {**everything, name: hostile}, need_data=False)
        assert not problems, "\n".join(problems)
    finally:
        server.stop()
        metrics.shutdown()
        older.shutdown()
        newer.shutdown()

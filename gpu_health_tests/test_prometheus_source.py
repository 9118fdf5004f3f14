"""PrometheusSource against a real Prometheus (backfilled with promtool) and against error stubs."""

import http.server
import json
import logging
import threading
from pathlib import Path

import pandas as pd
import pytest

from gpu_health.contracts.models import GpuTelemetry
from gpu_health.evaluation.promexport import scrape_to_openmetrics
from gpu_health.sources import dcgm_fields as F
from gpu_health.sources.base import DataNotReady, SourceError
from gpu_health.sources.prometheus import PrometheusSource, label_matchers, promql_escape, promql_string
from gpu_health_tests.services.prometheus import prometheus_factory  # noqa: F401  (fixture)

FIXTURE = Path(__file__).parent / "fixtures" / "dcgm" / "datadog_t4_dcgm_exporter_metrics.prom"
T0 = pd.Timestamp("2026-01-05 10:00", tz="UTC")
MIN = pd.Timedelta(minutes=1)
HOST_A, UUID_A = "424773df46e0", "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
HOST_B = "551bdf382151"
XID_LINE_A = f'DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="{UUID_A}",'


def _with_xid(text: str, code: int) -> str:
    """The capture with host A's Xid gauge set to ``code``."""
    lines = text.splitlines()
    hit = [i for i, line in enumerate(lines) if line.startswith(XID_LINE_A)]
    assert len(hit) == 1
    lines[hit[0]] = lines[hit[0]].rsplit(" ", 1)[0] + f" {code}"
    return "\n".join(lines) + "\n"


@pytest.fixture
def t4_prometheus(prometheus_factory, tmp_path):  # noqa: F811
    """The real T4 capture replayed over 6 minutes; from 10:03 on, host A's Xid gauge holds 79."""
    text = FIXTURE.read_text()
    scrapes = [text] * 3 + [_with_xid(text, 79)] * 3
    om = scrape_to_openmetrics(scrapes, [T0 + i * MIN for i in range(6)], tmp_path / "t4.om")
    return prometheus_factory(om)


def test_real_dcgm_exporter_capture(t4_prometheus, caplog):
    source = PrometheusSource(t4_prometheus, region="lab")
    with caplog.at_level(logging.WARNING):
        fetched = source.read("gpu_telemetry", T0 + MIN, T0 + 6 * MIN)
    df = fetched.frame
    GpuTelemetry.validate(df, lazy=True)
    assert t4_prometheus in fetched.origin
    assert list(df["ts"]) == [T0 + i * MIN for i in range(1, 6)]
    row = df.iloc[0]
    assert (row.region, row.node_id, row.gpu_index, row.gpu_uuid, row.sku) == ("lab", HOST_A, 0, UUID_A, "Tesla T4")
    assert pd.isna(row.job_id)
    assert (row.gpu_util_pct, row.temp_c, row.power_w, row.fb_used_mib, row.sm_clock_mhz) == (0.0, 25.0, 8.969, 0.0, 300.0)
    # Profiling, throttle and ECC fields are not exported on this host: null, never 0.
    for col in ["sm_active", "tensor_active", "throttle_reasons", "ecc_sbe_delta", "ecc_dbe_delta"]:
        assert df[col].isna().all(), col
    # The Xid gauge holds 79 from 10:03 on: reported in that minute only.
    assert df.set_index("ts")["xid"].to_dict() == {T0 + i * MIN: (79 if i == 3 else 0) for i in range(1, 6)}
    # Host B's exporter ships none of the default fields (util, temp, ...): its rows
    # cannot satisfy the contract and are dropped, loudly.
    assert HOST_B not in set(df["node_id"])
    assert any(HOST_B in r.getMessage() and "dropped" in r.getMessage() for r in caplog.records)


def test_dcgm_field_map_marks_required_exactly_the_contracts_non_nullable_columns():
    # the source drops a row lacking a required field: a column the contract accepts null in
    # (power_w, temp_c: not every collector exposes them) must never cost the row
    schema = GpuTelemetry.to_schema()
    for field in F.GPU_FIELDS:
        assert field.required == (not schema.columns[field.column].nullable), field.column


def test_xid_errors_count_rises_count_once(prometheus_factory, tmp_path):  # noqa: F811
    """dcgm-exporter's windowed DCGM_EXP_XID_ERRORS_COUNT{xid}: a code counts in the minutes its count rises."""
    text = FIXTURE.read_text()
    counts = [None, None, 1, 1, 2, 0]  # per minute; None = no series yet
    scrapes = []
    for c in counts:
        extra = "" if c is None else (
            "# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n"
            f'DCGM_EXP_XID_ERRORS_COUNT{{gpu="0",UUID="{UUID_A}",Hostname="{HOST_A}",xid="13"}} {c}\n'
        )
        scrapes.append(text + extra)
    om = scrape_to_openmetrics(scrapes, [T0 + i * MIN for i in range(6)], tmp_path / "count.om")
    df = PrometheusSource(prometheus_factory(om), region="lab").read("gpu_telemetry", T0, T0 + 6 * MIN).frame
    assert list(df["xid"]) == [0, 0, 13, 0, 13, 0]


def test_incomplete_rows_keep_reports_instead_of_dropping(t4_prometheus):
    df = PrometheusSource(t4_prometheus, region="lab", incomplete_rows="keep").read("gpu_telemetry", T0, T0 + 6 * MIN).frame
    host_b = df.loc[df["node_id"] == HOST_B]
    assert len(host_b) == 6 and host_b["gpu_util_pct"].isna().all()
    # Its throttle field is exported: DCGM bit 0x1 (gpu_idle).
    assert (host_b["throttle_reasons"] == 1).all()


def test_window_late_then_closed_and_absent_exporter(t4_prometheus):
    """The capture's samples end at 10:05:59; node-exporter and the IB collector are absent."""
    def source(now):
        return PrometheusSource(t4_prometheus, region="lab", ready_lag="2min", absent_after="10min", clock=lambda: now)

    # End in the future (beyond the lag): refused before any query.
    with pytest.raises(DataNotReady, match="before now"):
        source(T0 + 7 * MIN).read("gpu_telemetry", T0, T0 + 6 * MIN)
    assert len(source(T0 + 7 * MIN).read("gpu_telemetry", T0, T0 + 5 * MIN).frame) == 5
    # [10:05, 10:10): no sample in its last minute and none after it -> late until 10 min after its end ...
    late = source(T0 + 19 * MIN)
    with pytest.raises(DataNotReady, match="last minute"):
        late.read("gpu_telemetry", T0 + 5 * MIN, T0 + 10 * MIN)
    assert late.version("gpu_telemetry", T0 + 5 * MIN) is None
    # ... then closed: read as it is (the 10:05 row), its silence named for the missing-data record
    closed = source(T0 + 20 * MIN)
    got = closed.read("gpu_telemetry", T0 + 5 * MIN, T0 + 10 * MIN)
    assert list(got.frame["ts"].unique()) == [T0 + 5 * MIN] and "exporter absent" in got.origin
    assert got.silent_family == "DCGM_FI_DEV_GPU_UTIL"
    assert closed.version("gpu_telemetry", T0 + 5 * MIN) == "closed"
    # A window before the last sample whose last minute is silent is closed at once (a gap):
    # the exporter reported after it, so its missing minutes never come.
    assert closed.judge("gpu_telemetry", T0 - 5 * MIN, T0).startswith("closed") and "a gap" in closed.judge("gpu_telemetry", T0 - 5 * MIN, T0)
    # A complete window is complete whatever the clock.
    assert source(T0 + 8 * MIN).version("gpu_telemetry", T0) == "complete"
    # No node-exporter at all: node and network tables are empty after the grace, never blocking.
    for table, family in (("node_telemetry", "node_cpu_seconds_total"), ("network_telemetry", F.IB_RX_BYTES)):
        with pytest.raises(DataNotReady):
            source(T0 + 14 * MIN).read(table, T0, T0 + 5 * MIN)
        got = closed.read(table, T0, T0 + 5 * MIN)
        assert got.frame.empty and got.silent_family == family, table


def test_missing_region_is_an_error(t4_prometheus):
    with pytest.raises(SourceError, match="region"):
        PrometheusSource(t4_prometheus).read("gpu_telemetry", T0, T0 + 5 * MIN)


def test_rejects_unaligned_or_naive_windows():
    source = PrometheusSource("http://127.0.0.1:9")
    with pytest.raises(ValueError):
        source.read("gpu_telemetry", T0 + pd.Timedelta(seconds=30), T0 + 5 * MIN)
    with pytest.raises(ValueError):
        source.read("gpu_telemetry", T0.tz_localize(None), (T0 + MIN).tz_localize(None))
    with pytest.raises(ValueError):
        source.read("job_metadata", T0, T0 + MIN)
    with pytest.raises(ValueError):
        PrometheusSource("http://127.0.0.1:9", step="30s")


# --- PromQL escaping ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("us-east", "us-east"),
        ('say "hi"', 'say \\"hi\\"'),
        ("C:\\path\\", "C:\\\\path\\\\"),
        ("two\nlines\r\tx", "two\\nlines\\r\\tx"),
        ('\\"', '\\\\\\"'),  # backslash before a quote: both escaped, in that order
    ],
)
def test_promql_escape(raw, escaped):
    assert promql_escape(raw) == escaped
    assert promql_string(raw) == f'"{escaped}"'


def test_label_matchers():
    assert label_matchers() == ""
    assert label_matchers({"region": 'a"b'}, {"device": r"nvme\d+"}) == '{region="a\\"b",device=~"nvme\\\\d+"}'
    with pytest.raises(ValueError):
        label_matchers({'bad"name': "x"})


def test_escaped_selector_matches_in_prometheus(prometheus_factory, tmp_path):  # noqa: F811
    """A label value with quotes, backslashes and a newline selects exactly its series."""
    weird = 'eu-"west"\\2\nb'
    om_value = weird.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    text = FIXTURE.read_text()
    lines = []
    for line in text.splitlines():
        if line.startswith("DCGM_FI_") and HOST_A in line:
            lines.append(line.replace("{", f'{{region="{om_value}",', 1))
        elif line.startswith("DCGM_FI_"):
            lines.append(line.replace("{", '{region="plain",', 1))
        else:
            lines.append(line)
    scrape = "\n".join(lines) + "\n"
    om = scrape_to_openmetrics([scrape] * 3, [T0 + i * MIN for i in range(3)], tmp_path / "weird.om")
    url = prometheus_factory(om)
    df = PrometheusSource(url, selector={"region": weird}).read("gpu_telemetry", T0 + MIN, T0 + 3 * MIN).frame
    assert set(df["region"]) == {weird} and set(df["node_id"]) == {HOST_A} and len(df) == 2


# --- transient errors ----------------------------------------------------------------------
class _Stub(http.server.BaseHTTPRequestHandler):
    """Answers POSTs from a script of (status, body) and records request paths."""

    script: list = []
    seen: list = []

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).seen.append(self.path)
        status, body = type(self).script.pop(0) if type(self).script else (200, _ok([]))
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def _ok(result, kind="vector"):
    return {"status": "success", "data": {"resultType": kind, "result": result}}


@pytest.fixture
def stub():
    handler = type("Handler", (_Stub,), {"script": [], "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_retries_transient_503_then_succeeds(stub):
    handler, url = stub
    unavailable = {"status": "error", "errorType": "unavailable", "error": "overloaded"}
    handler.script = [(503, unavailable), (429, unavailable), (200, _ok([{"metric": {}, "value": [0, "1"]}]))]
    sleeps = []
    source = PrometheusSource(url, retries=3, backoff_s=0.25, sleep=sleeps.append)
    data = source._api("/api/v1/query", {"query": "up"})
    assert data["result"][0]["value"][1] == "1"
    assert handler.seen == ["/api/v1/query"] * 3
    assert sleeps == [0.25, 0.5]  # exponential backoff, no real waiting


def test_gives_up_after_retries(stub):
    handler, url = stub
    handler.script = [(503, {"status": "error"})] * 5
    source = PrometheusSource(url, retries=2, sleep=lambda s: None)
    with pytest.raises(SourceError, match="3 attempts"):
        source.read("gpu_telemetry", T0, T0 + 5 * MIN)
    assert len(handler.seen) == 3


def test_bad_query_is_not_retried(stub):
    handler, url = stub
    handler.script = [(400, {"status": "error", "errorType": "bad_data", "error": "parse error"})]
    with pytest.raises(SourceError, match="parse error"):
        PrometheusSource(url, sleep=lambda s: None)._api("/api/v1/query", {"query": "("})
    assert len(handler.seen) == 1


def test_connection_refused_is_retried_then_source_error():
    sleeps = []
    with pytest.raises(SourceError, match="ConnectionError"):
        PrometheusSource("http://127.0.0.1:9", retries=2, sleep=sleeps.append)._api("/api/v1/query", {"query": "up"})
    assert len(sleeps) == 2


def test_empty_window_from_live_server_is_data_not_ready(stub):
    handler, url = stub  # answers every query with an empty vector
    with pytest.raises(DataNotReady):
        PrometheusSource(url, clock=lambda: T0 + 6 * MIN).read("network_telemetry", T0, T0 + 5 * MIN)


# --- configuration: label-name overrides and PromQL selectors ----------------------------------
def test_label_overrides_read_an_exporter_without_hostname_and_uuid(prometheus_factory, tmp_path):  # noqa: F811
    """An exporter version labelling GPUs ``gpu_uuid`` and hosts only by ``instance`` (host:port)."""
    text = FIXTURE.read_text()
    renamed = []
    for line in text.splitlines():
        if line.startswith("DCGM_"):
            host = HOST_A if HOST_A in line else HOST_B
            line = line.replace(f'Hostname="{host}"', f'instance="{host}:9400",cluster="c1"').replace("UUID=", "gpu_uuid=")
        renamed.append(line)
    scrape = "\n".join(renamed) + "\n"
    om = scrape_to_openmetrics([scrape] * 3, [T0 + i * MIN for i in range(3)], tmp_path / "renamed.om")
    url = prometheus_factory(om)
    # without the overrides: no UUID label, every sample is ignored
    assert PrometheusSource(url, region="lab").read("gpu_telemetry", T0 + MIN, T0 + 3 * MIN).frame.empty
    src = PrometheusSource(url, region="lab", labels="node_id=instance,gpu_uuid=gpu_uuid", selector='cluster="c1"')
    df = src.read("gpu_telemetry", T0 + MIN, T0 + 3 * MIN).frame
    assert set(df["node_id"]) == {HOST_A} and set(df["gpu_uuid"]) == {UUID_A} and len(df) == 2
    # a selector matching nothing: the exporter is absent for this source (late first, then missing data)
    with pytest.raises(DataNotReady):
        PrometheusSource(url, region="lab", selector='cluster!="c1"', clock=lambda: T0 + 4 * MIN).read(
            "gpu_telemetry", T0 + MIN, T0 + 2 * MIN)


def test_parse_matchers_and_overrides():
    from gpu_health.sources.prometheus import parse_label_overrides, parse_matchers, render_matchers

    m = parse_matchers('{cluster="a", job=~"dcgm.*",env!="dev" , q!~"x\\"y"}')
    assert m == [("cluster", "=", "a"), ("job", "=~", "dcgm.*"), ("env", "!=", "dev"), ("q", "!~", 'x"y')]
    assert render_matchers(m) == '{cluster="a",job=~"dcgm.*",env!="dev",q!~"x\\"y"}'
    assert parse_matchers("") == []
    for bad in ('cluster=a', 'cluster="a" job="b"', '1x="a"'):
        with pytest.raises(ValueError):
            parse_matchers(bad)
    assert parse_label_overrides("node_id=instance, gpu_uuid=gpu_uuid") == {"node_id": "instance", "gpu_uuid": "gpu_uuid"}
    for bad in ("node_id", "hostname=Hostname", "node_id=bad-label"):
        with pytest.raises(ValueError):
            parse_label_overrides(bad)

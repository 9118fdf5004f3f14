"""Alert delivery to Alertmanager: payloads, client, deliver(), and deploy/alertmanager.yml.

Live tests run against a real Alertmanager 0.25 started on 127.0.0.1 by the
``alertmanager_url`` fixture; the retry tests use a tiny local HTTP stub.
"""

import json
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gpu_health.delivery.alertmanager import (
    DEFAULT_ALERTNAME,
    DEFAULT_TTL,
    REQUIRED_KEYS,
    AlertmanagerClient,
    AlertmanagerError,
    active_alert_ids,
    alert_to_payload,
    deliver,
    deliver_report,
    sent_state_from_cursor,
)
from gpu_health_tests.services.alertmanager import start_alertmanager  # alertmanager_url: conftest.py

DEPLOY_CONFIG = Path(__file__).resolve().parents[1] / "deploy" / "alertmanager.yml"
NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture(autouse=True)
def _now_is_when_the_test_starts():
    """Alertmanager expires a firing alert at ``endsAt = now + TTL`` on its own
    wall clock, so "now" is taken as each test starts: a long session imports
    this module well over a TTL before some of its tests run."""
    global NOW
    NOW = datetime.now(UTC).replace(microsecond=0)


def make_alert(**overrides) -> dict:
    """One row of the alerts table, opened 10 minutes ago and still firing."""
    row = {
        "alert_id": f"a-{uuid.uuid4().hex[:10]}",
        "opened_at": NOW - timedelta(minutes=10),
        "first_partition_start": NOW - timedelta(minutes=15),
        "resolved_at": None,
        "severity": "page",
        "cause_family": "hardware",
        "region": "us-east",
        "scope": "nodes dgx-07,dgx-08; driver 550.54",
        "summary": "hw_unavailable share +6 pp on dgx-07/08 (Xid 79)",
        "description": "Two nodes drained after Xid 79 since the driver upgrade.",
        "usd_per_hour": 412.5,
        "runbook": "https://runbooks.example.invalid/gpu/xid-79",
        "status": "open",
        "updated_at": NOW,
    }
    row.update(overrides)
    return row


def by_alert_id(alerts: list[dict]) -> dict[str, dict]:
    return {alert["labels"]["alert_id"]: alert for alert in alerts}


def ids_filter(*alert_ids: str) -> list[str]:
    return [f'alert_id=~"{"|".join(alert_ids)}"']


# ---------------------------------------------------------------- payloads


def test_payload_maps_labels_annotations_and_times():
    row = make_alert(alert_id="a/1 x")
    payload = alert_to_payload(row, now=NOW, generator_url="http://dagster:3000/assets/alerts?id={alert_id}")
    assert payload["labels"] == {
        "alertname": DEFAULT_ALERTNAME,
        "severity": "page",
        "cause_family": "hardware",
        "region": "us-east",
        "alert_id": "a/1 x",
    }
    assert payload["annotations"] == {
        "summary": row["summary"],
        "description": row["description"],
        "runbook": row["runbook"],
        "usd_per_hour": "412.50",
        "scope": row["scope"],
        "first_partition_start": (NOW - timedelta(minutes=15)).isoformat().replace("+00:00", "Z"),
    }
    assert payload["startsAt"] == (NOW - timedelta(minutes=10)).isoformat().replace("+00:00", "Z")
    assert payload["endsAt"] == (NOW + DEFAULT_TTL).isoformat().replace("+00:00", "Z")
    assert payload["generatorURL"] == "http://dagster:3000/assets/alerts?id=a%2F1%20x"


@pytest.mark.parametrize(("detector", "alertname"), [
    ("hardware_fault", "GpuHardwareFault"), ("scheduling_blocked", "GpuSchedulingBlocked"),
    ("slo_burn", "GpuSloBurn"), ("pods_pending_gpu", "GpuPodsPendingGpu"),
])
def test_each_detector_has_its_own_alertname(detector, alertname):
    """Alertmanager groups by alertname (deploy/alertmanager.yml): one name for every detector would group a
    thermal ticket with a deploy page."""
    assert alert_to_payload(make_alert(detector=detector), now=NOW)["labels"]["alertname"] == alertname
    assert alert_to_payload(make_alert(detector=detector, alertname="Custom"), now=NOW)["labels"]["alertname"] == "Custom"


def test_the_runbook_is_a_link_under_the_configured_base():
    text = "Cordon and drain the node(s); run DCGM diagnostics. Runbook: docs/runbooks.md#hardware"
    payload = alert_to_payload(make_alert(runbook=text), now=NOW,
                               runbook_base_url="https://git.example.invalid/gpu_health/-/blob/main/")
    assert payload["annotations"]["runbook"] == text
    assert payload["annotations"]["runbook_url"] == \
        "https://git.example.invalid/gpu_health/-/blob/main/docs/runbooks.md#hardware"
    assert "runbook_url" not in alert_to_payload(make_alert(runbook=text), now=NOW)["annotations"]  # no base: none
    assert "runbook_url" not in alert_to_payload(make_alert(runbook="Call the on-call."), now=NOW,
                                                 runbook_base_url="https://x.invalid/")["annotations"]


def test_the_default_runbook_base_is_this_checkout(monkeypatch):
    from pathlib import Path

    from gpu_health.defs.resources import default_resources

    monkeypatch.delenv("GPU_HEALTH_RUNBOOK_BASE_URL", raising=False)
    base = default_resources()["alertmanager"].runbook_base_url
    assert base.startswith("file://") and (Path(base.removeprefix("file://")) / "docs" / "runbooks.md").is_file()
    monkeypatch.setenv("GPU_HEALTH_RUNBOOK_BASE_URL", "https://docs.example.invalid/")
    assert default_resources()["alertmanager"].runbook_base_url == "https://docs.example.invalid/"


def test_payload_resolved_alert_ends_at_resolved_at():
    payload = alert_to_payload(make_alert(resolved_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
                                          opened_at=datetime(2026, 1, 2, 2, 0, tzinfo=UTC)))
    assert payload["startsAt"] == "2026-01-02T02:00:00Z"
    assert payload["endsAt"] == "2026-01-02T03:04:05Z"


def test_payload_from_a_pandas_row_naive_times_are_utc_and_nat_means_firing():
    frame = pd.DataFrame([make_alert(
        opened_at=pd.Timestamp("2026-03-01 12:05"),  # naive: taken as UTC
        first_partition_start=pd.Timestamp("2026-03-01 12:00"),
        resolved_at=pd.NaT,
        scope={"region": "us-east", "nodes": ["dgx-07"]},
        description=float("nan"),
        extra_column="ignored",
    )])
    now = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    payload = alert_to_payload(frame.to_dict("records")[0], now=now, ttl=timedelta(minutes=20))
    assert payload["startsAt"] == "2026-03-01T12:05:00Z"
    assert payload["endsAt"] == "2026-03-01T12:50:00Z"
    assert payload["annotations"]["scope"] == '{"nodes": ["dgx-07"], "region": "us-east"}'
    assert payload["annotations"]["description"] == payload["annotations"]["summary"]
    assert "generatorURL" not in payload


def test_payload_accepts_iso_strings_with_offsets():
    payload = alert_to_payload(make_alert(opened_at="2026-03-01T14:05:00+02:00",
                                          resolved_at="2026-03-01T12:30:00Z"))
    assert (payload["startsAt"], payload["endsAt"]) == ("2026-03-01T12:05:00Z", "2026-03-01T12:30:00Z")


@pytest.mark.parametrize("key", REQUIRED_KEYS)
def test_payload_missing_required_key_raises_key_error_naming_it(key):
    row = make_alert()
    del row[key]
    with pytest.raises(KeyError, match=repr(key)):
        alert_to_payload(row)


def test_payload_null_required_value_and_bad_severity_are_value_errors():
    with pytest.raises(ValueError, match="'region'"):
        alert_to_payload(make_alert(region=None))
    with pytest.raises(ValueError, match="severity must be one of"):
        alert_to_payload(make_alert(severity="critical"))
    with pytest.raises(ValueError, match="before it starts"):
        alert_to_payload(make_alert(resolved_at=NOW - timedelta(hours=1)))


# ------------------------------------------------------ real Alertmanager


def test_post_page_and_ticket_and_read_them_back(alertmanager_url):  # noqa: F811
    client = AlertmanagerClient(alertmanager_url)
    page = make_alert(severity="page")
    ticket = make_alert(severity="ticket", cause_family="scheduling", region="eu-west",
                        summary="idle_blocked +3 pp: fragmentation on the a100 pool",
                        usd_per_hour=88, runbook="Check pending jobs' GPU shapes.")
    client.post([alert_to_payload(page, now=NOW), alert_to_payload(ticket, now=NOW)])

    got = by_alert_id(client.get(filter=ids_filter(page["alert_id"], ticket["alert_id"])))
    assert set(got) == {page["alert_id"], ticket["alert_id"]}
    for row in (page, ticket):
        expected = alert_to_payload(row, now=NOW)
        assert got[row["alert_id"]]["labels"] == expected["labels"]
        assert got[row["alert_id"]]["annotations"] == expected["annotations"]
        assert got[row["alert_id"]]["status"]["state"] in {"active", "unprocessed"}
    assert got[ticket["alert_id"]]["annotations"]["usd_per_hour"] == "88.00"
    assert got[ticket["alert_id"]]["annotations"]["runbook"] == "Check pending jobs' GPU shapes."

    only_pages = client.get(filter=ids_filter(page["alert_id"], ticket["alert_id"]) + ['severity="page"'])
    assert active_alert_ids(only_pages) == {page["alert_id"]}
    assert client.status()["versionInfo"]["version"].startswith("0.")


def test_update_replaces_annotations_of_the_same_alert(alertmanager_url):  # noqa: F811
    client = AlertmanagerClient(alertmanager_url)
    row = make_alert()
    client.post([alert_to_payload(row, now=NOW)])
    updated = {**row, "summary": "hw_unavailable share +9 pp (4 nodes now)", "usd_per_hour": 901.0}
    client.post([alert_to_payload(updated, now=NOW)])

    got = client.get(filter=ids_filter(row["alert_id"]))
    assert len(got) == 1
    assert got[0]["annotations"]["summary"] == "hw_unavailable share +9 pp (4 nodes now)"
    assert got[0]["annotations"]["usd_per_hour"] == "901.00"


def test_resolve_removes_the_alert_from_active(alertmanager_url):  # noqa: F811
    client = AlertmanagerClient(alertmanager_url)
    row = make_alert(severity="ticket")
    client.post([alert_to_payload(row, now=NOW)])
    assert active_alert_ids(client.get(filter=ids_filter(row["alert_id"]))) == {row["alert_id"]}

    client.post([alert_to_payload({**row, "resolved_at": datetime.now(UTC) - timedelta(seconds=5)})])
    assert client.get(filter=ids_filter(row["alert_id"])) == []


def test_invalid_alert_is_a_clear_4xx_error_with_the_body(alertmanager_url):  # noqa: F811
    client = AlertmanagerClient(alertmanager_url, retries=3, backoff=0.001)
    bad = alert_to_payload(make_alert(), now=NOW)
    bad["startsAt"], bad["endsAt"] = bad["endsAt"], bad["startsAt"]  # ends before it starts
    with pytest.raises(AlertmanagerError, match="HTTP 400") as info:
        client.post([bad])
    assert info.value.status_code == 400
    assert "start time must be before end time" in info.value.body


def test_deliver_sends_new_resends_firing_resolves_once_and_handles_escalation(alertmanager_url):  # noqa: F811
    client = AlertmanagerClient(alertmanager_url)
    a = make_alert(severity="page")
    b = make_alert(severity="ticket", cause_family="data_io")
    ids = ids_filter(a["alert_id"], b["alert_id"])

    sent, state = deliver(client, pd.DataFrame([a, b]), {}, now=NOW)
    assert sent == 2 and set(state) == {a["alert_id"], b["alert_id"]}
    assert active_alert_ids(client.get(filter=ids)) == {a["alert_id"], b["alert_id"]}

    # Nothing changed: firing alerts are resent (refreshing endsAt), state is stable.
    sent, state2 = deliver(client, pd.DataFrame([a, b]), state, now=NOW + timedelta(minutes=5))
    assert sent == 2 and state2 == state
    refreshed = by_alert_id(client.get(filter=ids))[a["alert_id"]]
    assert refreshed["endsAt"].startswith((NOW + timedelta(minutes=5) + DEFAULT_TTL).strftime("%Y-%m-%dT%H:%M"))

    # b resolves: posted once as resolved, then no longer.
    b_resolved = {**b, "resolved_at": datetime.now(UTC) - timedelta(seconds=5)}
    sent, state3 = deliver(client, pd.DataFrame([a, b_resolved]), state2)
    assert sent == 2 and state3[b["alert_id"]] != state2[b["alert_id"]]
    assert active_alert_ids(client.get(filter=ids)) == {a["alert_id"]}
    sent, state4 = deliver(client, pd.DataFrame([a, b_resolved]), state3)
    assert sent == 1 and state4 == state3

    # Cursor round trip, then a ticket escalates to a page: the old label set is resolved.
    c = make_alert(severity="ticket", cause_family="network")
    _, state5 = deliver(client, [c], sent_state_from_cursor(json.dumps(state4)))
    sent, _ = deliver(client, [{**c, "severity": "page"}], state5)
    assert sent == 2
    got = client.get(filter=ids_filter(c["alert_id"]))
    assert [alert["labels"]["severity"] for alert in got] == ["page"]


def offline_deploy_config() -> str:
    """deploy/alertmanager.yml with every notifier removed: same routes and
    inhibit rules, nothing sent off the machine."""
    config = yaml.safe_load(DEPLOY_CONFIG.read_text())
    config["receivers"] = [{"name": receiver["name"]} for receiver in config["receivers"]]
    return yaml.safe_dump(config)


def test_deploy_config_page_inhibits_ticket_of_same_cause_family_and_region():
    url, stop = start_alertmanager(tempfile.gettempdir(), offline_deploy_config())
    try:
        client = AlertmanagerClient(url)
        page = make_alert(severity="page", cause_family="network", region="us-east")
        same = make_alert(severity="ticket", cause_family="network", region="us-east")
        other_region = make_alert(severity="ticket", cause_family="network", region="eu-west")
        deliver(client, [page, same, other_region], {}, now=NOW)

        # The inhibitor learns about the page asynchronously: wait for it (bounded).
        deadline = time.monotonic() + 15
        while True:
            got = by_alert_id(client.get())
            if got[same["alert_id"]]["status"]["state"] == "suppressed" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert got[same["alert_id"]]["status"]["state"] == "suppressed"
        assert got[same["alert_id"]]["status"]["inhibitedBy"] == [got[page["alert_id"]]["fingerprint"]]
        assert got[other_region["alert_id"]]["status"]["inhibitedBy"] == []
        assert got[page["alert_id"]]["status"]["inhibitedBy"] == []
        assert [r["name"] for r in got[page["alert_id"]]["receivers"]] == ["pagerduty-oncall"]
        assert [r["name"] for r in got[other_region["alert_id"]]["receivers"]] == ["ticket-bridge"]
    finally:
        stop()


# ------------------------------------------------------------------ amtool


def amtool() -> str:
    path = shutil.which("amtool")
    if path is None:
        pytest.fail("amtool not found: apt-get install -y --no-install-recommends prometheus-alertmanager")
    return path


def test_deploy_config_passes_amtool_check_config():
    proc = subprocess.run([amtool(), "check-config", str(DEPLOY_CONFIG)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@pytest.mark.parametrize(
    ("severity", "receiver"),
    [("page", "pagerduty-oncall"), ("ticket", "ticket-bridge"), ("dashboard", "dashboard-null")],
)
def test_deploy_config_routes_by_severity(severity, receiver):
    proc = subprocess.run(
        [amtool(), "config", "routes", "test", f"--config.file={DEPLOY_CONFIG}",
         f"severity={severity}", "cause_family=hardware", "region=us-east", f"alertname={DEFAULT_ALERTNAME}"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == [receiver]


def test_deploy_config_groups_by_alertname_cause_family_region():
    config = yaml.safe_load(DEPLOY_CONFIG.read_text())
    assert config["route"]["group_by"] == ["alertname", "cause_family", "region"]


# ------------------------------------------------------- retries (local stub)


class StubAlertmanager:
    """127.0.0.1 HTTP server answering POST /api/v2/alerts from a script of status codes."""

    def __init__(self, statuses: list[int], body: str = ""):
        self.statuses = list(statuses)
        self.body = body
        self.requests: list[bytes] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                stub.requests.append(self.rfile.read(int(self.headers["Content-Length"])))
                status = stub.statuses.pop(0) if stub.statuses else 200
                payload = stub.body.encode() if status != 200 else b""
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_post_retries_on_503_then_succeeds():
    payload = alert_to_payload(make_alert(), now=NOW)
    with StubAlertmanager([503, 503], body="not ready") as stub:
        AlertmanagerClient(stub.url, retries=3, backoff=0.001).post([payload])
    assert len(stub.requests) == 3
    assert all(json.loads(body) == [payload] for body in stub.requests)


def test_post_gives_up_after_retries_on_persistent_5xx():
    with StubAlertmanager([503] * 10, body="overloaded") as stub:
        with pytest.raises(AlertmanagerError, match=r"after 3 attempt\(s\).*HTTP 503: overloaded"):
            AlertmanagerClient(stub.url, retries=2, backoff=0.001).post([])
    assert len(stub.requests) == 3


def test_post_does_not_retry_a_4xx_and_reports_the_body():
    with StubAlertmanager([400], body='{"message":"bad alert"}') as stub:
        with pytest.raises(AlertmanagerError, match='HTTP 400: {"message":"bad alert"}') as info:
            AlertmanagerClient(stub.url, retries=3, backoff=0.001).post([])
    assert len(stub.requests) == 1
    assert info.value.status_code == 400


def test_post_retries_connection_errors_then_raises():
    with StubAlertmanager([]) as stub:
        url = stub.url
    # The stub is closed: nothing listens on that port any more.
    with pytest.raises(AlertmanagerError, match=r"after 3 attempt\(s\).*ConnectionError"):
        AlertmanagerClient(url, retries=2, backoff=0.001).post([])


# ----------------------------------------------------- deliver, no server


class RecordingClient:
    def __init__(self):
        self.posts: list[list[dict]] = []

    def post(self, alerts):
        self.posts.append(list(alerts))


def test_deliver_with_empty_frame_posts_nothing_and_forgets_old_state():
    client = RecordingClient()
    assert deliver(client, pd.DataFrame([]), {"gone": "page:abc"}) == (0, {})
    assert client.posts == []


def test_deliver_rejects_duplicate_alert_ids():
    row = make_alert()
    with pytest.raises(ValueError, match="more than once"):
        deliver(RecordingClient(), [row, dict(row)], {})


def test_deliver_posts_in_batches():
    client = RecordingClient()
    rows = [make_alert() for _ in range(1201)]
    sent, state = deliver(client, rows, {}, now=NOW)
    assert sent == 1201 and len(state) == 1201
    assert [len(batch) for batch in client.posts] == [500, 500, 201]


@pytest.mark.parametrize("cost", [float("nan"), float("inf"), float("-inf"), None, "n/a", 10**400, [1, 2]])
def test_an_odd_cost_goes_out_as_unknown_and_never_stops_the_others(cost):
    good, odd = make_alert(), make_alert(usd_per_hour=cost)
    client = RecordingClient()
    report = deliver_report(client, [odd, good], {}, now=NOW)
    posted = by_alert_id([p for batch in client.posts for p in batch])
    assert set(posted) == {good["alert_id"], odd["alert_id"]} and report.sent == 2 and not report.skipped
    assert posted[odd["alert_id"]]["annotations"]["usd_per_hour"] == "unknown"
    assert "usd_per_hour is not a finite number" in posted[odd["alert_id"]]["annotations"]["data_warning"]
    assert posted[good["alert_id"]]["annotations"]["usd_per_hour"] == "412.50"
    assert "data_warning" not in posted[good["alert_id"]]["annotations"]
    assert list(report.repaired) == [odd["alert_id"]]


def test_null_descriptive_values_become_placeholders_and_the_page_still_routes():
    odd = make_alert(summary=None, runbook=float("nan"), scope=None, region=None, cause_family=pd.NA,
                     first_partition_start="not a time")
    client = RecordingClient()
    report = deliver_report(client, [odd], {}, now=NOW)
    (payload,) = client.posts[0]
    assert payload["labels"]["severity"] == "page"
    assert payload["labels"]["region"] == payload["labels"]["cause_family"] == "unknown"
    assert payload["annotations"]["summary"] == "(missing)"
    assert "first_partition_start" not in payload["annotations"]
    assert len(report.repaired[odd["alert_id"]]) == 6


def test_a_row_that_cannot_be_identified_is_skipped_with_its_reason_and_keeps_its_state():
    good = make_alert()
    bad_severity = make_alert(severity="critical")
    no_open = make_alert(opened_at=None)
    bad_time = make_alert(opened_at="yesterday-ish")
    no_id = make_alert(alert_id=None)
    client = RecordingClient()
    already = {bad_severity["alert_id"]: "page:0123456789abcdef"}
    report = deliver_report(client, [bad_severity, no_open, good, bad_time, no_id], already, now=NOW)
    assert [p["labels"]["alert_id"] for batch in client.posts for p in batch] == [good["alert_id"]]
    assert set(report.skipped) == {f"alert_id={bad_severity['alert_id']!r}", f"alert_id={no_open['alert_id']!r}",
                                   f"alert_id={bad_time['alert_id']!r}", "row 4"}
    assert "severity must be one of" in report.skipped[f"alert_id={bad_severity['alert_id']!r}"]
    assert "null 'opened_at'" in report.skipped[f"alert_id={no_open['alert_id']!r}"]
    # the state it had is kept, so a fixed row is compared with what was really sent
    assert report.state[bad_severity["alert_id"]] == already[bad_severity["alert_id"]]


def test_a_failed_post_says_how_many_payloads_are_pending():
    with StubAlertmanager([]) as stub:
        url = stub.url
    with pytest.raises(AlertmanagerError) as info:
        deliver_report(AlertmanagerClient(url, retries=0), [make_alert(), make_alert()], {}, now=NOW)
    assert info.value.pending == 2

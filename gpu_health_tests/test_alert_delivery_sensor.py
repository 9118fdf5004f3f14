"""The delivery sensor posts the alerts table to a real Alertmanager (started by the test session)."""

import json
import socket
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dagster as dg
import pandas as pd
import pytest
import requests

from gpu_health.defs.alerting.sensors import AlertmanagerResource, alertmanager_delivery_sensor
from gpu_health.defs.resources import WarehouseResource
from gpu_health.delivery.alertmanager import AlertmanagerError
from gpu_health.diagnosis import alerts as A
from gpu_health.diagnosis.finding import Finding
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.services.alertmanager import start_alertmanager

P0 = pd.Timestamp("2026-11-03T14:10:00Z")
FIVE = pd.Timedelta(minutes=5)


def _write_alerts(url: str, resolve: bool) -> str:
    """Alert snapshots as the alerts asset writes them: opened at 14:15, resolved later if asked."""
    wh = Warehouse(url)
    finding = Finding("thermal_throttle", "hardware", "page", "us-east", "thermal_throttle|us-east",
                      nodes=["use-v100-034"], lost_gpu_minutes=50.0, summary="Thermal throttling in us-east on use-v100-034",
                      evidence="72 GPU-minutes with thermal clock-event bits")
    prev = A.empty()
    rows = []
    for i, found in enumerate([True, True, False, False] if resolve else [True, True]):
        snap = A.step(prev, [finding] if found else [], P0 + i * FIVE, rates={"us-east": 1.2}, changes=pd.DataFrame())
        rows.append(snap)
        prev = snap
    frame = pd.concat(rows, ignore_index=True)
    wh.replace_window("alerts", frame, P0, P0 + len(rows) * FIVE)
    return frame["alert_id"].iloc[0]


def _active(url: str, alert_id: str) -> list:
    got = requests.get(f"{url}/api/v2/alerts", params={"filter": f'alert_id="{alert_id}"', "active": "true"}, timeout=5)
    got.raise_for_status()
    return got.json()


def _tick(url: str, am_url: str, now: pd.Timestamp, cursor: str | None):
    ctx = dg.build_sensor_context(cursor=cursor, resources={"warehouse": WarehouseResource(url=url),
                                                            "alertmanager": AlertmanagerResource(url=am_url)})
    with dg.partition_loading_context(effective_dt=now.to_pydatetime()):
        list(alertmanager_delivery_sensor(ctx))
    return ctx.cursor


def test_firing_alert_is_delivered_with_labels_and_annotations(sqlite_url, alertmanager_url):
    alert_id = _write_alerts(sqlite_url, resolve=False)
    # the alerts were written at data time 14:xx: the sensor reads relative to that (pinned) time
    cursor = _tick(sqlite_url, alertmanager_url, P0 + 3 * FIVE, None)
    assert alert_id in json.loads(cursor)
    active = _active(alertmanager_url, alert_id)
    assert len(active) == 1, active
    labels = active[0]["labels"]
    assert labels["severity"] == "page" and labels["cause_family"] == "hardware" and labels["region"] == "us-east"
    assert "use-v100-034" in active[0]["annotations"]["summary"]
    assert "runbook" in active[0]["annotations"]


def test_resolved_alert_leaves_the_active_list(sqlite_url, alertmanager_url):
    alert_id = _write_alerts(sqlite_url, resolve=False)
    cursor = _tick(sqlite_url, alertmanager_url, P0 + 3 * FIVE, None)
    assert len(_active(alertmanager_url, alert_id)) == 1
    _write_alerts(sqlite_url, resolve=True)  # the same alert, now resolved at 14:30
    _tick(sqlite_url, alertmanager_url, P0 + 5 * FIVE, cursor)
    assert _active(alertmanager_url, alert_id) == []


def test_without_alertmanager_the_sensor_skips(sqlite_url):
    ctx = dg.build_sensor_context(resources={"warehouse": WarehouseResource(url=sqlite_url),
                                             "alertmanager": AlertmanagerResource(url="")})
    out = list(alertmanager_delivery_sensor(ctx))
    assert isinstance(out[0], dg.SkipReason) and "no Alertmanager" in out[0].skip_message


# --- an Alertmanager outage, odd values, recovery ---------------------------------------------------

class _Webhook:
    """A 127.0.0.1 receiver for Alertmanager's webhook notifications; counts them per alert_id."""

    def __init__(self):
        self.notified: list[tuple[str, str]] = []  # (alert_id, status) per alert per notification
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.notified += [(a["labels"]["alert_id"], a["status"]) for a in body["alerts"]]
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_three_alerts(url: str) -> dict[str, float]:
    """Three open pages as the alerts asset writes them; two carry a cost that is not a finite number."""
    findings = [Finding("thermal_throttle", "hardware", "page", region, f"thermal_throttle|{region}|{i}",
                        nodes=[f"node-{i}"], team=f"team-{i}", lost_gpu_minutes=50.0, summary=f"Thermal throttling on node-{i}",
                        evidence="72 GPU-minutes with thermal clock-event bits")
                for i, region in enumerate(["us-east", "eu-west", "us-east"])]
    snap = A.step(A.empty(), findings, P0, rates={"us-east": 1.2, "eu-west": 1.1}, changes=pd.DataFrame())
    costs = [float("inf"), float("-inf"), 12.5]  # NaN: the unit tests (SQLite stores it as NULL, refused here)
    snap = snap.sort_values("alert_id").reset_index(drop=True).assign(usd_per_hour=costs)
    Warehouse(url).replace_window("alerts", snap, P0, P0 + FIVE)
    return dict(zip(snap["alert_id"], costs))


def test_an_outage_fails_the_tick_with_its_reason_and_recovery_delivers_every_alert_once(sqlite_url, tmp_path):
    costs = _write_three_alerts(sqlite_url)
    port = _free_port()  # Alertmanager's address, nothing listening yet: it is down
    am_url = f"http://127.0.0.1:{port}"
    now = P0 + 2 * FIVE

    def tick(cursor):
        ctx = dg.build_sensor_context(cursor=cursor, resources={
            "warehouse": WarehouseResource(url=sqlite_url),
            "alertmanager": AlertmanagerResource(url=am_url, timeout_s=2.0)})
        with dg.partition_loading_context(effective_dt=now.to_pydatetime()):
            out = list(alertmanager_delivery_sensor(ctx))
        return ctx.cursor, out

    for _ in range(2):  # down for two ticks: each fails with the reason, nothing is marked sent
        with pytest.raises(AlertmanagerError, match=rf"{am_url} did not take 3 alert update\(s\).*ConnectionError"):
            tick(None)

    hook = _Webhook()
    config = (f"route:\n  receiver: hook\n  group_by: ['...']\n  group_wait: 1s\n  group_interval: 1s\n"
              f"  repeat_interval: 1h\nreceivers:\n  - name: hook\n    webhook_configs:\n"
              f"      - url: {hook.url}\n        send_resolved: true\n")
    _, stop = start_alertmanager(tempfile.gettempdir(), config, port=port)  # back up, same address
    try:
        cursor, out = tick(None)
        assert set(json.loads(cursor)) == set(costs)
        assert "delivered 3 alert update(s)" in out[0].skip_message
        assert "2 sent with placeholders" in out[0].skip_message
        deadline = time.monotonic() + 30
        while {a for a, _ in hook.notified} != set(costs) and time.monotonic() < deadline:
            time.sleep(0.2)
        for _ in range(2):  # later ticks re-post the firing alerts: the same alerts, no new notification
            cursor, _ = tick(cursor)
        time.sleep(3)  # three group intervals: a duplicate would have been notified by now
        assert sorted(hook.notified) == sorted((a, "firing") for a in costs)
        active = requests.get(f"{am_url}/api/v2/alerts", timeout=5).json()
        assert sorted(a["labels"]["alert_id"] for a in active) == sorted(costs)
        cost_text = {a["labels"]["alert_id"]: a["annotations"]["usd_per_hour"] for a in active}
        assert cost_text == {a: ("12.50" if c == 12.5 else "unknown") for a, c in costs.items()}
    finally:
        stop()
        hook.close()

"""The delivery sensor posts the alerts table to a real Alertmanager (started by the test session)."""

import json

import dagster as dg
import pandas as pd
import requests

from gpu_health.defs.alerting.sensors import AlertmanagerResource, alertmanager_delivery_sensor
from gpu_health.defs.resources import WarehouseResource
from gpu_health.diagnosis import alerts as A
from gpu_health.diagnosis.detect import Finding
from gpu_health.storage.warehouse import Warehouse

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

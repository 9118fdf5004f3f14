"""What ``make dev`` starts besides ``dagster dev`` (gpu_health/dev/): the recent partition start, the scenario
moved to happen now, the one backfill's plan, and the local Alertmanager's webhook (a real Alertmanager with
deploy/alertmanager.yml's routes posting to it). ``dagster dev`` itself is not started here."""

import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gpu_health.constants import PARTITION
from gpu_health.delivery.alertmanager import AlertmanagerClient, alert_to_payload, alertname_of
from gpu_health.dev.alerts import dev_config, make_server
from gpu_health.dev.backfill import plan, sensor_start
from gpu_health.dev.scenario import rebase, write_rebased
from gpu_health.partitions import five_minute_partitions, recent_start
from gpu_health.sim.scenario import load_scenario
from gpu_health.steps.readiness import SensorCursor
from gpu_health_tests.services.alertmanager import start_alertmanager

REPO = Path(__file__).resolve().parents[1]
DEPLOY_CONFIG = REPO / "deploy" / "alertmanager.yml"
INCIDENT = REPO / "scenarios" / "smoke" / "02_gpu_fell_off_bus.yaml"
WITH_A_CHANGE = REPO / "scenarios" / "smoke" / "00_quiet.yaml"


# ---------------------------------------------------------------- the partition start

@pytest.mark.parametrize("now, days", [("2026-12-06T09:12:27Z", 2), ("2027-03-01T00:00:00Z", 1),
                                       ("2026-12-31T23:59:59Z", 7), ("2026-12-06T09:12:27", 0.5)])
def test_the_dev_partitions_start_days_before_now_at_the_beginning_of_that_day(now, days):
    at = pd.Timestamp(now).tz_localize("UTC") if pd.Timestamp(now).tzinfo is None else pd.Timestamp(now)
    start = pd.Timestamp(five_minute_partitions(recent_start(now, days)).start).tz_convert("UTC")
    assert start == start.normalize()  # a whole day: the daily partitions begin with the 5-minute ones
    assert start <= at - pd.Timedelta(days=days) < start + pd.Timedelta(days=1)


def test_a_start_not_before_now_is_refused():
    with pytest.raises(ValueError, match="days"):
        recent_start("2026-12-06T09:00:00Z", 0)


# ---------------------------------------------------------------- the scenario moved to now

@pytest.mark.parametrize("target", ["2026-12-06T09:21:29Z", "2027-01-10T00:00:00Z", "2026-12-06T09:25:00Z"])
def test_a_rebased_scenario_has_its_incident_just_after_the_time_asked_and_keeps_its_shape(target):
    raw = yaml.safe_load(INCIDENT.read_text())
    before = load_scenario(INCIDENT)
    after = load_scenario(rebase(raw, target, name=INCIDENT.stem))
    at = pd.Timestamp(target)
    (inc0,), (inc1,) = before.incidents, after.incidents
    assert at <= inc1.start < at + PARTITION
    offset = inc1.start - inc0.start
    assert offset % PARTITION == pd.Timedelta(0)  # where in its partition the incident starts is kept
    assert (after.start, after.end, inc1.end) == (before.start + offset, before.end + offset, inc0.end + offset)
    assert (inc1.node_ids, inc1.gpu_uuids, inc1.kind) == (inc0.node_ids, inc0.gpu_uuids, inc0.kind)  # same hardware


def test_a_rebased_scenario_moves_its_changes_and_without_incidents_starts_at_the_time_asked(tmp_path):
    before = load_scenario(WITH_A_CHANGE)
    written = tmp_path / "moved.yaml"
    write_rebased(WITH_A_CHANGE, "2026-12-06T10:00:00Z", written)
    after = load_scenario(written)
    assert after.start == pd.Timestamp("2026-12-06T10:00:00Z") and after.name == before.name
    offset = after.start - before.start
    assert [c.ts for c in after.changes] == [c.ts + offset for c in before.changes]
    assert [c.node_ids for c in after.changes] == [c.node_ids for c in before.changes]


def test_a_negative_incident_in_moves_the_incident_into_the_sensors_first_hour(tmp_path):
    from gpu_health.dev.__main__ import main

    out = tmp_path / "moved.yaml"
    before = pd.Timestamp.now(tz="UTC")
    main(["rebase", str(INCIDENT), "--incident-in=-30m", "--out", str(out)])
    (incident,) = load_scenario(out).incidents
    assert before - pd.Timedelta(minutes=30) <= incident.start < pd.Timestamp.now(tz="UTC") - pd.Timedelta(minutes=25)


# ---------------------------------------------------------------- the one backfill

def test_the_backfill_ends_before_the_sensors_first_partition_and_settles_the_day_before():
    cursor = SensorCursor(pd.Timestamp("2026-12-06T08:20:00Z"),
                          {"2026-12-06-08:15": "v1", "2026-12-06-08:10": "v1"}).dumps()
    first = sensor_start(cursor)
    assert first == pd.Timestamp("2026-12-06T08:10:00Z")  # what it requested, not only where it goes next
    got = plan("2026-12-04-00:00", first)
    assert (got.five_minute[0], got.five_minute[-1], got.day) == ("2026-12-04-00:00", "2026-12-06-08:05", "2026-12-05")
    assert len(got.five_minute) == len(set(got.five_minute)) == 2 * 288 + 8 * 12 + 2  # every partition, once
    assert sensor_start(None) is None  # before the sensor's first tick: nothing to plan from


def test_a_window_that_starts_with_the_sensor_needs_no_backfill():
    waiting = SensorCursor(pd.Timestamp("2026-12-06T00:00:00Z"), {}).dumps()
    got = plan("2026-12-06-00:00", sensor_start(waiting))
    assert (got.five_minute, got.day) == ([], None)


# ---------------------------------------------------------------- Alertmanager -> the webhook's log

def _fast(config_text: str) -> str:
    """The dev configuration with every route's group_wait at 1 s: the test waits for the notification, not for
    the routes' batching (the routes, receivers and matchers are the production file's)."""
    config = yaml.safe_load(config_text)
    stack = [config["route"]]
    while stack:
        route = stack.pop()
        if "group_wait" in route or route is config["route"]:
            route["group_wait"] = "1s"
        stack.extend(route.get("routes") or [])
    return yaml.safe_dump(config)


def _lines(path: Path, want: int, timeout_s: float = 60.0) -> list[dict]:
    """The log's lines once it holds ``want`` of them (bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            if len(lines) >= want:
                return lines
        time.sleep(0.2)
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _row(severity: str) -> dict:
    now = datetime.now(UTC).replace(microsecond=0)
    return {"alert_id": f"dev-{uuid.uuid4().hex[:10]}", "opened_at": now - timedelta(minutes=5),
            "resolved_at": None, "severity": severity, "cause_family": "hardware", "region": "eu-west",
            "scope": "node dgx-07", "summary": "GPU fell off the bus on dgx-07 (Xid 79)",
            "usd_per_hour": 98.5, "runbook": "Drain the node. Runbook: docs/runbooks.md#hardware",
            "detector": "gpu_fell_off_bus"}


def test_the_webhook_appends_what_alertmanager_posts_through_the_production_routes(tmp_path):
    log = tmp_path / "alerts" / "webhook.jsonl"
    server = make_server(log)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = dev_config(DEPLOY_CONFIG.read_text(), f"http://127.0.0.1:{server.server_port}/")
    url, stop = start_alertmanager(tmp_path, _fast(config))
    try:
        # a ticket elsewhere than the page: the production inhibition mutes a ticket of the page's family and region
        page, ticket = _row("page"), {**_row("ticket"), "region": "us-east"}
        AlertmanagerClient(url).post([alert_to_payload(page), alert_to_payload(ticket)])
        lines = _lines(log, 2)
    finally:
        stop()
        server.shutdown()
        server.server_close()
    by_receiver = {line["notification"]["receiver"]: line["notification"] for line in lines}
    assert set(by_receiver) == {"pagerduty-oncall", "ticket-bridge"}  # deploy/alertmanager.yml's routing
    paged = by_receiver["pagerduty-oncall"]
    assert paged["status"] == "firing"
    assert [a["labels"]["alert_id"] for a in paged["alerts"]] == [page["alert_id"]]
    assert paged["alerts"][0]["labels"]["alertname"] == alertname_of(page["detector"])
    assert all("received_at" in line for line in lines)


def test_the_dev_configuration_keeps_the_routes_and_silences_what_notifies_nobody():
    prod = yaml.safe_load(DEPLOY_CONFIG.read_text())
    dev = yaml.safe_load(dev_config(DEPLOY_CONFIG.read_text(), "http://127.0.0.1:9/"))
    assert (dev["route"], dev["inhibit_rules"]) == (prod["route"], prod["inhibit_rules"])
    receivers = {r["name"]: r for r in dev["receivers"]}
    assert receivers["dashboard-null"] == {"name": "dashboard-null"}
    for name in ("pagerduty-oncall", "ticket-bridge"):
        assert receivers[name]["webhook_configs"] == [{"url": "http://127.0.0.1:9/", "send_resolved": True}]

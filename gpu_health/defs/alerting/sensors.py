"""Delivery: a sensor posts new, updated and resolved alerts to Prometheus Alertmanager (v2 API)."""

import json

import dagster as dg
import pandas as pd

from gpu_health.constants import PARTITION
from gpu_health.defs.resources import AlertmanagerResource, WarehouseResource
from gpu_health.delivery.alertmanager import (
    AlertmanagerClient,
    AlertmanagerError,
    deliver_report,
    sent_state_from_cursor,
)
from gpu_health.storage.warehouse import masked_url

LOOKBACK = pd.Timedelta(hours=24)


def latest_alerts(wh, now: pd.Timestamp) -> pd.DataFrame:
    """Each alert's latest snapshot among those updated in the last day."""
    rows = wh.read_window("alerts", now - LOOKBACK, now + PARTITION)
    if rows.empty:
        return rows
    return rows.sort_values("partition_start").groupby("alert_id", as_index=False).last()


@dg.sensor(
    name="alertmanager_delivery_sensor", minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Posts new, updated and resolved alerts (and re-posts firing ones before they expire) to "
                "Alertmanager's v2 API; the cursor remembers what was sent. An Alertmanager it cannot reach "
                "fails the tick with the reason (nothing is lost: the next tick sends everything pending).",
)
def alertmanager_delivery_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource,
                                 alertmanager: AlertmanagerResource):
    """Deliver the last day's alerts; an outage is a failed tick, an odd row is a warning.

    An Alertmanager that refuses or cannot be reached raises ``AlertmanagerError`` with the
    URL, the reason and the number of updates pending, so the outage shows as a failed tick
    in the sensor's history (and in the daemon's log) instead of a skipped one. The cursor
    is not advanced, so the first tick after recovery sends every pending alert; Alertmanager
    takes a re-post of the same label set as the same alert, so each is delivered once.
    A row with odd values (a NaN or infinite cost) goes out with placeholders and a
    ``data_warning`` annotation; a row that cannot be identified is left out and named in
    the tick's message and a warning: neither stops the other alerts.
    """
    if not alertmanager.url:
        yield dg.SkipReason("no Alertmanager configured (GPU_HEALTH_ALERTMANAGER_URL)")
        return
    with dg.partition_loading_context() as loading:  # the wall clock on a real tick; pinnable in tests
        now = pd.Timestamp(loading.effective_dt)
    now = now.tz_localize("UTC") if now.tzinfo is None else now.tz_convert("UTC")
    alerts = latest_alerts(warehouse.get(), now)
    client = AlertmanagerClient(alertmanager.url, timeout=alertmanager.timeout_s)
    try:
        # expiry (endsAt) is Alertmanager's wall clock; which alerts are read follows the data time
        report = deliver_report(client, alerts, sent_state_from_cursor(context.cursor),
                                generator_url=alertmanager.generator_url or None,
                                runbook_base_url=alertmanager.runbook_base_url or None)
    except AlertmanagerError as err:
        raise AlertmanagerError(
            f"Alertmanager at {masked_url(alertmanager.url)} did not take {err.pending} alert update(s); they stay "
            f"pending and go out on the first tick it answers: {err}", status_code=err.status_code, body=err.body) from err
    context.update_cursor(json.dumps(report.state, sort_keys=True))
    message = f"delivered {report.sent} alert update(s) to {masked_url(alertmanager.url)}"
    if report.repaired:
        message += f"; {len(report.repaired)} sent with placeholders for odd values: " + "; ".join(
            f"{k} ({', '.join(v)})" for k, v in list(report.repaired.items())[:5])
    if report.skipped:
        message += f"; {len(report.skipped)} alert row(s) left out: " + "; ".join(
            f"{k}: {v}" for k, v in list(report.skipped.items())[:5])
    if report.repaired or report.skipped:
        context.log.warning(message)
    yield dg.SkipReason(message)

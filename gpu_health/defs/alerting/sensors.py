"""Delivery: a sensor posts new, updated and resolved alerts to Prometheus Alertmanager (v2 API)."""

import json

import dagster as dg
import pandas as pd

from gpu_health.defs.resources import WarehouseResource
from gpu_health.delivery.alertmanager import AlertmanagerClient, AlertmanagerError, deliver, sent_state_from_cursor

LOOKBACK = pd.Timedelta(hours=24)


class AlertmanagerResource(dg.ConfigurableResource):
    """Where alerts go (``GPU_HEALTH_ALERTMANAGER_URL``; empty: delivery is off)."""

    url: str = ""
    generator_url: str = ""  # e.g. the Dagster UI's alerts asset page; {alert_id} is filled in
    timeout_s: float = 5.0


def latest_alerts(wh, now: pd.Timestamp) -> pd.DataFrame:
    """Each alert's latest snapshot among those updated in the last day."""
    rows = wh.read_window("alerts", now - LOOKBACK, now + pd.Timedelta(minutes=5))
    if rows.empty:
        return rows
    return rows.sort_values("partition_start").groupby("alert_id", as_index=False).last()


@dg.sensor(
    name="alertmanager_delivery_sensor", minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Posts new, updated and resolved alerts (and re-posts firing ones before they expire) to "
                "Alertmanager's v2 API; the cursor remembers what was sent.",
)
def alertmanager_delivery_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource,
                                 alertmanager: AlertmanagerResource):
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
        sent, state = deliver(client, alerts, sent_state_from_cursor(context.cursor),
                              generator_url=alertmanager.generator_url or None)
    except AlertmanagerError as err:
        yield dg.SkipReason(f"Alertmanager refused the alerts: {err}")  # cursor kept: retried next tick
        return
    context.update_cursor(json.dumps(state, sort_keys=True))
    yield dg.SkipReason(f"delivered {sent} alert update(s) to {alertmanager.url}")

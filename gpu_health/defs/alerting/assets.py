"""Alerts: detectors over each partition, one alert per incident, severities as asset checks."""

import dagster as dg

from gpu_health.defs.common import derived_asset
from gpu_health.steps.checks import ALERT_CHECKS, firing_in_last_partition

CHECKS = [
    dg.AssetCheckSpec("pages", asset="alerts", description="Fails (ERROR) while a page-severity alert fires."),
    dg.AssetCheckSpec("tickets", asset="alerts", description="Fails (WARN) while a ticket-severity alert fires."),
]


def _checks(result, wh, start, end):
    """Pages and tickets firing in the window's last partition, as ERROR and WARN checks."""
    frame, rerun = result.tables["alerts"], result.metadata
    firing = firing_in_last_partition(frame)
    events = []
    levels = {"page": dg.AssetCheckSeverity.ERROR, "ticket": dg.AssetCheckSeverity.WARN}
    for name, severity in ALERT_CHECKS:
        level = levels[severity]
        hit = firing[firing["severity"] == severity] if len(firing) else firing
        events.append(dg.AssetCheckResult(
            check_name=name, asset_key="alerts", passed=hit.empty, severity=level,
            metadata={"firing": len(hit), "usd_per_hour": float(hit["usd_per_hour"].sum()) if len(hit) else 0.0,
                      "alerts": dg.MetadataValue.md(hit[["alert_id", "cause_family", "region", "summary", "usd_per_hour"]].to_markdown(index=False) if len(hit) else "(none)")}))
    return events, {"alerts_in_window": int(frame["alert_id"].nunique()) if len(frame) else 0,
                    "alerts_withdrawn": dg.MetadataValue.json(rerun["alerts_withdrawn"])}


def build_alerting_assets(five_minute) -> list:
    return [
        derived_asset("alerts", partitions_def=five_minute,
                      checks=_checks, check_specs=CHECKS),
    ]

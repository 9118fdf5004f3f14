"""Alerts: detectors over each partition, one alert per incident, severities as asset checks."""

import dagster as dg

from gpu_health.defs.common import derived_asset
from gpu_health.metrics import models as M
from gpu_health.metrics import pipeline as P

CHECKS = [
    dg.AssetCheckSpec("pages", asset="alerts", description="Fails (ERROR) while a page-severity alert fires."),
    dg.AssetCheckSpec("tickets", asset="alerts", description="Fails (WARN) while a ticket-severity alert fires."),
]


def build_alerting_assets(five_minute) -> list:
    def _alerts(context, wh, start, end):
        """This window's alerts, and the later partitions' re-derived from them when it re-runs
        (P.alerts_after_rerun), stored in one transaction: a crash leaves the old chain or the new one."""
        frame = P.alerts(wh, start, end)
        rows, stop, rerun = P.alerts_after_rerun(wh, start, end, frame)
        wh.replace_windows({"alerts": M.Alerts.validate(rows, lazy=True)}, start, stop, lock_partitions=P.FIVE)
        if rerun["alerts_rederived_partitions"] or rerun["alerts_withdrawn"]:
            context.log.info(f"alerts re-derived for {rerun['alerts_rederived_partitions']} later partition(s) up to "
                             f"{stop}; withdrawn: {rerun['alerts_withdrawn'] or 'none'}; "
                             f"converged: {rerun['alerts_rederive_converged']}")
        frame = rows[(rows["partition_start"] >= start) & (rows["partition_start"] < end)] if len(rows) else frame
        last = frame[frame["partition_start"] == frame["partition_start"].max()] if len(frame) else frame
        firing = last[last["status"] == "firing"] if len(last) else last
        events = []
        for name, severity, level in (("pages", "page", dg.AssetCheckSeverity.ERROR), ("tickets", "ticket", dg.AssetCheckSeverity.WARN)):
            hit = firing[firing["severity"] == severity] if len(firing) else firing
            events.append(dg.AssetCheckResult(
                check_name=name, asset_key="alerts", passed=hit.empty, severity=level,
                metadata={"firing": len(hit), "usd_per_hour": float(hit["usd_per_hour"].sum()) if len(hit) else 0.0,
                          "alerts": dg.MetadataValue.md(hit[["alert_id", "cause_family", "region", "summary", "usd_per_hour"]].to_markdown(index=False) if len(hit) else "(none)")}))
        return frame, events, {"alerts_in_window": int(frame["alert_id"].nunique()) if len(frame) else 0,
                               "alerts_rederived_partitions": rerun["alerts_rederived_partitions"],
                               "alerts_rederive_converged": rerun["alerts_rederive_converged"],
                               "alerts_withdrawn": dg.MetadataValue.json(rerun["alerts_withdrawn"])}

    return [
        derived_asset("alerts", group="alerting", owner="infra", model=M.Alerts, partitions_def=five_minute,
                      deps=["goodput_leaves", "cluster_goodput", "step_time_baselines", "gpu_telemetry", "node_telemetry",
                            "network_telemetry", "job_runtime_metrics", "scheduler_events", "change_events", "job_metadata",
                            "maintenance_windows", "cost_capacity", "slo_error_budgets"],
                      grain="one row per alert per 5-minute partition in which it is open",
                      description="One alert per incident: what is broken, where, since when, the top cause with its "
                                  "evidence, USD per hour burning, the first action and the deploy it follows. Pages are "
                                  "ERROR checks, tickets WARN checks; dashboards are metadata only.",
                      compute=_alerts, check_specs=CHECKS, stored_by_step=True),
    ]

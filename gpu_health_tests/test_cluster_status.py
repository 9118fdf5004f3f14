"""The cluster at a glance (gpu_health.diagnosis.status, the cluster_status step and asset): the page and its numbers
on hand-made frames, then read from the metadata of a partition of the 5-minute job."""

import dagster as dg
import pandas as pd
import pytest

from gpu_health.diagnosis.status import first_action, kpi_deviations, status_rows
from gpu_health.steps.models import validate

P0 = pd.Timestamp("2026-11-03T14:00:00Z")
P1 = P0 + pd.Timedelta(minutes=5)
STAR = {"region": "*", "sku": "*", "workload_class": "*", "team": "*"}


def _goodput(rows):
    return pd.DataFrame([{"partition_start": p, "region": r, "goodput": g} for p, r, g in rows])


def _baselines(rows):
    """(partition, series, expected, mad, method) at the cluster slice."""
    return pd.DataFrame([{"partition_start": p, "series": s, **STAR, "expected": e, "mad": m, "q10": e - 0.1,
                          "q90": e + 0.1, "n_samples": 10, "method": method} for p, s, e, m, method in rows])


def _kpis(rows):
    """(partition, kpi, value, status, region)."""
    return pd.DataFrame([{"partition_start": p, "kpi": k, **STAR, "region": region, "value": v, "status": st}
                         for p, k, v, st, region in rows])


def _alerts(rows):
    """(partition, severity, status, summary, description, usd_per_hour)."""
    return pd.DataFrame([{"partition_start": p, "severity": sev, "status": st, "summary": summ, "description": d,
                          "region": "us-east", "opened_at": P0, "usd_per_hour": usd,
                          "runbook": "Drain the node. Runbook: docs/runbooks.md#hardware."} for p, sev, st, summ, d, usd in rows])


GAPS = pd.DataFrame([{"source": "network_telemetry", "partition_start": P1, "reason": "producer silent for 15 min"}])
REJECTS = pd.DataFrame([{"source": "gpu_telemetry", "partition_start": P1, "row_index": 3, "reason": "power_w < 0"},
                        {"source": "gpu_telemetry", "partition_start": P1, "row_index": -1, "reason": "unreadable"}])


def _status():
    goodput = _goodput([(P0, "*", 0.90), (P0, "us-east", 0.5), (P1, "*", 0.80)])
    baselines = _baselines([(P0, "share_productive", 0.91, 0.01, "hour_of_day"),
                            (P1, "share_productive", 0.92, 0.01, "hour_of_day"),
                            (P1, "allocation_rate", 0.80, 0.01, "hour_of_day"),
                            (P1, "job_failure_rate", 0.02, 0.01, "hour_of_day")])
    kpis = _kpis([(P1, "allocation_rate", 0.70, "ok", "*"), (P1, "job_failure_rate", 0.03, "ok", "*"),
                  (P1, "allocation_rate", 0.10, "ok", "us-east"), (P1, "network_error_rate", None, "degraded", "*")])
    alerts = _alerts([
        (P1, "ticket", "firing", "Slow loader", "What: x. Evidence: y. First action: Check the bucket.", 5.0),
        (P1, "page", "firing", "GPU fault | node-3", "What: x. Evidence: y. First action: Drain node-3. History: 2.",
         90.0),
        (P1, "page", "resolved", "Old page", "First action: nothing", 1.0),
        (P0, "page", "firing", "Earlier page", "First action: elsewhere", 1.0)])
    return status_rows([P0, P1], goodput, baselines, kpis, alerts, GAPS, REJECTS)


def test_the_numbers_of_each_partition():
    rows = _status().set_index("partition_start")
    assert rows.loc[P0, "goodput"] == pytest.approx(0.90) and rows.loc[P0, "goodput_expected"] == pytest.approx(0.91)
    p1 = rows.loc[P1]
    assert p1["goodput"] == pytest.approx(0.80) and p1["goodput_expected"] == pytest.approx(0.92)
    assert (p1["open_pages"], p1["open_tickets"]) == (1, 1)  # the resolved page and the other partition's: not open
    # allocation 10 points below a baseline with a MAD of 1 point: further than the failure rate's 1 point
    assert p1["worst_kpi"] == "allocation_rate" and p1["worst_kpi_z"] == pytest.approx(-0.10 / (0.01 * 1.4826))
    assert (p1["gap_sources"], p1["rejected_rows"]) == (1, 2)
    assert (rows.loc[P0, "gap_sources"], rows.loc[P0, "rejected_rows"], rows.loc[P0, "open_pages"]) == (0, 0, 1)


def test_the_page_reads_north_star_first_then_pages_with_their_first_action_then_kpis_then_gaps():
    page = _status().set_index("partition_start").loc[P1, "markdown"]
    order = [page.index(s) for s in ("**Goodput 80.0%**", "### Open pages", "### KPIs furthest", "### Data gaps")]
    assert order == sorted(order)
    assert "baseline of 92.0%" in page and "-12.0 points" in page
    assert page.index("Drain node-3") < page.index("Check the bucket")  # the page before the ticket
    assert "History" not in page and "GPU fault \\| node-3" in page  # a pipe in a summary does not split the row
    assert "Old page" not in page and "Earlier page" not in page
    assert "`network_telemetry` written empty" in page and "1 rows and 1 files quarantined" in page
    assert "network_error_rate" in page  # degraded: no value
    assert "| docs/runbooks.md#hardware |" in page and "Drain the node" not in page  # the link, not the action again


def test_nothing_to_stand_on_is_said_never_shown_as_zero():
    rows = status_rows([P0], _goodput([]), _baselines([]), _kpis([]), _alerts([]), GAPS.iloc[:0], REJECTS.iloc[:0])
    row = rows.iloc[0]
    assert pd.isna(row["goodput"]) and pd.isna(row["goodput_expected"]) and pd.isna(row["worst_kpi"])
    assert "no data" in row["markdown"] and "None open." in row["markdown"]
    validate("cluster_status", rows)  # the contract holds an empty partition's row too
    validate("cluster_status", _status())


def test_first_action_and_deviations():
    assert first_action("What: a. First action: Roll back chg-1 (a -> b) History: 3 episodes.") == "Roll back chg-1 (a -> b)"
    assert first_action("What: a.") == ""
    dev = kpi_deviations(_kpis([(P0, "allocation_rate", 0.7, "ok", "*")]),
                         _baselines([(P0, "allocation_rate", 0.8, 0.0, "trailing")]))
    # a MAD of 0: the q10-q90 spread as a normal's (0.2 / 2.5631)
    assert dev["z"].iloc[0] == pytest.approx(-0.1 / (0.2 / 2.5631))


# --- on a materialization ------------------------------------------------------------------------------------------
def test_a_partition_of_the_five_minute_job_carries_the_status_page(sqlite_url, tmp_path):
    from gpu_health.defs.build import build_definitions
    from gpu_health.settings import Settings
    from gpu_health.storage.warehouse import Warehouse
    from gpu_health_tests.test_pipeline import QUIET, SMALL_SCENARIO, resources

    path = tmp_path / "small.yaml"
    path.write_text(SMALL_SCENARIO)
    start = pd.Timestamp("2026-11-03T14:10:00Z")
    defs = build_definitions(Settings(), resources(sqlite_url, kind="simulator", scenario=str(path)))
    node = defs.resolve_asset_graph().get(dg.AssetKey("cluster_status"))
    assert node.group_name == "status"
    result = defs.resolve_job_def("five_minute_job").execute_in_process(
        partition_key=start.strftime("%Y-%m-%d-%H:%M"), instance=dg.DagsterInstance.ephemeral(), run_config=QUIET)
    assert result.success
    meta = {e.asset_key.to_user_string(): {k: getattr(v, "value", v) for k, v in e.metadata.items()}
            for e in (ev.event_specific_data.materialization for ev in result.get_asset_materialization_events())}
    got = meta["cluster_status"]
    stored = Warehouse(sqlite_url).read_window("cluster_status", start, start + pd.Timedelta(minutes=5)).iloc[0]
    assert got["goodput"] == pytest.approx(stored["goodput"]) and 0 < got["goodput"] <= 1
    assert (got["open_pages"], got["open_tickets"]) == (stored["open_pages"], stored["open_tickets"])
    assert got["status"] == stored["markdown"] and got["status"].startswith("## Cluster status, 2026-11-03 14:10 UTC")
    assert "markdown" not in got["preview"]

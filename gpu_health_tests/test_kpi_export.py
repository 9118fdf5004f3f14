"""Names of the KPI metrics exposed to Prometheus (the scrape itself: test_stock_deployment.py)."""

import pytest

from gpu_health.kpi_export import kpi_metric_name, metric_families
from gpu_health.metrics.kpis import SERIES_UNITS
from gpu_health.storage.warehouse import Warehouse


def test_every_catalog_series_has_one_valid_distinct_name():
    names = {}
    for series, unit in SERIES_UNITS.items():
        name, factor = kpi_metric_name(series, unit)
        assert name.startswith("gpu_health_kpi_") and "." not in name and factor > 0
        names[name] = series
    assert len(names) == len(SERIES_UNITS)  # no two series share a metric name
    assert kpi_metric_name("allocation_rate", "ratio") == ("gpu_health_kpi_allocation_rate_ratio", 1.0)
    assert kpi_metric_name("queue_wait_p95", "s") == ("gpu_health_kpi_queue_wait_p95_seconds", 1.0)
    assert kpi_metric_name("comm_health.packet_loss", "pct") == ("gpu_health_kpi_comm_health_packet_loss_ratio", 0.01)
    assert kpi_metric_name("cost_per_productive_gpu_hour", "usd per productive gpu-hour")[0] == \
        "gpu_health_kpi_cost_per_productive_gpu_hour_usd"
    assert kpi_metric_name("comm_health.retransmits", "retransmits per link-minute")[0] == \
        "gpu_health_kpi_comm_health_retransmits_per_link_minute"


def test_unknown_unit_is_refused():
    with pytest.raises(ValueError, match="UNIT_SUFFIX"):
        kpi_metric_name("new_kpi", "furlongs")


def test_empty_warehouse_exposes_families_without_samples(sqlite_url):
    fams = {f.name: f for f in metric_families(Warehouse(sqlite_url))}
    assert "gpu_health_cluster_goodput_ratio" in fams and not fams["gpu_health_cluster_goodput_ratio"].samples


def test_serve_metrics_once_prints_the_latest_partition(sqlite_url, capsys):
    import pandas as pd

    from gpu_health.cli import main
    from gpu_health.metrics.goodput import STATES

    wh = Warehouse(sqlite_url)
    wh.create_all()
    for i, goodput in enumerate((0.5, 0.75)):  # two partitions: only the later one is exposed
        start = pd.Timestamp("2026-11-03T14:00:00Z") + pd.Timedelta(minutes=5 * i)
        row = {"partition_start": start, "region": "*", "paid_gpu_minutes": 100.0, "productive_gpu_minutes": 100 * goodput,
               "goodput": goodput, **{f"share_{s}": 0.0 for s in STATES}}
        row["share_productive"], row["share_idle_no_demand"] = goodput, 1 - goodput
        wh.replace_window("cluster_goodput", pd.DataFrame([row]), start, start + pd.Timedelta(minutes=5))
    assert main(["serve-metrics", "--warehouse", sqlite_url, "--once"]) == 0
    text = capsys.readouterr().out
    assert 'gpu_health_cluster_goodput_ratio{region="*"} 0.75\n' in text
    assert 'gpu_health_loss_tree_share_ratio{region="*",state="idle_no_demand"} 0.25\n' in text
    assert 'gpu_health_paid_gpu_seconds{region="*"} 6000.0\n' in text
    assert text.rstrip().endswith("# EOF")

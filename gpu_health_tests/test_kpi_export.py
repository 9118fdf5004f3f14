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

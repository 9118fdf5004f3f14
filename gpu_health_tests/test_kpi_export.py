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


def _kpi_rows(start, rows):
    """kpi_values rows of one partition: ``(kpi, region, sku, workload_class, team, numerator, denominator, status)``."""
    import numpy as np
    import pandas as pd

    from gpu_health.metrics.kpis import SERIES_UNITS

    out = []
    for kpi, region, sku, cls, team, num, den, status in rows:
        value = num / den if status == "ok" else np.nan
        out.append({"partition_start": start, "kpi": kpi, "region": region, "sku": sku, "workload_class": cls, "team": team,
                    "value": value, "numerator": num, "denominator": den, "unit": SERIES_UNITS[kpi], "status": status})
    return pd.DataFrame(out)


def _write_partition(wh, start, kpi_rows):
    import pandas as pd

    from gpu_health.metrics.goodput import STATES

    cg = {"partition_start": start, "region": "*", "paid_gpu_minutes": 100.0, "productive_gpu_minutes": 50.0,
          "goodput": 0.5, **{f"share_{s}": 0.0 for s in STATES}}
    cg["share_productive"] = cg["share_idle_no_demand"] = 0.5
    end = start + pd.Timedelta(minutes=5)
    wh.replace_window("cluster_goodput", pd.DataFrame([cg]), start, end)
    wh.replace_window("kpi_values", _kpi_rows(start, kpi_rows), start, end)


def test_every_ratio_kpi_has_a_cluster_wide_series_from_the_cluster_sums(sqlite_url):
    """The finest slices only are stored; serve-metrics adds region="*" (every dimension "*") for every ratio series.

    The cluster's ratio is the ratio of the summed numerators and denominators, never a sum (or mean) of the
    slices' ratios; a series with a degraded slice has no cluster-wide value (unknown, not biased); a count that
    is not a ratio (fragmentation's GPUs) and a quantile (queue_wait_p95) are not rolled up."""
    import pandas as pd

    wh = Warehouse(sqlite_url)
    wh.create_all()
    start = pd.Timestamp("2026-11-03T14:00:00Z")
    _write_partition(wh, start, [
        ("allocation_rate", "lab", "H100", "*", "*", 3.0, 4.0, "ok"),
        ("allocation_rate", "lab", "A100", "*", "*", 1.0, 4.0, "ok"),
        ("allocation_rate", "us-east", "H100", "*", "*", 9.0, 10.0, "ok"),
        ("allocation_rate", "us-west", "H100", "*", "*", 0.0, 0.0, "no_data"),
        ("job_failure_rate", "lab", "*", "batch", "*", 1.0, 10.0, "ok"),
        ("job_failure_rate", "us-east", "*", "interactive", "*", 3.0, 10.0, "ok"),
        ("comm_health.packet_loss", "lab", "H100", "*", "*", 2.0, 4.0, "ok"),  # pct: exposed x 0.01
        ("comm_health.packet_loss", "us-east", "H100", "*", "*", 4.0, 4.0, "ok"),
        ("hw_fault_rate.dbe", "lab", "H100", "*", "*", 1.0, 4.0, "ok"),
        ("hw_fault_rate.dbe", "us-east", "H100", "*", "*", 1.0, 4.0, "degraded"),
        ("gaming_guardrails.busy_without_progress", "*", "*", "*", "vision", 1.0, 4.0, "ok"),
        ("gaming_guardrails.busy_without_progress", "*", "*", "*", "nlp", 0.0, 4.0, "ok"),
        ("fragmentation", "lab", "H100", "batch", "*", 10.0, 5.0, "ok"),
        ("fragmentation", "us-east", "H100", "batch", "*", 20.0, 5.0, "ok"),
        ("sla_attainment", "*", "*", "*", "*", 9.0, 10.0, "ok"),  # already the cluster's: not doubled
    ])
    fams = {f.name: f for f in metric_families(wh)}

    def cluster(name):
        return [s.value for s in fams[name].samples
                if all(s.labels[d] == "*" for d in ("region", "sku", "workload_class", "team"))]

    assert cluster("gpu_health_kpi_allocation_rate_ratio") == [pytest.approx(13 / 18)]
    assert cluster("gpu_health_kpi_job_failure_rate_ratio") == [pytest.approx(4 / 20)]
    assert cluster("gpu_health_kpi_comm_health_packet_loss_ratio") == [pytest.approx(6 / 8 * 0.01)]
    assert cluster("gpu_health_kpi_gaming_guardrails_busy_without_progress_ratio") == [pytest.approx(1 / 8)]
    assert cluster("gpu_health_kpi_sla_attainment_ratio") == [pytest.approx(0.9)]
    assert cluster("gpu_health_kpi_hw_fault_rate_dbe_ratio") == []
    assert cluster("gpu_health_kpi_fragmentation_gpus") == []
    # the slices are exposed as before
    assert len(fams["gpu_health_kpi_allocation_rate_ratio"].samples) == 4


def test_serve_metrics_binds_loopback_unless_told_otherwise():
    from gpu_health.cli import _parser as build_parser

    args = build_parser().parse_args(["serve-metrics"])
    assert args.address == "127.0.0.1"
    assert build_parser().parse_args(["serve-metrics", "--bind", "0.0.0.0"]).address == "0.0.0.0"

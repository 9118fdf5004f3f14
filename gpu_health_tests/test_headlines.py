"""The numbers each materialization carries so that Dagster plots them (gpu_health.defs.headlines): computed on
hand-made frames, then read from the metadata of a partition of the 5-minute job."""

import math

import dagster as dg
import pandas as pd
import pytest

from gpu_health.defs.headlines import goodput_headline, kpi_headline, spend_headline

P0 = pd.Timestamp("2026-11-03T14:00:00Z")
P1 = P0 + pd.Timedelta(minutes=5)


def _goodput_rows(rows) -> pd.DataFrame:
    """cluster_goodput rows: (partition, region, paid, productive, idle_no_demand) GPU-minutes."""
    out = pd.DataFrame(rows, columns=["partition_start", "region", "paid_gpu_minutes", "productive_gpu_minutes", "idle"])
    out["goodput"] = out["productive_gpu_minutes"] / out["paid_gpu_minutes"]
    out["share_productive"] = out["goodput"]
    out["share_idle_no_demand"] = out["idle"] / out["paid_gpu_minutes"]
    return out.drop(columns="idle")


def test_goodput_is_summed_over_the_window_and_shares_weighted_by_paid():
    frame = _goodput_rows([
        (P0, "*", 100.0, 90.0, 10.0), (P1, "*", 300.0, 150.0, 150.0),
        (P0, "a", 100.0, 90.0, 10.0), (P1, "a", 100.0, 50.0, 50.0), (P1, "b", 200.0, 100.0, 100.0),
    ])
    got = goodput_headline(frame)
    assert got["goodput"] == pytest.approx(240 / 400)  # not the mean of 0.9 and 0.5
    assert got["paid_gpu_hours"] == pytest.approx(400 / 60) and got["productive_gpu_hours"] == pytest.approx(4)
    assert got["share_idle_no_demand"] == pytest.approx(160 / 400)
    assert got["share_productive"] == pytest.approx(got["goodput"])
    assert got["goodput_a"] == pytest.approx(140 / 200) and got["goodput_b"] == pytest.approx(0.5)
    assert "goodput" not in goodput_headline(_goodput_rows([(P0, "*", 0.0, 0.0, 0.0)]))  # nothing paid: no point


def test_kpi_headline_takes_the_cluster_wide_ok_rows():
    def row(p, kpi, value, num=math.nan, den=math.nan, region="*", status="ok", unit="ratio"):
        return {"partition_start": p, "kpi": kpi, "region": region, "sku": "*", "workload_class": "*", "team": "*",
                "value": value, "numerator": num, "denominator": den, "status": status, "unit": unit}

    frame = pd.DataFrame([
        row(P0, "allocation_rate", 0.9, 9, 10), row(P1, "allocation_rate", 0.5, 15, 30),
        row(P1, "allocation_rate", 0.1, 1, 10, region="us-east"),  # a slice of a KPI with its own '*' row
        row(P0, "queue_wait_p95", 40.0, den=3, unit="s"), row(P1, "queue_wait_p95", 60.0, den=5, unit="s"),
        row(P1, "comm_health", math.nan, 0, 0, status="no_data"),
        row(P1, "allocation_rate.reserved", 0.7, 7, 10),  # a component series
        # stored in slices only: the slices' numerators over their denominators, over the window
        row(P0, "hw_fault_rate", 0.5, 1, 2, region="a"), row(P1, "hw_fault_rate", 0.0, 0, 6, region="b"),
        # a degraded slice: the sum would leave its unmeasured part out
        row(P1, "job_failure_rate", 0.5, 1, 2, region="a"), row(P1, "job_failure_rate", 0.5, 1, 2, region="b",
                                                                status="degraded"),
    ])
    assert kpi_headline(frame) == pytest.approx({"kpi_allocation_rate": 24 / 40, "kpi_queue_wait_p95": 60.0,
                                                 "kpi_hw_fault_rate": 1 / 8})


def test_spend_headline_by_family_with_unpriced_hours_apart():
    frame = pd.DataFrame({"cause_family": ["productive", "capacity", "capacity", "hardware"],
                          "gpu_hours": [10.0, 2.0, 3.0, 4.0], "usd": [20.0, 4.0, 6.0, None]})
    assert spend_headline(frame) == pytest.approx({"usd_productive": 20.0, "usd_capacity": 10.0, "usd_total": 30.0,
                                                   "unpriced_gpu_hours": 4.0})


# --- on a materialization ------------------------------------------------------------------------------------------
def test_a_partition_of_the_five_minute_job_plots_goodput_and_the_kpis(sqlite_url, tmp_path):
    from gpu_health.defs.build import build_definitions
    from gpu_health.settings import Settings
    from gpu_health.storage.warehouse import Warehouse
    from gpu_health_tests.test_pipeline import QUIET, SMALL_SCENARIO, resources

    path = tmp_path / "small.yaml"
    path.write_text(SMALL_SCENARIO)
    start = pd.Timestamp("2026-11-03T14:10:00Z")  # not an hour's last partition: no pictures, the numbers still
    defs = build_definitions(Settings(), resources(sqlite_url, kind="simulator", scenario=str(path)))
    result = defs.resolve_job_def("five_minute_job").execute_in_process(
        partition_key=start.strftime("%Y-%m-%d-%H:%M"), instance=dg.DagsterInstance.ephemeral(), run_config=QUIET)
    assert result.success
    meta = {e.asset_key.to_user_string(): {k: getattr(v, "value", v) for k, v in e.metadata.items()}
            for e in (ev.event_specific_data.materialization for ev in result.get_asset_materialization_events())}
    wh = Warehouse(sqlite_url)
    goodput = wh.read_window("cluster_goodput", start, start + pd.Timedelta(minutes=5))
    cluster = goodput[goodput["region"] == "*"].iloc[0]
    got = meta["cluster_goodput"]
    assert "loss_tree" not in got
    assert got["goodput"] == pytest.approx(cluster["goodput"])
    assert got["paid_gpu_hours"] == pytest.approx(cluster["paid_gpu_minutes"] / 60)
    assert isinstance(got["share_idle_no_demand"], float)
    assert {f"goodput_{r}" for r in goodput["region"] if r != "*"} <= set(got)
    kpis = {k for k in meta["kpi_values"] if k.startswith("kpi_")}
    assert kpis and all(isinstance(meta["kpi_values"][k], float) for k in kpis)

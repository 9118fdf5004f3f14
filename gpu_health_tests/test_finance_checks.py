"""Finance's checks (gpu_health.steps.checks): a day with fewer 5-minute partitions than it has, spend that does not
reconcile with Finance's bill, a region x SKU with GPU-hours and no price -- judged once, reported alike by the
Dagster asset checks and the bulk path's ``failed_checks``.

A hand-made warehouse: a day of ``goodput_states`` (a number of its partitions) and Finance's ``cost_capacity``
for it, each partition paying exactly the installed GPUs x 5 minutes (so a complete, priced day reconciles to the
cent), then the daily finance steps and assets on it.
"""

import dagster as dg
import pandas as pd
import pytest

from gpu_health.constants import PARTITION, PARTITIONS_PER_DAY
from gpu_health.steps.checks import failed_checks
from gpu_health.steps.registry import step
from gpu_health.storage.warehouse import Warehouse

DAY = pd.Timestamp("2026-11-03T00:00:00Z")
NEXT = DAY + pd.Timedelta(days=1)
H100 = "NVIDIA H100 80GB HBM3"
GPUS = {"us-east": 16, "eu-west": 8}  # installed H100s per region, as Finance lists them


def _cost(regions=GPUS) -> pd.DataFrame:
    return pd.DataFrame([{"date": DAY.date(), "region": r, "sku": H100, "capacity_gpus": n, "reserved_gpus": n // 2,
                          "reserved_gpu_hour_usd": 2.0, "on_demand_gpu_hour_usd": 4.0, "on_demand_gpu_hours": 3.0}
                         for r, n in regions.items()])


def _states(partitions: int, gpus=GPUS) -> pd.DataFrame:
    """The first ``partitions`` partitions of the day, each region's GPUs 80% productive, 20% idle."""
    starts = pd.date_range(DAY, periods=partitions, freq=PARTITION)
    minutes = PARTITION / pd.Timedelta(minutes=1)
    rows = [{"partition_start": p, "region": r, "sku": H100, "workload_class": c, "team": t, "state": s,
             "gpu_minutes": n * minutes * share}
            for p in starts for r, n in gpus.items()
            for c, t, s, share in (("batch", "a", "productive", 0.8), ("none", "none", "idle_no_demand", 0.2))]
    return pd.DataFrame(rows, columns=["partition_start", "region", "sku", "workload_class", "team", "state",
                                       "gpu_minutes"])


def _warehouse(url: str, partitions: int, *, gpus=GPUS, cost=None) -> Warehouse:
    wh = Warehouse(url)
    wh.create_all()
    wh.replace_window("goodput_states", _states(partitions, gpus), DAY, NEXT)
    wh.replace_window("cost_capacity", _cost() if cost is None else cost, DAY, NEXT)
    return wh


def _bulk_failures(wh, steps=("cluster_goodput_daily", "wasted_spend")) -> list[str]:
    return [name for s in steps for name in failed_checks(s, step(s).run(wh, DAY, NEXT))]


# --- the bulk path's summary ------------------------------------------------------------------------------------
@pytest.mark.parametrize("partitions", [0, 12, 200])
def test_an_incomplete_day_fails_day_complete(sqlite_url, partitions):
    """0 partitions included (a day with paid 0 and goodput NaN is no finished day); spend on the
    partitions present still reconciles (Finance's bill pro rata), every region is priced."""
    failed = _bulk_failures(_warehouse(sqlite_url, partitions))
    assert failed == ["cluster_goodput_daily:day_complete"]


def test_the_capacity_demand_of_an_incomplete_day_fails_day_complete(sqlite_url):
    """The demand (and the forecast and headroom that read it) of a partial day is short."""
    assert _bulk_failures(_warehouse(sqlite_url, 200), ["capacity_demand_daily"]) == ["capacity_demand_daily:day_complete"]
    assert _bulk_failures(_warehouse(sqlite_url, PARTITIONS_PER_DAY), ["capacity_demand_daily"]) == []


def test_a_complete_priced_day_passes_every_finance_check(sqlite_url):
    assert _bulk_failures(_warehouse(sqlite_url, PARTITIONS_PER_DAY)) == []


def test_a_region_with_gpu_hours_and_no_price_fails_every_region_priced(sqlite_url):
    wh = _warehouse(sqlite_url, PARTITIONS_PER_DAY, gpus={**GPUS, "ap-south": 4})
    assert _bulk_failures(wh) == ["wasted_spend:every_region_priced"]


def test_spend_that_does_not_reconcile_with_the_bill_fails_spend_reconciles(sqlite_url):
    """Finance bills 16 GPUs in us-east; telemetry pays for 12 of them: a quarter of the bill is attributed to no
    state."""
    wh = _warehouse(sqlite_url, PARTITIONS_PER_DAY, gpus={**GPUS, "us-east": 12})
    assert _bulk_failures(wh) == ["wasted_spend:spend_reconciles"]


# --- the Dagster assets -------------------------------------------------------------------------------------------
FINANCE = ["cluster_goodput_daily", "wasted_spend", "capacity_demand_daily"]


def _materialize(url: str) -> dg.ExecuteInProcessResult:
    from gpu_health.defs.build import build_definitions
    from gpu_health.defs.resources import TelemetrySourceResource, WarehouseIOManager, WarehouseResource
    from gpu_health.settings import Settings

    res = {"warehouse": WarehouseResource(url=url), "warehouse_io_manager": WarehouseIOManager(url=url),
           "source": TelemetrySourceResource()}
    defs = build_definitions(Settings(), res)
    return dg.materialize(list(defs.assets), selection=[dg.AssetKey(a) for a in FINANCE],
                          partition_key=DAY.strftime("%Y-%m-%d"), resources=res,
                          run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})


def _checks(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {f"{e.asset_key.to_user_string()}:{e.check_name}": e for e in result.get_asset_check_evaluations()}


def _number(value):
    return getattr(value, "value", value)


@pytest.mark.parametrize("partitions,severity", [(100, dg.AssetCheckSeverity.ERROR),
                                                 (200, dg.AssetCheckSeverity.WARN)])
def test_the_daily_assets_fail_day_complete_on_an_incomplete_day(sqlite_url, partitions, severity):
    """ERROR below half of the day's partitions, WARN above; the run itself succeeds (the checks do not block)."""
    _warehouse(sqlite_url, partitions, gpus={**GPUS, "ap-south": 4})
    result = _materialize(sqlite_url)
    assert result.success
    checks = _checks(result)
    day = checks["cluster_goodput_daily:day_complete"]
    assert not day.passed and day.severity == severity
    (entry,) = _number(day.metadata["days"])
    assert entry == {"date": str(DAY.date()), "partitions": partitions, "expected": PARTITIONS_PER_DAY}
    demand = checks["capacity_demand_daily:day_complete"]
    assert not demand.passed and demand.severity == dg.AssetCheckSeverity.WARN
    priced = checks["wasted_spend:every_region_priced"]
    assert not priced.passed and priced.severity == dg.AssetCheckSeverity.ERROR
    assert [u["region"] for u in _number(priced.metadata["unpriced"])] == ["ap-south"]
    assert checks["wasted_spend:spend_reconciles"].passed
    # the bulk path names the same failures
    failed = {k for k, e in checks.items() if not e.passed}
    assert failed == set(_bulk_failures(Warehouse(sqlite_url), FINANCE))


def test_the_daily_assets_pass_on_a_complete_day_and_plot_spend_by_family(sqlite_url):
    _warehouse(sqlite_url, PARTITIONS_PER_DAY, gpus={**GPUS, "us-east": 12})
    result = _materialize(sqlite_url)
    checks = _checks(result)
    assert checks["cluster_goodput_daily:day_complete"].passed and checks["capacity_demand_daily:day_complete"].passed
    assert checks["wasted_spend:every_region_priced"].passed
    rec = checks["wasted_spend:spend_reconciles"]
    assert not rec.passed and rec.severity == dg.AssetCheckSeverity.WARN
    assert "us-east" in _number(rec.metadata["examples"]) and "eu-west" not in _number(rec.metadata["examples"])
    # numeric metadata Dagster plots: USD by cause family and in total, unpriced GPU-hours
    (mat,) = [m for m in result.asset_materializations_for_node("wasted_spend")]
    meta = {k: _number(v) for k, v in mat.metadata.items()}
    spend = Warehouse(sqlite_url).read_window("wasted_spend", DAY, NEXT)
    assert meta["usd_total"] == pytest.approx(spend["usd"].sum())
    for family, state in (("capacity", "idle_no_demand"), ("productive", "productive")):
        usd = spend.loc[spend["state"] == state, "usd"].sum()
        assert usd > 0 and meta[f"usd_{family}"] == pytest.approx(usd)
    assert meta["unpriced_gpu_hours"] == 0

"""Finance's daily tables: settled goodput and wasted spend, joined with cost and capacity; their checks (judged in
``gpu_health.steps.checks``, as the bulk path judges them)."""

import dagster as dg

from gpu_health.constants import PARTITIONS_PER_DAY
from gpu_health.defs.common import MAX_CHECK_EXAMPLES, derived_asset, preview
from gpu_health.defs.headlines import spend_headline
from gpu_health.steps.checks import (DAY_COMPLETE, EVERY_REGION_PRICED, SPEND_RECONCILES, day_severity,
                                     incomplete_days, spend_mismatches, unpriced)


def _day_complete_spec(asset: str, description: str) -> list[dg.AssetCheckSpec]:
    return [dg.AssetCheckSpec(DAY_COMPLETE, asset=asset, description=(
        f"Fails when a day has fewer than its {PARTITIONS_PER_DAY} 5-minute partitions (none at all included): "
        f"{description}. Metadata: the partitions present and expected, per day."))]


def _day_complete(asset: str, *, severity: str | None = None):
    """The day_complete check of ``asset`` (ERROR below half of a day's partitions, else WARN; ``severity``: one
    severity always)."""
    def checks(result, wh, start, end):
        days = result.findings["day_partitions"]
        short = incomplete_days(days)
        per_day = [{"date": str(d.date), "partitions": int(d.partitions), "expected": PARTITIONS_PER_DAY}
                   for d in days.itertuples()]
        return [dg.AssetCheckResult(
            check_name=DAY_COMPLETE, asset_key=asset, passed=short.empty,
            severity=dg.AssetCheckSeverity[severity or day_severity(short)],
            metadata={"days": dg.MetadataValue.json(per_day), "days_incomplete": len(short),
                      "partitions_present": int(days["partitions"].sum()),
                      "partitions_expected": PARTITIONS_PER_DAY * len(days)})], {}
    return checks


def _spend(result, wh, start, end):
    spend = result.tables["wasted_spend"]
    off, bare = spend_mismatches(spend, result.findings["billed"]), unpriced(spend)
    bare = bare.assign(date=bare["date"].astype(str))
    checks = [
        dg.AssetCheckResult(
            check_name=SPEND_RECONCILES[1], asset_key=SPEND_RECONCILES[0], passed=off.empty,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"region_skus_off": len(off), "max_abs_difference_usd": float(off["difference_usd"].abs().max())
                      if len(off) else 0.0, "examples": preview(off, MAX_CHECK_EXAMPLES)}),
        dg.AssetCheckResult(
            check_name=EVERY_REGION_PRICED[1], asset_key=EVERY_REGION_PRICED[0], passed=bare.empty,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"unpriced_gpu_hours": float(bare["gpu_hours"].sum()),
                      "unpriced": dg.MetadataValue.json(bare.head(MAX_CHECK_EXAMPLES).to_dict("records"))}),
    ]
    return checks, spend_headline(spend)


def build_finance_assets(daily) -> list:
    return [
        derived_asset("cluster_goodput_daily", partitions_def=daily, checks=_day_complete("cluster_goodput_daily"),
                      check_specs=_day_complete_spec(
                          "cluster_goodput_daily", "ERROR below half of them, where the day's figure is more gap "
                          "than measurement; WARN otherwise")),
        derived_asset("wasted_spend", partitions_def=daily, checks=_spend, check_specs=[
            dg.AssetCheckSpec(SPEND_RECONCILES[1], asset=SPEND_RECONCILES[0], description=(
                "WARN when a region x SKU's USD over every state (productive included) differs by more than a cent "
                "from what Finance billed for it (pro rata of the day's partitions present): paid GPU-hours and "
                "installed capacity disagree. Examples: region, SKU, billed, attributed, difference.")),
            dg.AssetCheckSpec(EVERY_REGION_PRICED[1], asset=EVERY_REGION_PRICED[0], description=(
                "ERROR when a region x SKU has GPU-hours and no price (no cost_capacity row): its spend is "
                "unknown, kept null (never $0). Names them.")),
        ]),
        derived_asset("capacity_demand_daily", partitions_def=daily,
                      checks=_day_complete("capacity_demand_daily", severity="WARN"),
                      check_specs=_day_complete_spec(
                          "capacity_demand_daily", "WARN: a partial day's demand is short, and the forecast and "
                          "headroom read it")),
        derived_asset("capacity_forecast", partitions_def=daily),
        derived_asset("capacity_headroom", partitions_def=daily),
    ]

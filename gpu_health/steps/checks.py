"""The checks a step's findings decide, named and judged once.

The Dagster assets report them as asset checks (``gpu_health/defs``); the bulk path, which has no asset checks,
lists the failed ones as ``asset:check`` in its summary (``direct._findings``). Both take the names and the
verdicts from here, so a check renamed or judged differently changes both paths at once (``test_direct_path.py``
compares their failed checks).
"""

from __future__ import annotations

import pandas as pd

from gpu_health.constants import PARTITIONS_PER_DAY

# (asset, check name)
PAID_INVARIANT = ("goodput_states", "paid_minutes_invariant")
LATENCY_MATCHES_REQUESTS = ("serving_slis", "latency_count_matches_requests")
# a daily table computed from fewer 5-minute partitions than its day has (on each daily asset that sums a day)
DAY_COMPLETE = "day_complete"
SPEND_RECONCILES = ("wasted_spend", "spend_reconciles")
EVERY_REGION_PRICED = ("wasted_spend", "every_region_priced")
# Finance bills in cents: a region x SKU whose attributed USD is further than this from its bill is not rounding
CENT = 0.01
# the alerts' checks: (check name, the severity whose firing alerts fail it)
ALERT_CHECKS = (("pages", "page"), ("tickets", "ticket"))


def contract_check(table: str) -> str:
    """The name of a source table's contract check."""
    return f"{table}_contract"


def firing_in_last_partition(frame: pd.DataFrame) -> pd.DataFrame:
    """The alert rows firing in the last partition of ``frame`` (a window's alerts): what the alerts' checks judge."""
    last = frame[frame["partition_start"] == frame["partition_start"].max()] if len(frame) else frame
    return last[last["status"] == "firing"] if len(last) else last


def incomplete_days(days: pd.DataFrame) -> pd.DataFrame:
    """The days (``date``, ``partitions`` present) with fewer partitions than a day has, with ``expected``."""
    short = days[days["partitions"] < PARTITIONS_PER_DAY] if len(days) else days
    return short.assign(expected=PARTITIONS_PER_DAY)


def day_severity(short: pd.DataFrame) -> str:
    """ERROR when a day has fewer than half of its partitions: its figure is then more gap than measurement (a
    goodput or a spend of less than half a day read as the day's); WARN otherwise (the day's shape is there, its
    totals are short)."""
    return "ERROR" if len(short) and (short["partitions"] < PARTITIONS_PER_DAY / 2).any() else "WARN"


def spend_mismatches(spend: pd.DataFrame, billed: pd.DataFrame) -> pd.DataFrame:
    """The region x SKU days whose USD attributed over every state (productive included) differs from Finance's
    bill by more than a cent: ``billed`` holds each day's ``spend_usd`` per region x SKU and the day's
    ``partitions``; the bill is taken pro rata of the partitions present (a partial day is day_complete's
    finding, not a pricing error). An unpriced region x SKU (no bill) is every_region_priced's."""
    cols = ["date", "region", "sku", "billed_usd", "attributed_usd", "difference_usd"]
    if not len(billed):
        return pd.DataFrame(columns=cols)
    key = ["date", "region", "sku"]
    bill = billed.assign(billed_usd=billed["spend_usd"] * billed["partitions"] / PARTITIONS_PER_DAY)
    got = (spend.dropna(subset=["usd"]).astype({"region": object, "sku": object}).groupby(key)["usd"].sum()
           .rename("attributed_usd").reset_index()) if len(spend) else pd.DataFrame(columns=[*key, "attributed_usd"])
    both = bill.astype({"region": object, "sku": object})[[*key, "billed_usd"]].merge(got, on=key, how="left")
    both["attributed_usd"] = both["attributed_usd"].astype(float).fillna(0.0)
    both["difference_usd"] = both["attributed_usd"] - both["billed_usd"]
    return both.loc[both["difference_usd"].abs() > CENT, cols].reset_index(drop=True)


def unpriced(spend: pd.DataFrame) -> pd.DataFrame:
    """The region x SKU days with GPU-hours and no price (``usd`` null): their spend is unknown."""
    if not len(spend):
        return pd.DataFrame(columns=["date", "region", "sku", "gpu_hours"])
    bare = spend[spend["usd"].isna() & (spend["gpu_hours"] > 0)].astype({"region": object, "sku": object})
    return bare.groupby(["date", "region", "sku"], as_index=False)["gpu_hours"].sum()


def failed_checks(step_name: str, result) -> list[str]:
    """The checks (``asset:check``) a step's result fails, from its findings and tables."""
    found, out = result.findings, []
    if "rejects" in found and (len(found["rejects"]) or len(found["quarantined"])):  # a source step
        out.append(f"{step_name}:{contract_check(step_name)}")
    if "paid_invariant" in found and not found["paid_invariant"]["passed"]:
        out.append(":".join(PAID_INVARIANT))
    if "mismatched" in found and len(found["mismatched"]):
        out.append(":".join(LATENCY_MATCHES_REQUESTS))
    if "day_partitions" in found and len(incomplete_days(found["day_partitions"])):
        out.append(f"{step_name}:{DAY_COMPLETE}")
    if "billed" in found:  # wasted_spend
        spend = result.tables["wasted_spend"]
        if len(spend_mismatches(spend, found["billed"])):
            out.append(":".join(SPEND_RECONCILES))
        if len(unpriced(spend)):
            out.append(":".join(EVERY_REGION_PRICED))
    if step_name == "alerts":
        firing = firing_in_last_partition(result.tables["alerts"])
        out += [f"alerts:{check}" for check, severity in ALERT_CHECKS
                if len(firing) and (firing["severity"] == severity).any()]
    return out

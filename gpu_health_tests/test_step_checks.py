"""The checks a step's findings fail are named and judged in one place (gpu_health.steps.checks): every check the
bulk path can report failed is a check the Dagster assets define, on the asset it names."""

import pandas as pd
import pytest

from gpu_health.steps.graph import StepResult


@pytest.fixture(scope="module")
def dagster_checks():
    from gpu_health.definitions import defs

    graph = defs.resolve_asset_graph()
    return {key.to_user_string() for key in graph.asset_check_keys}


def _failing_results():
    """One result per kind of finding, each failing every check it can."""
    rejects = pd.DataFrame({"reason": ["bad"]})
    firing = pd.DataFrame({"partition_start": [pd.Timestamp("2026-11-03T00:00Z")] * 2, "status": ["firing"] * 2,
                           "severity": ["page", "ticket"]})
    day = pd.Timestamp("2026-11-03").date()
    short_day = pd.DataFrame({"date": [day], "partitions": [0]})
    # a priced region billed 100 USD with 50 attributed, and an unpriced one
    spend = pd.DataFrame({"date": [day] * 2, "region": ["us-east", "ap-south"], "sku": ["H100"] * 2,
                          "gpu_hours": [10.0, 5.0], "usd": [50.0, None]})
    billed = pd.DataFrame({"date": [day], "region": ["us-east"], "sku": ["H100"], "spend_usd": [100.0],
                           "partitions": [288]})
    return {
        "gpu_telemetry": StepResult({}, findings={"rejects": rejects, "quarantined": rejects.iloc[0:0],
                                                  "dropped_columns": {}}),
        "goodput": StepResult({}, findings={"paid_invariant": {"passed": False}}),
        "serving_slis": StepResult({}, findings={"mismatched": pd.DataFrame({"ts": [1]})}),
        "alerts": StepResult({"alerts": firing}),
        "cluster_goodput_daily": StepResult({}, findings={"day_partitions": short_day}),
        "capacity_demand_daily": StepResult({}, findings={"day_partitions": short_day}),
        "wasted_spend": StepResult({"wasted_spend": spend}, findings={"billed": billed}),
    }


def test_every_check_the_bulk_path_fails_is_a_dagster_check(dagster_checks):
    from gpu_health.steps.checks import failed_checks

    named = [name for step, result in _failing_results().items() for name in failed_checks(step, result)]
    assert len(named) == 9
    for name in named:
        assert name in dagster_checks, f"the bulk path reports {name}, which no Dagster asset check is"


def test_the_bulk_paths_summary_takes_its_verdicts_from_the_shared_checks():
    from gpu_health.steps import direct
    from gpu_health.steps.checks import failed_checks
    from gpu_health.steps.registry import step

    for name, result in _failing_results().items():
        summary: dict = {}
        direct._findings(step(name), result, summary, None, None)
        assert summary["failed_checks"] == failed_checks(name, result)

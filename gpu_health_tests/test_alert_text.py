"""Every alert's text shows the evidence it rests on as numbers: no ``nan`` / ``NaN`` / ``None`` where a number or a
version belongs.

The scenarios are messy-profile smoke cases (scenarios/smoke_messy) of a rolling driver regression and of a
framework release whose change event does not say which version it replaced: collectors without some fields, old
drivers, uninstrumented work, a maintenance window and change rows with empty fields -- what leaves holes in
evidence text -- run through the pipeline as ``gpu-health evaluate`` runs it."""

import re
from pathlib import Path

import pytest
import yaml

from gpu_health.cli import run
from gpu_health.storage.warehouse import Warehouse

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios" / "smoke_messy"
# a missing value printed where a number or a version belongs (whole words: "none given" or "Nonetheless" are text)
MISSING = re.compile(r"(?<![A-Za-z])(nan|NaN|None|<NA>|NaT)(?![A-Za-z])")


@pytest.fixture(scope="module", params=["15_driver_rollout.yaml", "05_framework_regression.yaml"])
def alerts(request, tmp_path_factory):
    scenario = SCENARIOS / request.param
    spec = yaml.safe_load(scenario.read_text())
    url = f"sqlite:///{tmp_path_factory.mktemp('alert_text')}/warehouse.db"
    run(str(spec["start"]), str(spec["end"]), scenario=str(scenario), warehouse=url, quiet=True, direct=True)
    return Warehouse(url).read_window("alerts", None, None)


def test_the_scenario_raises_alerts_of_several_detectors(alerts):
    """Not vacuous: pages and tickets of more than one detector, with evidence text."""
    assert (alerts["severity"] == "page").any()
    assert alerts["detector"].nunique() >= 2


def test_no_alert_text_prints_a_missing_value(alerts):
    bad = {}
    for col in ("summary", "description"):
        for alert_id, text in zip(alerts["alert_id"], alerts[col].astype(str)):
            if MISSING.search(text):
                bad.setdefault(alert_id, text)
    assert not bad, bad


def test_a_change_that_does_not_say_what_it_replaced_pages_without_a_missing_version():
    """A change event without its from_version (a framework release, a calendar entry): the page names the change
    and the version it brought, and its first action rolls that change back."""
    from gpu_health.diagnosis import alerts as A
    from gpu_health.diagnosis.detectors.software import detect_deploys
    from gpu_health_tests.test_detect_deploys import BORDERLINE, CHANGES, DEPLOY, FIVE, context

    ctx = context(DEPLOY + 4 * FIVE, **BORDERLINE)
    ctx.changes = CHANGES.assign(from_version=None)
    snap = A.step(A.empty(), detect_deploys(ctx), ctx.start, rates={}, changes=ctx.changes)
    assert list(snap["severity"]) == ["page"]
    text = snap["summary"].iloc[0] + " " + snap["description"].iloc[0]
    assert not MISSING.search(text), text
    assert "First action: Roll back chg-1 (to 550.144.03)" in text

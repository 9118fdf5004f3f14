"""What a new user sees in the UI after ``make dev``, asserted in a headless browser on the rendered pages.

``scripts/dev.sh`` (what ``make dev`` runs) starts in a folder of its own (:mod:`gpu_health_tests.browser`) on a
small cluster: the smoke scenario of a GPU falling off the bus, on 64 GPUs, re-based (``SCENARIO_IN=-50m``) so
that its incident began inside the sensor's first hour, and the partitions starting an hour and a half back
(``GPU_HEALTH_PARTITION_START``), so the backfill holds the half-hour before the sensor's first hour. Once the
webhook's log holds the page and the backfill's run has ended (asked of the webserver's GraphQL API, as the dev
backfill does), Chromium reads:

1. ``gpu_telemetry``'s partitions page: the recent partitions, filled, out of a small total (the window since the
   start, not the fixed past);
2. ``cluster_goodput``'s page: a numeric ``goodput`` in its metadata table and a ``goodput`` plot;
3. ``cluster_status``'s page: its Markdown (the north star's goodput, the open pages and tickets);
4. a page of the scenario's incident (its region) on the status page, the same page (its node) that reached the
   Alertmanager webhook's log, ``var/alerts/webhook.jsonl``.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml

from gpu_health.constants import PARTITION
from gpu_health.dev.backfill import FIVE_MINUTE_JOB, GraphQL
from gpu_health.steps.readiness import partition_key
from gpu_health_tests.browser import REPO, Dev, chrome, start_dev, wait_for

SCENARIO = REPO / "scenarios" / "smoke" / "02_gpu_fell_off_bus.yaml"
SMALL_CLUSTER = {"gpus": 64}
HISTORY = pd.Timedelta(minutes=90)  # the sensor's first hour and half an hour for the backfill
INCIDENT_IN = "-50m"  # early in the sensor's first hour: it pages on its first runs
# bounded waits (each fails the test with dev.sh's log when exceeded), not expectations
PAGE_WAIT_S, BACKFILL_WAIT_S, UI_WAIT_S = 600.0, 600.0, 90.0
FILL_WAIT_S = 600.0  # the rest of the sensor's first hour, after the page
RELOAD_S = 15.0
NUX_WAIT_S = 20.0  # the UI's first-visit dialog, opened a second after the first page


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    root = tmp_path_factory.mktemp("dev")
    raw = yaml.safe_load(SCENARIO.read_text())
    scenario = root / SCENARIO.name  # the same name: the same draws, the same hardware
    scenario.write_text(yaml.safe_dump({**raw, "cluster": SMALL_CLUSTER}, sort_keys=False))
    start = (pd.Timestamp.now(tz="UTC") - HISTORY).floor(PARTITION)
    running = start_dev(root, {"DEV_DAYS": "1", "GPU_HEALTH_PARTITION_START": partition_key(start),
                               "SCENARIO": str(scenario), "SCENARIO_IN": INCIDENT_IN},
                        start=start, region=raw["incidents"][0]["scope"]["region"])
    try:
        yield running
    finally:
        running.stop()


def _webhook_page(dev: Dev) -> dict | None:
    """The first firing page in the webhook's log from the scenario incident's region, or None."""
    log = dev.var / "alerts" / "webhook.jsonl"
    if not log.exists():
        return None
    for line in log.read_text().splitlines():
        note = json.loads(line)["notification"]
        for alert in note.get("alerts") or [] if isinstance(note, dict) else []:
            labels = alert.get("labels", {})
            if (alert.get("status") == "firing" and labels.get("severity") == "page"
                    and labels.get("region") == dev.region):
                return alert
    return None


def _backfill_done(dev: Dev) -> list[str] | None:
    marker = dev.var / "dagster_home" / "dev_backfill.json"
    record = json.loads(marker.read_text()) if marker.exists() else {}
    if not record.get(FIVE_MINUTE_JOB):
        return None
    return GraphQL(f"{dev.ui}/graphql", timeout=30).runs_done(record[FIVE_MINUTE_JOB])


@pytest.fixture(scope="module")
def ready(dev):
    """The page at the webhook and the backfill's run ended: what the browser then reads is there to see."""
    page = wait_for("a page of the scenario's incident in var/alerts/webhook.jsonl", lambda: _webhook_page(dev),
                    dev, PAGE_WAIT_S)
    statuses = wait_for("the end of the dev backfill's run", lambda: _backfill_done(dev), dev, BACKFILL_WAIT_S)
    assert set(statuses) == {"SUCCESS"}, f"the dev backfill's run ended {statuses}\n{dev.log_tail()}"
    return page


@pytest.fixture(scope="module")
def browser(dev, tmp_path_factory):
    """Chromium on the UI, its first-visit dialog closed as a user closes it (its backdrop takes the clicks; the
    UI opens it a moment after the first page loads, on a local webserver, until it is skipped once)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chrome(tmp_path_factory.mktemp("chromium"))
    try:
        driver.get(dev.ui)
        try:
            WebDriverWait(driver, NUX_WAIT_S).until(ec.element_to_be_clickable(
                (By.XPATH, "//button[.//span[text()='Skip']]"))).click()
        except TimeoutException:
            pass  # not shown: nothing to close
        yield driver
    finally:
        driver.quit()


def _open(browser, dev: Dev, path: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(dev.ui + path)
    WebDriverWait(browser, UI_WAIT_S).until(ec.presence_of_element_located((By.XPATH, "//*[text()='Catalog']")))


def _text_matching(browser, pattern: str, ready=lambda m: True, timeout_s: float = UI_WAIT_S):
    """The page's first match of ``pattern`` once the rendered text holds one that ``ready`` accepts; the page is
    loaded again every ``RELOAD_S`` while it does not (as a user presses F5 waiting for a run)."""
    import time

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    loaded = [time.monotonic()]

    def probe(driver):
        match = re.search(pattern, driver.find_element(By.TAG_NAME, "body").text)
        if match and ready(match):
            return match
        if time.monotonic() - loaded[0] > RELOAD_S:
            driver.refresh()
            loaded[0] = time.monotonic()
        return False

    return WebDriverWait(browser, timeout_s, poll_frequency=1.0).until(probe, f"no {pattern!r} (as wanted) on "
                                                                              f"{browser.current_url}")


def test_the_catalogue_shows_the_recent_partitions_filled_not_the_fixed_past(dev, ready, browser):
    _open(browser, dev, "/assets/gpu_telemetry?view=partitions")
    # every partition closed before make dev started is computed by now: the backfill's, then the sensor's hour
    closed_at_start = len(pd.date_range(dev.start, dev.started_at - PARTITION, freq=PARTITION))
    materialized = _text_matching(browser, r"Materialized \((\d+)\)", lambda m: int(m.group(1)) >= closed_at_start,
                                  timeout_s=FILL_WAIT_S)
    total = int(_text_matching(browser, r"(\d+) Partitions Selected").group(1))
    closed_now = len(pd.date_range(dev.start, pd.Timestamp.now(tz="UTC") - PARTITION, freq=PARTITION))
    assert closed_at_start <= total <= closed_now  # the window since the start, not ~10,000 from a fixed date
    assert int(materialized.group(1)) <= total
    assert _text_matching(browser, r"Failed \((\d+)\)").group(1) == "0"
    assert partition_key(dev.start) in browser.find_element("tag name", "body").text  # the range begins there


def test_cluster_goodput_has_a_numeric_goodput_and_its_plot(dev, ready, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    _open(browser, dev, "/assets/cluster_goodput")
    value = _text_matching(browser, r"\ngoodput\n(?:[^\n]*\n)?([0-9.]+(?:e-?\d+)?)\n")  # key, [timestamp], value
    assert 0.0 <= float(value.group(1)) <= 1.0
    plots = WebDriverWait(browser, UI_WAIT_S).until(
        ec.element_to_be_clickable((By.XPATH, "//button[.//*[@aria-label='asset_plot']]")))
    plots.click()
    # the plot's title, and the chart drawn under it
    WebDriverWait(browser, UI_WAIT_S).until(ec.presence_of_element_located(
        (By.XPATH, "//span[normalize-space(text())='goodput']/../following-sibling::*//canvas")))


def _status_page(browser, dev: Dev) -> tuple[str, list[str]]:
    """``cluster_status``'s latest status page as its page shows it (the ``status`` Markdown in the metadata
    table) and the text of each row of the page's tables."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _open(browser, dev, "/assets/cluster_status")

    def probe(driver):  # the page refreshes its live data: read the row in one go, again if it was redrawn
        row = driver.find_element(By.XPATH, "//tr[./td[1][normalize-space(.)='status']]")
        text = row.text
        return (text, [r.text for r in row.find_elements(By.XPATH, ".//tr")]) if "Cluster status" in text else False

    return WebDriverWait(browser, UI_WAIT_S, ignored_exceptions=(NoSuchElementException,
                                                                 StaleElementReferenceException)).until(
        probe, "no status page in cluster_status's metadata")


def test_the_status_page_shows_the_north_star_and_the_scenarios_page_that_reached_alertmanager(dev, ready, browser):
    nodes = json.loads(ready["annotations"]["scope"]).get("nodes") or []
    assert ready["labels"]["region"] == dev.region and nodes  # the incident's page, as Alertmanager posted it
    text, rows = _status_page(browser, dev)
    assert re.search(r"Goodput \d+(\.\d)?%", text), text  # the north star
    pages = re.search(r"(\d+) pages? and (\d+) tickets? open", text)
    assert pages and int(pages.group(1)) >= 1, text
    assert "Open pages and tickets" in text
    pages = [row for row in rows if row.split()[:1] == ["page"]]  # the table's rows, severity first
    assert any(dev.region in row and any(node in row for node in nodes) for row in pages), rows

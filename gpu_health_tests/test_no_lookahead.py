"""A range run judges each partition on what was known when it closed: data after a partition never changes its
alerts (detection that holds in the live path, which runs one partition at a time as its files land).

The bulk path and ``gpu-health evaluate`` run a day as one range; the sensor runs each partition alone. Any
detector state built once per range (a job table, a queue's region, a baseline) must be cut at each partition's
end, or a range pages what no live run would have seen (it did: a day's range learned a queue's region from
placements hours later and paged a scheduling incident on Monday 04:10 that no run of 04:10 alone raised).

The suite's driver-regression week from its first minute (queues not placed yet, as at the start of any
history), its first six hours: the alerts step over [a, b) and over [a, c) for c > b must give the same
snapshots before b.
"""

import pandas as pd
import pytest
import yaml

from gpu_health.cli import run
from gpu_health.steps import diagnosis as D
from gpu_health.steps.registry import inputs_for
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import REPO

START, END = pd.Timestamp("2026-11-02T00:00:00Z"), pd.Timestamp("2026-11-02T06:00:00Z")


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lookahead")
    raw = yaml.safe_load((REPO / "scenarios" / "suite" / "driver_regression_week.yaml").read_text())
    spec = folder / "scenario.yaml"
    spec.write_text(yaml.safe_dump({**raw, "end": END.isoformat()}))
    url = f"sqlite:///{folder / 'w.db'}"
    run(START.isoformat(), END.isoformat(), scenario=str(spec), warehouse=url, quiet=True, direct=True)
    return Warehouse(url)


def _snapshots(frame: pd.DataFrame, before: pd.Timestamp) -> pd.DataFrame:
    cols = ["partition_start", "alert_id", "detector", "status", "severity", "cause_family", "region", "scope",
            "summary", "description", "opened_at", "paged_at", "lost_gpu_minutes"]
    out = frame[frame["partition_start"] < before][cols]
    return out.astype(str).sort_values(cols).reset_index(drop=True)


@pytest.mark.parametrize("cut", ["04:15", "05:00"])
def test_later_data_never_changes_a_partitions_alerts(warehouse, cut):
    a = START + pd.Timedelta(hours=3)
    b = pd.Timestamp(f"2026-11-02T{cut}:00Z")
    short = D.alerts(inputs_for("alerts", warehouse, a, b))
    longer = D.alerts(inputs_for("alerts", warehouse, a, END))
    # (before the fix the longer range paged us-east's queue at 04:10, the shorter one raised nothing: this fails)
    pd.testing.assert_frame_equal(_snapshots(longer, b), _snapshots(short, b), obj=f"alerts [{a}, {END}) before {b}")

"""bench/compare.py names the tables two warehouses hold differently: none for the same rows, the one changed (a
SQL table or a columnar one) otherwise."""

import sys

import pandas as pd
import pytest

from gpu_health.contracts.validate import validate_frame
from gpu_health.sim.scenario import load_scenario
from gpu_health.sim.telemetry import Window, cost_capacity
from gpu_health.storage.warehouse import Warehouse
from gpu_health_tests.conftest import REPO, THERMAL_WEEK

sys.path.insert(0, str(REPO / "bench"))
import compare  # noqa: E402 -- bench/ is no package

T0 = pd.Timestamp("2026-11-03T14:00:00Z")
T1 = T0 + pd.Timedelta(minutes=5)
DAY0, DAY1 = T0.normalize(), T0.normalize() + pd.Timedelta(days=1)


@pytest.fixture(scope="module")
def rows() -> dict[str, pd.DataFrame]:
    scen = load_scenario(THERMAL_WEEK)
    gpu = Window(scen, T0, T1).tables()["gpu_telemetry"]
    return {"gpu_telemetry": validate_frame(gpu, "gpu_telemetry", start=T0, end=T1).valid,
            "cost_capacity": validate_frame(cost_capacity(scen, DAY0), "cost_capacity", start=DAY0, end=DAY1).valid}


def write(folder, rows: dict[str, pd.DataFrame]) -> None:
    folder.mkdir()
    wh = Warehouse(f"sqlite:///{folder / 'w.db'}", str(folder / "w.telemetry"))
    wh.replace_window("gpu_telemetry", rows["gpu_telemetry"], T0, T1)
    wh.replace_window("cost_capacity", rows["cost_capacity"], DAY0, DAY1)


def test_the_same_rows_differ_nowhere(tmp_path, rows):
    write(tmp_path / "a", rows)
    write(tmp_path / "b", {k: v.sample(frac=1.0, random_state=3) for k, v in rows.items()})  # (another order)
    assert compare.differing_tables(tmp_path / "a", tmp_path / "b") == []


@pytest.mark.parametrize("table, column", [("cost_capacity", "reserved_gpu_hour_usd"), ("gpu_telemetry", "power_w")])
def test_a_changed_value_names_its_table(tmp_path, rows, table, column):
    changed = dict(rows)
    changed[table] = rows[table].copy()
    changed[table].loc[changed[table].index[0], column] += 1
    write(tmp_path / "a", rows)
    write(tmp_path / "b", changed)
    assert compare.differing_tables(tmp_path / "a", tmp_path / "b") == [table]

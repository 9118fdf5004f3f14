"""The production profile: the whole partition path (sources -> loss tree -> KPIs -> alerts) on real PostgreSQL."""

import pandas as pd
import sqlalchemy as sa
import yaml

from gpu_health.cli import run
from gpu_health.storage.warehouse import Warehouse


def test_full_partition_path_on_postgres(postgres_url, tmp_path):
    db = f"gpu_health_pipeline_{abs(hash(str(tmp_path))) % 10**8}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {db}")
    admin.dispose()
    url = postgres_url.rsplit("/", 1)[0] + f"/{db}"
    scenario = tmp_path / "thermal.yaml"
    scenario.write_text(yaml.safe_dump({
        "seed": 5, "start": "2026-11-03T11:00:00Z", "end": "2026-11-03T12:00:00Z",
        "incidents": [{"kind": "thermal_throttle", "start": "2026-11-03T11:32:00Z", "duration": "20m",
                       "severity": "high", "scope": {"region": "us-east", "nodes": 2}, "magnitude": 0.38}]}))
    telemetry = str(tmp_path / "telemetry")  # the PostgreSQL default (var/telemetry/) is shared: the test's own
    summary = run("2026-11-03T11:00:00Z", "2026-11-03T12:00:00Z", scenario=str(scenario), warehouse=url, quiet=True,
                  telemetry_dir=telemetry)
    assert summary["partitions"] == 12
    wh = Warehouse(url, telemetry)
    assert wh.count("gpu_telemetry") == 1200 * 60
    states = wh.read_window("goodput_states")
    paid = states.groupby("partition_start")["gpu_minutes"].sum()
    assert len(paid) == 12 and (paid.round(6) == 1200 * 5).all()
    alerts = wh.read_window("alerts")
    thermal = alerts[alerts["detector"] == "thermal_throttle"]
    assert len(thermal), alerts[["alert_id", "summary"]]
    assert (thermal["cause_family"] == "hardware").all()
    assert thermal["opened_at"].min() <= pd.Timestamp("2026-11-03T11:45:00Z")
    # finance read the same tables through its views
    with wh.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT COUNT(*) FROM finance_waste_by_day").scalar()
    assert rows > 0
    wh.engine.dispose()

"""The PostgreSQL test service, and Dagster's instance on it (deploy/dagster.yaml)."""

import tempfile
import uuid
from pathlib import Path

import dagster as dg
import psycopg2
import pytest
import sqlalchemy as sa
from dagster._core.instance.ref import InstanceRef
from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

from gpu_health_tests.services.postgres import (  # postgres_url: conftest.py
    ENV_BINDIR,
    PostgresStartError,
    start_postgres,
)

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def test_fixture_server_creates_inserts_selects(postgres_url):  # noqa: F811
    url = sa.make_url(postgres_url)
    assert url.drivername == "postgresql+psycopg2"
    table = f"t_{uuid.uuid4().hex[:12]}"  # the server may be shared (GPU_HEALTH_TEST_POSTGRES_URL)
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE TABLE {table} (gpu_id text PRIMARY KEY, power_w double precision)"))
            conn.execute(
                sa.text(f"INSERT INTO {table} VALUES (:g, :p)"),
                [{"g": "gpu-0", "p": 312.5}, {"g": "gpu-1", "p": 287.0}],
            )
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f"SELECT gpu_id, power_w FROM {table} ORDER BY gpu_id")).all()
            assert [tuple(r) for r in rows] == [("gpu-0", 312.5), ("gpu-1", 287.0)]
            assert conn.execute(sa.text("SHOW server_version")).scalar().startswith("15")
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
        engine.dispose()


def test_start_postgres_is_loopback_only_and_stop_removes_everything():
    # a folder of this test's own (another test process may start servers in /tmp meanwhile), which the postgres
    # user can traverse, unlike pytest's tmp_path
    base = Path(tempfile.mkdtemp(prefix="gh-pg-test-", dir="/tmp"))
    base.chmod(0o755)
    url, stop = start_postgres(base)
    created = set(base.glob("gh-pg-*"))
    parsed = sa.make_url(url)
    try:
        assert parsed.host == "127.0.0.1" and parsed.database == "gpu_health"
        assert len(created) == 1
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SHOW listen_addresses")).scalar() == "127.0.0.1"
            assert conn.execute(sa.text("SHOW fsync")).scalar() == "off"
        engine.dispose()
    finally:
        stop()
    stop()  # idempotent
    assert not any(path.exists() for path in created)
    base.rmdir()
    with pytest.raises(psycopg2.OperationalError):
        psycopg2.connect(host="127.0.0.1", port=parsed.port, user="postgres", dbname="postgres")


def test_start_postgres_fails_clearly_without_binaries(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_BINDIR, str(tmp_path))
    with pytest.raises(PostgresStartError, match=r"initdb.*not found.*postgresql-15"):
        start_postgres("/tmp")


@pytest.fixture
def dagster_database(postgres_url):  # noqa: F811
    """A fresh database for Dagster's tables on the test server; dropped afterwards."""
    url = sa.make_url(postgres_url)
    name = f"dagster_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield url.set(database=name)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@dg.asset
def probe() -> int:
    return 1


def test_deploy_dagster_yaml_runs_on_postgres(dagster_database, tmp_path, monkeypatch):
    url = dagster_database
    monkeypatch.setenv("DAGSTER_PG_HOST", url.host)
    monkeypatch.setenv("DAGSTER_PG_PORT", str(url.port or 5432))
    monkeypatch.setenv("DAGSTER_PG_DB", url.database)
    monkeypatch.setenv("DAGSTER_PG_USERNAME", url.username)
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", url.password or "")  # trust auth: empty

    ref = InstanceRef.from_dir(str(tmp_path), config_dir=str(DEPLOY), config_filename="dagster.yaml")
    instance = dg.DagsterInstance.from_ref(ref)
    try:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        # Writing events is what fails with the psycopg 3 scheme (NOTIFY ... $1).
        result = dg.materialize([probe], instance=instance)
        assert result.success
        run = instance.get_run_by_id(result.run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        assert instance.get_latest_materialization_event(dg.AssetKey("probe")) is not None
    finally:
        instance.dispose()

    # The rows are really in that PostgreSQL database.
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        run_ids = conn.execute(sa.text("SELECT run_id FROM runs")).scalars().all()
    engine.dispose()
    assert run_ids == [result.run_id]


def test_deploy_dagster_local_yaml_uses_sqlite_under_dagster_home(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    ref = InstanceRef.from_dir(str(tmp_path), config_dir=str(DEPLOY), config_filename="dagster_local.yaml")
    instance = dg.DagsterInstance.from_ref(ref)
    try:
        assert type(instance.run_storage).__name__ == "SqliteRunStorage"
        result = dg.materialize([probe], instance=instance)
        assert result.success
        assert instance.get_run_by_id(result.run_id).status == dg.DagsterRunStatus.SUCCESS
    finally:
        instance.dispose()
    assert (tmp_path / "history" / "runs.db").is_file()

"""A warehouse password stays secret: it is in neither what ``gpu-health run`` prints nor the repository snapshot
Dagster serializes (what the webserver, the daemon and run records hold), whether it comes from
``$GPU_HEALTH_WAREHOUSE_URL`` or from ``--warehouse``.

The snapshot tests build the definitions only (nothing connects); the run tests write into a fresh database on the
session's PostgreSQL, which authenticates by ``trust`` and so accepts any password in the URL.
"""

import json
import os
import uuid

import pytest
import sqlalchemy as sa

from gpu_health.cli import main
from gpu_health.storage.warehouse import masked_url
from gpu_health_tests.conftest import LANDING_END, LANDING_START, iso

PASSWORD = "n0t-for-anyone-s-eyes"
PG_URL = f"postgresql+psycopg2://gpu_health:{PASSWORD}@127.0.0.1:5432/gpu_health"
AM_URL = f"http://alerts:{PASSWORD}@127.0.0.1:1"  # basic auth; nothing listens on port 1


def repository_snapshot(defs) -> str:
    """The repository as a code server serves it to the webserver and the daemon (serialized)."""
    from dagster._core.remote_representation.external_data import RepositorySnap
    from dagster._serdes import serialize_value

    return serialize_value(RepositorySnap.from_def(defs.get_repository_def()))


def test_a_password_from_the_environment_is_not_in_the_repository_snapshot(monkeypatch):
    from gpu_health.defs.build import build_definitions
    from gpu_health.settings import Settings

    monkeypatch.setenv("GPU_HEALTH_WAREHOUSE_URL", PG_URL)
    monkeypatch.setenv("GPU_HEALTH_ALERTMANAGER_URL", AM_URL)
    snapshot = repository_snapshot(build_definitions(Settings()))
    assert PASSWORD not in snapshot
    # the resources name the variables instead, read when a run or a sensor tick starts
    for variable in ("GPU_HEALTH_WAREHOUSE_URL", "GPU_HEALTH_ALERTMANAGER_URL"):
        assert f'\\"url\\": {{\\"env\\": \\"{variable}\\"}}' in snapshot


def test_a_password_given_on_the_command_line_is_not_in_the_range_runs_snapshot(monkeypatch):
    """``gpu-health run --warehouse URL`` builds its own code location (``CodeLocation``) for the URL."""
    from gpu_health.defs.range_runs import CodeLocation
    from gpu_health.defs.resources import SourceSpec, TelemetrySourceResource

    monkeypatch.delenv("GPU_HEALTH_WAREHOUSE_URL", raising=False)
    location = CodeLocation(url=PG_URL, telemetry_dir="", source=SourceSpec(TelemetrySourceResource()),
                            partition_start="2026-11-03-00:00")
    assert PASSWORD not in repository_snapshot(location.definitions())


def test_a_printed_url_masks_its_password_and_nothing_else():
    assert masked_url(PG_URL) == "postgresql+psycopg2://gpu_health:***@127.0.0.1:5432/gpu_health"
    for plain in ("sqlite:///var/warehouse.db", "postgresql+psycopg2://postgres@127.0.0.1:5432/gpu_health"):
        assert masked_url(plain) == plain


def test_an_unreachable_alertmanager_is_named_without_its_password():
    from gpu_health.delivery.alertmanager import AlertmanagerClient, AlertmanagerError

    with pytest.raises(AlertmanagerError) as failed:
        AlertmanagerClient(AM_URL, timeout=2, retries=0).post([])
    assert "127.0.0.1:1" in str(failed.value) and PASSWORD not in str(failed.value)


@pytest.fixture
def pg_url_with_password(postgres_url, tmp_path, monkeypatch):
    """A fresh database on the session's PostgreSQL, its URL with a password; the test runs in its own folder (a
    PostgreSQL warehouse's telemetry store defaults to ``var/telemetry/`` of the working directory)."""
    monkeypatch.chdir(tmp_path)
    name = f"secrets_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.make_url(postgres_url).set(password=PASSWORD, database=name).render_as_string(hide_password=False)
    yield url
    from gpu_health.storage.warehouse import engine_for

    engine_for(url).dispose()
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


@pytest.fixture(autouse=True)
def _forget_command_line_urls():
    """The variables a ``--warehouse`` URL with a password was put into (``warehouse_url_field``) end with the
    test, as a command's process would."""
    before = set(os.environ)
    yield
    for name in set(os.environ) - before:
        del os.environ[name]


@pytest.mark.parametrize("given, workers", [("environment", 1), ("command line", 1), ("command line", 2)])
def test_run_prints_no_warehouse_password(given, workers, pg_url_with_password, landing_zone, monkeypatch, capfd):
    """With 2 workers the stages run in processes of their own, each building the code location for the URL."""
    argv = ["run", "--start", iso(LANDING_START), "--end", iso(LANDING_END), "--landing", str(landing_zone),
            "--workers", str(workers)]
    if given == "environment":
        monkeypatch.setenv("GPU_HEALTH_WAREHOUSE_URL", pg_url_with_password)
    else:
        monkeypatch.delenv("GPU_HEALTH_WAREHOUSE_URL", raising=False)
        argv += ["--warehouse", pg_url_with_password]
    code = main(argv)  # not --quiet: the progress lines are printed too
    out, err = capfd.readouterr()
    assert code == 0, err
    assert PASSWORD not in out and PASSWORD not in err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["partitions"] == 6 and summary["warehouse"] == masked_url(pg_url_with_password)

"""The warehouse's DDL on a real PostgreSQL: the finance role's SQL is injection-proof, its grants
survive every pipeline run, and first runs racing on a fresh database create the schema once.

Each test gets a fresh database on the session's server (``postgres_url``); the roles a test
creates are dropped with it.
"""

import functools
import threading
import uuid

import psycopg2
from psycopg2 import sql as pgsql
import pytest
import sqlalchemy as sa
import yaml

from gpu_health.storage import views as V
from gpu_health.storage.views import VIEWS, grant_finance_read_only
from gpu_health.storage.warehouse import Warehouse, engine_for
from gpu_health_tests.services.postgres import admin_sql, fresh_database

# passwords a hostile caller could pass: each would have ended the string literal of the old
# f-string DDL and appended attributes or statements
CRAFTED_PASSWORDS = [
    "x' SUPERUSER --",
    "x' SUPERUSER CREATEROLE CREATEDB REPLICATION BYPASSRLS; --",
    "pw'; ALTER ROLE postgres NOSUPERUSER; CREATE ROLE evil SUPERUSER LOGIN; --",
    "$$'\"; \\ SUPERUSER",
]
PLAIN_ATTRIBUTES = ("rolsuper", "rolcreaterole", "rolcreatedb", "rolreplication", "rolbypassrls")


@pytest.fixture
def pg_db(postgres_url, tmp_path, monkeypatch):
    """A fresh database on the session's PostgreSQL; dropped afterwards with the roles a test made. The test runs
    in its own folder, so the default telemetry store of a PostgreSQL warehouse (``var/telemetry/`` of the
    working directory) is its own, not shared with tests running beside it."""
    monkeypatch.chdir(tmp_path)
    roles: list[str] = []
    admin = functools.partial(admin_sql, postgres_url)
    with fresh_database(postgres_url, prefix="safe") as db_url:
        yield db_url, roles, admin
    for role in roles + ["evil"]:
        admin(pgsql.SQL("DROP ROLE IF EXISTS {}").format(pgsql.Identifier(role)))


def _connect_as(db_url: str, role: str, password: str):
    u = sa.make_url(db_url)
    conn = psycopg2.connect(host=u.host, port=u.port, dbname=u.database, user=role, password=password)
    conn.autocommit = True
    return conn


def _attributes(admin_sql, role: str) -> dict:
    rows = admin_sql(f"SELECT rolcanlogin, {', '.join(PLAIN_ATTRIBUTES)} FROM pg_roles WHERE rolname = %s", (role,))
    assert rows, f"role {role!r} was not created"
    return dict(zip(("rolcanlogin", *PLAIN_ATTRIBUTES), rows[0]))


def _assert_reads_views_only(conn, expect_rows: bool = False) -> None:
    with conn.cursor() as cur:
        for view in VIEWS:
            cur.execute(pgsql.SQL("SELECT count(*) FROM {}").format(pgsql.Identifier(view)))
            n = cur.fetchone()[0]
            if expect_rows and view != "alerts_current":
                assert n > 0, f"{view} is empty"
        for statement in ("SELECT * FROM wasted_spend", "DELETE FROM cost_capacity",
                          "CREATE TABLE t_evil (x int)", "ALTER ROLE postgres NOSUPERUSER"):
            with pytest.raises((psycopg2.errors.InsufficientPrivilege, psycopg2.errors.UndefinedTable)):
                cur.execute(statement)


@pytest.mark.parametrize("password", CRAFTED_PASSWORDS)
def test_a_crafted_password_leaves_a_plain_login_role_that_only_reads(pg_db, password):
    db_url, roles, admin_sql = pg_db
    wh = Warehouse(db_url)
    wh.create_all()
    role = f"fin_ro_{uuid.uuid4().hex[:6]}"
    roles.append(role)
    grant_finance_read_only(wh.engine, role, login_password=password)
    attrs = _attributes(admin_sql, role)
    assert attrs["rolcanlogin"] is True
    assert not any(attrs[a] for a in PLAIN_ATTRIBUTES), attrs
    # the password is stored whole: the role logs in with exactly that text
    conn = _connect_as(db_url, role, password)
    try:
        _assert_reads_views_only(conn)
    finally:
        conn.close()
    assert not admin_sql("SELECT 1 FROM pg_roles WHERE rolname = 'evil'")
    assert _attributes(admin_sql, "postgres")["rolsuper"] is True


def test_a_crafted_role_name_is_one_identifier(pg_db):
    db_url, roles, admin_sql = pg_db
    wh = Warehouse(db_url)
    wh.create_all()
    role = 'fin"; CREATE ROLE evil SUPERUSER; --'
    roles.append(role)
    grant_finance_read_only(wh.engine, role, login_password="pw")
    assert not any(_attributes(admin_sql, role)[a] for a in PLAIN_ATTRIBUTES)
    assert not admin_sql("SELECT 1 FROM pg_roles WHERE rolname = 'evil'")


def test_an_existing_role_with_more_than_read_access_is_refused(pg_db):
    db_url, roles, admin_sql = pg_db
    wh = Warehouse(db_url)
    wh.create_all()
    role = f"fin_admin_{uuid.uuid4().hex[:6]}"
    roles.append(role)
    admin_sql(pgsql.SQL("CREATE ROLE {} CREATEROLE").format(pgsql.Identifier(role)))
    with pytest.raises(ValueError, match="more than read access"):
        grant_finance_read_only(wh.engine, role)
    grants = admin_sql("SELECT count(*) FROM information_schema.role_table_grants WHERE grantee = %s", (role,))
    assert grants[0][0] == 0


def test_a_view_whose_columns_change_keeps_its_grants(pg_db, monkeypatch):
    """The drop-and-create path (``OR REPLACE`` refuses to drop a column) re-applies the grants."""
    db_url, roles, _ = pg_db
    wh = Warehouse(db_url)
    wh.create_all()
    role = f"fin_ro_{uuid.uuid4().hex[:6]}"
    roles.append(role)
    grant_finance_read_only(wh.engine, role, login_password="pw")
    narrower = dict(VIEWS, finance_goodput_daily="SELECT date, region, settled_goodput FROM cluster_goodput_daily")
    monkeypatch.setattr(V, "VIEWS", narrower)
    V.create_views(wh.engine)
    conn = _connect_as(db_url, role, "pw")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM finance_goodput_daily")
            assert [d.name for d in cur.description] == ["date", "region", "settled_goodput"]
    finally:
        conn.close()


def test_an_unchanged_view_is_left_alone_so_an_analysts_open_query_never_blocks_a_run(pg_db):
    db_url, _, _ = pg_db
    Warehouse(db_url).create_all()
    u = sa.make_url(db_url)
    analyst = psycopg2.connect(host=u.host, port=u.port, dbname=u.database, user=u.username)
    try:
        with analyst.cursor() as cur:  # a long read holds ACCESS SHARE on every view until it ends
            for view in VIEWS:
                cur.execute(pgsql.SQL("SELECT count(*) FROM {}").format(pgsql.Identifier(view)))
        # a later run's first use of the warehouse (a new engine, so create_all runs again); with a lock
        # timeout, replacing any view (ACCESS EXCLUSIVE) would fail instead of waiting for the analyst
        impatient = u.set(query={"options": "-c lock_timeout=2000"}).render_as_string(hide_password=False)
        Warehouse(impatient).create_all()
        engine_for(impatient).dispose()
    finally:
        analyst.rollback()
        analyst.close()


def test_the_read_only_role_reads_every_finance_view_after_two_pipeline_runs(pg_db, tmp_path):
    from gpu_health.cli import run

    db_url, roles, _ = pg_db
    scenario = tmp_path / "small.yaml"
    scenario.write_text(yaml.safe_dump({"seed": 3, "start": "2026-11-03T11:00:00Z", "end": "2026-11-03T11:10:00Z",
                                        "cluster": {"gpus": 96}}))
    window = ("2026-11-03T11:00:00Z", "2026-11-03T11:10:00Z")
    run(*window, scenario=str(scenario), warehouse=db_url, quiet=True)
    role = f"fin_ro_{uuid.uuid4().hex[:6]}"
    roles.append(role)
    grant_finance_read_only(Warehouse(db_url).engine, role, login_password="pw")
    for _ in range(2):  # every run re-creates the views it finds
        run(*window, scenario=str(scenario), warehouse=db_url, quiet=True)
        conn = _connect_as(db_url, role, "pw")
        try:
            _assert_reads_views_only(conn, expect_rows=True)
        finally:
            conn.close()


def test_two_first_runs_racing_on_a_fresh_database_create_the_schema_once(pg_db):
    _race_first_runs(pg_db[0])


def test_first_runs_racing_on_a_fresh_sqlite_file_create_the_schema_once(sqlite_url):
    _race_first_runs(sqlite_url)


def _race_first_runs(db_url: str) -> None:
    """Three first uses of a fresh warehouse released at once: all succeed, the schema is whole."""
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def first_run():
        try:
            wh = Warehouse(db_url)  # a fresh instance: its first use creates the schema
            barrier.wait(timeout=30)
            wh.create_all()
        except BaseException as exc:  # noqa: BLE001  (reported by the assertion below)
            errors.append(exc)

    threads = [threading.Thread(target=first_run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    wh = Warehouse(db_url)
    with wh.engine.connect() as conn:
        tables = set(sa.inspect(conn).get_table_names())
        views = set(sa.inspect(conn).get_view_names())
    from gpu_health.storage.schema import sql_tables

    assert {t.name for t in sql_tables()} <= tables  # the columnar telemetry tables live in the store
    assert set(VIEWS) <= views

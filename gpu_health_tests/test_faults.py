"""Transient faults retry a step (gpu_health.faults + defs.retry.TRANSIENT_RETRY); other errors fail at once.

The errors are real ones (a refused PostgreSQL connection, a locked SQLite file, an unknown table)
and the runs are whole ``gpu-health run`` partitions of a small simulated cluster.
"""

import inspect
import socket
import sqlite3
import threading
import time
import uuid

import dagster as dg
import pandas as pd
import psycopg2
import pytest
import requests
import sqlalchemy as sa
import yaml

from gpu_health.defs import retry
from gpu_health.faults import is_transient
from gpu_health.storage.warehouse import Warehouse, engine_for

WINDOW = ("2026-11-03T11:00:00Z", "2026-11-03T11:05:00Z")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _raised(fn) -> BaseException:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001  (the test inspects it)
        return exc
    raise AssertionError("no error raised")


def refused_psycopg2() -> BaseException:
    return _raised(lambda: psycopg2.connect(host="127.0.0.1", port=_closed_port(), user="x", dbname="x",
                                            connect_timeout=2))


def test_a_database_that_is_gone_is_transient():
    assert is_transient(refused_psycopg2())
    engine = sa.create_engine(f"postgresql+psycopg2://x@127.0.0.1:{_closed_port()}/x")
    assert is_transient(_raised(lambda: engine.connect()))  # SQLAlchemy's OperationalError around it
    try:  # an error raised while handling it keeps it in its chain
        try:
            raise ConnectionResetError("reset by peer")
        except ConnectionResetError:
            raise ValueError("while reading the window")
    except ValueError as exc:
        assert is_transient(exc)
    assert is_transient(requests.ConnectionError("refused"))


def test_the_decorator_turns_a_transient_error_into_a_retry_for_plain_and_generator_bodies():
    context = dg.build_asset_context()
    cause = requests.ConnectionError("refused")

    def plain(context, error):
        raise error

    def generator(context, error):
        yield dg.Output(1)
        raise error

    for body in (plain, generator):
        wrapped = retry.retry_transient_errors(body)
        assert inspect.isgeneratorfunction(wrapped) == inspect.isgeneratorfunction(body)
        run = (lambda err: list(wrapped(context, err))) if body is generator else (lambda err: wrapped(context, err))
        requested = _raised(lambda: run(cause))
        assert isinstance(requested, dg.RetryRequested) and requested.__cause__ is cause
        assert requested.max_retries == retry.TRANSIENT_RETRY.max_retries
        bug = KeyError("not transient")
        assert _raised(lambda: run(bug)) is bug  # any other error passes unchanged


def test_a_locked_sqlite_file_is_transient_a_missing_table_is_not(tmp_path):
    path = tmp_path / "w.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x int)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        assert is_transient(_raised(lambda: other.execute("INSERT INTO t VALUES (1)")))
        assert not is_transient(_raised(lambda: other.execute("SELECT * FROM no_such_table")))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        other.close()


def test_errors_of_the_data_or_the_code_are_not_transient(postgres_url):
    assert not is_transient(ValueError("unexpected column(s) ['actor']"))
    assert not is_transient(KeyError("gpu_uuid"))
    engine = sa.create_engine(postgres_url)
    with engine.connect() as conn:
        exc = _raised(lambda: conn.exec_driver_sql("SELECT * FROM no_such_table_here"))
    engine.dispose()
    assert isinstance(exc.orig, psycopg2.errors.UndefinedTable) and not is_transient(exc)


def _scenario(folder) -> str:
    path = folder / "small.yaml"
    path.write_text(yaml.safe_dump({"seed": 3, "start": WINDOW[0], "end": WINDOW[1], "cluster": {"gpus": 96}}))
    return str(path)


def _states(url: str):
    frame = Warehouse(url).read_window("goodput_states")
    return frame.sort_values(list(frame.columns.drop("gpu_minutes"))).reset_index(drop=True)


@pytest.fixture(scope="module")
def clean_states(tmp_path_factory):
    """goodput_states of the same partition run without a fault."""
    from gpu_health.cli import run

    folder = tmp_path_factory.mktemp("clean")
    url = f"sqlite:///{folder / 'wh.db'}"
    run(*WINDOW, scenario=_scenario(folder), warehouse=url, quiet=True)
    return _states(url)


@pytest.fixture
def small_cluster(tmp_path, monkeypatch):
    """The small scenario, a fresh SQLite warehouse, and retries without waiting."""
    monkeypatch.setattr(retry, "TRANSIENT_RETRY", dg.RetryPolicy(max_retries=3, delay=0.01))
    return _scenario(tmp_path), f"sqlite:///{tmp_path / 'wh.db'}"


def _fail_first(monkeypatch, method: str, table: str, error_factory, times: int = 1) -> list:
    """Make ``Warehouse.<method>`` raise ``error_factory()`` on its first ``times`` calls for ``table``
    (``replace_windows``: its calls that write ``table`` among others)."""
    calls = []
    real = getattr(Warehouse, method)

    def patched(self, name, *args, **kwargs):
        if name == table or (isinstance(name, dict) and table in name):
            calls.append(name)
            if len(calls) <= times:
                raise error_factory()
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(Warehouse, method, patched)
    return calls


@pytest.mark.parametrize("method, table", [
    ("replace_windows", "goodput_states"),  # the loss tree's five tables, written by its step in one transaction
    ("replace_window", "source_rejects"),   # a source asset's own write
    ("read_window", "gpu_telemetry"),       # a derived asset's read
])
def test_the_database_gone_for_a_moment_is_retried_and_the_partition_lands(small_cluster, clean_states, monkeypatch,
                                                                           method, table):
    from gpu_health.cli import run

    scenario, url = small_cluster
    error = refused_psycopg2()
    calls = _fail_first(monkeypatch, method, table, lambda: sa.exc.OperationalError("SELECT 1", {}, error), times=2)
    summary = run(*WINDOW, scenario=scenario, warehouse=url, quiet=True)
    assert summary["partitions"] == 1
    assert len(calls) >= 3  # two failures, then the attempt that worked
    pd.testing.assert_frame_equal(_states(url), clean_states)  # the same partition as a run without the fault


def test_an_error_of_the_data_fails_at_once_without_a_retry(small_cluster, monkeypatch):
    from gpu_health.cli import run

    scenario, url = small_cluster
    calls = _fail_first(monkeypatch, "replace_windows", "goodput_states", lambda: ValueError("bad frame"), times=99)
    with pytest.raises(RuntimeError, match="bad frame"):
        run(*WINDOW, scenario=scenario, warehouse=url, quiet=True)
    assert len(calls) == 1


def test_retries_stop_after_the_policy_and_the_run_fails_with_the_cause(small_cluster, monkeypatch):
    from gpu_health.cli import run

    scenario, url = small_cluster
    error = refused_psycopg2()
    calls = _fail_first(monkeypatch, "replace_windows", "goodput_states",
                        lambda: sa.exc.OperationalError("INSERT", {}, error), times=99)
    with pytest.raises(RuntimeError, match="goodput"):
        run(*WINDOW, scenario=scenario, warehouse=url, quiet=True)
    assert len(calls) == 1 + 3  # the first attempt and TRANSIENT_RETRY's three retries


# --- a real PostgreSQL connection cut mid-run ----------------------------------------------------------
class FlakyProxy:
    """A TCP proxy to PostgreSQL that can cut every connection and refuse new ones for a while."""

    def __init__(self, host: str, port: int):
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.down_until = 0.0
        self.cuts = 0
        self.live: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self, seconds: float) -> None:
        with self.lock:
            self.down_until = time.monotonic() + seconds
            self.cuts += 1
            for s in self.live:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.live.clear()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if time.monotonic() < self.down_until:
                client.close()  # the server is "gone": the connection is dropped at once
                continue
            upstream = socket.create_connection(self.upstream)
            with self.lock:
                self.live += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self):
        self.listener.close()
        self.cut(0)


def test_postgresql_cut_mid_run_is_retried_and_converges_to_the_clean_result(postgres_url, clean_states, tmp_path,
                                                                             monkeypatch):
    """The connections die as the loss tree is written and PostgreSQL refuses new ones for 3 s."""
    from gpu_health.cli import run

    monkeypatch.chdir(tmp_path)  # files a warehouse keeps at its default place (var/...) are this test's own

    monkeypatch.setattr(retry, "TRANSIENT_RETRY", dg.RetryPolicy(max_retries=3, delay=1, backoff=dg.Backoff.EXPONENTIAL))
    u = sa.make_url(postgres_url)
    db = f"faults_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{db}"')
    proxy = FlakyProxy(u.host, u.port)
    url = u.set(port=proxy.port, database=db).render_as_string(hide_password=False)
    real = Warehouse.replace_windows
    writes = []

    def cut_once(self, frames, *args, **kwargs):
        if "goodput_states" in frames:
            writes.append("goodput_states")
            if proxy.cuts == 0:
                proxy.cut(3.0)
        return real(self, frames, *args, **kwargs)

    monkeypatch.setattr(Warehouse, "replace_windows", cut_once)
    try:
        summary = run(*WINDOW, scenario=_scenario(tmp_path), warehouse=url, quiet=True)
        assert summary["partitions"] == 1 and proxy.cuts == 1
        assert len(writes) >= 2  # the write into the cut connections failed; a retry wrote it
        pd.testing.assert_frame_equal(_states(url), clean_states)  # PostgreSQL after the fault = SQLite clean
    finally:
        engine_for(url).dispose()
        proxy.close()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.dispose()

"""A throwaway PostgreSQL 15 server for tests and scripts.

The server is started the way ``shared/design/stack-notes.md`` measured it on
our machines: as root, ``initdb`` and ``pg_ctl`` refuse to run, and the tests
cannot run as another user (the interpreter lives under a 0700 home). So only
the server runs as ``postgres`` (through ``runuser``); the tests stay root and
connect over TCP on 127.0.0.1 with ``trust`` authentication::

    mkdir -p $D && chown postgres:postgres $D
    runuser -u postgres -- initdb -D $D/data -U postgres --auth=trust -E UTF8 --no-sync
    runuser -u postgres -- pg_ctl -D $D/data -l $D/log -w \\
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k $D -c fsync=off" start

When not root, the same commands run as the current user, without ``runuser``.

Use from tests: the session fixture ``postgres_url`` yields a SQLAlchemy URL
``postgresql+psycopg2://postgres@127.0.0.1:PORT/gpu_health`` (psycopg2, not
``postgresql://``, which SQLAlchemy 2.1 maps to psycopg 3). Import it into a
test module or a ``conftest.py``::

    from gpu_health_tests.services.postgres import postgres_url  # noqa: F401

Environment:

- ``GPU_HEALTH_TEST_POSTGRES_URL``: use that server instead of starting one
  (e.g. a CI service container). The fixture yields the URL unchanged and
  stops nothing; tests must clean up what they create.
- ``GPU_HEALTH_PG_BINDIR``: where ``initdb``/``pg_ctl`` live (default
  ``/usr/lib/postgresql/15/bin``).

Missing binaries fail the tests, they never skip them: CI installs
``postgresql-15``.

From a script: ``start_postgres(base_dir)`` returns ``(url, stop)``; or run
``python -m gpu_health_tests.services.postgres`` to print a URL and keep the
server up until Ctrl-C.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg2
import pytest

from gpu_health_tests.services import serve_for_session

ENV_URL = "GPU_HEALTH_TEST_POSTGRES_URL"
ENV_BINDIR = "GPU_HEALTH_PG_BINDIR"
DEFAULT_BINDIR = "/usr/lib/postgresql/15/bin"
DATABASE = "gpu_health"
SERVER_USER = "postgres"  # OS user that owns the cluster when we are root
SUPERUSER = "postgres"  # database superuser created by initdb -U

# A Unix socket path is limited to 107 bytes on Linux; the socket lives in the
# server directory as ".s.PGSQL.<port>".
_MAX_SOCKET_DIR_LEN = 90
_START_ATTEMPTS = 3  # a free port can be taken between probing and binding


class PostgresStartError(RuntimeError):
    """The throwaway server could not be started; the message says why."""


def _bindir() -> Path:
    bindir = Path(os.environ.get(ENV_BINDIR, DEFAULT_BINDIR))
    missing = [name for name in ("initdb", "pg_ctl") if not (bindir / name).is_file()]
    if missing:
        raise PostgresStartError(
            f"PostgreSQL binaries {missing} not found in {bindir}. Install them "
            "(Debian 12: `apt-get install -y --no-install-recommends postgresql-15`), "
            f"point {ENV_BINDIR} at their directory, or set {ENV_URL} to an "
            "existing server's SQLAlchemy URL."
        )
    return bindir


def _as_server_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("runuser") is None:
        raise PostgresStartError("running as root but `runuser` is not installed (util-linux)")
    return ["runuser", "-u", SERVER_USER, "--"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(cmd: list[str], what: str, log: Path | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        log_tail = ""
        if log is not None and log.exists():
            log_tail = "\n--- server log (tail) ---\n" + "\n".join(
                log.read_text(errors="replace").splitlines()[-30:]
            )
        raise PostgresStartError(
            f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n"
            f"{proc.stdout}{proc.stderr}{log_tail}"
        )


def start_postgres(base_dir: str | os.PathLike[str]) -> tuple[str, Callable[[], None]]:
    """Start a private PostgreSQL server under ``base_dir``; return ``(url, stop)``.

    A fresh directory is created inside ``base_dir`` (which the ``postgres``
    user must be able to traverse when we are root, so not pytest's 0700
    ``tmp_path``; ``/tmp`` is fine). The server listens on 127.0.0.1 only, on
    a free port, with its Unix socket in that directory, ``fsync=off`` and
    trust authentication; a database ``gpu_health`` is created.

    ``url`` is ``postgresql+psycopg2://postgres@127.0.0.1:PORT/gpu_health``.
    ``stop()`` stops the server (fast shutdown) and removes the directory; it
    is idempotent. Raises ``PostgresStartError`` with the tool output and the
    server log when anything fails.
    """
    bindir = _bindir()
    as_server = _as_server_user()
    root = Path(tempfile.mkdtemp(prefix="gh-pg-", dir=base_dir))
    if len(str(root)) > _MAX_SOCKET_DIR_LEN:
        shutil.rmtree(root, ignore_errors=True)
        raise PostgresStartError(f"{root} is too long for a Unix socket directory; use a shorter base_dir")
    data, log = root / "data", root / "log"
    if as_server:
        shutil.chown(root, SERVER_USER, SERVER_USER)

    started = False

    def stop() -> None:
        nonlocal started
        if started:
            started = False
            # Best effort: whatever happens, the directory goes.
            subprocess.run(
                [*as_server, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                capture_output=True,
            )
        shutil.rmtree(root, ignore_errors=True)

    try:
        _run(
            [*as_server, str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER,
             "--auth=trust", "-E", "UTF8", "--no-sync"],
            "initdb",
        )
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = _free_port()
            options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off"
            try:
                _run(
                    [*as_server, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log),
                     "-w", "-o", options, "start"],
                    "pg_ctl start",
                    log=log,
                )
            except PostgresStartError as exc:
                if attempt < _START_ATTEMPTS and "already in use" in str(exc):
                    continue
                raise
            started = True
            break
        conn = psycopg2.connect(host="127.0.0.1", port=port, user=SUPERUSER, dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{DATABASE}"')
        finally:
            conn.close()
    except BaseException:
        stop()
        raise
    return f"postgresql+psycopg2://{SUPERUSER}@127.0.0.1:{port}/{DATABASE}", stop


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """SQLAlchemy URL of a PostgreSQL 15 server for this test session.

    ``$GPU_HEALTH_TEST_POSTGRES_URL`` if set (yielded unchanged, not stopped);
    otherwise a throwaway server from ``start_postgres`` under the system temp
    directory, stopped and removed at the end of the session.
    """
    external = os.environ.get(ENV_URL)
    if external:
        yield external
        return
    yield from serve_for_session(start_postgres, PostgresStartError)


if __name__ == "__main__":  # pragma: no cover - manual helper
    import signal

    signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    url, stop = start_postgres(tempfile.gettempdir())
    print(url, flush=True)
    try:
        signal.sigwait(signals)
    finally:
        stop()


@contextlib.contextmanager
def fresh_database(server_url: str, prefix: str = "t") -> Iterator[str]:
    """A new, empty database on the server of ``server_url`` (a SQLAlchemy URL), dropped afterwards (with
    its open connections): each test gets a warehouse nobody else writes to."""
    import sqlalchemy as sa

    from gpu_health.storage.warehouse import engine_for

    url = sa.make_url(server_url)
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin_sql(server_url, f'CREATE DATABASE "{name}"')
    new = url.set(database=name).render_as_string(hide_password=False)
    try:
        yield new
    finally:
        engine_for(new).dispose()
        admin_sql(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def admin_sql(server_url: str, statement, params=None) -> list[tuple] | None:
    """Run ``statement`` (text or a ``psycopg2.sql`` composition, with ``params``) on the server of ``server_url``
    as its user, in the ``postgres`` database and outside a transaction (CREATE / DROP DATABASE refuse to run
    inside one); its rows, or None for a statement that returns none."""
    import sqlalchemy as sa

    url = sa.make_url(server_url)
    conn = psycopg2.connect(host=url.host, port=url.port, user=url.username, dbname="postgres")
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()

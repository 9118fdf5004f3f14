"""Which errors are transient: the fault of a moment, gone if the same work is tried again.

Plain logic (no Dagster): ``gpu_health.defs.common.retry_transient_errors`` turns a transient
error into a step retry with backoff; every other error fails the step at once, because trying
bad input or a bug again gives the same failure, only later.

Transient, wherever it sits in the exception's cause/context chain:

* the database connection is gone or cannot be made: a SQLAlchemy error whose connection was
  invalidated, a psycopg2 ``OperationalError`` without an SQLSTATE (refused, reset, "server
  closed the connection unexpectedly") or with one of ``TRANSIENT_SQLSTATES``, a psycopg2
  ``InterfaceError`` ("connection already closed");
* SQLite's "database is locked" (another writer held the lock past the driver's timeout);
* the network: ``requests`` connection errors and timeouts, and the OS's ``ConnectionError``
  (refused, reset, broken pipe) and ``TimeoutError``.

Not transient: everything else, including a SQLite ``OperationalError`` for a missing table or
bad SQL, and PostgreSQL errors that name the data or the statement.
"""

import sqlite3

# SQLSTATEs that say the server, not the work, failed (PostgreSQL Appendix A): connection
# exceptions (class 08), the server shutting down or starting (57P01 admin_shutdown,
# 57P02 crash_shutdown, 57P03 cannot_connect_now), too many connections (53300), and the two
# a concurrent transaction causes and a re-run resolves (40001 serialization_failure,
# 40P01 deadlock_detected).
TRANSIENT_SQLSTATES = frozenset({"08000", "08001", "08003", "08004", "08006", "08007", "08P01",
                                 "57P01", "57P02", "57P03", "53300", "40001", "40P01"})
_SQLITE_TRANSIENT = ("database is locked", "database table is locked")


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = getattr(exc, "orig", None) or exc.__cause__ or exc.__context__  # SQLAlchemy keeps the DBAPI error in .orig


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` (or an error it was raised from) is a fault of the moment (module docstring)."""
    import psycopg2
    import requests
    import sqlalchemy.exc as sa_exc

    for e in _chain(exc):
        if isinstance(e, sa_exc.DBAPIError) and e.connection_invalidated:
            return True
        if isinstance(e, psycopg2.InterfaceError):
            return True
        if isinstance(e, psycopg2.OperationalError):
            code = getattr(e, "pgcode", None)
            if code is None or code in TRANSIENT_SQLSTATES:
                return True
        if isinstance(e, sqlite3.OperationalError) and str(e).startswith(_SQLITE_TRANSIENT):
            return True
        if isinstance(e, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)):
            return True
    return False

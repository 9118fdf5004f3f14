"""Finance's SQL views over the warehouse, and the read-only role (PostgreSQL).

The views are plain SQL that SQLite and PostgreSQL both accept; ``sql/finance_views.sql``
is their reviewed rendering (``python -m gpu_health.storage.views``; a test fails on drift).
A finance analyst answers "what did waste cost us last week, by cause and team" with:

    SELECT * FROM finance_waste_last_7_days;
"""

import hashlib
import sys

import sqlalchemy as sa

VIEWS: dict[str, str] = {
    "alerts_current": """
        SELECT a.* FROM alerts a
        JOIN (SELECT alert_id, MAX(partition_start) AS last_partition FROM alerts GROUP BY alert_id) l
          ON l.alert_id = a.alert_id AND l.last_partition = a.partition_start""",
    "finance_waste_by_day": """
        SELECT date, region, sku, cause_family, state, team, SUM(gpu_hours) AS gpu_hours, SUM(usd) AS usd
        FROM wasted_spend
        WHERE state <> 'productive'
        GROUP BY date, region, sku, cause_family, state, team""",
    "finance_waste_last_7_days": """
        SELECT cause_family, team, SUM(gpu_hours) AS gpu_hours, SUM(usd) AS usd
        FROM wasted_spend
        WHERE state <> 'productive'
          AND date IN (SELECT DISTINCT date FROM wasted_spend ORDER BY date DESC LIMIT 7)
        GROUP BY cause_family, team""",
    "finance_cost_per_productive_gpu_hour": """
        SELECT date, region,
               SUM(usd) AS spend_usd,
               SUM(CASE WHEN state = 'productive' THEN gpu_hours ELSE 0 END) AS productive_gpu_hours,
               SUM(usd) / NULLIF(SUM(CASE WHEN state = 'productive' THEN gpu_hours ELSE 0 END), 0) AS usd_per_productive_gpu_hour
        FROM wasted_spend
        GROUP BY date, region""",
    "finance_goodput_daily": """
        SELECT date, region, paid_gpu_hours, productive_gpu_hours, settled_goodput, provisional_goodput,
               failure_loss_gpu_hours, partitions
        FROM cluster_goodput_daily""",
    "finance_reserved_vs_on_demand": """
        SELECT c.date, c.region, c.sku, c.capacity_gpus, c.reserved_gpus,
               c.reserved_gpus * 24.0 AS reserved_gpu_hours, c.on_demand_gpu_hours,
               c.reserved_gpus * 24.0 * c.reserved_gpu_hour_usd AS reserved_usd,
               c.on_demand_gpu_hours * c.on_demand_gpu_hour_usd AS on_demand_usd,
               p.productive_gpu_hours,
               p.productive_gpu_hours / NULLIF(c.reserved_gpus * 24.0 + c.on_demand_gpu_hours, 0) AS productive_share_of_bought
        FROM cost_capacity c
        LEFT JOIN (SELECT date, region, sku, SUM(gpu_hours) AS productive_gpu_hours
                   FROM wasted_spend WHERE state = 'productive' GROUP BY date, region, sku) p
          ON p.date = c.date AND p.region = c.region AND p.sku = c.sku""",
    # the latest day's headroom, run-out date and cheapest reservation per region x SKU
    "finance_capacity_headroom": """
        SELECT h.date, h.region, h.sku, h.capacity_gpus, h.quantile, h.peak_demand_gpus_28d, h.headroom_gpus_28d,
               h.run_out_date, h.run_out_date_p50, h.run_out_date_p10, h.reserved_gpus, h.best_reserved_gpus_30d,
               h.cost_30d_usd, h.best_cost_30d_usd, h.cost_30d_usd - h.best_cost_30d_usd AS saving_30d_usd,
               h.forecast_best_reserved_gpus, h.forecast_cost_usd, h.forecast_best_cost_usd
        FROM capacity_headroom h
        WHERE h.date = (SELECT MAX(date) FROM capacity_headroom)""",
    "finance_capacity_forecast": """
        SELECT f.date AS forecast_date, f.target_date, f.horizon_days, f.region, f.sku, f.workload_class, f.method,
               f.p10_gpu_hours, f.p50_gpu_hours, f.p90_gpu_hours, f.selection, f.mase_ratio, f.p025_gpu_hours,
               f.p975_gpu_hours
        FROM capacity_forecast f
        WHERE f.date = (SELECT MAX(date) FROM capacity_forecast)""",
    "finance_capacity_demand_daily": """
        SELECT date, region, sku, workload_class, allocated_gpu_hours, idle_blocked_gpu_hours, backlog_gpu_hours,
               demand_gpu_hours
        FROM capacity_demand_daily""",
}

READ_ONLY_ROLE = "gpu_health_finance_ro"

# The attributes a read-only login role must hold, stated in full at creation: PostgreSQL's
# defaults already say the same, but an explicit list is what a reviewer reads, and no text a
# caller passes (the password travels as a literal) can add to it.
_PLAIN_ROLE = ("NOSUPERUSER", "NOCREATEDB", "NOCREATEROLE", "NOREPLICATION", "NOBYPASSRLS", "INHERIT")
# PostgreSQL's table privileges (the only words re-granted from a view's ACL after a drop)
_TABLE_PRIVILEGES = {"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"}


def create_views(bind: sa.Engine | sa.Connection) -> None:
    """Create or update every finance view, keeping the privileges granted on them.

    PostgreSQL: a view whose definition and underlying tables are unchanged is left
    alone (its comment holds a fingerprint of both), so a run takes no lock on it and an
    analyst's long query never holds a run up. Otherwise ``CREATE OR REPLACE VIEW`` keeps
    the view's owner and grants, so the read-only role keeps reading after every pipeline
    run; only where a new definition changes the view's columns (which ``OR REPLACE``
    refuses) is the view dropped and created again, and the grants it held are re-applied.
    SQLite has no grants and no ``OR REPLACE``: the view is dropped and created in the
    same transaction.
    """
    if isinstance(bind, sa.Engine):
        with bind.begin() as conn:
            create_views(conn)
        return
    catalogue = _catalogue()
    for name, body in VIEWS.items():
        if bind.dialect.name != "postgresql":
            bind.exec_driver_sql(f"DROP VIEW IF EXISTS {name}")
            bind.exec_driver_sql(f"CREATE VIEW {name} AS {body.strip()}")
            continue
        mark = "gpu_health view " + hashlib.sha1(f"{body.strip()}|{catalogue}".encode()).hexdigest()[:16]
        _create_or_replace_pg_view(bind, name, body.strip(), mark)


def _catalogue() -> str:
    """Every table and column of the schema: a view over ``a.*`` changes when its table does."""
    from gpu_health.storage.schema import metadata

    return ";".join(f"{t.name}({','.join(c.name for c in t.columns)})" for t in metadata.sorted_tables)


def _create_or_replace_pg_view(conn: sa.Connection, name: str, body: str, mark: str) -> None:
    from psycopg2 import sql

    cur = conn.connection.dbapi_connection.cursor()
    try:
        cur.execute("SELECT obj_description(to_regclass(%s), 'pg_class')", (name,))
        if cur.fetchone()[0] == mark:
            return
        _replace_pg_view(cur, name, body)
        cur.execute(sql.SQL("COMMENT ON VIEW {} IS {}").format(sql.Identifier(name), sql.Literal(mark)))
    finally:
        cur.close()


def _replace_pg_view(cur, name: str, body: str) -> None:
    """``CREATE OR REPLACE VIEW``; where the columns changed, drop and create, re-granting what it held."""
    from psycopg2 import errors, sql

    cur.execute("SAVEPOINT finance_view")
    try:
        cur.execute(sql.SQL("CREATE OR REPLACE VIEW {} AS ").format(sql.Identifier(name)) + sql.SQL(body))
        cur.execute("RELEASE SAVEPOINT finance_view")
        return
    except (errors.InvalidTableDefinition, errors.DatatypeMismatch, errors.FeatureNotSupported):
        cur.execute("ROLLBACK TO SAVEPOINT finance_view")
    cur.execute(
        """SELECT CASE WHEN a.grantee = 0 THEN NULL ELSE pg_get_userbyid(a.grantee) END, a.privilege_type
           FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
           WHERE c.oid = to_regclass(%s) AND a.grantee <> c.relowner""",
        (name,))
    grants = [(who, what) for who, what in cur.fetchall() if what in _TABLE_PRIVILEGES]
    cur.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(sql.Identifier(name)))
    cur.execute(sql.SQL("CREATE VIEW {} AS ").format(sql.Identifier(name)) + sql.SQL(body))
    for grantee, privilege in grants:
        cur.execute(sql.SQL("GRANT {} ON {} TO {}").format(
            sql.SQL(privilege), sql.Identifier(name),
            sql.SQL("PUBLIC") if grantee is None else sql.Identifier(grantee)))


def grant_finance_read_only(engine: sa.Engine, role: str = READ_ONLY_ROLE, *, login_password: str | None = None) -> None:
    """PostgreSQL: a plain role that can SELECT the finance views and nothing else.

    Every name and the password reach the server as ``psycopg2.sql`` identifiers and
    literals, never pasted into the statement, so no value can add an attribute (a
    password ``x' SUPERUSER --`` is just a password). The role is created with the
    attributes of a plain role spelled out (``NOLOGIN`` without a password); given a
    password, an existing role gets it (``LOGIN PASSWORD``). An existing role that holds
    more than a plain role (superuser, create role or database, replication, bypass RLS)
    is refused rather than handed the views. The grants survive later pipeline runs
    (``create_views`` replaces views in place); calling this again is harmless.
    """
    if engine.dialect.name != "postgresql":
        raise ValueError("roles exist only on PostgreSQL")
    from psycopg2 import sql

    with engine.begin() as conn:
        cur = conn.connection.dbapi_connection.cursor()
        try:
            cur.execute("SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls "
                        "FROM pg_roles WHERE rolname = %s", (role,))
            row = cur.fetchone()
            ident = sql.Identifier(role)
            if row is None:
                login = (sql.SQL("LOGIN PASSWORD {}").format(sql.Literal(login_password)) if login_password
                         else sql.SQL("NOLOGIN"))
                cur.execute(sql.SQL("CREATE ROLE {} WITH {} {}").format(
                    ident, sql.SQL(" ").join(sql.SQL(a) for a in _PLAIN_ROLE), login))
            elif row[0]:
                raise ValueError(f"role {role!r} holds more than read access (superuser, create role or database, "
                                 "replication or bypass RLS); refusing to make it the finance read-only role")
            elif login_password:
                cur.execute(sql.SQL("ALTER ROLE {} WITH LOGIN PASSWORD {}").format(ident, sql.Literal(login_password)))
            cur.execute("SELECT current_schema()")
            schema = cur.fetchone()[0]
            cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), ident))
            for name in VIEWS:
                cur.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(name), ident))
        finally:
            cur.close()


def render() -> str:
    out = ["-- Finance views, generated from gpu_health/storage/views.py (`python -m gpu_health.storage.views`).",
           "-- Portable SQL (SQLite and PostgreSQL). Example: SELECT * FROM finance_waste_last_7_days;", ""]
    for name, body in VIEWS.items():
        out.append(f"CREATE VIEW {name} AS\n    {body.strip()};\n")
    out.append(f"-- PostgreSQL read-only role (gpu_health.storage.views.grant_finance_read_only):")
    out.append(f'-- CREATE ROLE "{READ_ONLY_ROLE}" NOLOGIN; GRANT USAGE ON SCHEMA public TO "{READ_ONLY_ROLE}";')
    out.append(f'-- GRANT SELECT ON <each view above> TO "{READ_ONLY_ROLE}";')
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    from pathlib import Path

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "sql/finance_views.sql")
    target.write_text(render())
    print(f"wrote {target}")

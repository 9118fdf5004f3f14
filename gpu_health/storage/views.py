"""Finance's SQL views over the warehouse, and the read-only role (PostgreSQL).

The views are plain SQL that SQLite and PostgreSQL both accept; ``sql/finance_views.sql``
is their reviewed rendering (``python -m gpu_health.storage.views``; a test fails on drift).
A finance analyst answers "what did waste cost us last week, by cause and team" with:

    SELECT * FROM finance_waste_last_7_days;
"""

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
}

READ_ONLY_ROLE = "gpu_health_finance_ro"


def create_views(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for name, body in VIEWS.items():
            conn.exec_driver_sql(f"DROP VIEW IF EXISTS {name}")
            conn.exec_driver_sql(f"CREATE VIEW {name} AS {body.strip()}")


def grant_finance_read_only(engine: sa.Engine, role: str = READ_ONLY_ROLE, *, login_password: str | None = None) -> None:
    """PostgreSQL: a role that can SELECT the finance views (and nothing else)."""
    if engine.dialect.name != "postgresql":
        raise ValueError("roles exist only on PostgreSQL")
    with engine.begin() as conn:
        exists = conn.execute(sa.text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).scalar()
        if not exists:
            login = f"LOGIN PASSWORD '{login_password}'" if login_password else "NOLOGIN"
            conn.exec_driver_sql(f'CREATE ROLE "{role}" {login}')
        conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        for name in VIEWS:
            conn.exec_driver_sql(f'GRANT SELECT ON {name} TO "{role}"')


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

-- Finance views, generated from gpu_health/storage/views.py (`python -m gpu_health.storage.views`).
-- Portable SQL (SQLite and PostgreSQL). Example: SELECT * FROM finance_waste_last_7_days;

CREATE VIEW finance_waste_by_day AS
    SELECT date, region, sku, cause_family, state, team, SUM(gpu_hours) AS gpu_hours, SUM(usd) AS usd
        FROM wasted_spend
        WHERE state <> 'productive'
        GROUP BY date, region, sku, cause_family, state, team;

CREATE VIEW finance_waste_last_7_days AS
    SELECT cause_family, team, SUM(gpu_hours) AS gpu_hours, SUM(usd) AS usd
        FROM wasted_spend
        WHERE state <> 'productive'
          AND date IN (SELECT DISTINCT date FROM wasted_spend ORDER BY date DESC LIMIT 7)
        GROUP BY cause_family, team;

CREATE VIEW finance_cost_per_productive_gpu_hour AS
    SELECT date, region,
               SUM(usd) AS spend_usd,
               SUM(CASE WHEN state = 'productive' THEN gpu_hours ELSE 0 END) AS productive_gpu_hours,
               SUM(usd) / NULLIF(SUM(CASE WHEN state = 'productive' THEN gpu_hours ELSE 0 END), 0) AS usd_per_productive_gpu_hour
        FROM wasted_spend
        GROUP BY date, region;

CREATE VIEW finance_goodput_daily AS
    SELECT date, region, paid_gpu_hours, productive_gpu_hours, settled_goodput, provisional_goodput,
               failure_loss_gpu_hours, partitions
        FROM cluster_goodput_daily;

CREATE VIEW finance_reserved_vs_on_demand AS
    SELECT c.date, c.region, c.sku, c.capacity_gpus, c.reserved_gpus,
               c.reserved_gpus * 24.0 AS reserved_gpu_hours, c.on_demand_gpu_hours,
               c.reserved_gpus * 24.0 * c.reserved_gpu_hour_usd AS reserved_usd,
               c.on_demand_gpu_hours * c.on_demand_gpu_hour_usd AS on_demand_usd,
               p.productive_gpu_hours,
               p.productive_gpu_hours / NULLIF(c.reserved_gpus * 24.0 + c.on_demand_gpu_hours, 0) AS productive_share_of_bought
        FROM cost_capacity c
        LEFT JOIN (SELECT date, region, sku, SUM(gpu_hours) AS productive_gpu_hours
                   FROM wasted_spend WHERE state = 'productive' GROUP BY date, region, sku) p
          ON p.date = c.date AND p.region = c.region AND p.sku = c.sku;

-- PostgreSQL read-only role (gpu_health.storage.views.grant_finance_read_only):
-- CREATE ROLE "gpu_health_finance_ro" NOLOGIN; GRANT USAGE ON SCHEMA public TO "gpu_health_finance_ro";
-- GRANT SELECT ON <each view above> TO "gpu_health_finance_ro";

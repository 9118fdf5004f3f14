-- Finance views, generated from gpu_health/storage/views.py (`python -m gpu_health.storage.views`).
-- Portable SQL (SQLite and PostgreSQL). Example: SELECT * FROM finance_waste_last_7_days;

CREATE VIEW alerts_current AS
    SELECT a.* FROM alerts a
        JOIN (SELECT alert_id, MAX(partition_start) AS last_partition FROM alerts GROUP BY alert_id) l
          ON l.alert_id = a.alert_id AND l.last_partition = a.partition_start;

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

CREATE VIEW finance_capacity_headroom AS
    SELECT h.date, h.region, h.sku, h.capacity_gpus, h.quantile, h.peak_demand_gpus_28d, h.headroom_gpus_28d,
               h.run_out_date, h.run_out_date_p50, h.reserved_gpus, h.best_reserved_gpus_30d,
               h.cost_30d_usd, h.best_cost_30d_usd, h.cost_30d_usd - h.best_cost_30d_usd AS saving_30d_usd,
               h.forecast_best_reserved_gpus, h.forecast_cost_usd, h.forecast_best_cost_usd
        FROM capacity_headroom h
        WHERE h.date = (SELECT MAX(date) FROM capacity_headroom);

CREATE VIEW finance_capacity_forecast AS
    SELECT f.date AS forecast_date, f.target_date, f.horizon_days, f.region, f.sku, f.workload_class, f.method,
               f.p10_gpu_hours, f.p50_gpu_hours, f.p90_gpu_hours
        FROM capacity_forecast f
        WHERE f.date = (SELECT MAX(date) FROM capacity_forecast);

CREATE VIEW finance_capacity_demand_daily AS
    SELECT date, region, sku, workload_class, allocated_gpu_hours, idle_blocked_gpu_hours, backlog_gpu_hours,
               demand_gpu_hours
        FROM capacity_demand_daily;

-- PostgreSQL read-only role (gpu_health.storage.views.grant_finance_read_only):
-- CREATE ROLE "gpu_health_finance_ro" NOLOGIN; GRANT USAGE ON SCHEMA public TO "gpu_health_finance_ro";
-- GRANT SELECT ON <each view above> TO "gpu_health_finance_ro";

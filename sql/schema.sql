-- Generated from gpu_health/storage/schema.py by `python -m gpu_health.storage.schema`.
-- Do not edit by hand: a test fails when this file and the module drift.
--
-- Not in SQL (the catalogue's columnar tables: minute-grain telemetry, event sources, per-node loss tree,
-- inventory, per-partition baselines): facility_telemetry, goodput_leaves, goodput_node_states, gpu_telemetry, inference_latency_buckets, inference_requests, job_metadata, job_runtime_metrics, kpi_baselines, kube_nodes, kube_pods, network_telemetry, node_inventory, node_telemetry, scheduler_events, step_time_baselines, workload_step_stats are stored
-- as Parquet in the telemetry store, <telemetry_dir>/<table>/date=YYYY-MM-DD/<HH>.parquet (a complete hour) or <HHMM>.parquet (docs/storage.md).

CREATE TABLE alerts (
	partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	alert_id TEXT NOT NULL, 
	key TEXT NOT NULL, 
	detector TEXT NOT NULL, 
	status TEXT NOT NULL, 
	severity TEXT NOT NULL, 
	cause_family TEXT NOT NULL, 
	region TEXT NOT NULL, 
	scope TEXT NOT NULL, 
	summary TEXT NOT NULL, 
	description TEXT NOT NULL, 
	usd_per_hour FLOAT NOT NULL, 
	runbook TEXT NOT NULL, 
	opened_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	first_partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	paged_at TIMESTAMP WITH TIME ZONE, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	resolved_at TIMESTAMP WITH TIME ZONE, 
	follows_change TEXT, 
	clear_count BIGINT NOT NULL, 
	baseline_at_open FLOAT, 
	lost_gpu_minutes FLOAT NOT NULL, 
	margin_at_page FLOAT, 
	CONSTRAINT pk_alerts PRIMARY KEY (partition_start, alert_id)
);

CREATE TABLE capacity_demand_daily (
	date DATE NOT NULL, 
	region TEXT NOT NULL, 
	sku TEXT NOT NULL, 
	workload_class TEXT NOT NULL, 
	allocated_gpu_hours FLOAT NOT NULL, 
	idle_blocked_gpu_hours FLOAT NOT NULL, 
	backlog_gpu_hours FLOAT NOT NULL, 
	demand_gpu_hours FLOAT NOT NULL, 
	CONSTRAINT pk_capacity_demand_daily PRIMARY KEY (date, region, sku, workload_class)
);

CREATE TABLE capacity_forecast (
	date DATE NOT NULL, 
	region TEXT NOT NULL, 
	sku TEXT NOT NULL, 
	workload_class TEXT NOT NULL, 
	horizon_days BIGINT NOT NULL, 
	target_date DATE NOT NULL, 
	method TEXT NOT NULL, 
	history_days BIGINT NOT NULL, 
	p10_gpu_hours FLOAT, 
	p50_gpu_hours FLOAT NOT NULL, 
	p90_gpu_hours FLOAT, 
	selection TEXT, 
	mase_ratio FLOAT, 
	p025_gpu_hours FLOAT, 
	p975_gpu_hours FLOAT, 
	CONSTRAINT pk_capacity_forecast PRIMARY KEY (date, region, sku, workload_class, horizon_days)
);

CREATE TABLE capacity_headroom (
	date DATE NOT NULL, 
	region TEXT NOT NULL, 
	sku TEXT NOT NULL, 
	capacity_gpus BIGINT NOT NULL, 
	quantile TEXT NOT NULL, 
	peak_demand_gpus_28d FLOAT, 
	headroom_gpus_28d FLOAT, 
	run_out_date DATE, 
	run_out_date_p50 DATE, 
	run_out_date_p10 DATE, 
	reserved_gpus BIGINT NOT NULL, 
	reserved_gpu_hour_usd FLOAT NOT NULL, 
	on_demand_gpu_hour_usd FLOAT NOT NULL, 
	demand_days_30d BIGINT NOT NULL, 
	cost_30d_usd FLOAT NOT NULL, 
	best_reserved_gpus_30d BIGINT NOT NULL, 
	best_cost_30d_usd FLOAT NOT NULL, 
	forecast_best_reserved_gpus BIGINT, 
	forecast_cost_usd FLOAT, 
	forecast_best_cost_usd FLOAT, 
	CONSTRAINT pk_capacity_headroom PRIMARY KEY (date, region, sku)
);

CREATE TABLE change_events (
	event_id TEXT NOT NULL, 
	ts TIMESTAMP WITH TIME ZONE NOT NULL, 
	kind TEXT NOT NULL, 
	scope TEXT NOT NULL, 
	from_version TEXT, 
	to_version TEXT, 
	description TEXT NOT NULL, 
	actor TEXT, 
	ticket TEXT, 
	CONSTRAINT pk_change_events PRIMARY KEY (ts, event_id)
);

CREATE TABLE cluster_goodput (
	partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	region TEXT NOT NULL, 
	paid_gpu_minutes FLOAT NOT NULL, 
	productive_gpu_minutes FLOAT NOT NULL, 
	goodput FLOAT, 
	share_no_data FLOAT, 
	share_maintenance FLOAT, 
	share_hw_unavailable FLOAT, 
	share_idle_blocked FLOAT, 
	share_idle_no_demand FLOAT, 
	share_allocated_idle FLOAT, 
	share_allocated_unproductive FLOAT, 
	share_failure_loss FLOAT, 
	share_slowdown_data_io FLOAT, 
	share_slowdown_network FLOAT, 
	share_slowdown_checkpoint FLOAT, 
	share_slowdown_compute FLOAT, 
	share_productive FLOAT, 
	CONSTRAINT pk_cluster_goodput PRIMARY KEY (partition_start, region)
);

CREATE TABLE cluster_goodput_daily (
	date DATE NOT NULL, 
	region TEXT NOT NULL, 
	paid_gpu_hours FLOAT NOT NULL, 
	productive_gpu_hours FLOAT NOT NULL, 
	provisional_goodput FLOAT, 
	settled_goodput FLOAT, 
	failure_loss_gpu_hours FLOAT NOT NULL, 
	partitions BIGINT NOT NULL, 
	CONSTRAINT pk_cluster_goodput_daily PRIMARY KEY (date, region)
);

CREATE TABLE cluster_status (
	partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	goodput FLOAT, 
	goodput_expected FLOAT, 
	open_pages BIGINT NOT NULL, 
	open_tickets BIGINT NOT NULL, 
	worst_kpi TEXT, 
	worst_kpi_z FLOAT, 
	gap_sources BIGINT NOT NULL, 
	rejected_rows BIGINT NOT NULL, 
	markdown TEXT NOT NULL, 
	CONSTRAINT pk_cluster_status PRIMARY KEY (partition_start)
);

CREATE TABLE cost_capacity (
	date DATE NOT NULL, 
	region TEXT NOT NULL, 
	sku TEXT NOT NULL, 
	capacity_gpus BIGINT NOT NULL, 
	reserved_gpus BIGINT NOT NULL, 
	reserved_gpu_hour_usd FLOAT NOT NULL, 
	on_demand_gpu_hour_usd FLOAT NOT NULL, 
	on_demand_gpu_hours FLOAT NOT NULL, 
	CONSTRAINT pk_cost_capacity PRIMARY KEY (date, region, sku)
);

CREATE TABLE goodput_decomposition (
	partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	window_end TIMESTAMP WITH TIME ZONE NOT NULL, 
	rank BIGINT NOT NULL, 
	state TEXT NOT NULL, 
	cause_family TEXT NOT NULL, 
	share_of_drop FLOAT, 
	elements TEXT NOT NULL, 
	explanatory_power FLOAT NOT NULL, 
	surprise FLOAT NOT NULL, 
	actual_gpu_minutes FLOAT NOT NULL, 
	expected_gpu_minutes FLOAT NOT NULL, 
	evidence TEXT NOT NULL, 
	CONSTRAINT pk_goodput_decomposition PRIMARY KEY (partition_start, window_end, rank)
);

CREATE TABLE goodput_states (
	partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	region TEXT NOT NULL, 
	sku TEXT NOT NULL, 
	workload_class TEXT NOT NULL, 
	team TEXT NOT NULL, 
	state TEXT NOT NULL, 
	gpu_minutes FLOAT NOT NULL, 
	CONSTRAINT pk_goodput_states PRIMARY KEY (partition_start, region, sku, workload_class, team, state)
);

CREATE TABLE job_failures (
	partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	job_id TEXT NOT NULL, 
	failed_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	exit_state TEXT NOT NULL, 
	reason TEXT, 
	lost_from TIMESTAMP WITH TIME ZONE NOT NULL, 
	gpus FLOAT NOT NULL, 
	lost_gpu_minutes FLOAT NOT NULL, 
	lost_in_window FLOAT NOT NULL, 
	region TEXT NOT NULL, 
	sku TEXT NOT NULL, 
	team TEXT NOT NULL, 
	workload_class TEXT NOT NULL, 
	CONSTRAINT pk_job_failures PRIMARY KEY (partition_start, job_id)
);

CREATE TABLE kpi_values (
	partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	kpi TEXT NOT NULL, 
	region TEXT NOT NULL, 
	sku TEXT NOT NULL, 
	workload_class TEXT NOT NULL, 
	team TEXT NOT NULL, 
	value FLOAT, 
	numerator FLOAT, 
	denominator FLOAT, 
	unit TEXT NOT NULL, 
	status TEXT NOT NULL, 
	CONSTRAINT pk_kpi_values PRIMARY KEY (partition_start, kpi, region, sku, workload_class, team)
);

CREATE TABLE maintenance_windows (
	window_id TEXT NOT NULL, 
	start TIMESTAMP WITH TIME ZONE NOT NULL, 
	"end" TIMESTAMP WITH TIME ZONE NOT NULL, 
	region TEXT NOT NULL, 
	node_ids TEXT NOT NULL, 
	reason TEXT NOT NULL, 
	CONSTRAINT pk_maintenance_windows PRIMARY KEY (window_id)
);

CREATE TABLE rack_facility (
	partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	region TEXT NOT NULL, 
	rack_id TEXT NOT NULL, 
	minutes BIGINT NOT NULL, 
	energy_kwh FLOAT NOT NULL, 
	peak_power_kw FLOAT NOT NULL, 
	power_budget_kw FLOAT NOT NULL, 
	headroom_kw FLOAT NOT NULL, 
	headroom_share FLOAT NOT NULL, 
	inlet_max_c FLOAT, 
	psus_failed BIGINT, 
	gpus BIGINT NOT NULL, 
	gpus_throttled_power BIGINT, 
	gpus_throttled_thermal BIGINT, 
	CONSTRAINT pk_rack_facility PRIMARY KEY (partition_start, region, rack_id)
);

CREATE TABLE serving_slis (
	partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	region TEXT NOT NULL, 
	model_name TEXT NOT NULL, 
	model_version TEXT NOT NULL, 
	requests BIGINT NOT NULL, 
	errors BIGINT NOT NULL, 
	error_rate FLOAT, 
	p50_s FLOAT, 
	p95_s FLOAT, 
	p99_s FLOAT, 
	ttft_p99_s FLOAT, 
	CONSTRAINT pk_serving_slis PRIMARY KEY (partition_start, region, model_name, model_version)
);

CREATE TABLE slo_error_budgets (
	partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	slo TEXT NOT NULL, 
	region TEXT NOT NULL, 
	model_name TEXT NOT NULL, 
	objective FLOAT NOT NULL, 
	total_events FLOAT, 
	bad_events FLOAT, 
	interpolated BOOLEAN NOT NULL, 
	window_total_events FLOAT NOT NULL, 
	window_bad_events FLOAT NOT NULL, 
	error_budget_remaining FLOAT, 
	CONSTRAINT pk_slo_error_budgets PRIMARY KEY (partition_start, slo, region, model_name)
);

CREATE TABLE slo_version_events (
	partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	slo TEXT NOT NULL, 
	region TEXT NOT NULL, 
	model_name TEXT NOT NULL, 
	model_version TEXT NOT NULL, 
	objective FLOAT NOT NULL, 
	total_events FLOAT, 
	bad_events FLOAT, 
	interpolated BOOLEAN NOT NULL, 
	CONSTRAINT pk_slo_version_events PRIMARY KEY (partition_start, slo, region, model_name, model_version)
);

CREATE TABLE source_gaps (
	source TEXT NOT NULL, 
	partition_start TIMESTAMP WITH TIME ZONE NOT NULL, 
	partition_end TIMESTAMP WITH TIME ZONE NOT NULL, 
	missing_family TEXT NOT NULL, 
	origin TEXT NOT NULL, 
	reason TEXT NOT NULL, 
	CONSTRAINT pk_source_gaps PRIMARY KEY (partition_start, source)
);

CREATE TABLE source_rejects (
	source TEXT NOT NULL, 
	partition_start TIMESTAMP WITH TIME ZONE, 
	origin TEXT NOT NULL, 
	row_index BIGINT NOT NULL, 
	"column" TEXT, 
	"check" TEXT NOT NULL, 
	value TEXT, 
	reason TEXT NOT NULL, 
	row_json TEXT NOT NULL
);
CREATE INDEX ix_source_rejects_source_partition ON source_rejects (source, partition_start);

CREATE TABLE wasted_spend (
	date DATE NOT NULL, 
	region TEXT NOT NULL, 
	sku TEXT NOT NULL, 
	state TEXT NOT NULL, 
	cause_family TEXT NOT NULL, 
	team TEXT NOT NULL, 
	gpu_hours FLOAT NOT NULL, 
	blended_gpu_hour_usd FLOAT, 
	usd FLOAT, 
	CONSTRAINT pk_wasted_spend PRIMARY KEY (date, region, sku, state, team)
);

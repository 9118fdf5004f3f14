-- Fields some real collectors do not expose are nullable (null = the collector does not expose it):
-- gpu_telemetry.power_w, gpu_telemetry.temp_c (a utilisation-only GPU log such as Philly's),
-- network_telemetry.retransmits, network_telemetry.latency_us (switch-port counters and
-- node-exporter InfiniBand counters have neither). sql/schema.sql creates them nullable; a
-- PostgreSQL warehouse created before this change needs:
ALTER TABLE gpu_telemetry ALTER COLUMN power_w DROP NOT NULL;
ALTER TABLE gpu_telemetry ALTER COLUMN temp_c DROP NOT NULL;
ALTER TABLE network_telemetry ALTER COLUMN retransmits DROP NOT NULL;
ALTER TABLE network_telemetry ALTER COLUMN latency_us DROP NOT NULL;
-- SQLite cannot drop NOT NULL in place: recreate a local warehouse (rm var/warehouse.db) or copy
-- its tables into a new file created by the current schema.

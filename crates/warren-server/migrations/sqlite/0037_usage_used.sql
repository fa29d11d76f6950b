-- Usage (issue 44): what agents measured each workspace using, beside what it asked for —
-- CPU time in millicore-seconds (milliseconds), working-set memory in MiB-seconds — added
-- to the same hourly rows as each agent reports it (about once a minute).
ALTER TABLE usage_hours ADD COLUMN cpu_used_mcore_s BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_hours ADD COLUMN memory_used_mib_s BIGINT NOT NULL DEFAULT 0;

-- Proxy mounts backed by a connector (spec/mounts.md): `warren connect` on an existing
-- machine dials a relay as an agent would, with the token of an agent row made for that one
-- mount (`agent_id`). What it last reported — the ports it serves (`ports`, a JSON array)
-- and its conditions (`report`, JSON) — and when (`reported_at`, its heartbeat) give the
-- mount's status; a mount whose heartbeat is older than its deadline is `Unknown`.
ALTER TABLE mounts ADD COLUMN agent_id INTEGER REFERENCES agents(id) ON DELETE SET NULL;
ALTER TABLE mounts ADD COLUMN ports TEXT;
ALTER TABLE mounts ADD COLUMN report TEXT;
ALTER TABLE mounts ADD COLUMN reported_at INTEGER;
CREATE INDEX mounts_agent ON mounts(agent_id);

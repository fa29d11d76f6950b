-- What an agent row is for: `runtime` (it runs workspaces) or `connector` (it was made for
-- one connector mount, `warren connect`). Before, the name prefix `connector-` said so.
ALTER TABLE agents ADD COLUMN kind TEXT NOT NULL DEFAULT 'runtime';
UPDATE agents SET kind = 'connector'
    WHERE name LIKE 'connector-%' OR id IN (SELECT agent_id FROM mounts
        WHERE agent_id IS NOT NULL AND kind = 'proxy' AND url IS NULL);
-- During a rolling upgrade the previous release still makes connector rows, knowing nothing
-- of `kind`; its name prefix (reserved to connectors in every release) names them. Dropped
-- in the release after the next one, when no server without `kind` can remain.
CREATE FUNCTION agents_connector_kind() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.name LIKE 'connector-%' THEN
        NEW.kind := 'connector';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER agents_connector_kind BEFORE INSERT ON agents
    FOR EACH ROW EXECUTE FUNCTION agents_connector_kind();

-- The space a workspace's kept volumes and snapshots take on its agent, as the agent last
-- reported it (a stopped prebuild's, today): shown per prebuild and per project.
ALTER TABLE workspaces ADD COLUMN stored_bytes BIGINT;

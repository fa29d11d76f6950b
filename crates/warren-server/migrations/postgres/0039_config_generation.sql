-- Which rendering of a workspace's objects its configurations are (random, new at every
-- render; the Deployment's `warren.dev/config-generation` annotation). A full reconcile leaves
-- out the objects of a workspace whose agent reports this generation and which is settled in
-- its desired state. Rows rendered before have none, so their objects go out as before.
ALTER TABLE workspaces ADD COLUMN config_generation TEXT;

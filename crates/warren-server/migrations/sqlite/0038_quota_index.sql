-- Creating a workspace counts its agent's workspaces that are not desired Terminated, and
-- its owner's among them (the quotas). From this index alone: the rows carry the sealed
-- objects (tens of KiB each), and on an agent with 10,000 workspaces reading every row made
-- each create cost more than 100 ms on SQLite.
CREATE INDEX workspaces_quota ON workspaces(agent_id, desired_state, owner_id);

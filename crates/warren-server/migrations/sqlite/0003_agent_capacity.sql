-- The most one workspace can use on the agent's runtime (HostCapacity as JSON), as the
-- agent last reported it with a full reconcile; NULL until it does.
ALTER TABLE agents ADD COLUMN capacity TEXT;

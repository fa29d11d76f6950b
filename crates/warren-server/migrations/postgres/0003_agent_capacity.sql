-- What the agent last reported about its runtime: the most one workspace can use there
-- (HostCapacity as JSON; NULL until a full reconcile says), and why it cannot see the
-- runtime at all, since when (NULL while all is well).
ALTER TABLE agents ADD COLUMN capacity TEXT;
ALTER TABLE agents ADD COLUMN runtime_fault TEXT;
ALTER TABLE agents ADD COLUMN runtime_fault_since BIGINT;

-- Why an agent's runtime does not isolate workspaces as their NetworkPolicies ask (a container
-- engine where the agent cannot set firewall rules), as its last full reconcile said.
ALTER TABLE agents ADD COLUMN isolation_warning TEXT;
